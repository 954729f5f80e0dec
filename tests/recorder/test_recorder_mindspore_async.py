"""async_dump on real MindSpore runs: the same statistics as the synchronous path, no host copy while a
step runs, one transfer at stop(), training unchanged, failures contained."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.recorder import PrecisionDebugger
from msprobe_cmp.recorder.adapters.mindspore import MindSporeAdapter, _DeviceStats
from msprobe_cmp.recorder.collector import NONFINITE_KEYS
from msprobe_cmp.recorder.service import ASYNC_NOT_CAPTURED

STATS = ("Max", "Min", "Mean", "Norm")


def _debugger(tmp_path: Path, name: str, *, async_dump: bool, task: str = "statistics", **sub: Any) -> Any:
    config = {
        "dump_path": str(tmp_path / name),
        "task": task,
        "level": sub.pop("level", "mix"),
        "async_dump": async_dump,
        task: sub,
    }
    path = tmp_path / f"{name}.config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return PrecisionDebugger(path, framework="mindspore")


def _data(root: Path, step: int = 0, file: str = "dump.json") -> dict[str, Any]:
    return json.loads((root / f"step{step}" / "rank" / file).read_text())["data"]


def _leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _leaves(item, f"{path}.{i}")
    elif isinstance(node, dict) and "type" not in node:
        for key, item in node.items():
            yield from _leaves(item, f"{path}.{key}")
    else:
        yield path, node


def _assert_same_statistics(sync: dict[str, Any], deferred: dict[str, Any]) -> int:
    """Every leaf of ``deferred`` equals ``sync``'s: statistics to float32 reduction error, counts exactly."""
    assert list(sync) == list(deferred)
    compared = 0
    for name in sync:
        a, b = dict(_leaves(sync[name])), dict(_leaves(deferred[name]))
        assert list(a) == list(b), name
        for path, leaf in a.items():
            other = b[path]
            if not (isinstance(leaf, dict) and "Max" in leaf):
                assert leaf == other, (name, path)
                continue
            assert {k: v for k, v in leaf.items() if k not in STATS} == {
                k: v for k, v in other.items() if k not in STATS
            }, (name, path)
            for key in STATS:
                x, y = leaf[key], other[key]
                if x is None or (isinstance(x, float) and math.isnan(x)):
                    assert x is y or (isinstance(y, float) and math.isnan(y)), (name, path, key, x, y)
                else:
                    assert y == pytest.approx(x, rel=1e-5, abs=1e-12), (name, path, key)
            compared += 1
    return compared


def test_async_statistics_equal_the_synchronous_ones(tmp_path: Path, train: Callable[..., Any]) -> None:
    with _debugger(tmp_path, "sync", async_dump=False) as dbg:
        plain = train(2, dbg)
    with _debugger(tmp_path, "async", async_dump=True) as dbg:
        deferred = train(2, dbg)
    for step in (0, 1):
        assert _assert_same_statistics(_data(tmp_path / "sync", step), _data(tmp_path / "async", step)) > 50
    np.testing.assert_array_equal(plain.weights["head.weight"], deferred.weights["head.weight"])


def test_async_statistics_of_special_tensors(tmp_path: Path, ms: Any) -> None:
    """NaN, ±Inf, empty, 0-d negative, integer, bool, float16, bfloat16 and float64 tensors."""
    x = np.array([[0.0, -1.0, 4.0], [1.0, -0.0, 2.0]], np.float32)
    for name, async_dump in (("sync", False), ("async", True)):
        with _debugger(tmp_path, name, async_dump=async_dump, level="L1") as dbg:
            dbg.start()
            ms.ops.log(ms.Tensor(x))
            _ = ms.Tensor(np.array([3e38, -3e38, 1.0], np.float32)) * 10
            ms.ops.abs(ms.Tensor(np.zeros((0, 3), np.float32)))
            ms.ops.neg(ms.Tensor(np.array(2.5, np.float32)))
            ms.ops.abs(ms.Tensor(np.array([[1, -7], [2**40 + 1, 3]], np.int64)))
            ms.ops.logical_not(ms.Tensor(np.array([True, False, True])))
            ms.ops.square(ms.Tensor(np.array([0.1, 300.0, -2.0], np.float16)))
            _ = ms.Tensor(np.array([[1.5, -2.25], [3.0, 0.125]], np.float32)).astype(ms.bfloat16) * 2
            ms.ops.sqrt(ms.Tensor(np.array([1e300, 4.0, -1.0], np.float64)))
            dbg.stop()
    sync, deferred = _data(tmp_path / "sync"), _data(tmp_path / "async")
    _assert_same_statistics(sync, deferred)
    log_out = deferred["Functional.log.0.forward"]["output"][0]
    assert [log_out[k] for k in NONFINITE_KEYS] == [1, 0, 2] and math.isnan(log_out["Max"])
    mul_out = deferred["Tensor.__mul__.0.forward"]["output"][0]
    assert [mul_out[k] for k in NONFINITE_KEYS] == [0, 1, 1] and mul_out["Max"] == math.inf
    assert deferred["Functional.neg.0.forward"]["output"][0]["Norm"] == 2.5
    assert deferred["Functional.abs.1.forward"]["output"][0]["Max"] == float(2**40 + 1)  # reduced in float64
    assert deferred["Functional.abs.0.forward"]["output"][0]["Max"] is None


