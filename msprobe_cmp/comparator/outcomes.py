"""The outcome of one row: how its two sides were compared (tensor files, statistics, checksums or values), its
metrics, its verdict under the rules, its notes, and whether the sides differ.

Roles as in :mod:`msprobe_cmp.comparator.compare`: A is the target, B the baseline; relative errors divide by B.
The only reads are tensor files, through :meth:`msprobe_cmp.dump.reader.RankDump.load_tensor`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from msprobe_cmp.comparator.dtypes import compute_relative_floor, normalize_dtype
from msprobe_cmp.comparator.fused import CombinedLeaf, load_combined
from msprobe_cmp.comparator.matching import RowPair, RowPairs, is_uncaptured
from msprobe_cmp.comparator.metrics import (
    TENSOR_METRIC_KEYS,
    StatDiff,
    TensorMetrics,
    compute_max_abs_err_lower_bound,
    compute_stat_diffs,
    compute_tensor_metrics,
    reduction_slack,
    statistics_differ,
)
from msprobe_cmp.comparator.notes import Note, code_of, note
from msprobe_cmp.comparator.result import LOWER_BOUND_NAME, TENSOR_METRIC_NAMES, ComparedBy, Mode
from msprobe_cmp.comparator.rules import (
    STAT_WARNING_EPSILON,
    RuleOutcome,
    Rules,
    Thresholds,
    _is_number,
    compare_values,
    compute_argument_verdict,
    compute_md5_verdict,
    compute_statistics_verdict,
    compute_tensor_verdict,
    compute_value_verdict,
    is_placement_argument,
    is_reduction_overflow,
)
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import RankDump
from msprobe_cmp.dump.schema import NONFINITE_COUNT_KEYS, Leaf, TensorLeaf, ValueLeaf
from msprobe_cmp.errors import MsprobeCmpError

#: Statistic labels as msprobe spells them in its "<S> diff" columns.
_STAT_LABELS = {"max": "Max", "min": "Min", "mean": "Mean", "norm": "L2norm"}

_TENSOR_NAME_OF = dict(zip(TENSOR_METRIC_KEYS, TENSOR_METRIC_NAMES, strict=True))


@lru_cache(maxsize=1024)
def _relative_floor_of(dtype_a: str, dtype_b: str) -> float:
    """:func:`compute_relative_floor` of two stated dtypes (any spelling), computed once per pair of spellings."""
    return compute_relative_floor(normalize_dtype(dtype_a), normalize_dtype(dtype_b))


class Outcome(NamedTuple):
    """How one row was compared: how, its metrics (``(name, value)``, names from
    :data:`~msprobe_cmp.comparator.rowtable.METRIC_NAMES`), the rules' verdict and reasons, notes, and whether the two
    sides differ (None: not compared)."""

    compared_by: ComparedBy
    metrics: tuple[tuple[str, float | None], ...]
    rule: RuleOutcome
    notes: tuple[str, ...]
    differs: bool | None


def _stat_pairs(diffs: tuple[StatDiff, ...]) -> list[tuple[str, float | None]]:
    out: list[tuple[str, float | None]] = [(f"{_STAT_LABELS[d.stat]} diff", d.diff) for d in diffs]
    out += [(f"{_STAT_LABELS[d.stat]} relative diff", d.relative) for d in diffs]
    return out


def _stat_notes(diffs: tuple[StatDiff, ...], numel: int) -> list[Note]:
    notes = [note("nonfinite_stat_agrees", f"{d.stat} is {d.a!r} on both sides (not compared)", stat=d.stat,
                  value=d.a) for d in diffs if d.nonfinite_agree is True]
    notes += [note("reduction_overflow", f"{d.stat} is A {d.a!r}, B {d.b!r}: one recorder's float32 reduction "
                   "overflowed (Max and Min agree), not compared", stat=d.stat, a=d.a, b=d.b)
              for d in diffs if is_reduction_overflow(d, diffs, numel)]
    return notes


def _stat_differs(diffs: tuple[StatDiff, ...], numel: int) -> bool:
    """Whether the statistics show that the tensors differ: Max or Min differ at all, Mean or Norm beyond what a
    float32 reduction explains (:func:`~msprobe_cmp.comparator.metrics.statistics_differ`), or a non-finite
    statistic disagrees other than by a float32 overflow
    (:func:`~msprobe_cmp.comparator.rules.is_reduction_overflow`)."""
    if any(d.nonfinite_agree is False and not is_reduction_overflow(d, diffs, numel) for d in diffs):
        return True
    if len(diffs) == 4 and all(d.diff is not None and d.a is not None and d.b is not None for d in diffs):
        mx, mn, me, no = diffs
        return statistics_differ((mx.a, mn.a, me.a, no.a), (mx.b, mn.b, me.b, no.b), numel)  # type: ignore[arg-type]
    return any(d.diff is not None and d.diff != 0.0 for d in diffs)


def _compare_statistics(
    la: TensorLeaf, lb: TensorLeaf, diffs: tuple[StatDiff, ...], t: Thresholds, notes: list[str]
) -> Outcome:
    if all(d.a is None and d.b is None for d in diffs):
        rule = RuleOutcome("skip", ("no statistics recorded on either side",))
        return Outcome("none", tuple(_stat_pairs(diffs)), rule, tuple(notes), None)
    one_sided = [d.stat for d in diffs if (d.a is None) != (d.b is None)]
    if one_sided:
        notes.append(note("stats_one_side", f"statistics recorded on one side only: {', '.join(one_sided)}",
                          stats=one_sided))
    bound = compute_max_abs_err_lower_bound(diffs, la.numel)
    metrics = (*_stat_pairs(diffs), (LOWER_BOUND_NAME, bound))
    rule = compute_statistics_verdict(diffs, la.numel, t)
    counts_a, counts_b = la.nonfinite_counts, lb.nonfinite_counts
    for side, lf in (("A", la), ("B", lb)):
        if lf.has_invalid_nonfinite_counts:
            notes.append(note("invalid_nonfinite_counts", f"{side}'s NaN/Inf counts are not valid counts (type or "
                              "range): ignored", side=side))
    if counts_a is not None and counts_b is not None and counts_a != counts_b:
        # The recorder's NaN/Inf counts see what Max/Min/Mean/Norm can hide (one more NaN among many).
        labels = ("NaN", "+Inf", "-Inf")
        differ = ", ".join(f"{k} A {x} B {y}" for k, x, y in zip(labels, counts_a, counts_b, strict=True) if x != y)
        rule = RuleOutcome("fail", (*rule.reasons, f"non-finite counts differ: {differ}"))
        return Outcome("statistics", metrics, rule, (*notes, *_stat_notes(diffs, la.numel)), True)
    return Outcome("statistics", metrics, rule, (*notes, *_stat_notes(diffs, la.numel)),
                    _stat_differs(diffs, la.numel))


def _load_pair(
    unit_a: RankDump, unit_b: RankDump, la: TensorLeaf, lb: TensorLeaf
) -> tuple[np.ndarray, np.ndarray] | str:
    """Both sides' tensors, or the reason neither pair can be compared: every side's error, so that a file missing on
    both sides is named on both (one fix, not two reruns)."""
    arrays: list[np.ndarray] = []
    errors: list[str] = []
    for unit, leaf in ((unit_a, la), (unit_b, lb)):
        try:
            arrays.append(load_combined(unit, leaf) if isinstance(leaf, CombinedLeaf) else unit.load_tensor(leaf))
        except MsprobeCmpError as exc:
            errors.append(str(exc))
    if errors:
        return "; ".join(errors)
    return arrays[0], arrays[1]


def _file_dtype_notes(arrays: tuple[np.ndarray, np.ndarray], leaves: tuple[TensorLeaf, TensorLeaf]) -> list[Note]:
    """Notes for tensor files whose dtype is not the one dump.json states (values are decoded as stored)."""
    notes = []
    for side, arr, leaf in (("A", arrays[0], leaves[0]), ("B", arrays[1], leaves[1])):
        stored, stated = normalize_dtype(str(arr.dtype)), normalize_dtype(leaf.dtype)
        if stored == stated:
            continue
        if stated == "bfloat16" and stored == "float32":
            notes.append(note("bf16_stored_as_f32", f"{side}'s bfloat16 tensor is stored as float32 (msprobe's "
                              "convention)", side=side))
        else:
            notes.append(note("file_dtype_differs", f"{side}'s tensor file holds {arr.dtype}, dump.json says "
                              f"{leaf.dtype}", side=side, stored=str(arr.dtype), stated=leaf.dtype))
    return notes


class StatisticsColumns(NamedTuple):
    """The statistics-mode outcome of ``m`` rows at once (:func:`compare_statistics_columns`).

    Attributes:
        metrics: float64 [m, 9]: Max/Min/Mean/L2norm diff (A - B, value units), their relative diffs
            (|A - B| / max(|B|, floor), dimensionless), then the MaxAbsErr lower bound (value units).
        passing: bool [m]: the rows the statistics rules pass (:func:`compute_statistics_verdict`: the bound within
            ``max_abs_err_fail_above`` and no statistic warned of); the others need that function's reasons.
        differs: bool [m]: the statistics show that the two tensors differ (:func:`statistics_differ`).
    """

    metrics: np.ndarray
    passing: np.ndarray
    differs: np.ndarray


@lru_cache(maxsize=4096)
def _slack_of(numel: int) -> float:
    return reduction_slack(numel)


def compare_statistics_columns(
    a: np.ndarray, b: np.ndarray, numel: np.ndarray, floor: np.ndarray, fail_above: np.ndarray, suspect: np.ndarray,
    warning_ratio: np.ndarray,
) -> StatisticsColumns:
    """The statistics-mode metrics of many rows whose eight statistics are finite, vectorised.

    The same numbers as :func:`compute_stat_diffs` and :func:`compute_max_abs_err_lower_bound` row by row (the same
    IEEE operations: subtraction, absolute value, division, a correctly rounded square root, maximum).

    Args:
        a, b: float64 [m, 4]: ``(max, min, mean, norm)`` of each side, all finite.
        numel: int64 [m]: elements per tensor (> 0).
        floor: float64 [m]: the relative-difference floor of each row (:func:`thresholds_and_floor`).
        fail_above, suspect, warning_ratio: float64 [m]: each row's ``max_abs_err_fail_above``,
            ``max_abs_err_suspect_above`` and ``stat_warning_ratio``.

    Returns:
        :class:`StatisticsColumns`.  Which rows pass is decided here by the rules of :func:`compute_statistics_verdict`
        (the same comparisons on the same numbers); a row that does not pass gets its verdict and reasons from that
        function, one row at a time.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a difference of two huge statistics is ±Inf, as in Python
        d = a - b
        m = np.abs(d)
        bound = np.maximum(np.maximum(m[:, 0], m[:, 1]),
                           np.maximum(m[:, 2], m[:, 3] / np.sqrt(numel.astype(np.float64))))
        relative = m / np.maximum(np.abs(b), floor[:, None])
        metrics = np.concatenate([d, relative, bound[:, None]], axis=1)
        ratio = m / (np.maximum(np.abs(a), np.abs(b)) + STAT_WARNING_EPSILON)
        warned = ((m > suspect[:, None]) & (ratio > warning_ratio[:, None]) & np.isfinite(ratio)).any(axis=1)
        passing = (bound <= fail_above) & ~warned
        sizes, size_of_row = np.unique(numel, return_inverse=True)  # a few distinct sizes: each slack once
        slack = np.array([_slack_of(int(k)) for k in sizes.tolist()], dtype=np.float64)[size_of_row.reshape(-1)]
        scale = np.maximum(np.maximum(np.abs(a[:, 0]), np.abs(a[:, 1])), np.maximum(np.abs(b[:, 0]), np.abs(b[:, 1])))
        differs = ((d[:, 0] != 0.0) | (d[:, 1] != 0.0) | (m[:, 2] > slack * scale)
                   | (m[:, 3] > slack * np.maximum(np.abs(a[:, 3]), np.abs(b[:, 3]))))
    return StatisticsColumns(metrics, passing, differs)


