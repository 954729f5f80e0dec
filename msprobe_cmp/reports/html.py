"""One self-contained HTML report of a :class:`~msprobe_cmp.comparator.compare.Comparison`.

The page references no external resource (it opens offline, from a CI artifact or a mail).  The
summary (verdict, counts, pairing, thresholds, first divergent / failing row, what was not
comparable: rows of a non-comparable class, matched rows a tensor / md5 comparison could judge by their
statistics only, and matched rows with nothing to compare), the largest disagreements (each with its reasons,
short notes and every other name of its tensor) and the plots (inline SVG, :mod:`msprobe_cmp.reports.plots`) are
rendered by jinja2 with autoescaping on.  The rows, the cell tree and the call stacks travel as one JSON document in a
``<script type="application/json">`` block (:func:`render_script_json`: ``<``, ``>`` and ``&`` are
written as ``\\u003c`` ..., so no text from a dump can close the block), which the page's own inline
script turns into a sortable, filterable, paginated table; its DOM holds one page of rows, so the
page stays responsive with 100,000 rows and more.  The script inserts text with ``textContent`` only.

Nothing is computed here: numbers are formatted (6 significant digits in the page; full precision
in comparison.json), and rows are selected.  Large dumps are capped (:data:`MAX_ROWS`,
:data:`MAX_STACK_CHARS`); the page says what it left out.  A row's reasons, notes and side summaries printed
outside the row table (largest disagreements, first divergent / failing row, "Not comparable") are cut to
:data:`~msprobe_cmp.reports.common.REASON_CHARS` characters + "…"; the row's details keep them whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from msprobe_cmp.comparator.compare import VERDICTS, Comparison, ComparisonRow, SideSummary
from msprobe_cmp.comparator.matching import MATCH_CLASSES
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.reports.common import (
    ALSO_NAMES_LISTED,
    ALSO_NAMES_SHOWN,
    ARGUMENTS_SHOWN,
    RANKING,
    REASON_CHARS,
    TOP_ROWS,
    ReportFacts,
    cut_text,
    differing_arguments,
    dumps_compact,
    format_number,
    format_side,
    origin_line,
    select_largest_disagreements,
)
from msprobe_cmp.reports.plots import render_histogram_svg, render_scatter_svg, render_trace_svg

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

#: At most this many rows are embedded in the page (in execution order; every failing row beyond the
#: cap is kept too).  The rest are in comparison.json / comparison.csv, and the page says so.
MAX_ROWS = 250_000

#: At most this many characters of call-stack text are embedded; stacks of later entries are left out.
MAX_STACK_CHARS = 8_000_000

#: How many rows of each non-comparable class the summary lists by name.
NOT_COMPARABLE_EXAMPLES = 10

#: Classes of rows whose values could not be compared, and why (for the summary).
NOT_COMPARABLE_WHY = {
    "only_in_a": "the entry or argument exists in A (target) only",
    "only_in_b": "the entry or argument exists in B (baseline) only",
    "shape_mismatch": "the two sides' shapes differ, so values cannot be paired element by element",
    "dtype_mismatch": "the two sides' dtypes cannot be compared",
    "not_captured": "a side recorded a placeholder without data",
}

#: The "Not comparable" table's label of the matched rows judged by their statistics only
#: (:func:`~msprobe_cmp.reports.common.judged_by_statistics`).
STATISTICS_ONLY_CLASS = "matched, judged by statistics only"

#: The "Not comparable" table's label of the matched rows with nothing to compare, verdict skip
#: (:func:`~msprobe_cmp.reports.common.matched_not_compared`).
NOTHING_COMPARED_CLASS = "matched, nothing to compare"

#: The largest-disagreements table shows a row's notes under its name when they are at most this long together.
SHORT_NOTES_CHARS = 200

_DIRECTIONS = ("forward", "backward", "other")


def format_full(value: float | None) -> str:
    """Full-precision text of a number (``repr``), for tooltips."""
    return "" if value is None else repr(value)


def render_script_json(data: object) -> Markup:
    """``data`` as JSON text safe inside ``<script type="application/json">``.

    ``<``, ``>``, ``&`` and the JavaScript line separators U+2028/U+2029 are written as ``\\uXXXX``
    escapes (still the same JSON value), so no string can close the script element or open a comment;
    non-finite numbers must already be strings (``allow_nan=False``).
    """
    text = dumps_compact(data)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return Markup(text)  # escaped above for the script-data context


def _page_number(x: float | None) -> float | str | None:
    """A number as the page shows it: 6 significant digits (as :func:`format_number`), non-finite as text."""
    if x is None or isinstance(x, int):
        return x
    if x != x or x in (math.inf, -math.inf):
        return format_number(x)
    r = float(f"{x:.6g}")
    if r != x and r in (0.0, 1.0, -1.0):
        r = float(f"{x:.12g}")
    return r


#: ``10.0**k`` for k = 0..22: exactly representable (10**22 < 2**53 * 2**22), built from exact integers.
_EXACT_POW10 = np.array([float(10**k) for k in range(23)])


def page_numbers(values: list[Any]) -> list[Any]:
    """:func:`_page_number` of every item of ``values`` (floats, None, ints), the same values bit for bit, in bulk.

    Most finite floats are rounded to 6 significant digits with numpy: with ``k = 5 - floor(log10|x|)`` and
    ``|k| <= 22``, ``t = x * 10**k`` (or ``x / 10**-k``) is one correctly rounded operation, off from the exact
    product by at most half an ulp of ``t`` (< 2**-33 for ``|t| < 2**20``).  When ``t`` lies in
    ``[100000.5, 999999.4]`` and is more than 1e-9 away from the midpoint of two integers, ``m = rint(t)`` is the
    exact product rounded to 6 significant digits, and ``m / 10**k`` (or ``m * 10**-k``), one correctly rounded
    operation on two exact floats, is exactly the float nearest the decimal ``m * 10**-k``, which is what
    ``float(f"{x:.6g}")`` returns (Python's ``float`` of a decimal text is correctly rounded).  Such an ``m`` is
    never ±100000, so the ``.12g`` case of :func:`_page_number` (a result of exactly 0 or ±1) cannot arise.
    Zeros are returned as they are (``.6g`` keeps their sign).  Every other item (None, ints, NaN, ±Inf, float
    subclasses, exponents beyond ±17, values near a power of ten or near a rounding tie) goes through
    :func:`_page_number` itself.
    """
    n = len(values)
    if not n:
        return []
    x = np.array(values, dtype=np.float64)  # None -> NaN (then the exact path); ints are handled below
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        regular = np.isfinite(x) & (ax > 0.0)
        k = 5.0 - np.floor(np.log10(np.where(regular, ax, 1.0)))
        regular &= np.abs(k) <= 22.0
        ki = np.where(regular, k, 0.0).astype(np.int64)
        p = _EXACT_POW10[np.abs(ki)]
        up = ki >= 0
        t = np.where(up, x * p, x / p)
        at = np.abs(t)
        m = np.rint(t)
        regular &= (at >= 100000.5) & (at <= 999999.4) & (np.abs(np.abs(t - m) - 0.5) > 1e-9)
        r = np.where(up, m / p, m * p)
    r = np.where(regular, r, x)
    out: list[Any] = r.tolist()
    exact = ~regular & (ax != 0.0)  # zeros are kept as they are; NaN (None too) compares unequal to 0
    kinds = set(map(type, values))
    if kinds - {float, type(None)}:  # ints, bools or float subclasses: each goes the exact way
        exact |= np.fromiter((type(v) is not float for v in values), dtype=bool, count=n)
    for i in np.flatnonzero(exact).tolist():
        out[i] = _page_number(values[i])
    return out


@dataclass
class _Strings:
    """Interned strings of the page data: each distinct string is written once."""

    table: list[str]
    index: dict[str, int]

    def ref(self, s: str | None) -> int:
        if s is None:
            return -1
        k = self.index.get(s)
        if k is None:
            k = self.index[s] = len(self.table)
            self.table.append(s)
        return k


def _family_and_direction(entry: str) -> tuple[str, str]:
    """The API family (name prefix) and the direction of an entry, for the page's filters."""
    parsed = parse_name(entry)
    if parsed.kind == "parameters_grad":
        return "parameters_grad", "backward"
    direction = parsed.direction if parsed.direction in ("forward", "backward") else "other"
    return parsed.prefix or "other", direction


class _Interned(dict[Any, int]):
    """``string -> index`` into ``table``; a missing string is appended to ``table`` when first looked up, and
    None is -1.  ``interned[x]`` is :meth:`_Strings.ref` done by a dictionary lookup."""

    def __init__(self, table: list[str]) -> None:
        super().__init__()
        self.table = table
        self[None] = -1

    def __missing__(self, key: str) -> int:
        k = self[key] = len(self.table)
        self.table.append(key)
        return k


def build_page_data(comparison: Comparison, max_rows: int = MAX_ROWS,
                    max_stack_chars: int = MAX_STACK_CHARS) -> dict[str, Any]:
    """The JSON document the page's script renders: rows, cells, stacks (interned strings, numbers as
    the page shows them), plus what was left out.

    Each row is a list (see ``ROW_FIELDS`` in the template's script); strings are indexes into
    ``strings``; stacks are lists of indexes into ``frames``.  A first pass picks the rows and collects
    their numbers, which are rounded in bulk (:func:`page_numbers`); the second pass builds the rows.
    """
    s = _Strings([], {})
    frames = _Strings([], {})
    metric_keys: list[str] = []
    metric_index: dict[str, int] = {}
    total = 0
    kept: list[tuple[int, ComparisonRow, tuple[str, ...]]] = []
    rows_left_out = 0
    numbers: list[Any] = []
    extend = numbers.extend
    known_keys: set[tuple[str, ...]] = set()
    no_keys: tuple[str, ...] = ()
    for ui, u in enumerate(comparison.units):
        total += len(u.rows)
        for r in u.rows:
            if r.metrics:
                keys, values = zip(*r.metrics, strict=True)
                if keys not in known_keys:
                    known_keys.add(keys)
                    for k in keys:
                        if k not in metric_index:
                            metric_index[k] = len(metric_keys)
                            metric_keys.append(k)
            else:
                keys = values = no_keys
            if len(kept) >= max_rows and r.verdict != "fail":
                rows_left_out += 1
                continue
            kept.append((ui, r, keys))
            # in the order the second pass takes them: metrics, then A's and B's statistics
            extend(values)
            a, b = r.a, r.b
            if a is not None:
                extend((a.max, a.min, a.mean, a.norm))
            if b is not None:
                extend((b.max, b.min, b.mean, b.norm))
    number_iter = iter(page_numbers(numbers))
    next_number = number_iter.__next__
    stacks: list[list[int]] = []
    stack_of: dict[tuple[str, ...], int] = {}
    stack_chars = 0
    stacks_left_out = 0
    families: dict[str, str] = {}
    family_of: dict[str, tuple[str, int]] = {}
    rows: list[list[Any]] = []
    ref = _Interned(s.table)
    s.index = ref  # the same mapping, with None -> -1

    def stack_ref(stack: tuple[str, ...]) -> int:
        """Index of ``stack`` in ``stacks`` (interned), -1 when empty or over the text budget."""
        nonlocal stack_chars, stacks_left_out
        if not stack:
            return -1
        found = stack_of.get(stack)
        if found is None:
            size = sum(len(f) for f in stack if f not in frames.index)
            if stack_chars + size > max_stack_chars:
                stacks_left_out += 1
                return -1
            stack_chars += size
            found = stack_of[stack] = len(stacks)
            stacks.append([frames.ref(f) for f in stack])
        return found

    stack_by_id: dict[int, int] = {}  # id(stack tuple) -> its index, for stacks already kept

    def stack_id_of(stack: tuple[str, ...]) -> int:
        found = stack_by_id.get(id(stack))
        if found is None:
            found = stack_ref(stack)
            if found >= 0:
                stack_by_id[id(stack)] = found
        return found

    shapes: dict[tuple[int, ...], str] = {}

    def side_data(side: SideSummary | None) -> list[Any] | None:
        """:func:`_side_data`, its numbers taken from the bulk pass."""
        if side is None:
            return None
        dtype_ref = ref[side.dtype]  # before the shape: strings are numbered in the order they are met
        shape = side.shape
        if shape is None:
            shape_ref = -1
        else:
            text = shapes.get(shape)
            if text is None:
                text = shapes[shape] = str(list(shape))
            shape_ref = ref[text]
        return [side.kind, dtype_ref, shape_ref, next_number(), next_number(), next_number(), next_number(),
                ref[side.md5], ref[side.data_name], ref[side.value]]

    class_index = {c: k for k, c in enumerate(MATCH_CLASSES)}
    verdict_index = {v: k for k, v in enumerate(VERDICTS)}
    direction_index = {d: k for k, d in enumerate(_DIRECTIONS)}
    n_metrics = len(metric_keys)
    positions: dict[tuple[str, ...], tuple[int, ...] | None] = {}  # None: the keys are metric_keys, in order
    for keys in known_keys:
        pos = tuple(metric_index[k] for k in keys)
        positions[keys] = None if pos == tuple(range(n_metrics)) else pos
    positions[no_keys] = ()
    chain_ids: dict[str, int] = {}
    unit_index = -1
    parent_chains: Any = {}
    append = rows.append
    for ui, r, keys in kept:
        if ui != unit_index:
            unit_index, chain_ids = ui, {}
            parent_chains = comparison.units[ui].parent_chains
        entry = r.entry_name
        stack = r.stack
        stack_id = stack_id_of(stack)
        stack_b = r.stack_b
        stack_b_id = -2 if stack_b is stack or stack_b == stack else stack_id_of(stack_b)  # -2: the same as A's
        chain_id = chain_ids.get(entry)
        if chain_id is None:
            chain = parent_chains.get(entry, ())
            chain_id = chain_ids[entry] = ref[" < ".join(chain)] if chain else -1
        row_positions = positions[keys]
        if row_positions is None:
            metrics = list(islice(number_iter, n_metrics))
        else:
            metrics = [None] * n_metrics
            for k in row_positions:
                metrics[k] = next_number()
        entry_ref = ref[entry]
        arg_ref = ref[r.arg_path]
        family = family_of.get(entry)
        if family is None:
            name, direction = _family_and_direction(entry)
            families[entry] = name
            family = family_of[entry] = (name, direction_index[direction])
        differs = r.differs
        reasons, notes = r.reasons, r.notes
        append([
            ui,
            r.index,
            entry_ref,
            arg_ref,
            class_index[r.match_class],
            verdict_index[r.verdict],
            -1 if differs is None else int(differs),
            ref[family[0]],
            family[1],
            ref[r.parent_cell],
            stack_id,
            side_data(r.a),
            side_data(r.b),
            metrics,
            [ref[x] for x in reasons] if reasons else [],
            [ref[x] for x in notes] if notes else [],
            ref[r.name_b if r.arg_path_b else r.entry_name_b],
            r.compared_by,
            chain_id,
            stack_b_id,
        ])
    cells = []
    for u in comparison.units:
        position = {c.cell: k for k, c in enumerate(u.cells)}
        cells.append([
            [
                s.ref(c.cell),
                position.get(c.parent, -1) if c.parent is not None else -1,
                c.depth,
                c.rows,
                c.failing,
                c.differing,
                _page_number(c.min_cosine),
                _page_number(c.max_abs_err),
                VERDICTS.index(c.worst_verdict),
                -1 if c.first_divergent is None else c.first_divergent,
            ]
            for c in u.cells
        ])
    left_out = []
    if rows_left_out:
        left_out.append(f"{rows_left_out} of {total} rows are not in this page (it holds at most {max_rows} rows "
                        "in execution order, and every failing row); comparison.json and comparison.csv hold them all")
    if stacks_left_out:
        left_out.append(f"the call stacks of {stacks_left_out} entries are not in this page (at most "
                        f"{max_stack_chars} characters of stack text are kept); comparison.json holds them")
    return {
        "units": [[u.unit_a.label, u.unit_b.label] for u in comparison.units],
        "classes": list(MATCH_CLASSES),
        "verdicts": list(VERDICTS),
        "directions": list(_DIRECTIONS),
        "metrics": metric_keys,
        "columns": [[h, metric_index.get(k, -1)] for h, k in HTML_COLUMNS[comparison.mode]],
        "families": sorted(set(families.values())),
        "strings": s.table,
        "frames": frames.table,
        "stacks": stacks,
        "rows": rows,
        "cells": cells,
        "total_rows": total,
        "left_out": left_out,
    }


def _dtype(side: SideSummary | None) -> str:
    if side is None:
        return "–"
    return side.dtype or "null"


def capped_text(text: str | tuple[str, ...] | list[str]) -> Markup:
    """A row's text printed outside the row table, escaped: ``text`` (reasons or notes are joined with "; ") cut to
    :data:`~msprobe_cmp.reports.common.REASON_CHARS` characters + "…" (:func:`~msprobe_cmp.reports.common.cut_text`),
    then a muted remark that it was cut (the row's details hold the whole text)."""
    whole = text if isinstance(text, str) else "; ".join(text)
    shown = escape(cut_text(whole))
    if len(whole) > REASON_CHARS:
        shown += Markup(' <span class="muted cut">(cut to {} characters: the row\'s details hold the whole text)'
                        "</span>").format(REASON_CHARS)
    return shown


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
    env.filters["capped"] = capped_text
    return env


def _not_comparable(comparison: Comparison, facts: ReportFacts
                    ) -> list[tuple[str, int, str, list[tuple[int, ComparisonRow]]]]:
    """Per non-comparable class with rows: (class, row count, why, a few example rows); then the matched rows whose
    values the mode could not compare, judged by their statistics only (:data:`STATISTICS_ONLY_CLASS`), and the
    matched rows with nothing to compare (:data:`NOTHING_COMPARED_CLASS`)."""
    counts: dict[str, int] = dict(comparison.counts)
    out = []
    for cls, why in NOT_COMPARABLE_WHY.items():
        n = counts.get(cls, 0)
        if not n:
            continue
        examples: list[tuple[int, ComparisonRow]] = []
        for ui, u in enumerate(comparison.units):
            for r in u.rows:
                if r.match_class == cls:
                    examples.append((ui, r))
                    if len(examples) >= NOT_COMPARABLE_EXAMPLES:
                        break
            if len(examples) >= NOT_COMPARABLE_EXAMPLES:
                break
        out.append((cls, n, why, examples))
    stats_only = facts.judged_by_statistics()
    if stats_only.total:
        out.append((STATISTICS_ONLY_CLASS, stats_only.total, stats_only.why,
                    list(stats_only.examples[:NOT_COMPARABLE_EXAMPLES])))
    nothing = facts.matched_not_compared()
    if nothing.total:
        out.append((NOTHING_COMPARED_CLASS, nothing.total, nothing.why,
                    list(nothing.examples[:NOT_COMPARABLE_EXAMPLES])))
    return out


def render_html(comparison: Comparison, *, max_rows: int = MAX_ROWS, max_stack_chars: int = MAX_STACK_CHARS,
                facts: ReportFacts | None = None) -> str:
    """The comparison as one self-contained HTML page (summary, plots, cell tree, every row).

    Args:
        comparison: the finished comparison.
        max_rows: at most this many rows are embedded (plus every failing row); the page says how many
            were left out.
        max_stack_chars: budget of call-stack text embedded in the page.
        facts: what the reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`),
            made here when not given.
    """
    facts = ReportFacts.of(comparison, facts)
    t = comparison.rules.default
    floor = "eps of the coarser dtype" if t.relative_floor is None else format_number(t.relative_floor)
    thresholds = [
        ("fail when Cosine <", format_number(t.cosine_fail_below)),
        (f"fail when Cosine < {format_number(t.cosine_suspect_below)} and MaxAbsErr >",
         format_number(t.max_abs_err_suspect_above)),
        ("fail when MaxAbsErr (or its statistics bound) >", format_number(t.max_abs_err_fail_above)),
        ("warning when |stat diff| / max(|A|, |B|) >", format_number(t.stat_warning_ratio)),
        ("relative-error floor", floor),
        ("no verdict when matched rows are below (share)", format_number(comparison.rules.min_matched_share)),
    ]
    if comparison.input_noise is not None:  # a --noise rerun was compared: only then is the noise factor in force
        thresholds.append(("--noise: failures within this many times the run-to-run noise are warnings",
                           format_number(comparison.rules.noise_factor)))
    loc = comparison.rules.localisation
    thresholds += [
        ("a non-tensor argument that differs is a", comparison.rules.argument_differs),
        ("likely origin: an output's relative error above this many times its inputs'", format_number(loc.jump_ratio)),
        ("rounding floor, ulps of the dtype (one framework's kernels / two frameworks')",
         f"{format_number(loc.same_kernel_noise_ulps)} / {format_number(loc.cross_kernel_noise_ulps)}"),
        ("rounding-noise magnitude: below this many ulps of its call's largest tensor",
         format_number(loc.noise_magnitude_ulps)),
    ]
    data = build_page_data(comparison, max_rows, max_stack_chars)
    template = _environment().get_template("report.html.j2")
    compared, unit_compared = facts.compared_counts()
    return template.render(
        c=comparison,
        compared=compared,
        unit_compared=unit_compared,
        columns=HTML_COLUMNS[comparison.mode],
        thresholds=thresholds,
        largest=facts.disagreements(TOP_ROWS),
        also_shown=ALSO_NAMES_SHOWN,
        also_listed=ALSO_NAMES_LISTED,
        short_notes=SHORT_NOTES_CHARS,
        ranking=RANKING.get(comparison.mode, RANKING["md5"]),
        top_rows=TOP_ROWS,
        highlights=(
            ("First divergent row", comparison.first_divergent),
            ("First failing row", comparison.first_failing),
        ),
        not_comparable=_not_comparable(comparison, facts),
        origin_line=origin_line(comparison),
        arguments=differing_arguments(comparison),
        arguments_shown=ARGUMENTS_SHOWN,
        examples_cap=NOT_COMPARABLE_EXAMPLES,
        left_out=data["left_out"],
        data_json=render_script_json(data),
        plots=(render_trace_svg(comparison, facts), render_scatter_svg(comparison, facts),
               render_histogram_svg(comparison, facts)),
    )


__all__ = [
    "HTML_COLUMNS",
    "MAX_ROWS",
    "MAX_STACK_CHARS",
    "NOTHING_COMPARED_CLASS",
    "STATISTICS_ONLY_CLASS",
    "build_page_data",
    "format_full",
    "format_number",
    "format_side",
    "render_html",
    "render_script_json",
    "select_largest_disagreements",
]
