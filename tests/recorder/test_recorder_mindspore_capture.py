"""Issue 3 capture features on real MindSpore runs, checked against independent values (numpy, or
MindSpore without the recorder): non-finite counts, not_captured, every parameter gradient, wrappers
installed at construction, in-place APIs, Jit regions, Distributed wrappers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf
from msprobe_cmp.recorder import PrecisionDebugger
from msprobe_cmp.recorder.adapters.mindspore import JIT_NOT_CAPTURED, WRAPPED_MARK
from msprobe_cmp.recorder.service import RecorderService


def _dump(root: Path, step: int = 0) -> dict[str, Any]:
    return json.loads((root / f"step{step}" / "rank" / "dump.json").read_text())


def _stats(a: np.ndarray) -> list[float]:
    f = np.asarray(a, np.float64)
    return [float(f.max()), float(f.min()), float(f.mean()), float(np.sqrt((f * f).sum()))]


def test_tensor_leaves_count_nan_and_infinities(tmp_path: Path, ms: Any) -> None:
    x = np.array([[0.0, -1.0, 4.0], [1.0, -0.0, 2.0]], np.float32)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        dbg.start()
        out = ms.ops.log(ms.Tensor(x))  # log(0) = -inf, log(-1) = nan, log(-0) = -inf
        big = ms.Tensor(np.array([3e38, -3e38, 1.0], np.float32)) * 10  # ±inf by overflow
        empty = ms.ops.abs(ms.Tensor(np.zeros((0, 3), np.float32)))
        neg = ms.ops.neg(ms.Tensor(np.array(2.5, np.float32)))  # 0-d, negative
        dbg.stop()
    data = _dump(tmp_path)["data"]
    with np.errstate(all="ignore"):
        want = np.log(x.astype(np.float64))
    leaf = data["Functional.log.0.forward"]["output"][0]
    assert (leaf["nan_count"], leaf["pos_inf_count"], leaf["neg_inf_count"]) == (
        int(np.isnan(want).sum()),
        int(np.isposinf(want).sum()),
        int(np.isneginf(want).sum()),
    ) == (1, 0, 2)
    assert np.isnan(leaf["Max"])  # NaN propagates into the statistics, and the counts say why
    np.testing.assert_array_equal(np.isnan(out.asnumpy()), np.isnan(want))
    mul = data["Tensor.__mul__.0.forward"]["output"][0]
    assert (mul["nan_count"], mul["pos_inf_count"], mul["neg_inf_count"]) == (0, 1, 1)
    assert np.isposinf(big.asnumpy()).sum() == 1
    clean = data["Functional.log.0.forward"]["input_args"][0]
    assert (clean["nan_count"], clean["pos_inf_count"], clean["neg_inf_count"]) == (0, 0, 0)
    assert clean["Max"] == 4.0 and clean["Norm"] == pytest.approx(float(np.linalg.norm(x)))
    # Empty tensor: null statistics, zero counts, no crash.
    e = data["Functional.abs.0.forward"]["output"][0]
    assert e["shape"] == [0, 3] and [e["Max"], e["Min"], e["Mean"], e["Norm"]] == [None] * 4
    assert e["nan_count"] == 0 and empty.shape == (0, 3)
    # Negative 0-d tensor: Norm = |x| (msprobe writes the negative value).
    n = data["Functional.neg.0.forward"]["output"][0]
    assert [n["Max"], n["Min"], n["Mean"], n["Norm"]] == [-2.5, -2.5, -2.5, 2.5] and float(neg.asnumpy()) == -2.5


def test_not_captured_lists_failed_hooks_and_cells_without_backward(
    tmp_path: Path, ms: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nn = ms.nn

    class TwoHeads(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Dense(3, 2)
            self.unused = nn.Dense(3, 2)  # runs, but its output does not reach the loss
            self.broken = nn.ReLU()

        def construct(self, x: Any) -> Any:
            self.unused(x)
            return self.broken(self.used(x))

    original = RecorderService.end_cell

    def end_cell(self: RecorderService, call: Any, *args: Any, **kwargs: Any) -> None:
        if call.path == "broken":
            raise RuntimeError("hook failure for the test")
        original(self, call, *args, **kwargs)

    monkeypatch.setattr(RecorderService, "end_cell", end_cell)
    net = TwoHeads()
    x = ms.Tensor(np.ones((4, 3), np.float32))
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, net.trainable_params())
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        for _ in range(2):
            dbg.start(net)
            grad_fn(x)
            dbg.stop()
            dbg.step()
    for step in (0, 1):
        header = _dump(tmp_path, step)
        missing = {item["what"]: item["reason"] for item in header["not_captured"]}
        assert "hook failure for the test" in missing["Cell.broken"]  # a failed hook: every later step too
        assert "backward hook never fired" in missing["Cell.unused.Dense.backward.0"]
        assert "Cell.used.Dense.backward.0" not in missing
        assert "Cell.used.Dense.backward.0" in header["data"]
    # Reading the dump keeps the header field.
    meta = load_dump(tmp_path).get(0, None).meta  # type: ignore[union-attr]
    assert dict(meta.extra)["not_captured"]


def test_every_gradient_of_a_step_is_kept(tmp_path: Path, ms: Any) -> None:
    """Gradient accumulation: two backward passes before step() give two leaves per parameter,
    equal to MindSpore's gradients of each pass computed without the recorder."""

    def build() -> Any:
        net = ms.nn.Dense(3, 2)
        net.weight.set_data(ms.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 10))
        net.bias.set_data(ms.Tensor(np.array([0.5, -0.5], np.float32)))
        return ms.nn.SequentialCell([net])

    batches = [np.arange(12, dtype=np.float32).reshape(4, 3) / 7, -np.ones((4, 3), np.float32)]

    def grads_of(net: Any, dbg: Any = None) -> list[list[np.ndarray]]:
        grad_fn = ms.value_and_grad(lambda x: (net(x) ** 2).sum(), None, net.trainable_params())
        if dbg is not None:
            dbg.start(net)
        out = [[g.asnumpy() for g in grad_fn(ms.Tensor(b))[1]] for b in batches]
        if dbg is not None:
            dbg.stop()
            dbg.step()
        return out

    plain = grads_of(build())
    with PrecisionDebugger(dump_path=tmp_path, level="L0", task="tensor", framework="mindspore") as dbg:
        recorded = grads_of(build(), dbg)
    for a, b in zip(plain, recorded, strict=True):
        for ga, gb in zip(a, b, strict=True):
            np.testing.assert_array_equal(ga, gb)
    unit = load_dump(tmp_path).get(0, None)
    assert unit is not None
    entry = unit.entry("Cell.0.Dense.parameters_grad")
    assert entry is not None
    leaves = dict(entry.leaves())
    assert sorted(leaves) == ["bias.0", "bias.1", "weight.0", "weight.1"]
    for k in (0, 1):
        for i, param in enumerate(("weight", "bias")):
            leaf = leaves[f"{param}.{k}"]
            assert isinstance(leaf, TensorLeaf)
            np.testing.assert_array_equal(unit.load_tensor(leaf), plain[k][i])
            assert list(leaf.stats) == pytest.approx(_stats(plain[k][i]), rel=1e-12)
    raw = _dump(tmp_path)["data"]["Cell.0.Dense.parameters_grad"]
    assert [len(v) for v in raw.values()] == [2, 2]


