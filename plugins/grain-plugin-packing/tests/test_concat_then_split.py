"""ConcatThenSplitIterDataset: meta features, pass-through features, BOS, checkpoints, bad inputs."""

import json

import numpy as np
import pytest
from packing_inputs import _cts, _docs

from grain_core import testing
from grain_core.state import StateMismatchError


def test_concat_then_split_meta_features_are_not_split():
    # Pinned against grain 0.2.18: meta features have their own target, are never split (every
    # piece carries the whole meta feature) and an element whose meta feature does not fit the rest
    # of the row starts a new row; an element with empty sequences still takes a segment id.
    docs = [
        {"t": np.arange(1, n + 1), "m": np.full(k, 10 + i)}
        for i, (n, k) in enumerate([(3, 1), (5, 2), (2, 1), (7, 1), (0, 1), (4, 2)])
    ]
    for split_full in (True, False):
        rows = list(
            _cts(
                docs,
                length_struct={"t": 6, "m": 3},
                meta_features=("m",),
                split_full_length_features=split_full,
            )
        )
        assert [r["t"].tolist() for r in rows] == [
            [1, 2, 3, 1, 2, 3],
            [4, 5, 1, 2, 0, 0],
            [1, 2, 3, 4, 5, 6],
            [7, 0, 0, 0, 0, 0],
            [1, 2, 3, 4, 0, 0],
        ]
        assert [r["m"].tolist() for r in rows] == [
            [10, 11, 11],
            [11, 11, 12],
            [13, 0, 0],
            [13, 14, 0],
            [15, 15, 0],
        ]
        assert [r["t_segment_ids"].tolist() for r in rows] == [
            [1, 1, 1, 2, 2, 2],
            [1, 1, 2, 2, 0, 0],
            [1, 1, 1, 1, 1, 1],
            [1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0],
        ]
        assert [r["t_positions"].tolist() for r in rows][:2] == [
            [0, 1, 2, 0, 1, 2],
            [0, 1, 0, 1, 0, 0],
        ]
        assert "m_segment_ids" not in rows[0]


def test_concat_then_split_long_meta_feature_is_truncated():
    # grain fails on a meta feature longer than its target; here it is truncated to the target and
    # its element is still packed (and split) as usual.
    docs = [
        {"t": np.arange(1, 7), "m": np.arange(1, 6)},
        {"t": np.arange(1, 3), "m": np.arange(1, 2)},
    ]
    rows = list(_cts(docs, length_struct={"t": 4, "m": 3}, meta_features=("m",)))
    assert [r["t"].tolist() for r in rows] == [[1, 2, 3, 4], [5, 6, 0, 0], [1, 2, 0, 0]]
    assert [r["m"].tolist() for r in rows] == [[1, 2, 3], [1, 2, 3], [1, 0, 0]]


def test_concat_then_split_empty_elements_take_segment_ids():
    # Pinned against grain 0.2.18.
    docs = [{"t": np.arange(1, n + 1)} for n in (3, 0, 2, 0, 1, 0)]
    rows = list(_cts(docs, length_struct={"t": 3}))
    assert [r["t"].tolist() for r in rows] == [[1, 2, 3], [1, 2, 1]]
    assert [r["t_segment_ids"].tolist() for r in rows] == [[1, 1, 1], [1, 1, 3]]


def test_concat_then_split_bos():
    # Pinned against grain 0.2.18: the first token of every piece of the bos_features becomes
    # BOS; without bos_features nothing changes.
    docs = [{"t": np.arange(1, n + 1)} for n in (6, 6)]
    plain = list(
        _cts(docs, length_struct={"t": 4}, bos_handling="replace_first_token_with_bos", bos_token_id=99)
    )
    assert [r["t"].tolist() for r in plain] == [[1, 2, 3, 4], [5, 6, 1, 2], [3, 4, 5, 6]]
    rows = list(
        _cts(
            docs,
            length_struct={"t": 4},
            bos_handling="replace_first_token_with_bos",
            bos_token_id=99,
            bos_features=["t"],
        )
    )
    assert [r["t"].tolist() for r in rows] == [[99, 2, 3, 4], [99, 6, 99, 2], [99, 4, 5, 6]]
    assert [r["t_positions"].tolist() for r in rows] == [[0, 1, 2, 3], [0, 1, 0, 1], [0, 1, 2, 3]]


