"""``filter_ops._after_accepted``: where a filter gives its parent back to (a state taken part-way
through a chunk) is the index after the last accepted element returned, counted from the nearer
end of the chunk; it agrees with counting every accepted position, for any truthy verdicts."""

from __future__ import annotations

import itertools
import random

from grain_core.dataset.filter_ops import _after_accepted, _true_count


def _reference(verdicts, s):
    positions = list(itertools.compress(range(len(verdicts)), verdicts))
    return positions[s - 1] + 1 if s else (positions[0] if positions else len(verdicts))


def test_agrees_with_counting_every_accepted_position():
    rng = random.Random(0)
    values = [0, 1, True, False, 2, "", None, "x", [], [0]]
    for _ in range(3000):
        verdicts = [rng.choice(values) for _ in range(rng.randint(0, 40))]
        accepted = sum(1 for v in verdicts if v)
        for s in range(accepted + 1):
            assert _after_accepted(verdicts, s, accepted) == _reference(verdicts, s), (verdicts, s)


def test_edges():
    assert _after_accepted([], 0, 0) == 0
    assert _after_accepted([False, False], 0, 0) == 2
    assert _after_accepted([False, True, False], 0, 1) == 1
    assert _after_accepted([False, True, False], 1, 1) == 2
    assert _after_accepted([True] * 5, 5, 5) == 5
    assert _after_accepted([True] * 5, 1, 5) == 1


def test_true_count_agrees_with_summing_bools():
    rng = random.Random(1)
    values = [0, 1, True, False, 2, "", None, "x", [], [0], 0.0, -1]
    for _ in range(2000):
        verdicts = [rng.choice(values) for _ in range(rng.randint(0, 60))]
        assert _true_count(verdicts) == sum(map(bool, verdicts))


def test_a_filter_over_given_back_chunks_counts_each_element_once():
    """States at every batch (a give-back per filter chunk end) leave the drop-ratio counts exact:
    every tested element counted once, whatever was remembered and replayed."""
    import grain_core as grain

    ds = (
        grain.MapDataset.range(5000)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .filter(lambda x: x % 3 != 0)
        .batch(32)
    )
    it = iter(ds)
    batches = []
    for b in it:
        batches.append(b.tolist())
        it.get_state()
    assert sum(batches, []) == [x for x in range(5000) if x % 3 != 0]
    filt = it._parent
    assert filt._seen_total == 5000
    assert filt._kept_total == len([x for x in range(5000) if x % 3 != 0])
