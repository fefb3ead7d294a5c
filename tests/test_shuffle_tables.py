"""``grain_core.shuffle_cipher.shuffle_tables`` computes, for many seeds at once, exactly the permutations
``IndexShuffle`` gives one seed at a time (Grain's ``index_shuffle``), on both of its paths."""

from __future__ import annotations

import numpy as np
import pytest

from grain_core import shuffle_cipher


@pytest.mark.parametrize("max_index", [0, 1, 7, 254, 255, 299, 999, 4095, 16383, 16384, 70000])
def test_rows_equal_index_shuffle(max_index):
    rng = np.random.default_rng(max_index)
    chosen = [int(x) for x in rng.integers(0, 2**32, size=5)] + [0, 2**32 - 1]
    tables = shuffle_cipher.shuffle_tables(max_index, chosen)
    assert tables.shape == (len(chosen), max_index + 1)
    span = np.arange(max_index + 1)
    for row, seed in zip(tables, chosen):
        np.testing.assert_array_equal(row, shuffle_cipher.IndexShuffle(max_index, seed)(span))
        assert sorted(row.tolist()) == span.tolist()


def test_many_seeds_span_several_passes():
    chosen = list(range(40))  # more tables than one vectorised pass holds
    tables = shuffle_cipher.shuffle_tables(999, chosen)
    span = np.arange(1000)
    for seed in (0, 31, 32, 39):
        np.testing.assert_array_equal(tables[seed], shuffle_cipher.IndexShuffle(999, seed)(span))


def test_bad_input():
    with pytest.raises(ValueError):
        shuffle_cipher.shuffle_tables(10, [-1])
    assert shuffle_cipher.shuffle_tables(10, []).shape == (0, 11)


@pytest.mark.parametrize("max_index", [255, 999, 16383])
@pytest.mark.parametrize("count", [1, 8, 13, 40])
def test_every_row_of_every_pass(max_index, count):
    # The walk path runs seeds in passes of eight tables through reused buffers: a first pass
    # smaller than eight, exact passes, and a short last pass must each give every row exactly.
    chosen = [(7919 * i + max_index) % 2**32 for i in range(count)]
    tables = shuffle_cipher.shuffle_tables(max_index, chosen)
    span = np.arange(max_index + 1)
    for row, seed in zip(tables, chosen):
        np.testing.assert_array_equal(row, shuffle_cipher.IndexShuffle(max_index, seed)(span))


@pytest.mark.parametrize("rounds", [4, 6, 8])
def test_rounds(rounds):
    # The first double round is a permutation of a shared table's rows, each further one a
    # gather: 4 rounds use one gather, 6 and 8 chain more.
    chosen = [1, 2**31, 12345]
    tables = shuffle_cipher.shuffle_tables(999, chosen, rounds=rounds)
    span = np.arange(1000)
    for row, seed in zip(tables, chosen):
        np.testing.assert_array_equal(row, shuffle_cipher.IndexShuffle(999, seed, rounds)(span))
    if rounds != 4:
        assert not np.array_equal(tables, shuffle_cipher.shuffle_tables(999, chosen))


@pytest.mark.parametrize("rounds", [4, 6, 8])
def test_table_cipher_equals_round_by_round_cipher(rounds):
    # The 16-bit cipher as lookups in one double-round table (used by both shuffle_tables and
    # IndexShuffle's cached map) against the cipher computed round by round.
    domain = np.arange(1 << 16, dtype=np.uint64)
    out, scratch = np.empty(1 << 16, np.int64), np.empty(1 << 16, np.int64)
    for seed in (0, 1, 977, 2**32 - 1):
        keys = [k & 0xFF for k in shuffle_cipher._seed_seq_words(seed, rounds)]
        shuffle_cipher._encrypt_domain_16(keys, out, scratch, tag=5 << 16)
        expected = shuffle_cipher.IndexShuffle(65535, seed, rounds)._encrypt_array(domain).astype(np.int64)
        np.testing.assert_array_equal(out, expected | (5 << 16))


@pytest.mark.parametrize("max_index", [1, 31, 999, 40_000, 65_535, 65_536])
def test_walk_one_by_one_then_table(max_index):
    # A 16-bit-block shuffle walks its first indices one by one (Python ints), then maps through
    # its whole table once they would cost enough cipher steps: both give Grain's map.
    table = shuffle_cipher._small_table(max_index, 77, 4)
    shuffle = shuffle_cipher.IndexShuffle(max_index, 77, grain_exact=True)  # 65,536: Grain's short block
    first = [0, max_index, max_index // 2]
    assert [shuffle(i) for i in first] == [int(table[i]) for i in first]
    walked = shuffle._table is None
    assert walked == (max_index >= 999)  # tiny ranges have long walks: the table comes at once
    everything = np.arange(max_index + 1)
    np.testing.assert_array_equal(shuffle(everything), table)
    assert shuffle._table is not None
    assert sorted(table.tolist()) == (
        everything.tolist() if max_index < 65_536 else sorted([*range(65_536), int(table[0])])
    )


def test_pickled_shuffle_leaves_its_table_behind():
    # A dataset holding a shuffle is pickled to every worker process: the table (up to 512 KiB)
    # is derived data, rebuilt where it is used.
    import pickle

    shuffle = shuffle_cipher.IndexShuffle(40_000, 3)
    everything = np.arange(40_001)
    expected = shuffle(everything)
    assert shuffle._table is not None
    data = pickle.dumps(shuffle)
    assert len(data) < 4096
    copy = pickle.loads(data)
    assert copy._table is None
    np.testing.assert_array_equal(copy(everything), expected)
