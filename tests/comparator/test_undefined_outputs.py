"""Outputs a framework leaves undefined (MindSpore's BatchNorm outputs 1 and 2 on CPU) are not judged: a failure
there becomes a warning with the reason; every other row is judged as usual."""

from __future__ import annotations

import json
from pathlib import Path

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump.reader import load_dump


def _leaf(value: float) -> dict:
    return {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [4], "Max": value, "Min": value,
            "Mean": value, "Norm": 2 * abs(value)}


def _write(root: Path, outputs: list[float], name: str = "Primitive.bn_train.BatchNorm.0.forward") -> Path:
    rank = root / "step0" / "rank"
    rank.mkdir(parents=True)
    data = {name: {"input_args": [_leaf(1.0)], "input_kwargs": {}, "output": [_leaf(v) for v in outputs]}}
    doc = {"task": "statistics", "level": "mix", "framework": "mindspore", "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    return root


def test_batchnorm_reserve_outputs_are_not_judged(tmp_path: Path) -> None:
    # outputs 1 and 2 hold stale memory (differ by 1e6 here); output 0 really differs by 5 (> 1: fails)
    a = _write(tmp_path / "a", [5.0, 1e6, -1e6, 0.5, 0.25])
    b = _write(tmp_path / "b", [0.0, 0.0, 0.0, 0.5, 0.25])
    rows = {r.arg_path: r for r in compare(load_dump(a), load_dump(b)).units[0].rows}
    assert rows["output.0"].verdict == "fail"
    for path in ("output.1", "output.2"):
        assert rows[path].verdict == "warning"
        assert "uninitialised on CPU" in rows[path].reasons[-1]
    assert rows["output.3"].verdict == "pass" and rows["output.4"].verdict == "pass"


def test_other_ops_outputs_1_and_2_are_judged(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", [0.0, 1e6, -1e6], name="Primitive.split.Split.0.forward")
    b = _write(tmp_path / "b", [0.0, 0.0, 0.0], name="Primitive.split.Split.0.forward")
    rows = {r.arg_path: r for r in compare(load_dump(a), load_dump(b)).units[0].rows}
    assert rows["output.1"].verdict == "fail" and rows["output.2"].verdict == "fail"
