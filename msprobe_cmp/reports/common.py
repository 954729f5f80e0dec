"""Helpers shared by the renderers: number formatting, row selection, the metric plotted as "the error".

Nothing here computes a new number: numbers are formatted, and rows of the Comparison are selected
or ordered by the values they already carry (the largest disagreements list each tensor once, however many
names it was recorded under: :func:`rank_disagreements`; a failure whose statistics hold a NaN or ±Inf the other
side's do not is ranked first: :func:`nonfinite_disagreement`), and the rows a tensor or md5 comparison could judge
by their statistics only (:func:`judged_by_statistics`) and the matched rows with nothing to compare
(:func:`matched_not_compared`) are found.  Texts of any length from a row (reasons, notes) are cut for the places
that list rows outside the row table (:func:`cut_text`).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import orjson

from msprobe_cmp.comparator.compare import LOWER_BOUND_NAME, Comparison, ComparisonRow, SideSummary
from msprobe_cmp.comparator.rowtable import (
    ABSENT,
    COMPARED_BY,
    COMPARED_BY_CODE,
    FAIL,
    METRIC_INDEX,
    METRIC_NAMES,
    METRIC_VALUE,
    SIDE_KINDS,
    SKIP,
    TENSOR,
    VERDICTS,
    RowTable,
)

#: How many rows the "largest disagreements" tables list.
TOP_ROWS = 15

#: How many other names of a listed tensor the reports spell out ("also recorded as a, b, c and 2 more").
ALSO_NAMES_SHOWN = 3

#: How many other names of a listed tensor report.html lists in full (behind "and N more"); the rest are counted.
ALSO_NAMES_LISTED = 200

#: How many rows judged by their statistics only (:func:`judged_by_statistics`), and how many matched rows with nothing
#: to compare (:func:`matched_not_compared`), the reports name.
STATISTICS_ONLY_EXAMPLES = 10

#: Why a matched row of a tensor / md5 comparison was judged by its statistics (:func:`judged_by_statistics`): the one
#: wording of report.html, summary.md and the CLI's summary.
STATISTICS_ONLY_WHY = {
    "tensor": "tensor mode could not compare their values: a tensor file missing or unreadable, or values that "
    "are not real numbers; their statistics were compared instead",
    "md5": "md5 mode could not compare their checksums: a checksum missing or blank on either side; their statistics "
    "were compared instead",
}

#: Why a matched row was skipped (:func:`matched_not_compared`); each row's reason says which case it is.
NOTHING_COMPARED_WHY = ("both sides hold the entry, but neither recorded anything to compare: null on both sides, "
                        "or a tensor with no statistics on either side and no tensor file or checksum the mode could "
                        "use; nothing was compared, their verdict is skip")

#: How many characters of a row's reasons (or notes) the reports print outside the row table (:func:`cut_text`).
REASON_CHARS = 500

_SEVERITY = {"fail": 0, "warning": 1, "pass": 2, "skip": 3}
_REL_STATS = ("Max relative diff", "Min relative diff", "Mean relative diff", "L2norm relative diff")


def format_number(value: float | int | None) -> str:
    """Short text of a number: 6 significant digits, more when that would round to 0 or ±1 exactly."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.6g}"
    if float(text) != value and float(text) in (0.0, 1.0, -1.0):
        text = f"{value:.12g}"
    return text