def test_forward_only_data_mode_has_no_parameter_gradients(tmp_path: Path, train: Callable[..., Any]) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps({"dump_path": str(tmp_path / "d"), "level": "L0", "statistics": {"data_mode": ["forward"]}})
    )
    with PrecisionDebugger(cfg, framework="mindspore") as dbg:
        train(1, dbg)
    assert not [n for n in _dump(tmp_path / "d")["data"] if "parameters_grad" in n or "backward" in n]


def test_apis_imported_after_construction_are_recorded(tmp_path: Path, ms: Any) -> None:
    early_relu = ms.ops.relu  # bound before the debugger exists: keeps the original function
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        from mindspore.ops import relu  # bound after construction, before start()

        assert getattr(relu, WRAPPED_MARK, False) and not getattr(early_relu, WRAPPED_MARK, False)
        dbg.start()
        out = relu(ms.Tensor(x))
        early_relu(ms.Tensor(x))
        dbg.stop()
    names = [n for n in _dump(tmp_path)["data"] if n.endswith("forward")]
    assert names == ["Functional.relu.0.forward"]  # the early binding was not seen
    leaf = _dump(tmp_path)["data"]["Functional.relu.0.forward"]["output"][0]
    want = np.maximum(x, 0)
    np.testing.assert_array_equal(out.asnumpy(), want)
    assert [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]] == pytest.approx(_stats(want))


def test_in_place_api_inputs_are_captured_before_the_call(tmp_path: Path, ms: Any) -> None:
    before = np.array([1.0, 2.0, 3.0], np.float32)
    delta = np.array([10.0, 20.0, 30.0], np.float32)
    param = ms.Parameter(ms.Tensor(before), name="p")
    with PrecisionDebugger(dump_path=tmp_path, level="L1", task="tensor", framework="mindspore") as dbg:
        dbg.start()
        ms.ops.assign_add(param, ms.Tensor(delta))
        dbg.stop()
    np.testing.assert_array_equal(param.asnumpy(), before + delta)  # it did write in place
    unit = load_dump(tmp_path).get(0, None)
    assert unit is not None
    entry = unit.entry("Functional.assign_add.0.forward")
    assert entry is not None
    leaves = dict(entry.leaves())
    np.testing.assert_array_equal(unit.load_tensor(leaves["input.0"]), before)  # type: ignore[arg-type]
    np.testing.assert_array_equal(unit.load_tensor(leaves["output.0"]), before + delta)  # type: ignore[arg-type]


