"""``ConcatThenSplitIterDataset``: concatenates examples into one stream and cuts it into rows.

Rows are exactly the target length: an example that does not fit the rest of a row is split, its
remainder starting the next row (so no token is dropped and there is no padding except in the very
last row). All features of one element must have the same length, and all targets in
``length_struct`` must be equal, because every feature is cut at the same places.

Outputs per packed feature ``f``: ``f`` (padded with its padding value, 0 by default, in the last
row), ``f_segment_ids`` (1-based per piece of an example in the row, 0 on padding) and
``f_positions`` (0-based within each piece: the continuation of a split example restarts at 0).
``meta_features`` are cut the same way but get no segment ids or positions.

BOS handling (``bos_handling``):

* ``"do_nothing"`` (default): continuations are emitted as they are.
* ``"replace_first_token_with_bos"``: the first token of a continuation piece (the remainder of a
  split example at the start of a row) is replaced by ``bos_token_id`` in the ``bos_features``
  (default: every non-meta feature), so that every piece starts with BOS.

Checkpoints: the state is the parent state from which the partly emitted example can be re-read
(plus how many elements to skip to reach it) and how many of its tokens were already emitted.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

import grain_core as grain
from grain_core import state as _state
from grain_plugin_packing._features import FeatureSpec, path_name

__all__ = ["BOSHandling", "ConcatThenSplitIterDataset"]


class BOSHandling(enum.Enum):
    """What happens to the first token of the continuation of a split example."""

    DO_NOTHING = "do_nothing"
    REPLACE_FIRST_TOKEN_WITH_BOS = "replace_first_token_with_bos"


class ConcatThenSplitIterDataset(grain.IterDataset):
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
        if len(set(spec.lengths.tolist())) != 1:
            raise ValueError(
                f"{name}: every feature is cut at the same places, so all targets in length_struct "
                f"must be equal; got {dict(zip(map(path_name, spec.paths), spec.lengths.tolist()))}."
            )
        if not split_full_length_features:
            raise NotImplementedError(
                f"{name}: split_full_length_features=False is not supported; examples are always "
                "split at row boundaries."
            )
        try:
            self._bos = BOSHandling(
                bos_handling.value if isinstance(bos_handling, BOSHandling) else bos_handling
            )
        except ValueError:
            raise ValueError(
                f"{name}: bos_handling must be one of {[b.value for b in BOSHandling]}, got "
                f"{bos_handling!r}."
            ) from None
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
            else:
                self._bos_mask = [not m for m in spec.meta]
        else:
            self._bos_mask = [False] * len(names)
        self._bos_token = None if bos_token_id is None else int(bos_token_id)

    def __iter__(self):
        return _ConcatThenSplitIterator(self)

    def __str__(self) -> str:
        return f"ConcatThenSplitIterDataset(bos_handling={self._bos.value})"


class _ConcatThenSplitIterator(grain.DatasetIterator):
    kind = "ConcatThenSplitIterDataset"

    def __init__(self, ds: ConcatThenSplitIterDataset):
        super().__init__(iter(ds._parent))
        self._ds = ds
        self._parent = self._parents[0]
        self._spec = FeatureSpec(*ds._spec_args)
        self._target = int(self._spec.lengths[0])
        self._arange = np.arange(self._target, dtype=np.int32)
        self._cur: list[np.ndarray] | None = None
        self._cur_len = 0
        self._offset = 0
        self._cur_anchor: tuple[Any, int] | None = None  # (parent state, elements skipped) for _cur
        self._fingerprint = _state.fingerprint(
            self.kind,
            [list(map(str, p)) for p in self._spec.paths],
            self._target,
            ds._bos.value,
            ds._bos_mask,
            ds._bos_token,
        )

    def _element(self, arrays: list[np.ndarray]) -> int:
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1:
            raise ValueError(
                f"ConcatThenSplitIterDataset: the features of one element must share a length, got "
                f"{dict(zip(map(path_name, self._spec.paths), (len(a) for a in arrays)))}."
            )
        return lengths.pop()

    def __next__(self):
        spec, target = self._spec, self._target
        rows: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] | None = None
        fill = 0
        seg_id = 0
        call_state = None
        reads = 0
        bos = self._ds._bos_mask
        while fill < target:
            if self._cur is None:
                if call_state is None:
                    call_state = self._parent.get_state()
                try:
                    x = next(self._parent)
                except StopIteration:
                    break
                arrays = spec.arrays(x)
                self._cur, self._cur_len, self._offset = arrays, self._element(arrays), 0
                self._cur_anchor = (call_state, reads)
                reads += 1
            take = min(self._cur_len - self._offset, target - fill)
            if take:
                if rows is None:
                    rows = spec.empty_rows(1)
                data, seg, pos = rows
                seg_id += 1
                off = self._offset
                for f, a in enumerate(self._cur):
                    data[f][0, fill : fill + take] = a[off : off + take]
                    seg[f][0, fill : fill + take] = seg_id
                    pos[f][0, fill : fill + take] = self._arange[:take]
                    if off and bos[f]:
                        data[f][0, fill] = self._ds._bos_token
                fill += take
                self._offset = off + take
            if self._offset >= self._cur_len:
                self._cur = None
        if rows is None:
            raise StopIteration
        data, seg, pos = rows
        return spec.assemble([d[0] for d in data], [s[0] for s in seg], [p[0] for p in pos])

    def get_state(self):
        if self._cur is None:
            parent, skip, offset = self._parent.get_state(), 0, 0
        else:
            (parent, skip), offset = self._cur_anchor, self._offset
        return _state.make_state(
            self.kind, parent=parent, skip=skip, offset=offset, fingerprint=self._fingerprint
        )

    def set_state(self, state):
        _state.expect_state(
            state, self.kind, ("parent", "skip", "offset"), fingerprint=self._fingerprint
        )
        self._parent.set_state(state["parent"])
        self._cur = None
        offset = int(state["offset"])
        if offset:
            skip = int(state["skip"])
            for _ in range(skip):
                next(self._parent)
            arrays = self._spec.arrays(next(self._parent))
            self._cur, self._cur_len, self._offset = arrays, self._element(arrays), offset
            self._cur_anchor = (state["parent"], skip)
