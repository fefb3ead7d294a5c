"""Random pipelines for the checkpoint property tests: a JSON spec, a Hypothesis strategy drawing
specs, a builder turning a spec into a dataset, and a child-process entry point.

A spec is a JSON list of stages applied in order; the first is a source. Stages that combine
pipelines (``map_mix``, ``iter_mix``, ``interleave``) carry their other inputs as nested specs, so a
spec is plain JSON and a child process rebuilds the identical pipeline from it::

    python tests/checkpoint/ckpt_pipelines.py restore jobs.json out.json

Optional stages (thread prefetch, mp_prefetch, interleave, window shuffle, packing) are drawn only
when ``optional`` names them; the integration test passes those whose classes import.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

from grain_core import transforms as _tr

MAX_ELEMENTS = 120  # elements read per pipeline before and after the checkpoint, in total

# ---------------------------------------------------------------------------------------------
# Picklable transforms (mp_prefetch workers may need to pickle them).


@dataclasses.dataclass(frozen=True)
class Affine:
    k: int

    def __call__(self, x):
        return x * 3 + self.k


@dataclasses.dataclass(frozen=True)
class KeepIf:
    m: int

    def __call__(self, x):
        return int(np.sum(x)) % self.m != 0


@dataclasses.dataclass(frozen=True)
class RandomAdd:
    def __call__(self, x, rng):
        return x + int(rng.integers(0, 1000))


@dataclasses.dataclass(frozen=True)
class FromDevice:
    """Back from ``device_put``'s ``jax.Array`` leaves to numpy (for comparing and JSON)."""

    def __call__(self, x):
        import jax

        return jax.tree.map(np.asarray, x)


def _device_put(ds, cpu_buffer: int, device_buffer: int):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from grain_core.experimental import device_put

    return device_put(
        ds, jax.devices()[0], cpu_buffer_size=cpu_buffer, device_buffer_size=device_buffer
    ).map(FromDevice())


@dataclasses.dataclass(frozen=True)
class AddIndex:
    def __call__(self, i, x):
        return x + 7 * i


class FanOut(_tr.FlatMap):
    """Each element becomes 0, 1 or 2 copies (an element-dependent 1:N map)."""

    max_fan_out = 2

    def flat_map(self, x):
        n = int(np.sum(x)) % 3
        return [x + j for j in range(n)]


@dataclasses.dataclass(frozen=True)
class ToTokens:
    """An int element becomes ``{"x": 1-D array}`` of length 1..max_len (for packing)."""

    max_len: int

    def __call__(self, x):
        n = int(np.sum(x)) % self.max_len + 1
        return {"x": np.arange(n, dtype=np.int64) + int(np.sum(x))}


@dataclasses.dataclass(frozen=True)
class SubPipeline:
    """``i`` -> the ``IterDataset`` of ``spec`` with every element offset by ``1000 * i``."""

    spec_json: str

    def __call__(self, i):
        return build(json.loads(self.spec_json)).map(Affine(1000 * int(i)))


# ---------------------------------------------------------------------------------------------
# Building.


def _optional(name: str) -> Any:
    import grain_core as grain

    return {
        "thread_prefetch": lambda: grain.experimental.ThreadPrefetchIterDataset,
        "interleave": lambda: grain.experimental.InterleaveIterDataset,
        "window_shuffle_map": lambda: grain.experimental.WindowShuffleMapDataset,
        "window_shuffle_iter": lambda: grain.experimental.WindowShuffleIterDataset,
        "pack": lambda: grain.experimental.FirstFitPackIterDataset,
    }[name]()


def available_optional() -> tuple[dict[str, Any], dict[str, str]]:
    """(names of optional stages that import -> class, names that do not -> why)."""
    import grain_core as grain

    ok, missing = {}, {}
    for name in (
        "thread_prefetch",
        "interleave",
        "window_shuffle_map",
        "window_shuffle_iter",
        "pack",
    ):
        try:
            ok[name] = _optional(name)
        except (ImportError, AttributeError) as e:
            missing[name] = f"{type(e).__name__}: {e}"
    try:
        import jax  # noqa: F401

        ok["device_put"] = _device_put
    except ImportError as e:
        missing["device_put"] = f"{type(e).__name__}: {e}"
    try:
        from grain_core.runtime import multiprocess  # noqa: F401

        ok["mp_prefetch"] = grain.IterDataset.mp_prefetch
    except ImportError as e:
        missing["mp_prefetch"] = f"{type(e).__name__}: {e}"
    return ok, missing


