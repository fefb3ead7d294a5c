"""``HuggingFaceIterDataset``: a streaming ``datasets.IterableDataset`` as a resumable IterDataset.

The dataset is read shard by shard (``dataset.shard(num_shards, s)`` gives shard ``s`` alone), and
a reader (one JAX process's share, one ``mp_prefetch`` worker's share) reads the shards
``r, r + R, r + 2R, ...`` of the ``R`` readers. Inside a shard, the position is the dataset's own
``state_dict()``. The state records the progress of every shard the reader owns, so states of
several readers can be re-split for another reader count (:func:`resplit_states`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import grain_core as grain
from grain_core import author
from grain_core.author import SourceIterator, StateField, claim_worker_share

__all__ = ["HuggingFaceIterDataset", "NotResumableError", "resplit_states"]

KIND = "HuggingFaceIterDataset"


_START: dict[str, Any] = {"state": None, "skip": 0}  # a shard not started


def _entry_ok(entry: Any) -> bool:
    """Whether ``entry`` is a partial-shard entry ``{"state": dict | None, "skip": int >= 0}``."""
    if not isinstance(entry, Mapping) or set(entry) != {"state", "skip"}:
        return False
    skip = entry["skip"]
    return (entry["state"] is None or isinstance(entry["state"], Mapping)) and (
        isinstance(skip, int) and not isinstance(skip, bool) and skip >= 0
    )


class NotResumableError(author.StateMismatchError):
    """The dataset cannot continue exactly from a state (e.g. it has a shuffle buffer)."""


def _chain(dataset: Any) -> list[Any]:
    """The dataset's examples iterables, outermost first (``datasets`` internals, read only)."""
    out, node, seen = [], getattr(dataset, "_ex_iterable", None), set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        out.append(node)
        nxt = getattr(node, "ex_iterable", None)
        if nxt is None:
            subs = getattr(node, "ex_iterables", None)
            if subs:
                for sub in subs:
                    out.extend(_chain_of(sub, seen))
            break
        node = nxt
    return out


def _chain_of(node: Any, seen: set) -> list[Any]:
    out = []
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        out.append(node)
        node = getattr(node, "ex_iterable", None)
    return out