def can_compare_as_columns(pairs: RowPairs, index: np.ndarray) -> np.ndarray:
    """Which rows of ``index`` (int [m]: matched rows of ``pairs`` with a tensor leaf on both sides) may go to the
    statistics columns in statistics mode, bool [m]: two plain :class:`TensorLeaf` leaves (no subclass) whose NaN/Inf
    counts are both absent, or valid and equal, where either leaf has extra fields (the columnar path,
    ``units._compare_columnar``, then checks that both sides hold elements and eight finite statistics).  Read from
    the leaves' columns (extra codes, counts and their validity).  Every other row is compared by
    :func:`compare_row`."""
    m = len(index)
    ok = np.ones(m, dtype=bool)
    if not m:
        return ok
    sides = []
    for s in (0, 1):
        objects = pairs.objects[s]
        other = [i for i, leaf in objects.items() if type(leaf) is not TensorLeaf]
        if other:
            ok &= ~np.isin(index, np.asarray(other, dtype=np.int64))
        has_extra = np.empty(m, dtype=bool)
        invalid = np.empty(m, dtype=bool)
        counted = np.empty(m, dtype=bool)
        counts = np.empty((m, 3), dtype=np.int64)
        for cols, positions, rows in pairs.side_groups(s, index):
            extra = cols.code_array("extra_code")[rows]
            codes, inverse = np.unique(extra, return_inverse=True)
            inverse = inverse.reshape(-1)
            items = [cols.extras[c] for c in codes.tolist()]
            has_extra[positions] = np.fromiter(map(bool, items), bool, len(items))[inverse]
            keyed = np.fromiter((any(k in NONFINITE_COUNT_KEYS for k, _ in e) for e in items), bool, len(items))
            all_counts, valid = cols.counts_array()
            counted[positions] = valid[rows]
            counts[positions] = all_counts[rows]
            # TensorLeaf.has_invalid_nonfinite_counts: extra fields that hold a count key, yet no valid counts
            invalid[positions] = (extra != 0) & ~valid[rows] & keyed[inverse]
        sides.append((has_extra, invalid, counted, counts))
    (extra_a, invalid_a, counted_a, counts_a), (extra_b, invalid_b, counted_b, counts_b) = sides
    same_counts = (counted_a == counted_b) & np.where(counted_a, (counts_a == counts_b).all(axis=1),
                                                      ~(invalid_a | invalid_b))
    return ok & (~(extra_a | extra_b) | same_counts)