def test_jit_functions_are_recorded_as_one_region(tmp_path: Path, ms: Any) -> None:
    @ms.jit
    def scaled_relu(a: Any, b: Any) -> Any:
        return ms.ops.relu(a * b) + 1.0

    a_np = np.array([[-1.0, 2.0], [3.0, -0.5]], np.float32)
    b_np = np.array([[2.0, 2.0], [-1.0, 4.0]], np.float32)

    def loss(a: Any, b: Any) -> Any:
        return (scaled_relu(a, b) * scaled_relu(b, a)).sum()

    grad_fn = ms.value_and_grad(loss, (0, 1))
    plain_loss, plain_grads = grad_fn(ms.Tensor(a_np), ms.Tensor(b_np))
    with PrecisionDebugger(dump_path=tmp_path, level="L1", task="tensor", framework="mindspore") as dbg:
        dbg.start()
        rec_loss, rec_grads = grad_fn(ms.Tensor(a_np), ms.Tensor(b_np))
        dbg.stop()
    assert rec_loss.asnumpy() == plain_loss.asnumpy()
    for p, r in zip(plain_grads, rec_grads, strict=True):
        np.testing.assert_array_equal(p.asnumpy(), r.asnumpy())
    header = _dump(tmp_path)
    names = list(header["data"])
    assert [n for n in names if n.startswith("Jit.")] == [
        "Jit.scaled_relu.0.forward",
        "Jit.scaled_relu.1.forward",
        "Jit.scaled_relu.1.backward",
        "Jit.scaled_relu.0.backward",
    ]
    # Nothing inside the compiled region is recorded per API, and the header says so.
    assert not [n for n in names if n.startswith(("Functional.relu", "Tensor.__mul__.2"))]
    missing = {item["what"]: item["reason"] for item in header["not_captured"]}
    assert missing["Jit.scaled_relu.0.forward"] == JIT_NOT_CAPTURED
    unit = load_dump(tmp_path).get(0, None)
    assert unit is not None

    def t(entry: str, path: str) -> np.ndarray:
        e = unit.entry(entry)
        assert e is not None, entry
        return np.asarray(unit.load_tensor(dict(e.leaves())[path]))  # type: ignore[arg-type]

    f0 = np.maximum(a_np * b_np, 0) + 1
    f1 = np.maximum(b_np * a_np, 0) + 1
    np.testing.assert_array_equal(t("Jit.scaled_relu.0.forward", "input.0"), a_np)
    np.testing.assert_array_equal(t("Jit.scaled_relu.0.forward", "output.0"), f0)
    # d loss / d f0 = f1; d f0 / d a = b * (a*b > 0)
    np.testing.assert_allclose(t("Jit.scaled_relu.0.backward", "input.0"), f1)
    np.testing.assert_allclose(t("Jit.scaled_relu.0.backward", "output.0"), f1 * b_np * (a_np * b_np > 0))
    np.testing.assert_allclose(t("Jit.scaled_relu.0.backward", "output.1"), f1 * a_np * (a_np * b_np > 0))


def test_distributed_functions_are_wrapped_and_removed(tmp_path: Path, ms: Any) -> None:
    """comm_func needs a cluster to run; on one CPU process we check the wrappers are installed and
    removed, and that a call fails exactly as it does without the recorder."""
    from mindspore.communication import comm_func

    original = comm_func.all_reduce
    # Only calls that fail in Python before any kernel is launched: a failed CPU kernel's error
    # surfaces asynchronously and would break later tests.
    with pytest.raises(TypeError) as plain_error:
        original("not a tensor")
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        wrapped = comm_func.all_reduce
        assert getattr(wrapped, WRAPPED_MARK, False) and wrapped.__wrapped__ is original
        assert getattr(comm_func.broadcast, WRAPPED_MARK, False)
        dbg.start()
        with pytest.raises(TypeError) as recorded_error:
            wrapped("not a tensor")
        with pytest.raises(RuntimeError, match="not been inited"):
            comm_func.broadcast(ms.Tensor(np.ones(3, np.float32)), src=0)
        dbg.stop()
    assert str(recorded_error.value) == str(plain_error.value)
    assert comm_func.all_reduce is original
    # The call was counted and its inputs taken, but a call that raised writes no entry.
    assert not (tmp_path / "step0" / "rank" / "dump.json").is_file() or not [
        n for n in json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"] if "Distributed" in n
    ]
