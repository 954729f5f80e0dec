"""PyTorch recorder faults found by testing: TorchScript submodules, atomic hook installation, the construct stack
after a failed hook, per-step (not per-run) disabling of failing hooks, torch.func transforms, torch.compile."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from msprobe_cmp import PrecisionDebugger
from msprobe_cmp.recorder.adapters.torch_support import FUNCTORCH_KEY, SCRIPT_MODULE_REASON
from msprobe_cmp.recorder.collector import Collector

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
nn = torch.nn


def _dump(root: Path, step: int = 0) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / f"step{step}" / "rank" / "dump.json").read_text())
    return doc


def _construct(root: Path, step: int = 0) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / f"step{step}" / "rank" / "construct.json").read_text())
    return doc


def _missing(doc: dict[str, Any]) -> dict[str, str]:
    return {item["what"]: item["reason"] for item in doc["not_captured"]}


def _grads_and_loss(net: Any, x: Any) -> tuple[bytes, list[bytes]]:
    loss = net(x).pow(2).mean()
    loss.backward()
    return loss.detach().numpy().tobytes(), [p.grad.numpy().tobytes() for p in net.parameters()]


# ----------------------------------------------------------------------------- 1. TorchScript modules


class _WithScript(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        self.c = nn.Linear(4, 1)

    def forward(self, x: Any) -> Any:
        return self.c(self.b(self.a(x)))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_scripted_submodule_is_skipped_and_the_rest_is_recorded(tmp_path: Path, level: str) -> None:
    torch.manual_seed(0)
    net = _WithScript()
    x = torch.randn(2, 4)
    plain = _grads_and_loss(net, x)
    net.zero_grad()
    with PrecisionDebugger(dump_path=tmp_path, level=level, framework="pytorch") as dbg:
        dbg.start(net)  # used to raise "register_forward_pre_hook is not supported on ScriptModules"
        recorded = _grads_and_loss(net, x)
        dbg.stop()
        dbg.step()
        dbg.start(net)  # the same model again: nothing reinstalled, nothing raised
        dbg.stop()
    assert recorded == plain
    doc = _dump(tmp_path)
    assert [n["what"] for n in doc["not_captured"]] == ["Module.b"]  # once, not once per scripted child
    assert doc["not_captured"][0]["reason"] == SCRIPT_MODULE_REASON
    data = set(doc["data"])
    assert {"Module.a.Linear.forward.0", "Module.c.Linear.forward.0", "Module.a.Linear.backward.0"} <= data
    assert {"Module.a.Linear.parameters_grad", "Module.c.Linear.parameters_grad"} <= data
    assert not [n for n in data if n.startswith("Module.b.")]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_scripted_model_records_no_modules_and_does_not_raise(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1)))
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
        dbg.start(net)
        loss = net(torch.randn(2, 4)).pow(2).mean()
        loss.backward()
        dbg.stop()
    doc = _dump(tmp_path)
    assert _missing(doc) == {"model": SCRIPT_MODULE_REASON}
    assert not [n for n in doc["data"] if n.startswith("Module.")]
    assert "Tensor.pow.0.forward" in doc["data"]  # Python code around the scripted model is recorded


class _NoForwardHooks(nn.Linear):
    """A module kind that accepts a pre-hook but refuses forward hooks (the second registration fails)."""

    def register_forward_hook(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("forward hooks are not supported here")


def test_a_module_whose_hooks_cannot_all_be_installed_is_left_unhooked(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), _NoForwardHooks(4, 4), nn.Linear(4, 1))
    x = torch.randn(2, 4)
    plain = _grads_and_loss(net, x)
    net.zero_grad()
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="pytorch") as dbg:
        dbg.start(net)
        assert not net[1]._forward_pre_hooks  # rolled back: no half-installed module
        assert not net[1].weight._backward_hooks
        recorded = _grads_and_loss(net, x)
        dbg.stop()
    assert recorded == plain
    doc = _dump(tmp_path)
    missing = _missing(doc)
    assert list(missing) == ["Module.1"] and "forward hooks are not supported here" in missing["Module.1"]
    assert {"Module.0.Linear.forward.0", "Module.2.Linear.forward.0", "Module.2.Linear.backward.0"} <= set(doc["data"])
    assert not [n for n in doc["data"] if n.startswith("Module.1.")]


def test_a_failed_model_installation_is_rolled_back_and_start_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    real = nn.Module.named_modules

    def breaks_halfway(self: Any, *args: Any, **kwargs: Any) -> Any:
        for i, item in enumerate(real(self, *args, **kwargs)):
            if i == 2:
                raise RuntimeError("module tree walk failed")
            yield item

    monkeypatch.setattr(nn.Module, "named_modules", breaks_halfway)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
            dbg.start(net)
            adapter = dbg._get_adapter()
            assert adapter._models == () and not adapter._handles and not adapter._states
            assert not any(m._forward_pre_hooks or m._forward_hooks for _, m in real(net))
            net(torch.randn(2, 4)).sum().backward()
            dbg.stop()
    doc = _dump(tmp_path)
    assert "module tree walk failed" in _missing(doc)["Module hooks (start(model))"]
    assert "Functional.linear.0.forward" in doc["data"]  # the APIs are still recorded
    assert len([r for r in caplog.records if "module tree walk failed" in r.getMessage()]) == 1


# ----------------------------------------------------------------------------- 2. the construct stack


class _SparseMix(nn.Module):
    def forward(self, adj: Any, x: Any) -> Any:
        return torch.sparse.mm(adj, x)


class _SparseNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = _SparseMix()
        self.fc = nn.Linear(8, 1)

    def forward(self, adj: Any, x: Any) -> Any:
        return self.fc(self.mix(adj, x))


def test_an_input_whose_gradient_edge_fails_is_declared_and_the_rest_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    net = _SparseNet()
    adj = torch.randn(4, 4).to_sparse().requires_grad_()  # torch finds a leaf's gradient edge through view_as
    x = torch.randn(4, 8)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
            for _ in range(2):
                dbg.start(net)
                net(adj, x).sum().backward()
                dbg.stop()
                dbg.step()
    for step in (0, 1):
        construct = _construct(tmp_path, step)
        # The failed call was popped: later entries do not get it as their parent.
        assert construct["Module.mix._SparseMix.forward.0"] is None
        assert construct["Module.fc.Linear.forward.0"] is None
        assert construct["Tensor.sum.0.forward"] is None
        doc = _dump(tmp_path, step)
        assert "Module.mix._SparseMix.forward.0" in doc["data"]
        backward = doc["data"]["Module.mix._SparseMix.backward.0"]
        # The gradient w.r.t. the output is recorded; the one w.r.t. the sparse input is null and declared.
        assert backward["input"][0]["shape"] == [4, 8] and backward["output"][0] is None
        assert "gradient edge could not be taken" in _missing(doc)["Module.mix._SparseMix.backward.0.output.0"]
        assert {"Module.fc.Linear.forward.0", "Module.fc.Linear.backward.0"} <= set(doc["data"])
    assert not [r for r in caplog.records if "Module.mix" in r.getMessage()]  # no hook failed


def test_a_failed_api_input_view_keeps_the_forward_entry(tmp_path: Path) -> None:
    torch.manual_seed(0)
    adj = torch.randn(4, 4).to_sparse().requires_grad_()
    x = torch.randn(4, 8, requires_grad=True)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="pytorch") as dbg:
        dbg.start()
        torch.mm(adj, x).sum().backward()
        torch.mm(adj, x).sum().backward()
        dbg.stop()
    doc = _dump(tmp_path)
    assert {"Torch.mm.0.forward", "Torch.mm.1.forward"} <= set(doc["data"])
    # The sparse input's gradient cannot be observed (declared); the dense input's is recorded, = adj^T @ 1.
    expected = (adj.detach().to_dense().T @ torch.ones(4, 8)).numpy()
    for n in (0, 1):
        backward = doc["data"][f"Torch.mm.{n}.backward"]
        assert backward["output"][0] is None and f"Torch.mm.{n}.backward.output.0" in _missing(doc)
        assert backward["output"][1]["Max"] == pytest.approx(float(expected.max()), rel=1e-6)
        assert backward["output"][1]["Min"] == pytest.approx(float(expected.min()), rel=1e-6)
    assert "Torch.mm" not in _missing(doc)


def test_the_forward_hook_pops_the_call_even_when_its_recording_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Collector.collect

    def flaky(self: Collector, value: object, **kw: Any) -> Any:
        if kw.get("entry_name", "").startswith("Module.0.Linear.forward"):
            raise RuntimeError("boom")
        return real(self, value, **kw)

    monkeypatch.setattr(Collector, "collect", flaky)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
        dbg.start(net)
        net(torch.randn(2, 4)).sum().backward()
        dbg.stop()
    construct = _construct(tmp_path)
    assert construct["Module.1.Tanh.forward.0"] is None and construct["Module.2.Linear.forward.0"] is None
    assert construct["Torch.tanh.0.forward"] == "Module.1.Tanh.forward.0"


# ----------------------------------------------------------------------------- 3. per-step disabling


def _train(net: Any, dump: Path | None, xs: list[Any], call: Any = None, before_backward: Any = None) -> list[bytes]:
    """SGD steps of ``net`` on ``xs`` (recorded at mix into ``dump`` unless None); the losses and final
    parameters as bytes, for bit-identity checks.  ``call`` runs the forward (default: ``net``)."""
    opt = torch.optim.SGD(net.parameters(), 0.1)
    forward = net if call is None else call
    dbg = PrecisionDebugger(dump_path=dump, level="mix", framework="pytorch") if dump is not None else None
    losses = []
    for step, x in enumerate(xs):
        opt.zero_grad()
        if dbg is not None:
            dbg.start(net)
        if before_backward is not None:
            before_backward(step, net, x)
        loss = forward(x).pow(2).mean()
        loss.backward()
        losses.append(loss.detach().numpy().tobytes())
        if dbg is not None:
            dbg.stop()
        opt.step()
        if dbg is not None:
            dbg.step()
    if dbg is not None:
        dbg.close()
    return losses + [p.detach().numpy().tobytes() for p in net.parameters()]


def _mlp_steps(tmp_path: Path, steps: int, before_backward: Any = None) -> tuple[list[bytes], Path]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    xs = [torch.randn(4, 8) for _ in range(steps)]
    dump = tmp_path if tmp_path.name != "plain" else None
    return _train(net, dump, xs, before_backward=before_backward), tmp_path


def test_a_hook_failing_in_one_step_records_again_in_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = Collector.collect
    failing_steps = {0, 2}
    current = {"step": 0}

    def flaky(self: Collector, value: object, **kw: Any) -> Any:
        if current["step"] in failing_steps and kw.get("entry_name", "").startswith("Functional.linear"):
            raise RuntimeError("linear collection failed")
        return real(self, value, **kw)

    def track(step: int, _net: Any, _x: Any) -> None:
        current["step"] = step

    monkeypatch.setattr(Collector, "collect", flaky)
    plain, _ = _mlp_steps(tmp_path / "plain", 3)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        recorded, root = _mlp_steps(tmp_path / "rec", 3, track)
    assert recorded == plain
    for step in (0, 1, 2):
        doc = _dump(root, step)
        missing = _missing(doc)
        if step in failing_steps:
            assert list(missing) == ["Functional.linear"] and "linear collection failed" in missing["Functional.linear"]
            assert not [n for n in doc["data"] if n.startswith("Functional.linear")]
        else:  # enabled again, and the failure of step 0 is not carried into this step's header
            assert missing == {}
            assert {"Functional.linear.0.forward", "Functional.linear.1.forward"} <= set(doc["data"])
        assert {"Module.0.Linear.forward.0", "Torch.tanh.0.forward", "Module.2.Linear.backward.0"} <= set(doc["data"])
    assert len([r for r in caplog.records if "linear collection failed" in r.getMessage()]) == 1


def test_torch_func_transforms_are_not_recorded_and_disable_nothing(tmp_path: Path) -> None:
    from torch.func import functional_call, grad, vmap

    def per_sample_grads(step: int, net: Any, x: Any) -> None:
        if step == 0:
            params = {k: v.detach() for k, v in net.named_parameters()}
            vmap(grad(lambda p, xi: functional_call(net, p, (xi[None],)).sum()), in_dims=(None, 0))(params, x)

    plain, _ = _mlp_steps(tmp_path / "plain", 2)
    recorded, root = _mlp_steps(tmp_path / "rec", 2, per_sample_grads)
    assert recorded == plain
    _, clean = _mlp_steps(tmp_path / "clean", 2)
    for step in (0, 1):
        # The same entries as a run without the vmap call: nothing recorded inside it, nothing disabled after it.
        assert set(_dump(root, step)["data"]) == set(_dump(clean, step)["data"])
    assert list(_missing(_dump(root, 0))) == [FUNCTORCH_KEY]
    assert _missing(_dump(root, 1)) == {}


# ----------------------------------------------------------------------------- 4. torch.compile


def test_torch_compile_runs_the_original_calls_and_reports_no_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dynamo = pytest.importorskip("torch._dynamo")

    class Multi(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.out = nn.Linear(8, 1)

        def forward(self, x: Any) -> Any:
            for _ in range(4):
                x = torch.tanh(self.fc(x))
            return self.out(x)

    def run(record: bool) -> tuple[list[bytes], Path]:
        dynamo.reset()
        torch.manual_seed(0)
        net = Multi()
        compiled = torch.compile(net, backend="eager")
        xs = [torch.randn(4, 8) for _ in range(3)]
        dump = tmp_path / ("rec" if record else "plain")
        return _train(net, dump if record else None, xs, call=compiled), dump

    try:
        plain, _ = run(False)
        with caplog.at_level(logging.WARNING):
            recorded, root = run(True)
    finally:
        dynamo.reset()
    assert recorded == plain
    for step in range(3):
        doc = _dump(root, step)
        assert doc["not_captured"] == []  # no spurious failure from dynamo tracing the recorder's code
        assert "Tensor.pow.0.forward" in doc["data"]  # eager code around the compiled model is recorded
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "recompile" in m or "msprobe-cmp" in m]


_DYNAMO_IMPORTED_WHILE_RECORDING = """
import sys
import torch
from msprobe_cmp import PrecisionDebugger

