"""Recorded values checked against independent computations (numpy, MindSpore without the recorder, msprobe)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.dump.reader import RankDump, load_dump
from msprobe_cmp.dump.schema import TensorLeaf
from msprobe_cmp.recorder import PrecisionDebugger


def _record(tmp_path: Path, train: Callable[..., Any], task: str, level: str = "mix", steps: int = 1) -> Any:
    with PrecisionDebugger(dump_path=tmp_path, task=task, level=level, framework="mindspore") as dbg:
        trained = train(steps, dbg)
    return trained


def _numpy_stats(a: np.ndarray) -> tuple[float, float, float, float]:
    f = np.asarray(a, dtype=np.float64)
    return float(f.max()), float(f.min()), float(f.mean()), float(np.sqrt((f * f).sum()))


def _tensor(unit: RankDump, entry: str, path: str) -> np.ndarray | None:
    e = unit.entry(entry)
    assert e is not None, entry
    leaves = dict(e.leaves())
    assert path in leaves, (entry, sorted(leaves))
    leaf = leaves[path]
    if leaf is None:
        return None
    assert isinstance(leaf, TensorLeaf)
    return np.asarray(unit.load_tensor(leaf))


def test_statistics_equal_numpy_stats_of_the_tensor_recording(tmp_path: Path, train: Callable[..., Any]) -> None:
    """The key acceptance test: a statistics recording's Max/Min/Mean/Norm equal numpy float64 statistics
    of the tensors saved by a tensor recording of the same deterministic step."""
    _record(tmp_path / "stats", train, "statistics", steps=2)
    _record(tmp_path / "tensor", train, "tensor", steps=2)
    stats_dump = load_dump(tmp_path / "stats")
    tensor_dump = load_dump(tmp_path / "tensor")
    compared = 0
    for step in (0, 1):
        s_unit, t_unit = stats_dump.get(step, None), tensor_dump.get(step, None)
        assert s_unit is not None and t_unit is not None
        assert [e.name for e in s_unit.entries] == [e.name for e in t_unit.entries]
        for s_entry in s_unit.entries:
            t_entry = t_unit.entry(s_entry.name)
            assert t_entry is not None
            t_leaves = dict(t_entry.leaves())
            for path, s_leaf in s_entry.leaves():
                t_leaf = t_leaves[path]
                if not isinstance(s_leaf, TensorLeaf):
                    assert s_leaf == t_leaf, (s_entry.name, path)
                    continue
                assert isinstance(t_leaf, TensorLeaf) and t_leaf.data_name is not None
                assert s_leaf.data_name is None
                array = t_unit.load_tensor(t_leaf)
                assert tuple(array.shape) == s_leaf.shape == t_leaf.shape
                want = _numpy_stats(array)
                np.testing.assert_allclose(s_leaf.stats, want, rtol=1e-6, atol=1e-12, err_msg=f"{s_entry.name}.{path}")
                # The tensor task's own stats come from the very array it saved.
                np.testing.assert_allclose(t_leaf.stats, want, rtol=1e-12, atol=0)
                compared += 1
    assert compared > 150  # 88 tensors per step in msprobe's own tensor dump of this model, plus our extras


def _numpy_backprop(x: np.ndarray, y: np.ndarray, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Forward and backward of the fixture model with MSE loss, by hand, in float64."""
    f = {k: v.astype(np.float64) for k, v in w.items()}
    x, y = x.astype(np.float64), y.astype(np.float64)
    z1 = x @ f["blocks.0.weight"].T + f["blocks.0.bias"]
    a1 = np.maximum(z1, 0)
    z2 = a1 @ f["blocks.1.weight"].T + f["blocks.1.bias"]
    a2 = np.maximum(z2, 0)
    h = a2 @ f["head.weight"].T + f["head.bias"]
    d = h - y
    gh = 2 * d / d.size
    ga2 = gh @ f["head.weight"]
    gz2 = ga2 * (z2 > 0)
    ga1 = gz2 @ f["blocks.1.weight"]
    gz1 = ga1 * (z1 > 0)
    return {
        "z1": z1,
        "a1": a1,
        "z2": z2,
        "a2": a2,
        "h": h,
        "d": d,
        "sq": d * d,
        "gh": gh,
        "ga2": ga2,
        "gz2": gz2,
        "ga1": ga1,
        "gz1": gz1,
        "head.weight": gh.T @ a2,
        "head.bias": gh.sum(0),
        "blocks.1.weight": gz2.T @ a1,
        "blocks.1.bias": gz2.sum(0),
        "blocks.0.weight": gz1.T @ x,
        "blocks.0.bias": gz1.sum(0),
    }