def cut_text(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters followed by "…" when it is longer, else unchanged: a reason or
    note of a row printed outside the row table (a 300 KB "shape differs" reason must not make a 1.5 MB page); the
    row's details and comparison.json keep the whole text."""
    return text if len(text) <= limit else text[:limit] + "…"


def _finite(value: float | None, default: float) -> float:
    return value if value is not None and not math.isnan(value) else default


def _nonfinite_mask(t: RowTable, rows: np.ndarray) -> np.ndarray:
    """bool, one per row of ``rows`` (indexes into ``t``): :func:`nonfinite_disagreement` of each."""
    kind = t.side_kind[rows]
    both = (kind[:, 0] != ABSENT) & (kind[:, 1] != ABSENT)
    tensor = kind == TENSOR
    stats = t.side_stats[rows]
    defined = t.side_stats_defined[rows] & tensor[:, :, None]
    x, y = stats[:, 0], stats[:, 1]
    with np.errstate(invalid="ignore"):
        fx, fy = np.isfinite(x), np.isfinite(y)
        same = (x == y) | (np.isnan(x) & np.isnan(y))  # both non-finite: equal infinities or both NaN agree
    pairs = defined[:, 0] & defined[:, 1] & ((fx != fy) | (~fx & ~fy & ~same))
    return both & pairs.any(axis=1)


def nonfinite_disagreement(row: ComparisonRow) -> bool:
    """True when the row's two sides disagree in their non-finite statistics: for one of max, min, mean, norm
    recorded on both sides, one side holds NaN or ±Inf and the other a number or another non-finite value (NaN on
    one side and +Inf on the other, +Inf and -Inf).  A statistic recorded on one side only does not count."""
    return bool(_nonfinite_mask(row.table, np.array([row.position]))[0])


#: Severity of each verdict code (:data:`VERDICTS` order), most severe 0.
_SEVERITY_OF_CODE = np.array([_SEVERITY[v] for v in VERDICTS], dtype=np.int64)
_REL_COLUMNS = np.array([METRIC_INDEX[k] for k in _REL_STATS], dtype=np.int64)


def _metric_or(t: RowTable, rows: np.ndarray, name: str, default: float) -> np.ndarray:
    """float64, one per row of ``rows``: the metric ``name`` where it is a number other than NaN, else ``default``."""
    k = METRIC_INDEX[name]
    v = t.metrics[rows, k]
    return np.where((t.metric_state[rows, k] == METRIC_VALUE) & ~np.isnan(v), v, default)


class _KeyColumns(NamedTuple):
    """The columns of :func:`_disagreement_keys` (one item per row): the verdict's severity and the non-finite flag
    (int64), whether the row was compared as tensors (bool), and its Cosine, minus MaxAbsErr, minus the MaxAbsErr
    lower bound and minus the largest relative difference (float64, never NaN)."""

    severity: np.ndarray
    nonfinite: np.ndarray
    tensor: np.ndarray
    cosine: np.ndarray
    minus_abs: np.ndarray
    minus_bound: np.ndarray
    minus_rel: np.ndarray


def _key_columns(t: RowTable, rows: np.ndarray) -> _KeyColumns:
    """:class:`_KeyColumns` of the rows ``rows`` of ``t`` (:func:`_disagreement_keys`)."""
    rows = np.asarray(rows, dtype=np.int64)
    severity = _SEVERITY_OF_CODE[t.verdict[rows]]
    nonfinite = np.ones(len(rows), dtype=np.int64)
    failing = severity == 0
    if failing.any():
        nonfinite[failing] = np.where(_nonfinite_mask(t, rows[failing]), 0, 1)
    rel_values = t.metrics[np.ix_(rows, _REL_COLUMNS)]
    rel_ok = (t.metric_state[np.ix_(rows, _REL_COLUMNS)] == METRIC_VALUE) & ~np.isnan(rel_values)
    rel = np.where(rel_ok, rel_values, -np.inf).max(axis=1, initial=-np.inf)
    return _KeyColumns(severity, nonfinite, t.compared_by[rows] == COMPARED_BY_CODE["tensor"],
                       _metric_or(t, rows, "Cosine", 2.0), -_metric_or(t, rows, "MaxAbsErr", 0.0),
                       -_metric_or(t, rows, LOWER_BOUND_NAME, 0.0), -np.where(rel_ok.any(axis=1), rel, 0.0))


def _keys_of(c: _KeyColumns, picked: np.ndarray) -> list[tuple[float, ...]]:
    """The sort keys (:func:`_disagreement_keys`) of the items ``picked`` (int [m]) of the columns ``c``."""
    return [(sv, nf, cos, ma, mr) if tn else (sv, nf, mb, mr)
            for sv, nf, tn, cos, ma, mb, mr in zip(*(column[picked].tolist() for column in c), strict=True)]


def _key_order(c: _KeyColumns) -> np.ndarray:
    """The items of the columns ``c`` in the order of their sort keys (:func:`_disagreement_keys`), equal keys in
    their own order: the order of a stable sort of the key tuples, made by ``np.lexsort``.  A tensor row's key is
    ``(severity, nonfinite, cosine, minus_abs, minus_rel)``, another's ``(severity, nonfinite, minus_bound,
    minus_rel)``: tuples compare item by item, so the third and fourth items are compared whatever they mean, and
    when the first four are equal the shorter tuple (a row not compared as tensors) comes first, then a tensor row's
    last item decides.  No key holds a NaN."""
    tensor = c.tensor
    return np.lexsort((np.where(tensor, c.minus_rel, 0.0), tensor, np.where(tensor, c.minus_abs, c.minus_rel),
                       np.where(tensor, c.cosine, c.minus_bound), c.nonfinite, c.severity))


def _key_prefix(c: _KeyColumns, best: int) -> np.ndarray:
    """The first ``best`` items of :func:`_key_order` (all of them when there are fewer), sorting only the items that
    can be among them: every item whose severity and non-finite flag come before those of the ``best``-th, and of
    the items sharing those of the ``best``-th, the ones whose third key item is at most the one the rest need (a
    partition finds it; ties are all kept).  The rest's order does not matter, so a comparison of many rows is not
    sorted whole."""
    n = len(c.severity)
    if best >= n:
        return _key_order(c)
    primary = c.severity * 2 + c.nonfinite  # the order of (severity, nonfinite): the flag is 0 or 1
    reached = np.cumsum(np.bincount(primary))
    level = int(np.searchsorted(reached, best))  # the (severity, nonfinite) of the best-th item
    need = best - (int(reached[level - 1]) if level else 0)  # how many of that level are among the first best
    third = np.where(c.tensor, c.cosine, c.minus_bound)
    group = primary == level
    bound = np.partition(third[group], need - 1)[need - 1]
    subset = np.flatnonzero((primary < level) | (group & (third <= bound)))
    return subset[_key_order(_KeyColumns(*(column[subset] for column in c)))][:best]


def _disagreement_keys(t: RowTable, rows: np.ndarray) -> list[tuple[float, ...]]:
    """Sort keys of the rows ``rows`` of ``t``, most disagreeing first (see :func:`rank_disagreements`): the verdict's
    severity, 0 for a failing row whose non-finite statistics disagree (:func:`nonfinite_disagreement`) else 1, then
    the metrics: for rows compared as tensors the Cosine (NaN or missing: 2), minus MaxAbsErr (NaN or missing: 0)
    and minus the largest relative statistic difference (NaN left out; none: 0), for the others minus the MaxAbsErr
    lower bound and minus that largest relative difference."""
    return _keys_of(_key_columns(t, rows), np.arange(len(rows)))


def _disagreement_key(row: ComparisonRow) -> tuple[float, ...]:
    """Sort key of one row, most disagreeing first (:func:`_disagreement_keys`)."""
    return _disagreement_keys(row.table, np.array([row.position]))[0]


_ONCE = ("; the rows of one tensor (an API's output that is also its cell's output and the next API's input: "
         "equal dtype, shape, statistics and metrics, a NaN equal to a NaN in the same place unless every statistic "
         "of a side is NaN) are listed once")

_NONFINITE = (" (at their top the failures whose statistics hold a NaN or ±Inf that the other side's do not: "
              "a NaN appearing is usually the first thing to look at)")

#: How :func:`rank_disagreements` ranks rows and lists each tensor once, for the reports to say so.
RANKING = {
    "tensor": "failing first" + _NONFINITE + ", then warnings; then the lowest Cosine, the largest MaxAbsErr" + _ONCE,
    "statistics": "failing first" + _NONFINITE + ", then warnings; then the largest MaxAbsErr lower bound (from the "
    "statistics), the largest relative statistic difference" + _ONCE,
    "md5": "failing first" + _NONFINITE + _ONCE,
}


class Disagreement(NamedTuple):
    """One listed tensor of the "largest disagreements" (:func:`rank_disagreements`).

    Attributes:
        unit: index of the row's unit in ``comparison.units``.
        row: the first row, in execution order, that records the tensor.
        also: the unit's other rows recording the same tensor (:func:`tensor_identity`), in execution order.
    """

    unit: int
    row: ComparisonRow
    also: tuple[ComparisonRow, ...] = ()


def also_recorded_as(names: list[str] | tuple[str, ...], shown: int = ALSO_NAMES_SHOWN,
                     max_chars: int | None = None) -> str:
    """``"also recorded as a, b, c and 2 more"`` for the other names of a listed tensor (at most ``shown`` of
    them spelled out); ``""`` when there are none.

    ``max_chars``: the text's length limit.  Names are cut to stay within it, never the count: a name that does
    not fit is left out and counted in "and N more"; a first name too long on its own is cut with "…".
    """
    if not names:
        return ""
    head = "also recorded as "
    spelled = list(names[:shown])
    if max_chars is not None:
        fitted: list[str] = []
        for name in spelled:
            rest = len(names) - len(fitted) - 1  # the names counted if this one is spelled out
            tail = len(f" and {rest} more") if rest else 0
            if len(head) + len(", ".join([*fitted, name])) + tail <= max_chars:
                fitted.append(name)
                continue
            if not fitted:  # the first name alone is too long: cut it, keep the count
                room = max_chars - len(head) - tail - 1
                fitted.append(name[:max(room, 0)] + "…")
            break
        spelled = fitted
    text = head + ", ".join(spelled)
    return text + (f" and {len(names) - len(spelled)} more" if len(names) > len(spelled) else "")


_NAN_METRIC = "NaN"  # stands for a NaN (statistic or metric) in tensor_identity: NaN != NaN, and its hash varies


def _nan_aware(stats: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A's and B's four statistics with each NaN as :data:`_NAN_METRIC` (equal and hashed alike); None when one is
    missing or all four of a side are NaN."""
    if None in stats:
        return None
    if all(v != v for v in stats[:4]) or all(v != v for v in stats[4:]):
        return None
    return tuple(_NAN_METRIC if v != v else v for v in stats)


def _tensor_identities(t: RowTable, rows: list[int]) -> list[tuple[Any, ...] | None]:
    """:func:`tensor_identity` of each of the rows ``rows`` of ``t`` (read from the columns)."""
    idx = np.array(rows, dtype=np.int64)
    out: list[tuple[Any, ...] | None] = []
    if not len(idx):
        return out
    strings, shapes = t.strings, t.shapes
    kinds = t.side_kind[idx].tolist()
    dtypes = t.side_dtype[idx].tolist()
    shape_codes = t.side_shape[idx].tolist()
    md5s = t.side_md5[idx].tolist()
    stats = t.side_stats[idx].reshape(len(idx), 8).tolist()
    defined = t.side_stats_defined[idx].reshape(len(idx), 8).tolist()
    states = t.metric_state[idx].tolist()
    values = t.metrics[idx].tolist()
    compared = t.compared_by[idx].tolist()
    verdicts = t.verdict[idx].tolist()
    for j in range(len(idx)):
        if kinds[j][0] != TENSOR or kinds[j][1] != TENSOR:
            out.append(None)
            continue
        side_stats: tuple[Any, ...] | None = tuple(v if d else None
                                                   for v, d in zip(stats[j], defined[j], strict=True))
        if any(v is None or v != v for v in side_stats):  # type: ignore[union-attr]
            side_stats = _nan_aware(side_stats)  # type: ignore[arg-type]
            if side_stats is None:
                out.append(None)
                continue
        metrics = tuple((METRIC_NAMES[k], None if st != METRIC_VALUE else (_NAN_METRIC if v != v else v))
                        for k, (st, v) in enumerate(zip(states[j], values[j], strict=True)) if st)
        (da, db), (sa, sb), (ma, mb) = dtypes[j], shape_codes[j], md5s[j]
        out.append((
            None if da < 0 else strings[da], None if sa < 0 else shapes[sa], None if ma < 0 else strings[ma],
            None if db < 0 else strings[db], None if sb < 0 else shapes[sb], None if mb < 0 else strings[mb],
            side_stats, COMPARED_BY[compared[j]], VERDICTS[verdicts[j]], metrics,
        ))
    return out


def tensor_identity(row: ComparisonRow) -> tuple[Any, ...] | None:
    """What makes two rows of one unit "the same tensor" recorded under two names, or None when the row cannot
    be told apart from others this way.

    Two rows are the same tensor when both sides are tensors with equal dtype, shape (and checksum, when
    recorded) and all four statistics (max, min, mean, norm: all present, compared exactly, a NaN equal to a NaN
    in the same place) on A and equal on B, and the rows have the same ``compared_by``, verdict and metrics (NaN
    metrics equal to NaN).  An API's output, the enclosing cell's output and the next API's input are one tensor
    recorded three times, a tensor holding NaN too (``Max`` NaN on A, say).
    None: a side is absent or not a tensor, a statistic is missing, or every statistic of a side is NaN (distinct
    all-NaN tensors of one shape would look alike: they are never merged).
    """
    return _tensor_identities(row.table, [row.position])[0]


def _distinct(comparison: Comparison, ranked: list[tuple[int, int]], keys: list[tuple[float, ...]],
              limit: int | None) -> tuple[list[Disagreement], bool]:
    """The first ``limit`` distinct tensors (all when None) of ``ranked`` (``(unit index, row index)`` in ranking
    order, ``keys`` their sort keys), each with its other rows among ``ranked``; and whether that settles the list:
    ``limit`` tensors were found and no row beyond ``ranked`` can be another row of a listed tensor.

    Rows of one tensor have equal sort keys (the key is made of the verdict, the statistics and the metrics), so
    once ``limit`` tensors are listed only rows ranked equal to the last one can still add to a listed tensor, and
    only to one ranked equal to it that can be told apart (:func:`tensor_identity` not None).  The walk stops at the
    first row ranked after the last tensor, or at once when no listed tensor ranked equal to it can take more rows
    (many failures with a side all NaN rank equal, each its own tensor); the list is then settled even if
    ``ranked`` is only the best part of the ranking.  Identities are read from the columns a batch of rows at a
    time, as the walk reaches them.
    """
    listed: list[tuple[int, int, list[int]]] = []
    group_of: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
    grouped_keys: set[tuple[float, ...]] = set()  # keys of the listed tensors that can take more rows
    last_key: tuple[float, ...] | None = None
    settled = False
    idents: list[tuple[Any, ...] | None] = []
    batch = 256
    for j, ((ui, i), key) in enumerate(zip(ranked, keys, strict=True)):
        if last_key is not None and key > last_key:
            settled = True
            break
        if j == len(idents):
            idents += _identities(comparison, ranked[j:j + batch])
            batch *= 2
        ident = idents[j]
        others = None if ident is None else group_of.get((ui, ident))
        if others is not None:
            others.append(i)
        elif limit is None or len(listed) < limit:
            others = []
            listed.append((ui, i, others))
            if ident is not None:
                group_of[(ui, ident)] = others
                grouped_keys.add(key)
            if len(listed) == limit:
                last_key = key
                if key not in grouped_keys:
                    settled = True
                    break
        # else: another tensor ranked equal to the last one listed; walk on for the listed tensors' other rows
    units = comparison.units
    return [Disagreement(ui, units[ui].rows[i].detached(), tuple(units[ui].rows[o].detached() for o in others))
            for ui, i, others in listed], settled


def _identities(comparison: Comparison, items: list[tuple[int, int]]) -> list[tuple[Any, ...] | None]:
    """:func:`tensor_identity` of each ``(unit index, row index)`` of ``items``."""
    out: list[tuple[Any, ...] | None] = [None] * len(items)
    by_unit: dict[int, list[int]] = {}
    for j, (ui, _) in enumerate(items):
        by_unit.setdefault(ui, []).append(j)
    for ui, js in by_unit.items():
        for j, ident in zip(js, _tensor_identities(comparison.units[ui].rows, [items[j][1] for j in js]),
                            strict=True):
            out[j] = ident
    return out


def rank_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[Disagreement]:
    """The ``limit`` tensors whose two sides disagree most, worst first, each once (:class:`Disagreement`).

    Candidates: every failing row (a shape or dtype mismatch too), and every other compared row whose values
    differ.  Order (:data:`RANKING`): verdict severity (fail, warning, pass), the failing rows whose non-finite
    statistics disagree (:func:`nonfinite_disagreement`: NaN on one side, a number on the other) first among the
    failures (their Cosine, MaxAbsErr or its bound is often undefined, which would rank them last), then for rows
    compared as tensors the lowest Cosine and the largest MaxAbsErr, for rows compared by statistics the largest
    MaxAbsErr lower bound and the largest relative statistic difference (a selection of existing rows, no new
    numbers); rows of equal keys keep their execution order (a stable sort).  Rows of one unit that record
    the same tensor (:func:`tensor_identity`) are listed once, as the first of them in execution order (the
    one the stable sort puts first), with the others in :attr:`Disagreement.also`.  The list holds up to
    ``limit`` distinct tensors; a shorter list is a prefix of a longer one.  A negative ``limit`` leaves out
    that many tensors from the end of the whole list.

    The candidates' keys are read from the columns (:func:`_disagreement_keys`), a unit at a time, and only each
    unit's best ``8 * limit + 64`` rows are kept (a stable sort's prefix, sorted as columns: :func:`_key_prefix`): the
    best rows of the whole comparison are among them.  Those are ranked (ties in unit, then execution order); every
    candidate is gathered only when they do not settle the list: fewer than ``limit`` distinct tensors among them,
    or rows ranked equal to the last one listed beyond them that could be more rows of a listed tensor
    (:func:`_distinct`); then four times as many per unit are kept, and so on.  So memory is bounded by the rows
    kept per unit, not by the comparison's rows (a unit read from a spool file is let go once its rows are ranked;
    the rows returned are :meth:`~msprobe_cmp.comparator.rowtable.ComparisonRow.detached` copies).
    """
    if limit == 0:
        return []
    if limit > 0:
        best = 8 * limit + 64
        while True:
            items, keys, total = _candidates(comparison, best)
            if len(items) == total:
                break  # every candidate is here: rank them all below
            order = heapq.nsmallest(best, range(len(items)), key=lambda k: (keys[k], items[k]))
            listed, settled = _distinct(comparison, [items[k] for k in order], [keys[k] for k in order], limit)
            if settled:
                return listed
            best *= 4
    else:
        items, keys, _ = _candidates(comparison, None)
    order = sorted(range(len(items)), key=lambda k: (keys[k], items[k]))  # equal keys keep unit, execution order
    listed, _ = _distinct(comparison, [items[k] for k in order], [keys[k] for k in order],
                          limit if limit > 0 else None)
    return listed if limit > 0 else listed[:limit]


def _candidates(comparison: Comparison, best: int | None
                ) -> tuple[list[tuple[int, int]], list[tuple[float, ...]], int]:
    """The candidates of :func:`rank_disagreements` as ``(unit index, row index)`` with their sort keys: each unit's
    best ``best`` of them (all when None), read a unit at a time; and how many candidates there are in all."""
    items: list[tuple[int, int]] = []
    keys: list[tuple[float, ...]] = []
    total = 0
    for ui, u in enumerate(comparison.units):
        t = u.rows
        rows = np.flatnonzero((t.verdict == FAIL) | ((t.differs == 1) & (t.verdict != SKIP)))
        total += len(rows)
        columns = _key_columns(t, rows)
        picked = np.arange(len(rows))
        if best is not None and best < len(rows):
            picked = _key_prefix(columns, best)  # a stable sort's prefix
        items += [(ui, row) for row in rows[picked].tolist()]
        keys += _keys_of(columns, picked)
    return items, keys, total


def select_largest_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[tuple[int, ComparisonRow]]:
    """The ``limit`` rows whose two sides disagree most, as ``(unit index, row)``, worst first; rows of one
    tensor are listed once (:func:`rank_disagreements`, without the other names)."""
    return [(d.unit, d.row) for d in rank_disagreements(comparison, limit)]


class MatchedRows(NamedTuple):
    """Matched rows of one kind the reports list with the rows that could not be compared
    (:func:`judged_by_statistics`, :func:`matched_not_compared`).

    Attributes:
        total: how many there are.
        examples: the first of them, in unit and execution order, as ``(unit index, row)``.
        why: what such rows are (:data:`STATISTICS_ONLY_WHY`, :data:`NOTHING_COMPARED_WHY`); ``""`` when none.
    """

    total: int
    examples: tuple[tuple[int, ComparisonRow], ...]
    why: str


#: The rows a tensor or md5 comparison judged by their statistics (:func:`judged_by_statistics`).
StatisticsOnly = MatchedRows
#: The matched rows with nothing to compare (:func:`matched_not_compared`).
NothingCompared = MatchedRows


def _matched_rows(comparison: Comparison, examples: int, statistics_only: bool,
                  nothing_compared: bool) -> tuple[MatchedRows, MatchedRows]:
    """The matched rows judged by their statistics only (:func:`judged_by_statistics`; when ``statistics_only`` and
    the mode is tensor or md5) and those with nothing to compare (:func:`matched_not_compared`; when
    ``nothing_compared``), from the columns: each kind's count and its first ``examples`` rows (none of a kind not
    asked for)."""
    why = STATISTICS_ONLY_WHY.get(comparison.mode, "") if statistics_only else ""
    by_stats = bool(why)
    n_stats = n_nothing = 0
    stats: list[tuple[int, ComparisonRow]] = []
    nothing: list[tuple[int, ComparisonRow]] = []
    if by_stats or nothing_compared:
        for ui, u in enumerate(comparison.units):
            t = u.rows
            matched = t.class_mask("matched")
            if by_stats:
                rows = np.flatnonzero(matched & (t.compared_by == COMPARED_BY_CODE["statistics"]))
                n_stats += len(rows)
                stats += [(ui, t[i].detached()) for i in rows[:max(examples - len(stats), 0)].tolist()]
            if nothing_compared:
                rows = np.flatnonzero(matched & (t.verdict == SKIP))
                n_nothing += len(rows)
                nothing += [(ui, t[i].detached()) for i in rows[:max(examples - len(nothing), 0)].tolist()]
    return (MatchedRows(n_stats, tuple(stats), why if n_stats else ""),
            MatchedRows(n_nothing, tuple(nothing), NOTHING_COMPARED_WHY if n_nothing else ""))


def judged_by_statistics(comparison: Comparison, examples: int = STATISTICS_ONLY_EXAMPLES) -> MatchedRows:
    """The matched rows whose values the comparison's mode could not compare: in tensor mode a tensor file missing or
    unreadable (or values that are not real numbers), in md5 mode a checksum missing or blank on either side.  Such
    rows were compared by their statistics (``compared_by == "statistics"`` while ``comparison.mode`` is
    ``"tensor"`` or ``"md5"``); their verdict is a warning, or fail when the statistics fail.  Statistics mode has
    none.  At most ``examples`` of them are returned, with their count (:data:`STATISTICS_ONLY_WHY` as ``why``)."""
    return _matched_rows(comparison, examples, True, False)[0]


def matched_not_compared(comparison: Comparison, examples: int = STATISTICS_ONLY_EXAMPLES) -> MatchedRows:
    """The matched rows whose verdict is ``skip``: both sides hold the entry but nothing was recorded to compare
    (null on both sides; a tensor with no statistics on either side, and no tensor file or checksum the mode could
    use).  Each row's reasons or notes say which.  They count as matched but not as compared, so the reports list
    them with the rows that could not be compared.  At most ``examples`` of them are returned, with their count."""
    return _matched_rows(comparison, examples, False, True)[1]


def compared_counts(comparison: Comparison) -> tuple[int, tuple[int, ...]]:
    """``(comparison.compared_count, (unit.compared_count for each unit))`` (each property walks every row)."""
    units = tuple(u.compared_count for u in comparison.units)
    return sum(units), units


class ReportFacts:
    """What several reports of one comparison derive from all of its rows, derived once and shared.

    ``msprobe_cmp.cli.write_reports`` makes one and passes it to the five renderers; a renderer called without
    one makes its own.  It holds the comparison it was made for (renderers check that they get the same one).

    Attributes:
        comparison: the comparison.
        plot_data: what the plots draw, gathered from the units one at a time (``msprobe_cmp.reports.plots``),
            once drawn.
    """

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.plot_data: object | None = None
        self._counts: tuple[int, tuple[int, ...]] | None = None
        self._ranking: tuple[int, list[Disagreement]] | None = None
        self._statistics_only: StatisticsOnly | None = None
        self._nothing_compared: NothingCompared | None = None

    @classmethod
    def of(cls, comparison: Comparison, facts: ReportFacts | None) -> ReportFacts:
        """``facts`` when it was made for ``comparison``, else new facts for it."""
        return facts if facts is not None and facts.comparison is comparison else cls(comparison)

    def compared_counts(self) -> tuple[int, tuple[int, ...]]:
        """:func:`compared_counts` of the comparison."""
        if self._counts is None:
            self._counts = compared_counts(self.comparison)
        return self._counts

    def _matched(self) -> tuple[StatisticsOnly, NothingCompared]:
        """Both records of matched rows the reports list as not compared, filled in one walk over the rows."""
        if self._statistics_only is None or self._nothing_compared is None:
            self._statistics_only, self._nothing_compared = _matched_rows(
                self.comparison, STATISTICS_ONLY_EXAMPLES, True, True)
        return self._statistics_only, self._nothing_compared

    def judged_by_statistics(self) -> StatisticsOnly:
        """:func:`judged_by_statistics` of the comparison (with :data:`STATISTICS_ONLY_EXAMPLES` examples)."""
        return self._matched()[0]

    def matched_not_compared(self) -> NothingCompared:
        """:func:`matched_not_compared` of the comparison (with :data:`STATISTICS_ONLY_EXAMPLES` examples)."""
        return self._matched()[1]

    def disagreements(self, limit: int) -> list[Disagreement]:
        """:func:`rank_disagreements` of the comparison (distinct tensors, each with its other names); a shorter
        list is taken from a longer one already ranked (its prefix)."""
        if limit < 0:
            return rank_disagreements(self.comparison, limit)
        if self._ranking is not None:
            ranked_limit, ranked = self._ranking
            if limit <= ranked_limit or len(ranked) < ranked_limit:
                return ranked[:limit]
        ranked = rank_disagreements(self.comparison, limit)
        self._ranking = (limit, ranked)
        return list(ranked)

    def largest_disagreements(self, limit: int) -> list[tuple[int, ComparisonRow]]:
        """:func:`select_largest_disagreements` of the comparison: :meth:`disagreements` as
        ``(unit index, row)``, without the other names."""
        return [(d.unit, d.row) for d in self.disagreements(limit)]


#: How many differing non-tensor arguments the reports name (:func:`differing_arguments`).
ARGUMENTS_SHOWN = 10


class ArgumentRow(NamedTuple):
    """A non-tensor argument whose two sides differ (eps 1e-05 against 1e-12): often the cause of what follows.

    Attributes:
        unit: index of the unit in :attr:`Comparison.units`.
        row: the row.
        text: ``"<row name>: A <value>, B <value> (<unit label>)"``.
    """

    unit: int
    row: ComparisonRow
    text: str


def differing_arguments(comparison: Comparison) -> list[ArgumentRow]:
    """The rows compared by value (non-tensor arguments: eps, a dtype, a flag) whose two sides differ, in unit and
    execution order: the category the reports list first, before any tensor."""
    out = []
    for ui, u in enumerate(comparison.units):
        t = u.rows
        kind = t.side_kind
        rows = np.flatnonzero((t.compared_by == COMPARED_BY_CODE["value"]) & (t.differs == 1)
                              & (kind[:, 0] != ABSENT) & (kind[:, 1] != ABSENT))
        for i in rows.tolist():
            r = t[i].detached()  # kept while other units are read
            out.append(ArgumentRow(ui, r, f"{r.value_difference} ({u.unit_a.label})"))
    return out


def arguments_line(comparison: Comparison, shown: int = 3) -> str | None:
    """``"arguments that differ (2): <row>: A 1e-05, B 1e-12 (step0/rank); ..."``, or None when none differ."""
    rows = differing_arguments(comparison)
    if not rows:
        return None
    listed = "; ".join(a.text for a in rows[:shown])
    more = f"; and {len(rows) - shown} more" if len(rows) > shown else ""
    return f"arguments that differ ({len(rows)}): {listed}{more}"


def origin_text(comparison: Comparison) -> str:
    """The likely origin's one line (:attr:`~msprobe_cmp.comparator.compare.LikelyOrigin.text`), or ``"none ..."``
    when no row's error jumps (:mod:`msprobe_cmp.comparator.localise`)."""
    origin = comparison.likely_origin
    return "none (no row's error jumps beyond what its inputs carry)" if origin is None else origin.text


