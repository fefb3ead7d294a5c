"""One real local Ray instance (2 CPUs) for the whole test session, shut down at its end."""

from __future__ import annotations

import pytest

#: Ray starts its worker processes at nice 15 (``worker_niceness``): on a host whose other
#: processes keep every core busy (a CPU burner, a trainer), the actors then get a few percent of
#: a core and every test waits on them. The test instance runs its workers at nice 0, as a worker
#: process of ``mp_prefetch`` does (docs/ray.md, "CPU priority").
SYSTEM_CONFIG = {"worker_niceness": 0}


def init_local_ray(attempts: int = 3) -> None:
    """``ray.init`` of a new local instance. Ray gives its raylet a fixed 30 s to register, which an
    overloaded host can miss; that start-up failure (only that one) is retried."""
    import ray

    for attempt in range(attempts):
        try:
            # address="local": a new instance, never a cluster another process started here.
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                     _system_config=SYSTEM_CONFIG)
            return
        except Exception as e:
            ray.shutdown()
            if "timed out during startup" not in str(e) or attempt == attempts - 1:
                raise


@pytest.fixture(scope="session")
def ray_local():
    import ray

    if ray.is_initialized():  # pragma: no cover - a previous session left it connected
        ray.shutdown()
    init_local_ray()
    try:
        yield ray
    finally:
        ray.shutdown()
