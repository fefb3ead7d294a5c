import json

import numpy as np
import pytest
from packing_inputs import _cts, _docs, _src

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError

PACKERS = ["FirstFitPackIterDataset", "BestFitPackIterDataset"]


def _pack(name, docs, **kw):
    kw.setdefault("length_struct", {"inputs": 16, "targets": 16, "id": 4})
    kw.setdefault("num_packing_bins", 3)
    kw.setdefault("meta_features", ("id",))
    return getattr(grain.experimental, name)(_src(docs), **kw)


def _unpack(rows, feature):
    got = []
    for r in rows:
        seg, pos, data = r[f"{feature}_segment_ids"], r[f"{feature}_positions"], r[feature]
        for s in range(1, seg.max() + 1):
            sel = seg == s
            assert (pos[sel] == np.arange(sel.sum())).all()
            got.append(data[sel].tolist())
        assert (data[seg == 0] == 0).all() and (pos[seg == 0] == 0).all()
    return got


@pytest.mark.parametrize("name", PACKERS)
def test_packs_every_token_once(name):
    docs = _docs()
    rows = list(_pack(name, docs, seed=3))
    for r in rows:
        assert r["inputs"].shape == (16,) and r["id"].shape == (4,)
        assert "id_segment_ids" not in r
    for f in ("inputs", "targets"):
        got = sorted(_unpack(rows, f))
        assert got == sorted(d[f].tolist() for d in docs)
    assert len(rows) < len(docs)


@pytest.mark.parametrize("name", PACKERS)
def test_shuffle_bins_and_order(name):
    docs = _docs()
    plain = list(_pack(name, docs, shuffle_bins=False))
    shuffled = list(_pack(name, docs, shuffle_bins=True, seed=1))
    key = lambda r: r["inputs"].tolist()  # noqa: E731
    assert sorted(map(key, plain)) == sorted(map(key, shuffled))
    assert list(map(key, plain)) != list(map(key, shuffled))


def test_first_fit_vs_best_fit():
    docs = [{"t": np.full(n, n)} for n in (5, 7, 3)]
    ff = list(
        grain.experimental.FirstFitPackIterDataset(
            _src(docs), length_struct={"t": 10}, num_packing_bins=2, shuffle_bins=False
        )
    )
    bf = list(
        grain.experimental.BestFitPackIterDataset(
            _src(docs), length_struct={"t": 10}, num_packing_bins=2, shuffle_bins=False
        )
    )
    assert ff[0]["t"].tolist() == [5] * 5 + [3] * 3 + [0, 0]
    assert bf[0]["t"].tolist() == [5] * 5 + [0] * 5
    assert bf[1]["t"].tolist() == [7] * 7 + [3] * 3


def test_max_sequences_per_bin_padding_and_truncation():
    docs = [{"t": np.arange(1, 3)}] * 5 + [{"t": np.arange(1, 30)}]
    rows = list(
        grain.experimental.FirstFitPackIterDataset(
            _src(docs),
            length_struct={"t": 8},
            num_packing_bins=1,
            shuffle_bins=False,
            max_sequences_per_bin=2,
            padding_struct={"t": -1},
            truncate_long_sequences=True,
        )
    )
    assert rows[0]["t"].tolist() == [1, 2, 1, 2, -1, -1, -1, -1]
    assert rows[0]["t_segment_ids"].tolist() == [1, 1, 2, 2, 0, 0, 0, 0]
    assert rows[-1]["t"].tolist() == list(range(1, 9))  # truncated, not dropped


def test_nested_and_multidim_features():
    docs = [{"a": {"x": np.ones((n, 2), np.float32) * n}, "b": np.arange(n)} for n in (2, 3, 4, 5)]
    rows = list(
        grain.experimental.FirstFitPackIterDataset(
            _src(docs),
            length_struct={"a": {"x": 6}, "b": 6},
            num_packing_bins=2,
            shuffle_bins=False,
        )
    )
    assert rows[0]["a"]["x"].shape == (6, 2)
    assert "x_segment_ids" in rows[0]["a"] and "b_positions" in rows[0]
    tup = list(
        grain.experimental.FirstFitPackIterDataset(
            _src([(np.arange(n),) for n in (2, 3)]),
            length_struct=(6,),
            num_packing_bins=1,
            shuffle_bins=False,
        )
    )
    data, seg, pos = tup[0]
    assert seg[0].tolist() == [1, 1, 2, 2, 2, 0]