def statistics_outcome_of_failing(
    pair: RowPair, la: TensorLeaf, lb: TensorLeaf, metrics: tuple[tuple[str, float | None], ...], differs: bool,
    t: Thresholds, floor: float,
) -> Outcome:
    """The outcome of a row :func:`compare_statistics_columns` did not pass outright: its metrics and ``differs`` from
    the columns, its verdict and reasons from :func:`compute_statistics_verdict`."""
    rule = compute_statistics_verdict(compute_stat_diffs(la.stats, lb.stats, floor), la.numel, t)
    return Outcome("statistics", metrics, rule, pair.notes, differs)


_PASS = RuleOutcome("pass")


def thresholds_and_floor(pair: RowPair, la: TensorLeaf, lb: TensorLeaf, rules: Rules) -> tuple[Thresholds, float]:
    """A tensor row's thresholds (the rules' override for its name and dtypes, else their default) and the floor its
    relative differences divide by at least (the thresholds' ``relative_floor``, else that of the two dtypes)."""
    t = rules.thresholds_for(pair.name, (la.dtype, lb.dtype)) if rules.overrides else rules.default
    return t, t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)


def _compare_tensors(
    pair: RowPair, la: TensorLeaf, lb: TensorLeaf, unit_a: RankDump, unit_b: RankDump, mode: Mode, rules: Rules
) -> Outcome:
    t, floor = thresholds_and_floor(pair, la, lb, rules)
    diffs = compute_stat_diffs(la.stats, lb.stats, floor)
    notes = list(pair.notes)
    if la.numel == 0:
        # Same number of elements on both sides (classify_pair: the same shape, or one that differs only in size-1
        # dimensions), so both are empty: equal, whatever the dtype.
        notes.append(note("empty_both", "empty tensor (0 elements) on both sides: equal"))
        return Outcome("none", tuple(_stat_pairs(diffs)), RuleOutcome("pass"), tuple(notes), False)
    if mode == "tensor":
        if la.data_name is None or lb.data_name is None:
            missing = " and ".join(s for s, leaf in (("A", la), ("B", lb)) if leaf.data_name is None)
            return _fallback_to_statistics(la, lb, diffs, t, notes, f"no tensor file in {missing}")
        loaded = _load_pair(unit_a, unit_b, la, lb)
        if isinstance(loaded, str):
            return _fallback_to_statistics(la, lb, diffs, t, notes, f"tensor file could not be read ({loaded})")
        notes.extend(_file_dtype_notes(loaded, (la, lb)))
        arr_a, arr_b = loaded
        if pair.transpose_b and arr_b.ndim == 2:
            arr_b = arr_b.T
        if arr_b.shape != arr_a.shape and arr_b.size == arr_a.size:
            # Shapes that differ only in size-1 dimensions (classify_pair): the same elements in the same C order.
            # B takes A's shape (a view of a C-contiguous file) so that every element-wise step pairs them.
            arr_b = arr_b.reshape(arr_a.shape)
        return _tensor_outcome(arr_a, arr_b, floor, t, diffs, notes, (la, lb))
    if mode == "md5":
        if la.md5 is not None and lb.md5 is not None:  # has_checksum on both sides
            rule = compute_md5_verdict(la.md5, lb.md5)
            return Outcome("md5", tuple(_stat_pairs(diffs)), rule, tuple(notes), rule.verdict != "pass")
        without = [side for side, leaf in (("A", la), ("B", lb)) if not has_checksum(leaf)]
        where = "on either side" if len(without) == 2 else f"in {without[0]}"
        return _fallback_to_statistics(la, lb, diffs, t, notes, f"no checksum {where}")
    return _compare_statistics(la, lb, diffs, t, notes)


