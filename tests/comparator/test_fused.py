"""One call against several (msprobe_cmp/comparator/fused.py): a fused module compared with the concatenation of
separate ones, declared by a ``fused`` record of the API-mapping file.  Hand-made dumps whose statistics and tensor
files come from numpy; every combined statistic is checked against numpy on the concatenated (or summed) arrays."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.comparator.compare import CompareOptions, compare
from msprobe_cmp.comparator.fused import (
    CombinedLeaf,
    combine_concatenated,
    combine_summed,
    fit_concat_axis,
    fused_records,
)
from msprobe_cmp.comparator.mapping import NameMapping, load_api_mapping, parse_api_mapping
from msprobe_cmp.comparator.mapping.files import FusedRecord
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf
from msprobe_cmp.errors import ConfigError

RNG = np.random.default_rng(15)
FILE = Path("apis.yaml")


def _leaf(arr: np.ndarray) -> TensorLeaf:
    """A leaf whose statistics numpy computes (float64), as the recorder writes them."""
    x = arr.astype(np.float64)
    return TensorLeaf("torch.Tensor", "torch.float32", tuple(arr.shape), float(x.max()), float(x.min()),
                      float(x.mean()), float(np.linalg.norm(x.ravel())))


# ------------------------------------------------------------------------------------------ the record


def _fused_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "fused": "Module.model.layers.{i}.self_attn.qkv_proj.Linear",
        "parts": ["Module.model.layers.{i}.self_attn.q_proj.Linear", "Module.model.layers.{i}.self_attn.k_proj.Linear",
                  "Module.model.layers.{i}.self_attn.v_proj.Linear"],
        "dim": -1, "parameters_dim": 0,
    }
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def test_a_fused_record_is_read_beside_api_records(tmp_path: Path) -> None:
    text = """
- ms_api: Primitive.ReLU
  pt_api: Functional.relu
- fused: Module.model.layers.{i}.mlp.gate_up_proj.Linear
  parts:
    - Module.model.layers.{i}.mlp.gate_proj.Linear
    - Module.model.layers.{i}.mlp.up_proj.Linear