@pytest.mark.parametrize("name", PACKERS)
@pytest.mark.parametrize("bins", [1, 3])
def test_checkpoints(name, bins):
    docs = _docs(40)
    ds = _pack(name, docs, num_packing_bins=bins, seed=5)
    testing.assert_equal_output_after_checkpoint(ds, checkpoints=range(60))
    testing.check_deterministic(lambda: _pack(name, docs, num_packing_bins=bins, seed=5))


def test_seed_defaults_to_zero_and_ignores_an_upstream_seed():
    """As Grain's packers: ``seed`` defaults to 0, a ``seed()`` upstream does not change the bin
    order, an explicit ``seed`` does."""

    def ids(upstream, **kw):
        ds = grain.experimental.FirstFitPackIterDataset(
            _src(docs).seed(upstream),
            length_struct={"inputs": 16, "targets": 16, "id": 4},
            num_packing_bins=4,
            meta_features=("id",),
            **kw,
        )
        return [r["id"].tolist() for r in ds]

    docs = _docs()
    assert ids(1) == ids(2) == ids(7, seed=0)
    assert ids(1, seed=3) == ids(2, seed=3) != ids(1)


def test_bad_inputs():
    FF = grain.experimental.FirstFitPackIterDataset
    with pytest.raises(ValueError, match="missing"):
        list(FF(_src([{"a": np.arange(3)}]), length_struct={"a": 4, "b": 4}, num_packing_bins=1))
    with pytest.raises(ValueError, match="positive"):
        FF(_src([]), length_struct={"a": 0}, num_packing_bins=1)
    with pytest.raises(ValueError, match="positive"):
        FF(_src([]), length_struct={"a": 3}, num_packing_bins=0)
    with pytest.raises(TypeError):
        FF(_src([]), length_struct={"a": 3.5}, num_packing_bins=1)
    # As in Grain, a scalar packs as a length-1 sequence.
    assert list(FF(_src([{"a": 3}]), length_struct={"a": 4}, num_packing_bins=1))[0]["a"].tolist() == [
        3, 0, 0, 0
    ]
    with pytest.raises(ValueError, match="ragged"):
        list(FF(_src([{"a": [[1, 2], [3]]}]), length_struct={"a": 4}, num_packing_bins=1))
    # A meta feature length_struct lacks is a non-sequence one (as in Grain): the element must
    # have it.
    with pytest.raises(ValueError, match="meta_features"):
        list(FF(_src([{"a": [1]}]), length_struct={"a": 3}, num_packing_bins=1, meta_features=("zz",)))


def test_refuses_foreign_state():
    it = iter(_pack("FirstFitPackIterDataset", _docs(), seed=1))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    with pytest.raises(StateMismatchError):
        iter(_pack("FirstFitPackIterDataset", _docs(), seed=2)).set_state(state)
    with pytest.raises(StateMismatchError):
        iter(_pack("BestFitPackIterDataset", _docs(), seed=1)).set_state(state)


# --- outputs pinned against google's grain 0.2.18 (observed on the same inputs) ----------------------


def _ab(lens):
    return [
        {"a": np.arange(1, n + 1) * 10 + i, "b": np.arange(n) + 100 * i} for i, n in enumerate(lens)
    ]


