"""The cross-framework examples agree with each other and with msprobe's fixture dumps, without any recorder.

``examples/torch_api_mlp.py`` (real PyTorch, and the same file under mindtorch) and
``examples/mindspore_twin_mlp.py`` run as scripts with ``--save-npz``; this module checks their numbers against:
- each other: PyTorch vs the MindSpore twin (losses of both steps ≤ 1e-6 apart, weights after two Adam steps ≤ 1e-5),
  mindtorch's forward loss vs PyTorch's;
- a second method: the step-0 loss recomputed in float64 numpy from the saved weights and batch;
- msprobe 1.2.2's own dumps of the same model (tests/data/msprobe-1.2.2-mindspore: ``torch_statistics_a``,
  ``statistics_a``): the statistics of every initial parameter and of the batch, and the losses msprobe recorded.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mindtorch_env import mindtorch_python

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
LAYERS = ("blocks.0", "blocks.1", "head")
TIMEOUT_S = 240


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _fixture_data(run: str, step: int) -> dict:
    return json.loads((FIXTURES / run / f"step{step}" / "rank" / "dump.json").read_text())["data"]


def _stats(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.array([a.max(), a.min(), a.mean(), np.linalg.norm(a)])


def _leaf_stats(leaf: dict) -> np.ndarray:
    return np.array([leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]], dtype=np.float64)


def _run_script(python: str, script: str, out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [python, str(EXAMPLES / script), "--steps", "2", "--save-npz", str(out), *args],
        cwd=out.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{stdout}\n{stderr[-3000:]}"
    return stdout


def _numpy_loss(npz: np.lib.npyio.NpzFile) -> float:
    """MSE of the MLP at the saved initial weights, in float64 (x @ W.T + b, shared ReLU after each block)."""
    h = npz["x"].astype(np.float64)
    for layer in ("blocks.0", "blocks.1"):
        h = np.maximum(h @ npz[f"init.{layer}.weight"].astype(np.float64).T + npz[f"init.{layer}.bias"], 0.0)
    out = h @ npz["init.head.weight"].astype(np.float64).T + npz["init.head.bias"]
    return float(np.mean((out - npz["y"]) ** 2))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[np.lib.npyio.NpzFile, str]]:
    """Two training steps of the PyTorch example and of the MindSpore twin, run at the same time."""
    if not (_have("torch") and _have("mindspore")):
        pytest.skip("needs torch and mindspore")
    d = tmp_path_factory.mktemp("agreement")
    procs = {
        "torch": _run_script(sys.executable, "torch_api_mlp.py", d / "torch.npz"),
        "mindspore": _run_script(sys.executable, "mindspore_twin_mlp.py", d / "mindspore.npz"),
    }
    outputs = {name: _finish(proc) for name, proc in procs.items()}
    return {name: (np.load(d / f"{name}.npz"), outputs[name]) for name in procs}


@pytest.mark.torch
@pytest.mark.mindspore
def test_initial_weights_and_batch_reproduce_msprobe_fixture_statistics(runs):
    torch_npz, ms_npz = runs["torch"][0], runs["mindspore"][0]
    torch_fx, ms_fx = _fixture_data("torch_statistics_a", 0), _fixture_data("statistics_a", 0)
    for layer in LAYERS:
        for p in ("weight", "bias"):
            np.testing.assert_array_equal(torch_npz[f"init.{layer}.{p}"], ms_npz[f"init.{layer}.{p}"])
            ours = _stats(torch_npz[f"init.{layer}.{p}"])
            # msprobe reduced in float32: agreement to ~1e-7 absolute on values of order 1
            np.testing.assert_allclose(ours, _leaf_stats(torch_fx[f"Module.{layer}.Linear.forward.0"]["parameters"][p]),
                                       rtol=0, atol=1e-6, err_msg=f"{layer}.{p} vs torch_statistics_a")
            np.testing.assert_allclose(ours, _leaf_stats(ms_fx[f"Cell.{layer}.Dense.forward.0"]["parameters"][p]),
                                       rtol=0, atol=1e-6, err_msg=f"{layer}.{p} vs statistics_a")
    x_leaf = torch_fx["Module.blocks.0.Linear.forward.0"]["input_args"][0]
    y_leaf = torch_fx["Functional.mse_loss.0.forward"]["input_args"][1]
    np.testing.assert_allclose(_stats(torch_npz["x"]), _leaf_stats(x_leaf), rtol=0, atol=1e-6)
    np.testing.assert_allclose(_stats(torch_npz["y"]), _leaf_stats(y_leaf), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(torch_npz["x"], ms_npz["x"])
    np.testing.assert_array_equal(torch_npz["y"], ms_npz["y"])


@pytest.mark.torch
@pytest.mark.mindspore
def test_pytorch_and_mindspore_twin_agree_over_two_adam_steps(runs):
    (torch_npz, torch_out), (ms_npz, ms_out) = runs["torch"], runs["mindspore"]
    assert torch_npz["losses"].shape == ms_npz["losses"].shape == (2,)
    np.testing.assert_allclose(ms_npz["losses"], torch_npz["losses"], rtol=0, atol=1e-6)
    # second method for step 0: the forward in float64 numpy from the saved weights and batch
    assert torch_npz["losses"][0] == pytest.approx(_numpy_loss(torch_npz), abs=1e-6)
    # msprobe's recordings of the same model: PyTorch's mse_loss output at both steps (same optimizer as ours),
    # MindSpore's mean of the squared error at step 0 (its step 1 used nn.Adam with eps 1e-8: see the twin)
    for step in (0, 1):
        fx_loss = _fixture_data("torch_statistics_a", step)["Functional.mse_loss.0.forward"]["output"][0]["Max"]
        assert torch_npz["losses"][step] == pytest.approx(fx_loss, abs=1e-6)
    ms_fx_loss = _fixture_data("statistics_a", 0)["Functional.square.0.forward"]["output"][0]["Mean"]
    assert ms_npz["losses"][0] == pytest.approx(ms_fx_loss, abs=1e-6)

    for layer in LAYERS:
        for p in ("weight", "bias"):
            key = f"param.{layer}.{p}"
            moved = np.abs(torch_npz[key] - torch_npz[f"init.{layer}.{p}"]).max()
            assert moved > 1e-3, f"{key}: the optimizer did not move it"  # Adam steps are ~lr = 1e-2
            gap = np.abs(torch_npz[key].astype(np.float64) - ms_npz[key]).max()
            assert gap < 1e-5, f"{key}: PyTorch and MindSpore differ by {gap:g} after two Adam steps"
    assert "step 1: loss" in torch_out and "step 1: loss" in ms_out


@pytest.mark.mindtorch
@pytest.mark.torch
def test_mindtorch_runs_the_same_forward_and_skips_training(runs, tmp_path):
    python = mindtorch_python()
    torch_npz = runs["torch"][0]
    out = _finish(_run_script(python, "run_on_mindtorch.py", tmp_path / "mindtorch.npz"))
    mt = np.load(tmp_path / "mindtorch.npz")
    for layer in LAYERS:
        for p in ("weight", "bias"):
            np.testing.assert_array_equal(mt[f"init.{layer}.{p}"], torch_npz[f"init.{layer}.{p}"])
            # no optimizer under mindtorch: the weights stay where they started
            np.testing.assert_array_equal(mt[f"param.{layer}.{p}"], mt[f"init.{layer}.{p}"])
    # both steps are step 0's forward, equal to real PyTorch's step-0 loss
    np.testing.assert_allclose(mt["losses"], [torch_npz["losses"][0]] * 2, rtol=0, atol=1e-6)
    assert "backward() gave no parameter gradients" in out
    assert "optimizer skipped" in out
    # the direct form (`--mindtorch` on the module itself) takes the same path
    direct = subprocess.run(
        [python, str(EXAMPLES / "torch_api_mlp.py"), "--mindtorch", "--steps", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert f"[mindtorch] step 0: loss {torch_npz['losses'][0]:.7f}" in direct.stdout
