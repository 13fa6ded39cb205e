"""The version, in a module of its own at the bottom of the import graph (setup.py
reads it too)."""
__version__ = "0.1.0"
