"""Give-back (``DatasetIterator.unread`` / ``can_unread``) is a public part of the chunk protocol.

A third-party iterator that declares it is read by chunks by the kernel's chunked stages and given
back exactly what they read past a failure; the conformance kit (``check_unread``) checks it on
every stage that declares it and catches one that gives back the wrong count.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import grain_core as grain
from grain_core import testing

ROOT = Path(__file__).resolve().parent.parent


class ListIterDataset(grain.IterDataset):
    """A third-party source whose iterator can give back (``wrong`` makes it give back one more)."""

    def __init__(self, n: int, wrong: bool = False):
        super().__init__(())
        self.n, self.wrong = n, wrong
        self.asked: list[int] = []  # the max_elements of every next_chunk call

    def __iter__(self):
        return ListIterator(self)


class ListIterator(grain.DatasetIterator):
    can_unread = True

    def __init__(self, ds: ListIterDataset):
        super().__init__()
        self._ds = ds
        self._pos = 0

    def __next__(self):
        return self.next_chunk(1)[0]

    def next_chunk(self, max_elements: int):
        self._ds.asked.append(max_elements)
        if self._pos >= self._ds.n:
            raise StopIteration
        end = min(self._ds.n, self._pos + max_elements)
        out = list(range(self._pos, end))
        self._pos = end
        return out

    def unread(self, count: int) -> None:
        self._pos -= count + (1 if self._ds.wrong and count else 0)

    def get_state(self):
        return {"kind": "ListIterDataset", "pos": self._pos}

    def restore_state(self, state):
        self._pos = state["pos"]


class NoGiveBackIterDataset(ListIterDataset):
    def __iter__(self):
        it = ListIterator(self)
        it.can_unread = False
        return it


def test_kernel_chunked_stages_read_a_third_party_iterator_by_chunks_and_give_back():
    src = ListIterDataset(100)

    def f(x):
        if x == 5:
            raise ValueError("five")
        return x * 10

    it = iter(src.map(f))
    assert it.can_unread  # the map stage gives back because its parent can
    assert it.next_chunk(4) == [0, 10, 20, 30]
    assert max(src.asked) > 1  # read by chunks
    got = []
    with pytest.raises(ValueError, match="five"):
        while True:
            got += it.next_chunk(10)
    assert got == [40]  # the elements before the failing one come first
    # What the source returned after the failing one was given back to it: the state is exact.
    assert it.get_state()["parent"]["pos"] == 6
    assert it.next_chunk(2) == [60, 70]


def test_a_parent_without_give_back_is_read_one_element_at_a_time():
    src = NoGiveBackIterDataset(20)
    it = iter(src.map(lambda x: x + 1))
    assert not it.can_unread
    assert it.next_chunk(8) == [1]
    assert set(src.asked) == {1}


def test_the_base_class_refuses_unread_with_a_clear_error():
    it = iter(NoGiveBackIterDataset(3))
    next(it)
    with pytest.raises(TypeError, match="cannot unread .*can_unread = True"):
        grain.DatasetIterator.unread(it, 1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ListIterDataset(40),
        lambda: ListIterDataset(40).map(lambda x: x + 1),
        lambda: ListIterDataset(40).filter(lambda x: x % 3 != 1),
        lambda: grain.MapDataset.range(40).to_iter_dataset(),
        lambda: grain.MapDataset.range(40).map(lambda x: x * 2).to_iter_dataset().map(str),
        lambda: grain.IterDataset.mix([ListIterDataset(30), ListIterDataset(50)], [0.3, 0.7]),
    ],
    ids=["source", "map", "filter", "prefetch-reader", "reader-map", "mix"],
)
def test_conformance_kit_checks_give_back(make):
    assert iter(make()).can_unread
    assert testing.check_unread(make)


def test_conformance_kit_skips_iterators_without_give_back():
    assert testing.check_unread(lambda: NoGiveBackIterDataset(10)) is False


def test_conformance_kit_catches_a_wrong_give_back():
    with pytest.raises(AssertionError):
        testing.check_unread(lambda: ListIterDataset(40, wrong=True))


def test_no_module_reaches_a_private_give_back_name():
    found = []
    for root in ("grain_core", "plugins", "examples"):
        for path in sorted((ROOT / root).rglob("*.py")):
            if re.search(r"\b_unread\b", path.read_text()):
                found.append(str(path.relative_to(ROOT)))
    assert not found, f"private give-back name _unread in {found}; use unread()/can_unread"
