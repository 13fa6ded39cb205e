"""Findings: one detector per kind, registered in one list; the one table of fixes."""