assert "torch._dynamo" not in sys.modules, "this check needs dynamo unimported before the recorder starts"
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
dbg = PrecisionDebugger(dump_path=sys.argv[1], level="mix", framework="pytorch")
dbg.start(net)
opt = torch.optim.SGD(net.parameters(), 0.1)  # the first optimizer of a process imports torch._dynamo
net(torch.randn(2, 4)).sum().backward()
dbg.stop()
opt.step()
dbg.close()
import torch._dynamo

def fn(x):
    return torch.tanh(x) * 2 + torch.sin(x).sum()

print(torch._dynamo.explain(fn)(torch.randn(3)).graph_break_count)
"""


def test_dynamo_first_imported_while_recording_compiles_the_original_apis_after_close(tmp_path: Path) -> None:
    """torch._dynamo builds its tables of torch functions when first imported; imported while the recorder's
    wrappers stand in for torch.tanh and the rest (a user's optimizer built after start()), the tables must still
    hold the originals, or every later torch.compile breaks its graph at a wrapped API."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _DYNAMO_IMPORTED_WHILE_RECORDING, str(tmp_path / "dump")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "0"
    assert (tmp_path / "dump" / "step0" / "rank" / "dump.json").is_file()


# ----------------------------------------------------------------------------- 5. no input substitutes


class _Probe(nn.Module):
    """Remembers whether it received its caller's tensor itself."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[Any] = []

    def forward(self, x: Any) -> Any:
        self.received.append(x)
        return x * 2


@pytest.mark.parametrize(
    ("level", "data_mode"),
    [("L0", ["all"]), ("mix", ["all"]), ("L1", ["all"]), ("L0", ["forward"]), ("mix", ["backward", "input"])],
)
def test_modules_receive_their_callers_tensor_at_every_setting(
    tmp_path: Path, level: str, data_mode: list[str]
) -> None:
    """Gradients w.r.t. module inputs come from autograd's own nodes: no view is handed to the module."""
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "level": level,
                    "statistics": {"data_mode": data_mode}})
    )
    net = nn.Sequential(nn.Linear(4, 4), _Probe())
    with PrecisionDebugger(cfg, framework="pytorch") as dbg:
        dbg.start(net)
        h = net[0](torch.randn(2, 4))
        net[1](h).sum().backward()
        dbg.stop()
    assert net[1].received[0] is h


