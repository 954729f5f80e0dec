"""Matching: every row of both sides in exactly one class, execution order kept."""

from __future__ import annotations

from msprobe_cmp.comparator.matching import MATCH_CLASSES, match_entries
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
    counts = {c: sum(r.match_class == c for r in rows) for c in MATCH_CLASSES}
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


# ------------------------------------------------------------------ shapes that differ only in size-1 dimensions
# (issue 15: a port flattens a pooled map to [2, 512] where the original keeps [2, 512, 1, 1]; a loss is 0-d in one
# framework and [1] in the other.  Such rows used to be shape_mismatch failures; they hold the same values in the
# same order, so they are matched and compared by value.)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from msprobe_cmp.comparator.matching import are_shape_equivalent, classify_pair, squeezed_shape  # noqa: E402


@pytest.mark.parametrize(
    ("shape_a", "shape_b", "equivalent"),
    [
        ((2, 512), (2, 512, 1, 1), True),
        ((), (1,), True),
        ((1, 2, 1), (2,), True),
        ((0,), (0, 1), True),
        ((2, 512), (2, 512), False),  # equal shapes: nothing to say
        ((2, 6), (3, 4), False),  # same size, other grouping: a real reshape
        ((0, 3), (0, 5), False),
        ((2, 1), (1, 3), False),
        ((512,), (2, 256), False),
    ],
)
def test_shape_equivalence(shape_a, shape_b, equivalent):
    assert are_shape_equivalent(shape_a, shape_b) is equivalent
    assert are_shape_equivalent(shape_b, shape_a) is equivalent


def test_squeezed_shape():
    assert squeezed_shape([2, 512, 1, 1]) == (2, 512)
    assert squeezed_shape([1]) == squeezed_shape([]) == ()
    assert squeezed_shape((1, 0, 1, 3)) == (0, 3)


def test_shapes_differing_in_size_1_dimensions_are_matched_with_a_note():
    assert classify_pair(t((2, 512)), t((2, 512, 1, 1))) == (
        "matched", ("shapes differ only in size-1 dimensions (A [2, 512], B [2, 512, 1, 1]): compared by value",))
    assert classify_pair(t(()), t((1,))) == (
        "matched", ("shapes differ only in size-1 dimensions (A [], B [1]): compared by value",))
    # a compatible dtype on top: both notes
    cls, notes = classify_pair(t((4,), dtype="Float16"), t((4, 1), dtype="torch.float32"))
    assert cls == "matched" and notes == (
        "shapes differ only in size-1 dimensions (A [4], B [4, 1]): compared by value",
        "dtypes differ but are compatible (A Float16, B torch.float32): compared in float64",
    )
    # an incompatible dtype is still a dtype mismatch
    assert classify_pair(t((4,), dtype="Int32"), t((4, 1), dtype="Float32"))[0] == "dtype_mismatch"
    # a real reshape is still a shape mismatch
    assert classify_pair(t((2, 6)), t((3, 4))) == ("shape_mismatch", ("shape differs: A [2, 6], B [3, 4]",))
    # B recorded as the transpose of A (a linear weight gradient): B's reversed shape [512, 1] is A's up to size 1
    assert classify_pair(t((512,)), t((1, 512)), transpose_b=True)[0] == "matched"
    assert classify_pair(t((2, 3)), t((2, 3)), transpose_b=True)[0] == "shape_mismatch"


def test_match_entries_pairs_shape_equivalent_calls_by_name():
    a = [fwd("Functional.adaptive_avg_pool2d.0.forward", [t((2, 512, 4, 4))], [t((2, 512))])]
    b = [fwd("Functional.adaptive_avg_pool2d.0.forward", [t((2, 512, 4, 4))], [t((2, 512, 1, 1))])]
    rows = match_entries(a, b)
    assert classes(rows) == {"Functional.adaptive_avg_pool2d.0.forward.input.0": "matched",
                             "Functional.adaptive_avg_pool2d.0.forward.output.0": "matched"}
    assert rows[1].notes == (
        "shapes differ only in size-1 dimensions (A [2, 512], B [2, 512, 1, 1]): compared by value",)


