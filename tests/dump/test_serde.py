"""Round trip of every record type through JSON (serde), and the reader's errors on malformed leaves."""

from __future__ import annotations

import json
import math

import pytest

from msprobe_cmp.dump.schema import DumpMeta, Entry, JsonObject, Map, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.serde import (
    entries_from_json,
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


def _counted(shape: list[int], **counts: object) -> dict[str, object]:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0, **counts}


@pytest.mark.parametrize(("shape", "counts", "expected", "invalid"), [
    ([4], {"nan_count": 0, "pos_inf_count": 3, "neg_inf_count": 0}, (0, 3, 0), False),
    ([2], {"nan_count": 0, "pos_inf_count": 3, "neg_inf_count": 0}, None, True),  # 3 of 2 elements
    ([4], {"nan_count": 1, "pos_inf_count": 0, "neg_inf_count": 0}, (1, 0, 0), False),
    ([], {"nan_count": 1, "pos_inf_count": 0, "neg_inf_count": 0}, (1, 0, 0), False),  # 0-d: one element
    ([], {"nan_count": 2, "pos_inf_count": 0, "neg_inf_count": 0}, None, True),
    ([0, 3], {"nan_count": 0, "pos_inf_count": 0, "neg_inf_count": 0}, (0, 0, 0), False),
    ([3], {"nan_count": -1, "pos_inf_count": 0, "neg_inf_count": 0}, None, True),
    ([3], {"nan_count": 0, "pos_inf_count": 0}, None, True),  # one count missing
    ([3], {"nan_count": 1.0, "pos_inf_count": 0, "neg_inf_count": 0}, (1, 0, 0), False),  # an integral float
    ([3], {"nan_count": True, "pos_inf_count": 0, "neg_inf_count": 0}, None, True),
    ([3], {"pos_inf_count": 2, "nan_count": 0, "neg_inf_count": 1}, (0, 2, 1), False),  # another key order
    ([3], {"other": 7}, None, False),
])
def test_nonfinite_counts_of_leaves_read_from_a_dump(shape, counts, expected, invalid):
    # Every leaf of one file, with counts the reader shares between leaves of other sizes before and after it: each
    # leaf's counts are its own (they depend on its number of elements), and the same as a leaf built by hand.
    sizes = [[1], [2], [3], [4], [100], shape, [1], [4]]
    data = {f"Functional.f.{k}.forward": {"input_args": [_counted(s, **counts)], "input_kwargs": {}, "output": []}
            for k, s in enumerate(sizes)}
    entries = entries_from_json(json.loads(json.dumps(data)), "dump.json")
    leaf = entries[5].fields[0][1].items[0]
    assert leaf.nonfinite_counts == expected
    assert leaf.has_invalid_nonfinite_counts is invalid
    by_hand = TensorLeaf("torch.Tensor", "torch.float32", tuple(shape), 1.0, 0.0, 0.5, 1.0,
                         extra=tuple(counts.items()))
    assert leaf == by_hand and by_hand.nonfinite_counts == expected
    for entry, size in zip(entries, sizes, strict=True):
        other = entry.fields[0][1].items[0]
        numel = math.prod(size)
        values = [counts.get(k) for k in ("nan_count", "pos_inf_count", "neg_inf_count")]
        fits = all(type(v) in (int, float) and v == int(v) and 0 <= v <= numel for v in values)
        assert other.nonfinite_counts == (tuple(int(v) for v in values) if fits else None)


def test_leaf_paths_of_long_and_nested_lists():
    # Lists longer than the shared path tuples kept (1024 items), nested lists and objects, the same list length
    # under two heads: every leaf's path spelled out here.
    leaf = TensorLeaf("torch.Tensor", "torch.float32", (1,), 1.0, 1.0, 1.0, 1.0)
    long = Seq(tuple(leaf for _ in range(2000)))
    nested = Seq((leaf, Seq((leaf, Map((("k", Seq((leaf, leaf))),)))), None))
    entry = Entry.forward("Functional.f.0.forward", long, Map((("x", nested),)), Seq((leaf, leaf, leaf)))
    paths = [p for p, _ in entry.leaves()]
    want = ([f"input.{i}" for i in range(2000)]
            + ["kwargs.x.0", "kwargs.x.1.0", "kwargs.x.1.1.k.0", "kwargs.x.1.1.k.1", "kwargs.x.2"]
            + ["output.0", "output.1", "output.2"])
    assert paths == want
    again = Entry.forward("Functional.f.1.forward", long, Map(), Seq((leaf, leaf, leaf)))
    assert [p for p, _ in again.leaves()] == [f"input.{i}" for i in range(2000)] + ["output.0", "output.1", "output.2"]


def test_empty_objects_are_one_empty_map() -> None:
    from msprobe_cmp.dump.serde import entries_from_json

    data = {
        "Functional.relu.0.forward": {"input_args": [], "input_kwargs": {}, "output": [{}]},
        "Functional.relu.1.forward": {"input_args": [], "input_kwargs": {}, "output": [{"a": {}}]},
    }
    one, two = entries_from_json(data, "dump.json")
    assert one.field("input_kwargs") == Map(()) and one.field("output") == Seq((Map(()),))
    assert two.field("output") == Seq((Map((("a", Map(())),)),))
    assert one.field("input_kwargs") is two.field("input_kwargs") is one.field("output").items[0]
