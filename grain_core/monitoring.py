"""Grain's ``grain.monitoring`` module: in-process metrics with Grain's metric classes.

``Counter``, ``Metric`` (a gauge) and ``EventMetric`` (a distribution) keep their values in this
process, one value per combination of field values: ``Counter(name, metadata, fields=[("name",
str)])`` then ``c.Increment("a")``; ``c.Get("a")`` reads it back. Every metric registers under its
``name`` in the root returned by :func:`get_monitoring_root`, so code (or a test) can read what
grain_core and user code recorded. Nothing is exported over the network; :func:`setup_telemetry`
exists for Grain code that calls it and only marks telemetry as set up.

The ``record_*`` helpers record the same metrics Grain's pipelines record (bytes read by sources,
autotune decisions, the framework type).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Sequence
from typing import Any

__all__ = [
    "Bucketer",
    "Counter",
    "EventMetric",
    "Metadata",
    "Metric",
    "MonitoringRoot",
    "Units",
    "get_monitoring_root",
    "record_autotune_node_throughput",
    "record_autotune_optimization_latency",
    "record_autotune_parameter",
    "record_autotune_usl_coeff",
    "record_bytes_read_and_latency",
    "record_framework_type",
    "set_debug_server_ports",
    "setup_telemetry",
]


@enum.unique
class Units(enum.Enum):
    """Units a metric's metadata may name."""

    SECONDS = enum.auto()
    MILLISECONDS = enum.auto()
    MICROSECONDS = enum.auto()
    NANOSECONDS = enum.auto()
    BITS = enum.auto()
    BYTES = enum.auto()


class Metadata:
    """A metric's description and any further keyword attributes (``units=Units.BYTES``, ...)."""

    def __init__(self, description: str = "", **kwargs: Any):
        self.description = description
        for key, value in kwargs.items():
            setattr(self, key, value)
        self._kwargs = kwargs

    def __repr__(self) -> str:
        return f"Metadata(description={self.description!r})"


class Bucketer:
    """How a distribution metric buckets its values (kept for reporting; values are all kept)."""

    def __init__(self, *args: Any, bucketer_type: str | None = None, **kwargs: Any):
        self.args = args
        self.kwargs = kwargs
        self.type = bucketer_type

    @staticmethod
    def PowersOf(base: float) -> Bucketer:  # noqa: N802 - Grain's name
        return Bucketer(base, bucketer_type="PowersOf")