def _save_unit(rank_dir, arrays, task="tensor", dtype="Float32"):
    """One unit, an entry Functional.<key>.0.forward per array (output.0 = the array), its file saved in tensor mode."""
    from msprobe_cmp.dump import DumpMeta, DumpWriter

    w = DumpWriter(rank_dir, DumpMeta(task, "L1", "mindspore"))
    for key, arr in arrays.items():
        name = f"Functional.{key}.0.forward"
        a64 = np.asarray(arr, dtype=np.float64)
        data_name = f"{name}.output.0.npy" if task == "tensor" else None
        if data_name is not None:
            w.save_tensor(data_name, np.asarray(arr))
        leaf = TensorLeaf("mindspore.Tensor", dtype, tuple(np.shape(arr)), float(a64.max()), float(a64.min()),
                          float(a64.mean()), float(np.sqrt((a64 * a64).sum())), data_name=data_name)
        w.put(Entry.forward(name, Seq(()), Map(), Seq((leaf,))))
    w.flush()
    return rank_dir


def test_shape_equivalent_tensors_are_compared_by_value(tmp_path):
    from msprobe_cmp.comparator import compare
    from msprobe_cmp.dump import load_dump

    rng = np.random.default_rng(15)
    pooled = rng.standard_normal((2, 512)).astype(np.float32)
    near = (pooled + rng.standard_normal((2, 512)).astype(np.float32) * 1e-4).reshape(2, 512, 1, 1)
    labels = np.arange(6, dtype=np.int32)
    a = _save_unit(tmp_path / "a", {"pool": pooled, "loss": np.float32(0.6931), "ids": labels})
    b = _save_unit(tmp_path / "b", {"pool": near, "loss": np.array([0.6932], np.float32),
                                    "ids": labels.reshape(6, 1)})
    c = compare(load_dump(a), load_dump(b))
    rows = {r.entry_name: r for r in c.units[0].rows}
    pool = rows["Functional.pool.0.forward"]
    # (not "pass": the localisation may warn that an error enters at a call with no inputs; never a shape failure)
    assert (pool.match_class, pool.compared_by) == ("matched", "tensor") and pool.verdict != "fail"
    assert not any("shape" in reason for reason in pool.reasons)
    assert pool.notes[0] == "shapes differ only in size-1 dimensions (A [2, 512], B [2, 512, 1, 1]): compared by value"
    x, y = pooled.astype(np.float64).ravel(), near.astype(np.float64).ravel()
    assert pool.metric("MaxAbsErr") == pytest.approx(float(np.max(np.abs(x - y))), rel=1e-12)
    assert pool.metric("Cosine") == pytest.approx(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)), rel=1e-12)
    loss = rows["Functional.loss.0.forward"]  # 0-d against [1]
    assert (loss.match_class, loss.compared_by) == ("matched", "tensor") and loss.verdict != "fail"
    assert loss.notes[0] == "shapes differ only in size-1 dimensions (A [], B [1]): compared by value"
    assert loss.metric("MaxAbsErr") == pytest.approx(abs(float(np.float32(0.6931)) - float(np.float32(0.6932))))
    ids = rows["Functional.ids.0.forward"]  # equal integers in [6] and [6, 1]: equal, not "differ beyond float64"
    assert (ids.match_class, ids.verdict, ids.differs, ids.reasons) == ("matched", "pass", False, ())
    assert c.verdict == "pass"


def test_shape_equivalent_tensors_in_statistics_mode(tmp_path):
    from msprobe_cmp.comparator import compare
    from msprobe_cmp.dump import load_dump

    x = np.linspace(-2.0, 2.0, 1024, dtype=np.float32).reshape(2, 512)
    a = _save_unit(tmp_path / "a", {"pool": x, "bad": x}, task="statistics")
    b = _save_unit(tmp_path / "b", {"pool": x.reshape(2, 512, 1, 1), "bad": x.reshape(2, 512, 1, 1) + 3.0},
                   task="statistics")
    rows = {r.entry_name: r for r in compare(load_dump(a), load_dump(b)).units[0].rows}
    pool = rows["Functional.pool.0.forward"]
    assert (pool.match_class, pool.compared_by, pool.verdict, pool.differs) == ("matched", "statistics", "pass", False)
    bad = rows["Functional.bad.0.forward"]  # still judged: Max differs by 3 > 1
    assert (bad.match_class, bad.verdict) == ("matched", "fail")
    assert bad.metric("Max diff") == pytest.approx(-3.0)


