"""Helpers shared by the renderers: number formatting, row selection, the metric plotted as "the error".

Nothing here computes a new number: numbers are formatted, and rows of the Comparison are selected
or ordered by the values they already carry (the largest disagreements list each tensor once, however many
names it was recorded under: :func:`rank_disagreements`).
"""

from __future__ import annotations

import heapq
import json
import math
from typing import Any, NamedTuple

import orjson

from msprobe_cmp.comparator.compare import LOWER_BOUND_NAME, Comparison, ComparisonRow, SideSummary

#: How many rows the "largest disagreements" tables list.
TOP_ROWS = 15

#: How many other names of a listed tensor the reports spell out ("also recorded as a, b, c and 2 more").
ALSO_NAMES_SHOWN = 3

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


def _finite(value: float | None, default: float) -> float:
    return value if value is not None and not math.isnan(value) else default


def _disagreement_key(row: ComparisonRow) -> tuple[float, ...]:
    """Sort key, most disagreeing first (see :func:`select_largest_disagreements`)."""
    metrics = row.metrics
    m = dict(metrics)
    if len(m) != len(metrics):
        m = dict(reversed(metrics))  # the first of a repeated key wins, as in row.metric()
    get = m.get
    rel = None  # the largest relative statistic difference (NaN left out), the first of equal ones as max()
    for k in _REL_STATS:
        v = get(k)
        if v is not None and v == v and (rel is None or v > rel):
            rel = v
    if row.compared_by == "tensor":
        return (
            _SEVERITY.get(row.verdict, 4),
            _finite(get("Cosine"), 2.0),
            -_finite(get("MaxAbsErr"), 0.0),
            -(0.0 if rel is None else rel),
        )
    return (
        _SEVERITY.get(row.verdict, 4),
        -_finite(get(LOWER_BOUND_NAME), 0.0),
        -(0.0 if rel is None else rel),
    )


_ONCE = ("; the rows of one tensor (an API's output that is also its cell's output and the next API's input: "
         "equal dtype, shape, statistics and metrics) are listed once")

