"""Leaf columns (msprobe_cmp/dump/schema.py): the reader keeps a file's tensor leaves column-wise, a TensorLeaf is a
view of one row, an entry holds a layout and its first row.  Expected values are written out from the JSON given."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest

from msprobe_cmp.dump.schema import (
    Entry,
    LeafColumns,
    Seq,
    TensorLeaf,
    ValueLeaf,
    leaf_row_groups,
    tensor_leaf_rows,
)
from msprobe_cmp.dump.serde import entries_from_json


def _t(mx: object = 1.5, **kw: object) -> dict:
    return {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 3], "Max": mx, "Min": -0.25, "Mean": 0.125,
            "Norm": 2.0, **kw}


def _read(data: dict) -> tuple[Entry, ...]:
    return entries_from_json(data, "dump.json")


def test_leaves_of_a_file_are_rows_of_one_columns_object_in_file_order() -> None:
    entries = _read({
        "A.f.0.forward": {"input_args": [_t(1.0), {"type": "int", "value": 3}], "input_kwargs": {},
                          "output": [_t(2.0)]},
        "A.f.1.forward": {"input_args": [_t(3.0), None], "input_kwargs": {"k": _t(4.0)}, "output": [_t(5.0)]},
    })
    first, second = entries
    leaves = [leaf for e in entries for _, leaf in e.leaves() if isinstance(leaf, TensorLeaf)]
    assert [leaf.max for leaf in leaves] == [1.0, 2.0, 3.0, 4.0, 5.0]
    cols = leaves[0].columns[0]
    assert [leaf.columns for leaf in leaves] == [(cols, i) for i in range(5)]
    assert len(cols) == 5
    # the rows of each entry's tensor leaves, in file order; a value leaf and a null are no rows
    assert first.leaf_rows() == (cols, 0, (0, 1))
    assert second.leaf_rows() == (cols, 2, (0, 1, 2))
    (got_cols, rows), = tensor_leaf_rows(entries)
    assert got_cols is cols and rows.dtype == np.int64 and rows.tolist() == [0, 1, 2, 3, 4]
    assert first.paths() == ("input.0", "input.1", "output.0")
    assert first.flat()[1][1] == ValueLeaf("int", 3)


def test_columns_keep_every_field_and_tell_null_from_nan() -> None:
    data = {"A.f.0.forward": {"input_args": [
        _t(None, Mean=math.nan, md5="00ab12cd", data_name="A.f.0.forward.input.0.npy", requires_grad=True,
           nan_count=1, pos_inf_count=0, neg_inf_count=2),
        {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [], "Max": 7, "Min": 7, "Mean": 7, "Norm": 7,
         "requires_grad": False, "nan_count": 9, "pos_inf_count": 0, "neg_inf_count": 0},
    ], "input_kwargs": {}, "output": []}}
    (entry,) = _read(data)
    a, b = entry.flat()[1]
    assert isinstance(a, TensorLeaf) and isinstance(b, TensorLeaf)
    assert a.max is None and math.isnan(a.mean) and a.min == -0.25 and a.norm == 2.0
    assert (a.md5, a.data_name, a.requires_grad, a.shape, a.numel) == (
        "00ab12cd", "A.f.0.forward.input.0.npy", True, (2, 3), 6)
    assert a.nonfinite_counts == (1, 0, 2) and not a.has_invalid_nonfinite_counts
    assert a.extra == (("nan_count", 1), ("pos_inf_count", 0), ("neg_inf_count", 2))
    assert (b.type, b.dtype, b.shape, b.stats, b.md5, b.requires_grad) == (
        "torch.Tensor", "torch.int64", (), (7.0, 7.0, 7.0, 7.0), None, False)
    assert type(b.max) is float
    assert b.nonfinite_counts is None and b.has_invalid_nonfinite_counts  # 9 NaNs in a 1-element tensor
    cols = a.columns[0]
    stats = cols.stats_array()
    assert stats.shape == (2, 4) and not stats.flags.writeable
    assert np.isnan(stats[0, 0]) and np.isnan(stats[0, 2]) and stats[1].tolist() == [7.0] * 4
    assert cols.defined_array().tolist() == [[False, True, True, True], [True] * 4]
    md5 = cols.code_array("md5_code")
    assert md5[1] == -1 and cols.strings[md5[0]] == "00ab12cd"
    assert cols.shapes[cols.code_array("shape_code")[1]] == ()
    counts, valid = cols.counts_array()
    assert counts.tolist() == [[1, 0, 2], [0, 0, 0]] and valid.tolist() == [True, False]


def test_a_view_is_equal_hashed_and_pickled_as_the_record_it_stands_for() -> None:
    (entry,) = _read({"A.f.0.forward": {"input_args": [_t(math.nan)], "input_kwargs": {}, "output": []}})
    one, again = entry.flat()[1][0], entry.flat()[1][0]
    assert one is not again and one == again and hash(one) == hash(again)  # a NaN statistic, one row
    by_hand = TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 7.0, -0.25, 0.125, 2.0)
    (other,) = _read({"A.f.0.forward": {"input_args": [_t(7.0)], "input_kwargs": {}, "output": []}})
    leaf = other.flat()[1][0]
    assert leaf == by_hand and hash(leaf) == hash(by_hand) and repr(leaf) == repr(by_hand)
    assert repr(by_hand) == ("TensorLeaf(type='mindspore.Tensor', dtype='Float32', shape=(2, 3), max=7.0, min=-0.25, "
                             "mean=0.125, norm=2.0, md5=None, data_name=None, requires_grad=None, extra=())")
    assert pickle.loads(pickle.dumps(leaf)) == by_hand
    assert dataclasses.replace(leaf, max=8.0) == TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 8.0, -0.25, 0.125,
                                                            2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        leaf.max = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        other.name = "x"  # type: ignore[misc]


def test_an_entry_read_equals_the_entry_built_from_its_nodes_and_survives_pickling() -> None:
    (entry,) = _read({"A.f.0.forward": {"input_args": [_t(1.0), [_t(2.0), None]], "input_kwargs": {},
                                        "output": [_t(3.0)]}})
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 1.0, -0.25, 0.125, 2.0)
    built = Entry.forward("A.f.0.forward", Seq((leaf, Seq((dataclasses.replace(leaf, max=2.0), None)))),
                          _EMPTY, Seq((dataclasses.replace(leaf, max=3.0),)))
    assert entry == built and hash(entry) == hash(built) and repr(entry) == repr(built)
    assert entry.fields == built.fields
    back = pickle.loads(pickle.dumps(entry))
    assert back == entry and back.leaf_rows() == (None, 0, ())  # unpickled: its own leaves, not the columns


def test_a_tensor_in_a_flag_field_is_a_row_but_not_a_leaf() -> None:
    # is_recompute holds a tensor (odd, but kept): its row comes first, the input's leaf is the second row
    (entry,) = _read({"A.f.0.forward": {"is_recompute": _t(9.0), "input_args": [_t(1.0)], "output": [_t(2.0)]}})
    assert [(p, leaf.max) for p, leaf in entry.leaves()] == [("input.0", 1.0), ("output.0", 2.0)]
    cols, start, offsets = entry.leaf_rows()
    assert (start, offsets) == (0, (1, 2))
    assert entry.field("is_recompute").max == 9.0  # type: ignore[union-attr]
    (_, rows), = tensor_leaf_rows([entry])
    assert rows.tolist() == [1, 2]


def test_value_leaves_are_kept_as_written_in_every_entry() -> None:
    # equal values that are not the same (1 and 1.0) must not be shared between entries
    entries = _read({"A.f.0.forward": {"input_args": [{"type": "int", "value": 1}], "output": [_t()]},
                     "A.f.1.forward": {"input_args": [{"type": "int", "value": 1.0}], "output": [_t()]}})
    values = [e.flat()[1][0].value for e in entries]  # type: ignore[union-attr]
    assert [type(v) for v in values] == [int, float]


def test_entries_built_by_hand_have_rows_of_their_own_columns() -> None:
    a, b = TensorLeaf("torch.Tensor", "torch.float32", (2,), md5="1"), TensorLeaf("torch.Tensor", "torch.float32", (2,))
    entry = Entry.forward("A.f.0.forward", Seq((a, None)), _EMPTY, Seq((b,)))
    assert entry.leaf_rows() == (None, 0, ())
    got = tensor_leaf_rows([entry])
    assert [(c is a.columns[0] or c is b.columns[0], rows.tolist()) for c, rows in got] == [(True, [0]), (True, [0])]
    assert [(c.code_array("md5_code") >= 0).tolist() for c, _ in got] == [[True], [False]]  # a checksum, none
    assert isinstance(a.columns[0], LeafColumns) and len(a.columns[0]) == 1


_EMPTY = entries_from_json({"x": {"input_kwargs": {}}}, "f")[0].field("input_kwargs")  # the shared empty map


def test_leaves_with_a_nan_statistic_are_equal_wherever_they_are_held() -> None:
    # two entries of one file, a leaf built by hand, a pickled copy: each holds a NaN Max (a new float object each)
    a, b = (e.flat()[1][0] for e in _read({"A.f.0.forward": {"input_args": [_t(math.nan)], "output": []},
                                            "A.f.1.forward": {"input_args": [_t(math.nan)], "output": []}}))
    built = TensorLeaf("mindspore.Tensor", "Float32", (2, 3), float("nan"), -0.25, 0.125, 2.0)
    for other in (b, built, pickle.loads(pickle.dumps(a)), dataclasses.replace(a)):
        assert a == other and hash(a) == hash(other)
    assert len({a, b, built}) == 1
    assert a != TensorLeaf("mindspore.Tensor", "Float32", (2, 3), None, -0.25, 0.125, 2.0)  # null is not NaN
    assert a != TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 1.5, -0.25, 0.125, 2.0)


def test_an_entry_pickles_as_its_own_leaves_not_its_files_columns() -> None:
    entries = _read({f"A.f.{k}.forward": {"input_args": [_t(float(k))], "input_kwargs": {}, "output": [_t(-k)]}
                     for k in range(2000)})
    one = pickle.dumps(entries[7])
    every = pickle.dumps(entries)
    assert len(one) < 2000 < len(every) / 100  # one entry: a few hundred bytes; the file's 4,000 rows are not in it
    back = pickle.loads(one)
    assert back == entries[7] and [leaf.max for _, leaf in back.leaves()] == [7.0, -7.0]


def test_entries_holding_value_leaves_share_a_layout_only_with_the_same_values() -> None:
    flag = {f"A.f.{k}.forward": {"input_args": [_t()], "output": [_t()], "is_recompute": False} for k in range(50)}
    typed = {
        "B.g.0.forward": {"input_args": [_t(), {"type": "int", "value": 1}], "output": []},
        "B.g.1.forward": {"input_args": [_t(), {"type": "int", "value": True}], "output": []},
        "B.g.2.forward": {"input_args": [_t(), {"type": "int", "value": 1}], "output": []},
        "B.g.3.forward": {"input_args": [_t(), {"type": "float", "value": -0.0}], "output": []},
        "B.g.4.forward": {"input_args": [_t(), {"type": "float", "value": 0.0}], "output": []},
    }
    entries = _read({**flag, **typed})
    assert len({id(e._layout) for e in entries[:50]}) == 1  # msprobe's PyTorch flag in every entry: one layout
    g = entries[50:]
    assert g[0]._layout is g[2]._layout and g[1]._layout is not g[0]._layout and g[3]._layout is not g[4]._layout
    values = [dict(e.fields)["input_args"].items[1].value for e in g]
    assert [type(v) for v in values] == [int, bool, int, float, float]
    assert [math.copysign(1.0, v) for v in values[3:]] == [-1.0, 1.0]


def test_a_pending_leaf_keeps_its_token_through_dataclasses() -> None:
    from msprobe_cmp.recorder.collector import PendingTensorLeaf

    p = PendingTensorLeaf("torch.Tensor", "torch.float32", (2,), token=7)
    assert dataclasses.replace(p, max=1.0).token == 7 and dataclasses.replace(p, max=1.0).max == 1.0
    assert [f.name for f in dataclasses.fields(p)][-1] == "token" and dataclasses.asdict(p)["token"] == 7


def test_leaf_row_groups_by_columns_object_in_first_leaf_order() -> None:
    (entry,) = _read({"A.f.0.forward": {"input_args": [_t(1.0), _t(2.0)], "input_kwargs": {}, "output": [_t(3.0)]}})
    f0, f1, f2 = entry.flat()[1]
    own = TensorLeaf("torch.Tensor", "torch.float32", (1,), 9.0)
    leaves = [own, f2, f0, own, f1]
    groups = leaf_row_groups(leaves)
    assert [(cols, positions.tolist(), rows.tolist()) for cols, positions, rows in groups] == [
        (own.columns[0], [0, 3], [0, 0]), (f0.columns[0], [1, 2, 4], [2, 0, 1])]
    assert leaf_row_groups([]) == []