def origin_line(comparison: Comparison) -> str:
    """``"likely origin: "`` and :func:`origin_text`: the CLI's and the HTML's line."""
    return f"likely origin: {origin_text(comparison)}"


def select_error_metric(comparison: Comparison) -> str:
    """The row metric that stands for "the error" of a row in plots: ``MaxAbsErr`` in tensor mode,
    its statistics lower bound otherwise (a metric name, not a number)."""
    return "MaxAbsErr" if comparison.mode == "tensor" else LOWER_BOUND_NAME


def select_relative_metric(comparison: Comparison) -> str:
    """The row metric plotted as "relative error": ``MaxRelativeErr`` in tensor mode, else the relative
    difference of the maxima (``Max relative diff``)."""
    return "MaxRelativeErr" if comparison.mode == "tensor" else "Max relative diff"


def format_side(side: SideSummary | None) -> str:
    """One-line summary of what a side recorded."""
    if side is None:
        return "absent"
    return side_text(side.kind, side.dtype, side.shape, (side.max, side.min, side.mean, side.norm), side.md5,
                     side.value)


def side_text(kind: str, dtype: str | None, shape: tuple[int, ...] | None, stats: Sequence[float | None],
              md5: str | None, value: str | None) -> str:
    """:func:`format_side` of a side given by its fields (``kind`` one of ``"absent"``, ``"null"``, ``"value"``,
    ``"tensor"``; ``stats`` max, min, mean, norm)."""
    if kind == "absent":
        return "absent"
    if kind == "null":
        return "null"
    if kind == "value":
        return f"{dtype} {value}"
    parts = [f"{dtype} {list(shape or ())}"]
    parts += [f"{k}={format_number(v)}" for k, v in zip(("max", "min", "mean", "norm"), stats, strict=True)]
    if md5:
        parts.append(f"md5={md5}")
    return " ".join(parts)