def build(spec: list[dict[str, Any]]) -> Any:
    """The dataset (``MapDataset`` or ``IterDataset``) a spec describes."""
    import grain_core as grain
    from grain_core import experimental as ex

    ds: Any = None
    for st in spec:
        op = st["op"]
        if op == "range":
            ds = grain.MapDataset.range(st["n"])
        elif op == "source":
            ds = grain.MapDataset.source(list(range(100, 100 + st["n"])))
        elif op == "shuffle":
            ds = ds.shuffle(seed=st["seed"])
        elif op in ("map", "iter_map"):
            ds = ds.map(Affine(st["k"]))
        elif op in ("random_map", "iter_random_map"):
            ds = ds.random_map(RandomAdd(), seed=st["seed"])
        elif op in ("filter", "iter_filter"):
            ds = ds.filter(KeepIf(st["m"]))
        elif op in ("batch", "iter_batch"):
            ds = ds.batch(st["size"], drop_remainder=st["drop"])
        elif op == "map_with_index":
            ds = ds.map_with_index(AddIndex())
        elif op == "repeat":
            ds = ds.repeat(st["epochs"])
        elif op == "slice":
            ds = ds.slice(slice(st["start"], None, st["step"]))
        elif op == "map_mix":
            other = build(st["other"])
            if len(ds) and len(other):  # Grain (and grain_core) refuse to mix an empty dataset
                ds = grain.MapDataset.mix([ds, other], weights=st["weights"])
        elif op == "to_iter":
            ds = ds.to_iter_dataset(
                grain.ReadOptions(num_threads=st["threads"], prefetch_buffer_size=st["buffer"])
            )
        elif op == "iter_mix":
            ds = grain.IterDataset.mix([ds, build(st["other"])], weights=st["weights"])
        elif op == "flat_map":
            ds = ex.FlatMapIterDataset(ds, FanOut())
        elif op == "rebatch":
            ds = ex.RebatchIterDataset(ds, st["size"], drop_remainder=st["drop"])
        elif op == "limit":
            ds = ex.LimitIterDataset(ds, st["count"])
        elif op == "thread_prefetch":
            ds = _optional("thread_prefetch")(ds, prefetch_buffer_size=st["buffer"])
        elif op == "mp_prefetch":
            ds = ds.mp_prefetch(
                grain.MultiprocessingOptions(
                    num_workers=st["workers"], per_worker_buffer_size=st.get("buffer", 1)
                )
            )
        elif op == "device_put":
            ds = _device_put(ds, st["cpu"], st["dev"])
        elif op == "interleave":
            sub = json.dumps(st["sub"])
            ds = _optional("interleave")(
                grain.MapDataset.range(st["n"]).map(SubPipeline(sub)),
                cycle_length=st["cycle"],
                iter_buffer_size=st.get("buffer", 0),
            )
        elif op == "window_shuffle_map":
            ds = _optional("window_shuffle_map")(ds, window_size=st["window"], seed=st["seed"])
        elif op == "window_shuffle_iter":
            ds = _optional("window_shuffle_iter")(ds, window_size=st["window"], seed=st["seed"])
        elif op == "read_chunks":
            pass  # how the outermost iterator is read (see read), not a stage
        elif op == "pack":
            ds = _optional("pack")(
                ds.map(ToTokens(st["length"])),
                length_struct={"x": st["length"]},
                num_packing_bins=st["bins"],
            )
        else:  # pragma: no cover
            raise ValueError(f"unknown stage {op!r}")
    return ds


def iterate(spec: list[dict[str, Any]]) -> Any:
    ds = build(spec)
    import grain_core as grain

    if isinstance(ds, grain.MapDataset):
        ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0))
    return iter(ds)


