"""An API function a model holds from before the debugger existed: declared and warned at start(model)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from msprobe_cmp import PrecisionDebugger


@pytest.mark.mindspore
def test_a_mindspore_cell_holding_an_unwrapped_api_is_declared(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ms = pytest.importorskip("mindspore")
    ops, nn = ms.ops, ms.nn

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(4, 4)
            self.act = ops.relu  # bound now, before the debugger wraps mindspore.ops.relu

        def construct(self, x: object) -> object:
            return self.act(self.fc(x))

    net = Net()
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=str(tmp_path), level="mix", framework="mindspore") as dbg:
            dbg.start(net)
            net(ms.Tensor([[1.0, -2.0, 3.0, -4.0]]))
            dbg.stop()
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    declared = {i["what"]: i["reason"] for i in doc["not_captured"]}
    assert "mindspore.ops.relu" in declared["Cell.act"]
    assert not [k for k in doc["data"] if ".relu." in k]  # the call went to the original: nothing recorded
    assert sum("holds mindspore.ops.relu" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.torch
def test_nothing_is_declared_when_the_model_holds_the_wrapper(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with PrecisionDebugger(dump_path=str(tmp_path), level="mix", framework="pytorch") as dbg:
        net = torch.nn.Linear(4, 4)
        net.act = torch.nn.functional.relu  # bound after the debugger: the wrapper
        dbg.start(net)
        net.act(net(torch.randn(2, 4)))
        dbg.stop()
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    assert doc["not_captured"] == []
    assert "Functional.relu.0.forward" in doc["data"]