def side_texts(t: RowTable, s: int, rows: Sequence[int]) -> list[str]:
    """:func:`format_side` of side ``s`` (0 = A, 1 = B) of the rows ``rows`` of ``t``, read from the columns."""
    idx = np.asarray(rows, dtype=np.int64)
    sc = t.side_columns(s)
    strings, shapes = t.strings, t.shapes
    out = []
    for kind, dtype, shape, md5, value, stats, defined in zip(
            sc.kind[idx].tolist(), sc.dtype[idx].tolist(), sc.shape[idx].tolist(), sc.md5[idx].tolist(),
            sc.value[idx].tolist(), sc.stats[idx].tolist(), sc.stats_defined[idx].tolist(), strict=True):
        out.append(side_text(
            SIDE_KINDS[kind], None if dtype < 0 else strings[dtype], None if shape < 0 else shapes[shape],
            [v if d else None for v, d in zip(stats, defined, strict=True)], None if md5 < 0 else strings[md5],
            None if value < 0 else strings[value]))
    return out


#: How many rows the large reports (comparison.json, comparison.csv, junit.xml, the page's row data) render at a
#: time: each chunk of rows is rendered, written and let go before the next, so memory stays bounded (a few MB of
#: text) whatever the number of rows.
CHUNK_ROWS = 4096


