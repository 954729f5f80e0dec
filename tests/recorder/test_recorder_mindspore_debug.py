"""The debug level's save() and the structure task, on real MindSpore runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.recorder import PrecisionDebugger


def _stats(a: np.ndarray) -> list[float]:
    f = np.asarray(a, np.float64)
    return [float(f.max()), float(f.min()), float(f.mean()), float(np.sqrt((f * f).sum()))]


def _leaf_stats(leaf: dict[str, Any]) -> list[float]:
    return [leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]]


def test_debug_save_writes_values_and_gradients_per_step(tmp_path: Path, ms: Any) -> None:
    w_np = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    xs = [np.array([[1.0, 2.0]], np.float32), np.array([[-3.0, 0.5]], np.float32)]
    w = ms.Parameter(ms.Tensor(w_np), name="w")

    def make_forward(dbg: Any) -> Callable[[Any], Any]:
        def forward(x: Any) -> Any:
            h = ms.ops.matmul(x, w)
            loss = (h * h).sum()
            if dbg is not None:
                dbg.save(h, "h")
                dbg.save({"pair": [h, 3], "scale": 0.5}, "nested", save_backward=True)
                dbg.save(loss, "loss", save_backward=False)
            return loss

        return forward

    plain = ms.value_and_grad(make_forward(None), None, [w])
    want = [plain(ms.Tensor(x)) for x in xs]
    with PrecisionDebugger(dump_path=tmp_path, level="debug", task="tensor", framework="mindspore") as dbg:
        grad_fn = ms.value_and_grad(make_forward(dbg), None, [w])
        got = []
        for x in xs:
            got.append(grad_fn(ms.Tensor(x)))
            dbg.save(ms.Tensor(x), "h")  # outside a gradient context: value only, counter goes on
            dbg.step()
    for (lw, gw), (lg, gg) in zip(want, got, strict=True):
        assert lw.asnumpy() == lg.asnumpy()
        np.testing.assert_array_equal(gw[0].asnumpy(), gg[0].asnumpy())
    for step, x in enumerate(xs):
        rank_dir = tmp_path / f"step{step}" / "rank"
        assert not (rank_dir / "dump.json").exists()
        doc = json.loads((rank_dir / "debug.json").read_text())
        assert (doc["task"], doc["level"], doc["framework"]) == ("tensor", "debug", "mindspore")
        data = doc["data"]
        assert list(data) == ["h.0", "h_grad.0", "nested.0", "nested_grad.0", "loss.0", "h.1"]
        h = x.astype(np.float64) @ w_np.astype(np.float64)
        assert _leaf_stats(data["h.0"]) == pytest.approx(_stats(h), rel=1e-6)
        assert _leaf_stats(data["h_grad.0"]) == pytest.approx(_stats(2 * h), rel=1e-6)  # d(sum h²)/dh
        saved = np.load(rank_dir / "dump_tensor_data" / data["h_grad.0"]["data_name"])
        np.testing.assert_allclose(saved, 2 * h, rtol=1e-6)
        assert data["h_grad.0"]["data_name"] == "h_grad.0.tensor.npy"
        nested = data["nested.0"]
        assert nested["pair"][1] == {"type": "int", "value": 3} and nested["scale"] == {"type": "float", "value": 0.5}
        assert nested["pair"][0]["data_name"] == "nested.0.tensor.pair.0.npy"
        grad = data["nested_grad.0"]
        assert grad["pair"][1] is None and grad["scale"] is None
        assert _leaf_stats(grad["pair"][0]) == pytest.approx(_stats(2 * h), rel=1e-6)
        assert _leaf_stats(data["loss.0"]) == pytest.approx([float((h * h).sum())] * 3 + [float((h * h).sum())])
        assert _leaf_stats(data["h.1"]) == pytest.approx(_stats(x))


def test_save_outside_debug_level_is_ignored(tmp_path: Path, ms: Any, caplog: Any) -> None:
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        dbg.start()
        dbg.save(ms.Tensor([1.0]), "x")
        dbg.save(ms.Tensor([1.0]), "x")
        dbg.stop()
    assert sum("save() records only at level debug" in r.getMessage() for r in caplog.records) == 1
    assert not (tmp_path / "step0" / "rank" / "debug.json").exists()


def test_structure_task_keeps_names_stack_and_construct_only(tmp_path: Path, train: Callable[..., Any]) -> None:
    with PrecisionDebugger(dump_path=tmp_path / "stats", level="mix", framework="mindspore") as dbg:
        train(1, dbg)
    with PrecisionDebugger(dump_path=tmp_path / "structure", level="mix", task="structure", framework="mindspore") as dbg:
        train(1, dbg)
    rank = Path("step0") / "rank"
    doc = json.loads((tmp_path / "structure" / rank / "dump.json").read_text())
    assert (doc["task"], doc["level"], doc["data"]) == ("structure", "mix", {})
    for name in ("construct.json", "stack.json"):
        ours = json.loads((tmp_path / "structure" / rank / name).read_text())
        full = json.loads((tmp_path / "stats" / rank / name).read_text())
        assert ours.keys() == full.keys() and ours, name
    construct = json.loads((tmp_path / "structure" / rank / "construct.json").read_text())
    assert construct["Primitive.matmul.MatMul.2.forward"] == "Cell.head.Dense.forward.0"
    assert construct["Cell.head.Dense.backward.0"] is None
    # msprobe's rule: the structure task records at mix unless L0/mix is asked.
    with PrecisionDebugger(dump_path=tmp_path / "x", level="L1", task="structure", framework="mindspore") as dbg:
        assert dbg.config.level == "mix"
