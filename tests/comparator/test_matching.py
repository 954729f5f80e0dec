"""Matching: every row of both sides in exactly one class, execution order kept."""

from __future__ import annotations

from msprobe_cmp.comparator.matching import MATCH_CLASSES, count_classes, match_entries
from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf, ValueLeaf


def t(shape=(2, 3), dtype="Float32", **kw):
    stats = {"max": 1.0, "min": 0.0, "mean": 0.5, "norm": 1.0}
    stats.update(kw)
    return TensorLeaf("mindspore.Tensor", dtype, tuple(shape), **stats)


def fwd(name, inputs, outputs, kwargs=(), params=None):
    return Entry.forward(name, Seq(tuple(inputs)), Map(tuple(kwargs)), Seq(tuple(outputs)), params)


def classes(rows):
    return {r.name: r.match_class for r in rows}


def test_every_class():
    a = [
        fwd("Functional.relu.0.forward", [t()], [t()]),
        fwd("Functional.add.0.forward", [t((2, 3)), t(dtype="Float16")], [t(dtype="Int32")]),
        fwd("Functional.cat.0.forward", [None, ValueLeaf("int", 1)], [t()], kwargs=(("dim", ValueLeaf("int", 0)),)),
        fwd("Functional.only_a.0.forward", [t()], [t()]),
    ]
    b = [
        fwd("Functional.relu.0.forward", [t()], [t()]),
        fwd("Functional.add.0.forward", [t((3, 2)), t(dtype="torch.float32")], [t(dtype="Int64")]),
        fwd("Functional.cat.0.forward", [t(), t()], [None], kwargs=(("dim", ValueLeaf("int", 0)),)),
        fwd("Functional.only_b.0.forward", [t()], [t()]),
    ]
    rows = match_entries(a, b)
    got = classes(rows)
    assert got["Functional.relu.0.forward.input.0"] == "matched"
    assert got["Functional.add.0.forward.input.0"] == "shape_mismatch"
    assert got["Functional.add.0.forward.input.1"] == "matched"  # fp16 vs fp32: compatible
    add1 = next(r for r in rows if r.name == "Functional.add.0.forward.input.1")
    assert any("compatible" in n for n in add1.notes)
    assert got["Functional.add.0.forward.output.0"] == "matched"  # int32 vs int64: compared by value
    add_out = next(r for r in rows if r.name == "Functional.add.0.forward.output.0")
    assert any("compared by value" in n for n in add_out.notes)
    assert got["Functional.cat.0.forward.input.0"] == "not_captured"  # null leaf in A
    assert got["Functional.cat.0.forward.input.1"] == "dtype_mismatch"  # value vs tensor
    assert got["Functional.cat.0.forward.kwargs.dim"] == "matched"
    assert got["Functional.cat.0.forward.output.0"] == "not_captured"  # null leaf in B only
    assert got["Functional.only_a.0.forward.input.0"] == "only_in_a"
    assert got["Functional.only_b.0.forward.output.0"] == "only_in_b"
    # every row of both sides exactly once
    keys_a = {(e.name, p) for e in a for p, _ in e.leaves()}
    keys_b = {(e.name, p) for e in b for p, _ in e.leaves()}
    assert len(rows) == len(keys_a | keys_b)
    assert {(r.entry_name, r.arg_path) for r in rows} == keys_a | keys_b
    counts = dict(count_classes(rows))
    assert set(counts) == set(MATCH_CLASSES) and sum(counts.values()) == len(rows)


def test_execution_order_and_b_only_after_predecessor():
    # names chosen so that lexicographic order would differ from execution order
    a = [fwd("Tensor.z.0.forward", [t()], []), fwd("Functional.a.0.forward", [t()], [])]
    b = [
        fwd("Mint.first_b.0.forward", [t()], []),
        fwd("Tensor.z.0.forward", [t()], []),
        fwd("Functional.b_only.0.forward", [t()], []),
        fwd("Functional.b_only2.0.forward", [t()], []),
        fwd("Functional.a.0.forward", [t()], []),
    ]
    names = [r.entry_name for r in match_entries(a, b)]
    assert names == [
        "Mint.first_b.0.forward",
        "Tensor.z.0.forward",
        "Functional.b_only.0.forward",
        "Functional.b_only2.0.forward",
        "Functional.a.0.forward",
    ]


def test_null_on_both_sides_is_matched():
    rows = match_entries([fwd("F.x.0.forward", [None], [])], [fwd("F.x.0.forward", [None], [])])
    assert rows[0].match_class == "matched" and "null on both sides" in rows[0].notes[0]


