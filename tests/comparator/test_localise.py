"""The likely origin (msprobe_cmp/comparator/localise.py): the first row whose relative error jumps beyond what its
inputs carry, on dumps written here by hand (json + numpy), with the expected errors computed here by numpy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.comparator.compare import CompareOptions, compare
from msprobe_cmp.comparator.rules import OriginRules, Rules
from msprobe_cmp.dump.reader import load_dump

RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 8)).astype(np.float32)
W = RNG.standard_normal((8, 8)).astype(np.float32) / 3


def _leaf(a: np.ndarray, name: str, task: str) -> dict[str, Any]:
    f = a.astype(np.float64)
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(a.shape), "Max": float(f.max()),
            "Min": float(f.min()), "Mean": float(f.mean()), "Norm": float(np.linalg.norm(f))}
    if task == "tensor":
        leaf["data_name"] = f"{name}.npy"
    return leaf


def write(root: Path, entries: dict[str, dict[str, Any]], parents: dict[str, str | None] | None = None,
          framework: str = "pytorch", task: str = "tensor") -> Path:
    """A one-unit dump: ``entries`` maps an entry name to ``{"input_args": [...], "output": [...],
    "parameters": {...}}`` of float32 arrays (or non-tensor values in input_args)."""
    rank = root / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    data: dict[str, Any] = {}
    for entry, fields in entries.items():
        doc: dict[str, Any] = {}
        for field, value in fields.items():
            if isinstance(value, dict):
                doc[field] = {}
                for k, v in value.items():
                    name = f"{entry}.{field}.{k}"
                    doc[field][k] = _leaf(v, name, task)
                    np.save(rank / "dump_tensor_data" / f"{name}.npy", v)
            else:
                items = []
                head = "input" if field == "input_args" else "output"
                for i, v in enumerate(value):
                    if isinstance(v, np.ndarray):
                        name = f"{entry}.{head}.{i}"
                        items.append(_leaf(v, name, task))
                        np.save(rank / "dump_tensor_data" / f"{name}.npy", v)
                    else:
                        items.append({"type": type(v).__name__, "value": v})
                doc[field] = items
        doc.setdefault("input_kwargs", {})
        data[entry] = doc
    header = {"task": task, "level": "mix", "framework": framework, "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(header))
    (rank / "stack.json").write_text("{}")
    (rank / "construct.json").write_text(json.dumps(parents or {e: None for e in entries}))
    return root


def chain(error_at: int | None, error: float) -> dict[str, dict[str, Any]]:
    """Four element-wise calls in a row (x -> tanh -> *1.5 -> tanh -> +0.25), each reading the previous output; when
    ``error_at`` is given, that call's output is scaled by ``1 + error`` and the calls after it read that output."""
    outs: dict[str, Any] = {}
    x = X
    fns = [np.tanh, lambda v: v * np.float32(1.5), np.tanh, lambda v: v + np.float32(0.25)]
    names = ["Torch.tanh.0.forward", "Tensor.__mul__.0.forward", "Torch.tanh.1.forward", "Tensor.__add__.0.forward"]
    for k, (name, fn) in enumerate(zip(names, fns, strict=True)):
        y = fn(x).astype(np.float32)
        if k == error_at:
            y = (y * np.float32(1 + error)).astype(np.float32)
        outs[name] = {"input_args": [x], "output": [y]}
        x = y
    return outs


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """The relative error of localise.py, from the arrays: max|a - b| / max(|a|max, |b|max) (float64)."""
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(fa - fb)) / max(np.max(np.abs(fa)), np.max(np.abs(fb))))


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_the_call_that_adds_the_error_is_the_origin_not_the_first_or_last_that_carries_it(tmp_path: Path, mode: str):
    a = chain(1, 1e-4)
    write(tmp_path / "a", a)
    write(tmp_path / "b", chain(None, 0.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(mode=mode))
    o = c.likely_origin
    assert o is not None and o.ref.name == "Tensor.__mul__.0.forward.output.0" and o.kind == "computed"
    assert o.error_in == 0.0 and o.ratio is None
    b_out = chain(None, 0.0)["Tensor.__mul__.0.forward"]["output"][0]
    want = rel(a["Tensor.__mul__.0.forward"]["output"][0], b_out)
    if mode == "tensor":
        assert o.error_out == pytest.approx(want, rel=1e-9)
    else:  # the statistics lower bound: |ΔMax| etc. are at most MaxAbsErr
        assert 0.0 < o.error_out <= want * (1 + 1e-9)
    row = c.row(o.ref)
    assert row.verdict == "warning" and row.reasons[0].startswith("error far above what its inputs carry")
    # the rows after it carry the error in: no further jump, no warning
    later = [r for r in c.units[0].rows[o.ref.row + 1:] if r.verdict == "warning"]
    assert later == []
    assert c.verdict == "pass"  # 1e-4 is below every absolute threshold: a warning, not a failure


def test_identical_runs_and_rounding_have_no_origin(tmp_path: Path):
    write(tmp_path / "a", chain(2, 2e-7))  # about 2 ulps of float32: rounding, below 16 ulps
    write(tmp_path / "b", chain(None, 0.0))
    write(tmp_path / "rerun", chain(None, 0.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.first_divergent is not None  # the sides do differ ...
    assert c.likely_origin is None  # ... by rounding only
    assert compare(load_dump(tmp_path / "rerun"), load_dump(tmp_path / "b")).likely_origin is None


def test_runs_of_different_kernels_get_the_wider_rounding_floor(tmp_path: Path):
    # mindtorch against PyTorch: one name space, other kernels; 1e-5 is rounding there (< 1000 ulps = 1.2e-4) but
    # not between two runs of one framework (> 16 ulps = 1.9e-6).
    write(tmp_path / "mt", chain(1, 1e-5), framework="mindtorch")
    write(tmp_path / "pt_bug", chain(1, 1e-5))
    write(tmp_path / "pt", chain(None, 0.0))
    assert compare(load_dump(tmp_path / "mt"), load_dump(tmp_path / "pt")).likely_origin is None
    same = compare(load_dump(tmp_path / "pt_bug"), load_dump(tmp_path / "pt")).likely_origin
    assert same is not None and same.ref.name == "Tensor.__mul__.0.forward.output.0"
    write(tmp_path / "mt_bug", chain(1, 1e-3), framework="mindtorch")
    cross = compare(load_dump(tmp_path / "mt_bug"), load_dump(tmp_path / "pt")).likely_origin
    assert cross is not None and cross.ref.name == "Tensor.__mul__.0.forward.output.0"
    assert cross.floor == pytest.approx(1000 * np.finfo(np.float32).eps)


def _layer(scale_bias: float, weight: np.ndarray = W) -> tuple[dict[str, dict[str, Any]], dict[str, str | None]]:
    """A Linear module (Functional.linear inside Module.fc.Linear) followed by a ReLU module."""
    b = np.full(8, 0.1, np.float32)
    y = (X @ weight.T + b).astype(np.float32)
    y2 = (y * np.float32(scale_bias)).astype(np.float32)
    r = np.maximum(y2, 0)
    entries = {
        "Functional.linear.0.forward": {"input_args": [X, weight, b], "output": [y2]},
        "Module.fc.Linear.forward.0": {"input_args": [X], "parameters": {"weight": weight, "bias": b}, "output": [y2]},
        "Functional.relu.0.forward": {"input_args": [y2], "output": [r]},
        "Module.act.ReLU.forward.0": {"input_args": [y2], "output": [r]},
        "Module.net.Net.forward.0": {"input_args": [X], "output": [r]},
    }
    parents = {"Functional.linear.0.forward": "Module.fc.Linear.forward.0",
               "Module.fc.Linear.forward.0": "Module.net.Net.forward.0",
               "Functional.relu.0.forward": "Module.act.ReLU.forward.0",
               "Module.act.ReLU.forward.0": "Module.net.Net.forward.0", "Module.net.Net.forward.0": None}
    return entries, parents


def test_the_origin_is_rolled_up_to_its_cell_and_the_cells_around_it_do_not_jump(tmp_path: Path):
    write(tmp_path / "a", *_layer(1.01))
    write(tmp_path / "b", *_layer(1.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    o = c.likely_origin
    assert o is not None and o.ref.name == "Functional.linear.0.forward.output.0"
    assert o.cell == "Module.fc.Linear.forward.0"
    assert o.ref.parents == ("Module.fc.Linear.forward.0", "Module.net.Net.forward.0")
    assert "Module.fc.Linear.forward.0 (step0/rank)" in o.text
    warned = [r.name for r in c.units[0].rows if r.verdict == "warning"]
    assert warned == ["Functional.linear.0.forward.output.0"]  # not the Linear module's, not the Net's output


def test_a_parameter_that_differs_is_where_the_error_enters(tmp_path: Path):
    write(tmp_path / "a", *_layer(1.0, W.T.copy()))  # a weight copied transposed
    write(tmp_path / "b", *_layer(1.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    o = c.likely_origin
    assert o is not None and o.kind == "entered" and o.ref.name == "Functional.linear.0.forward.input.1"
    assert o.error_out == pytest.approx(rel(W.T, W), rel=1e-9) and o.error_in == 0.0
    assert o.cell == "Module.fc.Linear.forward.0"


def test_arguments_that_differ_at_the_origin_are_its_evidence(tmp_path: Path):
    a, parents = _layer(1.01)
    b, _ = _layer(1.0)
    a["Functional.linear.0.forward"]["input_args"].append(1e-5)
    b["Functional.linear.0.forward"]["input_args"].append(1e-12)
    write(tmp_path / "a", a, parents)
    write(tmp_path / "b", b, parents)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.likely_origin is not None
    assert c.likely_origin.arguments == ("Functional.linear.0.forward.input.3: A 1e-05, B 1e-12",)


def test_the_warning_can_be_switched_off_in_the_rules(tmp_path: Path):
    write(tmp_path / "a", chain(1, 1e-4))
    write(tmp_path / "b", chain(None, 0.0))
    rules = Rules(localisation=OriginRules(warn=False))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(rules=rules))
    assert c.likely_origin is not None and dict(c.verdict_counts)["warning"] == 0
    # a larger jump ratio than the error's ratio to the floor finds nothing
    rules = Rules(localisation=OriginRules(same_kernel_noise_ulps=1e4))
    assert compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(rules=rules)).likely_origin \
        is None


def test_a_backward_reads_the_error_its_forward_saved(tmp_path: Path):
    # The forward's input carries 1e-3 (entered at the first call); its backward's output carries that error although
    # the gradient it receives is exact: no second jump.
    x_a = (X * np.float32(1.001)).astype(np.float32)
    g = np.ones_like(X)
    grad_a, grad_b = (1 - np.tanh(x_a) ** 2).astype(np.float32), (1 - np.tanh(X) ** 2).astype(np.float32)
    a = {"Torch.tanh.0.forward": {"input_args": [x_a], "output": [np.tanh(x_a)]},
         "Torch.tanh.0.backward": {"input_args": [g], "output": [grad_a]}}
    b = {"Torch.tanh.0.forward": {"input_args": [X], "output": [np.tanh(X)]},
         "Torch.tanh.0.backward": {"input_args": [g], "output": [grad_b]}}
    write(tmp_path / "a", a)
    write(tmp_path / "b", b)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert [u.rows[j.row].name for u in c.units for j in u.jumps] == ["Torch.tanh.0.forward.input.0"]


def test_a_tensor_at_rounding_noise_magnitude_is_not_judged_by_its_cosine(tmp_path: Path):
    # A bias gradient that cancels to rounding noise (~1e-12) beside a weight gradient of ~0.3: its Cosine between two
    # runs is a random number, which would fail the Cosine rules.
    w_grad = RNG.standard_normal((8, 8)).astype(np.float32) / 3
    noise_a = (RNG.standard_normal(8) * 1e-12).astype(np.float32)
    noise_b = (RNG.standard_normal(8) * 1e-12).astype(np.float32)
    a = {"Module.fc.Linear.parameters_grad": {"output": [], "parameters": {"weight": w_grad, "bias": noise_a}}}
    b = {"Module.fc.Linear.parameters_grad": {"output": [], "parameters": {"weight": w_grad, "bias": noise_b}}}
    for side, doc in (("a", a), ("b", b)):
        write(tmp_path / side, {"Module.fc.Linear.forward.0": {"input_args": [X], "output": [X]}})
        rank = tmp_path / side / "step0" / "rank"
        dump = json.loads((rank / "dump.json").read_text())
        grads = doc["Module.fc.Linear.parameters_grad"]["parameters"]
        dump["data"]["Module.fc.Linear.parameters_grad"] = {
            k: _leaf(v, f"Module.fc.Linear.parameters_grad.{k}", "tensor") for k, v in grads.items()}
        for k, v in grads.items():
            np.save(rank / "dump_tensor_data" / f"Module.fc.Linear.parameters_grad.{k}.npy", v)
        (rank / "dump.json").write_text(json.dumps(dump))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    bias = next(r for r in c.units[0].rows if r.name == "Module.fc.Linear.parameters_grad.bias")
    cos = float(np.dot(noise_a.astype(np.float64), noise_b) / (np.linalg.norm(noise_a) * np.linalg.norm(noise_b)))
    assert bias.metric("Cosine") == pytest.approx(cos) and cos < 0.9  # the rules alone would fail it
    assert bias.verdict == "pass" and any("rounding-noise magnitude" in n for n in bias.notes)
    assert any(n.startswith("both sides at rounding-noise magnitude") and "was: Cosine" in n for n in bias.notes)
    assert c.verdict == "pass" and c.likely_origin is None


def test_the_rules_file_sets_the_localisation(tmp_path: Path):
    from msprobe_cmp.comparator.rules_file import load_rules
    from msprobe_cmp.errors import ConfigError

    f = tmp_path / "rules.toml"
    f.write_text("[localisation]\njump_ratio = 100\ncross_kernel_noise_ulps = 5000\nwarn = false\n")
    got = load_rules(f).localisation
    assert (got.jump_ratio, got.cross_kernel_noise_ulps, got.warn) == (100.0, 5000.0, False)
    assert got.same_kernel_noise_ulps == 16.0  # unset keys keep the defaults
    for text, where in (("[localisation]\njump_ratio = 0.5\n", "jump_ratio"), ("[localisation]\nwarn = 1\n", "warn"),
                        ("[localisation]\njump = 3\n", "jump")):
        f.write_text(text)
        with pytest.raises(ConfigError, match=f"rules.toml: localisation.{where}"):
            load_rules(f)


def test_the_first_row_holding_a_nan_or_inf_on_one_side_only_is_the_origin(tmp_path: Path):
    a = chain(None, 0.0)
    y = a["Tensor.__mul__.0.forward"]["output"][0].copy()
    y[0, 0] = np.inf  # the multiplication overflows on A only; every later call reads it
    a["Tensor.__mul__.0.forward"]["output"][0] = y
    a["Torch.tanh.1.forward"]["input_args"][0] = y
    write(tmp_path / "a", a)
    write(tmp_path / "b", chain(None, 0.0))
    for mode in ("tensor", "statistics"):
        o = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(mode=mode)).likely_origin
        assert o is not None and o.ref.name == "Tensor.__mul__.0.forward.output.0" and o.kind == "computed"
        assert o.error_out == np.inf and o.ratio is None


def test_cancellation_amplifies_the_relative_error_without_adding_any(tmp_path: Path):
    # x near 100 differing by one float32 ulp at 100 (7.6e-6, relative 7.6e-8); x - 100 is exact, so its absolute
    # error stays 7.6e-6 while its values shrink to ~0.01: a relative error of ~1e-3, added by no call.
    x_b = (np.float32(100) + RNG.uniform(-0.01, 0.01, 64).astype(np.float32)).astype(np.float32)
    x_a = np.nextafter(x_b, np.float32(np.inf)).astype(np.float32)
    entries = {side: {"Tensor.__sub__.0.forward": {"input_args": [x, 100.0], "output": [x - np.float32(100)]}}
               for side, x in (("a", x_a), ("b", x_b))}
    write(tmp_path / "a", entries["a"])
    write(tmp_path / "b", entries["b"])
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    out = next(r for r in c.units[0].rows if r.arg_path == "output.0")
    inp = next(r for r in c.units[0].rows if r.arg_path == "input.0")
    assert out.metric("MaxAbsErr") == pytest.approx(inp.metric("MaxAbsErr"))  # the same absolute error ...
    assert out.metric("MaxAbsErr") / 0.01 > 100 * inp.metric("MaxAbsErr") / 100  # ... far larger relative
    assert c.likely_origin is None and out.verdict == "pass"


def test_a_backward_reads_the_error_of_a_forward_that_did_not_jump(tmp_path: Path):
    # An error of 1e-2 enters at the first call; the tanh forward after it carries 1e-3 in and out (no jump: nothing
    # happens there), and its backward's output is 5e-2 off although the gradient it receives is exact.  What that
    # backward is judged against is what its forward's rows carried (their largest error), not the 1e-2 carried by
    # then, nor the 0 of its exact input.
    y = RNG.standard_normal((4, 8)).astype(np.float32)
    y_a = (y * np.float32(1.01)).astype(np.float32)
    x_a = (X * np.float32(1.001)).astype(np.float32)
    g = np.ones_like(X)
    grad_b = (1 - np.tanh(X) ** 2).astype(np.float32)
    grad_a = ((1 - np.tanh(x_a) ** 2) * np.float32(1.05)).astype(np.float32)
    a = {"Torch.exp.0.forward": {"input_args": [y_a], "output": [np.exp(y_a)]},
         "Torch.tanh.0.forward": {"input_args": [x_a], "output": [np.tanh(x_a)]},
         "Torch.tanh.0.backward": {"input_args": [g], "output": [grad_a]}}
    b = {"Torch.exp.0.forward": {"input_args": [y], "output": [np.exp(y)]},
         "Torch.tanh.0.forward": {"input_args": [X], "output": [np.tanh(X)]},
         "Torch.tanh.0.backward": {"input_args": [g], "output": [grad_b]}}
    write(tmp_path / "a", a)
    write(tmp_path / "b", b)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    jumps = [(u.rows[j.row].name, j) for u in c.units for j in u.jumps]
    assert [name for name, _ in jumps] == ["Torch.exp.0.forward.input.0", "Torch.tanh.0.backward.output.0"]
    forward_error = max(rel(x_a, X), rel(np.tanh(x_a), np.tanh(X)))
    assert 1e-2 > 10 * forward_error  # the forward carries less than what came before it: it does not jump
    _, backward = jumps[1]
    assert backward.kind == "computed"
    assert backward.error_in == pytest.approx(forward_error, rel=1e-9)
    assert backward.error_out == pytest.approx(rel(grad_a, grad_b), rel=1e-9)


def test_extreme_statistics_localise_without_numpy_warnings(tmp_path):
    """Statistics spanning float64's range (random bit patterns, 1e308 beside 1e-300): errors over tiny magnitudes
    and jump_ratio times huge carried errors overflow to +Inf quietly (no RuntimeWarning reaches the user's stderr),
    and the comparison completes."""
    import random
    import struct
    import warnings

    rnd = random.Random(1)

    def value() -> float:
        while True:
            x = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
            if math.isfinite(x):
                return x

    for side in ("A", "B"):
        data = {}
        for i in range(300):
            leaves = [{"type": "mindspore.Tensor", "dtype": "Float32", "shape": [4, 8], "Max": value(),
                       "Min": value(), "Mean": value(), "Norm": abs(value())} for _ in range(3)]
            data[f"Functional.op{i % 7}.{i}.forward"] = {"input_args": leaves[:2], "input_kwargs": {},
                                                          "output": leaves[2:]}
        unit = tmp_path / side / "step0" / "rank0"
        unit.mkdir(parents=True)
        (unit / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "mindspore",
                                                    "dump_data_dir": None, "data": data}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        c = compare(load_dump(tmp_path / "A"), load_dump(tmp_path / "B"))
    assert len(c.units[0].rows) == 900 and c.verdict == "fail"


def test_each_rows_relative_error_and_noise_floor_are_columns_and_cells_take_the_worst_ratio(tmp_path: Path):
    entries, parents = _layer(1.01)
    write(tmp_path / "a", entries, parents)
    write(tmp_path / "b", *_layer(1.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    t = c.units[0].rows
    floor = 16 * float(np.finfo(np.float32).eps)  # same framework: 16 ulps of float32
    base, _ = _layer(1.0)
    ratios = {}
    for k, row in enumerate(t):
        # the arrays of both sides, found by the row's argument path
        head, _, index = row.arg_path.partition(".")
        key = {"input": "input_args", "output": "output", "parameters": "parameters"}[head]
        got_a = entries[row.entry_name][key]
        got_b = base[row.entry_name][key]
        va, vb = (got_a[index], got_b[index]) if key == "parameters" else (got_a[int(index)], got_b[int(index)])
        want = rel(va, vb)
        assert t.relative_error[k] == pytest.approx(want, rel=1e-9, abs=0.0), row.name
        assert t.noise_floor[k] == pytest.approx(floor, rel=1e-12)
        ratios[row.entry_name] = max(ratios.get(row.entry_name, 0.0), want / floor)
    cells = {cell.cell: cell for cell in c.units[0].cells}
    assert ratios["Functional.linear.0.forward"] > 1000  # the scaled output: 1% is ~5e4 ulps
    assert ratios["Module.act.ReLU.forward.0"] > 1000  # carried in
    # a cell's ratio: the worst of its own rows and of every call inside it
    assert cells["Module.fc.Linear.forward.0"].max_noise_ratio == pytest.approx(
        max(ratios["Functional.linear.0.forward"], ratios["Module.fc.Linear.forward.0"]), rel=1e-9)
    assert cells["Module.net.Net.forward.0"].max_noise_ratio == pytest.approx(max(ratios.values()), rel=1e-9)


def test_identical_runs_are_within_noise_everywhere(tmp_path: Path):
    write(tmp_path / "a", *_layer(1.0))
    write(tmp_path / "b", *_layer(1.0))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    t = c.units[0].rows
    measured = ~np.isnan(t.relative_error)
    assert measured.sum() == len(t)  # every row is a float32 tensor of both sides
    assert (t.relative_error == 0.0).all()
    assert [cell.max_noise_ratio for cell in c.units[0].cells] == [0.0] * len(c.units[0].cells)


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_non_finite_values_that_disagree_are_infinitely_far_above_noise(tmp_path: Path, mode: str):
    # A's output holds +Inf where B's holds -Inf: each side's Max or Min is non-finite, and they differ (before, such
    # a row was not measured: its cell looked within noise, and the origin moved downstream)
    x = X.astype(np.float32)
    y_a, y_b = np.tanh(x), np.tanh(x)
    y_a[0, 0], y_b[0, 0] = np.inf, -np.inf
    write(tmp_path / "a", {"Torch.tanh.0.forward": {"input_args": [x], "output": [y_a]},
                           "Torch.exp.0.forward": {"input_args": [y_a], "output": [np.exp(y_a)]}})
    write(tmp_path / "b", {"Torch.tanh.0.forward": {"input_args": [x], "output": [y_b]},
                           "Torch.exp.0.forward": {"input_args": [y_b], "output": [np.exp(y_b)]}})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(mode=mode))
    t = c.units[0].rows
    by_name = {row.name: k for k, row in enumerate(t)}
    assert t.relative_error[by_name["Torch.tanh.0.forward.input.0"]] == 0.0
    assert t.relative_error[by_name["Torch.tanh.0.forward.output.0"]] == math.inf
    o = c.likely_origin
    assert o is not None and o.ref.name == "Torch.tanh.0.forward.output.0" and o.error_out == math.inf


def test_a_failing_row_that_cannot_be_measured_makes_its_cell_infinitely_far_above_noise(tmp_path: Path):
    entries, parents = _layer(1.0)
    write(tmp_path / "a", entries, parents)
    wrong = {**entries, "Functional.relu.0.forward": {"input_args": [entries["Functional.relu.0.forward"]
                                                                     ["input_args"][0]],
                                                      "output": [np.zeros((4, 9), np.float32)]}}  # another shape
    write(tmp_path / "b", wrong, parents)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    t = c.units[0].rows
    k = next(k for k, row in enumerate(t) if row.name == "Functional.relu.0.forward.output.0")
    assert t[k].verdict == "fail" and math.isnan(t.relative_error[k])  # not measured: the shapes differ
    cells = {cell.cell: cell for cell in c.units[0].cells}
    assert cells["Module.act.ReLU.forward.0"].max_noise_ratio == math.inf
    assert cells["Module.fc.Linear.forward.0"].max_noise_ratio == 0.0  # identical: no error at all