def has_checksum(leaf: TensorLeaf) -> bool:
    """Whether ``leaf`` carries a checksum to compare (the reader makes an empty or blank md5 None)."""
    return leaf.md5 is not None


def _fallback_to_statistics(
    la: TensorLeaf, lb: TensorLeaf, diffs: tuple[StatDiff, ...], t: Thresholds, notes: list[str], why: str
) -> Outcome:
    """A row the mode in force could not compare (``why``: no tensor file, an unreadable one, no checksum), judged by
    its statistics instead.  Statistics that agree are weaker evidence than the values or checksums the user asked
    for, so a row they would pass is a warning whose reason is ``why`` (msprobe leaves such rows unjudged,
    Accuracy None, docs/design.md §3); a failing row (or one warned of) keeps its verdict and adds ``why`` to its
    reasons; a row with
    no statistics on either side is skipped with ``why`` as a note.  When one side recorded no statistics, the rules
    see nothing to fault, so a row they would pass is instead a warning that nothing at all was compared (``why``,
    and which side recorded none)."""
    text = f"{why}: compared statistics instead"
    out = _compare_statistics(la, lb, diffs, t, list(notes))
    verdict = out.rule.verdict
    if verdict == "skip":
        return out._replace(notes=(*out.notes, note("fallback_to_statistics", text, why=why)))
    bare = [side for side, leaf in (("A", la), ("B", lb)) if all(v is None for v in leaf.stats)]
    if bare and verdict == "pass":  # statistics on one side only: nothing at all was compared
        return out._replace(rule=RuleOutcome(
            "warning", (f"{why}, and {bare[0]} recorded no statistics: nothing was compared",)))
    if verdict == "pass":
        return out._replace(rule=RuleOutcome(
            "warning", (f"{text} (they pass, but the values themselves were not compared)",)))
    return out._replace(rule=RuleOutcome(verdict, (*out.rule.reasons, text)))


