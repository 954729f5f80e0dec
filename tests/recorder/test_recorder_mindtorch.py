"""mindtorch (PyTorch API on MindSpore): recorded in the mindtorch environment by a subprocess, checked here
against numpy (forward values and the analytic gradients of a sum-of-squares loss)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf

pytestmark = pytest.mark.mindtorch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("mindtorch_record_script.py")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mindtorch_env import mindtorch_python

    python = mindtorch_python()
    out = tmp_path_factory.mktemp("mindtorch")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([python, str(SCRIPT), str(out), "mix"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _stats(a: np.ndarray) -> tuple[float, float, float, float]:
    a = np.asarray(a, np.float64)
    return float(a.max()), float(a.min()), float(a.mean()), float(np.sqrt((a * a).sum()))


def _check(leaf: object, expected: np.ndarray) -> None:
    assert isinstance(leaf, TensorLeaf)
    assert leaf.shape == expected.shape
    assert (leaf.max, leaf.min, leaf.mean, leaf.norm) == pytest.approx(_stats(expected), rel=1e-5, abs=1e-6)


def test_mindtorch_is_detected_and_training_is_unchanged(recorded: Path) -> None:
    result = json.loads((recorded / "result.json").read_text())
    assert result["framework"] == "mindtorch" and result["restored"] is True
    assert result["losses"] == [result["plain_loss"]] * 2  # bit-identical to the run without the recorder
    doc = json.loads((recorded / "dump" / "step1" / "rank" / "dump.json").read_text())
    assert doc["framework"] == "mindtorch"
    assert list(doc["data"]) == [
        "Functional.linear.0.forward", "Module.fc1.Linear.forward.0", "Module.fc1.Linear.parameters_grad",
        "Functional.relu.0.forward", "Module.act.ReLU.forward.0",
        "Functional.linear.1.forward", "Module.fc2.Linear.forward.0", "Module.fc2.Linear.parameters_grad",
        "Tensor.__mul__.0.forward", "Tensor.sum.0.forward",
        "Tensor.sum.0.backward", "Tensor.__mul__.0.backward",
        "Functional.linear.1.backward", "Module.fc2.Linear.backward.0",
        "Functional.relu.0.backward", "Module.act.ReLU.backward.0",
        "Functional.linear.0.backward", "Module.fc1.Linear.backward.0",
    ]
    missing = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert "gradients w.r.t. module inputs" in missing["Module.fc1.Linear.backward.0.output"]
    assert any("API inputs" in reason for reason in missing.values())


def test_mindtorch_forward_and_gradients_match_numpy(recorded: Path) -> None:
    inp = np.load(recorded / "inputs.npz")
    x = inp["x"].astype(np.float64)
    w1, b1, w2, b2 = (inp[k].astype(np.float64) for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"))
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    out = a @ w2.T + b2
    g_out = 2 * out  # d(sum(out**2))/d out
    g_a = g_out @ w2
    g_h = g_a * (h > 0)
    unit = load_dump(recorded / "dump" / "step0").units[0]
    leaves = {e.name: dict(e.leaves()) for e in unit.entries}
    _check(leaves["Functional.linear.0.forward"]["input.0"], x)
    _check(leaves["Module.fc1.Linear.forward.0"]["output.0"], h)
    _check(leaves["Module.fc1.Linear.forward.0"]["parameters.weight"], w1)
    _check(leaves["Module.act.ReLU.forward.0"]["output.0"], a)
    _check(leaves["Functional.linear.1.forward"]["output.0"], out)
    assert leaves["Module.fc1.Linear.forward.0"]["output.0"].dtype == "torch.float32"
    _check(leaves["Module.fc1.Linear.parameters_grad"]["weight"], g_h.T @ x)
    _check(leaves["Module.fc1.Linear.parameters_grad"]["bias"], g_h.sum(0))
    _check(leaves["Module.fc2.Linear.parameters_grad"]["weight"], g_out.T @ a)
    _check(leaves["Module.fc2.Linear.backward.0"]["input.0"], g_out)
    _check(leaves["Module.act.ReLU.backward.0"]["input.0"], g_a)
    _check(leaves["Module.fc1.Linear.backward.0"]["input.0"], g_h)
    assert leaves["Module.fc1.Linear.backward.0"]["output.0"] is None
    _check(leaves["Functional.linear.0.backward"]["input.0"], g_h)


def test_mindtorch_a_failing_kernel_of_the_training_reaches_the_user(tmp_path: Path) -> None:
    # The same asynchronous-error path as MindSpore's (mindtorch runs on MindSpore PyNative): the recorder's copy
    # of the next tensor met the error and logged it as a hook failure, so the user's own sync succeeded.
    from mindtorch_env import mindtorch_python

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = Path(__file__).with_name("mindtorch_kernel_error_script.py")
    res = subprocess.run([mindtorch_python(), str(script), str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    plain, recorded = result["plain"], result["recorded"]
    # 2 * 3 elements of 1 + 1: the steps without the error. With the recorder MatMul's error reaches the user at
    # step 1, once (the recorder synchronises right after the call). Without it MindSpore raises it at a later
    # synchronisation, which under load was step 2's in one CI run: the plain run only shows the same error, after
    # step 0.
    assert recorded[0] == recorded[2] == 12.0 and isinstance(recorded[1], str) and "MatMul" in recorded[1]
    assert plain[0] == 12.0 and {v for v in plain[1:] if isinstance(v, str)} == {recorded[1]}
    doc = json.loads((tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert "the training raised an error" in reasons["Torch.matmul"] and "MatMul" in reasons["Torch.matmul"]
    later = json.loads((tmp_path / "dump" / "step2" / "rank" / "dump.json").read_text())
    assert later["data"]["Torch.square.0.forward"]["output"][0]["Max"] == 1.0  # recording goes on afterwards