@pytest.mark.parametrize("name", PACKERS)
def test_rows_match_grain(name):
    rows = list(
        getattr(grain.experimental, name)(
            _src(_ab([3, 2, 4, 5, 1])),
            length_struct={"a": 6, "b": 6},
            num_packing_bins=2,
            shuffle_bins=False,
        )
    )
    assert [r["a"].tolist() for r in rows] == [
        [10, 20, 30, 11, 21, 0],
        [12, 22, 32, 42, 0, 0],
        [13, 23, 33, 43, 53, 14],
    ]
    assert [r["b"].tolist() for r in rows] == [
        [0, 1, 2, 100, 101, 0],
        [200, 201, 202, 203, 0, 0],
        [300, 301, 302, 303, 304, 400],
    ]
    assert [r["a_segment_ids"].tolist() for r in rows] == [
        [1, 1, 1, 2, 2, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 2],
    ]
    assert [r["b_positions"].tolist() for r in rows] == [
        [0, 1, 2, 0, 1, 0],
        [0, 1, 2, 3, 0, 0],
        [0, 1, 2, 3, 4, 0],
    ]


def test_feature_not_in_length_struct_is_dropped_and_a_missing_one_is_named():
    FF = grain.experimental.FirstFitPackIterDataset
    # As in Grain: the packers keep only the features length_struct names.
    rows = list(
        FF(_src([{"a": np.arange(3), "b": np.arange(2)}]), length_struct={"a": 4}, num_packing_bins=1)
    )
    assert sorted(rows[0]) == ["a", "a_positions", "a_segment_ids"]
    assert rows[0]["a"].tolist() == [0, 1, 2, 0]
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        list(FF(_src([{"a": np.arange(3)}]), length_struct={"a": 4, "b": 4}, num_packing_bins=1))
    # ConcatThenSplitIterDataset refuses other features, as Grain's does.
    with pytest.raises(ValueError, match=r"not in length_struct \['b'\]"):
        list(
            grain.experimental.ConcatThenSplitIterDataset(
                _src([{"a": np.arange(3), "b": np.arange(2)}]), length_struct={"a": 4}
            )
        )


def test_dtype_change_between_elements_is_refused():
    FF = grain.experimental.FirstFitPackIterDataset
    docs = [{"a": np.arange(3)}, {"a": np.array([0.5, 1.5])}]
    with pytest.raises(ValueError, match="dtype float64"):
        list(FF(_src(docs), length_struct={"a": 8}, num_packing_bins=1))
    # widening within a kind is fine
    docs = [{"a": np.arange(3, dtype=np.int64)}, {"a": np.arange(2, dtype=np.int32)}]
    assert len(list(FF(_src(docs), length_struct={"a": 8}, num_packing_bins=1))) == 1


def test_long_sequences_are_truncated_never_dropped():
    FF = grain.experimental.FirstFitPackIterDataset
    docs = [{"a": np.arange(1, 10)}, {"a": np.arange(1, 3)}]
    with pytest.raises(ValueError, match="must be truncated to max length.*'a', 9, 4"):
        list(FF(_src(docs), length_struct={"a": 4}, num_packing_bins=1, shuffle_bins=False))
    rows = list(
        FF(
            _src(docs), length_struct={"a": 4}, num_packing_bins=1, shuffle_bins=False,
            truncate_long_sequences=True,
        )
    )
    assert [r["a"].tolist() for r in rows] == [[1, 2, 3, 4], [1, 2, 0, 0]]
    cts = list(_cts(docs, length_struct={"a": 4}))
    assert np.concatenate([r["a"] for r in cts]).tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 0]


def test_concat_then_split_matches_grain_without_meta_features():
    docs = [{"t": np.arange(1, n + 1)} for n in (3, 5, 2, 7, 1, 4)]
    rows = list(_cts(docs, length_struct={"t": 6}))
    assert [r["t"].tolist() for r in rows] == [
        [1, 2, 3, 1, 2, 3],
        [4, 5, 1, 2, 1, 2],
        [3, 4, 5, 6, 7, 1],
        [1, 2, 3, 4, 0, 0],
    ]
    assert [r["t_segment_ids"].tolist() for r in rows] == [
        [1, 1, 1, 2, 2, 2],
        [1, 1, 2, 2, 3, 3],
        [1, 1, 1, 1, 1, 2],
        [1, 1, 1, 1, 0, 0],
    ]


def test_cli_lists_the_plugin_with_its_version():
    from grain_core import testing as kit

    kit.check_plugin_listed(
        "packing",
        "grain-plugin-packing",
        ["FirstFitPackIterDataset", "BestFitPackIterDataset", "ConcatThenSplitIterDataset"],
    )