def _tensor_outcome(
    arr_a: np.ndarray,
    arr_b: np.ndarray,
    floor: float,
    t: Thresholds,
    diffs: tuple[StatDiff, ...],
    notes: list[str],
    leaves: tuple[TensorLeaf, TensorLeaf],
) -> Outcome:
    if arr_a.size != arr_b.size:
        rule = RuleOutcome("fail", (f"tensor files differ in size: A {arr_a.size}, B {arr_b.size}",))
        return Outcome("tensor", tuple(_stat_pairs(diffs)), rule, tuple(notes), True)
    complex_values = np.iscomplexobj(arr_a) or np.iscomplexobj(arr_b)
    if complex_values:
        # Complex values: compare the real and imaginary parts as one real vector (the cosine is then
        # Re<a, b> / (|a| |b|), the absolute errors those of the parts).
        arr_a = np.concatenate([np.real(arr_a).ravel(), np.imag(arr_a).ravel()])
        arr_b = np.concatenate([np.real(arr_b).ravel(), np.imag(arr_b).ravel()])
        notes.append(note("complex_values", "complex values: real and imaginary parts compared as one real vector"))
    try:
        tm: TensorMetrics = compute_tensor_metrics(arr_a, arr_b, floor)
    except TypeError as exc:
        return _fallback_to_statistics(
            leaves[0], leaves[1], diffs, t, notes, f"values not comparable as real numbers ({exc})"
        )
    rule = compute_tensor_verdict(tm, t)
    differs = tm.differs
    if arr_a.dtype.kind in "iub" and arr_b.dtype.kind in "iub" and not np.array_equal(arr_a, arr_b):
        differs = True
        if tm.max_abs_err == 0.0:  # integers beyond 2**53 that float64 cannot tell apart
            rule = RuleOutcome("fail", ("integer values differ beyond float64 precision (|values| > 2**53)",))
    # (a complex tensor's recorded Max/Min are not those of the real vector compared)
    contradiction = None if complex_values else statistics_contradict_files(diffs, tm)
    if contradiction is not None:  # a corrupt or mixed-up dump: never a plain pass
        rule = RuleOutcome("warning" if rule.verdict == "pass" else rule.verdict, (*rule.reasons, contradiction))
    named = tuple((_TENSOR_NAME_OF[k], v) for k, v in tm.as_pairs())
    return Outcome("tensor", (*named, *_stat_pairs(diffs)), rule, tuple(notes) + tm.notes, differs)


