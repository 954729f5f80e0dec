"""End to end across frameworks: our own recordings of one model in PyTorch, MindSpore and mindtorch, compared.

The scripts are the examples users run (``examples/torch_api_mlp.py``, ``examples/mindspore_twin_mlp.py``, the first
also under mindtorch through ``examples/run_on_mindtorch.py``), each in its own interpreter (the recorder wraps
framework APIs process-wide; a subprocess keeps this test process clean).  Checked:

a. MindSpore twin (A, the port) against PyTorch (B, the baseline), no user mapping file, level mix: every
   Cell/Module forward, backward, ``parameters`` and ``parameters_grad`` row of the three Dense/Linear layers and
   of the shared ReLU is matched (``Cell.blocks.0.Dense`` ↔ ``Module.blocks.0.Linear``) in both steps, with
   statistic deltas below 1e-5 that equal the deltas read straight from the two dump.json files; the verdict is
   pass, through ``compare()`` and through the CLI (exit 0).  The tensor task gives MaxAbsErr below 1e-5, equal
   to numpy's on the saved tensor files.
b. The same PyTorch-API script on mindtorch against real PyTorch: entries match by name with no mapping, forward
   rows agree within 1e-5, and what mindtorch cannot capture on CPU (backward, parameter gradients) is reported
   as such; the test pins exactly which rows.
c. msprobe 1.2.2's dumps of the same model (tests/data/msprobe-1.2.2-mindspore) are an independent oracle for
   step 0: our PyTorch recording's layer statistics equal ``torch_statistics_a``'s, the twin's ``statistics_a``'s.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mindtorch_env import mindtorch_python

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump import load_dump

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
DENSE_LAYERS = ("blocks.0", "blocks.1", "head")
TIMEOUT_S = 300
STAT_KEYS = ("Max", "Min", "Mean", "Norm")
STAT_DIFFS = ("Max diff", "Min diff", "Mean diff", "L2norm diff")
TOL = 1e-5

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("mindspore") is None,
    reason="needs torch and mindspore",
)


# ---------------------------------------------------------------------------------------------- helpers


def _start(python: str, script: str, dump: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [python, str(EXAMPLES / script), "--dump", str(dump), "--level", "mix", *args],
        cwd=dump.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{stdout}\n{stderr[-4000:]}"
    return stdout


def _raw(dump: Path, step: int) -> dict:
    """dump.json's ``data`` read with the json module (not our reader): the independent side of the checks."""
    return json.loads((dump / f"step{step}" / "rank" / "dump.json").read_text())["data"]


def _raw_leaves(entry: dict) -> dict[str, dict | None]:
    """``arg path → leaf`` of a raw entry, spelt as the comparator's rows (``input.0``, ``parameters.weight``,
    ``output.0``; a ``parameters_grad`` entry: ``weight`` for one gradient, ``weight.<i>`` for several)."""
    out: dict[str, dict | None] = {}
    for key, value in entry.items():
        if key in ("input_args", "input", "output"):
            prefix = "output" if key == "output" else "input"
            for i, leaf in enumerate(value):
                out[f"{prefix}.{i}"] = leaf
        elif key == "parameters":
            for name, leaf in value.items():
                out[f"parameters.{name}"] = leaf
        elif key != "input_kwargs" and isinstance(value, list):  # parameters_grad: {name: [leaf, ...]}
            for i, leaf in enumerate(value):
                out[key if len(value) == 1 else f"{key}.{i}"] = leaf
    return out


def _torch_name(ms_entry: str) -> str:
    """The PyTorch spelling of a MindSpore cell entry of these models (Cell → Module, Dense → Linear)."""
    assert ms_entry.startswith("Cell.")
    return "Module." + ms_entry[len("Cell."):].replace(".Dense.", ".Linear.")


def _layer_entries(data: dict) -> list[str]:
    """The Cell/Module entries of the three Dense/Linear layers and the shared ReLU, in dump order."""
    layers = tuple(f"{p}.{layer}." for p in ("Cell", "Module") for layer in (*DENSE_LAYERS, "act"))
    return [name for name in data if name.startswith(layers)]


# 8 rows per Dense/Linear layer (forward input, output, weight, bias; backward input, output; weight and bias
# gradients) and 8 for the ReLU called twice (input and output of two forward and two backward calls).
EXPECTED_LAYER_ROWS = 3 * 8 + 8


def _rows_by_name(unit) -> dict[str, object]:
    return {r.name: r for r in unit.rows}