# ------------------------------------------------------------------ pairing (issue 15): same-named entries written
# in another order pair by name; shapes are kept where an alignment keeps them; an API backward's gradients pair by
# the forward input they belong to (msprobe 1.2.2's PyTorch order); parameters_grad rows pair by name.

from msprobe_cmp.comparator.matching import align_entries  # noqa: E402


def _pt(shape, v=1.0):
    """A PyTorch tensor leaf whose four statistics are ``v``."""
    return TensorLeaf("torch.Tensor", "torch.float32", tuple(shape), v, v, v, v)


def _bwd(name, grads_out, grads_in):
    return Entry.backward(name, Seq(tuple(grads_out)), Seq(tuple(grads_in)))


def _by_key(rows):
    return {(r.entry_name, r.arg_path): r for r in rows}


def test_backward_entries_written_in_another_order_pair_by_name_at_a_s_position():
    # Two recorders write the same backward entries in another order (msprobe 1.2.2 writes a module's backward
    # after the APIs inside it, ours when autograd reaches its inputs); B lists a null gradient A leaves out.
    fwd_a = [fwd("Functional.layer_norm.0.forward", [_pt((2, 4))], [_pt((2, 4))]),
             fwd("Functional.layer_norm.1.forward", [_pt((2, 4))], [_pt((2, 4))])]
    a = fwd_a + [
        _bwd("Functional.layer_norm.1.backward", [_pt((2, 4), 2.0)], [_pt((2, 4), 3.0)]),
        _bwd("Module.head.Head.backward.0", [_pt((2, 4), 3.0)], []),
        _bwd("Functional.layer_norm.0.backward", [_pt((2, 4), 4.0)], [_pt((2, 4), 5.0)]),
    ]
    b = fwd_a + [
        _bwd("Module.head.Head.backward.0", [_pt((2, 4), 3.0)], [None]),
        _bwd("Functional.layer_norm.1.backward", [_pt((2, 4), 2.0)], [_pt((2, 4), 3.0)]),
        _bwd("Functional.layer_norm.0.backward", [_pt((2, 4), 4.0)], [_pt((2, 4), 5.0)]),
    ]
    # The order-keeping alignment alone pairs A's layer_norm.0 with B's layer_norm.1 (equal keys) and leaves
    # A's layer_norm.1 and B's layer_norm.0 alone; pairing by name puts each with its namesake.
    pairs = [(x.name if x else None, y.name if y else None) for x, y in align_entries(a, b)]
    assert pairs == [(e.name, e.name) for e in a]  # every entry with its namesake, in A's order
    rows = match_entries(a, b)
    assert [(r.entry_name, r.arg_path, r.match_class) for r in rows[4:]] == [
        ("Functional.layer_norm.1.backward", "input.0", "matched"),
        ("Functional.layer_norm.1.backward", "output.0", "matched"),
        ("Module.head.Head.backward.0", "input.0", "matched"),
        ("Module.head.Head.backward.0", "output.0", "only_in_b"),  # B's null gradient, absent from A
        ("Functional.layer_norm.0.backward", "input.0", "matched"),
        ("Functional.layer_norm.0.backward", "output.0", "matched"),
    ]
    assert all(r.entry_name_b is None for r in rows)
    assert all(r.leaf_a == r.leaf_b for r in rows if r.match_class == "matched")  # the same values: true pairs


