"""Helpers shared by the renderers: number formatting, row selection, the metric plotted as "the error".

Nothing here computes a new number: numbers are formatted, and rows of the Comparison are selected
or ordered by the values they already carry.
"""

from __future__ import annotations

import math

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


def _disagreement_key(row: ComparisonRow) -> tuple[float, ...]:
    """Sort key, most disagreeing first: verdict severity, then the lowest Cosine and the largest
    MaxAbsErr (tensor rows), or the largest relative statistic difference (statistics rows)."""
    cos = row.metric("Cosine")
    mae = row.metric("MaxAbsErr")
    rel = [v for v in (row.metric(k) for k in _REL_STATS) if v is not None and not math.isnan(v)]
    return (
        _SEVERITY.get(row.verdict, 4),
        cos if cos is not None and not math.isnan(cos) else 2.0,
        -(mae if mae is not None and not math.isnan(mae) else 0.0),
        -(max(rel) if rel else 0.0),
    )


def select_largest_disagreements(comparison: Comparison, limit: int = TOP_ROWS) -> list[tuple[int, ComparisonRow]]:
    """The ``limit`` matched rows whose two sides disagree most, as ``(unit index, row)``, worst first.

    Only rows whose values differ are candidates; the order is by verdict severity, then the lowest
    Cosine, the largest MaxAbsErr, the largest relative statistic difference (a selection of existing
    rows, no new numbers).
    """
    rows = [(ui, r) for ui, u in enumerate(comparison.units) for r in u.rows if r.differs and r.verdict != "skip"]
    rows.sort(key=lambda item: _disagreement_key(item[1]))
    return rows[:limit]


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
