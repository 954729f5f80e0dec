"""RowPairs (msprobe_cmp/comparator/matching.py): the rows of a pairing as columns.  The rows of two entries read from
files whose argument paths are the same are (columns, row) pairs classified column-wise; they must give the classes,
notes and leaves the per-row pairing gives, and the consumers that read the columns (can_compare_as_columns, the row
table's sides) what they read from the leaves."""

from __future__ import annotations

import numpy as np
import pytest

from msprobe_cmp.comparator.matching import RowPair, RowPairs, RowPairsBuilder, match_entries
from msprobe_cmp.comparator.outcomes import can_compare_as_columns
from msprobe_cmp.comparator.rowtable import ABSENT_LEAF, RowTableBuilder
from msprobe_cmp.dump.schema import Entry, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.serde import entries_from_json

COUNTS = {"nan_count": 0, "pos_inf_count": 0, "neg_inf_count": 0}


def _t(dtype: str = "Float32", shape: tuple[int, ...] = (2, 3), mx: float | None = 1.5, **kw: object) -> dict:
    stats = {} if mx is None else {"Max": mx, "Min": -0.25, "Mean": 0.125, "Norm": 2.0}
    return {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape), **stats, **kw}


def _fwd(inputs: list, output: list, kwargs: dict | None = None) -> dict:
    return {"input_args": inputs, "input_kwargs": kwargs or {}, "output": output}


def _read(data: dict) -> tuple[Entry, ...]:
    return entries_from_json(data, "dump.json")


def _rebuilt(entries: tuple[Entry, ...]) -> list[Entry]:
    """The same entries built through the constructor (their leaves objects: the per-row pairing)."""
    return [Entry(e.name, e.fields) for e in entries]


A = {
    "F.same.0.forward": _fwd([_t(), _t("Float16")], [_t()]),
    # output written before the inputs: the rows come inputs first
    "F.order.0.forward": {"output": [_t(mx=9.0)], "input_args": [_t(mx=1.0)], "input_kwargs": {}},
    "F.mixed.0.forward": _fwd([_t(), _t("Int32")], [_t(shape=(2, 3))]),
    "F.squeeze.0.forward": _fwd([_t(shape=(2, 512))], [_t(shape=())]),
    "F.empty.0.forward": _fwd([_t(shape=(0, 3), mx=None)], [_t(mx=None)]),
    "F.value.0.forward": _fwd([_t(), {"type": "int", "value": 3}], [_t()]),
    "F.onlya.0.forward": _fwd([_t()], [_t()]),
    "F.paths.0.forward": _fwd([_t()], [_t()], {"dim": _t()}),
}
B = {
    "F.same.0.forward": _fwd([_t(), _t("Float16")], [_t(mx=2.5)]),
    "F.order.0.forward": {"output": [_t(mx=9.5)], "input_args": [_t(mx=1.5)], "input_kwargs": {}},
    "F.mixed.0.forward": _fwd([_t("Float16"), _t()], [_t(shape=(3, 2))]),
    "F.squeeze.0.forward": _fwd([_t(shape=(2, 512, 1, 1))], [_t(shape=(1,))]),
    "F.empty.0.forward": _fwd([_t(shape=(0, 3), mx=None)], [_t(mx=None)]),
    "F.value.0.forward": _fwd([_t(), {"type": "int", "value": 4}], [_t()]),
    "F.paths.0.forward": _fwd([_t()], [_t()], {"axis": _t()}),
}


def _as_tuples(rows) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in rows]


def test_column_rows_equal_the_per_row_pairing() -> None:
    a, b = _read(A), _read(B)
    rows = match_entries(a, b)
    assert isinstance(rows, RowPairs)
    assert _as_tuples(rows) == _as_tuples(match_entries(_rebuilt(a), _rebuilt(b)))
    got = [(r.entry_name.split(".")[1], r.arg_path, r.match_class) for r in rows]
    assert got == [
        ("same", "input.0", "matched"), ("same", "input.1", "matched"), ("same", "output.0", "matched"),
        ("order", "input.0", "matched"), ("order", "output.0", "matched"),
        ("mixed", "input.0", "matched"), ("mixed", "input.1", "dtype_mismatch"), ("mixed", "output.0", "shape_mismatch"),
        ("squeeze", "input.0", "matched"), ("squeeze", "output.0", "matched"),
        # (0, 3) holds no element: nothing to capture; (2, 3) without statistics, checksum or file: not captured
        ("empty", "input.0", "matched"), ("empty", "output.0", "not_captured"),
        ("value", "input.0", "matched"), ("value", "input.1", "matched"), ("value", "output.0", "matched"),
        ("onlya", "input.0", "only_in_a"), ("onlya", "output.0", "only_in_a"),
        ("paths", "input.0", "matched"), ("paths", "kwargs.dim", "only_in_a"), ("paths", "output.0", "matched"),
        ("paths", "kwargs.axis", "only_in_b"),
    ]
    notes = {(r.entry_name.split(".")[1], r.arg_path): r.notes for r in rows}
    assert notes[("mixed", "input.0")] == ("dtypes differ but are compatible (A Float32, B Float16): compared in "
                                           "float64",)
    assert notes[("mixed", "input.1")] == ("dtype differs: A Int32, B Float32",)
    assert notes[("squeeze", "input.0")] == ("shapes differ only in size-1 dimensions (A [2, 512], B [2, 512, 1, 1]): "
                                             "compared by value",)
    assert notes[("same", "input.0")] == ()
    # the order entry's rows: A's input is the file's row 4 (F.same holds rows 0-2, the order entry's output row 3)
    order = [i for i, r in enumerate(rows) if r.entry_name == "F.order.0.forward"]
    assert rows.leaf_row[order].tolist() == [[4, 4], [3, 3]]
    assert [(r.leaf_a.max, r.leaf_b.max) for r in (rows[i] for i in order)] == [(1.0, 1.5), (9.0, 9.5)]


