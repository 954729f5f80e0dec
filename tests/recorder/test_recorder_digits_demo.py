"""The digits workloads: the recorder's MLP (two precisions whose first difference is in the first hidden layer;
bit-identical training under every recording option) and the port demo's three runs (PyTorch, its MindSpore port,
the port with BatchNorm momentum in the wrong convention)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.errors import ConfigError


def test_float16_hidden_layers_diverge_first_in_the_first_hidden_layer(tmp_path: Path, ms: Any) -> None:
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    fp32 = run_digits_training(tmp_path / "fp32", hidden_dtype="float32", steps=2)
    fp16 = run_digits_training(tmp_path / "fp16", hidden_dtype="float16", steps=2)
    plain = run_digits_training(None, hidden_dtype="float32", steps=2)
    assert fp32["losses"] == plain["losses"]  # recording changes nothing
    assert fp32["losses"] != fp16["losses"]
    assert abs(fp32["losses"][0] - fp16["losses"][0]) < 1e-2  # a precision change, not a different model
    for step in (0, 1):
        a = json.loads((tmp_path / "fp32" / f"step{step}" / "rank" / "dump.json").read_text())["data"]
        b = json.loads((tmp_path / "fp16" / f"step{step}" / "rank" / "dump.json").read_text())["data"]
        assert list(a) == list(b)
    a = json.loads((tmp_path / "fp32" / "step0" / "rank" / "dump.json").read_text())["data"]
    b = json.loads((tmp_path / "fp16" / "step0" / "rank" / "dump.json").read_text())["data"]
    differing = [name for name in a if a[name] != b[name]]
    assert differing[0] == "Primitive.matmul.MatMul.0.forward"
    construct = json.loads((tmp_path / "fp16" / "step0" / "rank" / "construct.json").read_text())
    assert construct[differing[0]] == "Cell.fc1.Dense.forward.0"
    # to_float(float16) casts inside the op dispatch: the MatMul sees float32 inputs, computes in float16.
    assert a["Primitive.matmul.MatMul.0.forward"]["input_args"] == b["Primitive.matmul.MatMul.0.forward"]["input_args"]
    assert b["Primitive.matmul.MatMul.0.forward"]["output"][0]["dtype"] == "Float16"
    assert a["Primitive.matmul.MatMul.0.forward"]["output"][0]["dtype"] == "Float32"
    # Before the first hidden layer, everything is identical (the model input).
    assert a["Cell.fc1.Dense.forward.0"]["input_args"] == b["Cell.fc1.Dense.forward.0"]["input_args"]


def test_demo_rejects_unknown_dtype(tmp_path: Path, ms: Any) -> None:
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    with pytest.raises(ConfigError, match="hidden_dtype"):
        run_digits_training(tmp_path, hidden_dtype="int8")


@pytest.fixture(scope="module")
def port_runs(ms: Any) -> dict[str, dict[str, Any]]:
    """The three port-demo runs, two steps each, without a recorder."""
    pytest.importorskip("torch")
    from msprobe_cmp.recorder.adapters.digits_port import PORTS, run_port_training

    return {port: run_port_training(None, port=port, steps=2) for port in PORTS}


def test_the_port_trains_like_the_original_and_the_bug_changes_only_the_moving_statistics(
    port_runs: dict[str, dict[str, Any]],
) -> None:
    torch_run, port, bug = port_runs["pytorch"], port_runs["mindspore"], port_runs["bug"]
    # ln(10) = 2.3026: ten classes, small random weights: the first loss is near chance.
    assert abs(torch_run["losses"][0] - np.log(10)) < 0.3
    np.testing.assert_allclose(port["losses"], torch_run["losses"], rtol=1e-6)
    np.testing.assert_allclose(port["moving_mean"], torch_run["moving_mean"], atol=1e-6)
    np.testing.assert_allclose(port["moving_variance"], torch_run["moving_variance"], atol=1e-6)
    # Training normalises with the batch statistics: the bug leaves every loss bit-identical to the port's ...
    assert bug["losses"] == port["losses"]
    # ... and after two steps from (0, 1) PyTorch keeps 0.9² = 0.81 of the initial moving variance, the bug 0.1² =
    # 0.01: its moving variance is far from PyTorch's.
    assert np.abs(bug["moving_variance"] - torch_run["moving_variance"]).max() > 0.3


def test_recording_the_port_runs_changes_nothing(tmp_path: Path, port_runs: dict[str, dict[str, Any]]) -> None:
    from msprobe_cmp.recorder.adapters.digits_port import run_port_training

    for port in ("pytorch", "bug"):
        recorded = run_port_training(tmp_path / port, port=port, steps=2)
        assert recorded["losses"] == port_runs[port]["losses"]
        np.testing.assert_array_equal(recorded["moving_variance"], port_runs[port]["moving_variance"])
        header = json.loads((tmp_path / port / "step1" / "rank" / "dump.json").read_text())
        assert header["framework"] == ("pytorch" if port == "pytorch" else "mindspore")
        assert header["task"] == "tensor" and header["level"] == "mix"


def test_port_demo_rejects_bad_arguments(ms: Any) -> None:
    from msprobe_cmp.recorder.adapters.digits_port import run_port_training

    with pytest.raises(ConfigError, match="port: expected one of pytorch, mindspore, bug"):
        run_port_training(None, port="mindtorch")
    with pytest.raises(ConfigError, match="steps"):
        run_port_training(None, port="bug", steps=0)


def test_demo_recordings_refuse_an_earlier_demo(tmp_path: Path, ms: Any) -> None:
    pytest.importorskip("torch")
    from msprobe_cmp.recorder.demo import run_demo_recordings

    (tmp_path / "dumps" / "bug").mkdir(parents=True)
    with pytest.raises(ConfigError, match="earlier demo dump is there; pass --force"):
        run_demo_recordings(tmp_path / "dumps", steps=1)
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == ["bug"]  # nothing recorded


@pytest.fixture(scope="module")
def plain_digits_losses(ms: Any) -> list[float]:
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    return list(run_digits_training(None, steps=10)["losses"])


@pytest.mark.parametrize("level", ["L0", "L1", "mix", "debug"])
@pytest.mark.parametrize(
    ("task", "summary_mode"),
    [("statistics", "statistics"), ("tensor", "statistics"), ("statistics", "md5"), ("structure", "statistics")],
)
def test_ten_steps_are_bit_identical_at_every_level_and_task(
    tmp_path: Path, plain_digits_losses: list[float], level: str, task: str, summary_mode: str
) -> None:
    """Dropout is never disabled and nothing the recorder does changes training: the losses of 10
    SGD steps are bit-identical to the run without a recorder."""
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    recorded = run_digits_training(tmp_path, steps=10, level=level, task=task, summary_mode=summary_mode)
    assert recorded["losses"] == plain_digits_losses  # float equality of every step's loss
    # The structure task records at mix whatever the level (msprobe's rule), so it writes dump.json.
    name = "debug.json" if level == "debug" and task != "structure" else "dump.json"
    assert (tmp_path / "step9" / "rank" / name).is_file()


@pytest.mark.parametrize("level", ["L0", "L1", "mix", "debug"])
@pytest.mark.parametrize(("task", "name_list"), [("statistics", ()), ("tensor", ("name-regex(MatMul|fc2)",))])
def test_ten_steps_are_bit_identical_with_async_dump(
    tmp_path: Path, plain_digits_losses: list[float], level: str, task: str, name_list: tuple[str, ...]
) -> None:
    """async_dump's device-side statistics (and the tensor task's held copies) change nothing either."""
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    recorded = run_digits_training(tmp_path, steps=10, level=level, task=task, async_dump=True, name_list=name_list)
    assert recorded["losses"] == plain_digits_losses
    name = "debug.json" if level == "debug" else "dump.json"
    data = json.loads((tmp_path / "step9" / "rank" / name).read_text())["data"]
    assert data  # something was recorded, and resolved: no leaf is left without statistics
    text = json.dumps(data)
    assert '"Max": null' not in text