def row_windows(table: RowTable, chunk_rows: int = CHUNK_ROWS) -> Iterator[tuple[int, RowTable]]:
    """``(start, window)`` for each chunk of at most ``chunk_rows`` rows of ``table``, in row order: ``window`` is
    :meth:`RowTable.window` of rows ``start`` to ``start + chunk_rows``.  Nothing for an empty table.

    Raises:
        ValueError: ``chunk_rows`` is not positive.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    for start in range(0, len(table), chunk_rows):
        yield start, table.window(start, start + chunk_rows)


def dumps_standard(doc: Any) -> str:
    """``doc`` as compact JSON text written by the standard library (no spaces, non-ASCII characters as they are, a
    lone surrogate kept): what :func:`dumps_compact` writes when orjson refuses ``doc``.

    Raises:
        ValueError: a non-finite float in ``doc`` (they must already be strings).
        TypeError: a value JSON cannot hold.
    """
    return json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def compact_encoder(sample: Any) -> Callable[[Any], str]:
    """The encoder :func:`dumps_compact` would use for ``sample``, for a document written in parts that must read as
    one encoder's output: orjson's (decoded) when orjson encodes ``sample``, else the standard library's (their
    floats differ in form: ``1e-5`` against ``1e-05``).  The parts written with it must hold nothing orjson refuses
    that ``sample`` does not (a lone surrogate, an integer beyond 64 bits), else orjson's error is raised."""
    try:
        orjson.dumps(sample)
    except (orjson.JSONEncodeError, TypeError):
        return dumps_standard
    return lambda doc: orjson.dumps(doc).decode("utf-8")


