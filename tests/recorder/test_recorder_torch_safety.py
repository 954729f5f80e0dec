"""PyTorch recorder never changes or breaks the training it observes, and undoes everything on close()."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp import PrecisionDebugger
from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.collector import Collector

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

LEVELS_TASKS = [
    (level, task) for level in ("L0", "L1", "mix", "debug") for task in ("statistics", "tensor", "structure")
    if not (level == "debug" and task == "structure")
]


def _assert_same_training(a: Any, b: Any) -> None:
    assert len(a.losses) == len(b.losses)
    for la, lb in zip(a.losses, b.losses, strict=True):
        assert la.tobytes() == lb.tobytes()
    for name in a.first_grads:
        assert a.first_grads[name].tobytes() == b.first_grads[name].tobytes(), name
    for name in a.weights:
        assert a.weights[name].tobytes() == b.weights[name].tobytes(), name


@pytest.mark.parametrize(("level", "task"), LEVELS_TASKS)
def test_three_adam_steps_are_bit_identical(tmp_path: Path, torch_train: Any, level: str, task: str) -> None:
    plain = torch_train(3)
    with PrecisionDebugger(dump_path=tmp_path, level=level, task=task, framework="pytorch") as dbg:
        recorded = torch_train(3, dbg)
    _assert_same_training(plain, recorded)
    if level != "debug":
        assert (tmp_path / "step2" / "rank" / "dump.json").is_file()


def test_bit_identical_with_md5_and_async(tmp_path: Path, torch_train: Any) -> None:
    plain = torch_train(2)
    for name, extra in (("md5", {"statistics": {"summary_mode": "md5"}}), ("async", {"async_dump": True})):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / name), "level": "mix", **extra}))
        with PrecisionDebugger(cfg, framework="pytorch") as dbg:
            _assert_same_training(plain, torch_train(2, dbg))


def test_close_restores_every_wrapped_attribute(tmp_path: Path, torch_train: Any) -> None:
    from torch.utils.hooks import BackwardHook

    originals = {
        "linear": F.linear,
        "torch.add": torch.add,
        "ones_like": torch.ones_like,
        "setup_input_hook": BackwardHook.setup_input_hook,
    }
    own_tensor_attrs = set(vars(torch.Tensor))
    add_slot = torch.Tensor.__add__
    dbg = PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch")
    assert F.linear is not originals["linear"] and "__iadd__" in vars(torch.Tensor)
    net = torch_train(1, dbg).net
    dbg.close()
    assert F.linear is originals["linear"]
    assert torch.add is originals["torch.add"] and torch.ones_like is originals["ones_like"]
    assert BackwardHook.setup_input_hook is originals["setup_input_hook"]
    assert set(vars(torch.Tensor)) == own_tensor_attrs
    assert torch.Tensor.__add__ is add_slot
    for module in net.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks
    for p in net.parameters():
        assert not p._backward_hooks
    dbg.close()  # twice is harmless


def test_a_second_debugger_refuses_to_stack_wrappers(tmp_path: Path) -> None:
    with PrecisionDebugger(dump_path=tmp_path / "a", level="L1", framework="pytorch"):
        with pytest.raises(ConfigError, match="already wrapped"):
            PrecisionDebugger(dump_path=tmp_path / "b", level="L1", framework="pytorch")
    assert "__add__" not in vars(torch.Tensor)


def test_a_failing_hook_never_reaches_training(tmp_path: Path, torch_train: Any, monkeypatch: Any) -> None:
    plain = torch_train(2)
    real = Collector.collect

    def flaky(self: Collector, value: object, **kw: Any) -> Any:
        if kw.get("entry_name", "").startswith("Functional.relu"):
            raise RuntimeError("boom")
        return real(self, value, **kw)

    monkeypatch.setattr(Collector, "collect", flaky)
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
        recorded = torch_train(2, dbg)
    _assert_same_training(plain, recorded)
    doc = json.loads((tmp_path / "step1" / "rank" / "dump.json").read_text())
    missing = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert "Functional.relu" in missing and "boom" in missing["Functional.relu"]
    assert "Functional.linear.0.forward" in doc["data"]  # the rest is still recorded


def test_tensors_are_not_kept_alive_past_a_step(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    refs = []
    with PrecisionDebugger(dump_path=tmp_path, level="mix", task="tensor", framework="pytorch") as dbg:
        for _ in range(2):
            dbg.start(net)
            x = torch.randn(3, 4, requires_grad=True)
            hidden = net[0](x)
            out = net[2](net[1](hidden))
            out.sum().backward()
            refs += [weakref.ref(x), weakref.ref(hidden), weakref.ref(out)]
            dbg.stop()
            dbg.step()
            del x, hidden, out
        gc.collect()
        assert [r() for r in refs] == [None] * len(refs)


def test_inplace_modules_are_recorded_without_breaking_backward(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(inplace=True), torch.nn.Linear(3, 1))
    x = torch.randn(2, 3)
    plain = torch.autograd.grad(net(x).sum(), list(net.parameters()))
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="pytorch") as dbg:
        dbg.start(net)
        grads = torch.autograd.grad(net(x).sum(), list(net.parameters()))
        dbg.stop()
    for a, b in zip(plain, grads, strict=True):
        assert torch.equal(a, b)
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    assert "Module.1.ReLU.forward.0" in doc["data"] and "Module.1.ReLU.backward.0" in doc["data"]
    assert "Module.0.Linear.backward.0" in doc["data"]
    assert doc["not_captured"] == []


def test_multi_head_attention_keeps_its_self_attention_path(tmp_path: Path) -> None:
    # F.multi_head_attention_forward checks ``query is key``: one view per distinct tensor keeps it true.
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(8, 2)
    x = torch.randn(5, 2, 8, requires_grad=True)
    plain = attn(x, x, x)[0]
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="pytorch") as dbg:
        dbg.start()
        recorded = attn(x, x, x)[0]
        recorded.sum().backward()
        dbg.stop()
    assert torch.equal(plain, recorded)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Functional.multi_head_attention_forward.0.forward" in data


def test_filters_step_list_scope_and_data_mode(tmp_path: Path, torch_train: Any) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / "d"), "level": "mix", "step": [1],
        "statistics": {"list": ["Module.blocks.1", "mse_loss"], "data_mode": ["forward"]},
    }))
    with PrecisionDebugger(cfg, framework="pytorch") as dbg:
        torch_train(3, dbg)
    assert not (tmp_path / "d" / "step0").exists() and not (tmp_path / "d" / "step2").exists()
    data = json.loads((tmp_path / "d" / "step1" / "rank" / "dump.json").read_text())["data"]
    assert sorted(data) == [
        "Functional.linear.1.forward",
        "Functional.mse_loss.0.forward",
        "Module.blocks.1.Linear.forward.0",
    ]
    scope = tmp_path / "s.json"
    scope.write_text(json.dumps({
        "task": "statistics", "dump_path": str(tmp_path / "s"), "level": "mix", "step": [0],
        "statistics": {"scope": ["Module.blocks.1.Linear.forward.0", "Module.act.ReLU.forward.1"],
                       "data_mode": ["forward", "input"]},
    }))
    with PrecisionDebugger(scope, framework="pytorch") as dbg:
        torch_train(1, dbg)
    data = json.loads((tmp_path / "s" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert list(data) == [
        "Functional.linear.1.forward",
        "Module.blocks.1.Linear.forward.0",
        "Functional.relu.1.forward",
        "Module.act.ReLU.forward.1",
    ]
    assert all(entry["output"] == [] for entry in data.values())


def test_rank_comes_from_an_initialised_torch_distributed(tmp_path: Path, torch_train: Any, monkeypatch: Any) -> None:
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)
    with PrecisionDebugger(dump_path=tmp_path / "mine", level="L0", rank=[3], framework="pytorch") as dbg:
        torch_train(1, dbg)
    assert (tmp_path / "mine" / "step0" / "rank3" / "dump.json").is_file()
    with PrecisionDebugger(dump_path=tmp_path / "other", level="L0", rank=[0, 1], framework="pytorch") as dbg:
        torch_train(1, dbg)
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").rglob("dump.json"))


def test_distributed_wrappers_are_installed_and_removed(tmp_path: Path) -> None:
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("this torch has no distributed support")
    original = dist.all_reduce
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="pytorch") as dbg:
        assert dist.all_reduce is not original and dist.all_reduce.__wrapped__ is original
        dbg.start()
        with pytest.raises((RuntimeError, ValueError)):  # no process group here: fails as without the recorder
            dist.all_reduce(torch.ones(2))
        dbg.stop()
    assert dist.all_reduce is original


def test_module_called_under_no_grad_has_no_backward(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="pytorch") as dbg:
        dbg.start(net)
        with torch.no_grad():
            net(torch.ones(1, 2))
        dbg.stop()
        dbg.step()
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    assert list(doc["data"]) == ["Module.0.Linear.forward.0"]
    assert doc["not_captured"] == []
    leaf = doc["data"]["Module.0.Linear.forward.0"]["output"][0]
    assert leaf["requires_grad"] is False
    with torch.no_grad():
        expected = float(net(torch.ones(1, 2)).max())
    np.testing.assert_allclose(leaf["Max"], expected, rtol=1e-6)