def test_a_shifted_call_index_is_still_aligned_by_order_not_by_name():
    # A made an extra relu call first: its relu.k is B's relu.k-1; the backward follows its forward.
    a = [fwd("Functional.relu.0.forward", [_pt((3,))], [_pt((3,))]),
         fwd("Functional.relu.1.forward", [_pt((5,))], [_pt((5,))]),
         _bwd("Functional.relu.1.backward", [_pt((5,))], [_pt((5,))]),
         _bwd("Functional.relu.0.backward", [_pt((3,))], [_pt((3,))])]
    b = [fwd("Functional.relu.0.forward", [_pt((5,))], [_pt((5,))]),
         _bwd("Functional.relu.0.backward", [_pt((5,))], [_pt((5,))])]
    pairs = [(x.name if x else None, y.name if y else None) for x, y in align_entries(a, b)]
    assert pairs == [
        ("Functional.relu.0.forward", None),
        ("Functional.relu.1.forward", "Functional.relu.0.forward"),
        ("Functional.relu.1.backward", "Functional.relu.0.backward"),
        ("Functional.relu.0.backward", None),
    ]


def test_a_backward_follows_its_renumbered_forward_not_its_namesake():
    # The forward calls were renumbered (A made an extra add first); the backward entries carry the forward
    # index, so A's add.1.backward is B's add.0.backward even though B also has an add.1.backward.  A's backward
    # lacks the gradients w.r.t. inputs (null, as under mindtorch), so the backward keys differ and only the
    # forward pairing tells which B entry is which.
    a = [fwd("Tensor.add.0.forward", [_pt((7,))], [_pt((7,))]),
         fwd("Tensor.add.1.forward", [_pt((2,))], [_pt((2,))]),
         fwd("Tensor.add.2.forward", [_pt((4,))], [_pt((4,))]),
         _bwd("Tensor.add.2.backward", [_pt((4,), 2.0)], [None]),
         _bwd("Tensor.add.1.backward", [_pt((2,), 3.0)], [None])]
    b = [fwd("Tensor.add.0.forward", [_pt((2,))], [_pt((2,))]),
         fwd("Tensor.add.1.forward", [_pt((4,))], [_pt((4,))]),
         _bwd("Tensor.add.1.backward", [_pt((4,), 2.0)], [_pt((4,), 2.0)]),
         _bwd("Tensor.add.0.backward", [_pt((2,), 3.0)], [_pt((2,), 3.0)])]
    pairs = {x.name: y.name for x, y in align_entries(a, b) if x and y}
    assert pairs == {"Tensor.add.1.forward": "Tensor.add.0.forward", "Tensor.add.2.forward": "Tensor.add.1.forward",
                     "Tensor.add.2.backward": "Tensor.add.1.backward", "Tensor.add.1.backward": "Tensor.add.0.backward"}
    grads = [r for r in match_entries(a, b) if r.entry_name.endswith("backward") and r.arg_path == "input.0"]
    assert [(r.match_class, r.leaf_a.max == r.leaf_b.max) for r in grads] == [("matched", True)] * 2


def test_shapes_are_kept_where_a_shape_preserving_pairing_exists():
    # msprobe 1.2.2 lists only the weight gradient of an embedding; ours one gradient per forward input (nulls for
    # the indices and the options).  Written in another order, the two embedding backward entries must pair with
    # their namesakes (the same shapes), not by position into shape mismatches.
    def embedding(k, vocab):
        return fwd(f"Functional.embedding.{k}.forward", [_pt((2, 8)), _pt((vocab, 4)), ValueLeaf("int", 0)],
                   [_pt((2, 8, 4))])

    forwards = [embedding(0, 64), embedding(1, 2)]
    a = forwards + [_bwd("Functional.embedding.0.backward", [_pt((2, 8, 4))], [_pt((64, 4), 6.0)]),
                    _bwd("Functional.embedding.1.backward", [_pt((2, 8, 4))], [_pt((2, 4), 7.0)])]
    b = forwards + [_bwd("Functional.embedding.1.backward", [_pt((2, 8, 4))], [None, _pt((2, 4), 7.0), None]),
                    _bwd("Functional.embedding.0.backward", [_pt((2, 8, 4))], [None, _pt((64, 4), 6.0), None])]
    rows = match_entries(a, b)
    assert not [r for r in rows if r.match_class == "shape_mismatch"]
    for k, value in ((0, 6.0), (1, 7.0)):
        grad = next(r for r in rows if (r.entry_name, r.arg_path, r.in_a) == (f"Functional.embedding.{k}.backward",
                                                                             "output.0", True))
        assert (grad.match_class, grad.arg_path_b, grad.entry_name_b) == ("matched", "output.1", None)
        assert grad.leaf_a.max == grad.leaf_b.max == value
        assert "paired by the forward input" in grad.notes[0]
        assert {(r.arg_path, r.match_class) for r in rows
                if r.entry_name == f"Functional.embedding.{k}.backward" and not r.in_a} == {
            ("output.0", "only_in_b"), ("output.2", "only_in_b")}  # B's nulls


