"""Shared fixtures for the kernel tests."""

from __future__ import annotations

import pytest

from grain_core.plugins import registry


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Runs a test against a fresh discovery and restores the registry afterwards."""
    reg = registry.get_registry()
    saved = list(reg._explicit)
    reg.reload()
    yield reg
    reg._explicit = saved
    reg.reload()
