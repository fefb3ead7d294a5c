"""Test-only plugin whose hook module fails to import."""
