"""``ConcatThenSplitIterDataset``: concatenates examples into one stream and cuts it into rows.

A row is filled with the examples read one after the other. An example whose sequence features do
not fit the rest of the row is split: the part that fits ends the row, the remainder starts the next
one (so no token is dropped, and only rows cut short by a meta feature, see below, and the last row
are padded). All sequence (non-meta) features of one element must have the same length, and all
their targets in ``length_struct`` must be equal, because they are cut at the same places.

Outputs per sequence feature ``f``: ``f`` (padded with its padding value, 0 by default),
``f_segment_ids`` (1-based per piece of an example in the row, 0 on padding) and ``f_positions``
(0-based within each piece: the continuation of a split example restarts at 0). An element whose
sequence features are empty still takes a segment id (as in grain).

Meta features (``meta_features``) are never split and get no segment ids or positions: they have
their own target length, every piece of an example carries the example's whole meta feature, and an
example whose meta feature does not fit the rest of the row starts a new row (logged at ERROR level
as Grain does: "Meta feature '...' limited packing ..."). A meta feature longer than its target is
truncated to it.

``split_full_length_features=False``: an element with a feature of exactly its target length (and
none longer) is emitted as a row of its own instead of being concatenated; such rows are queued and
follow the row being filled when they were read.

BOS handling (``bos_handling``):

* ``"do_nothing"`` (default): pieces are emitted as they are.
* ``"replace_first_token_with_bos"``: the first token of every non-empty piece (whole examples and
  continuations of split ones) is replaced by ``bos_token_id`` in the ``bos_features`` (default:
  every sequence feature), so that every piece starts with BOS.

Checkpoints: the state is the parent state from which the partly emitted example can be re-read
(plus how many elements to skip to reach it), how many of its tokens were already emitted, and, while
rows queued by ``split_full_length_features=False`` are pending, how many rows to replay from there.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

import grain_core as grain
from grain_core.author import (
    OneParentIterator,
    OneParentIterDataset,
    StateField,
    StateMismatchError,
    fingerprint,
    make_state,
)
from grain_plugin_packing._features import FeatureSpec, packed_spec, path_name
from grain_plugin_packing._interrupts import RollbackOnInterrupt

__all__ = ["BOSHandling", "ConcatThenSplitIterDataset"]

_log = logging.getLogger(__name__)


class BOSHandling(enum.Enum):
    """What happens to the first token of each packed piece."""

    DO_NOTHING = "do_nothing"
    REPLACE_FIRST_TOKEN_WITH_BOS = "replace_first_token_with_bos"


class ConcatThenSplitIterDataset(OneParentIterDataset):
    """Concatenates elements and splits the stream into rows of the target length (see module)."""

    def __init__(
        self,
        parent: grain.IterDataset,
        *,
        length_struct: Mapping[str, int],
        meta_features: Collection[str] = (),
        padding_struct: Any = None,
        split_full_length_features: bool = True,
        bos_handling: BOSHandling | str = BOSHandling.DO_NOTHING,
        bos_features: Collection[str] = (),
        bos_token_id: int | None = None,
    ):
        name = type(self).__name__
        if not isinstance(parent, grain.IterDataset):
            raise TypeError(f"{name} expects an IterDataset, got {type(parent).__name__}.")
        super().__init__(parent)
        self._parent = parent
        self._spec_args = (name, length_struct, tuple(meta_features), padding_struct)
        spec = FeatureSpec(*self._spec_args)
        seq_targets = {
            path_name(p): int(n) for p, n, m in zip(spec.paths, spec.lengths, spec.meta) if not m
        }
        if len(set(seq_targets.values())) > 1:
            raise ValueError(
                f"{name}: sequence (non-meta) features are cut at the same places, so their "
                f"targets in length_struct must be equal; got {seq_targets}."
            )
        if not isinstance(split_full_length_features, (bool, np.bool_)):
            raise TypeError(
                f"{name}: split_full_length_features must be a bool, got "
                f"{type(split_full_length_features).__name__}."
            )
        self._split_full = bool(split_full_length_features)
        try:
            self._bos = BOSHandling(
                bos_handling.value if isinstance(bos_handling, BOSHandling) else bos_handling
            )
        except ValueError:
            raise ValueError(
                f"{name}: bos_handling must be one of {[b.value for b in BOSHandling]}, got "
                f"{bos_handling!r}."
            ) from None
        if isinstance(bos_features, str):
            raise TypeError(f"{name}: bos_features must be a collection of names, not a str.")
        names = [path_name(p) for p in spec.paths]
        leaf_names = [p[-1] if p else None for p in spec.paths]
        if self._bos is BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS:
            if (
                bos_token_id is None
                or isinstance(bos_token_id, bool)
                or not isinstance(bos_token_id, (int, np.integer))
            ):
                raise ValueError(f"{name}: replace_first_token_with_bos needs an int bos_token_id.")
            unknown = [f for f in bos_features if f not in names and f not in leaf_names]
            if unknown:
                raise ValueError(
                    f"{name}: bos_features {unknown} are not features of length_struct."
                )
            if bos_features:
                self._bos_mask = [
                    names[i] in bos_features or leaf_names[i] in bos_features
                    for i in range(len(names))
                ]
                overlap = [names[i] for i, b in enumerate(self._bos_mask) if b and spec.meta[i]]
                if overlap:
                    raise ValueError(
                        f"{name}: bos_features and meta_features overlap: {overlap}; meta "
                        "features are never split and get no BOS."
                    )
            else:  # as in Grain: without bos_features no feature gets a BOS token
                self._bos_mask = [False] * len(names)
        else:
            if bos_token_id is not None or bos_features:
                raise ValueError(
                    f"{name}: bos_token_id / bos_features are set, but bos_handling is "
                    "'do_nothing'; pass bos_handling='replace_first_token_with_bos' to use them."
                )
            self._bos_mask = [False] * len(names)
        self._bos_token = None if bos_token_id is None else int(bos_token_id)

    def __iter__(self):
        return _ConcatThenSplitIterator(self)

    @property
    def _element_spec(self) -> Any:
        """Packed rows' spec from the parent's (see ``_features.packed_spec``)."""
        return packed_spec(
            FeatureSpec(*self._spec_args), grain.experimental.get_element_spec(self._parent)
        )

    def __str__(self) -> str:
        return (
            f"ConcatThenSplitIterDataset(bos_handling={self._bos.value}, "
            f"split_full_length_features={self._split_full})"
        )


class _Element:
    """One parent element: its arrays, sequence length and (truncated) meta lengths."""

    __slots__ = ("arrays", "n", "meta_len", "full")

    def __init__(self, arrays: list[np.ndarray], n: int, meta_len: np.ndarray, full: bool):
        self.arrays = arrays
        self.n = n
        self.meta_len = meta_len
        self.full = full


class _ConcatThenSplitIterator(RollbackOnInterrupt, OneParentIterator):
    kind = "ConcatThenSplitIterDataset"

    def __init__(self, ds: ConcatThenSplitIterDataset):
        super().__init__(iter(ds._parent))
        self._ds = ds
        self._parent = self.parent
        spec = self._spec = FeatureSpec(*ds._spec_args)
        self._seq = [i for i, m in enumerate(spec.meta) if not m]
        self._meta = [i for i, m in enumerate(spec.meta) if m]
        self._target = int(spec.lengths[self._seq[0]]) if self._seq else 0
        self._meta_targets = spec.lengths[self._meta]
        self._arange = np.arange(self._target, dtype=np.int32)
        # The element being split across rows (or carried over whole to the next row).
        self._cur: _Element | None = None
        self._offset = 0
        self._cur_anchor: tuple[Any, int] = (None, 0)  # (parent state, elements skipped) for _cur
        self._queue: collections.deque = collections.deque()  # packed rows not yet yielded
        self._exhausted = False
        # State at the start of the fill that produced the queued rows, and rows yielded since.
        self._ckpt: tuple[Any, int, bool, int] | None = None
        self._since = 0
        self._fingerprint = fingerprint(
            self.kind,
            [list(map(str, p)) for p in spec.paths],
            spec.lengths.tolist(),
            spec.meta,
            ds._split_full,
            ds._bos.value,
            ds._bos_mask,
            ds._bos_token,
        )

    def _element(self, arrays: list[np.ndarray]) -> _Element:
        spec = self._spec
        lengths = [len(a) for a in arrays]
        seq_lengths = {lengths[i] for i in self._seq}
        if len(seq_lengths) > 1:
            raise ValueError(
                "ConcatThenSplitIterDataset: the sequence (non-meta) features of one element must "
                "share a length, got "
                f"{ {path_name(spec.paths[i]): lengths[i] for i in self._seq} }."
            )
        n = seq_lengths.pop() if seq_lengths else 0
        raw_meta = np.array([lengths[i] for i in self._meta], dtype=np.int64)
        meta_len = np.minimum(raw_meta, self._meta_targets)
        full = False
        if (
            not self._ds._split_full
            and n <= self._target
            and (raw_meta <= self._meta_targets).all()
        ):
            full = (bool(self._seq) and n == self._target) or bool(
                (raw_meta == self._meta_targets).any()
            )
        return _Element(arrays, n, meta_len, full)

    def _pack(self, pieces: list[tuple[_Element, int, int]]) -> Any:
        """One packed row from ``(element, start, stop)`` pieces (stop - start sequence tokens)."""
        spec, ds = self._spec, self._ds
        data, seg, pos = spec.empty_rows(1)
        data = [d[0] for d in data]
        seg = [s[0] for s in seg]
        pos = [p[0] for p in pos]
        fill = 0
        meta_fill = [0] * len(self._meta)
        for seg_id, (el, start, stop) in enumerate(pieces, 1):
            take = stop - start
            if take:
                end = fill + take
                for f in self._seq:
                    data[f][fill:end] = el.arrays[f][start:stop]
                    seg[f][fill:end] = seg_id
                    pos[f][fill:end] = self._arange[:take]
                    if ds._bos_mask[f]:
                        data[f][fill] = ds._bos_token
                fill = end
            for j, f in enumerate(self._meta):
                m = int(el.meta_len[j])
                if m:
                    data[f][meta_fill[j] : meta_fill[j] + m] = el.arrays[f][:m]
                    meta_fill[j] += m
        return spec.assemble(data, seg, pos)

    def _log_meta_limit(self, el: _Element, meta_fill: np.ndarray) -> None:
        for j, f in enumerate(self._meta):
            length, target = int(el.meta_len[j]), int(self._meta_targets[j])
            if meta_fill[j] + length > target:
                key = path_name(self._spec.paths[f])
                _log.error(
                    "Meta feature '%s' limited packing. Resulting sequences might have unnecessary "
                    "padding. Feature '%s' has sequence_length=%d but only have %d available tokens "
                    "(target_sequence_length=%d). Consider increasing the target sequence length "
                    "for '%s'.",
                    key, key, length, target - int(meta_fill[j]), target, key,
                )
                return

    def _fill(self) -> None:
        """Reads elements until the row being filled is complete; queues it (first) and any
        full-length rows read meanwhile."""
        target, meta_targets = self._target, self._meta_targets
        pieces: list[tuple[_Element, int, int]] = []
        fill = 0
        meta_fill = np.zeros(len(self._meta), dtype=np.int64)
        if self._cur is None:
            call_state = self._parent.get_state()
            self._ckpt = (call_state, 0, False, 0)
        else:
            call_state = None
            self._ckpt = (*self._cur_anchor, True, self._offset)
        self._since = 0
        reads = 0
        while True:
            el = self._cur
            if el is None:
                if call_state is None:
                    call_state = self._parent.get_state()
                try:
                    x = next(self._parent)
                except StopIteration:
                    self._exhausted = True
                    break
                el = self._element(self._spec.arrays(x))
                reads += 1
                if el.full:
                    self._queue.append(self._pack([(el, 0, el.n)]))
                    continue
                self._cur, self._offset, self._cur_anchor = el, 0, (call_state, reads - 1)
            if (meta_fill + el.meta_len > meta_targets).any():
                # A meta feature does not fit: the element starts the next row (logged as an
                # error, as Grain does, since the row is padded).
                self._log_meta_limit(el, meta_fill)
                break
            off = self._offset
            room = target - fill
            if el.n - off > room:
                if room:
                    pieces.append((el, off, off + room))
                    self._offset = off + room
                break
            pieces.append((el, off, el.n))
            fill += el.n - off
            meta_fill += el.meta_len
            self._cur = None
        if pieces:
            self._queue.appendleft(self._pack(pieces))

    def __next__(self):
        # Interrupts: an interrupted fill is undone by the next call (_interrupts.py); a row
        # leaves the queue by subscripts (no call between taking it and counting it).
        if self._rollback is not None:
            self._undo_interrupted()
        queue = self._queue
        if not queue:
            if self._exhausted:
                raise StopIteration
            self._fill_or_note(self._fill)
            if not queue:
                raise StopIteration
        row = queue[0]
        del queue[0]
        self._since += 1
        return row

    def _fresh(self) -> tuple[Any, int, bool, int]:
        if self._cur is None:
            return (self._parent.get_state(), 0, False, 0)
        return (*self._cur_anchor, True, self._offset)

    def get_state(self):
        if self._rollback is not None:
            return self._rollback
        if self._queue:
            (parent, skip, carry, offset), replay = self._ckpt, self._since
        else:
            (parent, skip, carry, offset), replay = self._fresh(), 0
        return make_state(
            self.kind,
            parent=parent,
            skip=skip,
            carry=carry,
            offset=offset,
            replay=replay,
            fingerprint=self._fingerprint,
        )

    def state_fields(self):
        return {
            "parent": StateField.parent(),
            "skip": StateField.position(),
            "carry": StateField.flag(),
            "offset": StateField.position(),
            "replay": StateField.position(),
            "fingerprint": StateField.identity(),
        }

    def restore_state(self, state):
        self._rollback = None
        skip, offset, replay = (int(state[k]) for k in ("skip", "offset", "replay"))
        self._parent.set_state(state["parent"])
        self._cur = None
        self._offset = 0
        self._queue.clear()
        self._exhausted = False
        try:
            for _ in range(skip):
                next(self._parent)
            if state["carry"]:
                el = self._element(self._spec.arrays(next(self._parent)))
                if offset > el.n:
                    raise StateMismatchError(
                        f"{self.kind} state says {offset} tokens of an element were emitted, but "
                        f"it has {el.n}: a different pipeline."
                    )
                self._cur, self._offset, self._cur_anchor = el, offset, (state["parent"], skip)
            for _ in range(replay):
                next(self)
        except StopIteration:
            raise StateMismatchError(
                f"{self.kind} state points past the end of the parent: a different pipeline."
            ) from None
        self._ckpt = (state["parent"], skip, bool(state["carry"]), offset)
        self._since = replay