class _Reader:
    """Reads the outermost iterator of a spec: ``next()``, or ``next_chunk(k)`` with ``k`` cycling
    through the sizes of a final ``read_chunks`` op (never past ``limit`` elements in all)."""

    def __init__(self, spec: list[dict[str, Any]], it: Any):
        last = spec[-1] if spec else {}
        self._sizes = last.get("sizes") if last.get("op") == "read_chunks" else None
        self._it = it
        self._calls = 0
        self._buf: list[Any] = []

    def take(self, limit: int) -> list[Any]:
        """Up to ``limit`` more elements (fewer only at the end)."""
        out: list[Any] = []
        while len(out) < limit:
            try:
                if self._sizes is None:
                    out.append(next(self._it))
                    continue
                k = self._sizes[self._calls % len(self._sizes)]
                self._calls += 1
                chunk = self._it.next_chunk(min(k, limit - len(out)))
            except StopIteration:
                break
            assert 1 <= len(chunk) <= min(k, limit - len(out)), (k, len(chunk))
            out += chunk
        return out


def shape(spec: Iterable[dict[str, Any]]) -> tuple[Any, ...]:
    """The pipeline's shape: its stage names, nested for combining stages."""
    out: list[Any] = []
    for st in spec:
        if "other" in st:
            out.append((st["op"], shape(st["other"])))
        elif "sub" in st:
            out.append((st["op"], shape(st["sub"])))
        else:
            out.append(st["op"])
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Comparing elements across processes: a JSON form that keeps dtype and shape.


