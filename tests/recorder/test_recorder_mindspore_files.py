"""stack.json, construct.json and the dump reader on what the recorder wrote."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf
from msprobe_cmp.recorder import PrecisionDebugger

THIS_DIR = str(Path(__file__).resolve().parent)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_construct_json_gives_parents_of_apis_and_cells(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
        train(1, dbg)
    construct = _load(tmp_path / "step0" / "rank" / "construct.json")
    expected = {
        "Primitive.shape_op.Shape.0.forward": "Cell.blocks.0.Dense.forward.0",
        "Primitive.matmul.MatMul.0.forward": "Cell.blocks.0.Dense.forward.0",
        "Primitive.bias_add.BiasAdd.1.forward": "Cell.blocks.1.Dense.forward.0",
        "Primitive.relu.ReLU.1.forward": "Cell.act.ReLU.forward.1",
        "Primitive.matmul.MatMul.2.forward": "Cell.head.Dense.forward.0",
        "Cell.blocks.0.Dense.forward.0": None,
        "Cell.act.ReLU.forward.1": None,
        "Tensor.__sub__.0.forward": None,
        "Functional.square.0.forward": None,
        "Functional.square.0.backward": None,
        "Primitive.matmul.MatMul.0.backward": "Cell.blocks.0.Dense.backward.0",
        "Primitive.relu.ReLU.1.backward": "Cell.act.ReLU.backward.1",
        "Primitive.bias_add.BiasAdd.2.backward": "Cell.head.Dense.backward.0",
        "Cell.head.Dense.backward.0": None,
    }
    for name, parent in expected.items():
        assert construct[name] == parent, name
    data = _load(tmp_path / "step0" / "rank" / "dump.json")["data"]
    assert set(construct) == {n for n in data if not n.endswith("parameters_grad")}


def test_stack_json_has_user_frames_and_no_recorder_frames(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
        train(1, dbg)
    stack = _load(tmp_path / "step0" / "rank" / "stack.json")
    data = _load(tmp_path / "step0" / "rank" / "dump.json")["data"]
    forward = [n for n in data if n.endswith("forward") or ".forward." in n]
    assert sorted(stack) == sorted(forward)  # forward entries only, as msprobe
    for name, frames in stack.items():
        assert frames, name
        assert not [f for f in frames if "msprobe_cmp/recorder" in f], name
        assert all(f.startswith("File ") and ", line " in f and ", in " in f for f in frames)
    # Innermost frame: where the call happened.
    assert "nn/layer/basic.py" in stack["Primitive.matmul.MatMul.0.forward"][0]
    assert "x = self.matmul(x, self.weight)" in stack["Primitive.matmul.MatMul.0.forward"][0]
    assert stack["Functional.square.0.forward"][0].endswith("x = ops.square(logits - labels)")
    # The training loop (tests/recorder/conftest.py) is on every stack.
    user = [f for f in stack["Cell.head.Dense.forward.0"] if f.startswith(f"File {THIS_DIR}/conftest.py")]
    assert user and any("return loss_fn(net(x), y)" in f for f in user)


def test_reader_reads_what_the_recorder_wrote(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="mix", task="tensor", framework="mindspore") as dbg:
        train(2, dbg)
    dump = load_dump(tmp_path)
    assert [(u.step, u.rank) for u in dump.units] == [(0, None), (1, None)]
    for unit in dump.units:
        raw = _load(unit.directory / "dump.json")
        assert unit.meta.task == "tensor" and unit.meta.level == "mix" and unit.meta.framework == "mindspore"
        assert raw["dump_data_dir"] == str((unit.directory / "dump_tensor_data").resolve())
        assert [e.name for e in unit.entries] == list(raw["data"])
        assert dict(unit.construct) == _load(unit.directory / "construct.json")
        assert {k: list(v) for k, v in unit.stack.items()} == _load(unit.directory / "stack.json")
        files = {p.name for p in (unit.directory / "dump_tensor_data").iterdir()}
        named = set()
        for entry in unit.entries:
            for path, leaf in entry.leaves():
                if isinstance(leaf, TensorLeaf):
                    assert leaf.data_name == f"{entry.name}.{path}.npy"
                    array = unit.load_tensor(leaf)
                    assert tuple(array.shape) == leaf.shape
                    assert float(np.max(array)) == leaf.max
                    named.add(leaf.data_name)
        assert named == files  # every saved file is referenced, and every reference has a file
    # Single-step and single-rank paths load too.
    assert load_dump(tmp_path / "step1").units[0].step == 1
    assert load_dump(tmp_path / "step1" / "rank" / "dump.json").units[0].entry("Cell.head.Dense.forward.0")
