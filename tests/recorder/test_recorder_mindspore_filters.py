"""Filters on a real MindSpore run (the msprobe fixture model): scope, list (plain and regex), rank, data_mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.recorder import PrecisionDebugger
from msprobe_cmp.recorder.adapters.mindspore import MindSporeAdapter


def _data(root: Path, step: int = 0, rank: str = "rank") -> dict[str, Any]:
    return json.loads((root / f"step{step}" / rank / "dump.json").read_text())["data"]


def _record(tmp_path: Path, train: Callable[..., Any], steps: int = 1, **task_keys: Any) -> dict[str, Any]:
    level = task_keys.pop("level", "mix")
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"dump_path": str(tmp_path / "d"), "level": level, "task": "statistics", "statistics": task_keys})
    )
    with PrecisionDebugger(cfg, framework="mindspore") as dbg:
        train(steps, dbg)
    return _data(tmp_path / "d")


def test_cell_scope_records_the_range_and_its_backward(tmp_path: Path, train: Callable[..., Any]) -> None:
    data = _record(tmp_path, train, 2, scope=["Cell.blocks.1.Dense.forward.0", "Cell.act.ReLU.forward.1"])
    assert list(data) == [
        "Primitive.shape_op.Shape.1.forward",
        "Primitive.matmul.MatMul.1.forward",
        "Primitive.bias_add.BiasAdd.1.forward",
        "Cell.blocks.1.Dense.forward.0",
        "Cell.blocks.1.Dense.parameters_grad",
        "Primitive.relu.ReLU.1.forward",
        "Cell.act.ReLU.forward.1",
        "Primitive.relu.ReLU.1.backward",
        "Cell.act.ReLU.backward.1",
        "Primitive.bias_add.BiasAdd.1.backward",
        "Primitive.matmul.MatMul.1.backward",
        "Cell.blocks.1.Dense.backward.0",
    ]
    assert data["Cell.blocks.1.Dense.parameters_grad"]["weight"][0] is not None
    # The range applies again in every step (names restart at 0).
    assert list(_data(tmp_path / "d", 1)) == list(data)


def test_api_scope_with_a_backward_name_as_end(tmp_path: Path, train: Callable[..., Any]) -> None:
    data = _record(
        tmp_path, train, level="L1", scope=["Primitive.relu.ReLU.1.forward", "Functional.square.0.backward"]
    )
    forward = [n for n in data if n.endswith("forward")]
    assert forward == [
        "Primitive.relu.ReLU.1.forward",
        "Primitive.shape_op.Shape.2.forward",
        "Primitive.matmul.MatMul.2.forward",
        "Primitive.bias_add.BiasAdd.2.forward",
        "Tensor.__sub__.0.forward",
        "Functional.square.0.forward",
    ]
    assert {n.replace("backward", "forward") for n in data if n.endswith("backward")} <= set(forward)


def test_list_plain_members_match_whole_name_parts(tmp_path: Path, train: Callable[..., Any], ms: Any) -> None:
    # "relu" is a whole part of "Primitive.relu.ReLU.0.forward" (the attribute name); "squ" is no whole part.
    data = _record(tmp_path, train, level="L1", list=["relu", "squ"])
    assert sorted(n for n in data if n.endswith("forward")) == [
        "Primitive.relu.ReLU.0.forward",
        "Primitive.relu.ReLU.1.forward",
    ]
    data = _record(tmp_path / "b", train, level="L1", list=["ReLU.1", "Functional.square"])
    assert sorted(n for n in data if n.endswith("forward")) == [
        "Functional.square.0.forward",
        "Primitive.relu.ReLU.1.forward",
    ]


def test_list_regex_members(tmp_path: Path, train: Callable[..., Any]) -> None:
    data = _record(tmp_path, train, level="L0", list=[r"name-regex(^Cell\.blocks\.\d\.Dense\.(forward|backward)\.0$)"])
    assert list(data) == [
        "Cell.blocks.0.Dense.forward.0",
        "Cell.blocks.0.Dense.parameters_grad",
        "Cell.blocks.1.Dense.forward.0",
        "Cell.blocks.1.Dense.parameters_grad",
        "Cell.blocks.1.Dense.backward.0",
        "Cell.blocks.0.Dense.backward.0",
    ]


@pytest.mark.parametrize(
    ("modes", "forward", "backward", "inputs", "outputs"),
    [
        (["forward"], True, False, True, True),
        (["backward"], False, True, True, True),
        (["input"], True, True, True, False),
        (["output"], True, True, False, True),
        (["forward", "output"], True, False, False, True),
        (["all"], True, True, True, True),
    ],
)
def test_data_mode(
    tmp_path: Path,
    train: Callable[..., Any],
    modes: list[str],
    forward: bool,
    backward: bool,
    inputs: bool,
    outputs: bool,
) -> None:
    data = _record(tmp_path, train, data_mode=modes)
    fwd = data.get("Cell.head.Dense.forward.0")
    bwd = data.get("Cell.head.Dense.backward.0")
    assert (fwd is not None, bwd is not None) == (forward, backward)
    assert ("Cell.head.Dense.parameters_grad" in data) == backward
    assert ("Primitive.matmul.MatMul.2.backward" in data) == backward
    for entry, in_key, out_key in ((fwd, "input_args", "output"), (bwd, "input", "output")):
        if entry is None:
            continue
        assert bool(entry[in_key]) == inputs and bool(entry[out_key]) == outputs
    if fwd is not None:
        assert fwd["parameters"]["weight"]["shape"] == [4, 16]


def test_rank_filter(tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    # Not distributed: a rank list does not apply (one warning) and the directory is "rank".
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path / "plain", level="L0", rank=[3], framework="mindspore") as dbg:
            train(1, dbg)
    assert (tmp_path / "plain" / "step0" / "rank" / "dump.json").is_file()
    assert any("not distributed" in r.getMessage() for r in caplog.records)
    # Distributed (the rank MindSpore reports once communication is initialised; faked here, since
    # init() needs a cluster): only listed ranks record, under rank<R>.
    monkeypatch.setattr(MindSporeAdapter, "_detect_rank", staticmethod(lambda: 1))
    with PrecisionDebugger(dump_path=tmp_path / "other", level="L0", rank=[0, 2], framework="mindspore") as dbg:
        other = train(1, dbg)
    assert not (tmp_path / "other").exists()
    with PrecisionDebugger(dump_path=tmp_path / "mine", level="L0", rank=["0-1"], framework="mindspore") as dbg:
        mine = train(1, dbg)
    assert [p.name for p in (tmp_path / "mine" / "step0").iterdir()] == ["rank1"]
    assert "Cell.head.Dense.forward.0" in _data(tmp_path / "mine", rank="rank1")
    np.testing.assert_array_equal(other.losses[0], mine.losses[0])
