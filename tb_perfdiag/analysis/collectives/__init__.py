"""Collectives of one file: each collective op instance of each device."""