# --- pack_alignment_struct, empty elements, shuffle_bins_group_by_feature ----------------------------


def _aligned_docs():
    lens = [(3, 2), (2, 5), (4, 1), (1, 1), (5, 3)]
    return [
        {"a": np.arange(1, n + 1) * 10 + i, "b": np.arange(m) + 100 * i}
        for i, (n, m) in enumerate(lens)
    ]


@pytest.mark.parametrize("name", PACKERS)
def test_pack_alignment_matches_grain(name):
    # Pinned against grain 0.2.18 (first and best fit give the same rows here).
    rows = list(
        getattr(grain.experimental, name)(
            _src(_aligned_docs()),
            length_struct={"a": 10, "b": 10},
            num_packing_bins=2,
            shuffle_bins=False,
            pack_alignment_struct={"a": 2, "b": 3},
            padding_struct={"a": -1, "b": -2},
        )
    )
    assert [r["a"].tolist() for r in rows] == [
        [10, 20, 30, -1, 11, 21, 12, 22, 32, 42],
        [13, -1, 14, 24, 34, 44, 54, -1, -1, -1],
    ]
    assert [r["a_segment_ids"].tolist() for r in rows] == [
        [1, 1, 1, 0, 2, 2, 3, 3, 3, 3],
        [1, 0, 2, 2, 2, 2, 2, 0, 0, 0],
    ]
    assert [r["a_positions"].tolist() for r in rows] == [
        [0, 1, 2, 0, 0, 1, 0, 1, 2, 3],
        [0, 0, 0, 1, 2, 3, 4, 0, 0, 0],
    ]
    assert [r["b"].tolist() for r in rows] == [
        [0, 1, -2, 100, 101, 102, 103, 104, -2, 200],
        [300, -2, -2, 400, 401, 402, -2, -2, -2, -2],
    ]
    assert [r["b_segment_ids"].tolist() for r in rows] == [
        [1, 1, 0, 2, 2, 2, 2, 2, 0, 3],
        [1, 0, 0, 2, 2, 2, 0, 0, 0, 0],
    ]
    assert [r["b_positions"].tolist() for r in rows] == [
        [0, 1, 0, 0, 1, 2, 3, 4, 0, 0],
        [0, 0, 0, 0, 1, 2, 0, 0, 0, 0],
    ]
    # Alignment 4 on a target of 10: a length-1 sequence still fits at cell 8 (unaligned fit).
    rows = list(
        getattr(grain.experimental, name)(
            _src(_aligned_docs()),
            length_struct={"a": 10, "b": 10},
            num_packing_bins=2,
            shuffle_bins=False,
            pack_alignment_struct={"a": 4},
        )
    )
    assert [r["a"].tolist() for r in rows] == [
        [10, 20, 30, 0, 11, 21, 0, 0, 13, 0],
        [12, 22, 32, 42, 14, 24, 34, 44, 54, 0],
    ]
    assert [r["b_segment_ids"].tolist() for r in rows] == [
        [1, 1, 2, 2, 2, 2, 2, 3, 0, 0],
        [1, 2, 2, 2, 0, 0, 0, 0, 0, 0],
    ]