def test_a_compiled_model_passed_to_start_is_declared(tmp_path: Path) -> None:
    dynamo = pytest.importorskip("torch._dynamo")
    try:
        net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        compiled = torch.compile(net, backend="eager")
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
            dbg.start(compiled)
            compiled(torch.randn(2, 4)).sum().backward()
            dbg.stop()
        header = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
        reasons = {item["what"]: item["reason"] for item in header["not_captured"]}
        assert "torch.compile" in reasons.get("model", ""), reasons
    finally:
        dynamo.reset()


def test_an_error_of_the_users_call_reaches_them_as_their_own_and_the_step_is_marked_incomplete(tmp_path):
    """A call in the user's forward that fails (shapes that do not fit) raises the same error through the recorder's
    wrapper, with one note naming the API and the user's line, not the recorder; closing mid-step marks the step
    incomplete in its dump.json."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return torch.matmul(self.fc(x), torch.ones(3, 3))  # shapes that do not fit

    with pytest.raises(RuntimeError) as plain:
        Net()(torch.ones(2, 4))
    net = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), task="statistics", level="mix", framework="pytorch")
    debugger.start(net)
    with pytest.raises(RuntimeError) as caught:
        net(torch.ones(2, 4))
    assert type(caught.value) is type(plain.value) and str(caught.value) == str(plain.value)
    line = Net.forward.__code__.co_firstlineno + 1
    assert caught.value.__notes__ == [
        f"msprobe-cmp: raised by Torch.matmul itself, called at {__file__}, line {line}: the error is the call's; "
        "msprobe-cmp's recorder (its wrapper is the last frame above) only passed it on"]
    debugger.close()
    assert _missing(_dump(tmp_path / "d"))["step"].startswith("incomplete")


def test_the_note_names_the_users_line_not_torchs(tmp_path):
    """nn.Linear given the wrong width fails in torch's own forward (F.linear): the note names the user's line that
    called the layer, not torch's file."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(x)  # 3 features into a 4-wide layer

    net = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), task="statistics", level="mix", framework="pytorch")
    debugger.start(net)
    try:
        with pytest.raises(RuntimeError) as caught:
            net(torch.ones(2, 3))
    finally:
        debugger.close()
    (note,) = caught.value.__notes__
    line = Net.forward.__code__.co_firstlineno + 1
    assert note.startswith(f"msprobe-cmp: raised by Functional.linear itself, called at {__file__}, line {line}: ")