def test_linear_backward_in_msprobe_node_order_pairs_by_input_with_the_weight_transposed():
    # msprobe 1.2.2 (PyTorch, 2-D input) records linear's backward from addmm: (bias, input, weight.T).
    # A square weight (16 x 16) cannot be told from its transpose by shape: the node order decides.
    for out_features in (4, 16):
        f = fwd("Functional.linear.0.forward", [_pt((8, 16)), _pt((out_features, 16)), _pt((out_features,))],
                [_pt((8, out_features))])
        msprobe = _bwd("Functional.linear.0.backward", [_pt((8, out_features))],
                       [_pt((out_features,), 1.0), _pt((8, 16), 2.0), _pt((16, out_features), 3.0)])
        ours = _bwd("Functional.linear.0.backward", [_pt((8, out_features))],
                    [_pt((8, 16), 2.0), _pt((out_features, 16), 3.0), _pt((out_features,), 1.0)])
        rows = _by_key(match_entries([f, msprobe], [f, ours]))
        got = {path: (r.match_class, r.arg_path_b, r.transpose_b, r.leaf_a.max == r.leaf_b.max)
               for (name, path), r in rows.items() if name.endswith("backward")}
        assert got == {"input.0": ("matched", None, False, True),
                       "output.0": ("matched", "output.2", False, True),  # bias
                       "output.1": ("matched", "output.0", False, True),  # input
                       "output.2": ("matched", "output.1", True, True)}, out_features  # weight, compared transposed
        assert any("transpose" in n for n in rows[("Functional.linear.0.backward", "output.2")].notes)
        # and the other way round (ours as A)
        back = _by_key(match_entries([f, ours], [f, msprobe]))
        assert back[("Functional.linear.0.backward", "output.1")].arg_path_b == "output.2"
        assert back[("Functional.linear.0.backward", "output.1")].transpose_b is True


def test_gradients_that_fit_no_forward_input_are_unpaired_not_shape_mismatches():
    # msprobe 1.2.2 on a 3-D linear records the gradient of the last autograd node (a [16, 64] view of the
    # output gradient), which is the gradient of none of linear's inputs.
    f = fwd("Functional.linear.0.forward", [_pt((2, 8, 32)), _pt((64, 32)), _pt((64,))], [_pt((2, 8, 64))])
    msprobe = _bwd("Functional.linear.0.backward", [_pt((2, 8, 64), 5.0)], [_pt((16, 64), 5.0)])
    ours = _bwd("Functional.linear.0.backward", [_pt((2, 8, 64), 5.0)],
                [_pt((2, 8, 32)), _pt((64, 32)), _pt((64,))])
    rows = match_entries([f, msprobe], [f, ours])
    got = [(r.arg_path, r.match_class) for r in rows if r.entry_name.endswith("backward")]
    assert got == [("input.0", "matched"), ("output.0", "only_in_a"),
                   ("output.0", "only_in_b"), ("output.1", "only_in_b"), ("output.2", "only_in_b")]
    assert all("fit none of Functional.linear.0.forward's inputs" in r.notes[-1]
               for r in rows if r.arg_path.startswith("output") and r.entry_name.endswith("backward"))
    # by position every shape agreeing (no forward known), nothing changes: pairs by path
    plain = match_entries([msprobe], [_bwd("Functional.linear.0.backward", [_pt((2, 8, 64))], [_pt((16, 64))])])
    assert [r.match_class for r in plain] == ["matched", "matched"]
    # A's forward call unknown (not recorded): nothing tells why its gradient fits nothing, so by position
    alone = [(r.arg_path, r.match_class) for r in match_entries([msprobe], [f, ours]) if r.entry_name.endswith("rd")
             and "backward" in r.entry_name]
    assert alone == [("input.0", "matched"), ("output.0", "shape_mismatch"), ("output.1", "only_in_b"),
                     ("output.2", "only_in_b")]