@pytest.mark.parametrize("name", PACKERS)
def test_alignment_past_the_target_closes_the_bin(name):
    # Pinned against grain 0.2.18: after [4, 4, 1] tokens with alignment 4 the next free cell of `a`
    # is 12 > 10, so even an element with an empty `a` goes to the next bin.
    lens = [(4, 1), (4, 1), (1, 1), (0, 1), (2, 1)]
    docs = [
        {"a": np.arange(1, n + 1) + 10 * i, "b": np.arange(1, m + 1)}
        for i, (n, m) in enumerate(lens)
    ]
    rows = list(
        getattr(grain.experimental, name)(
            _src(docs),
            length_struct={"a": 10, "b": 10},
            num_packing_bins=2,
            shuffle_bins=False,
            pack_alignment_struct={"a": 4, "b": 1},
        )
    )
    assert [r["a"].tolist() for r in rows] == [
        [1, 2, 3, 4, 11, 12, 13, 14, 21, 0],
        [41, 42, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert [r["a_segment_ids"].tolist() for r in rows] == [
        [1, 1, 1, 1, 2, 2, 2, 2, 3, 0],
        [2, 2, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert [r["b_segment_ids"].tolist() for r in rows] == [
        [1, 2, 3, 0, 0, 0, 0, 0, 0, 0],
        [1, 2, 0, 0, 0, 0, 0, 0, 0, 0],
    ]


def test_empty_elements_take_segment_ids_like_grain():
    FF = grain.experimental.FirstFitPackIterDataset
    docs = [{"a": np.arange(1, n + 1)} for n in (0, 3, 0, 2, 0, 0, 4)]
    rows = list(FF(_src(docs), length_struct={"a": 5}, num_packing_bins=2, shuffle_bins=False))
    assert [r["a"].tolist() for r in rows] == [[1, 2, 3, 1, 2], [1, 2, 3, 4, 0]]
    assert [r["a_segment_ids"].tolist() for r in rows] == [[2, 2, 2, 4, 4], [1, 1, 1, 1, 0]]
    rows = list(
        FF(
            _src(docs),
            length_struct={"a": 5},
            num_packing_bins=2,
            shuffle_bins=False,
            max_sequences_per_bin=2,
        )
    )
    assert [r["a_segment_ids"].tolist() for r in rows] == [
        [2, 2, 2, 0, 0],
        [2, 2, 0, 0, 0],
        [0, 0, 0, 0, 0],  # a bin holding only empty sequences is yielded, as grain does
        [1, 1, 1, 1, 0],
    ]


def _grouped_docs():
    lens = [(4, 3), (3, 1), (5, 2), (2, 3), (4, 1), (4, 2), (3, 0)]
    return [
        {"a": np.arange(1, n + 1) + 10 * i, "g": np.array([g])} for i, (n, g) in enumerate(lens)
    ]


def _grouped(shuffle, group_by="g", seed=0, **kw):
    return grain.experimental.FirstFitPackIterDataset(
        _src(_grouped_docs()),
        length_struct={"a": 5, "g": 3},
        num_packing_bins=10,
        shuffle_bins=shuffle,
        seed=seed,
        shuffle_bins_group_by_feature=group_by,
        meta_features=("g",),
        **kw,
    )


def test_shuffle_bins_group_by_feature():
    key = lambda r: r["a"].tolist()  # noqa: E731
    for seed in range(6):
        rows = list(_grouped(True, seed=seed))
        # grain 0.2.18 gives, for every seed, groups in this order (ties in shuffled order).
        # Means of the distinct non-zero values: 0, 1, 2, 2, 2 ([1, 3]), 3.
        groups = [r["g"].tolist() for r in rows]
        assert groups[:2] == [[0, 0, 0], [1, 0, 0]] and groups[5] == [3, 0, 0]
        assert sorted(groups[2:5]) == [[1, 3, 0], [2, 0, 0], [2, 0, 0]]
        # Ties keep the order of plain shuffling.
        plain = [key(r) for r in _grouped(True, group_by=None, seed=seed)]
        assert sorted(map(key, rows)) == sorted(plain)
        tied = [key(r) for r in rows[2:5]]
        assert tied == [k for k in plain if k in tied]
    # Padding counts among the values, as in grain: [1, -1] has mean 0, [1, 3, -1] mean 1.
    rows = list(_grouped(True, padding_struct={"g": -1}))
    assert [r["g"].tolist() for r in rows[:4]] == [
        [0, -1, -1],
        [1, -1, -1],
        [2, -1, -1],
        [2, -1, -1],
    ]
    # Without shuffle_bins the grouping is not applied (grain ignores it too).
    assert [key(r) for r in _grouped(False)] == [key(r) for r in _grouped(False, group_by=None)]
    # Grouping by a sequence feature works on its packed values.
    rows = list(_grouped(True, group_by="a"))
    means = []
    for r in rows:
        u = np.unique(r["a"])
        means.append(u.sum() / max(np.count_nonzero(u), 1))
    assert means == sorted(means)


@pytest.mark.parametrize("name", PACKERS)
def test_alignment_and_group_by_checkpoints(name):
    docs = _docs(40)
    mk = lambda: _pack(  # noqa: E731
        name,
        docs,
        num_packing_bins=3,
        seed=4,
        pack_alignment_struct={"inputs": 4, "targets": 3},
        shuffle_bins_group_by_feature="id",
    )
    testing.assert_equal_output_after_checkpoint(mk(), checkpoints=range(80))
    testing.check_deterministic(mk)
    got = sorted(_unpack(list(mk()), "inputs"))
    assert got == sorted(d["inputs"].tolist() for d in docs)
    for r in mk():
        starts = np.flatnonzero((r["inputs_positions"] == 0) & (r["inputs_segment_ids"] > 0))
        assert (starts % 4 == 0).all()


def test_alignment_and_group_by_bad_inputs():
    FF = grain.experimental.FirstFitPackIterDataset
    with pytest.raises(ValueError, match=r"pack_alignment_struct\[a\] must be positive"):
        FF(_src([]), length_struct={"a": 8}, num_packing_bins=1, pack_alignment_struct={"a": 0})
    with pytest.raises(TypeError, match="pack_alignment_struct"):
        FF(_src([]), length_struct={"a": 8}, num_packing_bins=1, pack_alignment_struct={"a": 2.0})
    with pytest.raises(ValueError, match=r"pack_alignment_struct has features \['b'\]"):
        FF(_src([]), length_struct={"a": 8}, num_packing_bins=1, pack_alignment_struct={"b": 2})
    with pytest.raises(ValueError, match="shuffle_bins_group_by_feature 'zz' is not a feature"):
        FF(_src([]), length_struct={"a": 8}, num_packing_bins=1, shuffle_bins_group_by_feature="zz")


def test_alignment_state_refuses_other_pipelines():
    docs = _docs()
    it = iter(_pack("FirstFitPackIterDataset", docs, seed=1, pack_alignment_struct={"inputs": 2}))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    with pytest.raises(StateMismatchError):
        iter(_pack("FirstFitPackIterDataset", docs, seed=1)).set_state(state)
    with pytest.raises(StateMismatchError):
        iter(
            _pack(
                "FirstFitPackIterDataset",
                docs,
                seed=1,
                pack_alignment_struct={"inputs": 2},
                shuffle_bins_group_by_feature="id",
            )
        ).set_state(state)


@pytest.mark.parametrize("name", PACKERS)
def test_state_without_counter_is_refused_and_changes_nothing(name):
    # ``counter`` (rows yielded so far) seeds the bin shuffle as in Grain; a state saved before the
    # field existed cannot say where the shuffle stands, so it is refused with the field named.
    ds = _pack(name, _docs(40), num_packing_bins=3, seed=5)
    it = iter(ds)
    head = [next(it) for _ in range(4)]
    state = it.get_state()
    assert state["counter"] == 4
    old = {k: v for k, v in state.items() if k != "counter"}
    fresh = iter(ds)
    with pytest.raises(StateMismatchError, match="counter"):
        fresh.set_state(old)
    first = next(fresh)
    assert sorted(first) == sorted(head[0])
    assert all(np.array_equal(first[k], head[0][k]) for k in first)


@pytest.mark.parametrize("name", PACKERS)
def test_bin_order_is_seeded_with_rows_yielded_so_far(name):
    # Grain: round r's bins are permuted by np.random.default_rng(seed + rows yielded before it).
    docs = [{"t": np.full(3, i + 1)} for i in range(12)]
    cls = getattr(grain.experimental, name)
    rows = [int(r["t"][0]) for r in cls(_src(docs), length_struct={"t": 4}, num_packing_bins=3, seed=0)]
    expected = []
    for r in range(4):
        perm = np.random.default_rng(0 + 3 * r).permuted(np.arange(3))
        expected += [3 * r + 1 + int(b) for b in perm]
    assert rows == expected
