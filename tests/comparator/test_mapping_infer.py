"""comparator/mapping/infer.py and the cross-unit views: inferred cell pairs, exact LCS alignment, API pairing,
argument tables (permutations, signatures), framework plumbing left out of the matched share."""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import random
from pathlib import Path

import pytest

from msprobe_cmp.comparator.compare import CompareOptions, compare
from msprobe_cmp.comparator.mapping import (
    NameMapping,
    build_unit_views,
    infer_cell_pairs,
    is_structural_note,
    load_builtin_tables,
    load_cell_mapping,
    mapping_file_pairs,
    render_cell_mapping,
)
from msprobe_cmp.comparator.mapping.infer import lcs_pairs
from msprobe_cmp.comparator.matching import match_views
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf, ValueLeaf


def _t(shape, dtype="Float32", mean=0.5):
    return TensorLeaf("mindspore.Tensor", dtype, tuple(shape), 1.0, 0.0, mean, 1.0)


def _fwd(name, inputs, outputs, params=None, kwargs=None):
    p = Map(tuple(params.items())) if params is not None else None
    return Entry.forward(name, Seq(tuple(inputs)), Map(tuple((kwargs or {}).items())), Seq(tuple(outputs)), p)


def _bwd(name, inputs, outputs):
    return Entry.backward(name, Seq(tuple(inputs)), Seq(tuple(outputs)))


def _conv(prefix, path, cls, cin, cout, k, hw, index=0):
    """A convolution cell's forward entry: weight [cout, cin, k, k], output [2, cout, hw, hw]."""
    return _fwd(f"{prefix}.{path}.{cls}.forward.{index}", [_t([2, cin, hw, hw])], [_t([2, cout, hw, hw])],
                {"weight": _t([cout, cin, k, k])})


def _bn(prefix, path, c, hw, ms, index=0):
    params = {"gamma": _t([c]), "beta": _t([c]), "moving_mean": _t([c]), "moving_variance": _t([c])} if ms else \
        {"weight": _t([c]), "bias": _t([c])}
    return _fwd(f"{prefix}.{path}.BatchNorm2d.forward.{index}", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])], params)


def _relu(prefix, path, c, hw, index=0):
    return _fwd(f"{prefix}.{path}.ReLU.forward.{index}", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])])