# ---------------------------------------------------------------------------------------------- recordings


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Statistics (2 steps) and tensor (1 step) recordings of both examples at level mix, made concurrently."""
    d = tmp_path_factory.mktemp("xfw")
    jobs = {
        "torch": ("torch_api_mlp.py", "--task", "statistics", "--steps", "2"),
        "mindspore": ("mindspore_twin_mlp.py", "--task", "statistics", "--steps", "2"),
        "torch_tensor": ("torch_api_mlp.py", "--task", "tensor", "--steps", "1"),
        "mindspore_tensor": ("mindspore_twin_mlp.py", "--task", "tensor", "--steps", "1"),
    }
    procs = {name: _start(sys.executable, script, d / name, *args) for name, (script, *args) in jobs.items()}
    for proc in procs.values():
        _finish(proc)
    return {name: d / name for name in jobs}


def _check_layer_rows(comparison, ms_dump: Path, torch_dump: Path, steps: int) -> None:
    """Every layer row of every step matched under the PyTorch name, deltas < 1e-5 and equal to the raw ones."""
    assert [(u.unit_a.step, u.unit_b.step) for u in comparison.units] == [(s, s) for s in range(steps)]
    for step, unit in enumerate(comparison.units):
        raw_a, raw_b = _raw(ms_dump, step), _raw(torch_dump, step)
        rows = _rows_by_name(unit)
        checked = 0
        for ms_entry in _layer_entries(raw_a):
            pt_entry = _torch_name(ms_entry)
            assert pt_entry in raw_b, f"step {step}: PyTorch recorded no {pt_entry}"
            leaves_b = _raw_leaves(raw_b[pt_entry])
            for path, leaf_a in _raw_leaves(raw_a[ms_entry]).items():
                name = f"{ms_entry}.{path}"
                row = rows.get(name)
                assert row is not None, f"step {step}: no row {name}"
                assert row.match_class == "matched", f"step {step}: {name} is {row.match_class}"
                assert row.name_b == f"{pt_entry}.{path}", f"step {step}: {name} paired with {row.name_b}"
                leaf_b = leaves_b[path]
                checked += 1
                if leaf_a is None or leaf_b is None:  # blocks.0's input needs no gradient: null on both sides
                    assert leaf_a is None and leaf_b is None, f"step {step}: {name}: {leaf_a} vs {leaf_b}"
                    assert path == "output.0" and ".blocks.0." in ms_entry and ".backward." in ms_entry
                    continue
                assert row.verdict == "pass", f"step {step}: {name}: {row.verdict} {row.reasons}"
                for key, diff_name in zip(STAT_KEYS, STAT_DIFFS, strict=True):
                    raw_delta = leaf_a[key] - leaf_b[key]
                    assert abs(raw_delta) < TOL, f"step {step}: {name} {key}: {leaf_a[key]} vs {leaf_b[key]}"
                    reported = row.metric(diff_name)
                    assert reported is not None and math.isclose(reported, raw_delta, rel_tol=1e-9, abs_tol=1e-12)
        assert checked == EXPECTED_LAYER_ROWS, f"step {step}: {checked} layer rows"


# ---------------------------------------------------------------------------------------------- a


@pytest.mark.torch
@pytest.mark.mindspore
def test_mindspore_twin_matches_pytorch_without_a_mapping_file(recorded):
    ms_dump, torch_dump = recorded["mindspore"], recorded["torch"]
    c = compare(load_dump(ms_dump), load_dump(torch_dump))
    assert c.mode == "statistics"
    _check_layer_rows(c, ms_dump, torch_dump, steps=2)
    for unit in c.units:
        rows = _rows_by_name(unit)
        loss = rows["Functional.mse_loss.0.forward.output.0"]
        assert loss.match_class == "matched" and abs(loss.metric("Max diff")) < TOL
        for i in range(3):  # nn.Dense's MatMul + BiasAdd Primitives pair with torch's Functional.linear
            out = rows[f"Primitive.bias_add.BiasAdd.{i}.forward.output.0"]
            assert out.match_class == "matched" and out.name_b == f"Functional.linear.{i}.forward.output.0"
            assert abs(out.metric("Max diff")) < TOL and abs(out.metric("L2norm diff")) < TOL
    assert c.first_failing is None
    assert c.verdict == "pass", (c.verdict, c.notes)


@pytest.mark.torch
@pytest.mark.mindspore
def test_cli_passes_the_twin_against_pytorch(recorded, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run(
        [sys.executable, "-m", "msprobe_cmp.cli", str(recorded["mindspore"]), str(recorded["torch"]), "-o", str(out)],
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["verdict"] == "pass"
    rows = {r["name"]: r for u in doc["units"] for r in u["rows"] if r["entry"].startswith("Cell.blocks.0.Dense.")}
    assert rows["Cell.blocks.0.Dense.forward.0.parameters.weight"]["entry_b"] == "Module.blocks.0.Linear.forward.0"
    assert {r["match_class"] for r in rows.values()} == {"matched"}


@pytest.mark.torch
@pytest.mark.mindspore
def test_tensor_task_twin_matches_pytorch_to_1e_5(recorded):
    ms_dump, torch_dump = recorded["mindspore_tensor"], recorded["torch_tensor"]
    c = compare(load_dump(ms_dump), load_dump(torch_dump))
    assert c.mode == "tensor"
    _check_layer_rows(c, ms_dump, torch_dump, steps=1)
    rows = _rows_by_name(c.units[0])
    raw_a, raw_b = _raw(ms_dump, 0), _raw(torch_dump, 0)
    for ms_entry in _layer_entries(raw_a):
        leaves_b = _raw_leaves(raw_b[_torch_name(ms_entry)])
        for path, leaf_a in _raw_leaves(raw_a[ms_entry]).items():
            if leaf_a is None:
                continue
            row = rows[f"{ms_entry}.{path}"]
            assert row.compared_by == "tensor", row
            a = np.load(ms_dump / "step0" / "rank" / "dump_tensor_data" / leaf_a["data_name"])
            b = np.load(torch_dump / "step0" / "rank" / "dump_tensor_data" / leaves_b[path]["data_name"])
            expected = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            assert expected < TOL, f"{row.name}: {expected}"
            assert row.metric("MaxAbsErr") == pytest.approx(expected, rel=1e-9, abs=1e-15)
            cosine = row.metric("Cosine")
            assert cosine is None or cosine > 1 - 1e-9, f"{row.name}: Cosine {cosine}"
    assert c.verdict == "pass", (c.verdict, c.notes)


# ---------------------------------------------------------------------------------------------- b


# What the mindtorch recording lacks on CPU (mindnlp 0.5.1's mindtorch with MindSpore 2.7.0): ``Tensor.backward()`` is
# a no-op, so no backward entry, no parameter gradient, and no ``Torch.ones_like`` (PyTorch's backward() makes the
# initial gradient with it).  Every forward call of the model is captured.
MINDTORCH_MISSING_FORWARD = {"Torch.ones_like.0.forward"}


def _is_backward_side(name: str) -> bool:
    return ".backward" in name or name.endswith(".parameters_grad")


@pytest.fixture(scope="module")
def mindtorch_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One step of the PyTorch-API example recorded under mindtorch (level mix, statistics)."""
    python = mindtorch_python()
    dump = tmp_path_factory.mktemp("mindtorch") / "dump"
    out = _finish(_start(python, "run_on_mindtorch.py", dump, "--task", "statistics", "--steps", "1"))
    assert "backward() gave no parameter gradients" in out and "optimizer skipped" in out
    return dump


