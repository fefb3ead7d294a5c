"""Shuffles within windows of consecutive elements, in Grain's order.

``WindowShuffleMapDataset`` permutes every window of ``window_size`` consecutive indices with
Grain's ``index_shuffle`` seeded ``seed + window number`` (windows count over all indices, across
epochs). Grain 0.2.18 shuffles the last, partial window of a finite dataset as a full window, so it
reads indices past the end (the parent's next epoch): some elements twice, some never. By default
(``clip_last_window=None``) that happens only when ``grain_core.config.grain_exact`` is on as the
stage is built; otherwise windows restart every epoch and the last one is permuted within its own
length, so every epoch is a permutation of its elements (the same order as Grain's wherever the
dataset's length is a multiple of ``window_size``; see ``docs/differences.md``).

``WindowShuffleIterDataset`` reads ``window_size`` elements into memory and yields them as Grain
does: window ``k`` is ordered by ``index_shuffle(pos, len - 1, seed + k)`` and emitted from its
end. Both are seeded by an explicit ``seed`` or, when it is None, by the pipeline seed
(``ds.seed(...)`` upstream) through the kernel's seed contract.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import numpy as np

import grain_core as grain
from grain_core.author import (
    IndexShuffle,
    OneParentIterator,
    OneParentIterDataset,
    OneParentMapDataset,
    StateField,
    StateMismatchError,
    check_int,
    grain_block_is_short,
    list_serving_next,
    make_state,
    mode_fields,
    unique_ints,
)
from grain_plugin_window_shuffle.window_orders import window_tables

__all__ = ["WindowShuffleIterDataset", "WindowShuffleMapDataset"]

#: Window permutations a ``WindowShuffleMapDataset`` keeps: this many indices over all of them
#: (a permutation builds its table of ``window_size`` int64 entries once it is read enough).
_MAX_CACHED_INDICES = 1 << 20
#: Window orders computed at once by the iterator (after a start or restore: 1, 8, then this many;
#: numpy's ``shuffle_tables`` walks eight tables in the same calls, so fewer cost nearly as much,
#: and one call of the C accelerator per batch spares a Python call per window).
_MAX_BATCH = 32
#: ... and at most this many order entries held at once (int64: 1 MiB).
_MAX_TABLE_INTS = 1 << 17


def _check_window_size(window_size: Any, where: str) -> int:
    w = check_int(window_size, f"{where}: window_size", minimum=1)
    return w


def window_permutation(
    size: int, seed: int, window: int, grain_exact: bool | None = None
) -> IndexShuffle:
    """Grain's permutation of window number ``window`` holding ``size`` elements:
    ``index_shuffle(i, size - 1, (seed + window) % 2**32, rounds=4, grain_exact=grain_exact)``."""
    return IndexShuffle(max(size - 1, 0), (seed + window) % 2**32, grain_exact=grain_exact)


class WindowShuffleMapDataset(OneParentMapDataset):
    """Shuffles the elements of ``parent`` within windows of ``window_size`` consecutive indices.

    Element ``i`` is read from the parent at ``k * window_size + perm_k(i - k * window_size)``
    where ``k = i // window_size`` and ``perm_k = window_permutation(window_size, seed, k)`` (as in
    Grain). With ``clip_last_window=True`` windows restart every epoch and the last one of an
    epoch is permuted within its own, shorter length, so no index past the epoch is read. The
    default, None, clips unless ``grain_core.config.grain_exact`` is on when the stage is built.
    """

    #: Each epoch orders the elements differently (a slice below reads one fixed set of them).
    reorders_each_epoch = True

    def __init__(
        self,
        parent: grain.MapDataset,
        window_size: int,
        seed: int | None = None,
        *,
        clip_last_window: bool | None = None,
    ):
        if not isinstance(parent, grain.MapDataset):
            raise TypeError(
                f"WindowShuffleMapDataset expects a MapDataset, got {type(parent).__name__}."
            )
        super().__init__(parent)
        self._parent = parent
        self._window = _check_window_size(window_size, "WindowShuffleMapDataset")
        self._seed = self.resolve_seed(seed)
        self._n = len(parent)
        self._grain_exact = bool(grain.config.grain_exact)
        self._clip_given = clip_last_window is not None
        self._clip = bool(clip_last_window) if self._clip_given else not self._grain_exact
        # The modes differ for a partial last window (unless clip_last_window is given), and for
        # a window of 2**k + 1 elements (k >= 16 even) where Grain's index shuffle repeats one.
        partial = self._n < sys.maxsize and self._n % self._window != 0
        self._mode_matters = (partial and not self._clip_given) or grain_block_is_short(
            self._window - 1
        )
        # (epoch, window) -> its permutation, for random access over many windows (e.g. a global
        # shuffle downstream). Emptied when full; plain dict steps, so threads may share it.
        self._perms: dict[tuple[int, int], IndexShuffle] = {}
        self._max_perms = max(1, _MAX_CACHED_INDICES // self._window)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_perms"] = {}  # rebuilt where it is read (e.g. in a worker process)
        return state

    def _as_grain_exact(self) -> WindowShuffleMapDataset:
        """This stage on the same parent as built in Grain-exact mode: Grain's windows (the last,
        partial one read as a full window unless ``clip_last_window`` was given) and Grain's
        index shuffle. The kernel's switch to Grain's data calls it when a state written by google
        grain is restored into a correct-mode pipeline (``grain_core.dataset.grain_exact_switch``)."""
        new = copy.copy(self)
        new._grain_exact = True
        if not new._clip_given:
            new._clip = False
        new._perms = {}
        return new

    def __len__(self) -> int:
        return self._n

    def fingerprint_fields(self):
        fields: dict[str, Any] = {"window_size": self._window, "seed": self._seed}
        if self._clip and self._clip_given:
            fields["clip_last_window"] = True
        return {**fields, **mode_fields(self._grain_exact, self._mode_matters)}

    def __str__(self) -> str:
        return f"WindowShuffleMapDataset(window_size={self._window}, seed={self._seed})"

    @property
    def _element_spec(self) -> Any:
        """The parent's element spec: a window shuffle reorders elements, never changes them."""
        return grain.experimental.get_element_spec(self._parent)

    def _perm(self, epoch: int, window: int) -> IndexShuffle:
        perms = self._perms
        perm = perms.get((epoch, window))
        if perm is not None:
            return perm
        if self._clip:
            start = window * self._window
            size = min(self._window, self._n - start)
            nwin = -(-self._n // self._window)
            perm = window_permutation(size, self._seed, epoch * nwin + window, self._grain_exact)
        else:
            perm = window_permutation(self._window, self._seed, window, self._grain_exact)
        if len(perms) >= self._max_perms:
            perms.clear()
        perms[(epoch, window)] = perm
        return perm

    def element_at(self, index: int):
        n = self._n
        if n == 0:
            raise IndexError("Cannot read from an empty dataset.")
        if not self._clip:
            window, local = divmod(index, self._window)
            return self._parent.element_at(window * self._window + self._perm(0, window)(local))
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
        if not self._clip:  # Grain's windows: over the global index, all of full length
            windows, local = np.divmod(idx, w)
            out = np.empty_like(idx)
            for win in unique_ints(windows).tolist():
                sel = windows == win
                out[sel] = self._perm(0, win)(local[sel])
            return self._parent.__getitems__(windows * w + out)
        epochs, j = np.divmod(idx, n)
        windows, local = np.divmod(j, w)
        out = np.empty_like(idx)
        e0, w0 = int(epochs[0]), int(windows[0])
        if (epochs == e0).all() and (windows == w0).all():
            out[:] = self._perm(e0, w0)(local)
        else:
            nwin = -(-n // w)
            keys = epochs * nwin + windows
            for key in unique_ints(keys).tolist():
                sel = keys == key
                e, win = divmod(int(key), nwin)
                out[sel] = self._perm(e, win)(local[sel])
        return self._parent.__getitems__(epochs * n + windows * w + out)


class WindowShuffleIterDataset(OneParentIterDataset):
    """Reads ``window_size`` elements of ``parent``, yields them shuffled, and repeats.

    Window ``k`` (counted from 0) holding ``len`` elements ``x`` is emitted as
    ``x[perm(len - 1)], x[perm(len - 2)], ..., x[perm(0)]`` with
    ``perm = window_permutation(len, seed, k)`` (Grain's order); the last window holds whatever is
    left. The iterator state is the parent state at the start of the
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
        self._grain_exact = bool(grain.config.grain_exact)  # matters for 2**k + 1 windows only

    def __iter__(self):
        it = _WindowShuffleIterator(iter(self._parent), self._window, self._seed)
        it._grain_exact = self._grain_exact
        return it

    def __str__(self) -> str:
        return f"WindowShuffleIterDataset(window_size={self._window}, seed={self._seed})"

    @property
    def _element_spec(self) -> Any:
        """The parent's element spec: a window shuffle reorders elements, never changes them."""
        return grain.experimental.get_element_spec(self._parent)


class _WindowShuffleIterator(OneParentIterator):
    """Serves one window at a time from a list already in emission order.

    Held in memory: the buffered window (at most ``window_size`` elements, read from the parent
    in chunks of up to the window's remaining size), the elements of a window whose read was
    interrupted (kept so nothing is lost, up to ``window_size``), and the orders of at most
    ``_MAX_BATCH`` upcoming full windows as one int64 array (capped at ``_MAX_TABLE_INTS``
    entries), computed together by :func:`window_tables` (in C where the accelerator is built).
    """

    kind = "WindowShuffleIterDataset"

    def __init__(self, parent: grain.DatasetIterator, window: int, seed: int):
        super().__init__(parent)
        self._parent = parent
        self._size = window
        self._seed = seed
        self._start_state: Any = None  # parent state at the start of the buffered window
        self._index = 0  # number of the buffered window, or of the next one when none is buffered
        self._buf: list[Any] = []  # the buffered window, in emission order
        self._pos = 0  # elements of the buffered window emitted
        self._exhausted = False
        # A window read cut short by an exception (e.g. KeyboardInterrupt): its elements so far
        # and the parent state before them; the next read continues it.
        self._reading: tuple[list[Any], Any] | None = None
        # Orders of upcoming full windows: row j is window self._tables_first + j.
        self._tables: np.ndarray | None = None
        self._tables_first = 0
        self._batch = 1  # windows per computation: 1, 8, then up to the cap
        self._grain_exact: bool | None = None  # set by the dataset (None: the config's now)

    def _order(self, k: int, length: int) -> np.ndarray:
        """The emission order of window ``k`` holding ``length`` elements."""
        if length != self._size:  # the last, partial window
            perm = window_permutation(length, self._seed, k, self._grain_exact)
            return perm(np.arange(length))[::-1]
        tables, row = self._tables, k - self._tables_first
        if tables is None or not 0 <= row < len(tables):
            count = self._batch
            # Retried with one window if cut short (a KeyboardInterrupt): Ctrl-C pressed faster
            # than a batch completes must still let iteration progress.
            self._batch = 1
            tables = window_tables(
                length,
                [(self._seed + k + j) % 2**32 for j in range(count)],
                grain_exact=self._grain_exact,
            )
            self._tables, self._tables_first, row = tables, k, 0
            self._batch = min(8 * count, _MAX_BATCH, max(1, _MAX_TABLE_INTS // length))
        return tables[row, ::-1]

    def _next_window(self, emitted: int = 1):
        """Reads the next window and returns its first element (the per-element path's slow
        branch), committing ``emitted`` of its elements as emitted (``next_chunk`` passes 0 and
        slices the window itself, so an interrupt before it returns loses no element); raises
        ``StopIteration`` at the end."""
        parent = self._parent
        reading = self._reading
        if reading is None:
            if self._exhausted:
                raise StopIteration
            reading = self._reading = ([], parent.get_state())
        items, start_state = reading
        if not self._exhausted:  # (else an interrupt came after the last window was read)
            try:
                while len(items) < self._size:
                    items += parent.next_chunk(self._size - len(items))
            except StopIteration:
                self._exhausted = True
        k = self._index + (1 if self._buf else 0)
        if not items:
            self._reading = None
            raise StopIteration
        order = self._order(k, len(items))
        # Reordered by one numpy gather over the elements as an object array (references only:
        # the elements themselves are neither copied nor converted).
        buf = np.fromiter(items, dtype=object, count=len(items))[order].tolist()
        # Plain stores from here on: nothing an interrupt could split.
        self._buf = buf
        self._pos = emitted
        self._index = k
        self._start_state = start_state
        self._reading = None
        return buf[0]

    def _next_full(self):
        pos = self._pos
        try:
            x = self._buf[pos]
        except IndexError:  # the window is all emitted (a try costs nothing when nothing raises)
            return self._next_window()
        self._pos = pos + 1
        return x

    # next() serves the buffered window before the thread guard; the rest goes through it.
    __next__ = list_serving_next("_buf", "_pos", _next_full)

    def next_chunk(self, max_elements: int) -> list[Any]:
        """The rest of the buffered window, up to ``max_elements`` elements (a slice: no
        per-element work); reads the next window first when this one is all emitted."""
        pos = self._pos
        if pos >= len(self._buf):
            self._next_window(0)
            pos = 0
        stop = min(len(self._buf), pos + max(1, max_elements))
        chunk = self._buf[pos:stop]
        self._pos = stop
        return chunk

    def get_state(self):
        if self._pos < len(self._buf):
            parent, index, emitted = self._start_state, self._index, self._pos
        else:
            reading = self._reading
            parent = self._parent.get_state() if reading is None else reading[1]
            index, emitted = self._index + (1 if self._buf else 0), 0
        return make_state(
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
        self._reading = None
        self._tables, self._batch = None, 1
        emitted = int(state["emitted"])
        if emitted:
            try:
                self._next_window()
            except StopIteration:
                pass
            if emitted > len(self._buf):
                raise StateMismatchError(
                    f"WindowShuffleIterDataset state says {emitted} elements of window "
                    f"{self._index} were emitted, but the parent yields only {len(self._buf)}: the "
                    "state comes from a different pipeline."
                )
            self._pos = emitted