def test_same_path_rows_of_files_are_column_rows_without_objects() -> None:
    a, b = _read({k: A[k] for k in ("F.same.0.forward", "F.mixed.0.forward")}), _read(
        {k: B[k] for k in ("F.same.0.forward", "F.mixed.0.forward")})
    rows = match_entries(a, b)
    assert rows.objects == ({}, {})  # no row made as a RowPair, no leaf as an object
    assert len(rows.columns) == 2 and rows.holder.tolist() == [[0, 1]] * 6
    assert rows.leaf_row.tolist() == [[k, k] for k in range(6)]
    assert rows.in_a.all() and rows.in_b.all() and not rows.transpose_b.any()
    assert rows.side_kinds(0).tolist() == [3] * 6  # tensor
    leaf = rows[5].leaf_b
    assert type(leaf) is TensorLeaf and leaf.shape == (3, 2) and leaf.columns == (rows.columns[1], 5)


def test_row_pairs_of_rows_give_the_same_rows_back() -> None:
    leaf = TensorLeaf("torch.Tensor", "torch.float32", (2,), 1.0, 0.0, 0.5, 1.2)
    value = ValueLeaf("int", 3)
    given = [
        RowPair("E.0.forward", "input.0", "matched", leaf, leaf, True, True, ("n",), "E.1.forward", "input.2",
                "table", True),
        RowPair("E.0.forward", "input.1", "only_in_a", value, None, True, False),
        RowPair("E.0.forward", "input.2", "not_captured", None, leaf, True, True, ("no data recorded in A (null "
                                                                                  "leaf)",)),
        RowPair("E.0.forward", "input.3", "only_in_b", None, value, False, True),
    ]
    pairs = RowPairs.of(given)
    assert len(pairs) == 4 and list(pairs) == given and pairs[-1] == given[3] and pairs[1:3] == tuple(given[1:3])
    assert pairs[0].leaf_a is leaf and pairs[3].leaf_b is value  # the objects given
    assert pairs.side_kinds(0).tolist() == [3, 2, 1, 0] and pairs.side_kinds(1).tolist() == [3, 0, 3, 2]
    assert pairs.holder[:, 0].tolist() == [0, -1, -1, -1] and pairs.leaf_row[0].tolist() == [0, 0]
    with pytest.raises(IndexError):
        pairs[4]
    changed = pairs.with_classes({1: ("not_captured", ("declared", "n"))})
    assert changed[1].match_class == "not_captured" and changed[1].notes == ("declared", "n")
    assert pairs[1].match_class == "only_in_a" and changed[0] == given[0]  # the original unchanged


def test_extend_rows_copies_rows_of_another_pairing() -> None:
    rows = match_entries(_read(A), _read(B))
    builder = RowPairsBuilder()
    builder.append(RowPair("X.0.forward", "input.0", "only_in_a", None, None, True, False))
    builder.extend_rows(rows, 3, 16)
    builder.extend_rows(rows, 16, 16)  # nothing
    out = builder.finish()
    assert _as_tuples(out) == [("X.0.forward", "input.0", "only_in_a", None, None, True, False, (), None, None, None,
                                False), *_as_tuples(rows[3:16])]


class _Special(TensorLeaf):
    """A tensor leaf of another class (as a fused call's combined leaf is)."""

    __slots__ = ()