def to_json(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return {"nd": x.tolist(), "dtype": str(x.dtype), "shape": list(x.shape)}
    if isinstance(x, np.generic):
        return {"np": x.item(), "dtype": str(x.dtype)}
    if isinstance(x, dict):
        return {"dict": {k: to_json(v) for k, v in sorted(x.items())}}
    if isinstance(x, (list, tuple)):
        return {type(x).__name__: [to_json(v) for v in x]}
    return x


# ---------------------------------------------------------------------------------------------
# Hypothesis strategies.


def strategies(optional: Iterable[str] = ()) -> Any:
    """Returns a strategy drawing specs; ``optional`` names the optional stages allowed."""
    from hypothesis import strategies as st

    optional = frozenset(optional)

    @st.composite
    def map_chain(draw, depth: int, allow_batch: bool = True):
        src = draw(st.sampled_from(["range", "source"]))
        spec: list[dict[str, Any]] = [{"op": src, "n": draw(st.integers(0, 40))}]
        batched = filtered = False
        for _ in range(draw(st.integers(0, 5))):
            choices = [
                "shuffle",
                "map",
                "random_map",
                "map_with_index",
                "repeat",
                "slice",
                "filter",
            ]
            if allow_batch and not filtered and not batched:
                choices.append("batch")
            if depth < 1 and not batched:
                choices.append("map_mix")
            if "window_shuffle_map" in optional:
                choices.append("window_shuffle_map")
            op = draw(st.sampled_from(choices))
            if op in ("shuffle", "random_map", "window_shuffle_map"):
                s = {"op": op, "seed": draw(st.integers(0, 2**31 - 1))}
                if op == "window_shuffle_map":
                    s["window"] = draw(st.integers(1, 8))
            elif op == "map":
                s = {"op": op, "k": draw(st.integers(-5, 5))}
            elif op == "filter":
                s, filtered = {"op": op, "m": draw(st.integers(2, 5))}, True
            elif op == "batch":
                s, batched = {"op": op, "size": draw(st.integers(1, 4)), "drop": True}, True
            elif op == "repeat":
                s = {"op": op, "epochs": draw(st.integers(1, 3))}
            elif op == "slice":
                s = {"op": op, "start": draw(st.integers(0, 2)), "step": draw(st.integers(1, 3))}
            elif op == "map_mix":
                other = draw(map_chain(depth + 1, allow_batch=False))[0]
                w = draw(st.integers(1, 4))
                s = {"op": op, "other": other, "weights": [w, 5 - w]}
            else:
                s = {"op": op}
            spec.append(s)
        return spec, batched

    @st.composite
    def iter_chain(draw, depth: int):
        if "interleave" in optional and depth < 1 and draw(st.booleans()):
            sub = draw(iter_chain(depth + 1))[0]
            spec = [
                {
                    "op": "interleave",
                    "n": draw(st.integers(1, 4)),
                    "cycle": draw(st.integers(1, 3)),
                    "buffer": draw(st.sampled_from([0, 0, 2])),  # reader threads, read-ahead 2
                    "sub": sub,
                }
            ]
            batched = _batched(sub)
        else:
            spec, batched = draw(map_chain(depth))
            spec.append(
                {
                    "op": "to_iter",
                    "threads": draw(st.integers(0, 2)),
                    "buffer": draw(st.integers(0, 8)),
                }
            )
        mp_done = False
        on_device = False  # device_put drawn: its jax device does not travel to mp workers
        packed = False
        for _ in range(draw(st.integers(0, 5 if depth == 0 else 2))):
            choices = ["iter_map", "iter_random_map", "iter_filter", "flat_map", "limit"]
            if not batched:
                choices.append("iter_batch")
            else:
                choices.append("rebatch")
            if depth < 1 and not batched:
                choices.append("iter_mix")
            if "thread_prefetch" in optional:
                choices.append("thread_prefetch")
            if "mp_prefetch" in optional and depth == 0 and not mp_done and not on_device:
                choices.append("mp_prefetch")
            if "window_shuffle_iter" in optional:
                choices.append("window_shuffle_iter")
            if "device_put" in optional and depth == 0:
                choices.append("device_put")
            if "pack" in optional and depth == 0 and not batched:
                choices.append("pack")
            op = draw(st.sampled_from(choices))
            if op == "iter_map":
                s = {"op": op, "k": draw(st.integers(-5, 5))}
            elif op == "iter_random_map":
                s = {"op": op, "seed": draw(st.integers(0, 2**31 - 1))}
            elif op == "iter_filter":
                s = {"op": op, "m": draw(st.integers(2, 5))}
            elif op in ("iter_batch", "rebatch"):
                s, batched = {"op": op, "size": draw(st.integers(1, 4)), "drop": True}, True
            elif op == "limit":
                s = {"op": op, "count": draw(st.integers(1, 60))}
            elif op == "iter_mix":
                other = draw(iter_chain(depth + 1))[0]
                if _batched(other):
                    continue
                w = draw(st.integers(1, 4))
                s = {"op": op, "other": other, "weights": [w, 5 - w]}
            elif op == "thread_prefetch":
                s = {"op": op, "buffer": draw(st.integers(0, 4))}
            elif op == "device_put":
                s = {
                    "op": op,
                    "cpu": draw(st.sampled_from([0, 1, 3])),
                    "dev": draw(st.sampled_from([0, 1, 2])),
                }
                on_device = True
            elif op == "mp_prefetch":
                s = {
                    "op": op,
                    "workers": draw(st.integers(0, 2)),
                    "buffer": draw(st.sampled_from([1, 2, 5, 64])),
                }
                mp_done = True
            elif op == "window_shuffle_iter":
                s = {
                    "op": op,
                    "window": draw(st.integers(1, 8)),
                    "seed": draw(st.integers(0, 2**31 - 1)),
                }
            elif op == "pack":
                s, packed = (
                    {"op": op, "length": draw(st.integers(2, 8)), "bins": draw(st.integers(1, 3))},
                    True,
                )
            else:
                s = {"op": op}
            spec.append(s)
            if packed:
                break  # packed elements are dicts: nothing elementwise follows.
        if batched and spec[-1]["op"] in ("iter_batch", "rebatch") and draw(st.booleans()):
            spec[-1]["drop"] = False  # a partial last batch, only where nothing batches it again.
        if depth == 0 and draw(st.booleans()):
            # Read the outermost iterator with next_chunk (sizes cycling through this list).
            spec.append(
                {
                    "op": "read_chunks",
                    "sizes": draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)),
                }
            )
        return spec, batched

    return iter_chain(0).map(lambda t: t[0])


