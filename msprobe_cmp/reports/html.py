"""One self-contained HTML report of a :class:`~msprobe_cmp.comparator.compare.Comparison`.

The page holds its CSS and a few lines of JS inline (filtering rows by verdict and by name) and
references no external resource, so it can be mailed or archived as a single file.  Rendering uses
jinja2 with autoescaping on: entry names, reasons and stacks from dump files are text, never markup.
Nothing is computed here; numbers are only formatted.
"""

from __future__ import annotations

import math
from dataclasses import fields

from jinja2 import Environment, PackageLoader, select_autoescape

from msprobe_cmp.comparator.compare import Comparison, ComparisonRow, SideSummary

#: Metric columns of the row table per mode: (header, row metric name).
HTML_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "tensor": (
        ("Cosine", "Cosine"),
        ("MaxAbsErr", "MaxAbsErr"),
        ("MaxRelativeErr", "MaxRelativeErr"),
        ("1‰ ratio", "One Thousandth Err Ratio"),
        ("5‰ ratio", "Five Thousandths Err Ratio"),
        ("EucDist", "EucDist"),
        ("Max diff", "Max diff"),
        ("Min diff", "Min diff"),
        ("Mean diff", "Mean diff"),
        ("L2norm diff", "L2norm diff"),
    ),
    "statistics": (
        ("Max diff", "Max diff"),
        ("Min diff", "Min diff"),
        ("Mean diff", "Mean diff"),
        ("L2norm diff", "L2norm diff"),
        ("Max rel", "Max relative diff"),
        ("Min rel", "Min relative diff"),
        ("Mean rel", "Mean relative diff"),
        ("L2norm rel", "L2norm relative diff"),
        ("MaxAbsErr ≥", "MaxAbsErr lower bound"),
    ),
    "md5": (
        ("Max diff", "Max diff"),
        ("Min diff", "Min diff"),
        ("Mean diff", "Mean diff"),
        ("L2norm diff", "L2norm diff"),
    ),
}


def format_number(value: float | int | None) -> str:
    """Short text of a number: 6 significant digits, more when that would round to 0 or ±1 exactly."""
    if value is None:
        return "–"
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


def format_full(value: float | None) -> str:
    """Full-precision text of a number (``repr``), for tooltips."""
    return "" if value is None else repr(value)


def format_side(side: SideSummary | None) -> str:
    """One-line summary of what a side recorded."""
    if side is None:
        return "absent"
    if side.kind == "null":
        return "null"
    if side.kind == "value":
        return f"{side.dtype} {side.value}"
    parts = [f"{side.dtype} {list(side.shape or ())}"]
    stats = ("max", "min", "mean", "norm")
    parts += [f"{f.name}={format_number(getattr(side, f.name))}" for f in fields(side) if f.name in stats]
    if side.md5:
        parts.append(f"md5={side.md5}")
    return " ".join(parts)


def _dtype(side: SideSummary | None) -> str:
    if side is None:
        return "–"
    return side.dtype or "null"


def _shape(side: SideSummary | None) -> str:
    if side is None or side.kind == "null":
        return "–"
    if side.kind == "value":
        return f"= {side.value}"
    return str(list(side.shape or ()))


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("msprobe_cmp.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True, enabled_extensions=("html", "j2")),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = format_number
    env.filters["full"] = format_full
    env.filters["side"] = format_side
    env.filters["dtype"] = _dtype
    env.filters["shape"] = _shape
    return env


#: How many rows the "largest disagreements" table lists.
TOP_ROWS = 15

_SEVERITY = {"fail": 0, "warning": 1, "pass": 2, "skip": 3}
_REL_STATS = ("Max relative diff", "Min relative diff", "Mean relative diff", "L2norm relative diff")


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

    Only rows whose values differ are candidates; the order is by :func:`_disagreement_key` (a
    selection of existing rows, no new numbers).
    """
    rows = [(ui, r) for ui, u in enumerate(comparison.units) for r in u.rows if r.differs and r.verdict != "skip"]
    rows.sort(key=lambda item: _disagreement_key(item[1]))
    return rows[:limit]


def render_html(comparison: Comparison) -> str:
    """The comparison as one self-contained HTML page (header, pairing, first divergence, all rows)."""
    t = comparison.rules.default
    suspect = f"{format_number(t.cosine_suspect_below)} and MaxAbsErr > {format_number(t.max_abs_err_suspect_above)}"
    floor = "eps of the coarser dtype" if t.relative_floor is None else format_number(t.relative_floor)
    thresholds = (
        ("fail when Cosine <", format_number(t.cosine_fail_below)),
        ("fail when Cosine <", suspect),
        ("fail when MaxAbsErr (or its statistics bound) >", format_number(t.max_abs_err_fail_above)),
        ("warning when |stat diff| / max(|A|, |B|) >", format_number(t.stat_warning_ratio)),
        ("relative-error floor", floor),
        ("no verdict when matched rows are below (share)", format_number(comparison.rules.min_matched_share)),
    )
    template = _environment().get_template("report.html.j2")
    return template.render(
        c=comparison,
        columns=HTML_COLUMNS[comparison.mode],
        thresholds=thresholds,
        largest=select_largest_disagreements(comparison),
        highlights=(
            ("First divergent row", comparison.first_divergent),
            ("First failing row", comparison.first_failing),
        ),
    )