def spliced_json(dumps: Callable[[Any], str], before: dict[str, Any], key: str, items: Iterable[Iterable[str]],
                 after: dict[str, Any] | None = None) -> Iterator[str]:
    """The compact JSON text of ``{**before, key: [...], **after}`` in pieces, its list written from ``items``: each
    item the JSON text of one or more of the list's items (joined by commas) in pieces, so that a document too large
    to hold is written a part at a time.  ``before`` and ``after`` are written by ``dumps`` (compact JSON of an
    object is its members' JSON joined by commas between braces, so the pieces joined are ``dumps`` of the whole)."""
    opened = dumps(before)[:-1]
    yield f"{opened}{',' if before else ''}{dumps(key)}:["
    for k, item in enumerate(items):
        if k:
            yield ","
        yield from item
    yield "]," + dumps(after)[1:] if after else "]}"


def dumps_compact(doc: Any) -> str:
    """``doc`` as compact JSON text (no spaces), written by orjson (about 7x faster than the standard library's
    encoder on a large comparison); the standard library writes what orjson refuses (strings holding lone
    surrogates, integers beyond 64 bits).  Floats are written as their shortest round-trip form in both
    (``1e-05`` by the standard library is ``1e-5`` here: the same value).  Non-finite floats must already be
    strings (``msprobe_cmp.reports.tables``' ``_json_number``).
    """
    try:
        return orjson.dumps(doc).decode("utf-8")
    except (orjson.JSONEncodeError, TypeError):
        return dumps_standard(doc)