def test_no_host_copy_during_the_step_and_one_transfer_at_stop(
    tmp_path: Path,
    ms: Any,
    build_net: Callable[[], Any],
    fixture_data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    original = ms.Tensor.asnumpy

    def counting(self: Any) -> Any:
        calls.append("asnumpy")
        return original(self)

    monkeypatch.setattr(ms.Tensor, "asnumpy", counting)
    counts = {}
    for name, async_dump in (("sync", False), ("async", True)):
        net = build_net()
        loss_fn = ms.nn.MSELoss()
        grad_fn = ms.value_and_grad(lambda a, b, n=net, f=loss_fn: f(n(a), b), None, net.trainable_params())
        x, y = ms.Tensor(fixture_data[0]), ms.Tensor(fixture_data[1])
        with _debugger(tmp_path, name, async_dump=async_dump) as dbg:
            dbg.start(net)
            calls.clear()
            grad_fn(x, y)
            during = len(calls)
            dbg.stop()
            at_stop = len(calls) - during
            dbg.step()
        counts[name] = (during, at_stop)
    assert counts["sync"][0] > 50  # one host copy per tensor (DEFER_HOST_COPIES is off)
    assert counts["async"] == (0, 1)  # nothing while the step runs; every statistic in one transfer at stop()
    assert len(_data(tmp_path / "async")) == len(_data(tmp_path / "sync"))


def test_tensor_task_holds_copies_and_saves_the_same_files(tmp_path: Path, train: Callable[..., Any]) -> None:
    sub = {"list": ["Cell.head"], "summary_mode": "md5"}
    with _debugger(tmp_path, "sync", async_dump=False, task="tensor", **dict(sub)) as dbg:
        train(2, dbg)
    with _debugger(tmp_path, "async", async_dump=True, task="tensor", **dict(sub)) as dbg:
        train(2, dbg)
    for step in (0, 1):
        sync, deferred = _data(tmp_path / "sync", step), _data(tmp_path / "async", step)
        assert sync == deferred  # statistics come from the fetched copy, on the host, exactly as without async
        saved = sorted((tmp_path / "async" / f"step{step}" / "rank" / "dump_tensor_data").iterdir())
        assert len(saved) > 5
        for file in saved:
            want = tmp_path / "sync" / f"step{step}" / "rank" / "dump_tensor_data" / file.name
            np.testing.assert_array_equal(np.load(file), np.load(want))
    # The copies are taken at capture: the weights saved in step 0 are the weights before step 0's update.
    w0 = np.load(
        tmp_path / "async" / "step0" / "rank" / "dump_tensor_data" / "Cell.head.Dense.forward.0.parameters.weight.npy"
    )
    w1 = np.load(
        tmp_path / "async" / "step1" / "rank" / "dump_tensor_data" / "Cell.head.Dense.forward.0.parameters.weight.npy"
    )
    assert not np.array_equal(w0, w1)


def test_md5_is_skipped_with_the_statistics_task(
    tmp_path: Path, train: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with _debugger(tmp_path, "async", async_dump=True, summary_mode="md5") as dbg:
            train(1, dbg)
    assert any("md5 is skipped under async_dump" in r.getMessage() for r in caplog.records)
    leaf = _data(tmp_path / "async")["Cell.head.Dense.forward.0"]["output"][0]
    assert "md5" not in leaf and leaf["Max"] is not None


def test_late_gradients_after_stop_are_resolved_at_step(tmp_path: Path, ms: Any, build_net: Callable[[], Any]) -> None:
    net = build_net()
    x = ms.Tensor(np.ones((2, 16), np.float32))
    grad_fn = ms.value_and_grad(lambda a: net(a).sum(), None, net.trainable_params())
    with _debugger(tmp_path, "async", async_dump=True, level="L0") as dbg:
        dbg.start(net)
        net(x)
        dbg.stop()  # flushed: forward entries resolved
        first = _data(tmp_path / "async")
        assert first["Cell.head.Dense.forward.0"]["output"][0]["Max"] is not None
        dbg.start(net)
        grad_fn(x)
        dbg.stop()
        dbg.step()
    data = _data(tmp_path / "async")
    grads = data["Cell.head.Dense.parameters_grad"]["weight"]
    assert grads and all(g["Max"] is not None for g in grads)
    assert data["Cell.head.Dense.backward.1"]["input"][0]["Max"] is not None


def test_a_failing_device_statistic_is_contained(
    tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = _DeviceStats.vector
    seen = {"n": 0}

    def flaky(self: _DeviceStats, value: Any, floating: bool) -> Any:
        seen["n"] += 1
        if seen["n"] == 5:
            raise RuntimeError("device statistic failed")
        return original(self, value, floating)

    monkeypatch.setattr(_DeviceStats, "vector", flaky)
    plain = train(2)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with _debugger(tmp_path, "async", async_dump=True) as dbg:
            recorded = train(2, dbg)
    assert [r for r in caplog.records if "device statistic failed" in r.getMessage()]
    for a, b in zip(plain.losses, recorded.losses, strict=True):
        np.testing.assert_array_equal(a, b)
    for name in plain.weights:
        np.testing.assert_array_equal(plain.weights[name], recorded.weights[name])
    # The failure (in step 0) is listed in step 0's header; the hook records again in step 1 (per-step disabling).
    meta = json.loads((tmp_path / "async" / "step0" / "rank" / "dump.json").read_text())
    assert any("device statistic failed" in item["reason"] for item in meta["not_captured"])
    assert len(meta["data"]) > 10
    step1 = json.loads((tmp_path / "async" / "step1" / "rank" / "dump.json").read_text())
    assert step1["not_captured"] == []
    assert set(step1["data"]) >= set(meta["data"])


def test_a_failing_fetch_writes_null_statistics_and_says_why(
    tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: MindSporeAdapter, vectors: Any) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(MindSporeAdapter, "fetch_stats", broken)
    plain = train(2)
    with _debugger(tmp_path, "async", async_dump=True) as dbg:
        recorded = train(2, dbg)
    for name in plain.weights:
        np.testing.assert_array_equal(plain.weights[name], recorded.weights[name])
    meta = json.loads((tmp_path / "async" / "step1" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in meta["not_captured"]}
    assert "device lost" in reasons[ASYNC_NOT_CAPTURED]
    leaf = meta["data"]["Cell.head.Dense.forward.0"]["output"][0]
    assert leaf["shape"] == [8, 4] and [leaf[k] for k in STATS] == [None] * 4


def test_a_failing_kernel_of_the_training_reaches_the_user_under_async_dump(
    tmp_path: Path, ms: Any, failing_kernel: tuple[Any, Callable[[], None]]
) -> None:
    # The hook's first touch of the failing kernel's output (its shape) met the error and swallowed it: the user's
    # sync succeeded and the training went on with the failed kernel's output.
    a, failing_then_sync = failing_kernel  # (2, 3) @ (4, 5): fails in the kernel, not at the call

    with pytest.raises(RuntimeError) as plain:
        failing_then_sync()
    dbg = _debugger(tmp_path, "d", async_dump=True, level="L1")
    try:
        dbg.start()
        before = ms.ops.square(a * 3)
        with pytest.raises(RuntimeError) as recorded:
            failing_then_sync()
        after = ms.ops.square(a * 2)
        dbg.stop()
    finally:
        dbg.close()
    first = str(plain.value).strip().splitlines()[0]
    assert "MatMul" in first and str(recorded.value).strip().splitlines()[0] == first
    np.testing.assert_array_equal(before.asnumpy(), np.full((2, 3), 9, np.float32))
    np.testing.assert_array_equal(after.asnumpy(), np.full((2, 3), 4, np.float32))
    doc = json.loads((tmp_path / "d" / "step0" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert list(reasons) == ["Functional.matmul"] and "the training raised an error" in reasons["Functional.matmul"]
    # The statistics of the calls before and after the error are resolved at the flush (9 = 3², 4 = 2²).
    assert doc["data"]["Functional.square.0.forward"]["output"][0]["Max"] == 9.0
    assert doc["data"]["Functional.square.1.forward"]["output"][0]["Max"] == 4.0  # the raise came before square


def test_debug_level_save_is_resolved(tmp_path: Path, ms: Any) -> None:
    x = ms.Tensor(np.array([[1.0, -2.0], [3.0, 4.5]], np.float32))
    for name, async_dump in (("sync", False), ("async", True)):
        with _debugger(tmp_path, name, async_dump=async_dump, level="debug") as dbg:
            grad_fn = ms.grad(lambda t: (dbg.save(t * 2, "doubled") or (t * 2)).sum())
            grad_fn(x)
            dbg.step()
    sync, deferred = _data(tmp_path / "sync", file="debug.json"), _data(tmp_path / "async", file="debug.json")
    assert set(deferred) == {"doubled.0", "doubled_grad.0"}
    _assert_same_statistics(sync, deferred)
