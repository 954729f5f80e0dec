"""Gradients w.r.t. inputs from autograd's own nodes (recorder/adapters/torch_grads.py): the cases a breaker found,
each checked against an independent computation (``torch.autograd.grad`` on an unrecorded copy)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.torch

from msprobe_cmp import PrecisionDebugger  # noqa: E402


class _Branch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wa = nn.Linear(8, 8)
        self.wb = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.wa(x) + self.wb(x)  # x consumed by two nodes of the module


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.br = _Branch()
        self.post = nn.Linear(8, 1)

    def forward(self, x: Any) -> Any:
        return self.post(torch.tanh(self.br(self.pre(x))))


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def _doc(d: Path) -> dict[str, Any]:
    return json.loads((d / "step0" / "rank" / "dump.json").read_text())


def _reference_input_grad(losses: Any) -> np.ndarray:
    """d(loss)/d(br's input) for the given loss function of the model's output, on an unrecorded copy."""
    torch.manual_seed(0)
    m = _Net()
    h = m.pre(X).detach().requires_grad_()
    (g,) = torch.autograd.grad(losses(m.post(torch.tanh(m.br(h)))), h)
    return g.double().numpy()


def _assert_leaf(leaf: dict[str, Any], g: np.ndarray) -> None:
    assert leaf["Max"] == pytest.approx(g.max(), rel=1e-6)
    assert leaf["Min"] == pytest.approx(g.min(), rel=1e-6)
    assert leaf["Norm"] == pytest.approx(np.linalg.norm(g), rel=1e-6)


def test_a_partial_autograd_grad_before_backward_leaves_the_full_sum(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = _Net()
    with PrecisionDebugger(dump_path=str(tmp_path), level="L0", framework="pytorch") as dbg:
        dbg.start(m)
        loss = m(X).pow(2).mean()
        torch.autograd.grad(loss, m.br.wa.weight, retain_graph=True)  # reaches only one of br's two nodes
        loss.backward()
        dbg.stop()
    doc = _doc(tmp_path)
    _assert_leaf(doc["data"]["Module.br._Branch.backward.0"]["output"][0],
                 _reference_input_grad(lambda y: y.pow(2).mean()))
    assert doc["not_captured"] == []


def test_each_backward_pass_records_its_own_gradients_the_last_one_kept(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = _Net()
    with PrecisionDebugger(dump_path=str(tmp_path), level="L0", framework="pytorch") as dbg:
        dbg.start(m)
        y = m(X)
        y.pow(2).mean().backward(retain_graph=True)
        y.sum().backward()
        dbg.stop()
    _assert_leaf(_doc(tmp_path)["data"]["Module.br._Branch.backward.0"]["output"][0], _reference_input_grad(torch.sum))


class _SameTwice(nn.Module):
    def forward(self, a: Any, b: Any) -> Any:
        return a * b


def test_the_same_tensor_at_two_positions_is_recorded_once_and_the_other_declared(tmp_path: Path) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    m = nn.Sequential(_SameTwice())
    with PrecisionDebugger(dump_path=str(tmp_path), level="L0", framework="pytorch") as dbg:
        dbg.start(m)
        m[0](x, x).sum().backward()
        dbg.stop()
    doc = _doc(tmp_path)
    out = doc["data"]["Module.0._SameTwice.backward.0"]["output"]
    _assert_leaf(out[0], (2 * x.detach()).double().numpy())  # d(x*x)/dx, summed over both positions
    assert out[1] is None
    declared = {i["what"]: i["reason"] for i in doc["not_captured"]}
    assert "same tensor as input 0" in declared["Module.0._SameTwice.backward.0.output.1"]


class _ReturnsParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Parameter(torch.randn(4, 8))

    def forward(self) -> Any:
        return self.q


def test_hooks_on_a_returned_parameter_do_not_pile_up(tmp_path: Path) -> None:
    m = nn.Sequential()
    m.add_module("qp", _ReturnsParam())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    dbg = PrecisionDebugger(dump_path=str(tmp_path), level="mix", framework="pytorch")
    counts = []
    for _ in range(5):
        opt.zero_grad()
        dbg.start(m)
        m.qp().pow(2).sum().backward()
        dbg.stop()
        opt.step()
        dbg.step()
        counts.append(len(m.qp.q._backward_hooks or {}))
    dbg.close()
    # Only the parameters_grad hook stays while recording; none after close.
    assert counts == [1] * 5 and not m.qp.q._backward_hooks


def test_a_float8_cast_and_an_inference_mode_buffer_record_without_failure(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")

    class Quant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            with torch.inference_mode():
                self.register_buffer("scale", torch.ones(1))

        def forward(self, x: Any) -> Any:
            return x.to(torch.float8_e4m3fn).to(torch.float32) * self.scale

    m = nn.Sequential(Quant())
    x = torch.tensor([[0.1, 1.7, -3.3]])
    with caplog.at_level("WARNING", logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=str(tmp_path), level="mix", framework="pytorch") as dbg:
            dbg.start(m)
            m(x)
            dbg.stop()
    assert not [r for r in caplog.records if "failed" in r.getMessage()]
    doc = _doc(tmp_path)
    leaf = doc["data"]["Tensor.to.0.forward"]["output"][0]
    expected = x.to(torch.float8_e4m3fn).float().double().numpy()  # the float8 values, exactly
    assert leaf["dtype"] == "torch.float8_e4m3fn" and leaf["Max"] == expected.max() and leaf["Min"] == expected.min()
    assert doc["data"]["Module.0.Quant.forward.0"]["buffers"]["scale"]["Max"] == 1.0


def test_a_forward_without_backward_declares_its_empty_parameter_gradients() -> None:
    m = nn.Sequential(nn.Linear(3, 2))
    with tempfile.TemporaryDirectory() as d:
        with PrecisionDebugger(dump_path=d, level="L0", framework="pytorch") as dbg:
            dbg.start(m)
            m(torch.randn(2, 3))  # e.g. a validation loss computed with gradients on, never backpropagated
            dbg.stop()
            dbg.step()
        doc = _doc(Path(d))
    declared = {i["what"] for i in doc["not_captured"]}
    assert {"Module.0.Linear.parameters_grad.weight", "Module.0.Linear.parameters_grad.bias"} <= declared


class _TwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        h = self.fc(x)
        return h * 2.0, torch.tanh(h)  # the loss uses only the first


def test_outputs_no_gradient_reaches_are_declared_for_apis_and_modules() -> None:
    torch.manual_seed(0)
    m = nn.ModuleDict({"two": _TwoOut()})
    with tempfile.TemporaryDirectory() as d:
        with PrecisionDebugger(dump_path=d, level="mix", framework="pytorch") as dbg:
            dbg.start(m)
            a, _ = m["two"](X)
            first, _second = torch.chunk(a, 2, dim=1)  # an API with two outputs, one of them unused
            first.sum().backward()
            dbg.stop()
            dbg.step()
        doc = _doc(Path(d))
    declared = {item["what"]: item["reason"] for item in doc["not_captured"]}
    unreached = "no gradient reached this output"
    # the module's backward entry exists (its first output got a gradient); its second output is declared
    module_bwd = "Module.two._TwoOut.backward.0"
    assert module_bwd in doc["data"], sorted(doc["data"])
    assert doc["data"][module_bwd]["input"][0] is not None and doc["data"][module_bwd]["input"][1] is None
    assert declared[f"{module_bwd}.input.1"].startswith(unreached)
    assert f"{module_bwd}.input.0" not in declared
    # the same for torch.chunk's second output
    chunk_bwd = next(n for n in doc["data"] if n.startswith("Torch.chunk.") and n.endswith(".backward"))
    assert doc["data"][chunk_bwd]["input"][0] is not None and doc["data"][chunk_bwd]["input"][1] is None
    assert declared[f"{chunk_bwd}.input.1"].startswith(unreached)
    assert f"{chunk_bwd}.input.0" not in declared
