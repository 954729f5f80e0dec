"""The comparator's fast paths give what its general paths give: the finite-statistics outcome against the
per-statistic records (``compute_stat_diffs`` + ``compute_statistics_verdict``), the same-paths row pairing
against the keyed pairing, each on values drawn widely (hypothesis) and on hand-picked edge cases."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe_cmp.comparator.compare import _compare_statistics, _finite_statistics_outcome, _relative_floor_of
from msprobe_cmp.comparator.matching import RowPair, classify_pair, match_entries
from msprobe_cmp.comparator.metrics import compute_max_abs_err_lower_bound, compute_stat_diffs
from msprobe_cmp.comparator.rules import (
    Thresholds,
    compute_finite_statistics_verdict,
    compute_statistics_verdict,
)
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


@settings(max_examples=400, deadline=None)
@given(st.lists(near, min_size=8, max_size=8), st.sampled_from([(4, 8), (1,), (), (3, 0)]),
       st.sampled_from(["Float32", "Float16", "BFloat16"]), st.booleans(),
       st.sampled_from([Thresholds(), Thresholds(max_abs_err_fail_above=0.0, relative_floor=1e-3),
                        Thresholds(max_abs_err_suspect_above=0.0, stat_warning_ratio=0.0)]))
def test_finite_statistics_outcome_equals_the_general_path(values, shape, dtype, counts, t):
    extra = COUNTS if counts else ()
    la = TensorLeaf("mindspore.Tensor", dtype, shape, *values[:4], extra=extra)
    lb = TensorLeaf("mindspore.Tensor", "Float32", shape, *values[4:], extra=extra)
    floor = t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)
    fast = _finite_statistics_outcome(_pair(la, lb), la, lb, t, floor)
    if fast is None:
        # declined only for an empty tensor, or when the sum of the eight statistics (its non-finite test)
        # overflows; never for statistics below 1e300 in magnitude
        assert la.numel == 0 or (not math.isfinite(sum(values)) and max(abs(v) for v in values) >= 1e300)
        return
    slow = _general(la, lb, t)
    assert (fast.compared_by, fast.rule, fast.notes, fast.differs) == (
        slow.compared_by, slow.rule, slow.notes, slow.differs)
    assert [k for k, _ in fast.metrics] == [k for k, _ in slow.metrics]
    assert _same(tuple(v for _, v in fast.metrics), tuple(v for _, v in slow.metrics))


def test_finite_statistics_outcome_declines_what_it_does_not_handle():
    t = Thresholds()
    base = TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.2, extra=COUNTS)
    others = [
        TensorLeaf("mindspore.Tensor", "Float32", (2,), float("nan"), 0.0, 0.5, 1.2, extra=COUNTS),
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, float("-inf"), 0.5, 1.2, extra=COUNTS),
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, None, 1.2, extra=COUNTS),
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1, 0.0, 0.5, 1.2, extra=COUNTS),  # an int statistic
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.2,
                   extra=(("nan_count", 1), ("pos_inf_count", 0), ("neg_inf_count", 0))),
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.2,
                   extra=(("nan_count", -1), ("pos_inf_count", 0), ("neg_inf_count", 0))),
        TensorLeaf("mindspore.Tensor", "Float32", (2,), 1e308, 1e308, 1e308, 1.2, extra=COUNTS),  # the sum overflows
    ]
    for other in others:
        assert _finite_statistics_outcome(_pair(base, other), base, other, t, 1e-7) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(near, min_size=8, max_size=8), st.integers(1, 10**6))
def test_finite_statistics_verdict_equals_compute_statistics_verdict(values, numel):
    a, b = tuple(values[:4]), tuple(values[4:])
    diffs = compute_stat_diffs(a, b)
    if any(d.diff is None for d in diffs):  # a difference overflowed: not the fast path's case
        return
    bound = compute_max_abs_err_lower_bound(diffs, numel)
    assert bound is not None
    for t in (Thresholds(), Thresholds(max_abs_err_suspect_above=0.0, stat_warning_ratio=0.0)):
        expect = compute_statistics_verdict(diffs, numel, t)
        got = compute_finite_statistics_verdict(a, b, tuple(d.diff for d in diffs), bound, t)  # type: ignore[arg-type]
        assert got == expect


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
