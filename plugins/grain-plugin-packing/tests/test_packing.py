import json

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError

PACKERS = ["FirstFitPackIterDataset", "BestFitPackIterDataset"]


def _docs(n=60, seed=0, hi=12):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = int(rng.integers(1, hi))
        b = int(rng.integers(1, hi))
        out.append(
            {
                "inputs": np.arange(a) + 100 * i,
                "targets": np.arange(b) + 100 * i,
                "id": np.array([i]),
            }
        )
    return out


def _src(docs):
    return grain.MapDataset.source(docs).to_iter_dataset()


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


def test_seed_from_pipeline():
    docs = _docs()
    a = grain.experimental.FirstFitPackIterDataset(
        _src(docs).seed(1),
        length_struct={"inputs": 16, "targets": 16, "id": 4},
        num_packing_bins=4,
        meta_features=("id",),
    )
    b = grain.experimental.FirstFitPackIterDataset(
        _src(docs).seed(2),
        length_struct={"inputs": 16, "targets": 16, "id": 4},
        num_packing_bins=4,
        meta_features=("id",),
    )
    assert [r["id"].tolist() for r in a] != [r["id"].tolist() for r in b]


def test_bad_inputs():
    FF = grain.experimental.FirstFitPackIterDataset
    with pytest.raises(ValueError, match="missing"):
        list(
            FF(
                _src([{"a": np.arange(3), "b": np.arange(2)}]),
                length_struct={"a": 4},
                num_packing_bins=1,
            )
        )
    with pytest.raises(ValueError, match="missing"):
        list(FF(_src([{"a": np.arange(3)}]), length_struct={"a": 4, "b": 4}, num_packing_bins=1))
    with pytest.raises(ValueError, match="positive"):
        FF(_src([]), length_struct={"a": 0}, num_packing_bins=1)
    with pytest.raises(ValueError, match="positive"):
        FF(_src([]), length_struct={"a": 3}, num_packing_bins=0)
    with pytest.raises(TypeError):
        FF(_src([]), length_struct={"a": 3.5}, num_packing_bins=1)
    with pytest.raises(ValueError, match="scalar"):
        list(FF(_src([{"a": 3}]), length_struct={"a": 4}, num_packing_bins=1))
    with pytest.raises(ValueError, match="ragged"):
        list(FF(_src([{"a": [[1, 2], [3]]}]), length_struct={"a": 4}, num_packing_bins=1))
    with pytest.raises(ValueError, match="meta_features"):
        FF(_src([]), length_struct={"a": 3}, num_packing_bins=1, meta_features=("zz",))


def test_refuses_foreign_state():
    it = iter(_pack("FirstFitPackIterDataset", _docs(), seed=1))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    with pytest.raises(StateMismatchError):
        iter(_pack("FirstFitPackIterDataset", _docs(), seed=2)).set_state(state)
    with pytest.raises(StateMismatchError):
        iter(_pack("BestFitPackIterDataset", _docs(), seed=1)).set_state(state)


# --- ConcatThenSplit ---------------------------------------------------------------------------------


def _cts(docs, **kw):
    return grain.experimental.ConcatThenSplitIterDataset(_src(docs), **kw)


def test_concat_then_split_rows():
    docs = [{"t": np.arange(1, n + 1), "m": np.full(n, n)} for n in (3, 5, 2, 7, 1, 4)]
    rows = list(_cts(docs, length_struct={"t": 8, "m": 8}, meta_features=("m",)))
    assert [r["t"].tolist() for r in rows] == [
        [1, 2, 3, 1, 2, 3, 4, 5],
        [1, 2, 1, 2, 3, 4, 5, 6],
        [7, 1, 1, 2, 3, 4, 0, 0],
    ]
    assert rows[2]["t_segment_ids"].tolist() == [1, 2, 3, 3, 3, 3, 0, 0]
    assert rows[2]["t_positions"].tolist() == [0, 0, 0, 1, 2, 3, 0, 0]
    assert "m_segment_ids" not in rows[0]
    assert np.concatenate([r["t"][r["t_segment_ids"] > 0] for r in rows]).size == 22


def test_concat_then_split_bos():
    docs = [{"t": np.arange(1, n + 1)} for n in (6, 6)]
    rows = list(
        _cts(
            docs,
            length_struct={"t": 4},
            bos_handling="replace_first_token_with_bos",
            bos_token_id=99,
        )
    )
    assert [r["t"].tolist() for r in rows] == [[1, 2, 3, 4], [99, 6, 1, 2], [99, 4, 5, 6]]


def test_concat_then_split_checkpoints():
    docs = _docs(30, hi=20)
    docs = [{"inputs": d["inputs"], "id": np.full(len(d["inputs"]), i)} for i, d in enumerate(docs)]
    mk = lambda: _cts(docs, length_struct={"inputs": 8, "id": 8}, meta_features=("id",))  # noqa: E731
    testing.assert_equal_output_after_checkpoint(mk(), checkpoints=range(60))
    testing.check_deterministic(mk)


def test_concat_then_split_bad_inputs():
    with pytest.raises(ValueError, match="share a length"):
        list(_cts([{"a": np.arange(3), "b": np.arange(2)}], length_struct={"a": 4, "b": 4}))
    with pytest.raises(ValueError, match="equal"):
        _cts([], length_struct={"a": 4, "b": 5})
    with pytest.raises(ValueError, match="bos_token_id"):
        _cts([], length_struct={"a": 4}, bos_handling="replace_first_token_with_bos")
    with pytest.raises(ValueError, match="bos_handling"):
        _cts([], length_struct={"a": 4}, bos_handling="nope")
    with pytest.raises(ValueError, match="missing"):
        list(_cts([{"a": np.arange(3)}], length_struct={"b": 4}))


# --- outputs pinned against google's grain 0.2.18 (observed on the same inputs) ----------------------


def _ab(lens):
    return [{"a": np.arange(1, n + 1) * 10 + i, "b": np.arange(n) + 100 * i} for i, n in enumerate(lens)]


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


def test_feature_missing_from_length_struct_is_named():
    FF = grain.experimental.FirstFitPackIterDataset
    with pytest.raises(ValueError, match=r"not in length_struct \['b'\]"):
        list(FF(_src([{"a": np.arange(3), "b": np.arange(2)}]), length_struct={"a": 4}, num_packing_bins=1))


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
    rows = list(FF(_src(docs), length_struct={"a": 4}, num_packing_bins=1, shuffle_bins=False))
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

    kit.check_plugin_listed("packing", "grain-plugin-packing", ["FirstFitPackIterDataset", "BestFitPackIterDataset", "ConcatThenSplitIterDataset"])
