"""Round trip of every record type through JSON (serde), and the reader's errors on malformed leaves."""

from __future__ import annotations

import json
import math

import pytest

from msprobe_cmp.dump.schema import DumpMeta, Entry, JsonObject, Map, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.serde import (
    entry_from_json,
    entry_to_json,
    meta_from_json,
    meta_to_json,
    node_from_json,
    node_to_json,
)
from msprobe_cmp.errors import DumpFormatError

LEAF = TensorLeaf("mindspore.Tensor", "Float32", (2, 3), 1.5, -2.0, 0.25, 3.0)


def _roundtrip_node(node):
    text = json.dumps(node_to_json(node))
    return node_from_json(json.loads(text), "f.json", "x")


@pytest.mark.parametrize(
    "node",
    [
        LEAF,
        TensorLeaf("torch.Tensor", "torch.bfloat16", (), 1.0, 1.0, 1.0, 1.0, requires_grad=True),
        TensorLeaf("mindspore.Tensor", "Float16", (0,), None, None, None, None, md5="0a1b2c3d",
                   data_name="x.npy", extra=(("layout", JsonObject((("a", (1, 2)),))),)),
        TensorLeaf("mindspore.Tensor", "Float32", (4,), math.inf, -math.inf, math.nan, math.inf),
        ValueLeaf("int", 3),
        ValueLeaf("slice", (1, None, 2)),
        ValueLeaf("mindspore.dtype", "Float16"),
        ValueLeaf("str", "<script>"),
        Seq((LEAF, None, Seq((ValueLeaf("int", 1),)))),
        Map((("dim", ValueLeaf("int", 1)), ("x", LEAF))),
        None,
    ],
)
def test_node_roundtrip(node):
    back = _roundtrip_node(node)
    if isinstance(node, TensorLeaf) and node.mean is not None and math.isnan(node.mean):
        assert math.isnan(back.mean) and back.max == math.inf and back.min == -math.inf
    else:
        assert back == node


def test_entry_roundtrip_all_kinds():
    fwd = Entry.forward("Cell.fc1.Dense.forward.0", Seq((LEAF,)), Map(), Seq((LEAF,)), Map((("weight", LEAF),)))
    bwd = Entry.backward("Cell.fc1.Dense.backward.0", Seq((LEAF,)), Seq((None,)))
    pg = Entry.parameters_grad("Cell.fc1.Dense.parameters_grad", [("weight", Seq((LEAF,))), ("bias", Seq((None,)))])
    for e in (fwd, bwd, pg):
        assert entry_from_json(e.name, json.loads(json.dumps(entry_to_json(e))), "f") == e


def test_meta_roundtrip_adds_format_version():
    meta = DumpMeta("tensor", "mix", "mindspore", None, (("custom", 1),))
    obj = meta_to_json(meta)
    assert obj["msprobe_cmp_format"] == 1
    back = meta_from_json(obj, "f")
    assert (back.task, back.level, back.framework, back.dump_data_dir) == ("tensor", "mix", "mindspore", None)
    assert ("custom", 1) in back.extra


def test_leaves_paths_follow_design():
    fwd = Entry.forward(
        "Functional.split.0.forward",
        Seq((LEAF, Seq((LEAF, ValueLeaf("int", 2))))),
        Map((("axis", ValueLeaf("int", 1)),)),
        Seq((LEAF, LEAF)),
    )
    assert [p for p, _ in fwd.leaves()] == ["input.0", "input.1.0", "input.1.1", "kwargs.axis", "output.0", "output.1"]
    cell = Entry.forward("Cell.fc1.Dense.forward.0", Seq((LEAF,)), Map(), Seq((LEAF,)), Map((("weight", LEAF),)))
    assert [p for p, _ in cell.leaves()] == ["input.0", "output.0", "parameters.weight"]
    pg = Entry.parameters_grad("Cell.fc1.Dense.parameters_grad", [("weight", Seq((LEAF,))), ("bias", Seq((LEAF, LEAF)))])
    assert [p for p, _ in pg.leaves()] == ["weight", "bias.0", "bias.1"]
    bwd = Entry.backward("Cell.fc1.Dense.backward.0", Seq((LEAF,)), Seq((None,)))
    assert list(bwd.leaves()) == [("input.0", LEAF), ("output.0", None)]


@pytest.mark.parametrize(
    ("leaf", "field"),
    [
        ({"type": "mindspore.Tensor", "dtype": 3, "shape": [1]}, "dtype"),
        ({"type": "mindspore.Tensor", "dtype": "Float32", "shape": "2x3"}, "shape"),
        ({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [-1]}, "shape"),
        ({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2], "Max": "big"}, "Max"),
        ({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2], "Max": [1]}, "Max"),
        ({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2], "data_name": 5}, "data_name"),
        ({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "requires_grad": "yes"}, "requires_grad"),
    ],
)
def test_malformed_leaf_names_file_and_field(leaf, field):
    with pytest.raises(DumpFormatError) as info:
        entry_from_json("Functional.relu.0.forward", {"input_args": [leaf]}, "run/dump.json")
    msg = str(info.value)
    assert "run/dump.json" in msg and f"input_args[0].{field}" in msg and "\n" not in msg


def test_entry_must_be_object():
    with pytest.raises(DumpFormatError, match=r"dump.json: data\['X.0.forward'\]"):
        entry_from_json("X.0.forward", [1, 2], "dump.json")


def test_meta_requires_task():
    with pytest.raises(DumpFormatError, match="task"):
        meta_from_json({"data": {}}, "dump.json")
    assert meta_from_json({"task": "statistics", "data": {}}, "d").framework == "unknown"