#: Slack of :func:`statistics_contradict_files`, relative to the larger recorded extreme: the bound is exact for the
#: same values, so this only absorbs float64 rounding of the difference itself.
_CONTRADICTION_SLACK = 1e-6


def statistics_contradict_files(diffs: tuple[StatDiff, ...], tm: TensorMetrics) -> str | None:
    """Why dump.json's Max/Min cannot belong to the tensor files just compared, or None when they can.

    For any two arrays of one shape, ``|max(a) - max(b)| <= max|a - b|`` and the same for the minimum (each extreme
    moves by at most the largest element-wise change), so a recorded ``|ΔMax|`` or ``|ΔMin|`` above the files'
    MaxAbsErr (beyond a relative slack of :data:`_CONTRADICTION_SLACK`) means a statistic or a file is corrupt, or
    the files come from another run.  Max and Min are exact in any dtype (no accumulation), unlike Mean and Norm, so
    only they are checked; only when every element was compared (no non-finite positions left out).
    """
    mae = tm.max_abs_err
    if mae is None or not math.isfinite(mae) or tm.compared != tm.numel:
        return None
    for d in diffs:
        if d.stat not in ("max", "min") or d.diff is None or d.a is None or d.b is None:
            continue
        gap = abs(d.diff)
        if math.isfinite(gap) and gap > mae + _CONTRADICTION_SLACK * max(abs(d.a), abs(d.b)):
            label = _STAT_LABELS[d.stat]
            return (f"dump.json's statistics contradict the tensor files: |Δ{label}| = {gap:.6g} exceeds the files' "
                    f"MaxAbsErr {mae:.6g}, which bounds it for the same tensors (a statistic or a file is corrupt, "
                    "or the files come from another run)")
    return None


