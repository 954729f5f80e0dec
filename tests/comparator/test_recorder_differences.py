"""What two recorders of one run write differently is not a difference between the runs: msprobe 1.2.2 reduces Mean
and Norm in float32 (last-bit differences; an attention mask's float32 Mean and Norm overflow to ±Inf), and a slot a
recorder declares it did not observe is not a gradient that did not flow.  And what looks small is not always: a
parameter gradient that is zero everywhere on one side fails."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.comparator.compare import compare
from msprobe_cmp.comparator.metrics import reduction_slack, statistics_differ
from msprobe_cmp.dump.reader import load_dump


def _stats(a: np.ndarray, dtype: Any = np.float64) -> dict[str, Any]:
    f = a.astype(dtype)
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(a.shape), "Max": float(f.max()),
            "Min": float(f.min()), "Mean": float(f.mean(dtype=dtype)),
            "Norm": float(np.sqrt(np.sum(f * f, dtype=dtype)))}


def _write(root: Path, data: dict[str, Any], not_captured: list[dict[str, str]] | None = None) -> Path:
    rank = root / "step0" / "rank"
    rank.mkdir(parents=True)
    doc: dict[str, Any] = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None,
                           "data": data}
    if not_captured is not None:
        doc["not_captured"] = not_captured
    (rank / "dump.json").write_text(json.dumps(doc))
    (rank / "stack.json").write_text("{}")
    (rank / "construct.json").write_text("{}")
    return root


X = np.random.default_rng(3).standard_normal(4096).astype(np.float32) * 3


def test_a_mean_and_norm_reduced_in_float32_are_the_same_tensor_within_the_reduction_slack():
    s32, s64 = _stats(X, np.float32), _stats(X)
    a = (s32["Max"], s32["Min"], s32["Mean"], s32["Norm"])
    b = (s64["Max"], s64["Min"], s64["Mean"], s64["Norm"])
    assert a[2:] != b[2:]  # the float32 reductions do differ in the last bits ...
    assert not statistics_differ(a, b, X.size)  # ... within (log2(n) + 2) float32 epsilons
    assert reduction_slack(4096) == pytest.approx(14 * 2.0**-23)
    nudged = (a[0], a[1], a[2] + 20 * reduction_slack(X.size) * max(abs(a[0]), abs(a[1])), a[3])
    assert statistics_differ(nudged, b, X.size)  # beyond it, a difference
    assert statistics_differ((a[0] + 2.0**-20, *a[1:]), b, X.size)  # Max and Min are exact


def test_a_float32_overflow_of_the_mask_mean_is_a_note_not_a_failure(tmp_path: Path):
    mask = np.full((2, 1, 1, 8), np.finfo(np.float32).min, np.float32)
    mask[..., :6] = 0.0
    with np.errstate(over="ignore"):
        a32 = _stats(mask, np.float32)  # msprobe's: Mean -inf, Norm inf
    b64 = _stats(mask)
    assert math.isinf(a32["Mean"]) and math.isinf(a32["Norm"])
    assert math.isfinite(b64["Mean"]) and math.isfinite(b64["Norm"])
    _write(tmp_path / "a", {"Functional.f.0.forward": {"input_args": [a32], "input_kwargs": {}, "output": []}})
    _write(tmp_path / "b", {"Functional.f.0.forward": {"input_args": [b64], "input_kwargs": {}, "output": []}})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    (row,) = c.units[0].rows
    assert row.verdict == "pass" and row.differs is False and c.first_divergent is None
    assert any("float32 reduction overflowed" in n for n in row.notes)
    # a real disagreement (Max differs too) still fails
    broken = {**a32, "Max": 1.0}
    _write(tmp_path / "c", {"Functional.f.0.forward": {"input_args": [broken], "input_kwargs": {}, "output": []}})
    (row,) = compare(load_dump(tmp_path / "c"), load_dump(tmp_path / "b")).units[0].rows
    assert row.verdict == "fail" and any(r.startswith("non-finite Mean disagrees") for r in row.reasons)


def test_a_parameter_gradient_zero_on_one_side_fails_however_small_the_other(tmp_path: Path):
    g = (np.random.default_rng(4).standard_normal((8, 4)) * 1e-4).astype(np.float32)
    zero = np.zeros_like(g)
    _write(tmp_path / "a", {"Module.wpe.Embedding.parameters_grad": {"weight": _stats(zero)}})
    _write(tmp_path / "b", {"Module.wpe.Embedding.parameters_grad": {"weight": _stats(g)}})
    (row,) = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b")).units[0].rows
    assert row.match_class == "matched" and row.verdict == "fail"  # MaxAbsErr >= 1e-4 alone would pass
    assert row.reasons[0] == "the parameter's gradient is all zero in A but not in B: it does not train in A"
    _write(tmp_path / "z", {"Module.wpe.Embedding.parameters_grad": {"weight": _stats(zero)}})
    (row,) = compare(load_dump(tmp_path / "z"), load_dump(tmp_path / "a")).units[0].rows
    assert row.verdict == "pass"  # zero on both sides: the same


def test_a_slot_declared_not_observed_is_skipped_not_warned(tmp_path: Path):
    g = np.ones(4, np.float32)
    entry = "Primitive.bn.BatchNorm.0.backward"
    a = {entry: {"input": [_stats(g)], "output": [_stats(g), None]}}
    b = {entry: {"input": [_stats(g)], "output": [_stats(g), _stats(g)]}}
    gap = {"what": f"{entry}.output.1", "reason": "input written in place: not replaced by a copy, so its gradient is "
                                                  "not observed"}
    _write(tmp_path / "a", a, [gap])
    _write(tmp_path / "b", b)
    rows = {r.arg_path: r for r in compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b")).units[0].rows}
    assert rows["output.1"].verdict == "skip"
    assert rows["output.1"].reasons == (f"A's recorder declared it did not observe this: {gap['reason']}",)
    # undeclared, or declared as a slot that stayed empty, it stays the warning that a gradient did not flow
    for declared in ([], [{"what": f"{entry}.output.1", "reason": "no gradient reached this output"}]):
        _write(tmp_path / f"a{len(declared)}", a, declared)
        rows = {r.arg_path: r for r in
                compare(load_dump(tmp_path / f"a{len(declared)}"), load_dump(tmp_path / "b")).units[0].rows}
        assert rows["output.1"].verdict == "warning"
