"""PyTorch recorder: recorded values against independent computations (numpy forward, torch.autograd.grad on a
separate run without the recorder, zlib CRC32, numpy statistics of the saved files)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp import PrecisionDebugger
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 4)
        self.act = torch.nn.Tanh()
        self.fc2 = torch.nn.Linear(4, 3)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.act(self.fc1(x)))


def _setup() -> tuple[Small, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    torch.manual_seed(3)
    net = Small()
    rs = np.random.RandomState(7)
    x = rs.randn(6, 5).astype(np.float32)
    y = rs.randn(6, 3).astype(np.float32)
    weights = {n: p.detach().numpy().astype(np.float64) for n, p in net.named_parameters()}
    return net, x, y, weights


def _stats(a: np.ndarray) -> tuple[float, float, float, float]:
    a = np.asarray(a, np.float64)
    return float(a.max()), float(a.min()), float(a.mean()), float(np.sqrt((a * a).sum()))


def _assert_leaf(leaf: Any, expected: np.ndarray, rel: float = 1e-5) -> None:
    assert isinstance(leaf, TensorLeaf)
    assert leaf.shape == expected.shape
    got = (leaf.max, leaf.min, leaf.mean, leaf.norm)
    assert got == pytest.approx(_stats(expected), rel=rel, abs=1e-7)


def _one_step(tmp_path: Path, level: str = "mix", task: str = "statistics", config: Path | None = None) -> Any:
    net, x, y, _ = _setup()
    kwargs: dict[str, Any] = {"framework": "pytorch"}
    if config is None:
        kwargs.update(dump_path=tmp_path, level=level, task=task)
    with PrecisionDebugger(config, **kwargs) as dbg:
        dbg.start(net)
        xt = torch.from_numpy(x).requires_grad_(True)
        loss = F.mse_loss(net(xt), torch.from_numpy(y))
        loss.backward()
        dbg.stop()
        dbg.step()
    return load_dump(tmp_path).units[0]


def test_forward_statistics_match_a_numpy_forward(tmp_path: Path) -> None:
    _, x, y, w = _setup()
    unit = _one_step(tmp_path)
    h = x.astype(np.float64) @ w["fc1.weight"].T + w["fc1.bias"]
    a = np.tanh(h)
    out = a @ w["fc2.weight"].T + w["fc2.bias"]
    loss = np.mean((out - y) ** 2)
    leaves = {e.name: dict(e.leaves()) for e in unit.entries}
    _assert_leaf(leaves["Functional.linear.0.forward"]["input.0"], x)
    _assert_leaf(leaves["Functional.linear.0.forward"]["input.1"], w["fc1.weight"])
    _assert_leaf(leaves["Functional.linear.0.forward"]["output.0"], h)
    _assert_leaf(leaves["Module.fc1.Linear.forward.0"]["output.0"], h)
    _assert_leaf(leaves["Module.fc1.Linear.forward.0"]["parameters.bias"], w["fc1.bias"])
    _assert_leaf(leaves["Module.act.Tanh.forward.0"]["output.0"], a)
    _assert_leaf(leaves["Module.fc2.Linear.forward.0"]["output.0"], out)
    _assert_leaf(leaves["Functional.mse_loss.0.forward"]["output.0"], np.array(loss))
    leaf = leaves["Functional.linear.0.forward"]["input.0"]
    assert leaf.dtype == "torch.float32" and leaf.type == "torch.Tensor" and leaf.requires_grad is True
    assert leaves["Functional.linear.0.forward"]["input.1"].requires_grad is True
    assert leaves["Module.fc1.Linear.forward.0"]["output.0"].requires_grad is True


def test_gradients_match_torch_autograd_grad(tmp_path: Path) -> None:
    unit = _one_step(tmp_path)
    # The same computation, without any recorder, differentiated by torch.autograd.grad.
    net, x, y, _ = _setup()
    xt = torch.from_numpy(x).requires_grad_(True)
    h = F.linear(xt, net.fc1.weight, net.fc1.bias)
    a = torch.tanh(h)
    out = F.linear(a, net.fc2.weight, net.fc2.bias)
    loss = F.mse_loss(out, torch.from_numpy(y))
    g = torch.autograd.grad(loss, [xt, h, a, out, net.fc1.weight, net.fc1.bias, net.fc2.weight, net.fc2.bias])
    gx, gh, ga, gout, gw1, gb1, gw2, gb2 = (t.numpy().astype(np.float64) for t in g)
    leaves = {e.name: dict(e.leaves()) for e in unit.entries}
    pg1 = leaves["Module.fc1.Linear.parameters_grad"]
    _assert_leaf(pg1["weight"], gw1)
    _assert_leaf(pg1["bias"], gb1)
    _assert_leaf(leaves["Module.fc2.Linear.parameters_grad"]["weight"], gw2)
    assert pg1["weight"].requires_grad is False
    # module backward: input = grads w.r.t. outputs, output = grads w.r.t. inputs
    _assert_leaf(leaves["Module.fc1.Linear.backward.0"]["input.0"], gh)
    _assert_leaf(leaves["Module.fc1.Linear.backward.0"]["output.0"], gx)
    _assert_leaf(leaves["Module.act.Tanh.backward.0"]["input.0"], ga)
    _assert_leaf(leaves["Module.act.Tanh.backward.0"]["output.0"], gh)
    # API backward: positional input gradients (x, weight, bias)
    lin0 = leaves["Functional.linear.0.backward"]
    _assert_leaf(lin0["input.0"], gh)
    _assert_leaf(lin0["output.0"], gx)
    _assert_leaf(lin0["output.1"], gw1)
    _assert_leaf(lin0["output.2"], gb1)
    _assert_leaf(leaves["Functional.linear.1.backward"]["input.0"], gout)
    mse = leaves["Functional.mse_loss.0.backward"]
    assert mse["output.1"] is None  # the target needs no gradient
    _assert_leaf(mse["input.0"], np.array(1.0))


def test_tensor_task_files_hold_the_exact_values(tmp_path: Path) -> None:
    unit = _one_step(tmp_path, task="tensor")
    net, x, _, _ = _setup()
    with torch.no_grad():
        h = net.fc1(torch.from_numpy(x)).numpy()
    entry = unit.entry("Functional.linear.0.forward")
    assert entry is not None
    leaves = dict(entry.leaves())
    assert leaves["input.0"].data_name == "Functional.linear.0.forward.input.0.npy"
    np.testing.assert_array_equal(unit.load_tensor(leaves["input.0"]), x)
    np.testing.assert_array_equal(unit.load_tensor(leaves["output.0"]), h)  # bit-identical to a plain run
    for e in unit.entries:  # statistics are those of the saved file
        for _, leaf in e.leaves():
            if isinstance(leaf, TensorLeaf) and leaf.data_name:
                arr = np.asarray(unit.load_tensor(leaf), np.float64)
                assert (leaf.max, leaf.min, leaf.mean, leaf.norm) == pytest.approx(_stats(arr), rel=1e-12, abs=1e-15)


def test_bfloat16_tensors_are_saved_as_float32_with_torch_dtype(tmp_path: Path) -> None:
    values = np.array([[1.5, -2.25, 3.0e-3], [0.0, 7.0, -1.0]], np.float32)  # exactly representable in bf16
    bf = torch.from_numpy(values).to(torch.bfloat16)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", task="tensor", framework="pytorch") as dbg:
        dbg.start()
        F.relu(bf)
        dbg.stop()
    unit = load_dump(tmp_path).units[0]
    leaves = dict(unit.entries[0].leaves())
    leaf = leaves["input.0"]
    assert unit.entries[0].name == "Functional.relu.0.forward"
    assert leaf.dtype == "torch.bfloat16" and leaf.shape == (2, 3)
    bf16 = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(np.asarray(unit.load_tensor(leaf), np.float32), bf16)
    assert leaf.max == 7.0 and leaf.min == -2.25
    assert leaves["output.0"].min == 0.0


def test_md5_summary_mode_is_the_crc32_of_the_values(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "level": "L1",
                    "statistics": {"summary_mode": "md5"}})
    )
    values = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    with PrecisionDebugger(cfg, framework="torch") as dbg:
        dbg.start()
        torch.from_numpy(values) * 2.0
        dbg.stop()
    unit = load_dump(tmp_path / "d").units[0]
    assert unit.entries[0].name == "Tensor.__mul__.0.forward"
    leaves = dict(unit.entries[0].leaves())
    assert leaves["input.0"].md5 == f"{zlib.crc32(values.tobytes()) & 0xFFFFFFFF:08x}"
    assert leaves["output.0"].md5 == f"{zlib.crc32((values * 2).tobytes()) & 0xFFFFFFFF:08x}"
    assert leaves["input.1"] is not None and leaves["input.1"].value == 2.0


def test_async_dump_statistics_equal_the_synchronous_ones(tmp_path: Path, torch_train: Any) -> None:
    with PrecisionDebugger(dump_path=tmp_path / "sync", level="mix", framework="pytorch") as dbg:
        torch_train(1, dbg)
    cfg = tmp_path / "async.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "async"), "level": "mix",
                               "async_dump": True}))
    with PrecisionDebugger(cfg, framework="pytorch") as dbg:
        torch_train(1, dbg)
    sync, asyn = load_dump(tmp_path / "sync").units[0], load_dump(tmp_path / "async").units[0]
    assert [e.name for e in sync.entries] == [e.name for e in asyn.entries]
    n = 0
    for a, b in zip(sync.entries, asyn.entries, strict=True):
        for (pa, la), (pb, lb) in zip(a.leaves(), b.leaves(), strict=True):
            assert pa == pb
            if isinstance(la, TensorLeaf):
                assert isinstance(lb, TensorLeaf) and lb.requires_grad == la.requires_grad
                assert (lb.max, lb.min, lb.mean, lb.norm) == pytest.approx((la.max, la.min, la.mean, la.norm), rel=1e-9)
                assert lb.extra == la.extra
                n += 1
    assert n > 100


def test_nan_and_inf_are_counted(tmp_path: Path) -> None:
    values = np.array([1.0, np.nan, np.inf, -np.inf, np.inf], np.float32)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="pytorch") as dbg:
        dbg.start()
        torch.abs(torch.from_numpy(values))
        dbg.stop()
    leaf = dict(load_dump(tmp_path).units[0].entries[0].leaves())["input.0"]
    assert dict(leaf.extra) == {"nan_count": 1, "pos_inf_count": 2, "neg_inf_count": 1}


def test_debug_level_save_records_value_and_gradient(tmp_path: Path) -> None:
    net, x, y, _ = _setup()
    with PrecisionDebugger(dump_path=tmp_path, level="debug", framework="pytorch") as dbg:
        xt = torch.from_numpy(x)
        hidden = net.act(net.fc1(xt))
        dbg.save(hidden, "hidden")
        loss = F.mse_loss(net.fc2(hidden), torch.from_numpy(y))
        loss.backward()
        dbg.step()
    net2, _, _, _ = _setup()
    hidden2 = net2.act(net2.fc1(torch.from_numpy(x)))
    (g,) = torch.autograd.grad(F.mse_loss(net2.fc2(hidden2), torch.from_numpy(y)), [hidden2])
    doc = json.loads((tmp_path / "step0" / "rank" / "debug.json").read_text())
    assert doc["framework"] == "pytorch" and set(doc["data"]) == {"hidden.0", "hidden_grad.0"}
    unit = load_dump(tmp_path / "step0" / "rank" / "debug.json").units[0]
    leaves = {e.name: dict(e.leaves()) for e in unit.entries}
    (value,) = leaves["hidden.0"].values()
    (grad,) = leaves["hidden_grad.0"].values()
    _assert_leaf(value, hidden2.detach().numpy())
    _assert_leaf(grad, g.numpy())
