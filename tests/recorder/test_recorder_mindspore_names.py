"""Entry names, levels, steps and model lists of a real MindSpore recording (the msprobe fixture model)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder import PrecisionDebugger

CELL_FORWARD = [
    "Cell.blocks.0.Dense.forward.0",
    "Cell.act.ReLU.forward.0",
    "Cell.blocks.1.Dense.forward.0",
    "Cell.act.ReLU.forward.1",
    "Cell.head.Dense.forward.0",
]
PARAM_GRADS = [
    "Cell.blocks.0.Dense.parameters_grad",
    "Cell.blocks.1.Dense.parameters_grad",
    "Cell.head.Dense.parameters_grad",
]
# Backward runs in reverse; each backward entry carries its forward call's index.
CELL_BACKWARD = [
    "Cell.head.Dense.backward.0",
    "Cell.act.ReLU.backward.1",
    "Cell.blocks.1.Dense.backward.0",
    "Cell.act.ReLU.backward.0",
    "Cell.blocks.0.Dense.backward.0",
]
PRIMITIVE_FORWARD = [
    f"Primitive.{attr}.{n}.forward"
    for n in range(3)
    for attr in ("shape_op.Shape", "matmul.MatMul", "bias_add.BiasAdd")
] + ["Primitive.relu.ReLU.0.forward", "Primitive.relu.ReLU.1.forward"]
LOSS_APIS = ["Tensor.__sub__.0.forward", "Functional.square.0.forward", "Functional.shape.0.forward"]


def _names(root: Path, step: int = 0) -> list[str]:
    data = json.loads((root / f"step{step}" / "rank" / "dump.json").read_text())["data"]
    return list(data)


def test_l0_records_cells_params_and_cell_backward_only(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        train(1, dbg)
    names = _names(tmp_path)
    assert names == [
        "Cell.blocks.0.Dense.forward.0",
        "Cell.blocks.0.Dense.parameters_grad",
        "Cell.act.ReLU.forward.0",
        "Cell.blocks.1.Dense.forward.0",
        "Cell.blocks.1.Dense.parameters_grad",
        "Cell.act.ReLU.forward.1",
        "Cell.head.Dense.forward.0",
        "Cell.head.Dense.parameters_grad",
        *CELL_BACKWARD,
    ]
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    assert (data["task"], data["level"], data["framework"], data["dump_data_dir"]) == (
        "statistics",
        "L0",
        "mindspore",
        None,
    )
    dense = data["data"]["Cell.blocks.0.Dense.forward.0"]
    assert list(dense) == ["input_args", "input_kwargs", "output", "parameters"]
    assert list(dense["parameters"]) == ["weight", "bias"]
    assert dense["parameters"]["weight"]["shape"] == [16, 16]
    assert data["data"]["Cell.act.ReLU.forward.1"]["parameters"] == {}
    assert list(data["data"]["Cell.head.Dense.parameters_grad"]) == ["weight", "bias"]
    # The first block's input needs no gradient: its backward output is null (as msprobe writes).
    assert data["data"]["Cell.blocks.0.Dense.backward.0"]["output"] == [None]


def test_l1_records_apis_and_model_primitives(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        train(1, dbg)
    names = _names(tmp_path)
    assert not [n for n in names if n.startswith("Cell.")]
    assert set(PRIMITIVE_FORWARD + LOSS_APIS) <= set(names)
    assert "Primitive.matmul.MatMul.0.backward" in names and "Tensor.__sub__.0.backward" in names
    construct = json.loads((tmp_path / "step0" / "rank" / "construct.json").read_text())
    assert construct == {}  # L1 has no cell tracking (msprobe writes {} too)


def test_l1_without_a_model_wraps_only_api_functions(tmp_path: Path, train: Callable[..., Any]) -> None:
    dbg = PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore")

    class NoModel:
        def start(self, net: Any) -> None:
            dbg.start()

        def __getattr__(self, name: str) -> Any:
            return getattr(dbg, name)

    train(1, NoModel())
    dbg.close()
    forward = [n for n in _names(tmp_path) if n.endswith("forward")]
    assert forward == LOSS_APIS


def test_mix_names_equal_msprobe_fixture_names(
    tmp_path: Path, train: Callable[..., Any], msprobe_fixtures: Path
) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
        train(2, dbg)
    for step in (0, 1):
        ours = _names(tmp_path, step)
        theirs = _names(msprobe_fixtures / "statistics_a", step)
        assert sorted(ours) == sorted(theirs)
        assert set(CELL_FORWARD + PARAM_GRADS + CELL_BACKWARD + PRIMITIVE_FORWARD) <= set(ours)
        # Forward entries come in execution order.
        assert ours[:4] == [
            "Primitive.shape_op.Shape.0.forward",
            "Primitive.matmul.MatMul.0.forward",
            "Primitive.bias_add.BiasAdd.0.forward",
            "Cell.blocks.0.Dense.forward.0",
        ]


def test_steps_directories_and_step_filter(tmp_path: Path, train: Callable[..., Any], ms: Any) -> None:
    original_square = ms.ops.square
    with PrecisionDebugger(dump_path=tmp_path, level="mix", step=["1-2"], framework="mindspore") as dbg:
        train(4, dbg)
        assert dbg.current_step == 4
        # Past the last selected step everything is removed already.
        assert ms.ops.square is original_square
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step1", "step2"]
    assert [p.name for p in (tmp_path / "step1").iterdir()] == ["rank"]
    # Counters restart every step.
    assert "Cell.blocks.0.Dense.forward.0" in _names(tmp_path, 2)
    assert "Cell.blocks.0.Dense.forward.1" not in _names(tmp_path, 2)


def test_config_file_drives_the_recording(tmp_path: Path, train: Callable[..., Any]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "task": "tensor",
                "dump_path": str(tmp_path / "d"),
                "level": "L0",
                "step": [0],
                "tensor": {"scope": [], "list": [], "data_mode": ["forward"], "summary_mode": "md5"},
            }
        )
    )
    with PrecisionDebugger(cfg, framework="mindspore") as dbg:
        train(2, dbg)
    names = _names(tmp_path / "d")
    assert names == CELL_FORWARD  # forward only: no backward, no parameters_grad placeholders
    assert not (tmp_path / "d" / "step1").exists()
    tensor_dir = tmp_path / "d" / "step0" / "rank" / "dump_tensor_data"
    assert len(list(tensor_dir.iterdir())) == 5 * 2 + 3 * 2
    # md5 summary mode: msprobe's CRC32 of the tensor bytes, on top of the statistics.
    leaf = json.loads((tmp_path / "d" / "step0" / "rank" / "dump.json").read_text())["data"][
        "Cell.head.Dense.forward.0"
    ]["output"][0]
    saved = np.load(tensor_dir / leaf["data_name"], allow_pickle=False)
    assert leaf["md5"] == f"{zlib.crc32(saved.tobytes()):08x}"
    assert leaf["Max"] == float(saved.max())


def test_list_filter_keeps_names_stable(tmp_path: Path, train: Callable[..., Any]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "task": "statistics",
                "dump_path": str(tmp_path / "d"),
                "level": "mix",
                "statistics": {"list": ["Cell.head.Dense", "ReLU.1"]},
            }
        )
    )
    with PrecisionDebugger(cfg, framework="mindspore") as dbg:
        train(1, dbg)
    names = set(_names(tmp_path / "d"))
    # A cell name selects the APIs called inside it; counters are not affected by filtering.
    assert {
        "Cell.head.Dense.forward.0",
        "Primitive.matmul.MatMul.2.forward",
        "Primitive.relu.ReLU.1.forward",
        "Cell.head.Dense.backward.0",
        "Cell.head.Dense.parameters_grad",
    } <= names
    assert (
        not {"Cell.blocks.0.Dense.forward.0", "Primitive.matmul.MatMul.0.forward", "Functional.square.0.forward"}
        & names
    )


def test_nested_cells_and_model_lists(tmp_path: Path, ms: Any) -> None:
    nn = ms.nn
    first = nn.SequentialCell([nn.Dense(3, 3), nn.ReLU()])
    second = nn.SequentialCell([nn.Dense(3, 2)])
    x = ms.Tensor([[1.0, -2.0, 3.0]], ms.float32)
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        dbg.start([first, second])
        second(first(x))
        dbg.stop()
        dbg.step()
    names = _names(tmp_path)
    # Each model's root is not hooked (msprobe's convention); the list index follows the prefix.
    assert names == [
        "Cell.0.0.Dense.forward.0",
        "Cell.0.0.Dense.parameters_grad",
        "Cell.0.1.ReLU.forward.0",
        "Cell.1.0.Dense.forward.0",
        "Cell.1.0.Dense.parameters_grad",
    ]
    with PrecisionDebugger(dump_path=tmp_path / "nested", level="L0", framework="mindspore") as dbg:
        outer = nn.SequentialCell([nn.SequentialCell([nn.Dense(3, 3)]), nn.ReLU()])
        holder = nn.SequentialCell([outer])
        dbg.start(holder)
        holder(x)
        dbg.stop()
    construct = json.loads((tmp_path / "nested" / "step0" / "rank" / "construct.json").read_text())
    assert construct == {
        "Cell.0.0.0.Dense.forward.0": "Cell.0.0.SequentialCell.forward.0",
        "Cell.0.0.SequentialCell.forward.0": "Cell.0.SequentialCell.forward.0",
        "Cell.0.1.ReLU.forward.0": "Cell.0.SequentialCell.forward.0",
        "Cell.0.SequentialCell.forward.0": None,
    }


def test_l0_needs_a_model_and_rejects_non_cells(tmp_path: Path, ms: Any) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        with pytest.raises(ConfigError, match="needs the model"):
            dbg.start()
        with pytest.raises(ConfigError, match="not a mindspore.nn.Cell"):
            dbg.start([ms.nn.ReLU(), "not a cell"])
