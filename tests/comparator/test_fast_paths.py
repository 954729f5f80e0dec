"""The comparator's column-wise statistics give what its per-row path gives: :func:`compare_statistics_columns`
(with :func:`statistics_outcome_of_failing` for the rows it does not pass outright) against the per-statistic records
(``compute_stat_diffs`` + ``compute_statistics_verdict``); and the same-paths row pairing against the keyed pairing,
each on values drawn widely (hypothesis) and on hand-picked edge cases."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe_cmp.comparator.compare import _compare_statistics, _relative_floor_of
from msprobe_cmp.comparator.matching import RowPair, RowPairs, classify_pair, match_entries
from msprobe_cmp.comparator.metrics import compute_stat_diffs
from msprobe_cmp.comparator.outcomes import (
    can_compare_as_columns,
    compare_statistics_columns,
    statistics_outcome_of_failing,
)
from msprobe_cmp.comparator.result import METRIC_NAMES
from msprobe_cmp.comparator.rowtable import STAT_DIFF_COLUMN
from msprobe_cmp.comparator.rules import Thresholds
from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf, ValueLeaf

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# values around the thresholds (1e-3, 1, ratio 0.5) as well as anywhere
near = st.one_of(finite, st.sampled_from([0.0, -0.0, 1e-3, -1e-3, 1.0, 2.0, 0.5, 1e-10, 5e-324, 1e308, -1e308]),
                 st.floats(-3, 3))
COUNTS = (("nan_count", 0), ("pos_inf_count", 0), ("neg_inf_count", 0))


def _pair(la: TensorLeaf, lb: TensorLeaf) -> RowPair:
    return RowPair("Functional.f.0.forward", "input.0", "matched", la, lb, True, True, ("a note",))


def _general(la: TensorLeaf, lb: TensorLeaf, t: Thresholds):  # type: ignore[no-untyped-def]
    floor = t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)
    return _compare_statistics(la, lb, compute_stat_diffs(la.stats, lb.stats, floor), t, ["a note"])


def _same(x: object, y: object) -> bool:
    """Equal, NaN equal to NaN, and -0.0 told from 0.0 (bit-level sameness of the numbers)."""
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    return x == y


def _columns(la: TensorLeaf, lb: TensorLeaf, t: Thresholds):  # type: ignore[no-untyped-def]
    """The outcome of one row through the columns (None when its statistics are not all finite)."""
    stats = np.array([la.stats, lb.stats], dtype=np.float64)
    if not np.isfinite(stats).all():
        return None
    floor = t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)
    got = compare_statistics_columns(stats[None, 0], stats[None, 1], np.array([la.numel]), np.array([floor]),
                                     np.array([t.max_abs_err_fail_above]), np.array([t.max_abs_err_suspect_above]),
                                     np.array([t.stat_warning_ratio]))
    named = tuple(zip(METRIC_NAMES[STAT_DIFF_COLUMN:], got.metrics[0].tolist(), strict=True))
    out = statistics_outcome_of_failing(_pair(la, lb), la, lb, named, bool(got.differs[0]), t, floor)
    return out, bool(got.passing[0])


@settings(max_examples=400, deadline=None)
@given(st.lists(near, min_size=8, max_size=8), st.sampled_from([(4, 8), (1,), (), (3, 0)]),
       st.sampled_from(["Float32", "Float16", "BFloat16"]), st.booleans(),
       st.sampled_from([Thresholds(), Thresholds(max_abs_err_fail_above=0.0, relative_floor=1e-3),
                        Thresholds(max_abs_err_suspect_above=0.0, stat_warning_ratio=0.0)]))
def test_statistics_columns_equal_the_per_row_path(values, shape, dtype, counts, t):
    extra = COUNTS if counts else ()
    la = TensorLeaf("mindspore.Tensor", dtype, shape, *values[:4], extra=extra)
    lb = TensorLeaf("mindspore.Tensor", "Float32", shape, *values[4:], extra=extra)
    # equal (or no) NaN/Inf counts: a columns candidate
    assert can_compare_as_columns(RowPairs.of([_pair(la, lb)]), np.array([0])).tolist() == [True]
    if la.numel == 0:  # empty: the columns leave it to the per-row path (compare_units)
        return
    columns = _columns(la, lb, t)
    if columns is None:  # a statistic overflowed to ±Inf in hypothesis's draw: the per-row path takes it
        return
    got, passing = columns
    slow = _general(la, lb, t)
    assert (got.compared_by, got.notes, got.differs) == (slow.compared_by, slow.notes, slow.differs)
    assert got.rule == slow.rule
    assert passing == (slow.rule.verdict == "pass")
    assert [k for k, _ in got.metrics] == [k for k, _ in slow.metrics]
    assert _same(tuple(v for _, v in got.metrics), tuple(v for _, v in slow.metrics))


def test_statistics_columns_hand_picked_values():
    """Three rows by hand: identical (pass, not differing); a Max of 1.2 against 0.5 in a 4-element tensor (bound 0.7,
    not above 1: no fail; but |diff| 0.7 > 1e-3 and 0.7 / (1.2 + 1e-10) = 0.58 > the warning ratio 0.5: a warning, so
    not passing); and a Norm of 6 against 2 over 4 elements (bound 4 / sqrt(4) = 2 > 1: a fail)."""
    a = np.array([[1.0, 0.0, 0.5, 1.0], [1.2, 0.0, 0.5, 1.0], [1.0, 0.0, 0.5, 6.0]])
    b = np.array([[1.0, 0.0, 0.5, 1.0], [0.5, 0.0, 0.5, 1.0], [1.0, 0.0, 0.5, 2.0]])
    t = Thresholds()
    got = compare_statistics_columns(a, b, np.array([4, 4, 4]), np.full(3, 1e-7), np.full(3, t.max_abs_err_fail_above),
                                     np.full(3, t.max_abs_err_suspect_above), np.full(3, t.stat_warning_ratio))
    assert got.metrics[:, 0].tolist() == [0.0, 1.2 - 0.5, 0.0]    # Max diff, A - B
    assert got.metrics[:, 3].tolist() == [0.0, 0.0, 4.0]          # L2norm diff
    assert got.metrics[:, 7].tolist() == [0.0, 0.0, 2.0]          # L2norm relative diff |4| / 2
    assert got.metrics[:, 8].tolist() == [0.0, 1.2 - 0.5, 2.0]    # bound: max(|dMax|, |dNorm| / sqrt(4))
    assert got.passing.tolist() == [True, False, False]
    assert got.differs.tolist() == [False, True, True]


def _leaf(v: float, dtype: str = "Float32", shape: tuple[int, ...] = (2, 2)) -> TensorLeaf:
    return TensorLeaf("mindspore.Tensor", dtype, shape, v, v - 1, v / 2, abs(v) * 2)


def _keyed_reference(ea: Entry, eb: Entry) -> list[tuple]:
    """Rows of two same-named entries by hand: A's leaves (outputs last), each with B's leaf of the same path."""
    la = [x for x in ea.leaves() if not x[0].startswith("output")] + [x for x in ea.leaves() if x[0].startswith("output")]
    lb = dict(eb.leaves())
    return [(ea.name, p, *classify_pair(leaf, lb[p]), leaf, lb[p]) for p, leaf in la]


def test_same_paths_pairing_equals_the_keyed_pairing():
    ea = Entry.forward("Functional.f.0.forward", Seq((_leaf(1.0), ValueLeaf("int", 1), None)),
                       Map((("dim", ValueLeaf("int", 0)),)), Seq((_leaf(2.0), Seq((_leaf(3.0),)))))
    eb = Entry.forward("Functional.f.0.forward", Seq((_leaf(1.5, "Float16"), ValueLeaf("int", 2), _leaf(0.0))),
                       Map((("dim", ValueLeaf("int", 0)),)),
                       Seq((_leaf(2.0, shape=(2, 3)), Seq((TensorLeaf("mindspore.Tensor", "Float32", (2, 2)),)))))
    rows = match_entries([ea], [eb])
    got = [(r.entry_name, r.arg_path, r.match_class, r.notes, r.leaf_a, r.leaf_b) for r in rows]
    assert got == _keyed_reference(ea, eb)
    assert [r.match_class for r in rows] == ["matched", "matched", "not_captured", "matched", "shape_mismatch",
                                             "not_captured"]
    assert all((r.in_a, r.in_b, r.entry_name_b, r.arg_path_b, r.mapped_by, r.transpose_b) ==
               (True, True, None, None, None, False) for r in rows)


def test_repeated_paths_still_pair_by_occurrence():
    # a keyword argument named "a.b" and a nested {"a": {"b": ...}}: the same path twice, n-th with n-th
    ea = Entry.forward("Functional.f.0.forward", Seq(()), Map((("a.b", _leaf(1.0)), ("a", Map((("b", _leaf(2.0)),))))),
                       Seq(()))
    eb = Entry.forward("Functional.f.0.forward", Seq(()), Map((("a", Map((("b", _leaf(2.0)),))), ("a.b", _leaf(1.0)))),
                       Seq(()))
    rows = match_entries([ea], [eb])
    assert [(r.arg_path, r.leaf_a.max, r.leaf_b.max) for r in rows] == [("kwargs.a.b", 1.0, 2.0),
                                                                          ("kwargs.a.b", 2.0, 1.0)]
