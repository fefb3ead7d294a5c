"""Test-only plugin (see plugin.py)."""