def _block_ms(path, c, hw, shortcut):
    """mindcv's BasicBlock order: conv1 bn1 relu conv2 bn2 [down_sample conv, bn] relu (the ReLU cell twice)."""
    out = [_conv("Cell", f"{path}.conv1", "Conv2d", c, c, 3, hw), _bn("Cell", f"{path}.bn1", c, hw, True),
           _relu("Cell", f"{path}.relu", c, hw, 0), _conv("Cell", f"{path}.conv2", "Conv2d", c, c, 3, hw),
           _bn("Cell", f"{path}.bn2", c, hw, True)]
    if shortcut:
        out += [_conv("Cell", f"{path}.down_sample.0", "Conv2d", c, c, 1, hw),
                _bn("Cell", f"{path}.down_sample.1", c, hw, True),
                _fwd(f"Cell.{path}.down_sample.SequentialCell.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])])]
    out += [_relu("Cell", f"{path}.relu", c, hw, 1),
            _fwd(f"Cell.{path}.BasicBlock.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])])]
    return out


def _block_pt(path, c, hw, shortcut):
    """pytorchcv's ResUnit order: [identity_conv conv, bn] body (conv1 conv bn activ, conv2 conv bn) activ."""
    out = []
    if shortcut:
        out += [_conv("Module", f"{path}.identity_conv.conv", "Conv2d", c, c, 1, hw),
                _bn("Module", f"{path}.identity_conv.bn", c, hw, False),
                _fwd(f"Module.{path}.identity_conv.ConvBlock.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])])]
    out += [_conv("Module", f"{path}.body.conv1.conv", "Conv2d", c, c, 3, hw),
            _bn("Module", f"{path}.body.conv1.bn", c, hw, False), _relu("Module", f"{path}.body.conv1.activ", c, hw),
            _fwd(f"Module.{path}.body.conv1.ConvBlock.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])]),
            _conv("Module", f"{path}.body.conv2.conv", "Conv2d", c, c, 3, hw),
            _bn("Module", f"{path}.body.conv2.bn", c, hw, False),
            _fwd(f"Module.{path}.body.conv2.ConvBlock.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])]),
            _fwd(f"Module.{path}.body.ResBlock.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])]),
            _relu("Module", f"{path}.activ", c, hw),
            _fwd(f"Module.{path}.ResUnit.forward.0", [_t([2, c, hw, hw])], [_t([2, c, hw, hw])])]
    return out


#: Two blocks of one width (every key repeats), the first with a shortcut the two sides call in another order.
MS_CELLS = _block_ms("layer1.0", 8, 4, True) + _block_ms("layer1.1", 8, 4, False) + [
    _fwd("Cell.layer1.SequentialCell.forward.0", [_t([2, 8, 4, 4])], [_t([2, 8, 4, 4])]),
    _fwd("Cell.pool.GlobalAvgPooling.forward.0", [_t([2, 8, 4, 4])], [_t([2, 8])]),
    _fwd("Cell.classifier.Dense.forward.0", [_t([2, 8])], [_t([2, 3])], {"weight": _t([3, 8]), "bias": _t([3])}),
]
PT_CELLS = _block_pt("features.stage1.unit1", 8, 4, True) + _block_pt("features.stage1.unit2", 8, 4, False) + [
    _fwd("Module.features.stage1.Sequential.forward.0", [_t([2, 8, 4, 4])], [_t([2, 8, 4, 4])]),
    _fwd("Module.features.final_pool.AvgPool2d.forward.0", [_t([2, 8, 4, 4])], [_t([2, 8, 1, 1])]),
    _fwd("Module.output.Linear.forward.0", [_t([2, 8])], [_t([2, 3])], {"weight": _t([3, 8]), "bias": _t([3])}),
]

#: What every MindSpore cell call of MS_CELLS is, written out by hand.
EXPECTED_CALLS = {
    ("layer1.0.conv1.Conv2d", 0): ("features.stage1.unit1.body.conv1.conv.Conv2d", 0),
    ("layer1.0.bn1.BatchNorm2d", 0): ("features.stage1.unit1.body.conv1.bn.BatchNorm2d", 0),
    ("layer1.0.relu.ReLU", 0): ("features.stage1.unit1.body.conv1.activ.ReLU", 0),
    ("layer1.0.conv2.Conv2d", 0): ("features.stage1.unit1.body.conv2.conv.Conv2d", 0),
    ("layer1.0.bn2.BatchNorm2d", 0): ("features.stage1.unit1.body.conv2.bn.BatchNorm2d", 0),
    ("layer1.0.down_sample.0.Conv2d", 0): ("features.stage1.unit1.identity_conv.conv.Conv2d", 0),
    ("layer1.0.down_sample.1.BatchNorm2d", 0): ("features.stage1.unit1.identity_conv.bn.BatchNorm2d", 0),
    ("layer1.0.down_sample.SequentialCell", 0): ("features.stage1.unit1.identity_conv.ConvBlock", 0),
    ("layer1.0.relu.ReLU", 1): ("features.stage1.unit1.activ.ReLU", 0),
    ("layer1.0.BasicBlock", 0): ("features.stage1.unit1.ResUnit", 0),
    ("layer1.1.conv1.Conv2d", 0): ("features.stage1.unit2.body.conv1.conv.Conv2d", 0),
    ("layer1.1.bn1.BatchNorm2d", 0): ("features.stage1.unit2.body.conv1.bn.BatchNorm2d", 0),
    ("layer1.1.relu.ReLU", 0): ("features.stage1.unit2.body.conv1.activ.ReLU", 0),
    ("layer1.1.conv2.Conv2d", 0): ("features.stage1.unit2.body.conv2.conv.Conv2d", 0),
    ("layer1.1.bn2.BatchNorm2d", 0): ("features.stage1.unit2.body.conv2.bn.BatchNorm2d", 0),
    ("layer1.1.relu.ReLU", 1): ("features.stage1.unit2.activ.ReLU", 0),
    ("layer1.1.BasicBlock", 0): ("features.stage1.unit2.ResUnit", 0),
    ("layer1.SequentialCell", 0): ("features.stage1.Sequential", 0),
    ("pool.GlobalAvgPooling", 0): ("features.final_pool.AvgPool2d", 0),
    ("classifier.Dense", 0): ("output.Linear", 0),
}


# ---------------------------------------------------------------------------------------------- LCS


@functools.cache
def _lcs_length(a: tuple, b: tuple) -> int:
    """The LCS length by its recursive definition (independent of lcs_pairs' table)."""
    if not a or not b:
        return 0
    if a[0] == b[0]:
        return 1 + _lcs_length(a[1:], b[1:])
    return max(_lcs_length(a[1:], b), _lcs_length(a, b[1:]))


def test_lcs_pairs_is_a_longest_common_subsequence():
    rng = random.Random(5)
    for _ in range(200):
        a = tuple(rng.choice("abc") for _ in range(rng.randint(0, 9)))
        b = tuple(rng.choice("abc") for _ in range(rng.randint(0, 9)))
        pairs = lcs_pairs(a, b)
        assert all(a[i] == b[j] for i, j in pairs)
        assert all(i1 < i2 and j1 < j2 for (i1, j1), (i2, j2) in itertools.pairwise(pairs))
        assert len(pairs) == _lcs_length(a, b)


def test_lcs_beats_longest_block_first_on_a_reordered_shortcut():
    # body C B R C B then shortcut S T on one side, shortcut first on the other: difflib's longest block is the
    # 7-long "R C B R C B R" run shifted across the two blocks (9 pairs in all); the LCS keeps each block whole
    ms = list("CBRCBSTR" + "CBRCBR")
    pt = list("STCBRCBR" + "CBRCBR")
    blocks = difflib.SequenceMatcher(None, ms, pt, autojunk=False).get_matching_blocks()
    assert sum(b.size for b in blocks) == 9
    pairs = lcs_pairs(ms, pt)
    assert len(pairs) == _lcs_length(tuple(ms), tuple(pt)) == 12
    assert (0, 2) in pairs and (7, 7) in pairs  # block 1's first conv and its last ReLU stay in block 1


# ---------------------------------------------------------------------------------------------- cells


def test_cells_pair_by_class_shapes_and_order_across_other_paths():
    inferred = infer_cell_pairs(MS_CELLS, PT_CELLS)
    assert dict(inferred.calls) == EXPECTED_CALLS
    assert inferred.how["layer1.0.BasicBlock"] == "same paired descendants"
    # the shared ReLU cell pairs call by call with two modules: no single path pair for the file
    pairs = inferred.file_pairs()
    assert "layer1.0.relu.ReLU" not in pairs and "layer1.1.relu.ReLU" not in pairs
    assert pairs["layer1.0.down_sample.0.Conv2d"] == "features.stage1.unit1.identity_conv.conv.Conv2d"
    assert len(pairs) == len({op for op, _ in EXPECTED_CALLS}) - 2


def test_a_user_cell_mapping_wins_over_inference():
    user = {"classifier.Dense": "features.final_pool.AvgPool2d", "layer1.0.conv1.Conv2d": "x.Conv2d"}
    inferred = infer_cell_pairs(MS_CELLS, PT_CELLS, user)
    assert ("classifier.Dense", 0) not in inferred.calls and ("layer1.0.conv1.Conv2d", 0) not in inferred.calls
    # the module the user gave away is not inferred for another cell either: the pool stays alone
    assert ("pool.GlobalAvgPooling", 0) not in inferred.calls
    # the second block, which the user's pairs leave unambiguous, still pairs as without them
    second = {k: v for k, v in EXPECTED_CALLS.items() if k[0].startswith("layer1.1.")}
    assert {k: inferred.calls[k] for k in second} == second


def test_no_cells_on_one_side_infers_nothing():
    assert dict(infer_cell_pairs(MS_CELLS, []).calls) == {}
    assert dict(infer_cell_pairs([], PT_CELLS).calls) == {}


def test_the_written_file_reads_back_to_the_same_pairs(tmp_path: Path):
    pairs, left_out = mapping_file_pairs([(MS_CELLS, PT_CELLS)], {"classifier.Dense": "output.Linear"})
    assert left_out == 2  # the two shared ReLU cells
    # 18 cells, less the two shared ReLUs; the user's pair is written as given
    assert pairs["classifier.Dense"] == "output.Linear" and len(pairs) == 16
    path = tmp_path / "cells.yaml"
    path.write_text(render_cell_mapping(pairs, ["written by a test", "second line"]))
    assert path.read_text().startswith("# written by a test\n# second line\n")
    assert load_cell_mapping(path) == pairs


def test_inferred_cells_pair_in_the_views_and_rows_keep_their_names():
    views_ms, views_pt, inferred = build_unit_views(MS_CELLS, "mindspore", PT_CELLS, "pytorch")
    assert len(inferred.calls) == len(EXPECTED_CALLS)
    rows = match_views(views_ms, views_pt)
    # (BatchNorm's moving statistics pair with PyTorch buffers, which these synthetic modules do not hold)
    cell_rows = [r for r in rows if r.entry_name.startswith("Cell.") and ".moving_" not in r.arg_path]
    assert all(r.match_class == "matched" for r in cell_rows), [r.name for r in cell_rows if r.match_class != "matched"]
    by_entry = {(r.entry_name, r.entry_name_b) for r in cell_rows}
    assert ("Cell.layer1.0.relu.ReLU.forward.1", "Module.features.stage1.unit1.activ.ReLU.forward.0") in by_entry
    bn = [r for r in cell_rows if r.entry_name == "Cell.layer1.0.down_sample.1.BatchNorm2d.forward.0"]
    assert {(r.arg_path, r.arg_path_b) for r in bn} >= {("parameters.gamma", "parameters.weight")}
    assert all(r.mapped_by and r.mapped_by.startswith("inferred cell pair") for r in bn)


# ---------------------------------------------------------------------------------------------- APIs


def _bn_calls():
    """MindSpore's BatchNorm Primitive (x, scale, bias, mean, variance) -> 5 outputs, and torch's batch_norm."""
    c = 4
    x, y = _t([2, c, 3, 3], mean=0.1), _t([2, c, 3, 3], mean=0.2)
    scale, bias, mean, var = _t([c], mean=1.0), _t([c], mean=2.0), _t([c], mean=3.0), _t([c], mean=4.0)
    ms = [_fwd("Primitive.bn_train.BatchNorm.0.forward", [x, scale, bias, mean, var], [y, _t([c]), _t([c]),
                                                                                      _t([c]), _t([c])])]
    pt_mean, pt_var = (TensorLeaf("torch.Tensor", "torch.float32", (c,), 1.0, 0.0, m, 1.0) for m in (3.0, 4.0))
    pt_w, pt_b = (TensorLeaf("torch.Tensor", "torch.float32", (c,), 1.0, 0.0, m, 1.0) for m in (1.0, 2.0))
    pt_x, pt_y = (TensorLeaf("torch.Tensor", "torch.float32", (2, c, 3, 3), 1.0, 0.0, m, 1.0) for m in (0.1, 0.2))
    pt = [_fwd("Functional.batch_norm.0.forward", [pt_x, pt_mean, pt_var, pt_w, pt_b, ValueLeaf("bool", True)],
               [pt_y], kwargs={"momentum": ValueLeaf("float", 0.1), "eps": ValueLeaf("float", 1e-5)})]
    return ms, pt


def test_batchnorm_arguments_pair_through_the_permutation_table():
    ms, pt = _bn_calls()
    rows = match_views(*build_unit_views(ms, "mindspore", pt, "pytorch")[:2])
    matched = {(r.arg_path, r.arg_path_b or r.arg_path) for r in rows if r.match_class == "matched"}
    # scale <-> weight, bias <-> bias, mean <-> running_mean, variance <-> running_var (documented signatures)
    assert matched == {("input.0", "input.0"), ("input.1", "input.3"), ("input.2", "input.4"),
                       ("input.3", "input.1"), ("input.4", "input.2"), ("output.0", "output.0")}
    # the statistics each side recorded agree pairwise: the table paired equal values (means 1..4)
    for r in rows:
        if r.match_class == "matched":
            assert r.leaf_a.mean == r.leaf_b.mean
    extra = [r for r in rows if r.match_class == "only_in_a"]
    assert sorted(r.arg_path for r in extra) == ["output.1", "output.2", "output.3", "output.4"]
    assert all(any(is_structural_note(n) for n in r.notes) for r in extra)
    # training / momentum / eps: PyTorch's only, keyword arguments put in positional form by its signature
    assert sorted(r.arg_path for r in rows if r.match_class == "only_in_b") == ["input.5", "kwargs.eps",
                                                                               "kwargs.momentum"]


def test_a_keyword_argument_pairs_with_a_positional_one_through_the_signatures():
    logits, target = _t([2, 10]), _t([2], dtype="Int32")
    ms = [_fwd("Functional.cross_entropy.0.forward", [logits, target, _t([10], mean=7.0)], [_t([])],
               kwargs={"reduction": ValueLeaf("str", "sum")})]
    # torch: cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
    pt = [_fwd("Functional.cross_entropy.0.forward", [logits, target], [_t([])],
               kwargs={"weight": _t([10], mean=7.0), "reduction": ValueLeaf("str", "sum")})]
    rows = match_views(*build_unit_views(ms, "mindspore", pt, "pytorch")[:2])
    pairs = {(r.arg_path, r.arg_path_b or r.arg_path): r.match_class for r in rows}
    assert pairs == {("input.0", "input.0"): "matched", ("input.1", "input.1"): "matched",
                     ("input.2", "kwargs.weight"): "matched", ("kwargs.reduction", "kwargs.reduction"): "matched",
                     ("output.0", "output.0"): "matched"}


def test_inplace_add_pairs_with_add_and_a_global_mean_with_the_pool():
    ms = [_fwd("Tensor.__iadd__.0.forward", [_t([2, 8, 2, 2]), _t([2, 8, 2, 2])], [_t([2, 8, 2, 2])]),
          _fwd("Functional.mean.0.forward", [_t([2, 8, 2, 2])], [_t([2, 8])],
               kwargs={"axis": Seq((ValueLeaf("int", 2), ValueLeaf("int", 3))), "keep_dims": ValueLeaf("bool", False)})]
    pt = [_fwd("Tensor.__add__.0.forward", [_t([2, 8, 2, 2]), _t([2, 8, 2, 2])], [_t([2, 8, 2, 2])]),
          _fwd("Functional.avg_pool2d.0.forward", [_t([2, 8, 2, 2]), ValueLeaf("int", 2), ValueLeaf("int", 1)],
               [_t([2, 8, 1, 1])])]
    rows = match_views(*build_unit_views(ms, "mindspore", pt, "pytorch")[:2])
    paired = {(r.entry_name, r.arg_path): r.entry_name_b for r in rows if r.in_a and r.in_b}
    assert paired[("Tensor.__iadd__.0.forward", "input.1")] == "Tensor.__add__.0.forward"
    assert paired[("Functional.mean.0.forward", "input.0")] == "Functional.avg_pool2d.0.forward"
    assert paired[("Functional.mean.0.forward", "output.0")] == "Functional.avg_pool2d.0.forward"
    mean_only = [r for r in rows if r.entry_name == "Functional.mean.0.forward" and r.match_class == "only_in_a"]
    assert sorted(r.arg_path for r in mean_only) == ["kwargs.axis.0", "kwargs.axis.1", "kwargs.keep_dims"]
    assert all(any(is_structural_note(n) for n in r.notes) for r in mean_only)


def test_a_mean_over_other_axes_is_no_pool():
    ms = [_fwd("Functional.mean.0.forward", [_t([2, 8, 2, 2])], [_t([2, 2, 2])], kwargs={"axis": ValueLeaf("int", 1)})]
    views, _, _ = build_unit_views(ms, "mindspore", [], "pytorch")
    assert views[0].name == "Torch.mean.0.forward"


def test_reordered_calls_of_one_api_pair_by_their_cells():
    """The same BatchNorm shapes in another order (a shortcut before the body): each call pairs with the one inside
    the partner of its own cell, not with the one at the same position."""
    def bn(prefix, index, mean):
        leaf = _t([2, 4, 3, 3], mean=mean)
        name = f"Primitive.bn.BatchNorm.{index}.forward" if prefix == "Cell" else f"Functional.batch_norm.{index}.forward"
        args = [leaf, _t([4]), _t([4]), _t([4]), _t([4])]
        return _fwd(name, args, [leaf] + ([_t([4])] * 4 if prefix == "Cell" else []))

    ms = [bn("Cell", 0, 0.1), _bn("Cell", "body.bn", 4, 3, True), bn("Cell", 1, 0.2), _bn("Cell", "short.bn", 4, 3, True)]
    pt = [bn("Module", 0, 0.2), _bn("Module", "identity.bn", 4, 3, False), bn("Module", 1, 0.1),
          _bn("Module", "main.bn", 4, 3, False)]
    user = NameMapping(cells={"body.bn.BatchNorm2d": "main.bn.BatchNorm2d",
                              "short.bn.BatchNorm2d": "identity.bn.BatchNorm2d"})
    rows = match_views(*build_unit_views(ms, "mindspore", pt, "pytorch", user)[:2])
    got = {r.entry_name: r.entry_name_b for r in rows if r.arg_path == "input.0"}
    assert got["Primitive.bn.BatchNorm.0.forward"] == "Functional.batch_norm.1.forward"
    assert got["Primitive.bn.BatchNorm.1.forward"] == "Functional.batch_norm.0.forward"
    assert all(r.leaf_a.mean == r.leaf_b.mean for r in rows if r.arg_path == "input.0")


def test_every_argument_table_record_names_known_positions():
    t = load_builtin_tables()
    for api, argmap in t.arguments.items():
        target = t.primitives.get(api.split(".")[1]) if api.startswith("Primitive.") else t.apis.get(api, api)
        sig = t.pt_signatures.get(target)
        assert target is not None, api
        if sig is not None:
            assert all(j < len(sig) for _, j in argmap.inputs), api
    for api in t.ms_signatures:
        assert api in t.apis or api.startswith("Functional."), api
    assert t.plumbing_reason("Primitive.shape.Shape") is not None
    assert t.plumbing_reason("Primitive.conv2d.Conv2D") is None
    assert t.aliases["Tensor.__iadd__"] == "Tensor.__add__"


# ---------------------------------------------------------------------------------------------- matched share


def _write(root: Path, framework: str, data: dict) -> Path:
    rank = root / "step0" / "rank"
    rank.mkdir(parents=True)
    doc = {"task": "statistics", "level": "L1", "framework": framework, "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    (rank / "stack.json").write_text("{}")
    (rank / "construct.json").write_text(json.dumps({k: None for k in data}))
    return root


def _leaf(dtype, shape, mean):
    return {"type": "x", "dtype": dtype, "shape": shape, "Max": mean + 1, "Min": mean - 1, "Mean": mean, "Norm": 3.0}


def test_framework_plumbing_does_not_count_against_the_matched_share(tmp_path: Path):
    ms = {"Primitive.relu.ReLU.0.forward": {"input_args": [_leaf("Float32", [2, 3], 0.5)], "input_kwargs": {},
                                            "output": [_leaf("Float32", [2, 3], 0.7)]}}
    for k in range(5):  # 10 rows of shape queries
        ms[f"Primitive.shape.Shape.{k}.forward"] = {"input_args": [_leaf("Float32", [2, 3], 0.5)], "input_kwargs": {},
                                                    "output": [{"type": "tuple", "value": [2, 3]}]}
    pt = {"Functional.relu.0.forward": {"input_args": [_leaf("torch.float32", [2, 3], 0.5),
                                                       {"type": "bool", "value": False}],
                                        "input_kwargs": {}, "output": [_leaf("torch.float32", [2, 3], 0.7)]}}
    result = compare(load_dump(_write(tmp_path / "ms", "mindspore", ms)),
                     load_dump(_write(tmp_path / "pt", "pytorch", pt)), CompareOptions())
    counts = dict(result.counts)
    assert (counts["matched"], counts["only_in_a"], counts["only_in_b"]) == (2, 10, 1)
    # 2 matched of A's 12 rows, 10 of them shape queries: 2 / (12 - 10)
    assert result.matched_share == 1.0 and result.verdict == "pass"
    assert any("10 row(s) of A with no counterpart in B by construction" in n and "Primitive.shape.Shape ×10" in n
               for n in result.notes), result.notes


def test_without_plumbing_the_same_one_sided_rows_still_count(tmp_path: Path):
    ms = {"Primitive.relu.ReLU.0.forward": {"input_args": [_leaf("Float32", [2, 3], 0.5)], "input_kwargs": {},
                                            "output": [_leaf("Float32", [2, 3], 0.7)]}}
    for k in range(5):  # 10 rows of an op that is not plumbing and has no PyTorch twin here
        ms[f"Primitive.erf.Erf.{k}.forward"] = {"input_args": [_leaf("Float32", [2, 3], 0.5)], "input_kwargs": {},
                                                "output": [_leaf("Float32", [2, 3], 0.1)]}
    pt = {"Functional.relu.0.forward": {"input_args": [_leaf("torch.float32", [2, 3], 0.5)], "input_kwargs": {},
                                        "output": [_leaf("torch.float32", [2, 3], 0.7)]}}
    result = compare(load_dump(_write(tmp_path / "ms", "mindspore", ms)),
                     load_dump(_write(tmp_path / "pt", "pytorch", pt)), CompareOptions())
    assert result.matched_share == pytest.approx(2 / 12) and result.verdict == "too_few_matched"


def _cell(dtype, out_shape, params):
    return {"input_args": [_leaf(dtype, [2, 8], 0.5)], "input_kwargs": {}, "output": [_leaf(dtype, out_shape, 0.1)],
            "parameters": {name: _leaf(dtype, shape, 0.2) for name, shape in params.items()}}


def test_write_mapping_writes_the_inferred_and_the_users_pairs(tmp_path: Path):
    from msprobe_cmp.cli import main

    ms = {"Cell.head.Dense.forward.0": _cell("Float32", [2, 3], {"weight": [3, 8], "bias": [3]}),
          "Cell.norm.LayerNorm.forward.0": _cell("Float32", [2, 8], {"gamma": [8], "beta": [8]})}
    pt = {"Module.output.Linear.forward.0": _cell("torch.float32", [2, 3], {"weight": [3, 8], "bias": [3]}),
          "Module.ln.LayerNorm.forward.0": _cell("torch.float32", [2, 8], {"weight": [8], "bias": [8]})}
    a, b = _write(tmp_path / "ms", "mindspore", ms), _write(tmp_path / "pt", "pytorch", pt)
    out = tmp_path / "cells.yaml"
    main([str(a), str(b), "-o", str(tmp_path / "r1"), "--write-mapping", str(out)])
    assert load_cell_mapping(out) == {"head.Dense": "output.Linear", "norm.LayerNorm": "ln.LayerNorm"}
    assert out.read_text().startswith("# MindSpore cell -> PyTorch module pairs written by msprobe-cmp")
    # an existing file needs --force; the user's own pairs are written as given and win
    assert main([str(a), str(b), "-o", str(tmp_path / "r2"), "--write-mapping", str(out)]) == 2
    user = tmp_path / "user.yaml"
    user.write_text("norm.LayerNorm: other.LayerNorm\n")
    main([str(a), str(b), "-o", str(tmp_path / "r3"), "--force", "--cell-mapping", str(user), "--write-mapping",
          str(out)])
    assert load_cell_mapping(out) == {"head.Dense": "output.Linear", "norm.LayerNorm": "other.LayerNorm"}
