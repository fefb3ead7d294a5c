"""First-fit and best-fit packing of variable-length examples into fixed-length rows.

A packing round fills ``num_packing_bins`` bins: each element goes into the first bin (first fit) or
the fullest bin (best fit) where every feature fits and the bin holds fewer than
``max_sequences_per_bin`` sequences. When an element fits nowhere, the round ends: its non-empty
bins are yielded (in bin order, or shuffled with ``shuffle_bins``: as in Grain, a round's bins are
permuted by ``np.random.default_rng(seed + rows yielded before the round)``) and the element starts
the next round. At the end of the input the last round's bins are yielded. A feature longer than its target
length raises ``ValueError`` (as in Grain); with ``truncate_long_sequences=True`` it is truncated to
the target instead (the cut tokens are not emitted). Scalar features pack as length-1 sequences. An
element whose features are all empty still takes a
segment id (as in grain), so a bin can hold only empty sequences and come out as padding. Element
features that ``length_struct`` does not name are dropped (as in Grain).

``pack_alignment_struct`` gives a per-feature alignment: after each sequence the feature's next free
cell is rounded up to a multiple of it (the cells skipped are padding: padding value, segment id 0,
position 0). A sequence fits when its unaligned length fits the cells left; the rounding may pass
the target, which closes the bin to that feature (even to empty sequences).

``shuffle_bins_group_by_feature`` (only with ``shuffle_bins``): the shuffled bins are stably sorted
by the mean of the distinct non-zero values of that feature in each packed row (padding included, 0
when there are none), so bins of the same group come out together.

Each packed feature ``f`` comes out padded to its target length with its padding value (0 unless
``padding_struct`` says otherwise) next to ``f_segment_ids`` (1-based per packed example, 0 on
padding) and ``f_positions`` (0-based within each example); ``meta_features`` are packed but get no
segment ids or positions.

Checkpoints: the state names the parent state from which the current round can be rebuilt (plus how
many elements to skip to re-read the element carried over from the previous round), the round number,
how many of its bins were yielded and ``counter``, the rows yielded in all (Grain's field of that
name, which seeds the bin shuffle); restoring replays the round. A state without ``counter`` (saved
before it was added) is refused.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

import grain_core as grain
from grain_core.author import (
    InvalidStateError,
    OneParentIterator,
    OneParentIterDataset,
    StateField,
    StateMismatchError,
    fingerprint,
    make_state,
)
from grain_plugin_packing._features import FeatureSpec, _positive, packed_spec, path_name
from grain_plugin_packing._interrupts import RollbackOnInterrupt

__all__ = ["BestFitPackIterDataset", "FirstFitPackIterDataset"]

_CHUNK = 128  # parent elements pulled per next_chunk call


class _PackIterDataset(OneParentIterDataset):
    _best_fit = False

    def __init__(
        self,
        parent: grain.IterDataset,
        *,
        length_struct: Any,
        num_packing_bins: int,
        seed: int | None = None,
        shuffle_bins: bool = True,
        shuffle_bins_group_by_feature: str | None = None,
        meta_features: Collection[str] = (),
        pack_alignment_struct: Any = None,
        padding_struct: Any = None,
        max_sequences_per_bin: int | None = None,
        truncate_long_sequences: bool = False,
    ):
        name = type(self).__name__
        self._truncate = bool(truncate_long_sequences)
        if not isinstance(parent, grain.IterDataset):
            raise TypeError(f"{name} expects an IterDataset, got {type(parent).__name__}.")
        super().__init__(parent)
        self._parent = parent
        # Features length_struct does not name are dropped, as in Grain.
        self._spec_args = (name, length_struct, tuple(meta_features), padding_struct, True)
        spec = FeatureSpec(*self._spec_args)  # validate eagerly
        self._align = [
            _positive(a, f"{name}: pack_alignment_struct[{path_name(p)}]")
            for p, a in zip(
                spec.paths, spec.per_feature(pack_alignment_struct, "pack_alignment_struct", 1)
            )
        ]
        self._group_by = (
            None
            if shuffle_bins_group_by_feature is None
            else spec.index(shuffle_bins_group_by_feature, "shuffle_bins_group_by_feature")
        )
        self._bins = _positive(num_packing_bins, f"{name}: num_packing_bins")
        self._max_seq = (
            None
            if max_sequences_per_bin is None
            else _positive(max_sequences_per_bin, f"{name}: max_sequences_per_bin")
        )
        self._shuffle = bool(shuffle_bins)
        # As Grain's packers: ``seed`` defaults to 0; a ``seed()`` upstream does not seed them.
        self._seed = self.resolve_seed(0 if seed is None else seed)

    def __iter__(self):
        return _PackIterator(self)

    @property
    def _element_spec(self) -> Any:
        """Packed rows' spec from the parent's (see ``_features.packed_spec``)."""
        return packed_spec(
            FeatureSpec(*self._spec_args), grain.experimental.get_element_spec(self._parent)
        )

    def __str__(self) -> str:
        return (
            f"{type(self).__name__}(num_packing_bins={self._bins}, shuffle_bins={self._shuffle}, "
            f"seed={self._seed}, pack_alignment={self._align}, group_by={self._group_by})"
        )


class FirstFitPackIterDataset(_PackIterDataset):
    """Packs each element into the first bin with room (see the module docstring)."""


class BestFitPackIterDataset(_PackIterDataset):
    """Packs each element into the bin it fills best: the fitting bin with the fewest tokens left
    afterwards (summed over features; ties go to the lowest bin)."""

    _best_fit = True


class _Round:
    """The bins of one packing round."""

    def __init__(self, spec: FeatureSpec, bins: int):
        self.spec = spec
        self.bins = bins
        self.data: list[np.ndarray] = []
        self.seg: list[np.ndarray] = []
        self.pos: list[np.ndarray] = []
        # Target minus the first free cell per bin and feature. With alignment the free cell is
        # rounded up to a multiple of the alignment, so this can drop below zero (the bin is then
        # closed to that feature, even to empty sequences, as in grain).
        self.remaining = [spec.lengths.tolist() for _ in range(bins)]
        self.counts = [0] * bins
        self.extras: list[list[dict[str, Any]]] = [[] for _ in range(bins)]  # non-sequence meta
        self.order: list[int] = []
        self.emitted = 0


class _PackIterator(RollbackOnInterrupt, OneParentIterator):
    def __init__(self, ds: _PackIterDataset):
        super().__init__(ds._parent.__iter__())
        self._ds = ds
        self._parent = self.parent
        self.kind = type(ds).__name__
        self._spec = FeatureSpec(*ds._spec_args)
        self._aranges = [np.arange(n, dtype=np.int32) for n in self._spec.lengths.tolist()]
        # How to rebuild the round about to be filled (or being yielded): parent state, elements to
        # skip after it, whether the next element read is the carry-over of the previous round.
        self._anchor: tuple[Any, int, bool] = (self._parent.get_state(), 0, False)
        # Elements are pulled from the parent in chunks: the position is the parent state before
        # the current chunk plus how many of its elements were used.
        self._chunk: list[Any] = []
        self._chunk_pos = 0
        self._chunk_state: Any = self._anchor[0]
        self._round_no = 0
        # Rows yielded before the current round: Grain seeds a round's bin shuffle with
        # ``seed + rows yielded so far``.
        self._rows_before = 0
        self._round: _Round | None = None
        self._carry: list[np.ndarray] | None = None
        self._exhausted = False
        self._fingerprint = fingerprint(
            self.kind,
            [list(map(str, p)) for p in self._spec.paths],
            self._spec.lengths.tolist(),
            ds._bins,
            ds._max_seq,
            ds._shuffle,
            ds._seed,
            ds._align,
            ds._group_by,
        )
        self._alignments = np.array(ds._align, dtype=np.int64)
        self._aligned = bool((self._alignments > 1).any())

    # --- packing ------------------------------------------------------------------------------------

    def _next_raw(self) -> Any:
        """The next parent element (pulled a chunk at a time); raises ``StopIteration``."""
        if self._chunk_pos >= len(self._chunk):
            state = self._parent.get_state()
            self._chunk = self._parent.next_chunk(_CHUNK)
            self._chunk_pos, self._chunk_state = 0, state
        x = self._chunk[self._chunk_pos]
        self._chunk_pos += 1
        return x

    def _read(self) -> list[np.ndarray] | None:
        try:
            x = self._next_raw()
        except StopIteration:
            self._exhausted = True
            return None
        return self._spec.arrays(x)

    def _fill(self) -> None:
        spec, ds = self._spec, self._ds
        rnd = _Round(spec, ds._bins)
        start, start_skip = self._chunk_state, self._chunk_pos
        read = 0
        carry = self._carry
        self._carry = None
        targets = spec.lengths.tolist()
        nfeat = len(targets)
        alignments = self._alignments.tolist()
        max_seq = ds._max_seq
        best = ds._best_fit
        while True:
            if carry is not None:
                arrays, carry = carry, None
            else:
                if self._exhausted:
                    break
                arrays = self._read()
                if arrays is None:
                    break
                read += 1
            if not ds._truncate and any(len(a) > t for a, t in zip(arrays, targets)):
                over = [
                    (path_name(p), len(a), int(t))
                    for p, a, t in zip(spec.paths, arrays, targets)
                    if len(a) > t
                ]
                raise ValueError(
                    "Inputs to PackedBatch must be truncated to max length. Exceeds: (feature, "
                    f"feature_length, max_length) = {over}. Truncate them upstream or pass "
                    "truncate_long_sequences=True."
                )
            # Plain Python over the bins: cheaper than numpy for tens of bins and few features.
            lengths = [min(len(a), t) for a, t in zip(arrays, targets)]
            remaining, counts = rnd.remaining, rnd.counts
            b = -1
            if nfeat == 1:
                n0 = lengths[0]
                if best:
                    best_left = None
                    for i, r in enumerate(remaining):
                        if r[0] >= n0 and (max_seq is None or counts[i] < max_seq):
                            if best_left is None or r[0] - n0 < best_left:
                                best_left, b = r[0] - n0, i
                else:
                    for i, r in enumerate(remaining):
                        if r[0] >= n0 and (max_seq is None or counts[i] < max_seq):
                            b = i
                            break
            else:
                best_left = None
                for i, r in enumerate(remaining):
                    if max_seq is not None and counts[i] >= max_seq:
                        continue
                    if all(x >= n for x, n in zip(r, lengths)):
                        if not best:
                            b = i
                            break
                        left = sum(r) - sum(lengths)
                        if best_left is None or left < best_left:
                            best_left, b = left, i
            if b < 0:
                self._carry = arrays
                break
            seg_id = counts[b] + 1
            if not rnd.data:
                rnd.data, rnd.seg, rnd.pos = spec.empty_rows(rnd.bins)
            rem_b = remaining[b]
            for f, (a, n, t, r) in enumerate(zip(arrays, lengths, targets, rem_b)):
                if n:
                    off = t - r
                    rnd.data[f][b, off : off + n] = a[:n]
                    rnd.seg[f][b, off : off + n] = seg_id
                    rnd.pos[f][b, off : off + n] = self._aranges[f][:n]
            if self._aligned:  # the next sequence starts at a multiple of the alignment
                remaining[b] = [
                    t - -(-(t - r + n) // al) * al
                    for t, r, n, al in zip(targets, rem_b, lengths, alignments)
                ]
            else:
                remaining[b] = [r - n for r, n in zip(rem_b, lengths)]
            counts[b] = seg_id
            if spec.extra_meta:
                rnd.extras[b].append(arrays[-1])
        rnd.order = self._order(rnd)
        self._round = rnd
        # The next round is rebuilt from `start` by skipping all but the last element read (the
        # carry), or, without a carry, from wherever the parent is now.
        if self._carry is not None:
            self._next_anchor = (start, start_skip + read - 1, True)
        else:
            self._next_anchor = (self._chunk_state, self._chunk_pos, False)

    def _order(self, rnd: _Round) -> list[int]:
        """The order in which the round's non-empty bins are yielded."""
        ds = self._ds
        used = np.flatnonzero(rnd.counts)
        if not ds._shuffle or len(used) < 2:
            return used.tolist()
        # As Grain: numpy's default generator seeded with the stage seed plus the rows yielded
        # before this round permutes the round's (non-empty, leading) bins.
        rng = np.random.default_rng(ds._seed + self._rows_before)
        used = used[rng.permuted(np.arange(len(used)))]
        if ds._group_by is not None:
            # Stable sort of the shuffled bins by the mean of the distinct non-zero values of the
            # group feature in each packed row (padding included; 0 when there are none).
            rows = rnd.data[ds._group_by][used].reshape(len(used), -1)
            rows = np.sort(rows, axis=1)
            distinct = np.ones(rows.shape, dtype=bool)
            distinct[:, 1:] = rows[:, 1:] != rows[:, :-1]
            counted = distinct & (rows != 0)
            totals = np.where(counted, rows, 0).sum(axis=1, dtype=np.float64)
            counts = counted.sum(axis=1)
            means = np.divide(totals, counts, out=np.zeros(len(used)), where=counts > 0)
            used = used[np.argsort(means, kind="stable")]
        return used.tolist()

    def __next__(self):
        # Interrupts: a row is built before it counts as emitted, a round switch is one
        # assignment, and an interrupted fill is undone by the next call (_interrupts.py).
        if self._rollback is not None:
            self._undo_interrupted()
        while True:
            rnd = self._round
            if rnd is not None and rnd.emitted < len(rnd.order):
                e = rnd.emitted
                b = rnd.order[e]
                row = self._spec.assemble(
                    [d[b] for d in rnd.data],
                    [s[b] for s in rnd.seg],
                    [p[b] for p in rnd.pos],
                    rnd.extras[b],
                )
                rnd.emitted = e + 1
                return row
            if rnd is not None:
                n = len(rnd.order)
                self._round, self._round_no, self._rows_before, self._anchor = (
                    None, self._round_no + 1, self._rows_before + n, self._next_anchor
                )
            if self._exhausted and self._carry is None:
                raise StopIteration
            self._fill_or_note(self._fill)
            if not self._round.order:
                self._round = None
                raise StopIteration

    # --- checkpoints --------------------------------------------------------------------------------

    def get_state(self):
        if self._rollback is not None:
            return self._rollback
        rnd = self._round
        if rnd is not None and rnd.emitted >= len(rnd.order):
            anchor, round_no, emitted = self._next_anchor, self._round_no + 1, 0
            rows_before = self._rows_before + len(rnd.order)
        else:
            anchor, round_no = self._anchor, self._round_no
            emitted = 0 if rnd is None else rnd.emitted
            rows_before = self._rows_before
        parent, skip, carry = anchor
        return make_state(
            self.kind,
            parent=parent,
            skip=skip,
            carry=carry,
            round=round_no,
            next_row=emitted,
            counter=rows_before + emitted,
            fingerprint=self._fingerprint,
        )

    def state_fields(self):
        return {
            "parent": StateField.parent(),
            "skip": StateField.position(),
            "carry": StateField.flag(),
            "round": StateField.position(),
            "next_row": StateField.position(),
            "counter": StateField.position(),
            "fingerprint": StateField.identity(),
        }

    def restore_state(self, state):
        self._rollback = None
        emitted, counter = int(state["next_row"]), int(state["counter"])
        if counter < emitted:
            raise InvalidStateError(
                f"{self.kind} state says {counter} rows were yielded in all but {emitted} in the "
                "current round: the state was altered or corrupted."
            )
        self._parent.set_state(state["parent"])
        self._exhausted = False
        self._round = None
        self._carry = None
        self._round_no = int(state["round"])
        skip, carry = int(state["skip"]), bool(state["carry"])
        self._rows_before = counter - emitted
        self._anchor = (state["parent"], skip, carry)
        self._chunk, self._chunk_pos, self._chunk_state = [], 0, state["parent"]
        for _ in range(skip):
            self._next_raw()
        if carry:
            self._carry = self._read()
        if emitted:
            self._fill()
            if emitted > len(self._round.order):
                raise StateMismatchError(
                    f"{self.kind} state says {emitted} bins of round {self._round_no} were yielded, "
                    f"but replaying it gives {len(self._round.order)}: a different pipeline."
                )
            self._round.emitted = emitted