def test_parameters_grad_rows_pair_by_name_when_one_side_has_no_backward_entries():
    # A (PyTorch) writes each parameters_grad before its module's backward; B (mindtorch under value_and_grad)
    # writes no module backward, so its parameters_grad entries stand elsewhere in execution order, and one
    # gradient is all zeros there.  Both must pair by name (and so be compared), never be left on one side.
    def forward(path):
        return Entry.forward(f"Module.{path}.forward.0", Seq((_pt((2, 4)),)), Map(), Seq((_pt((2, 4)),)),
                             Map((("weight", _pt((4, 4))),)))

    def grad(path, v):
        return Entry.parameters_grad(f"Module.{path}.parameters_grad", [("weight", Seq((_pt((4, 4), v),)))])

    a = [forward("wpe.Embedding"), grad("wpe.Embedding", 0.5), forward("fc.Linear"), grad("fc.Linear", 0.25),
         _bwd("Module.fc.Linear.backward.0", [_pt((2, 4))], [_pt((2, 4))]),
         _bwd("Module.wpe.Embedding.backward.0", [_pt((2, 4))], [_pt((2, 4))])]
    b = [forward("fc.Linear"), grad("fc.Linear", 0.25), forward("wpe.Embedding"), grad("wpe.Embedding", 0.0)]
    rows = _by_key(match_entries(a, b))
    zero = rows[("Module.wpe.Embedding.parameters_grad", "weight")]
    assert (zero.match_class, zero.leaf_a.max, zero.leaf_b.max, zero.entry_name_b) == ("matched", 0.5, 0.0, None)
    assert rows[("Module.fc.Linear.parameters_grad", "weight")].match_class == "matched"


# --- same argument paths on both sides: pairing by position from the shared paths tuples (Entry.flat) -------------


def _leaf(x: float) -> TensorLeaf:
    return TensorLeaf("torch.Tensor", "torch.float32", (2,), x, x, x, x)


def test_same_paths_with_outputs_first_in_the_file_are_paired_in_causal_order() -> None:
    # output written before the inputs: the rows come inputs first, each A leaf with B's leaf of its path
    def entry(s: float) -> Entry:
        return Entry("Functional.f.0.forward", (("output", Seq((_leaf(s),))),
                                                ("input_args", Seq((_leaf(2 * s), _leaf(3 * s))))))
    for _ in range(2):  # the second time from the kept order of these paths
        rows = match_entries([entry(1.0)], [entry(10.0)])
        assert [(r.arg_path, r.leaf_a.max, r.leaf_b.max, r.match_class) for r in rows] == [
            ("input.0", 2.0, 20.0, "matched"), ("input.1", 3.0, 30.0, "matched"), ("output.0", 1.0, 10.0, "matched")]


def test_same_paths_with_a_repeated_path_pair_the_nth_with_the_nth() -> None:
    # a keyword argument named "a.b" and a nested {"a": {"b": ...}} give the path kwargs.a.b twice
    def entry(s: float) -> Entry:
        kwargs = Map((("a.b", _leaf(s)), ("a", Map((("b", _leaf(2 * s)),)))))
        return Entry("Functional.g.0.forward", (("input_kwargs", kwargs), ("output", Seq((_leaf(3 * s),)))))
    rows = match_entries([entry(1.0)], [entry(10.0)])
    assert [(r.arg_path, r.leaf_a.max, r.leaf_b.max) for r in rows] == [
        ("kwargs.a.b", 1.0, 10.0), ("kwargs.a.b", 2.0, 20.0), ("output.0", 3.0, 30.0)]
