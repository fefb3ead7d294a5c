"""Shuffles within windows of consecutive elements.

``WindowShuffleMapDataset`` permutes every window of ``window_size`` consecutive indices of each
epoch (the last window may be shorter) with a keyed bijection, so every element appears exactly once
per epoch and stays inside its window; the permutation differs per window and per epoch.

``WindowShuffleIterDataset`` reads ``window_size`` elements into memory, yields them in a shuffled
order, and repeats. Both are seeded by an explicit ``seed`` or, when it is None, by the pipeline seed
(``ds.seed(...)`` upstream) through the kernel's seed contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import grain_core as grain
from grain_core import seeds as _seeds
from grain_core import state as _state
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset, OneParentMapDataset
from grain_core.state import StateField
from grain_core.validation import check_int

__all__ = ["WindowShuffleIterDataset", "WindowShuffleMapDataset"]


def _check_window_size(window_size: Any, where: str) -> int:
    w = check_int(window_size, f"{where}: window_size", minimum=1)
    return w


def window_permutation(size: int, seed: int, *salt: int) -> _seeds.IndexPermutation:
    """The keyed permutation of one window: ``IndexPermutation`` keyed by ``derive_seed(seed, *salt)``."""
    return _seeds.IndexPermutation(size, _seeds.derive_seed(seed, *salt))


class WindowShuffleMapDataset(OneParentMapDataset):
    """Shuffles the elements of ``parent`` within windows of ``window_size`` consecutive indices.

    Element ``i`` of epoch ``e`` (``i = e * len + j``) is read from the parent at
    ``e * len + start + perm(j - start)``, where ``start`` is the first index of ``j``'s window and
    ``perm`` is ``IndexPermutation(window length, derive_seed(seed, e, window number))``.
    """

    def __init__(self, parent: grain.MapDataset, window_size: int, seed: int | None = None):
        if not isinstance(parent, grain.MapDataset):
            raise TypeError(
                f"WindowShuffleMapDataset expects a MapDataset, got {type(parent).__name__}."
            )
        super().__init__(parent)
        self._parent = parent
        self._window = _check_window_size(window_size, "WindowShuffleMapDataset")
        self._seed = self.resolve_seed(seed)
        self._n = len(parent)
        self._cache: tuple[int, int, _seeds.IndexPermutation] | None = None

    def __len__(self) -> int:
        return self._n

    def fingerprint_fields(self):
        return {"window_size": self._window, "seed": self._seed}

    def __str__(self) -> str:
        return f"WindowShuffleMapDataset(window_size={self._window}, seed={self._seed})"

    def _perm(self, epoch: int, window: int) -> _seeds.IndexPermutation:
        c = self._cache
        if c is not None and c[0] == epoch and c[1] == window:
            return c[2]
        start = window * self._window
        size = min(self._window, self._n - start)
        perm = window_permutation(size, self._seed, epoch, window)
        self._cache = (epoch, window, perm)
        return perm

    def element_at(self, index: int):
        n = self._n
        if n == 0:
            raise IndexError("Cannot read from an empty dataset.")
        epoch, j = divmod(index, n)
        window, local = divmod(j, self._window)
        return self._parent.element_at(
            epoch * n + window * self._window + self._perm(epoch, window)(local)
        )

    def __getitems__(self, indices):
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return []
        n, w = self._n, self._window
        if n == 0:
            raise IndexError("Cannot read from an empty dataset.")
        epochs, j = np.divmod(idx, n)
        windows, local = np.divmod(j, w)
        out = np.empty_like(idx)
        e0, w0 = int(epochs[0]), int(windows[0])
        if (epochs == e0).all() and (windows == w0).all():
            out[:] = self._perm(e0, w0)(local)
        else:
            nwin = -(-n // w)
            keys = epochs * nwin + windows
            for key in np.unique(keys):
                sel = keys == key
                e, win = divmod(int(key), nwin)
                out[sel] = self._perm(e, win)(local[sel])
        return self._parent.__getitems__(epochs * n + windows * w + out)


class WindowShuffleIterDataset(OneParentIterDataset):
    """Reads ``window_size`` elements of ``parent``, yields them shuffled, and repeats.

    Window ``k`` (counted from 0) is ordered by ``IndexPermutation(len, derive_seed(seed, k))``; the
    last window holds whatever is left. The iterator state is the parent state at the start of the
    current window, the window number and how many of its elements were yielded; restoring re-reads
    the window from the parent.
    """

    def __init__(self, parent: grain.IterDataset, window_size: int, seed: int | None = None):
        if not isinstance(parent, grain.IterDataset):
            raise TypeError(
                f"WindowShuffleIterDataset expects an IterDataset, got {type(parent).__name__}."
            )
        super().__init__(parent)
        self._parent = parent
        self._window = _check_window_size(window_size, "WindowShuffleIterDataset")
        self._seed = self.resolve_seed(seed)

    def __iter__(self):
        return _WindowShuffleIterator(iter(self._parent), self._window, self._seed)

    def __str__(self) -> str:
        return f"WindowShuffleIterDataset(window_size={self._window}, seed={self._seed})"


class _WindowShuffleIterator(OneParentIterator):
    kind = "WindowShuffleIterDataset"

    def __init__(self, parent: grain.DatasetIterator, window: int, seed: int):
        super().__init__(parent)
        self._parent = parent
        self._size = window
        self._seed = seed
        self._start_state: Any = None  # parent state at the start of the buffered window
        self._index = 0  # number of the buffered window, or of the next one when none is buffered
        self._buf: list[Any] = []
        self._pos = 0
        self._exhausted = False

    def _fill(self) -> None:
        parent = self._parent
        self._start_state = parent.get_state()
        items: list[Any] = []
        try:
            while len(items) < self._size:
                items += parent.next_chunk(self._size - len(items))
        except StopIteration:
            self._exhausted = True
        if not items:
            self._buf, self._pos = [], 0
            return
        order = window_permutation(len(items), self._seed, self._index)(np.arange(len(items)))
        self._buf = [items[i] for i in order.tolist()]
        self._pos = 0

    def __next__(self):
        pos = self._pos
        buf = self._buf
        if pos < len(buf):
            self._pos = pos + 1
            return buf[pos]
        if self._exhausted:
            raise StopIteration
        if buf:
            self._index += 1
        self._fill()
        if not self._buf:
            raise StopIteration
        self._pos = 1
        return self._buf[0]

    def get_state(self):
        if self._buf and self._pos < len(self._buf):
            parent, index, emitted = self._start_state, self._index, self._pos
        else:
            parent = self._parent.get_state()
            index, emitted = self._index + (1 if self._buf else 0), 0
        return _state.make_state(
            self.kind,
            parent=parent,
            window=index,
            emitted=emitted,
            window_size=self._size,
            seed=self._seed,
        )

    def state_fields(self):
        return {
            "parent": StateField.parent(),
            "window": StateField.position(),
            "emitted": StateField.position(0, self._size),
            "window_size": StateField.identity(),
            "seed": StateField.identity(),
        }

    def restore_state(self, state):
        self._parent.set_state(state["parent"])
        self._index = int(state["window"])
        self._buf, self._pos, self._exhausted = [], 0, False
        emitted = int(state["emitted"])
        if emitted:
            self._fill()
            if emitted > len(self._buf):
                raise _state.StateMismatchError(
                    f"WindowShuffleIterDataset state says {emitted} elements of window "
                    f"{self._index} were emitted, but the parent yields only {len(self._buf)}: the "
                    "state comes from a different pipeline."
                )
            self._pos = emitted
