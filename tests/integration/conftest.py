"""Integration tests: 4 fake CPU devices for the seed's ``device_put`` / ``NamedSharding`` example.

Set before anything initialises a JAX backend (the same defaults as ``tests/runtime/conftest.py``,
so the whole suite sees one consistent device count). Tests that need the 4 devices check
``jax.device_count()`` and rerun themselves in a subprocess when an earlier import beat us to it.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