def _numbered(lens):
    return [{"t": np.arange(1, n + 1) + 10 * i} for i, n in enumerate(lens)]


def test_concat_then_split_full_length_features_pass_through():
    # Pinned against grain 0.2.18: full-length elements are rows of their own, queued behind the
    # row being filled when they were read.
    rows = list(
        _cts(
            _numbered([3, 6, 2, 6, 5, 1, 6]),
            length_struct={"t": 6},
            split_full_length_features=False,
        )
    )
    assert [r["t"].tolist() for r in rows] == [
        [1, 2, 3, 21, 22, 41],
        [11, 12, 13, 14, 15, 16],
        [31, 32, 33, 34, 35, 36],
        [42, 43, 44, 45, 51, 0],
        [61, 62, 63, 64, 65, 66],
    ]
    assert [r["t_segment_ids"].tolist() for r in rows] == [
        [1, 1, 1, 2, 2, 3],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 2, 0],
        [1, 1, 1, 1, 1, 1],
    ]
    assert [r["t_positions"].tolist() for r in rows][3] == [0, 1, 2, 3, 0, 0]
    rows = list(
        _cts(_numbered([6, 6, 3, 6]), length_struct={"t": 6}, split_full_length_features=False)
    )
    assert [r["t"].tolist() for r in rows] == [
        [21, 22, 23, 0, 0, 0],
        [1, 2, 3, 4, 5, 6],
        [11, 12, 13, 14, 15, 16],
        [31, 32, 33, 34, 35, 36],
    ]
    # Longer elements are still split, never dropped.
    rows = list(
        _cts(_numbered([2, 7, 6, 3]), length_struct={"t": 6}, split_full_length_features=False)
    )
    assert [r["t"].tolist() for r in rows] == [
        [1, 2, 11, 12, 13, 14],
        [15, 16, 17, 31, 32, 33],
        [21, 22, 23, 24, 25, 26],
    ]


@pytest.mark.parametrize("split_full", [True, False])
def test_concat_then_split_checkpoints_with_meta_and_pass_through(split_full):
    rng = np.random.default_rng(7)
    docs = [
        {
            "t": np.arange(int(rng.choice([0, 5, 5, int(rng.integers(1, 14))]))) + 100 * i,
            "m": np.full(int(rng.integers(0, 4)), i + 1),
        }
        for i in range(40)
    ]
    mk = lambda: _cts(  # noqa: E731
        docs,
        length_struct={"t": 5, "m": 3},
        meta_features=("m",),
        split_full_length_features=split_full,
    )
    testing.assert_equal_output_after_checkpoint(mk(), checkpoints=range(200))
    testing.check_deterministic(mk)
    it = iter(mk())
    states = []
    for _ in it:
        states.append(it.get_state())
    replays = [s["replay"] for s in states]
    assert (max(replays) > 0) == (not split_full)  # queued rows are replayed on restore


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
    _cts([], length_struct={"a": 4, "b": 5}, meta_features=("b",))  # meta targets are their own
    with pytest.raises(ValueError, match="bos_token_id"):
        _cts([], length_struct={"a": 4}, bos_handling="replace_first_token_with_bos")
    with pytest.raises(ValueError, match="bos_handling"):
        _cts([], length_struct={"a": 4}, bos_handling="nope")
    with pytest.raises(ValueError, match="do_nothing"):
        _cts([], length_struct={"a": 4}, bos_token_id=1)
    with pytest.raises(ValueError, match="overlap"):
        _cts(
            [],
            length_struct={"a": 4, "m": 2},
            meta_features=("m",),
            bos_handling="replace_first_token_with_bos",
            bos_features=("a", "m"),
            bos_token_id=1,
        )
    with pytest.raises(TypeError, match="split_full_length_features"):
        _cts([], length_struct={"a": 4}, split_full_length_features="no")
    with pytest.raises(ValueError, match="missing"):
        list(_cts([{"a": np.arange(3)}], length_struct={"b": 4}))


def test_concat_then_split_refuses_foreign_state():
    docs = _numbered([3, 6, 2, 6, 5])
    it = iter(_cts(docs, length_struct={"t": 6}, split_full_length_features=False))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    with pytest.raises(StateMismatchError):
        iter(_cts(docs, length_struct={"t": 6})).set_state(state)
    with pytest.raises(StateMismatchError):
        iter(_cts(docs, length_struct={"t": 5}, split_full_length_features=False)).set_state(state)
