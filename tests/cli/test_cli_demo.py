"""`msprobe-cmp demo` end to end: two real MindSpore trainings recorded, compared and reported."""

from __future__ import annotations

import json

import pytest

from msprobe_cmp.cli import main

pytest.importorskip("mindspore")
pytest.importorskip("sklearn")


def test_demo_records_two_runs_and_reports_where_they_diverge(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "-o", str(out), "--steps", "2"]) == 0
    text = capsys.readouterr().out
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["mode"] == "tensor" and doc["compared_count"] > 0
    first = doc["first_divergent"]
    # Both runs start from the same weights and batches: the first difference is the first float16 op of fc1.
    assert first["name"].startswith("Primitive.matmul.MatMul.0.forward")
    assert first["parent_cell"] == "Cell.fc1.Dense.forward.0"
    rows = {r["name"]: r for u in doc["units"][:1] for r in u["rows"]}
    assert rows["Cell.fc1.Dense.forward.0.input.0"]["metrics"]["MaxAbsErr"] == 0.0  # same data in
    assert rows["Cell.fc1.Dense.forward.0.output.0"]["metrics"]["MaxAbsErr"] > 0.0  # float16 compute out
    assert "first divergent: Primitive.matmul.MatMul.0.forward" in text
    # A second run refuses to overwrite, and --force replaces it.
    assert main(["demo", "-o", str(out), "--steps", "1"]) == 2
    assert main(["demo", "-o", str(out), "--steps", "1", "--force"]) == 0