def test_forward_and_backward_tensors_match_a_numpy_backprop(
    tmp_path: Path, train: Callable[..., Any], build_net: Callable[[], Any], fixture_data: Any
) -> None:
    net = build_net()
    weights = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    _record(tmp_path, train, "tensor")
    ref = _numpy_backprop(fixture_data[0], fixture_data[1], weights)
    unit = load_dump(tmp_path).get(0, None)
    assert unit is not None
    tol = {"rtol": 1e-5, "atol": 1e-6}
    checks = [
        # forward
        ("Cell.blocks.0.Dense.forward.0", "output.0", ref["z1"]),
        ("Cell.act.ReLU.forward.0", "output.0", ref["a1"]),
        ("Cell.act.ReLU.forward.1", "input.0", ref["z2"]),
        ("Cell.head.Dense.forward.0", "output.0", ref["h"]),
        ("Cell.head.Dense.forward.0", "parameters.weight", weights["head.weight"]),
        ("Tensor.__sub__.0.forward", "output.0", ref["d"]),
        ("Functional.square.0.forward", "output.0", ref["sq"]),
        ("Primitive.matmul.MatMul.1.forward", "input.1", weights["blocks.1.weight"]),
        # cell backward: input = grads w.r.t. the cell's outputs, output = grads w.r.t. its inputs
        ("Cell.head.Dense.backward.0", "input.0", ref["gh"]),
        ("Cell.head.Dense.backward.0", "output.0", ref["ga2"]),
        ("Cell.act.ReLU.backward.1", "input.0", ref["ga2"]),
        ("Cell.act.ReLU.backward.1", "output.0", ref["gz2"]),
        ("Cell.act.ReLU.backward.0", "input.0", ref["ga1"]),
        ("Cell.act.ReLU.backward.0", "output.0", ref["gz1"]),
        ("Cell.blocks.0.Dense.backward.0", "input.0", ref["gz1"]),
        # API backward, positional: output.<i> = grad w.r.t. forward input i
        ("Functional.square.0.backward", "input.0", np.full((8, 4), 1 / 32)),
        ("Functional.square.0.backward", "output.0", ref["gh"]),
        ("Tensor.__sub__.0.backward", "input.0", ref["gh"]),
        ("Tensor.__sub__.0.backward", "output.0", ref["gh"]),
        ("Primitive.bias_add.BiasAdd.2.backward", "input.0", ref["gh"]),
        ("Primitive.bias_add.BiasAdd.2.backward", "output.0", ref["gh"]),
        ("Primitive.bias_add.BiasAdd.2.backward", "output.1", ref["head.bias"]),
        ("Primitive.matmul.MatMul.2.backward", "output.0", ref["ga2"]),
        ("Primitive.matmul.MatMul.2.backward", "output.1", ref["head.weight"]),
        ("Primitive.matmul.MatMul.0.backward", "output.1", ref["blocks.0.weight"]),
        ("Primitive.relu.ReLU.0.backward", "output.0", ref["gz1"]),
        # parameter gradients
        ("Cell.blocks.0.Dense.parameters_grad", "weight", ref["blocks.0.weight"]),
        ("Cell.blocks.0.Dense.parameters_grad", "bias", ref["blocks.0.bias"]),
        ("Cell.blocks.1.Dense.parameters_grad", "weight", ref["blocks.1.weight"]),
        ("Cell.head.Dense.parameters_grad", "bias", ref["head.bias"]),
    ]
    for entry, path, want in checks:
        got = _tensor(unit, entry, path)
        assert got is not None, (entry, path)
        np.testing.assert_allclose(got, want, **tol, err_msg=f"{entry}.{path}")
    # Gradients that do not exist are null: the data x and the labels y need none.
    assert _tensor(unit, "Cell.blocks.0.Dense.backward.0", "output.0") is None
    assert _tensor(unit, "Tensor.__sub__.0.backward", "output.1") is None
    assert _tensor(unit, "Primitive.matmul.MatMul.0.backward", "output.0") is None