def test_can_compare_as_columns_reads_the_counts_columns() -> None:
    t = "mindspore.Tensor"
    plain = TensorLeaf(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0)
    counted = TensorLeaf(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0, extra=tuple(COUNTS.items()))
    one_nan = TensorLeaf(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0,
                         extra=(("nan_count", 1), ("pos_inf_count", 0), ("neg_inf_count", 0)))
    invalid = TensorLeaf(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0,
                         extra=(("nan_count", -1), ("pos_inf_count", 0), ("neg_inf_count", 0)))
    other_extra = TensorLeaf(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0, extra=(("device", "cpu"),))
    special = _Special(t, "Float32", (4,), 1.0, 0.0, 0.5, 1.0)
    cases = [  # (A, B, may go to the columns), by the rule of can_compare_as_columns' docstring
        (plain, plain, True),              # no extra fields
        (counted, counted, True),          # equal valid counts
        (counted, one_nan, False),         # counts differ
        (counted, plain, False),           # counts on one side only
        (invalid, plain, False),           # no valid counts, and A's count fields are invalid
        (other_extra, plain, True),        # extra fields without counts: both None, none invalid
        (special, plain, False),           # not a plain TensorLeaf
        (plain, special, False),
    ]
    pairs = RowPairs.of([RowPair("E.0.forward", f"input.{k}", "matched", la, lb, True, True)
                         for k, (la, lb, _) in enumerate(cases)])
    got = can_compare_as_columns(pairs, np.arange(len(cases)))
    assert got.tolist() == [want for _, _, want in cases]
    assert can_compare_as_columns(pairs, np.array([6, 1, 2])).tolist() == [False, True, False]


def test_can_compare_as_columns_on_rows_of_files() -> None:
    bad = {"nan_count": 2, "pos_inf_count": 0, "neg_inf_count": 0}
    a = _read({"F.f.0.forward": _fwd([_t(**COUNTS), _t(**COUNTS), _t()], [_t(**COUNTS)])})
    b = _read({"F.f.0.forward": _fwd([_t(**COUNTS), _t(**bad), _t()], [_t()])})
    rows = match_entries(a, b)
    assert rows.objects == ({}, {})
    assert can_compare_as_columns(rows, np.arange(4)).tolist() == [True, False, True, False]


def test_set_side_columns_from_pairs_equals_set_sides_from_leaves() -> None:
    rows = match_entries(_read(A), _read(B))
    by_leaves, by_columns = RowTableBuilder(len(rows)), RowTableBuilder(len(rows))
    for s in (0, 1):
        there = rows.in_a if s == 0 else rows.in_b
        by_leaves.set_sides(s, [r[3 + s] if ok else ABSENT_LEAF for r, ok in zip(rows, there.tolist(), strict=True)])
        kinds = rows.side_kinds(s)
        by_columns.set_side_columns(s, kinds, rows.objects[s], rows.side_groups(s, np.flatnonzero(kinds == 3)))
    x, y = by_leaves.table, by_columns.table
    assert list(x.strings) == list(y.strings) and list(x.shapes) == list(y.shapes)
    for name in ("side_kind", "side_dtype", "side_shape", "side_md5", "side_data_name", "side_value",
                 "side_stats_defined"):
        assert np.array_equal(x.columns()[name], y.columns()[name]), name
    assert np.array_equal(x.side_stats, y.side_stats, equal_nan=True)
    # by hand: the value row of F.value (A 3, B 4) and an absent side (F.onlya's rows have no B)
    k = next(i for i, r in enumerate(rows) if r.arg_path == "input.1" and r.entry_name == "F.value.0.forward")
    assert [y.strings[c] for c in y.side_value[k].tolist()] == ["3", "4"]
    only_a = [i for i, r in enumerate(rows) if r.entry_name == "F.onlya.0.forward"]
    assert y.side_kind[only_a].tolist() == [[3, 0]] * 2
    with pytest.raises(ValueError):
        rows.side_groups(1, np.array(only_a))  # only_in_a rows: no B leaf


def _pt(shape: tuple[int, ...], v: float = 1.0) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": v, "Min": v, "Mean": v,
            "Norm": v}