def test_structure_leaf_without_data_is_not_captured():
    bare = TensorLeaf("mindspore.Tensor", "Float32", (2,))
    rows = match_entries([fwd("F.x.0.forward", [bare], [])], [fwd("F.x.0.forward", [t((2,))], [])])
    assert rows[0].match_class == "not_captured"
    empty = TensorLeaf("mindspore.Tensor", "Float32", (0,))
    rows = match_entries([fwd("F.x.0.forward", [empty], [])], [fwd("F.x.0.forward", [empty], [])])
    assert rows[0].match_class == "matched"  # an empty tensor legitimately has no statistics


def test_parameters_grad_paths():
    g = Entry.parameters_grad("Cell.fc.Dense.parameters_grad", [("weight", Seq((t(),))), ("bias", Seq((t((3,)),)))])
    rows = match_entries([g], [g])
    assert [r.arg_path for r in rows] == ["weight", "bias"]
    assert all(r.match_class == "matched" for r in rows)


def _t(v: float) -> TensorLeaf:
    return TensorLeaf("mindspore.Tensor", "Float32", (2,), v, v, v, v)


def _two_layer_entries(w2: float) -> list[Entry]:
    """dump.json order as msprobe writes it: parameters_grad placeholders right after each cell's forward."""
    return [
        Entry.forward("Cell.fc1.Dense.forward.0", Seq((_t(1),)), Map(), Seq((_t(2),)), Map((("weight", _t(1)),))),
        Entry.parameters_grad("Cell.fc1.Dense.parameters_grad", [("weight", Seq((_t(5 * w2),)))]),
        Entry.forward("Cell.fc2.Dense.forward.0", Seq((_t(2),)), Map(), Seq((_t(2 * w2),)), Map((("weight", _t(w2)),))),
        Entry.parameters_grad("Cell.fc2.Dense.parameters_grad", [("weight", Seq((_t(3),)))]),
        Entry.backward("Cell.fc2.Dense.backward.0", Seq((_t(1),)), Seq((_t(w2),))),
        Entry.backward("Cell.fc1.Dense.backward.0", Seq((_t(w2),)), Seq((None,))),
    ]


def test_rows_follow_execution_order_not_file_order():
    rows = match_entries(_two_layer_entries(1.0), _two_layer_entries(1.0))
    names = [f"{r.entry_name}.{r.arg_path}" for r in rows]
    assert names == [
        "Cell.fc1.Dense.forward.0.input.0",
        "Cell.fc1.Dense.forward.0.parameters.weight",  # parameters before the output computed from them
        "Cell.fc1.Dense.forward.0.output.0",
        "Cell.fc2.Dense.forward.0.input.0",
        "Cell.fc2.Dense.forward.0.parameters.weight",
        "Cell.fc2.Dense.forward.0.output.0",
        "Cell.fc2.Dense.parameters_grad.weight",  # filled in backward, just before its cell's backward hook
        "Cell.fc2.Dense.backward.0.input.0",
        "Cell.fc2.Dense.backward.0.output.0",
        "Cell.fc1.Dense.parameters_grad.weight",
        "Cell.fc1.Dense.backward.0.input.0",
        "Cell.fc1.Dense.backward.0.output.0",
    ]


def test_first_difference_is_the_perturbed_weight_not_an_earlier_cells_gradient():
    """A change of fc2's weight must not be reported first at fc1's parameter gradient (written earlier in the file)."""
    rows = match_entries(_two_layer_entries(1.5), _two_layer_entries(1.0))
    first = next(r for r in rows if r.leaf_a != r.leaf_b)
    assert (first.entry_name, first.arg_path) == ("Cell.fc2.Dense.forward.0", "parameters.weight")


def test_parameters_grad_without_backward_entry_goes_last():
    entries = [
        Entry.parameters_grad("Cell.fc1.Dense.parameters_grad", [("weight", Seq((_t(1),)))]),
        Entry.forward("Functional.relu.0.forward", Seq((_t(1),)), Map(), Seq((_t(1),))),
    ]
    rows = match_entries(entries, entries)
    assert [r.entry_name for r in rows] == ["Functional.relu.0.forward"] * 2 + ["Cell.fc1.Dense.parameters_grad"]


def _call(name: str, shape: tuple[int, ...], v: float = 1.0) -> Entry:
    leaf = TensorLeaf("mindspore.Tensor", "Float32", shape, v, v, v, v)
    return Entry.forward(name, Seq((leaf,)), Map(), Seq((leaf,)))