"""
    (tmp_path / "apis.yaml").write_text(text)
    records = load_api_mapping(tmp_path / "apis.yaml")
    assert [r.ms_api for r in records] == ["Primitive.ReLU"]  # API records: a tuple as before
    assert records.fused == (FusedRecord(
        "Module.model.layers.{i}.mlp.gate_up_proj.Linear",
        ("Module.model.layers.{i}.mlp.gate_proj.Linear", "Module.model.layers.{i}.mlp.up_proj.Linear"),
        -1, 0, "user API mapping apis.yaml, record 1"),)
    assert fused_records(NameMapping(apis=records)) == records.fused
    assert fused_records(NameMapping()) == () and fused_records(None) == ()


@pytest.mark.parametrize(("doc", "message"), [
    (_fused_doc(extra=1), "apis.yaml: record 0.extra: unknown key in a fused record"),
    (_fused_doc(parts=None), "apis.yaml: record 0.parts: missing"),
    (_fused_doc(parts="Module.a.Linear"), "apis.yaml: record 0.parts: expected a list of cell names, got str"),
    (_fused_doc(parts=["Module.model.layers.{i}.q.Linear"]), "apis.yaml: record 0.parts: expected 2 to 64 cells, got 1"),
    (_fused_doc(parts=["Module.model.layers.{i}.q.Linear"] * 2), "apis.yaml: record 0.parts[1]: "),
    (_fused_doc(parts=["Module.model.layers.{i}.self_attn.qkv_proj.Linear", "Module.model.layers.{i}.q.Linear"]),
     "apis.yaml: record 0.parts[0]: 'Module.model.layers.{i}.self_attn.qkv_proj.Linear' is the fused cell itself"),
    (_fused_doc(parts=["Module.model.layers.{i}.q.Linear", "Module.model.layers.0.k.Linear"]),
     "apis.yaml: record 0.parts[1]: placeholder {i} not in both fused and this part"),
    (_fused_doc(fused="Module.model.layers.{i.qkv.Linear"), "apis.yaml: record 0.fused: a placeholder must be a whole"),
    (_fused_doc(fused="Functional.linear"), "apis.yaml: record 0.fused: expected 'Module.<path>.<Class>' or"),
    (_fused_doc(fused="Module.Linear"), "apis.yaml: record 0.fused: expected 'Module.<path>.<Class>' (a path"),
    (_fused_doc(fused="Module.model.qkv.Linear.forward.0"), "apis.yaml: record 0.fused: give the cell without"),
    (_fused_doc(fused=3), "apis.yaml: record 0.fused: expected a string, got int 3"),
    (_fused_doc(dim=True), "apis.yaml: record 0.dim: expected an integer from -32 to 31, got bool True"),
    (_fused_doc(dim="-1"), "apis.yaml: record 0.dim: expected an integer from -32 to 31, got str '-1'"),
    (_fused_doc(parameters_dim=99), "apis.yaml: record 0.parameters_dim: expected an integer from -32 to 31"),
])
def test_a_malformed_fused_record_is_one_line_naming_file_and_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_api_mapping([doc], FILE)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_a_cell_in_two_fused_records_is_an_error() -> None:
    other = {"fused": "Module.model.layers.{i}.self_attn.qkv2.Linear",
             "parts": ["Module.model.layers.{i}.self_attn.q_proj.Linear", "Module.model.layers.{i}.x.Linear"]}
    with pytest.raises(ConfigError, match=r"^apis.yaml: record 1.parts\[0\]: .* already used by fused record 0$"):
        parse_api_mapping([_fused_doc(), other], FILE)


# ------------------------------------------------------------------------------------------ statistics


def test_concatenated_statistics_are_those_of_the_concatenated_array() -> None:
    arrays = [RNG.normal(3.0, 2.0, (2, 5, k)).astype(np.float32) for k in (8, 4, 4)]
    combined = combine_concatenated([_leaf(a) for a in arrays], -1)
    whole = np.concatenate(arrays, axis=-1).astype(np.float64)
    assert combined.shape == (2, 5, 16) and combined.axis == 2 and combined.how == "concat"
    assert combined.max == whole.max() and combined.min == whole.min()  # exact
    assert combined.mean == pytest.approx(whole.mean(), rel=1e-13, abs=0)
    assert combined.norm == pytest.approx(np.linalg.norm(whole.ravel()), rel=1e-13, abs=0)
    assert combined.md5 is None and combined.dtype == "torch.float32"


def test_concatenation_along_parameters_dim_weights_the_mean_by_element_counts() -> None:
    # very different sizes and means: an unweighted mean of the means would be far off
    arrays = [np.full((30, 4), 1.0, np.float32), np.full((2, 4), 100.0, np.float32)]
    combined = combine_concatenated([_leaf(a) for a in arrays], 0)
    whole = np.concatenate(arrays, axis=0).astype(np.float64)
    assert combined.shape == (32, 4)
    assert combined.mean == pytest.approx(whole.mean(), rel=1e-15)  # 7.1875, not 50.5
    assert combined.norm == pytest.approx(np.sqrt((whole ** 2).sum()), rel=1e-15)


def test_a_nan_part_makes_the_statistics_nan_and_counts_add_up() -> None:
    a = TensorLeaf("torch.Tensor", "torch.float32", (2, 3), math.nan, -1.0, math.nan, math.nan,
                   extra=(("nan_count", 1), ("pos_inf_count", 0), ("neg_inf_count", 0)))
    b = TensorLeaf("torch.Tensor", "torch.float32", (2, 1), 5.0, 0.5, 2.0, 3.0,
                   extra=(("nan_count", 0), ("pos_inf_count", 2), ("neg_inf_count", 0)))
    combined = combine_concatenated([a, b], 1)
    assert math.isnan(combined.max) and combined.min == -1.0 and math.isnan(combined.mean)
    assert combined.nonfinite_counts == (1, 2, 0)
    # without counts on every part, none are claimed
    plain = combine_concatenated([a, TensorLeaf("torch.Tensor", "torch.float32", (2, 1), 1.0, 0.0, 0.5, 1.0)], 1)
    assert plain.nonfinite_counts is None and plain.extra == ()


def test_summed_statistics_keep_only_the_mean() -> None:
    arrays = [RNG.normal(0.5, 1.0, (2, 3, 4)).astype(np.float32) for _ in range(3)]
    combined = combine_summed([_leaf(a) for a in arrays])
    total = sum(a.astype(np.float64) for a in arrays)
    assert combined.how == "sum" and combined.shape == (2, 3, 4)
    assert combined.mean == pytest.approx(total.mean(), rel=1e-12)
    assert (combined.max, combined.min, combined.norm) == (None, None, None)


def test_parts_that_do_not_concatenate_are_refused() -> None:
    with pytest.raises(ValueError, match="do not concatenate"):
        combine_concatenated([_leaf(np.zeros((2, 3))), _leaf(np.zeros((3, 3)))], 1)
    with pytest.raises(ValueError, match="cannot be summed"):
        combine_summed([_leaf(np.zeros((2, 3))), _leaf(np.zeros((3, 3)))])


def test_the_concatenation_axis_must_fit_the_shapes() -> None:
    assert fit_concat_axis((2, 8, 64), [(2, 8, 32), (2, 8, 16), (2, 8, 16)], [-1, 0]) == 2
    assert fit_concat_axis((64, 32), [(32, 32), (16, 32), (16, 32)], [-1, 0]) == 0  # -1 does not fit, 0 does
    assert fit_concat_axis((64, 32), [(32, 32), (16, 32)], [0, -1]) is None  # 48 rows, not 64
    assert fit_concat_axis((64,), [(32,), (32, 1)], [0]) is None  # ranks differ
    assert fit_concat_axis((), [(), ()], [0]) is None


# ------------------------------------------------------------------------------------------ whole dumps

H, KV, D = 4, 2, 4  # q outputs, k/v outputs, input features
X = RNG.normal(size=(2, 3, D)).astype(np.float32)
WQ, WK, WV = (RNG.normal(size=(n, D)).astype(np.float32) for n in (H, KV, KV))
GY = RNG.normal(size=(2, 3, H + 2 * KV)).astype(np.float32)  # gradient w.r.t. the fused output


class _Writer:
    """A dump directory written leaf by leaf; every tensor's statistics and file come from numpy."""

    def __init__(self, root: Path, task: str) -> None:
        self.rank = root / "step0" / "rank"
        (self.rank / "dump_tensor_data").mkdir(parents=True)
        self.root, self.task, self.data, self.construct = root, task, {}, {}

    def leaf(self, arr: np.ndarray, name: str) -> dict[str, Any]:
        x = arr.astype(np.float64)
        out = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(arr.shape), "Max": float(x.max()),
               "Min": float(x.min()), "Mean": float(x.mean()), "Norm": float(np.linalg.norm(x.ravel()))}
        if self.task == "tensor":
            np.save(self.rank / "dump_tensor_data" / f"{name}.npy", arr.astype(np.float32))
            out["data_name"] = f"{name}.npy"
        return out

    def linear(self, module: str, w: np.ndarray, x: np.ndarray, gy: np.ndarray, api: str) -> None:
        """A Linear module (no bias) called once, with one Functional.linear inside: forward, backward, grads."""
        y = (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)
        gx = (gy.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
        gw = np.einsum("bso,bsi->oi", gy.astype(np.float64), x.astype(np.float64)).astype(np.float32)
        fwd, bwd = f"{module}.forward.0", f"{module}.backward.0"
        L = self.leaf
        self.data[f"{api}.forward"] = {"input_args": [L(x, api + ".x"), L(w, api + ".w"), None], "input_kwargs": {},
                                       "output": [L(y, api + ".y")]}
        self.data[fwd] = {"input_args": [L(x, fwd + ".x")], "input_kwargs": {}, "output": [L(y, fwd + ".y")],
                          "parameters": {"weight": L(w, fwd + ".w")}}
        self.data[f"{module}.parameters_grad"] = {"weight": [L(gw, module + ".gw")]}
        self.data[f"{api}.backward"] = {"input": [L(gy, api + ".gy")],
                                        "output": [L(gx, api + ".gx"), L(gw, api + ".gw"), None]}
        self.data[bwd] = {"input": [L(gy, bwd + ".gy")], "output": [L(gx, bwd + ".gx")]}
        self.construct.update({f"{api}.forward": fwd, f"{api}.backward": bwd, fwd: None, bwd: None})

    def relu(self, index: int, x: np.ndarray) -> None:
        name = f"Functional.relu.{index}.forward"
        self.data[name] = {"input_args": [self.leaf(x, name + ".x")], "input_kwargs": {},
                           "output": [self.leaf(np.maximum(x, 0), name + ".y")]}
        self.construct[name] = None

    def write(self) -> Path:
        doc = {"task": self.task, "level": "mix", "framework": "pytorch", "dump_data_dir": "dump_tensor_data",
               "data": self.data}
        (self.rank / "dump.json").write_text(json.dumps(doc))
        (self.rank / "construct.json").write_text(json.dumps(self.construct))
        (self.rank / "stack.json").write_text("{}")
        return self.root


def _fused_dump(root: Path, task: str) -> Path:
    w = _Writer(root, task)
    w.relu(0, X)
    w.linear("Module.attn.qkv_proj.Linear", np.concatenate([WQ, WK, WV]), X, GY, "Functional.linear.0")
    w.relu(1, X)
    return w.write()


def _parts_dump(root: Path, task: str, wv: np.ndarray = WV) -> Path:
    w = _Writer(root, task)
    w.relu(0, X)
    cut = np.cumsum([H, KV])
    for k, (name, weight, gy) in enumerate(zip(("q_proj", "k_proj", "v_proj"), (WQ, WK, wv), np.split(GY, cut, -1),
                                               strict=True)):
        w.linear(f"Module.attn.{name}.Linear", weight, X, gy, f"Functional.linear.{k}")
    w.relu(1, X)
    return w.write()


def _mapping(tmp_path: Path) -> NameMapping:
    (tmp_path / "apis.yaml").write_text(
        "- fused: Module.attn.qkv_proj.Linear\n"
        "  parts: [Module.attn.q_proj.Linear, Module.attn.k_proj.Linear, Module.attn.v_proj.Linear]\n"
        "  dim: -1\n  parameters_dim: 0\n")
    return NameMapping(apis=load_api_mapping(tmp_path / "apis.yaml"), api_source="apis.yaml")


def _rows(tmp_path: Path, task: str, fused_on_a: bool = True, wv: np.ndarray = WV,
          mapping: bool = True) -> tuple[Any, list[Any]]:
    fused = _fused_dump(tmp_path / f"fused_{task}", task)
    parts = _parts_dump(tmp_path / f"parts_{task}_{fused_on_a}_{id(wv)}", task, wv)
    a, b = (fused, parts) if fused_on_a else (parts, fused)
    opts = CompareOptions(mapping=_mapping(tmp_path) if mapping else NameMapping())
    result = compare(load_dump(a), load_dump(b), opts)
    return result, list(result.units[0].rows)


def test_without_the_record_the_fused_call_finds_no_partner(tmp_path: Path) -> None:
    result, rows = _rows(tmp_path, "statistics", mapping=False)
    assert any(r.match_class == "only_in_a" and "qkv_proj" in r.entry_name for r in rows)
    assert any(r.match_class == "shape_mismatch" for r in rows)  # Functional.linear.0 against q_proj's


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_every_row_of_the_fused_call_and_its_parts_pairs(tmp_path: Path, task: str) -> None:
    result, rows = _rows(tmp_path, task)
    assert {r.match_class for r in rows} == {"matched"}, [(r.entry_name, r.arg_path, r.match_class) for r in rows]
    assert result.verdict == "pass" and dict(result.verdict_counts)["fail"] == 0
    combined = [r for r in rows if r.mapped_by and r.mapped_by.startswith("fused call: user API mapping apis.yaml")]
    # module: 3 shared inputs + weight + output; backward: grad out (concat) + grad in (sum); parameters_grad: 1;
    # Functional.linear: 3 shared x + weight + bias (null) + output; its backward: grad out + grad x + grad w + null
    assert len(combined) == 5 + 2 + 1 + 6 + 4 == len(rows) - 4  # the two relus' rows are the others
    # the order is execution order: relu 0, the fused group, relu 1
    assert rows[0].entry_name == rows[1].entry_name == "Functional.relu.0.forward"
    assert rows[-1].entry_name == "Functional.relu.1.forward" and rows[2].entry_name == "Functional.linear.0.forward"
    out = next(r for r in rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0" and r.arg_path == "output.0")
    assert out.entry_name_b == ("Module.attn.q_proj.Linear.forward.0 + Module.attn.k_proj.Linear.forward.0 + "
                                "Module.attn.v_proj.Linear.forward.0")
    assert "compared as the concatenation of q_proj + k_proj + v_proj's output.0 along dim -1" in out.notes


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_combined_statistics_match_numpy_on_the_concatenated_arrays(tmp_path: Path, task: str) -> None:
    _, rows = _rows(tmp_path, task)
    by = {(r.entry_name, r.arg_path): r for r in rows}
    weight = by[("Module.attn.qkv_proj.Linear.forward.0", "parameters.weight")].b
    whole = np.concatenate([WQ, WK, WV]).astype(np.float64)
    assert weight.shape == (H + 2 * KV, D)
    assert (weight.max, weight.min) == (whole.max(), whole.min())
    assert weight.mean == pytest.approx(whole.mean(), rel=1e-12)
    assert weight.norm == pytest.approx(np.linalg.norm(whole), rel=1e-12)
    grad_in = by[("Module.attn.qkv_proj.Linear.backward.0", "output.0")]
    parts_gx = [gy.astype(np.float64) @ w.astype(np.float64) for gy, w in
                zip(np.split(GY, np.cumsum([H, KV]), -1), (WQ, WK, WV), strict=True)]
    assert grad_in.b.mean == pytest.approx(sum(g.astype(np.float32).astype(np.float64) for g in parts_gx).mean(),
                                           rel=1e-6)
    assert grad_in.b.max is None
    assert "compared as the sum of q_proj + k_proj + v_proj's output.0" in grad_in.notes[0]
    if task == "tensor":
        for r in rows:
            assert r.compared_by in ("tensor", "none"), (r.entry_name, r.arg_path, r.reasons)
        metrics = dict(by[("Module.attn.qkv_proj.Linear.forward.0", "output.0")].metrics)
        assert metrics["Cosine"] == pytest.approx(1.0, abs=1e-12) and metrics["MaxAbsErr"] == 0.0
        # the summed input gradient: float32 of the float64 sum on both sides
        assert dict(grad_in.metrics)["MaxAbsErr"] <= 1e-6


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_wrong_part_fails_at_the_fused_row(tmp_path: Path, task: str) -> None:
    result, rows = _rows(tmp_path, task, wv=WV + 5.0)
    weight = next(r for r in rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"
                  and r.arg_path == "parameters.weight")
    assert weight.verdict == "fail"
    assert result.verdict == "fail"
    a = np.concatenate([WQ, WK, WV]).astype(np.float64)
    b = np.concatenate([WQ, WK, (WV + 5.0).astype(np.float32)]).astype(np.float64)
    metrics = dict(weight.metrics)
    if task == "tensor":
        assert metrics["MaxAbsErr"] == pytest.approx(np.abs(a - b).max(), rel=1e-12)
    else:  # the statistics' lower bound on MaxAbsErr (docs/design.md §2), from numpy's statistics of both arrays
        bound = max(abs(a.max() - b.max()), abs(a.min() - b.min()), abs(a.mean() - b.mean()),
                    abs(np.linalg.norm(a) - np.linalg.norm(b)) / math.sqrt(a.size))
        assert next(v for k, v in metrics.items() if "lower bound" in k) == pytest.approx(bound, rel=1e-9)


def test_the_parts_may_be_on_the_target_side(tmp_path: Path) -> None:
    result, rows = _rows(tmp_path, "tensor", fused_on_a=False)
    assert {r.match_class for r in rows} == {"matched"} and result.verdict == "pass"
    out = next(r for r in rows if r.entry_name_b == "Module.attn.qkv_proj.Linear.forward.0"
               and r.arg_path == "output.0")
    assert out.entry_name.startswith("Module.attn.q_proj.Linear.forward.0 + ")
    assert out.a.shape == (2, 3, H + 2 * KV) and dict(out.metrics)["MaxAbsErr"] == 0.0


def test_a_missing_part_file_falls_back_to_statistics_naming_it(tmp_path: Path) -> None:
    fused = _fused_dump(tmp_path / "f", "tensor")
    parts = _parts_dump(tmp_path / "p", "tensor")
    (parts / "step0" / "rank" / "dump_tensor_data" / "Module.attn.v_proj.Linear.forward.0.w.npy").unlink()
    result = compare(load_dump(fused), load_dump(parts), CompareOptions(mapping=_mapping(tmp_path)))
    weight = next(r for r in result.units[0].rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"
                  and r.arg_path == "parameters.weight")
    assert weight.compared_by == "statistics" and weight.verdict == "warning"
    assert "Module.attn.v_proj.Linear.forward.0.w.npy" in weight.reasons[0]


def test_a_combined_leaf_is_a_tensor_leaf() -> None:
    leaf = combine_concatenated([_leaf(WQ), _leaf(WK)], 0)
    assert isinstance(leaf, TensorLeaf) and isinstance(leaf, CombinedLeaf) and leaf.numel == (H + KV) * D


def test_dimensions_that_do_not_fit_the_shapes_are_a_shape_mismatch(tmp_path: Path) -> None:
    (tmp_path / "apis.yaml").write_text(
        "- fused: Module.attn.qkv_proj.Linear\n"
        "  parts: [Module.attn.q_proj.Linear, Module.attn.k_proj.Linear, Module.attn.v_proj.Linear]\n"
        "  dim: 1\n  parameters_dim: 0\n")
    mapping = NameMapping(apis=load_api_mapping(tmp_path / "apis.yaml"))
    result = compare(load_dump(_fused_dump(tmp_path / "f", "statistics")),
                     load_dump(_parts_dump(tmp_path / "p", "statistics")), CompareOptions(mapping=mapping))
    out = next(r for r in result.units[0].rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"
               and r.arg_path == "output.0")
    # outputs [2, 3, 8] against [2, 3, 4], [2, 3, 2], [2, 3, 2]: neither dim 1 nor dim 0 fits (dim -1 would)
    assert out.match_class == "shape_mismatch" and out.verdict == "fail"
    assert out.reasons[0].startswith("the fused [2, 3, 8] is not the concatenation of q_proj + k_proj + v_proj's "
                                     "[2, 3, 4], [2, 3, 2], [2, 3, 2] along dim 1 or 0")
    weight = next(r for r in result.units[0].rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"
                  and r.arg_path == "parameters.weight")
    assert weight.match_class == "matched" and weight.verdict == "pass"


def test_a_part_without_its_backward_leaves_the_backward_rows_one_sided(tmp_path: Path) -> None:
    parts = _parts_dump(tmp_path / "p", "statistics")
    doc_file = parts / "step0" / "rank" / "dump.json"
    doc = json.loads(doc_file.read_text())
    del doc["data"]["Module.attn.v_proj.Linear.backward.0"]
    doc_file.write_text(json.dumps(doc))
    result = compare(load_dump(_fused_dump(tmp_path / "f", "statistics")), load_dump(parts),
                     CompareOptions(mapping=_mapping(tmp_path)))
    rows = result.units[0].rows
    backward = [r for r in rows if "proj.Linear.backward" in r.entry_name]
    assert [(r.entry_name, r.match_class) for r in backward] == [
        ("Module.attn.qkv_proj.Linear.backward.0", "only_in_a")] * 2 + [
        ("Module.attn.q_proj.Linear.backward.0", "only_in_b")] * 2 + [
        ("Module.attn.k_proj.Linear.backward.0", "only_in_b")] * 2
    assert all(r.reasons == ("present in A only",) or r.reasons == ("present in B only",) for r in backward)
    assert backward[0].notes[0].startswith("not recorded by some of its parts: not combined")
    # the forward call still pairs as a whole
    assert {r.match_class for r in rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"} == {"matched"}


def test_parts_calling_other_apis_inside_pair_as_usual_and_say_why(tmp_path: Path) -> None:
    """v_proj calls Functional.matmul inside where the fused call calls Functional.linear: the inner calls are not
    paired through the record, and the fused call's rows say why."""
    fused = _fused_dump(tmp_path / "fused", "statistics")
    w = _Writer(tmp_path / "parts", "statistics")
    w.relu(0, X)
    apis = ("Functional.linear.0", "Functional.linear.1", "Functional.matmul.0")
    for name, weight, gy, api in zip(("q_proj", "k_proj", "v_proj"), (WQ, WK, WV), np.split(GY, np.cumsum([H, KV]), -1),
                                     apis, strict=True):
        w.linear(f"Module.attn.{name}.Linear", weight, X, gy, api)
    w.relu(1, X)
    result = compare(load_dump(fused), load_dump(w.write()), CompareOptions(mapping=_mapping(tmp_path)))
    rows = list(result.units[0].rows)
    why = ("the API calls inside the fused call and its parts differ, so they are paired as usual: "
           "Functional.linear against Functional.linear; Functional.linear; Functional.matmul")
    module_rows = [r for r in rows if r.entry_name == "Module.attn.qkv_proj.Linear.forward.0"]
    assert module_rows and all(why in r.notes for r in module_rows)
    # the module's own rows still pair through the record: the weight against the three parts' concatenated
    weight = next(r for r in module_rows if r.arg_path == "parameters.weight")
    assert weight.match_class == "matched" and weight.b.shape == (H + 2 * KV, D)