#: How :func:`rank_disagreements` ranks rows and lists each tensor once, for the reports to say so.
RANKING = {
    "tensor": "failing first, then warnings; then the lowest Cosine, the largest MaxAbsErr" + _ONCE,
    "statistics": "failing first, then warnings; then the largest MaxAbsErr lower bound (from the statistics), "
    "the largest relative statistic difference" + _ONCE,
    "md5": "failing first" + _ONCE,
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


def also_recorded_as(names: list[str] | tuple[str, ...], shown: int = ALSO_NAMES_SHOWN) -> str:
    """``"also recorded as a, b, c and 2 more"`` for the other names of a listed tensor (at most ``shown`` of
    them spelled out); ``""`` when there are none."""
    if not names:
        return ""
    text = "also recorded as " + ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


_NAN_METRIC = "NaN"  # stands for a NaN metric in tensor_identity (metric values are numbers or None)


def tensor_identity(row: ComparisonRow) -> tuple[Any, ...] | None:
    """What makes two rows of one unit "the same tensor" recorded under two names, or None when the row cannot
    be told apart from others this way.

    Two rows are the same tensor when both sides are tensors with equal dtype, shape (and checksum, when
    recorded) and all four statistics (max, min, mean, norm: all present, none NaN, compared exactly) on A and
    equal on B, and the rows have the same ``compared_by``, verdict and metrics (NaN metrics equal to NaN).  An
    API's output, the enclosing cell's output and the next API's input are one tensor recorded three times.
    None: a side is absent or not a tensor, or a statistic is missing or NaN.
    """
    a, b = row.a, row.b
    if a is None or b is None or a.kind != "tensor" or b.kind != "tensor":
        return None
    stats = (a.max, a.min, a.mean, a.norm, b.max, b.min, b.mean, b.norm)
    for v in stats:
        if v is None or v != v:
            return None
    metrics = tuple((k, _NAN_METRIC if v is not None and v != v else v) for k, v in row.metrics)
    return (a.dtype, a.shape, a.md5, b.dtype, b.shape, b.md5, stats, row.compared_by, row.verdict, metrics)


def _distinct(ranked: list[tuple[int, ComparisonRow]], keys: list[tuple[float, ...]],
              limit: int | None) -> tuple[list[Disagreement], bool]:
    """The first ``limit`` distinct tensors (all when None) of ``ranked`` (rows in ranking order, ``keys`` their
    sort keys), each with its other rows among ``ranked``; and whether the walk stopped at a row ranked strictly
    after the last tensor listed.

    Rows of one tensor have equal sort keys (the key is made of the verdict and the metrics), so when the walk
    stopped early, every other row of a listed tensor was seen: its rows are complete even if ``ranked`` is only
    the best part of the ranking.
    """
    listed: list[tuple[int, ComparisonRow, list[ComparisonRow]]] = []
    group_of: dict[tuple[int, tuple[Any, ...]], list[ComparisonRow]] = {}
    last_key: tuple[float, ...] | None = None
    stopped = False
    for (ui, row), key in zip(ranked, keys, strict=True):
        if last_key is not None and key > last_key:
            stopped = True
            break
        ident = tensor_identity(row)
        others = None if ident is None else group_of.get((ui, ident))
        if others is not None:
            others.append(row)
        elif limit is None or len(listed) < limit:
            others = []
            listed.append((ui, row, others))
            if ident is not None:
                group_of[(ui, ident)] = others
            if len(listed) == limit:
                last_key = key
        # else: another tensor ranked equal to the last one listed; walk on for the listed tensors' other rows
    return [Disagreement(ui, row, tuple(others)) for ui, row, others in listed], stopped


def rank_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[Disagreement]:
    """The ``limit`` tensors whose two sides disagree most, worst first, each once (:class:`Disagreement`).

    Candidates: every failing row (a shape or dtype mismatch too), and every other compared row whose values
    differ.  Order (:data:`RANKING`): verdict severity (fail, warning, pass), then for rows compared as
    tensors the lowest Cosine and the largest MaxAbsErr, for rows compared by statistics the largest
    MaxAbsErr lower bound and the largest relative statistic difference (a selection of existing rows, no new
    numbers); rows of equal keys keep their execution order (a stable sort).  Rows of one unit that record
    the same tensor (:func:`tensor_identity`) are listed once, as the first of them in execution order (the
    one the stable sort puts first), with the others in :attr:`Disagreement.also`.  The list holds up to
    ``limit`` distinct tensors; a shorter list is a prefix of a longer one.  A negative ``limit`` leaves out
    that many tensors from the end of the whole list.

    Only the best ``8 * limit + 64`` rows are ranked (``heapq.nsmallest``, the same rows as a stable sort's
    prefix); every candidate is sorted only when those do not settle the list: fewer than ``limit`` distinct
    tensors among them, or rows ranked equal to the last one listed beyond them.
    """
    rows = [
        (ui, r) for ui, u in enumerate(comparison.units) for r in u.rows
        if r.verdict == "fail" or (r.differs and r.verdict != "skip")
    ]

    def key(item: tuple[int, ComparisonRow]) -> tuple[float, ...]:
        return _disagreement_key(item[1])

    if limit == 0:
        return []
    if 0 < limit and 8 * limit + 64 < len(rows):
        best = heapq.nsmallest(8 * limit + 64, rows, key=key)  # = sorted(rows, key=key)[:8 * limit + 64]
        listed, stopped = _distinct(best, [key(item) for item in best], limit)
        if stopped:
            return listed
    keys = [key(item) for item in rows]
    order = sorted(range(len(rows)), key=keys.__getitem__)  # stable: equal keys keep their execution order
    listed, _ = _distinct([rows[k] for k in order], [keys[k] for k in order], limit if limit > 0 else None)
    return listed if limit > 0 else listed[:limit]


def select_largest_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[tuple[int, ComparisonRow]]:
    """The ``limit`` rows whose two sides disagree most, as ``(unit index, row)``, worst first; rows of one
    tensor are listed once (:func:`rank_disagreements`, without the other names)."""
    return [(d.unit, d.row) for d in rank_disagreements(comparison, limit)]


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
        plot_columns: the plots' per-row columns (``msprobe_cmp.reports.plots``), once drawn.
    """

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.plot_columns: object | None = None
        self._counts: tuple[int, tuple[int, ...]] | None = None
        self._ranking: tuple[int, list[Disagreement]] | None = None

    @classmethod
    def of(cls, comparison: Comparison, facts: ReportFacts | None) -> ReportFacts:
        """``facts`` when it was made for ``comparison``, else new facts for it."""
        return facts if facts is not None and facts.comparison is comparison else cls(comparison)

    def compared_counts(self) -> tuple[int, tuple[int, ...]]:
        """:func:`compared_counts` of the comparison."""
        if self._counts is None:
            self._counts = compared_counts(self.comparison)
        return self._counts

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
    if side.kind == "null":
        return "null"
    if side.kind == "value":
        return f"{side.dtype} {side.value}"
    parts = [f"{side.dtype} {list(side.shape or ())}"]
    parts += [f"{k}={format_number(getattr(side, k))}" for k in ("max", "min", "mean", "norm")]
    if side.md5:
        parts.append(f"md5={side.md5}")
    return " ".join(parts)


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
        return json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