def _batched(spec: list[dict[str, Any]]) -> bool:
    return any(s["op"] in ("batch", "iter_batch", "rebatch", "pack") for s in spec) or any(
        _batched(s["sub"]) for s in spec if "sub" in s
    )


def assert_restores_in_child(specs: list[tuple[Any, float]], timeout: float) -> None:
    """Checkpoints each ``(spec, fraction)`` pipeline here, restores them all in one child process
    that rebuilds each from its JSON spec, and asserts every remainder matches."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        jobs, expected = [], []
        for i, (spec, fraction) in enumerate(specs):
            d = os.path.join(root, str(i))
            _step, rest, head = run_and_checkpoint(spec, fraction, d)
            exhausted = len(head) < MAX_ELEMENTS
            jobs.append({"spec": spec, "dir": d, "count": len(rest) + (1 if exhausted else 0)})
            expected.append([to_json(x) for x in rest])
        with open(os.path.join(root, "jobs.json"), "w") as f:
            json.dump(jobs, f)
        out = os.path.join(root, "out.json")
        proc = subprocess.run(
            [sys.executable, __file__, "restore", os.path.join(root, "jobs.json"), out],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out) as f:
            got = json.load(f)
        for job, exp, g in zip(jobs, expected, got):
            assert g == exp, f"child restore differs for {json.dumps(job['spec'])}"


# ---------------------------------------------------------------------------------------------
# Profiles.


def hypothesis_settings(**overrides: Any) -> Any:
    """Settings from the profile ``$GRAIN_CORE_HYPOTHESIS_PROFILE`` (``ci`` by default, or
    ``nightly``), without changing the global Hypothesis profile other tests use."""
    from hypothesis import HealthCheck, settings

    name = os.environ.get("GRAIN_CORE_HYPOTHESIS_PROFILE", "ci")
    base = {
        "ci": dict(max_examples=100),
        "nightly": dict(max_examples=400),
        "dev": dict(max_examples=10),
    }
    if name not in base:
        raise ValueError(f"GRAIN_CORE_HYPOTHESIS_PROFILE={name!r}; use one of {sorted(base)}.")
    kw = dict(
        base[name],
        deadline=None,
        derandomize=name == "ci",
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )
    kw.update(overrides.get(name, {}) if isinstance(overrides.get(name), dict) else {})
    kw.update({k: v for k, v in overrides.items() if k not in base})
    return settings(**kw)


# ---------------------------------------------------------------------------------------------
# The check itself, and the child-process side.


def run_and_checkpoint(spec: list[dict[str, Any]], step_fraction: float, directory: str):
    """Reads the pipeline, saves its state at a step, reads on. Returns (step, expected rest).

    The checkpoint goes through ``DatasetIterator.save`` (the real JSON files); elements read after
    ``save()`` is called but before it is awaited must not leak into the saved state.
    """
    it = iterate(spec)
    try:
        head = _Reader(spec, it).take(MAX_ELEMENTS)
        step = int(round(step_fraction * len(head)))
        it.close()
        it = iterate(spec)
        reader = _Reader(spec, it)
        assert len(reader.take(step)) == step
        pending = it.save(directory)  # state captured here
        rest = reader.take(len(head) - step)
        asyncio.run(pending)  # written after the iterator moved on
        return step, rest, head
    finally:
        it.close()


def restore_rest(spec: list[dict[str, Any]], directory: str, count: int) -> list[Any]:
    """A fresh iterator of ``spec`` restored from ``directory``: its next ``count`` elements."""
    it = iterate(spec)
    try:
        asyncio.run(it.load(directory))
        # Exhaustion must match too: one more element only if the original had one.
        return _Reader(spec, it).take(count)
    finally:
        it.close()


def _child(jobs_path: str, out_path: str) -> None:
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = []
    for job in jobs:
        got = restore_rest(job["spec"], job["dir"], job["count"])
        results.append([to_json(x) for x in got])
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "restore":
        sys.exit("usage: ckpt_pipelines.py restore JOBS.json OUT.json")
    _child(sys.argv[2], sys.argv[3])