class MonitoringRoot:
    """Every metric created in this process, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, _MetricBase] = {}

    def _add(self, metric: _MetricBase) -> None:
        with self._lock:
            self._metrics[metric.name] = metric

    def get(self, name: str) -> _MetricBase | None:
        """The metric called ``name``, or None."""
        with self._lock:
            return self._metrics.get(name)

    def names(self) -> list[str]:
        """The names of all metrics, sorted."""
        with self._lock:
            return sorted(self._metrics)

    def snapshot(self) -> dict[str, dict[tuple, Any]]:
        """``{metric name: {field values: value}}`` for every metric."""
        with self._lock:
            metrics = list(self._metrics.values())
        return {m.name: m.values() for m in metrics}


_ROOT = MonitoringRoot()
_telemetry = {"set_up": False}


def get_monitoring_root() -> MonitoringRoot:
    """The registry of every metric in this process."""
    return _ROOT


def setup_telemetry() -> None:
    """Marks telemetry as set up (grain_core keeps metrics in process; nothing is exported)."""
    _telemetry["set_up"] = True


def _split(metadata: Any, args: tuple, kwargs: dict) -> tuple[Metadata | None, list]:
    md = kwargs.pop("metadata", None)
    fields = kwargs.pop("fields", None)
    rest = ([metadata] if metadata is not None else []) + list(args)
    for a in rest:
        if md is None and isinstance(a, Metadata):
            md = a
        elif fields is None and isinstance(a, (list, tuple)):
            fields = a
    return md, list(fields or [])


class _MetricBase:
    def __init__(self, name: str, metadata: Any, args: tuple, kwargs: dict):
        self.name = name
        self.metadata, self.fields = _split(metadata, args, dict(kwargs))
        self._lock = threading.Lock()
        self._values: dict[tuple, Any] = {}
        _ROOT._add(self)

    def _key(self, args: tuple, kwargs: dict) -> tuple:
        if kwargs:
            names = [f[0] for f in self.fields]
            unknown = set(kwargs) - set(names)
            if unknown:
                raise ValueError(
                    f"Metric {self.name} has no fields {sorted(unknown)}; fields: {names}."
                )
            args = tuple(args) + tuple(kwargs[n] for n in names[len(args) :] if n in kwargs)
        if len(args) != len(self.fields):
            raise ValueError(
                f"Metric {self.name} takes {len(self.fields)} field value(s) "
                f"{[f[0] for f in self.fields]}, got {len(args)}."
            )
        return tuple(args)

    def values(self) -> dict[tuple, Any]:
        """A copy of ``{field values: value}``."""
        with self._lock:
            return {k: (list(v) if isinstance(v, list) else v) for k, v in self._values.items()}

    def ClearAll(self) -> None:  # noqa: N802 - Grain's name
        with self._lock:
            self._values.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Counter(_MetricBase):
    """A monotonically increasing count per field values."""

    def __init__(self, name: str, metadata: Any = None, *args: Any, **kwargs: Any):
        super().__init__(name, metadata, args, kwargs)

    def Increment(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        self.IncrementBy(1, *args, **kwargs)

    def IncrementBy(self, value: float | int, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + value

    def Get(self, *args: Any, **kwargs: Any) -> float | int:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            return self._values.get(key, 0)


class Metric(_MetricBase):
    """A gauge: the last value set per field values."""

    def __init__(
        self, name: str, value_type: type = float, metadata: Any = None, *args: Any, **kwargs: Any
    ):
        self.value_type = value_type
        super().__init__(name, metadata, args, kwargs)

    def Set(self, value: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            self._values[key] = value

    def Get(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            return self._values.get(key, self.value_type() if callable(self.value_type) else None)


class EventMetric(_MetricBase):
    """A distribution: every recorded value per field values; ``Get`` returns their mean."""

    def __init__(self, name: str, metadata: Any = None, *args: Any, **kwargs: Any):
        self.bucketer = kwargs.pop("bucketer", None)
        super().__init__(name, metadata, args, kwargs)

    def Record(self, value: float | int, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            self._values.setdefault(key, []).append(value)

    def Get(self, *args: Any, **kwargs: Any) -> float:  # noqa: N802
        key = self._key(args, kwargs)
        with self._lock:
            vals = self._values.get(key, [])
            return sum(vals) / len(vals) if vals else 0.0


_bytes_read = Counter(
    "/grain/python/data_sources/bytes_read",
    Metadata("Bytes read by sources."),
    fields=[("source", str)],
)
_reads = Counter(
    "/grain/python/data_sources/reads",
    Metadata("Records read by sources."),
    fields=[("source", str)],
)
_read_latency = EventMetric(
    "/grain/python/data_sources/read_time_ns",
    Metadata("Read latency per read call (ns)."),
    fields=[("source", str)],
)
_framework = Counter(
    "/grain/framework_type",
    Metadata("The framework type used to build the Grain dataset."),
    fields=[("name", str)],
)
_debug_ports = Metric(
    "/grain/debug_server_ports", str, Metadata("Debug server ports, comma-separated.")
)
_node_throughput = Metric(
    "/grain/autotune/node_throughput",
    float,
    Metadata("Autotune node throughput."),
    fields=[("node", str)],
)
_parameters = Metric(
    "/grain/autotune/parameters",
    float,
    Metadata("Autotune parameter values."),
    fields=[("node", str), ("name", str)],
)
_usl = Metric(
    "/grain/autotune/usl_coefficients",
    float,
    Metadata("Autotune USL coefficients."),
    fields=[("node", str), ("name", str)],
)
_opt_latency = EventMetric(
    "/grain/autotune/optimization_latency_ms", Metadata("Autotune optimisation latency (ms).")
)


def record_bytes_read_and_latency(
    source: str, *, num_bytes: int, latency_ns: int, num_reads: int
) -> None:
    """Records ``num_reads`` reads of ``num_bytes`` bytes in total, taking ``latency_ns``, by ``source``."""
    _bytes_read.IncrementBy(num_bytes, source)
    _reads.IncrementBy(num_reads, source)
    _read_latency.Record(latency_ns, source)


def record_autotune_node_throughput(node_name: str, throughput: float) -> None:
    _node_throughput.Set(throughput, node_name)


def record_autotune_parameter(node_name: str, name: str, value: float) -> None:
    _parameters.Set(value, node_name, name)


def record_autotune_usl_coeff(node_name: str, name: str, value: float) -> None:
    _usl.Set(value, node_name, name)


def record_autotune_optimization_latency(latency_ms: float) -> None:
    _opt_latency.Record(latency_ms)


def record_framework_type(framework_type: str) -> None:
    _framework.Increment(framework_type)


def set_debug_server_ports(ports: Sequence[int]) -> None:
    """Records the debug server ports (main process first); an empty list records nothing."""
    if ports:
        _debug_ports.Set(",".join(str(p) for p in ports))