def test_backward_entries_of_files_pair_as_the_per_row_pairing() -> None:
    # linear's backward as msprobe 1.2.2 lists it (bias, input, weight.T) against one gradient per forward input:
    # the outputs do not agree, so they pair by forward input (_backward_rows); a backward entry whose outputs agree
    # pairs as column rows
    f = {"input_args": [_pt((8, 16)), _pt((4, 16)), _pt((4,))], "input_kwargs": {}, "output": [_pt((8, 4))]}
    a = _read({"Functional.linear.0.forward": f,
               "Functional.linear.0.backward": {"input": [_pt((8, 4))],
                                                "output": [_pt((4,), 1.0), _pt((8, 16), 2.0), _pt((16, 4), 3.0)]},
               "Functional.relu.0.backward": {"input": [_pt((8, 4), 4.0)], "output": [_pt((8, 4), 5.0)]}})
    b = _read({"Functional.linear.0.forward": f,
               "Functional.linear.0.backward": {"input": [_pt((8, 4))],
                                                "output": [_pt((8, 16), 2.0), _pt((4, 16), 3.0), _pt((4,), 1.0)]},
               "Functional.relu.0.backward": {"input": [_pt((8, 4), 4.5)], "output": [_pt((8, 4), 5.5)]}})
    rows = match_entries(a, b)
    assert _as_tuples(rows) == _as_tuples(match_entries(_rebuilt(a), _rebuilt(b)))
    got = [(r.entry_name.split(".")[1], r.arg_path, r.match_class, r.arg_path_b, r.transpose_b) for r in rows[4:]]
    assert got == [("linear", "input.0", "matched", None, False),
                   ("linear", "output.0", "matched", "output.2", False),  # bias
                   ("linear", "output.1", "matched", "output.0", False),  # input
                   ("linear", "output.2", "matched", "output.1", True),   # weight, compared transposed
                   ("relu", "input.0", "matched", None, False), ("relu", "output.0", "matched", None, False)]
    # the re-paired rows are objects, relu's backward rows (and the forward's) column rows
    assert sorted(rows.objects[0]) == [4, 5, 6, 7]
    assert rows.leaf_row[8:].tolist() == [[8, 8], [9, 9]]


def test_output_kinds_read_from_the_columns_or_the_leaves() -> None:
    from msprobe_cmp.comparator.matching import _output_kinds

    tensors, mixed = _read({
        "F.x.0.backward": {"input": [_pt((2,))], "output": [_pt((3, 4)), _pt(())]},
        "F.y.0.backward": {"input": [_pt((2,))], "output": [_pt((3, 4)), None, {"type": "int", "value": 1}]},
    })
    assert _output_kinds(tensors) == [("output.0", TensorLeaf, (3, 4)), ("output.1", TensorLeaf, ())]
    assert _output_kinds(mixed) == [("output.0", TensorLeaf, (3, 4)), ("output.1", type(None), None),
                                    ("output.2", ValueLeaf, None)]
    for entry in (tensors, mixed):
        assert _output_kinds(entry) == _output_kinds(Entry(entry.name, entry.fields))


def _write_unit(root, data: dict):  # type: ignore[no-untyped-def]
    import json

    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    doc = {"task": "statistics", "level": "L1", "framework": "mindspore", "dump_data_dir": None, "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    return root


def _s(dtype: str, shape: tuple[int, ...], mx: float) -> dict:
    return {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": -1.0, "Mean": 0.0,
            "Norm": 4.0}


def test_failing_statistics_rows_of_two_dtype_pairs_and_three_notes_are_judged_as_row_by_row(tmp_path) -> None:
    # The statistics columns (compare_units' columnar path) and compare_row must give every row the same verdict and
    # reasons, whatever the rows' dtype pairs (their thresholds) and notes: here two dtype pairs (Float32/Float32,
    # Float16/Float32) and three notes ((), compatible dtypes, size-1 dimensions), failing rows of each
    from msprobe_cmp.comparator import CompareOptions
    from msprobe_cmp.comparator.outcomes import compare_row
    from msprobe_cmp.comparator.units import compare_units
    from msprobe_cmp.dump import load_dump

    a = {"F.a.0.forward": _fwd([_s("Float32", (4,), 1.0), _s("Float16", (4,), 1.0)], [_s("Float32", (4,), 1.0)]),
         "F.b.0.forward": _fwd([_s("Float32", (4,), 1.0)], [_s("Float32", (2, 2), 1.0)])}
    b = {"F.a.0.forward": _fwd([_s("Float32", (4,), 1.0), _s("Float32", (4,), 3.0)], [_s("Float32", (4,), 9.0)]),
         "F.b.0.forward": _fwd([_s("Float32", (4,), 1.0)], [_s("Float32", (2, 2, 1), 5.0)])}
    ua = load_dump(_write_unit(tmp_path / "a", a)).units[0]
    ub = load_dump(_write_unit(tmp_path / "b", b)).units[0]
    rules = CompareOptions().rules
    got = compare_units(ua, ub, "statistics", rules).rows
    pairs = match_entries(ua.entries, ub.entries)
    assert [r.notes for r in pairs] == [(), ("dtypes differ but are compatible (A Float16, B Float32): compared in "
                                             "float64",), (), (),
                                        ("shapes differ only in size-1 dimensions (A [2, 2], B [2, 2, 1]): compared "
                                         "by value",)]
    want = [compare_row(pair, ua, ub, "statistics", rules) for pair in pairs]
    assert [r.compared_by for r in got] == ["statistics"] * 5
    assert [(r.verdict, r.reasons) for r in got] == [(w.rule.verdict, w.rule.reasons) for w in want]
    # Max 1 against 3 and 9 and 5 (4 elements, bound |dMax| >= 2 > 1): three fails; the equal rows pass
    assert [r.verdict for r in got] == ["pass", "fail", "fail", "pass", "fail"]
