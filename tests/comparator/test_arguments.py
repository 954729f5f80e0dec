"""Non-tensor arguments across frameworks (issue 15): one dtype or device in two spellings is equal; an argument that
differs is its own category ("argument differs", a warning unless the rules ask for a failure)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.dtypes import as_dtype_value, normalize_device
from msprobe_cmp.comparator.outcomes import argument_name
from msprobe_cmp.comparator.rules import (
    ARGUMENT_DIFFERS,
    ARGUMENT_FLOAT_RTOL,
    Rules,
    compare_values,
    compute_argument_verdict,
    is_argument_row,
)
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, ValueLeaf, load_dump
from msprobe_cmp.errors import ConfigError

# ------------------------------------------------------------------ spellings


@pytest.mark.parametrize(
    ("a", "b", "canonical"),
    [
        ("Float32", "torch.float32", "float32"),  # MindSpore's str() against torch's
        ("mindspore.float32", "torch.float32", "float32"),
        ("Float16", "torch.half", "float16"),
        ("BFloat16", "torch.bfloat16", "bfloat16"),
        ("Int64", "torch.long", "int64"),
        ("Bool", "torch.bool", "bool"),
        ("mindspore.bool_", "Bool", "bool"),
        ("Float64", "torch.double", "float64"),
    ],
)
def test_one_dtype_in_two_spellings_is_one_value(a: str, b: str, canonical: str) -> None:
    assert as_dtype_value(a) == as_dtype_value(b) == canonical
    match = compare_values("mindspore.dtype", a, "torch.dtype", b)
    assert match == (True, "dtype", f"one dtype in two spellings (A {a!r}, B {b!r})")


def test_different_dtypes_and_words_that_are_not_dtypes() -> None:
    assert compare_values("mindspore.dtype", "BFloat16", "torch.dtype", "torch.float32") == (False, "dtype", None)
    assert compare_values("torch.dtype", "torch.float16", "torch.dtype", "torch.bfloat16") == (False, "dtype", None)
    # the same spelling on both sides: equal, nothing to note
    assert compare_values("torch.dtype", "torch.float32", "torch.dtype", "torch.float32") == (True, "dtype", None)
    # strings that only happen to be words: compared as they are written
    assert as_dtype_value("mean") is None and as_dtype_value("tanh") is None and as_dtype_value(3) is None
    assert compare_values("str", "float", "str", "Float32") == (False, "other", None)
    assert compare_values("str", "tanh", "str", "none") == (False, "other", None)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("cpu", "cpu"),
        ("CPU", "cpu"),
        ("device(type=cpu)", "cpu"),  # mindtorch's str()
        ("device(type='cpu')", "cpu"),  # torch's repr()
        ("device(type=cpu, index=None)", "cpu"),
        ("cuda:0", "cuda:0"),
        ("device(type='cuda', index=0)", "cuda:0"),
        ("device(type=cuda, index=0)", "cuda:0"),
        ("npu:1", "npu:1"),
        ("Ascend", "ascend"),
        ("cuda", "cuda"),
        ("mean", None),
        ("device()", None),
        ("device(type='cuda', index=x)", None),
        ("", None),
    ],
)
def test_device_spellings(text: str, canonical: str | None) -> None:
    assert normalize_device(text) == canonical


def test_one_device_in_two_spellings_is_one_value() -> None:
    assert compare_values("torch.device", "device(type=cpu)", "torch.device", "cpu") == (
        True, "device", "one device in two spellings (A 'device(type=cpu)', B 'cpu')")
    assert compare_values("torch.device", "device(type='cpu')", "str", "cpu")[:2] == (True, "device")
    assert compare_values("torch.device", "cuda:0", "torch.device", "device(type='cuda', index=0)")[:2] == (
        True, "device")
    # "cuda" is whichever device was current: not known to be cuda:0
    assert compare_values("torch.device", "cuda", "torch.device", "cuda:0") == (False, "device", None)
    assert compare_values("torch.device", "cuda:0", "torch.device", "cuda:1") == (False, "device", None)


def test_numbers_are_equal_to_float32_rounding_only() -> None:
    eps32 = float(np.float32(1e-05))  # 1e-05 read back from a float32: 9.99999974738e-06
    assert eps32 != 1e-05 and abs(eps32 - 1e-05) / 1e-05 < ARGUMENT_FLOAT_RTOL
    assert compare_values("float", 1e-05, "float", eps32) == (
        True, "number", f"equal to float32 rounding (A 1e-05, B {eps32!r})")
    assert compare_values("float", 0.1, "float", 1 - 0.9)[:2] == (True, "number")
    assert compare_values("int", 1, "float", 1.0) == (True, "number", None)
    assert compare_values("float", math.nan, "float", math.nan) == (True, "number", None)
    assert compare_values("float", 1e-05, "float", 1e-12) == (False, "number", None)
    # two float32 ulps apart at 1.0: beyond rounding
    assert compare_values("float", 1.0, "float", 1.0 + 2 * 2.0**-23) == (False, "number", None)
    assert compare_values("float", math.inf, "float", 1e308) == (False, "number", None)
    assert compare_values("int", 10**400, "float", 1.0) == (False, "number", None)
    assert compare_values("int", 3, "int", 4) == (False, "number", None)
    # a bool is not a number here: True against 1.0 is compared as written (True == 1.0 in Python)
    assert compare_values("bool", True, "bool", False) == (False, "other", None)


def test_argument_names_and_reason() -> None:
    assert argument_name("Functional.layer_norm.0.forward", "kwargs.eps") == "eps"
    assert argument_name("Functional.layer_norm.0.forward", "input.4") == "input.4"
    assert argument_name("Functional.conv2d.0.forward", "kwargs.stride.1") == "stride.1"
    assert argument_name("Module.ln.LayerNorm.forward.0", "kwargs.eps") == "eps"
    # outputs, parameters and backward entries hold no call arguments
    assert argument_name("Functional.layer_norm.0.forward", "output.0") is None
    assert argument_name("Module.ln.LayerNorm.forward.0", "parameters.weight") is None
    assert argument_name("Functional.layer_norm.0.backward", "input.0") is None
    assert argument_name("Module.ln.LayerNorm.parameters_grad", "weight") is None
    out = compute_argument_verdict("eps", 1e-05, 1e-12)
    assert (out.verdict, out.reasons) == ("warning", ("argument differs: eps A 1e-05, B 1e-12",))
    assert out.reasons[0].startswith(ARGUMENT_DIFFERS + ":")
    assert compute_argument_verdict("approximate", "tanh", "none", "fail").reasons == (
        "argument differs: approximate A 'tanh', B 'none'",)


def test_rules_argument_differs_must_be_warning_or_fail() -> None:
    assert Rules().argument_differs == "warning" and Rules(argument_differs="fail").argument_differs == "fail"
    for bad in ("error", "Warning", "", 1, None):
        with pytest.raises(ConfigError, match="argument_differs: must be \"warning\" or \"fail\""):
            Rules(argument_differs=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ compare()

X = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)


def _tensor(arr: np.ndarray) -> TensorLeaf:
    a64 = arr.astype(np.float64)
    return TensorLeaf("torch.Tensor", "torch.float32", tuple(arr.shape), float(a64.max()), float(a64.min()),
                      float(a64.mean()), float(np.linalg.norm(a64)))


def _unit(path: Path, calls: list[tuple[str, tuple, tuple, tuple]]) -> Path:
    """A statistics unit: per call (name, positional values, keyword values, output values); X around them."""
    w = DumpWriter(path, DumpMeta("statistics", "L1", "pytorch"))
    for name, args, kwargs, outputs in calls:
        w.put(Entry.forward(name, Seq((_tensor(X), *args)), Map(tuple(kwargs)), Seq((_tensor(X), *outputs))))
    w.flush()
    return path


def _calls(eps, approximate, cast, inplace, dtype, device, out_float, out_int, dim_type="int", dim=1):
    return [
        ("Functional.layer_norm.0.forward", (), (("eps", ValueLeaf("float", eps)),), ()),
        ("Functional.gelu.0.forward", (), (("approximate", ValueLeaf("str", approximate)),), ()),
        ("Tensor.to.0.forward", (ValueLeaf(*cast),), (), ()),
        ("Functional.relu.0.forward", (), (("inplace", ValueLeaf("bool", inplace)),), ()),
        ("Torch.zeros_like.0.forward", (), (("dtype", ValueLeaf(*dtype)), ("device", ValueLeaf(*device))), ()),
        ("Tensor.item.0.forward", (), (), (ValueLeaf("float", out_float),)),
        ("Tensor.size.0.forward", (ValueLeaf(dim_type, dim),), (), (ValueLeaf("int", out_int),)),
    ]


@pytest.fixture
def units(tmp_path: Path) -> tuple[Path, Path]:
    a = _unit(tmp_path / "a", _calls(1e-05, "tanh", ("torch.dtype", "torch.bfloat16"), True,
                                     ("mindspore.dtype", "Float32"), ("torch.device", "device(type=cpu)"), 0.5, 3))
    b = _unit(tmp_path / "b", _calls(1e-12, "none", ("torch.dtype", "torch.float32"), False,
                                     ("torch.dtype", "torch.float32"), ("torch.device", "cpu"), 0.75, 4))
    return a, b


def test_differing_arguments_are_warnings_with_their_own_reason(units: tuple[Path, Path]) -> None:
    c = compare(load_dump(units[0]), load_dump(units[1]))
    rows = {r.name: r for r in c.units[0].rows}
    expected = {
        "Functional.layer_norm.0.forward.kwargs.eps": "argument differs: eps A 1e-05, B 1e-12",
        "Functional.gelu.0.forward.kwargs.approximate": "argument differs: approximate A 'tanh', B 'none'",
        "Tensor.to.0.forward.input.1": "argument differs: input.1 A 'torch.bfloat16', B 'torch.float32'",
    }
    for name, reason in expected.items():
        r = rows[name]
        assert (r.match_class, r.compared_by, r.verdict, r.reasons, r.differs, r.metrics) == (
            "matched", "value", "warning", (reason,), True, ()), name
        assert is_argument_row(r)
    # inplace differs: a note only, as before
    inplace = rows["Functional.relu.0.forward.kwargs.inplace"]
    assert (inplace.verdict, inplace.reasons, inplace.differs) == ("pass", (), False)
    assert inplace.notes == ("inplace differs (A True, B False): where the result is written, not its value",)
    assert not is_argument_row(inplace)
    # one dtype / one device in two spellings: equal, said in a note (no "value types differ" note)
    dtype = rows["Torch.zeros_like.0.forward.kwargs.dtype"]
    assert (dtype.verdict, dtype.reasons, dtype.differs) == ("pass", (), False)
    assert dtype.notes == ("one dtype in two spellings (A 'Float32', B 'torch.float32')",)
    device = rows["Torch.zeros_like.0.forward.kwargs.device"]
    assert (device.verdict, device.differs) == ("pass", False) and not is_argument_row(device)
    assert device.notes == ("one device in two spellings (A 'device(type=cpu)', B 'cpu')",)
    # outputs are results, not settings: a float output keeps the 0-d tensor rules (|0.5 - 0.75| = 0.25 > 1e-3:
    # a single value's warning), an int output must be equal
    item = rows["Tensor.item.0.forward.output.1"]
    assert item.verdict == "warning" and item.metric("MaxAbsErr") == pytest.approx(0.25)
    assert item.reasons[0].startswith("cosine undefined for a single value") and not is_argument_row(item)
    size = rows["Tensor.size.0.forward.output.1"]
    assert (size.verdict, size.reasons) == ("fail", ("value differs: A 3, B 4",)) and not is_argument_row(size)
    # tensors equal on both sides pass; the only failure is the int output
    assert [r.name for r in c.units[0].rows if r.verdict == "fail"] == ["Tensor.size.0.forward.output.1"]
    assert sum(is_argument_row(r) for r in c.units[0].rows) == 3


def test_rules_can_make_argument_differences_failures(units: tuple[Path, Path]) -> None:
    c = compare(load_dump(units[0]), load_dump(units[1]), CompareOptions(rules=Rules(argument_differs="fail")))
    rows = {r.name: r for r in c.units[0].rows}
    eps = rows["Functional.layer_norm.0.forward.kwargs.eps"]
    assert (eps.verdict, eps.reasons) == ("fail", ("argument differs: eps A 1e-05, B 1e-12",)) and is_argument_row(eps)
    # placement and spellings stay passes under "fail"
    assert rows["Functional.relu.0.forward.kwargs.inplace"].verdict == "pass"
    assert rows["Torch.zeros_like.0.forward.kwargs.dtype"].verdict == "pass"
    assert c.verdict == "fail"


def test_arguments_alone_never_fail_a_comparison(tmp_path: Path) -> None:
    # Only argument differences (and a float argument off by float32 rounding): the comparison passes, with warnings.
    eps32 = float(np.float32(1e-05))
    a = _unit(tmp_path / "a", [("Functional.layer_norm.0.forward", (ValueLeaf("float", 1e-05),),
                                (("approximate", ValueLeaf("str", "tanh")),), ())])
    b = _unit(tmp_path / "b", [("Functional.layer_norm.0.forward", (ValueLeaf("float", eps32),),
                                (("approximate", ValueLeaf("str", "none")),), ())])
    c = compare(load_dump(a), load_dump(b))
    rows = {r.name: r for r in c.units[0].rows}
    rounding = rows["Functional.layer_norm.0.forward.input.1"]
    assert (rounding.verdict, rounding.reasons, rounding.differs) == ("pass", (), False)
    assert rounding.notes == (f"equal to float32 rounding (A 1e-05, B {eps32!r})",)
    assert rows["Functional.layer_norm.0.forward.kwargs.approximate"].verdict == "warning"
    assert c.verdict == "pass"
    assert dict(c.verdict_counts)["warning"] == 1 and dict(c.verdict_counts)["fail"] == 0


def test_device_differences_are_notes(tmp_path: Path) -> None:
    # A GPU run against an NPU run: where the tensors live, not what they hold.
    calls = lambda dev: [("Tensor.to.0.forward", (ValueLeaf("torch.device", dev),), (), ())]  # noqa: E731
    c = compare(load_dump(_unit(tmp_path / "a", calls("cuda:0"))), load_dump(_unit(tmp_path / "b", calls("npu:0"))))
    r = next(r for r in c.units[0].rows if r.arg_path == "input.1")
    assert (r.verdict, r.reasons, r.differs) == ("pass", (), False)
    assert r.notes == ("device differs: input.1 A 'cuda:0', B 'npu:0' (where the result is placed, not its value)",)
