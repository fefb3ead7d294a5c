"""``RayRuntime``: where and how ``mp_prefetch`` worker shares run as Ray Core actors."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["RayRuntime"]


def _positive(name: str, value: Any, kind: type | tuple[type, ...] = int) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        raise ValueError(f"RayRuntime.{name} must be a positive number, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class RayRuntime:
    """Runs each ``mp_prefetch`` worker share in a Ray actor instead of a local process.

    Attributes:
      address: the Ray cluster to connect to when this process is not connected yet
        (``ray.init(address=...)``: ``"auto"``, ``"ray://host:10001"``, ``"host:6379"``; None:
        ``RAY_ADDRESS`` or a new local instance). When ``ray.is_initialized()`` already, the current
        connection is used whatever ``address`` says.
      init_kwargs: further ``ray.init`` arguments, used only when this runtime calls ``ray.init``
        (e.g. ``{"num_cpus": 2}`` for a local instance).
      num_cpus: CPUs each actor reserves (Ray's ``num_cpus``; fractions allowed). A pool of
        ``num_workers`` actors needs ``num_workers * num_cpus`` free CPUs.
      resources: custom resources each actor reserves, e.g. ``{"preprocessing": 1}`` to place the
        actors only on nodes started with ``ray start --resources '{"preprocessing": 8}'``.
      runtime_env: Ray runtime environment of the actors (``working_dir``, ``pip``, ``env_vars``).
      elements_per_call: most elements one actor call returns (small elements are grouped to
        amortise the ~1 ms cost of a call; the group grows 1, 2, 4, ... up to this).
      bytes_per_call: a call returns as soon as its numpy leaves reach this many bytes.
      seconds_per_call: a call returns once it has produced for this long (latency bound).
      start_timeout_s: how long to wait for the actors to be placed and to build their pipelines
        before raising (a cluster without the requested CPUs / resources never places them).

    Each actor has at most ``per_worker_buffer_size`` calls in flight, so at most
    ``per_worker_buffer_size * elements_per_call`` elements are produced ahead of the consumer per
    actor, plus the batch being consumed (``elements_per_call=1`` bounds it by elements exactly).
    """

    address: str | None = None
    init_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_cpus: float = 1.0
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    runtime_env: Mapping[str, Any] | None = None
    elements_per_call: int = 64
    bytes_per_call: int = 64 << 20
    seconds_per_call: float = 0.05
    start_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(f"RayRuntime.address must be a str or None, got {self.address!r}.")
        if not isinstance(self.init_kwargs, Mapping):
            raise TypeError(f"RayRuntime.init_kwargs must be a mapping, got {self.init_kwargs!r}.")
        if (
            isinstance(self.num_cpus, bool)
            or not isinstance(self.num_cpus, int | float)
            or not math.isfinite(self.num_cpus)
            or self.num_cpus < 0
        ):
            raise ValueError(f"RayRuntime.num_cpus must be a number >= 0, got {self.num_cpus!r}.")
        if not isinstance(self.resources, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for k, v in self.resources.items()
        ):
            raise ValueError(
                "RayRuntime.resources must map resource names to positive amounts, got "
                f"{self.resources!r}."
            )
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            raise TypeError(f"RayRuntime.runtime_env must be a mapping, got {self.runtime_env!r}.")
        _positive("elements_per_call", self.elements_per_call)
        _positive("bytes_per_call", self.bytes_per_call)
        _positive("seconds_per_call", self.seconds_per_call, (int, float))
        _positive("start_timeout_s", self.start_timeout_s, (int, float))

    def connect(self) -> None:
        """Connects this process to Ray (``ray.init``) unless it is connected already."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, **dict(self.init_kwargs))

    def actor_options(self, name: str, namespace: str) -> dict[str, Any]:
        """``ray.remote(...).options`` for one worker actor."""
        opts: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "name": name,
            "namespace": namespace,
            "max_restarts": 0,
            "max_concurrency": 1,
        }
        if self.resources:
            opts["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            opts["runtime_env"] = dict(self.runtime_env)
        return opts