def argument_name(entry_name: str, arg_path: str) -> str | None:
    """How a row's argument is named in an "argument differs" reason, or None when the row is not a call argument.

    A call argument is a leaf under ``input.`` or ``kwargs.`` of an entry that is not a backward call or a
    ``parameters_grad`` entry (a backward entry's ``input`` holds gradients, not arguments).  A keyword argument is
    named by its path after ``kwargs.`` (``"eps"``, ``"normalized_shape.0"``), a positional one by its argument path
    (``"input.4"``: a bare index would say nothing).
    """
    head, _, rest = arg_path.partition(".")
    if head not in ("input", "kwargs") or not rest:
        return None
    parsed = parse_name(entry_name)
    if parsed.direction == "backward" or parsed.kind == "parameters_grad":
        return None
    return rest if head == "kwargs" else arg_path


def _value_types_note(va: ValueLeaf, vb: ValueLeaf) -> Note:
    return note("value_types_differ", f"value types differ: A {va.type}, B {vb.type}", a=va.type, b=vb.type)


def _compare_values(pair: RowPair, va: ValueLeaf, vb: ValueLeaf, rules: Rules) -> Outcome:
    """A row of two non-tensor values (rules: :mod:`msprobe_cmp.comparator.rules`, module docstring).

    One dtype or one device in two spellings, and float arguments equal to float32 rounding, pass
    (:func:`~msprobe_cmp.comparator.rules.compare_values`); ``inplace`` and device differences pass with a note; a call
    argument that differs gets ``rules.argument_differs`` (a warning by default) with an "argument differs" reason; a
    float output is compared like a 0-d tensor (the MaxAbsErr rules); any other value output must be equal.
    """
    notes = list(pair.notes)
    x, y = va.value, vb.value
    argument = argument_name(pair.entry_name, pair.arg_path)
    last = pair.name.rsplit(".", 1)[-1]
    if argument is None and _is_number(x) and _is_number(y) and (isinstance(x, float) or isinstance(y, float)):
        if va.type != vb.type:
            notes.append(_value_types_note(va, vb))
        # A float output is compared like a 0-d tensor (only the MaxAbsErr rules can apply).
        t = rules.thresholds_for(pair.name, (va.type, vb.type))
        floor = t.relative_floor or compute_relative_floor("float64")
        tm = compute_tensor_metrics(np.array([x], dtype=np.float64), np.array([y], dtype=np.float64), floor)
        rule = compute_tensor_verdict(tm, t)
        kept = ("max_abs_err", "max_relative_err")
        metrics = tuple((_TENSOR_NAME_OF[k], v) for k, v in tm.as_pairs() if k in kept)
        return Outcome("value", metrics, rule, tuple(notes), tm.differs)
    match = compare_values(va.type, x, vb.type, y)
    if va.type != vb.type and not (match.same and match.kind in ("dtype", "device")):
        notes.append(_value_types_note(va, vb))
    if match.same:
        if match.note is not None:
            notes.append(match.note)
        return Outcome("value", (), _PASS, tuple(notes), False)
    if is_placement_argument(last):
        notes.append(note("where_written_differs", f"{last} differs (A {x!r}, B {y!r}): where the result is written, "
                          "not its value", argument=last, a=x, b=y))
        return Outcome("value", (), _PASS, tuple(notes), False)
    if match.kind == "device":
        shown = argument or last
        notes.append(note("device_differs", f"device differs: {shown} A {x!r}, B {y!r} (where the result is placed, "
                          "not its value)", argument=shown, a=x, b=y))
        return Outcome("value", (), _PASS, tuple(notes), False)
    if argument is not None:
        rule = compute_argument_verdict(argument, x, y, rules.argument_differs)
        return Outcome("value", (), rule, tuple(notes), True)
    rule = compute_value_verdict(x, y)
    return Outcome("value", (), rule, tuple(notes), rule.verdict != "pass")


def _has_data(leaf: Leaf) -> bool:
    """A tensor leaf with elements and something recorded about them (statistics, checksum or a file)."""
    return isinstance(leaf, TensorLeaf) and leaf.numel > 0 and not is_uncaptured(leaf)


