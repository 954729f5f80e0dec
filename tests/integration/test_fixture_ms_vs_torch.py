"""MindSpore against PyTorch on msprobe 1.2.2's own dumps of one model (tests/data/msprobe-1.2.2-mindspore).

``statistics_a`` (MindSpore) and ``torch_statistics_a`` (PyTorch) are the same model, weights and data.  The
oracle for which rows pair is msprobe's own result (``compare_out_ms_vs_torch_statistics/*.xlsx``, written by
``msprobe -f mindspore compare -cm cell_mapping_ms_to_torch.yaml``): its 32 paired rows are listed below, read
from the xlsx once by hand (not by msprobe-cmp).  The statistic deltas are checked against the two dump.json
files read with the json module.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe_cmp.cli import main
from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.mapping import NameMapping, is_structural_note, load_api_mapping, load_cell_mapping
from msprobe_cmp.comparator.saved import load_comparison
from msprobe_cmp.dump import load_dump

DATA = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
MS, PT = DATA / "statistics_a", DATA / "torch_statistics_a"
CELL_MAP = DATA / "cell_mapping_ms_to_torch.yaml"
STATS = (("Max", "Max diff"), ("Min", "Min diff"), ("Mean", "Mean diff"), ("Norm", "L2norm diff"))

#: (NPU Name, Bench Name) of every row msprobe 1.2.2 paired, from its xlsx (step 0).
MSPROBE_PAIRS = [
    ("Cell.blocks.0.Dense.forward.0.input.0", "Module.blocks.0.Linear.forward.0.input.0"),
    ("Cell.blocks.0.Dense.forward.0.parameters.weight", "Module.blocks.0.Linear.forward.0.parameters.weight"),
    ("Cell.blocks.0.Dense.forward.0.parameters.bias", "Module.blocks.0.Linear.forward.0.parameters.bias"),
    ("Cell.blocks.0.Dense.forward.0.output.0", "Module.blocks.0.Linear.forward.0.output.0"),
    ("Cell.blocks.0.Dense.parameters_grad.weight", "Module.blocks.0.Linear.parameters_grad.weight"),
    ("Cell.blocks.0.Dense.parameters_grad.bias", "Module.blocks.0.Linear.parameters_grad.bias"),
    ("Cell.act.ReLU.forward.0.input.0", "Module.act.ReLU.forward.0.input.0"),
    ("Cell.act.ReLU.forward.0.output.0", "Module.act.ReLU.forward.0.output.0"),
    ("Cell.blocks.1.Dense.forward.0.input.0", "Module.blocks.1.Linear.forward.0.input.0"),
    ("Cell.blocks.1.Dense.forward.0.parameters.weight", "Module.blocks.1.Linear.forward.0.parameters.weight"),
    ("Cell.blocks.1.Dense.forward.0.parameters.bias", "Module.blocks.1.Linear.forward.0.parameters.bias"),
    ("Cell.blocks.1.Dense.forward.0.output.0", "Module.blocks.1.Linear.forward.0.output.0"),
    ("Cell.blocks.1.Dense.parameters_grad.weight", "Module.blocks.1.Linear.parameters_grad.weight"),
    ("Cell.blocks.1.Dense.parameters_grad.bias", "Module.blocks.1.Linear.parameters_grad.bias"),
    ("Cell.act.ReLU.forward.1.input.0", "Module.act.ReLU.forward.1.input.0"),
    ("Cell.act.ReLU.forward.1.output.0", "Module.act.ReLU.forward.1.output.0"),
    ("Cell.head.Dense.forward.0.input.0", "Module.head.Linear.forward.0.input.0"),
    ("Cell.head.Dense.forward.0.parameters.weight", "Module.head.Linear.forward.0.parameters.weight"),
    ("Cell.head.Dense.forward.0.parameters.bias", "Module.head.Linear.forward.0.parameters.bias"),
    ("Cell.head.Dense.forward.0.output.0", "Module.head.Linear.forward.0.output.0"),
    ("Cell.head.Dense.parameters_grad.weight", "Module.head.Linear.parameters_grad.weight"),
    ("Cell.head.Dense.parameters_grad.bias", "Module.head.Linear.parameters_grad.bias"),
    ("Cell.head.Dense.backward.0.input.0", "Module.head.Linear.backward.0.input.0"),
    ("Cell.head.Dense.backward.0.output.0", "Module.head.Linear.backward.0.output.0"),
    ("Cell.act.ReLU.backward.0.input.0", "Module.act.ReLU.backward.0.input.0"),
    ("Cell.act.ReLU.backward.0.output.0", "Module.act.ReLU.backward.0.output.0"),
    ("Cell.blocks.1.Dense.backward.0.input.0", "Module.blocks.1.Linear.backward.0.input.0"),
    ("Cell.blocks.1.Dense.backward.0.output.0", "Module.blocks.1.Linear.backward.0.output.0"),
    ("Cell.act.ReLU.backward.1.input.0", "Module.act.ReLU.backward.1.input.0"),
    ("Cell.act.ReLU.backward.1.output.0", "Module.act.ReLU.backward.1.output.0"),
    ("Cell.blocks.0.Dense.backward.0.input.0", "Module.blocks.0.Linear.backward.0.input.0"),
    ("Cell.blocks.0.Dense.backward.0.output.0", "Module.blocks.0.Linear.backward.0.output.0"),
]


def _raw(dump: Path, step: int) -> dict:
    return json.loads((dump / f"step{step}" / "rank" / "dump.json").read_text())["data"]


def _raw_leaf(data: dict, row_name: str):
    """The leaf of ``<entry>.<path>`` read from raw dump.json data (entries and paths split by hand)."""
    for entry, body in data.items():
        if not row_name.startswith(entry + "."):
            continue
        path = row_name[len(entry) + 1:].split(".")
        if entry.endswith("parameters_grad"):
            return body[path[0]][0]
        key, idx = path[0], path[1]
        if key == "input":
            field = "input_args" if "input_args" in body else "input"
            return body[field][int(idx)]
        if key == "parameters":
            return body["parameters"][idx]
        return body["output"][int(idx)]
    raise KeyError(row_name)


def _rows(comparison, step: int) -> dict:
    return {r.name: r for r in comparison.units[step].rows}


@pytest.fixture(scope="module")
def with_map():
    mapping = NameMapping(cells=load_cell_mapping(CELL_MAP), cell_source=CELL_MAP.name)
    return compare(load_dump(MS), load_dump(PT), CompareOptions(mapping=mapping))


@pytest.fixture(scope="module")
def without_map():
    return compare(load_dump(MS), load_dump(PT))


def _check_pairs(comparison) -> None:
    rows = _rows(comparison, 0)
    raw_a, raw_b = _raw(MS, 0), _raw(PT, 0)
    for name_a, name_b in MSPROBE_PAIRS:
        row = rows[name_a]
        assert row.match_class == "matched", (name_a, row.match_class, row.notes)
        assert row.name_b == name_b
        assert row.mapped_by, name_a
        leaf_a, leaf_b = _raw_leaf(raw_a, name_a), _raw_leaf(raw_b, name_b)
        if leaf_a is None:
            assert leaf_b is None and row.verdict == "skip"
            continue
        assert row.verdict == "pass", (name_a, row.reasons)
        for key, metric in STATS:
            expected = leaf_a[key] - leaf_b[key]
            assert abs(expected) < 1e-6, (name_a, key)
            assert math.isclose(row.metric(metric), expected, rel_tol=1e-9, abs_tol=1e-15), (name_a, key)


def test_the_32_rows_msprobe_pairs_are_matched_with_the_user_cell_mapping(with_map):
    assert len(MSPROBE_PAIRS) == 32
    _check_pairs(with_map)
    assert any("user cell mapping cell_mapping_ms_to_torch.yaml" in (r.mapped_by or "")
               for r in with_map.units[0].rows)


def test_the_builtin_cell_table_gives_the_same_pairs_without_a_file(with_map, without_map):
    _check_pairs(without_map)
    pairs = {(r.name, r.name_b) for r in without_map.units[0].rows if r.match_class == "matched"}
    assert pairs == {(r.name, r.name_b) for r in with_map.units[0].rows if r.match_class == "matched"}
    dense = _rows(without_map, 0)["Cell.blocks.0.Dense.forward.0.input.0"]
    assert dense.mapped_by == "built-in cell table: Dense → Linear"


def test_every_layer_row_of_step_1_is_matched_too(without_map):
    rows = _rows(without_map, 1)
    raw_a, raw_b = _raw(MS, 1), _raw(PT, 1)
    layer_entries = [n for n in raw_a if n.startswith("Cell.")]
    assert len(layer_entries) == 13  # 3 Dense x (forward, backward, parameters_grad), ReLU x 2 forward + 2 backward
    n = 0
    for entry in layer_entries:
        for r in (r for r in rows.values() if r.entry_name == entry):
            assert r.match_class == "matched", (r.name, r.match_class)
            leaf_a, leaf_b = _raw_leaf(raw_a, r.name), _raw_leaf(raw_b, r.name_b)
            if leaf_a is not None:  # after one Adam step the two frameworks drift apart (up to ~2e-5)
                assert abs(leaf_a["Mean"] - leaf_b["Mean"]) < 1e-4 and r.verdict == "pass"
                assert math.isclose(r.metric("Mean diff"), leaf_a["Mean"] - leaf_b["Mean"], rel_tol=1e-9,
                                    abs_tol=1e-15)
            n += 1
    assert n == 32


def test_primitive_pairs_matmul_biasadd_linear_and_relu(without_map):
    rows = _rows(without_map, 0)
    raw_a, raw_b = _raw(MS, 0), _raw(PT, 0)
    # (MindSpore row, PyTorch row): forward arguments, and the backward gradients (msprobe 1.2.2 writes the
    # MindSpore Primitive gradients in reverse order; PyTorch's linear backward as (bias, input, weight.T)).
    expected = [
        ("Primitive.matmul.MatMul.2.forward.input.0", "Functional.linear.2.forward.input.0"),
        ("Primitive.matmul.MatMul.2.forward.input.1", "Functional.linear.2.forward.input.1"),
        ("Primitive.bias_add.BiasAdd.2.forward.input.1", "Functional.linear.2.forward.input.2"),
        ("Primitive.bias_add.BiasAdd.2.forward.output.0", "Functional.linear.2.forward.output.0"),
        ("Primitive.bias_add.BiasAdd.2.backward.input.0", "Functional.linear.2.backward.input.0"),
        ("Primitive.matmul.MatMul.2.backward.output.1", "Functional.linear.2.backward.output.1"),  # d input
        ("Primitive.matmul.MatMul.2.backward.output.0", "Functional.linear.2.backward.output.2"),  # d weight
        ("Primitive.bias_add.BiasAdd.2.backward.output.0", "Functional.linear.2.backward.output.0"),  # d bias
        ("Primitive.matmul.MatMul.0.backward.output.0", "Functional.linear.0.backward.output.2"),
        ("Primitive.relu.ReLU.0.forward.input.0", "Functional.relu.0.forward.input.0"),
        ("Primitive.relu.ReLU.1.forward.output.0", "Functional.relu.1.forward.output.0"),
        ("Primitive.relu.ReLU.1.backward.output.0", "Functional.relu.1.backward.output.0"),
    ]
    for name_a, name_b in expected:
        row = rows[name_a]
        assert (row.match_class, row.name_b) == ("matched", name_b), (name_a, row.match_class, row.name_b)
        leaf_a, leaf_b = _raw_leaf(raw_a, name_a), _raw_leaf(raw_b, name_b)
        for key, metric in STATS:
            assert abs(leaf_a[key] - leaf_b[key]) < 1e-6
            assert math.isclose(row.metric(metric), leaf_a[key] - leaf_b[key], rel_tol=1e-9, abs_tol=1e-15)
        assert row.verdict == "pass"
    # the weight gradient PyTorch records is weight.T: [16, 4] against MindSpore's [4, 16]
    w = rows["Primitive.matmul.MatMul.2.backward.output.0"]
    assert (w.a.shape, w.b.shape) == ((4, 16), (16, 4)) and any("transpose" in n for n in w.notes)
    # the intermediate (MatMul's output = BiasAdd's input) has no PyTorch twin: present in A only, said so
    for name in ("Primitive.matmul.MatMul.0.forward.output.0", "Primitive.bias_add.BiasAdd.0.forward.input.0"):
        assert rows[name].match_class == "only_in_a"
        assert any("intermediate" in n for n in rows[name].notes)


def test_unpaired_calls_on_either_side_are_kept(without_map):
    rows = _rows(without_map, 0)
    # MindSpore's MSE is Tensor.__sub__ + square, PyTorch's mse_loss; PyTorch also saw loss.backward()'s ones_like
    assert rows["Tensor.__sub__.0.forward.output.0"].match_class == "only_in_a"
    assert rows["Functional.square.0.forward.output.0"].match_class == "only_in_a"
    assert rows["Functional.mse_loss.0.forward.output.0"].match_class == "only_in_b"
    assert rows["Torch.ones_like.0.forward.output.0"].match_class == "only_in_b"
    total_a = sum(1 for r in rows.values() if r.a is not None)
    raw_leaves_a = sum(1 for _ in _iter_raw_leaves(_raw(MS, 0)))
    assert total_a == raw_leaves_a  # every MindSpore leaf is a row


def _iter_raw_leaves(data: dict):
    for body in data.values():
        for value in body.values():
            if isinstance(value, list):
                yield from value
            elif isinstance(value, dict):
                yield from value.values()


def test_cli_with_the_short_flag_writes_both_names_and_the_mapping(tmp_path):
    out = tmp_path / "r"
    code = main([str(MS), str(PT), "-o", str(out), "-cm", str(CELL_MAP), "--min-matched-share", "0.1"])
    assert code == 0
    doc = json.loads((out / "comparison.json").read_text())
    row = next(r for r in doc["units"][0]["rows"] if r["name"] == "Primitive.bias_add.BiasAdd.1.forward.input.1")
    assert (row["entry_b"], row["arg_path_b"]) == ("Functional.linear.1.forward", "input.2")
    assert row["mapped_by"].startswith("built-in composite")
    csv_text = (out / "comparison.csv").read_text()
    assert "Cell.blocks.0.Dense.forward.0.input.0,Module.blocks.0.Linear.forward.0.input.0" in csv_text


def test_across_frameworks_the_matched_share_is_over_the_targets_rows(tmp_path, capsys):
    # PyTorch's dump also holds the optimizer's Tensor calls: most of its rows have no MindSpore twin, so the
    # floor (0.5) applies to A's rows. Of all rows only ~20% are matched; of A's rows over half are.
    code = main([str(MS), str(PT), "-o", str(tmp_path / "r")])
    assert "name mapping" in capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "comparison.json").read_text())
    rows = [r for u in doc["units"] for r in u["rows"]]
    matched = sum(r["match_class"] == "matched" for r in rows)
    a_rows = sum(r["match_class"] != "only_in_b" for r in rows)
    assert matched / len(rows) < 0.5 <= matched / a_rows
    assert code == 0 and doc["verdict"] == "pass"
    not_captured = sum(r["match_class"] == "not_captured" for r in rows)
    assert doc["matched_share_of"] == "A's rows"
    # A's rows with no counterpart by construction (MindSpore plumbing, a composite's intermediates) are left out too
    # (the notes' codes say which: the saved comparison beside the reports keeps them)
    saved = load_comparison(tmp_path / "r")
    structural = sum(r.match_class == "only_in_a" and any(is_structural_note(n) for n in r.notes)
                     for u in saved.units for r in u.rows)
    assert structural == sum(r["match_class"] == "only_in_a" and any("no counterpart" in n for n in r["notes"])
                             for r in rows)  # the same rows as the words in comparison.json say
    assert structural > 0 and any("left out of the matched share" in n for n in doc["notes"])
    assert doc["matched_share"] == matched / (a_rows - not_captured - structural)
    # with a floor above A's share there is no verdict
    code = main([str(MS), str(PT), "-o", str(tmp_path / "r2"), "--min-matched-share", f"{doc['matched_share'] + 0.01}"])
    assert code == 3
    assert "of A's rows were matched" in capsys.readouterr().out


def test_cross_framework_with_nothing_mappable_exits_3_and_names_the_unpaired(tmp_path):
    def write(root: Path, framework: str, data: dict) -> None:
        d = root / "step0" / "rank"
        d.mkdir(parents=True)
        doc = {"task": "statistics", "level": "mix", "framework": framework, "dump_data_dir": None, "data": data}
        (d / "dump.json").write_text(json.dumps(doc))

    leaf = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0}
    tleaf = dict(leaf, type="torch.Tensor", dtype="torch.float32")
    write(tmp_path / "a", "mindspore", {"Functional.square.0.forward": {"input_args": [leaf], "input_kwargs": {},
                                                                         "output": [leaf]}})
    write(tmp_path / "b", "pytorch", {"Functional.mse_loss.0.forward": {"input_args": [tleaf, tleaf],
                                                                         "input_kwargs": {}, "output": [tleaf]}})
    res = subprocess.run([sys.executable, "-m", "msprobe_cmp.cli", str(tmp_path / "a"), str(tmp_path / "b"),
                          "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "entries only in A: Functional.square.0.forward" in res.stdout
    assert "entries only in B: Functional.mse_loss.0.forward" in res.stdout
    assert "nothing paired across frameworks" in res.stdout


@pytest.mark.parametrize("label", ["pytorch", "MindSpore"])
def test_a_mislabelled_framework_is_mapped_by_its_entry_names(tmp_path, without_map, label):
    import shutil

    copy = tmp_path / "ms"
    shutil.copytree(MS, copy)
    for dump_json in copy.glob("step*/rank/dump.json"):
        doc = json.loads(dump_json.read_text())
        doc["framework"] = label
        dump_json.write_text(json.dumps(doc))
    c = compare(load_dump(copy), load_dump(PT))
    pairs = {(r.name, r.name_b) for r in c.units[0].rows if r.match_class == "matched"}
    assert pairs == {(r.name, r.name_b) for r in without_map.units[0].rows if r.match_class == "matched"}
    contradiction = [n for n in c.notes if "says framework" in n]
    assert bool(contradiction) == (label == "pytorch"), c.notes


def test_mapping_keys_that_match_nothing_are_warned_about(tmp_path):
    cells = tmp_path / "cells.yaml"
    cells.write_text("blocks.0.Dense: blocks.0.Linear\ndensein.Dense: fc1.Linear\nNoSuchCell: Linear\n")
    apis = tmp_path / "apis.yaml"
    apis.write_text("- ms_api: Functional.no_such_op\n  pt_api: Torch.add\n- ms_api: Primitive.ReLU\n"
                    "  pt_api: Functional.relu\n")
    mapping = NameMapping(cells=load_cell_mapping(cells), cell_source="cells.yaml",
                          apis=load_api_mapping(apis), api_source="apis.yaml")
    c = compare(load_dump(MS), load_dump(PT), CompareOptions(mapping=mapping))
    warned = [n for n in c.notes if "match no MindSpore" in n]
    assert len(warned) == 2, c.notes
    assert "2 entries" in warned[0] and "densein.Dense, NoSuchCell" in warned[0]
    assert "1 entry" in warned[1] and "Functional.no_such_op" in warned[1]
    # the shipped file matches every key: no warning
    good = NameMapping(cells=load_cell_mapping(CELL_MAP), cell_source=CELL_MAP.name)
    assert not [n for n in compare(load_dump(MS), load_dump(PT), CompareOptions(mapping=good)).notes
                if "match no MindSpore" in n]


def test_cells_unpaired_on_both_sides_suggest_a_cell_mapping(tmp_path, without_map):
    cells = tmp_path / "cells.yaml"
    cells.write_text("blocks.0.Dense: blocks.9.Linear\n")  # sends block 0 where PyTorch has nothing
    c = compare(load_dump(MS), load_dump(PT), CompareOptions(mapping=NameMapping(cells=load_cell_mapping(cells))))
    assert any("--cell-mapping" in n for n in c.notes), c.notes
    assert not any("--cell-mapping" in n for n in without_map.notes)