@pytest.mark.mindtorch
@pytest.mark.torch
def test_mindtorch_recording_matches_pytorch_by_name(recorded, mindtorch_dump, tmp_path):
    raw_mt, raw_pt = _raw(mindtorch_dump, 0), _raw(recorded["torch"], 0)

    # forward entries carry PyTorch's own names: every one mindtorch recorded exists in the PyTorch dump
    forward_pt = {n for n in raw_pt if ".forward" in n}
    forward_mt = {n for n in raw_mt if ".forward" in n}
    assert forward_pt - forward_mt == MINDTORCH_MISSING_FORWARD, sorted(forward_pt ^ forward_mt)
    assert forward_mt <= forward_pt
    assert {n for n in forward_mt if n.startswith("Module.")} == {n for n in forward_pt if n.startswith("Module.")}
    assert "Functional.mse_loss.0.forward" in forward_mt

    c = compare(load_dump(mindtorch_dump), load_dump(recorded["torch"] / "step0"))
    rows = c.units[0].rows
    compared = 0
    for r in rows:
        if _is_backward_side(r.entry_name) or r.entry_name in MINDTORCH_MISSING_FORWARD:
            continue
        assert r.match_class == "matched" and r.name_b == r.name, (r.name, r.match_class, r.name_b)
        if r.a is not None and r.a.kind == "tensor":
            leaf_a = _raw_leaves(raw_mt[r.entry_name])[r.arg_path]
            leaf_b = _raw_leaves(raw_pt[r.entry_name])[r.arg_path]
            for key, diff_name in zip(STAT_KEYS, STAT_DIFFS, strict=True):
                assert abs(leaf_a[key] - leaf_b[key]) < TOL, (r.name, key)
                assert abs(r.metric(diff_name)) < TOL, (r.name, diff_name)
            assert r.verdict == "pass", (r.name, r.reasons)
            compared += 1
    # tensors of 3 Linear modules and 3 Functional.linear calls (input, weight, bias, output), 2 ReLU modules and
    # 2 Functional.relu calls (input, output), mse_loss (2 inputs, output)
    assert compared == 2 * 3 * 4 + 2 * 2 * 2 + 3

    # every row of the forward calls mindtorch missed is PyTorch's only
    missed = [r for r in rows if r.entry_name in MINDTORCH_MISSING_FORWARD]
    assert missed and {r.match_class for r in missed} == {"only_in_b"}
    # mindtorch recorded no backward entry and no parameter gradient (not even a placeholder) ...
    assert not [n for n in raw_mt if _is_backward_side(n)]
    # ... and its header says so, and why
    header = json.loads((mindtorch_dump / "step0" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in header["not_captured"]}
    assert "Tensor.backward()" in reasons.get("backward", ""), reasons
    assert any("backward: mindtorch" in n for n in c.notes), c.notes
    # so every backward row PyTorch recorded is a declared gap of A's: not_captured, with A's reason
    backward_rows = [r for r in rows if _is_backward_side(r.entry_name)]
    expected_missing = {
        f"{name}.{path}" for name in raw_pt if _is_backward_side(name) for path in _raw_leaves(raw_pt[name])
    }
    assert expected_missing, "PyTorch recorded no backward"
    assert {r.name for r in backward_rows} == expected_missing
    assert {r.match_class for r in backward_rows} == {"not_captured"}
    assert all("A's recorder declared it could not capture this" in r.reasons[0] for r in backward_rows)
    # the floor counts rows that could have been paired: the forward ones (all matched but ones_like's)
    matched = sum(1 for r in rows if r.match_class == "matched")
    only = sum(1 for r in rows if r.match_class in ("only_in_a", "only_in_b"))
    assert only == len(missed) and matched / (matched + only) >= 0.5
    assert c.first_failing is None
    assert c.verdict == "pass"
    res = subprocess.run(
        [sys.executable, "-m", "msprobe_cmp.cli", str(mindtorch_dump), str(recorded["torch"] / "step0"),
         "-o", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads((tmp_path / "report" / "comparison.json").read_text())["verdict"] == "pass"


# ---------------------------------------------------------------------------------------------- c


def _check_against_fixture(ours: dict, fixture: dict, prefix: str, cls: str) -> int:
    checked = 0
    for layer in DENSE_LAYERS:
        for suffix in ("forward.0", "backward.0", "parameters_grad"):
            name = f"{prefix}.{layer}.{cls}.{suffix}"
            mine, theirs = _raw_leaves(ours[name]), _raw_leaves(fixture[name])
            assert set(mine) == set(theirs), (name, set(mine) ^ set(theirs))
            for path, leaf in theirs.items():
                if leaf is None:
                    assert mine[path] is None, f"{name}.{path}"
                    continue
                assert mine[path]["shape"] == leaf["shape"]
                # msprobe reduced in float32, we in float64: agreement to float32 rounding
                np.testing.assert_allclose([mine[path][k] for k in STAT_KEYS], [leaf[k] for k in STAT_KEYS],
                                           rtol=1e-5, atol=1e-7, err_msg=f"{name}.{path}")
                checked += 1
    return checked


@pytest.mark.torch
@pytest.mark.mindspore
def test_step0_layer_statistics_equal_msprobes_own_recordings_of_the_same_model(recorded):
    torch_fx = json.loads((FIXTURES / "torch_statistics_a" / "step0" / "rank" / "dump.json").read_text())["data"]
    ms_fx = json.loads((FIXTURES / "statistics_a" / "step0" / "rank" / "dump.json").read_text())["data"]
    # forward: input, output, weight, bias; backward: input (blocks.0's output is null); weight and bias grads
    assert _check_against_fixture(_raw(recorded["torch"], 0), torch_fx, "Module", "Linear") == 3 * 8 - 1
    assert _check_against_fixture(_raw(recorded["mindspore"], 0), ms_fx, "Cell", "Dense") == 3 * 8 - 1
