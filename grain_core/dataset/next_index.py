"""Grain's ``get_next_index`` / ``set_next_index``: the index of the element an iterator produces
next, read from (or set on) the iterator itself or the one ``to_iter_dataset`` stage below it."""

from __future__ import annotations

from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.prefetch import PrefetchDatasetIterator
from grain_core.dataset.trees import iterator_tree
from grain_core.validation import check_int


def _prefetch_iterator(ds_iter: DatasetIterator) -> PrefetchDatasetIterator:
    found = [n for n in iterator_tree(ds_iter) if isinstance(n, PrefetchDatasetIterator)]
    if len(found) != 1:
        raise ValueError(
            "get_next_index / set_next_index need an iterator over exactly one "
            f"MapDataset.to_iter_dataset() stage; this one has {len(found)}."
        )
    return found[0]


def get_next_index(ds_iter: DatasetIterator) -> int:
    """The index of the element ``ds_iter`` produces next (Grain's protocol): an iterator that
    defines ``_get_next_index()`` answers itself (``batch`` counts batches, ``LimitIterDataset``
    the elements it returned, as in Grain); otherwise the index of the ``MapDataset`` (below
    ``to_iter_dataset``) it reads next, for a chain of 1:1 stages."""
    own = getattr(ds_iter, "_get_next_index", None)
    if own is not None:
        return int(own())
    return int(_prefetch_iterator(ds_iter).get_state()["next_index"])


def set_next_index(ds_iter: DatasetIterator, index: int) -> None:
    """Makes ``ds_iter`` continue at element ``index`` (see :func:`get_next_index`); an iterator
    that defines ``_set_next_index(index)`` does it itself."""
    index = check_int(index, "index")
    own = getattr(ds_iter, "_set_next_index", None)
    if own is not None:
        own(index)
        return
    it = _prefetch_iterator(ds_iter)
    it.set_state({**it.get_state(), "next_index": index})