def _describe(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of a shard argument that is the same in every process."""
    if depth > 3:
        return type(value).__name__
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return os.path.basename(value.rstrip("/")) if os.sep in value else value
    if isinstance(value, (list, tuple)):
        return [_describe(v, depth + 1) for v in value[:64]] + ([len(value)] if len(value) > 64 else [])
    if isinstance(value, Mapping):
        return {str(k): _describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    fingerprint = getattr(value, "_fingerprint", None)  # a datasets.Dataset (to_iterable_dataset)
    if isinstance(fingerprint, str):
        return fingerprint
    func = getattr(value, "func", value)  # functools.partial (datasets wraps generators in them)
    if callable(func) and hasattr(func, "__qualname__"):
        inner = getattr(value, "keywords", None)
        name = f"{getattr(func, '__module__', '')}.{func.__qualname__}"
        return [name, _describe(inner, depth + 1)] if inner else name
    return type(value).__name__


def _source(node: Any) -> Any:
    """What generates a base examples iterable: its builder's generator function (from_generator)
    and config name; ``None`` for other nodes."""
    fn = getattr(node, "generate_examples_fn", None) or getattr(node, "generate_tables_fn", None)
    if fn is None:
        return None
    config = getattr(getattr(fn, "__self__", None), "config", None)
    return [
        getattr(fn, "__qualname__", type(fn).__name__),
        _describe(getattr(config, "generator", None)),
        _describe(getattr(config, "name", None)),
    ]


def _not_resumable(chain: list[Any]) -> str | None:
    for node in chain:
        name = type(node).__name__
        if name == "BufferShuffledExamplesIterable":
            return (
                "it has a shuffle buffer (IterableDataset.shuffle(buffer_size=...)), whose buffered "
                "examples datasets' state_dict() does not keep, so a restore would lose them. "
                "Shuffle the shard order only (datasets.IterableDataset.shuffle is both), shuffle "
                "before streaming (Dataset.shuffle(...).to_iterable_dataset()), or shuffle after "
                "this stage (grain_core.experimental.WindowShuffleIterDataset), which checkpoints"
            )
    return None


class HuggingFaceIterDataset(grain.IterDataset):
    """The examples of a streaming Hugging Face ``datasets.IterableDataset``, resumable exactly.

    Args:
      dataset: the ``IterableDataset`` (``load_dataset(..., streaming=True)``,
        ``Dataset.to_iterable_dataset(num_shards=...)``, ``IterableDataset.from_generator``, with
        ``map`` / ``filter`` / ``with_format`` / ... applied).
      shard_options: which JAX process's share to read (``grain_core.sharding.ShardByJaxProcess()``
        or ``ShardOptions(i, n)``); ``None`` reads everything.

    Elements are the dataset's examples as it yields them (its format: plain Python by default,
    ``dataset.with_format("numpy")`` for numpy). Order: the shards of this reader one after the
    other, each in the dataset's order; with one reader, exactly the dataset's own order.

    Splitting: the dataset is split **by its shards** (``dataset.num_shards``: files, or
    ``to_iterable_dataset(num_shards=...)``): process ``p`` of ``n`` and ``mp_prefetch`` worker
    ``w`` of ``K`` together are reader ``r = p + n * w`` of ``R = n * K`` and read shards ``r, r + R,
    ...``. A reader without a shard (fewer shards than readers) yields nothing; ``drop_remainder``
    is not applied (shards differ in size anyway).

    State: ``{dataset, num_shards, reader, readers, done, partial}`` — the shards this reader has
    finished, and for each shard it has started ``{"state": the dataset's own state_dict() there,
    "skip": 0}`` (after an error or Ctrl-C inside the dataset, the state the shard was opened at and
    the examples returned since, replayed on restore). A state
    of another dataset (other data files, features, shard count, pipeline of ``map`` / ``filter``)
    is refused naming the dataset; a state of another reader split is refused pointing to
    :func:`grain_plugin_hf.resplit_states`, which re-splits states for other process or worker
    counts. A dataset whose position datasets cannot restore exactly (a shuffle buffer) still
    iterates and gives states, but restoring one raises :class:`NotResumableError` saying why.

    Raises:
      TypeError: not a ``datasets.IterableDataset`` (a map-style ``Dataset`` says what to use).
    """

    def __init__(self, dataset: Any, *, shard_options: grain.sharding.ShardOptions | None = None):
        super().__init__()
        import datasets

        if isinstance(dataset, datasets.Dataset):
            raise TypeError(
                "HuggingFaceIterDataset takes a streaming datasets.IterableDataset, got a map-style "
                "datasets.Dataset. Use grain_core.sources.HuggingFaceDataSource(dataset) with "
                "MapDataset.source (random access, shuffling, exact restore), or "
                "dataset.to_iterable_dataset(num_shards=...)."
            )
        if not isinstance(dataset, datasets.IterableDataset):
            raise TypeError(
                f"HuggingFaceIterDataset takes a datasets.IterableDataset, got {type(dataset).__name__}."
            )
        if shard_options is not None and not isinstance(shard_options, grain.sharding.ShardOptions):
            raise TypeError(
                "HuggingFaceIterDataset shard_options must be a grain_core.sharding.ShardOptions "
                f"(e.g. ShardByJaxProcess()) or None, got {type(shard_options).__name__}."
            )
        if not hasattr(dataset, "state_dict") or not hasattr(dataset, "load_state_dict"):
            raise TypeError(
                "HuggingFaceIterDataset needs datasets >= 2.18 (IterableDataset.state_dict); "
                f"installed: {datasets.__version__}. Upgrade: pip install -U datasets."
            )
        if getattr(dataset, "_distributed", None) is not None:
            raise ValueError(
                "HuggingFaceIterDataset: this dataset was already split with "
                "datasets.distributed.split_dataset_by_node; pass the whole dataset and let "
                "shard_options=grain_core.sharding.ShardByJaxProcess() split it by shards (so "
                "checkpoints can move between process counts)."
            )
        self._dataset = dataset
        self._num_shards = int(dataset.num_shards)
        self._process = (0, 1) if shard_options is None else (
            shard_options.shard_index,
            shard_options.shard_count,
        )
        chain = _chain(dataset)
        self._not_resumable = _not_resumable(chain)
        self._identity = author.fingerprint(
            [type(n).__name__ for n in chain],
            [_describe(getattr(n, "kwargs", None)) for n in chain],
            [_source(n) for n in chain],
            str(dataset.features),
            self._num_shards,
            str(getattr(dataset, "split", None)),
        )

    @property
    def dataset(self) -> Any:
        """The wrapped ``datasets.IterableDataset``."""
        return self._dataset

    @property
    def num_shards(self) -> int:
        """The dataset's shards, the units split between readers."""
        return self._num_shards

    @property
    def process(self) -> tuple[int, int]:
        """``(shard_index, shard_count)`` of the JAX process split (``(0, 1)`` without one)."""
        return self._process

    @property
    def identity(self) -> str:
        """The fingerprint states carry to refuse another dataset."""
        return self._identity

    @property
    def _element_spec(self) -> Any:
        """``{column: ShapeDtypeStruct}`` of an example, from the dataset's features (no example
        read; see :mod:`grain_plugin_hf.specs`): plain Python examples (no format) or
        ``with_format("numpy")``; ``NotImplementedError`` for other formats, unknown features
        and columns without a spec."""
        from grain_plugin_hf.specs import features_spec

        formatting = getattr(self._dataset, "_formatting", None)
        fmt = getattr(formatting, "format_type", None) if formatting is not None else None
        return features_spec(self._dataset.features, None, "python" if fmt is None else fmt)

    def __iter__(self) -> grain.DatasetIterator:
        share = claim_worker_share()  # in an mp_prefetch worker: this worker's shards only
        w, k = (0, 1) if share is None else share
        p, n = self._process
        return HuggingFaceIterator(self, reader=p + n * w, readers=n * k)

    def __str__(self) -> str:
        p, n = self._process
        return (
            f"HuggingFaceIterDataset(num_shards={self._num_shards}, process={p} of {n}, "
            f"dataset={self._identity})"
        )

    __repr__ = __str__


