"""Helpers shared by the renderers: number formatting, row selection, the metric plotted as "the error".

Nothing here computes a new number: numbers are formatted, and rows of the Comparison are selected
or ordered by the values they already carry.
"""

from __future__ import annotations

import heapq
import json
import math
from typing import Any

import orjson

from msprobe_cmp.comparator.compare import LOWER_BOUND_NAME, Comparison, ComparisonRow, SideSummary

#: How many rows the "largest disagreements" tables list.
TOP_ROWS = 15

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


#: How :func:`select_largest_disagreements` ranks rows, for the reports to say so.
RANKING = {
    "tensor": "failing first, then warnings; then the lowest Cosine, the largest MaxAbsErr",
    "statistics": "failing first, then warnings; then the largest MaxAbsErr lower bound (from the statistics), "
    "the largest relative statistic difference",
    "md5": "failing first",
}


def select_largest_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[tuple[int, ComparisonRow]]:
    """The ``limit`` rows whose two sides disagree most, as ``(unit index, row)``, worst first.

    Candidates: every failing row (a shape or dtype mismatch too), and every other compared row whose values
    differ.  Order (:data:`RANKING`): verdict severity (fail, warning, pass), then for rows compared as
    tensors the lowest Cosine and the largest MaxAbsErr, for rows compared by statistics the largest
    MaxAbsErr lower bound and the largest relative statistic difference (a selection of existing rows, no new
    numbers); rows of equal keys keep their execution order (``sorted(...)[:limit]``, so a shorter list is a
    prefix of a longer one).
    """
    rows = [
        (ui, r) for ui, u in enumerate(comparison.units) for r in u.rows
        if r.verdict == "fail" or (r.differs and r.verdict != "skip")
    ]
    if limit < 0:
        return sorted(rows, key=lambda item: _disagreement_key(item[1]))[:limit]
    return heapq.nsmallest(limit, rows, key=lambda item: _disagreement_key(item[1]))  # = sorted(...)[:limit]


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
        self._ranking: tuple[int, list[tuple[int, ComparisonRow]]] | None = None

    @classmethod
    def of(cls, comparison: Comparison, facts: ReportFacts | None) -> ReportFacts:
        """``facts`` when it was made for ``comparison``, else new facts for it."""
        return facts if facts is not None and facts.comparison is comparison else cls(comparison)

    def compared_counts(self) -> tuple[int, tuple[int, ...]]:
        """:func:`compared_counts` of the comparison."""
        if self._counts is None:
            self._counts = compared_counts(self.comparison)
        return self._counts

    def largest_disagreements(self, limit: int) -> list[tuple[int, ComparisonRow]]:
        """:func:`select_largest_disagreements` of the comparison; a shorter list is taken from a longer one
        already ranked (the prefix of a stable sort)."""
        if limit < 0:
            return select_largest_disagreements(self.comparison, limit)
        if self._ranking is not None:
            ranked_limit, ranked = self._ranking
            if limit <= ranked_limit or len(ranked) < ranked_limit:
                return ranked[:limit]
        ranked = select_largest_disagreements(self.comparison, limit)
        self._ranking = (limit, ranked)
        return list(ranked)


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