def test_parameters_grad_equal_mindspore_gradients_without_recorder(tmp_path: Path, train: Callable[..., Any]) -> None:
    plain = train(1)  # value_and_grad, no recorder
    _record(tmp_path, train, "tensor", level="L0")
    unit = load_dump(tmp_path).get(0, None)
    assert unit is not None
    for cell in ("blocks.0", "blocks.1", "head"):
        cls = "Dense"
        for param in ("weight", "bias"):
            got = _tensor(unit, f"Cell.{cell}.{cls}.parameters_grad", param)
            np.testing.assert_array_equal(got, plain.first_grads[f"{cell}.{param}"])


def test_statistics_agree_with_msprobe_on_the_same_model(
    tmp_path: Path, train: Callable[..., Any], msprobe_fixtures: Path
) -> None:
    """Same model, weights and data as msprobe's fixture run: the same statistics (float32 vs float64
    reduction), except where we deliberately differ (see the exclusions)."""
    _record(tmp_path, train, "statistics", steps=2)

    def leaves(node: Any, path: str) -> Any:
        if isinstance(node, list):
            for i, v in enumerate(node):
                yield from leaves(v, f"{path}.{i}")
        elif isinstance(node, dict) and "type" not in node:
            for k, v in node.items():
                yield from leaves(v, f"{path}.{k}")
        else:
            yield path, node

    compared = 0
    for step in (0, 1):
        ours = json.loads((tmp_path / f"step{step}" / "rank" / "dump.json").read_text())["data"]
        theirs = json.loads((msprobe_fixtures / "statistics_a" / f"step{step}" / "rank" / "dump.json").read_text())[
            "data"
        ]
        for name, entry in theirs.items():
            # msprobe 1.2.2 numbers cell backward calls in backward order (ours: the forward call's index),
            # and writes Primitive backward "output" in its own order, dropping inputs without gradient
            # (ours: positional, null for those).
            if name.startswith("Cell.act.ReLU.backward"):
                name_ours = "Cell.act.ReLU.backward." + ("1" if name.endswith(".0") else "0")
            else:
                name_ours = name
            if name.startswith("Primitive.") and name.endswith(".backward"):
                entry = {"input": entry["input"]}
            mine = dict(leaves(ours[name_ours], name))
            for path, leaf in leaves(entry, name):
                other = mine[path]
                if path == "Tensor.__sub__.0.backward.output.1":
                    assert other is None  # labels need no gradient; msprobe still writes one
                    continue
                if not (isinstance(leaf, dict) and leaf.get("type") == "mindspore.Tensor"):
                    assert leaf == other, path
                    continue
                assert (other["dtype"], other["shape"]) == (leaf["dtype"], leaf["shape"]), path
                for key in ("Max", "Min", "Mean", "Norm"):
                    assert other[key] == pytest.approx(leaf[key], rel=2e-5, abs=1e-7), f"{path}.{key}"
                compared += 1
    assert compared == 148  # 74 tensor leaves per step
