"""One real local Ray instance (2 CPUs) for the whole test session, shut down at its end."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_local():
    import ray

    if ray.is_initialized():  # pragma: no cover - a previous session left it connected
        ray.shutdown()
    # address="local": a new instance, never a cluster some other process started on this host.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
