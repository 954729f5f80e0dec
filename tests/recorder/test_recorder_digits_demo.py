"""The digits demo: two runs with the same names whose first difference is in the first hidden layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def test_demo_recordings_for_the_cli(tmp_path: Path, ms: Any) -> None:
    from msprobe_cmp.recorder.demo import run_demo_recordings

    baseline, target, lines = run_demo_recordings(tmp_path / "dumps", steps=1)
    assert (baseline, target) == (tmp_path / "dumps" / "float32", tmp_path / "dumps" / "float16")
    assert (baseline / "step0" / "rank" / "dump.json").is_file() and (target / "step0" / "rank" / "dump.json").is_file()
    assert len(lines) == 2 and "float32" in lines[0] and "float16" in lines[1]
    with pytest.raises(ConfigError, match="earlier demo dump"):
        run_demo_recordings(tmp_path / "dumps", steps=1)
    marker = baseline / "step0" / "old-file"
    marker.write_text("x")
    run_demo_recordings(tmp_path / "dumps", steps=1, replace=True)
    assert not marker.exists()


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
