"""The reader adds a file's tensor leaves to its columns a batch at a time, column by column (``serde._fill_columns``):
the leaves, their codes and the errors are those of reading them one by one, across batch boundaries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe_cmp.dump import serde
from msprobe_cmp.dump.schema import TensorLeaf
from msprobe_cmp.dump.serde import entries_from_json, node_from_json, tensor_leaf_from_json
from msprobe_cmp.errors import DumpFormatError

NAME = "Functional.f.0.forward"


def _leaf(**kw: object) -> dict:
    return {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 3], "Max": 1.5, "Min": -0.25, "Mean": 0.125,
            "Norm": 2.0, **kw}


def _deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(params=[1, 2, 3, 512])
def batch(request, monkeypatch):
    """Every test runs with batches of 1, 2 and 3 leaves (many boundaries) and with the reader's own size."""
    monkeypatch.setattr(serde, "_BATCH", request.param)
    return request.param


def _error(data: dict) -> str:
    with pytest.raises(DumpFormatError) as info:
        entries_from_json(data, "d.json")
    return str(info.value)


def test_leaves_across_batches_are_read_in_file_order(batch):
    data = {f"Functional.f.{i}.forward": {"input_args": [_leaf(Max=float(i), shape=[i, 2])],
                                          "output": [_leaf(Min=None, Mean=i, Norm=str(i))]} for i in range(7)}
    entries = entries_from_json(data, "d.json")
    cols = entries[0].leaf_rows()[0]
    assert cols is not None and len(cols) == 14
    assert [e.leaf_rows()[1] for e in entries] == list(range(0, 14, 2))
    for i, entry in enumerate(entries):
        (_, first), (_, second) = entry.leaves()
        assert first == TensorLeaf("mindspore.Tensor", "Float32", (i, 2), float(i), -0.25, 0.125, 2.0)
        assert second == TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 1.5, None, float(i), float(i))
    stats = cols.stats_array()
    assert stats[:, 0].tolist() == [v for i in range(7) for v in (float(i), 1.5)]
    assert cols.defined_array()[:, 1].tolist() == [True, False] * 7
    assert np.isnan(stats[1::2, 1]).all()
    assert cols.shapes == [(0, 2), (2, 3)] + [(i, 2) for i in range(1, 7)]


def test_strings_are_coded_in_the_order_of_each_leaf_type_dtype_md5_and_data_name(batch):
    leaves = [_leaf(type="torch.Tensor", dtype="d1", md5="m1", data_name="n1"),
              _leaf(type="torch.Tensor", dtype="d2", data_name="d1"),
              _leaf(type="numpy.ndarray", dtype="d2", md5=" ", data_name="n1"),
              _leaf(dtype="m1", md5="n2")]
    (entry,) = entries_from_json({NAME: {"input_args": leaves}}, "d.json")
    cols = entry.leaf_rows()[0]
    assert cols is not None
    assert cols.strings == ["torch.Tensor", "d1", "m1", "n1", "d2", "numpy.ndarray", "mindspore.Tensor", "n2"]
    assert cols.code_array("md5_code").tolist() == [2, -1, -1, 7]  # the blank md5: none
    assert cols.code_array("data_name_code").tolist() == [3, 1, 3, -1]


def test_nonfinite_counts_are_kept_for_tensors_that_hold_that_many_elements(batch):
    counts = {"nan_count": 4, "pos_inf_count": 0, "neg_inf_count": 1}
    leaves = [_leaf(shape=[2, 3], **counts), _leaf(shape=[3], **counts), _leaf(shape=[4], **counts),
              _leaf(shape=[4], nan_count=1.0, pos_inf_count=0, neg_inf_count=0),  # another writer's float: accepted
              _leaf(shape=[4], nan_count=-1, pos_inf_count=0, neg_inf_count=0), _leaf()]
    (entry,) = entries_from_json({NAME: {"output": leaves}}, "d.json")
    got = [leaf.nonfinite_counts for _, leaf in entry.leaves()]
    assert got == [(4, 0, 1), None, (4, 0, 1), (1, 0, 0), None, None]
    assert [leaf.has_invalid_nonfinite_counts for _, leaf in entry.leaves()] == [False, True, False, False, True,
                                                                                 False]
    cols = entry.leaf_rows()[0]
    assert cols is not None
    assert cols.code_array("extra_code").tolist() == [1, 1, 1, 2, 3, 0]  # equal int-only extras share a code