def test_an_extra_call_on_one_side_does_not_shift_every_later_pair():
    # A took a branch B did not: an extra Functional.relu call (shape (3,)) between relu.0 and the old relu.1.
    a = [_call("Functional.relu.0.forward", (2,)), _call("Functional.relu.1.forward", (3,)),
         _call("Functional.relu.2.forward", (4,)), _call("Functional.relu.3.forward", (5,))]
    b = [_call("Functional.relu.0.forward", (2,)), _call("Functional.relu.1.forward", (4,)),
         _call("Functional.relu.2.forward", (5,))]
    rows = match_entries(a, b)
    by_entry: dict[str, set[str]] = {}
    for r in rows:
        by_entry.setdefault(r.entry_name, set()).add(r.match_class)
    assert by_entry == {
        "Functional.relu.0.forward": {"matched"},
        "Functional.relu.1.forward": {"only_in_a"},  # the extra call, not a shape mismatch with B's relu.1
        "Functional.relu.2.forward": {"matched"},  # paired with B's relu.1 (both shape (4,))
        "Functional.relu.3.forward": {"matched"},  # paired with B's relu.2
    }
    shifted = [r for r in rows if r.entry_name == "Functional.relu.2.forward"]
    assert all(r.entry_name_b == "Functional.relu.1.forward" for r in shifted)
    assert "aligned by call order" in shifted[0].notes[0]
    # Exact name matching would have produced 3 shape mismatches; alignment produces none.
    assert not [r for r in rows if r.match_class == "shape_mismatch"]


def test_same_call_with_other_shapes_is_a_shape_mismatch_not_two_unpaired_calls():
    a = [_call("Functional.relu.0.forward", (2,)), _call("Functional.add.0.forward", (8,))]
    b = [_call("Functional.relu.0.forward", (2,)), _call("Functional.add.0.forward", (16,)),
         _call("Functional.mul.0.forward", (16,))]
    rows = match_entries(a, b)
    classes = {(r.entry_name, r.match_class) for r in rows}
    assert ("Functional.add.0.forward", "shape_mismatch") in classes
    assert ("Functional.mul.0.forward", "only_in_b") in classes
    assert all(r.entry_name_b is None for r in rows)


def test_identical_name_sequences_pair_by_name():
    a = [_call("Functional.relu.0.forward", (2,)), _call("Functional.relu.1.forward", (3,))]
    b = [_call("Functional.relu.0.forward", (3,)), _call("Functional.relu.1.forward", (2,))]
    rows = match_entries(a, b)  # same names: pairs by name (two shape mismatches), never re-aligned
    assert {r.match_class for r in rows} == {"shape_mismatch"} and all(r.entry_name_b is None for r in rows)


def _loop(n: int, extra_relu_at: int | None = None, skip_relu_at: int | None = None,
          last_shape: tuple[int, ...] = (4,)) -> list[Entry]:
    """A matmul -> relu -> add loop of ``n`` calls, optionally with one extra or one missing relu call."""
    counts: dict[str, int] = {}
    out: list[Entry] = []

    def add(op: str, shape: tuple[int, ...]) -> None:
        i = counts.get(op, 0)
        counts[op] = i + 1
        out.append(_call(f"Functional.{op}.{i}.forward", shape))

    for k in range(n):
        op = ("matmul", "relu", "add")[k % 3]
        if op == "relu" and k == skip_relu_at:
            continue
        add(op, last_shape if k == n - 1 else (4,))
        if k == extra_relu_at:
            add("relu", (4,))
    return out


def _classes(rows) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.match_class] = counts.get(r.match_class, 0) + 1
    return counts


def test_alignment_of_long_runs_stays_linear_and_right():
    # 6,000 calls, an extra relu near the start and a shape change at the very end: no common prefix or
    # suffix to trim, far beyond difflib's budget -> the linear resync must still find the true pairs.
    a = _loop(6000, extra_relu_at=1, last_shape=(8,))
    b = _loop(6000)
    rows = match_entries(a, b)
    assert _classes(rows) == {"matched": 2 * 5999, "only_in_a": 2, "shape_mismatch": 2}


def test_an_extra_and_a_missing_call_of_the_same_api_do_not_shift_the_calls_between():
    a = _loop(18, extra_relu_at=1, skip_relu_at=16)  # same names and count as b, but shifted in between
    b = _loop(18)
    rows = match_entries(a, b)
    assert _classes(rows) == {"matched": 2 * 17, "only_in_a": 2, "only_in_b": 2}  # 17 true pairs of 18 calls