class HuggingFaceIterator(SourceIterator):
    """Reads the shards ``reader, reader + readers, ...`` of a :class:`HuggingFaceIterDataset`."""

    kind = KIND

    def __init__(self, ds: HuggingFaceIterDataset, reader: int, readers: int):
        super().__init__()
        self._ds = ds
        self._reader, self._readers = reader, readers
        self._owned = list(range(reader, ds.num_shards, readers))
        self._done: set[int] = set()
        # shard -> {"state": datasets state_dict or None, "skip": examples returned after it}
        self._partial: dict[int, dict[str, Any]] = {}
        self._current: int | None = None  # the shard being read
        self._shard_ds: Any = None
        self._gen: Any = None
        self._base: dict[str, Any] = _START  # the partial entry the open shard started from
        self._count = 0  # examples returned since the shard was opened

    @property
    def owned_shards(self) -> list[int]:
        """The dataset shards this iterator reads, in order."""
        return list(self._owned)

    def _open(self, shard: int) -> None:
        shard_ds = self._ds.dataset.shard(num_shards=self._ds.num_shards, index=shard, contiguous=True)
        base = self._partial.get(shard, _START)
        if base["state"] is not None:
            shard_ds.load_state_dict(base["state"])
        gen = iter(shard_ds)
        try:
            for _ in range(base["skip"]):  # returned before an error inside the dataset
                next(gen)
        except StopIteration:
            pass  # the generator stays finished: the next call marks the shard done
        # Commit with assignments only (an interrupt above leaves everything as it was).
        self._shard_ds, self._gen, self._current = shard_ds, gen, shard
        self._base, self._count = base, 0

    def __next__(self) -> Any:
        while True:
            if self._gen is None:
                todo = [s for s in self._owned if s not in self._done]
                if not todo:
                    raise StopIteration
                self._open(todo[0])
            try:
                element = next(self._gen)
                self._count += 1
                return element
            except StopIteration:
                assert self._current is not None
                self._done.add(self._current)
                self._partial.pop(self._current, None)
                self._close_shard()
            except BaseException:
                # A generator that raised (an error, Ctrl-C) is finished, and datasets' own
                # state_dict may already count an example that never reached us: keep the position
                # as where the shard started plus the examples returned, and reopen it there on the
                # next call, so nothing is skipped, repeated or marked done.
                if self._current is not None:
                    self._partial[self._current] = {
                        "state": self._base["state"],
                        "skip": self._base["skip"] + self._count,
                    }
                self._close_shard()
                raise

    def _close_shard(self) -> None:
        gen, self._gen, self._shard_ds, self._current = self._gen, None, None, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()

    def get_state(self) -> dict[str, Any]:
        partial = {str(s): st for s, st in self._partial.items()}
        if self._current is not None:
            partial[str(self._current)] = (
                {"state": self._shard_ds.state_dict(), "skip": 0}
                if self._count
                else dict(self._base)  # nothing read since opening: where it started
            )
        return author.make_state(
            KIND,
            dataset=self._ds.identity,
            num_shards=self._ds.num_shards,
            reader=self._reader,
            readers=self._readers,
            done=sorted(self._done),
            partial=partial,
        )

    def state_fields(self) -> dict[str, StateField]:
        return {
            "dataset": StateField.identity(),
            "num_shards": StateField.identity(),
            "reader": StateField.position(),
            "readers": StateField.position(minimum=1),
            "done": StateField.opaque(nullable=False),
            "partial": StateField.opaque(nullable=False),
        }

    def check_state(self, state: Any) -> None:
        if isinstance(state, Mapping) and state.get("kind") == KIND:
            if "dataset" in state and state["dataset"] != self._ds.identity:
                raise author.StateMismatchError(
                    f"{KIND}: the state was saved for another dataset (fingerprint "
                    f"{state['dataset']!r}, this one is {self._ds.identity!r}: other data files, "
                    "features, shard count or map/filter pipeline). Restore it into the dataset "
                    "that saved it."
                )
            if (state.get("reader"), state.get("readers")) != (self._reader, self._readers) and all(
                isinstance(state.get(k), int) for k in ("reader", "readers")
            ):
                raise author.StateMismatchError(
                    f"{KIND}: the state was saved by reader {state['reader']} of {state['readers']} "
                    f"(JAX process + mp_prefetch worker), this iterator is reader {self._reader} of "
                    f"{self._readers}. Re-split saved states for another worker count with "
                    "grain_plugin_hf.resplit_worker_state(state, dataset, num_workers), for another "
                    "process count with grain_plugin_hf.resplit_states(states, reader, readers)."
                )
        super().check_state(state)
        done, partial = state["done"], state["partial"]
        owned = set(self._owned)
        if not isinstance(done, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s in owned for s in done
        ):
            raise author.InvalidStateError(
                f"{KIND}: state field 'done' must list shards of this reader ({self._owned}), got "
                f"{done!r}: the state was altered or corrupted."
            )
        if not isinstance(partial, Mapping) or not all(
            isinstance(k, str) and k.isdigit() and int(k) in owned and _entry_ok(v)
            for k, v in partial.items()
        ):
            raise author.InvalidStateError(
                f"{KIND}: state field 'partial' must map shards of this reader ({self._owned}) to "
                "{'state': a datasets state_dict or None, 'skip': an int >= 0}, got "
                f"{partial!r}: the state was altered or corrupted."
            )
        if self._ds._not_resumable is not None and partial:
            raise NotResumableError(
                f"{KIND}: this dataset cannot be resumed exactly: {self._ds._not_resumable}."
            )

    def restore_state(self, state: Mapping[str, Any]) -> None:
        self._close_shard()
        self._done = set(state["done"])
        self._partial = {
            int(k): {"state": v["state"], "skip": int(v["skip"])} for k, v in state["partial"].items()
        }

    def close(self) -> None:
        self._close_shard()
        super().close()

    def __str__(self) -> str:
        return f"HuggingFaceIterDataset iterator (reader {self._reader} of {self._readers})"


