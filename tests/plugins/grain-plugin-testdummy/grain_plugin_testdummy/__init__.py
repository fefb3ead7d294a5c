"""Test-only plugin: a source, a transformation and a factory registered through each hook."""