def compare_row(pair: RowPair, unit_a: RankDump, unit_b: RankDump, mode: Mode, rules: Rules) -> Outcome:
    """The outcome of one row of any kind (one-sided, mismatched, values, tensors in any mode): the one per-row path."""
    la, lb = pair.leaf_a, pair.leaf_b
    cls = pair.match_class
    if (cls == "not_captured" and pair.in_a and pair.in_b and (la is None) != (lb is None)
            and _has_data(la if lb is None else lb)):
        # One side recorded null where the other holds data: often a gradient that did not flow (a detached
        # tensor, a frozen layer), sometimes a capture gap. Flagged, and counted against the matched share.
        missing = "A" if la is None else "B"
        other = "B" if missing == "A" else "A"
        if parse_name(pair.entry_name).kind == "parameters_grad":
            # a parameter that got no gradient on one side does not train there: a divergence, not a gap
            why = f"the parameter got no gradient in {missing} but one in {other}: it does not train in {missing}"
            return Outcome("none", (), RuleOutcome("fail", (why, *pair.notes)), (), True)
        why = f"{missing} recorded null where {other} has a tensor: a gradient that did not flow there, or a " \
              "value its recorder could not capture"
        return Outcome("none", (), RuleOutcome("warning", (why, *pair.notes)), (), True)
    if cls in ("only_in_a", "only_in_b", "not_captured"):
        reason = {"only_in_a": "present in A only", "only_in_b": "present in B only"}.get(cls)
        reasons = (reason,) if reason else pair.notes
        # a one-sided row's notes say why it has no partner (a composite's intermediate, a mapping)
        return Outcome("none", (), RuleOutcome("skip", reasons), pair.notes if reason else (), None)
    if cls in ("shape_mismatch", "dtype_mismatch"):
        metrics: tuple[tuple[str, float | None], ...] = ()
        if isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf):
            _, floor = thresholds_and_floor(pair, la, lb, rules)  # as every other tensor row
            metrics = tuple(_stat_pairs(compute_stat_diffs(la.stats, lb.stats, floor)))
        return Outcome("none", metrics, RuleOutcome("fail", pair.notes), (), None)
    if la is None and lb is None:  # the reason first, how the row was paired after it
        null_first = sorted(pair.notes, key=lambda n: code_of(n) != "null_both")
        return Outcome("none", (), RuleOutcome("skip", tuple(null_first)), (), False)
    if isinstance(la, ValueLeaf) and isinstance(lb, ValueLeaf):
        return _compare_values(pair, la, lb, rules)
    assert isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf)  # guaranteed by classify_pair
    return _compare_tensors(pair, la, lb, unit_a, unit_b, mode, rules)


def judge_zero_gradient(pair: RowPair, out: Outcome) -> Outcome:
    """A parameter gradient (a ``parameters_grad`` row) that is zero everywhere on one side only fails, however small
    the other side's: that parameter does not train there (a detached tensor, a device copy that cut the graph).
    Every other row's outcome is returned as it is."""
    la, lb = pair.leaf_a, pair.leaf_b
    if (out.rule.verdict == "fail" or type(la) is not TensorLeaf or type(lb) is not TensorLeaf
            or "parameters_grad" not in pair.entry_name or parse_name(pair.entry_name).kind != "parameters_grad"):
        return out
    zero = [side for side, leaf in (("A", la), ("B", lb)) if _all_zero(leaf)]
    if len(zero) != 1:
        return out
    other = "B" if zero[0] == "A" else "A"
    why = f"the parameter's gradient is all zero in {zero[0]} but not in {other}: it does not train in {zero[0]}"
    return out._replace(rule=RuleOutcome("fail", (why, *out.rule.reasons)), differs=True)


def _all_zero(leaf: TensorLeaf) -> bool:
    """A tensor with elements whose recorded Max, Min and Norm are all 0 (every element is zero)."""
    return leaf.numel > 0 and leaf.max == 0.0 and leaf.min == 0.0 and leaf.norm == 0.0