def resplit_states(states: list[Mapping[str, Any]], reader: int, readers: int) -> dict[str, Any]:
    """The state of reader ``reader`` of ``readers`` continuing where the saved ``states`` stopped.

    ``states`` are :class:`HuggingFaceIterDataset` iterator states of the saved readers (e.g.
    ``process_<p>-of-<N>.json`` of N JAX processes, or the workers of one process, see
    :func:`grain_plugin_hf.resplit_worker_state`). Their finished shards and the position inside
    each started shard are merged, and the new reader gets its own shards (``reader, reader +
    readers, ...``) with their progress, so no example is lost or repeated over the epoch. The
    states must include every saved reader that owned one of the new reader's shards. Reader
    ``p + N * w`` is ``mp_prefetch`` worker ``w`` of JAX process ``p`` of ``N``.

    Raises:
      StateMismatchError: the states are not of one dataset and one split, or a saved reader the new
        one needs is missing.
    """
    if not states or not all(isinstance(s, Mapping) and s.get("kind") == KIND for s in states):
        raise author.StateMismatchError(
            f"resplit_states takes {KIND} iterator states (a list of get_state() dicts)."
        )
    first = states[0]
    if any(
        s.get("dataset") != first.get("dataset") or s.get("num_shards") != first.get("num_shards")
        for s in states
    ):
        raise author.StateMismatchError("resplit_states: the states come from different datasets.")
    saved_readers = int(first["readers"])
    given = [int(s["reader"]) for s in states]
    if any(int(s["readers"]) != saved_readers for s in states) or len(set(given)) != len(given):
        raise author.StateMismatchError(
            "resplit_states: the states must come from one run (one reader count), one per reader; "
            f"got readers {sorted(given)} of {[s.get('readers') for s in states]}."
        )
    if not 0 <= reader < readers:
        raise ValueError(f"resplit_states: reader {reader} is not in [0, {readers}).")
    num_shards = int(first["num_shards"])
    mine = set(range(reader, num_shards, readers))
    missing = sorted({s % saved_readers for s in mine} - set(given))
    if missing:
        raise author.StateMismatchError(
            f"resplit_states: reader {reader} of {readers} takes shards owned by saved readers "
            f"{missing} of {saved_readers}, whose states were not given (pass the states of every "
            "process and worker of the saved run)."
        )
    done = {int(x) for s in states for x in s["done"]}
    partial = {int(k): v for s in states for k, v in s["partial"].items()}
    return author.make_state(
        KIND,
        dataset=first["dataset"],
        num_shards=num_shards,
        reader=reader,
        readers=readers,
        done=sorted(done & mine),
        partial={str(k): v for k, v in sorted(partial.items()) if k in mine and k not in done},
    )
