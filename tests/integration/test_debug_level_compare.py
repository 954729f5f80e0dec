"""debug.json written by the debug level's save() compares like dump.json: tensors by their saved files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.cli import main

pytest.importorskip("mindspore")
pytest.importorskip("sklearn")


def test_saved_variables_compare_as_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    run_digits_training(tmp_path / "fp32", hidden_dtype="float32", steps=1, level="debug", task="tensor")
    run_digits_training(tmp_path / "fp16", hidden_dtype="float16", steps=1, level="debug", task="tensor")
    assert main([str(tmp_path / "fp16"), str(tmp_path / "fp32"), "-o", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    rows = {r["name"]: r for r in doc["units"][0]["rows"]}
    assert rows and all(name.split(".")[2] == "tensor" for name in rows)  # "<name>.<n>.tensor[...]"
    logits = rows["logits.0.tensor"]
    assert logits["compared_by"] == "tensor"
    a = np.load(tmp_path / "fp16" / "step0" / "rank" / "dump_tensor_data" / logits["a"]["data_name"])
    b = np.load(tmp_path / "fp32" / "step0" / "rank" / "dump_tensor_data" / logits["b"]["data_name"])
    assert logits["metrics"]["MaxAbsErr"] == pytest.approx(float(np.max(np.abs(a.astype(np.float64) - b))))