def test_statistics_keep_none_apart_from_nan_and_convert_as_written(batch):
    leaves = [_leaf(Max=None, Min=float("nan"), Mean=True, Norm="-inf"), _leaf(Max=3, Min="nan", Mean=2**60)]
    (entry,) = entries_from_json({NAME: {"output": leaves}}, "d.json")
    (_, a), (_, b) = entry.leaves()
    assert a.max is None and math.isnan(a.min) and a.mean == 1.0 and a.norm == -math.inf
    assert b.max == 3.0 and math.isnan(b.min) and b.mean == float(2**60) and b.norm == 2.0


def test_a_malformed_leaf_of_a_later_batch_names_its_entry_and_path(batch):
    data = {f"Functional.f.{i}.forward": {"output": [_leaf(), _leaf()]} for i in range(5)}
    data["Functional.f.3.forward"] = {"output": [_leaf(), [_leaf(), _leaf(md5=[1])]]}
    assert _error(data) == "d.json: data['Functional.f.3.forward'].output[1][1].md5: expected a string"


def test_the_first_malformed_field_in_file_order_is_named(batch):
    data = {"F.a.0.forward": {"output": [_leaf(), _leaf(Norm="big", shape=[-1])]},
            "F.b.0.forward": {"output": [_leaf(dtype=3)]}}
    assert _error(data) == "d.json: data['F.a.0.forward'].output[1].shape: expected a list of non-negative ints, got [-1]"


def test_a_malformed_leaf_is_named_before_a_structural_error_of_a_later_entry(batch):
    data = {"F.a.0.forward": {"output": [_leaf(Max=[1])]}, "F.b.0.forward": {"output": 7}}
    assert _error(data) == "d.json: data['F.a.0.forward'].output[0].Max: expected a number or null, got list [1]"


def test_a_malformed_leaf_is_named_before_a_structural_error_after_it_in_its_entry(batch):
    data = {NAME: {"input_args": [_leaf(), _leaf(requires_grad=1)], "input_kwargs": {"x": _deep(70)}}}
    assert _error(data) == f"d.json: data[{NAME!r}].input_args[1].requires_grad: expected true or false"


def test_a_structural_error_before_a_malformed_leaf_is_named(batch):
    data = {"F.a.0.forward": {"input_args": [_leaf(), {"type": "t", "value": _deep(70)}], "output": [_leaf(Max="x")]}}
    assert _error(data) == "d.json: data['F.a.0.forward'].input_args[1].value: nested deeper than 64 levels"
    data = {"F.a.0.forward": {"output": "x"}, "F.b.0.forward": {"output": [_leaf(Max="x")]}}
    assert _error(data) == "d.json: data['F.a.0.forward'].output: expected a list, got a string"


def test_a_node_names_its_malformed_leaf_before_a_structural_error_after_it():
    value = {"a": [_leaf(), _leaf(shape=[2**40, 2**40])], "b": _deep(70)}
    with pytest.raises(DumpFormatError) as info:
        node_from_json(value, "d.json", "x")
    assert str(info.value) == "d.json: x.a[1].shape: more than 2**63 elements: too large"


def test_a_lone_leaf_is_read_through_the_same_batch():
    leaf = tensor_leaf_from_json({"dtype": "Float16", "shape": [], "Max": 1, "md5": "", "note": [1]}, "d.json", "w")
    assert leaf == TensorLeaf("None", "Float16", (), 1.0, md5=None, extra=(("note", (1,)),))
    with pytest.raises(DumpFormatError) as info:
        tensor_leaf_from_json(_leaf(Mean=10**400), "d.json", "w")
    assert str(info.value) == "d.json: w.Mean: integer too large for a statistic"
