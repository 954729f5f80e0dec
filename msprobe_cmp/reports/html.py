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

A comparison of several units with more than :data:`PAGE_ROWS` rows is split (:func:`html_pages`): report.html is
an aggregate page (summary, plots, largest disagreements, the units with a link each, no row data) and each unit
gets a page of its own under :data:`UNIT_PAGES_DIR`, the one-unit page of :func:`unit_comparison` with a link back,
made by the same code as any one-unit page and written one unit at a time (docs/contracts.md, "report.html of one
unit, of several, of many").

Nothing is computed here: numbers are formatted (6 significant digits in the page; full precision
in comparison.json), and rows are selected.  Large dumps are capped (:data:`MAX_ROWS`,
:data:`MAX_STACK_CHARS`); the page says what it left out.  A row's reasons, notes and side summaries printed
outside the row table (largest disagreements, first divergent / failing row, "Not comparable") are cut to
:data:`~msprobe_cmp.reports.common.REASON_CHARS` characters + "…"; the row's details keep them whole.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain as _chain
from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from msprobe_cmp.comparator.compare import (
    VERDICTS,
    Comparison,
    ComparisonRow,
    SideSummary,
    unit_comparison,
)
from msprobe_cmp.comparator.dtypes import FLOAT_EPS
from msprobe_cmp.comparator.localise import MAX_FLOOR, rounding_floor
from msprobe_cmp.comparator.matching import MATCH_CLASSES
from msprobe_cmp.comparator.rollup import paired_cells
from msprobe_cmp.comparator.rowtable import (
    ABSENT,
    COMPARED_BY,
    FAIL,
    METRIC_ABSENT,
    METRIC_INDEX,
    METRIC_NAMES,
    METRIC_VALUE,
    SIDE_KINDS,
    RowTable,
)
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.reports.common import (
    ALSO_NAMES_LISTED,
    ALSO_NAMES_SHOWN,
    ARGUMENTS_SHOWN,
    CHUNK_ROWS,
    RANKING,
    REASON_CHARS,
    TOP_ROWS,
    ReportFacts,
    compact_encoder,
    cut_text,
    differing_arguments,
    dumps_compact,
    dumps_standard,
    format_number,
    format_side,
    origin_line,
    select_largest_disagreements,
    spliced_json,
)
from msprobe_cmp.reports.plots import render_histogram_svg, render_scatter_svg, render_trace_svg
from msprobe_cmp.reports.tables import FloatSpelling, float_rows, int_rows, joined_rows

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

#: The most rows report.html holds for a comparison of several units.  Beyond it report.html is an aggregate page
#: (summary, plots, largest disagreements, the units) and each unit's rows are on a page of their own in
#: :data:`UNIT_PAGES_DIR` (:func:`unit_page_paths`), written one at a time, so that neither a browser nor the
#: writer holds every unit's rows.  One unit is always one page (its rows capped by :data:`MAX_ROWS`).
PAGE_ROWS = 100_000

#: The directory, beside report.html, of the units' own pages of a split comparison.
UNIT_PAGES_DIR = "report_units"

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


#: What :func:`render_script_json` writes as an escape: ``<``, ``>``, ``&`` and the JavaScript line separators.
_SCRIPT_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def _script_safe(text: str) -> str:
    """JSON text with :data:`_SCRIPT_ESCAPES` applied (character by character: a text in pieces may be escaped piece
    by piece)."""
    for ch, esc in _SCRIPT_ESCAPES:
        text = text.replace(ch, esc)
    return text


def render_script_json(data: object) -> Markup:
    """``data`` as JSON text safe inside ``<script type="application/json">``.

    ``<``, ``>``, ``&`` and the JavaScript line separators U+2028/U+2029 are written as ``\\uXXXX``
    escapes (still the same JSON value), so no string can close the script element or open a comment;
    non-finite numbers must already be strings (``allow_nan=False``).
    """
    return Markup(_script_safe(dumps_compact(data)))  # escaped for the script-data context


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
    rounded, exact = _page_round(x)
    out: list[Any] = rounded.tolist()
    kinds = set(map(type, values))
    if kinds - {float, type(None)}:  # ints, bools or float subclasses: each goes the exact way
        exact |= np.fromiter((type(v) is not float for v in values), dtype=bool, count=n)
    for i in np.flatnonzero(exact).tolist():
        out[i] = _page_number(values[i])
    return out


def _page_round(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`page_numbers`' bulk rounding of the float64 array ``x`` (1-D): the rounded values (float64, as ``x``),
    and the mask of the items that must go through :func:`_page_number` instead."""
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
    exact = ~regular & (ax != 0.0)  # zeros are kept as they are; NaN compares unequal to 0
    return r, exact


def _page_values(values: np.ndarray) -> np.ndarray:
    """``values`` (float64, any shape) as the page shows them (:func:`_page_number` of each), as float64 of the same
    shape: the finite ones rounded (in bulk: :func:`_page_round`), NaN and ±Inf as they are (the page writes them as
    the text :func:`_page_number` gives them: :func:`_page_spelling`)."""
    flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    rounded, exact = _page_round(flat)
    for i in np.flatnonzero(exact & np.isfinite(flat)).tolist():
        rounded[i] = _page_number(float(flat[i]))
    return rounded.reshape(np.shape(values))


def _page_spelling(dumps: Callable[[Any], str]) -> FloatSpelling:
    """How the page data written by the encoder ``dumps`` spells a number (:func:`_page_values`): as ``dumps`` writes
    the float, or the text :func:`_page_number` gives NaN and ±Inf; ``null`` where there is none."""
    return FloatSpelling(dumps is dumps_standard, dumps(format_number(math.nan)), dumps(format_number(math.inf)),
                         dumps(format_number(-math.inf)), "null")


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


#: At most this many bytes of a unit page's file name before ``.html`` (file systems allow 255 bytes a name, and
#: the temporary file written first adds ``.`` before it and ``.<pid>.<n>.tmp`` after it, cutting the name if need be).
PAGE_NAME_BYTES = 200


def _page_name(label: str) -> str:
    """``label`` as a file name: every character other than ``A-Z a-z 0-9 . _ -`` written as ``_``, no leading
    ``.`` or ``-`` (a name a shell would read as an option), at most :data:`PAGE_NAME_BYTES` bytes (a longer one is
    cut and ends with ``~`` and 8 hex digits of its SHA-256, so two long labels stay apart)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", label).lstrip(".-").rstrip(".") or "unit"
    if len(name) > PAGE_NAME_BYTES:
        digest = hashlib.sha256(name.encode("ascii")).hexdigest()[:8]
        name = f"{name[:PAGE_NAME_BYTES - 9]}~{digest}"
    return name


def unit_page_paths(comparison: Comparison, page_rows: int | None = None) -> list[str]:
    """The units' own pages of ``comparison``, one path per unit in unit order, relative to the output directory
    (``"report_units/step0_rank3.html"``: :data:`UNIT_PAGES_DIR`, the unit's A label, and its B label when it
    differs, as a file name (:func:`_page_name`); a name taken by an earlier unit, ignoring case, gets ``-<unit
    index>``, and ``-<unit index>-<k>`` for the first k that is free); ``[]`` when report.html holds every row: one
    unit, or at most ``page_rows`` rows in all (default :data:`PAGE_ROWS`).  Read from the units' lengths only."""
    limit = PAGE_ROWS if page_rows is None else page_rows
    units = comparison.units
    if len(units) < 2 or sum(len(u.rows) for u in units) <= limit:
        return []
    paths: list[str] = []
    taken: set[str] = set()
    for ui, u in enumerate(units):
        label = u.unit_a.label if u.unit_a.label == u.unit_b.label else f"{u.unit_a.label}_vs_{u.unit_b.label}"
        name = _page_name(label)
        if name.casefold() in taken:
            base, k = f"{name}-{ui}", 0
            name = base
            while name.casefold() in taken:
                k += 1
                name = f"{base}-{k}"
        taken.add(name.casefold())
        paths.append(f"{UNIT_PAGES_DIR}/{name}.html")
    return paths


@dataclass(frozen=True)
class _Back:
    """A unit's page's link back to the aggregate page: its path, and which unit of how many the page shows."""

    href: str
    unit: int
    units: int


@dataclass(frozen=True)
class _View:
    """Which page :func:`_page_chunks` renders: the whole comparison (neither field), the aggregate page of a split
    comparison (``unit_pages``: each unit's page, relative to report.html) or a unit's page (``back``)."""

    unit_pages: tuple[str, ...] = ()
    back: _Back | None = None

    def row_href(self, unit: int, row: int) -> str:
        """The link to row ``row`` of unit ``unit``: ``#row-<unit>-<row>`` in this page, or on the unit's page."""
        if self.unit_pages:
            return f"{self.unit_pages[unit]}#row-0-{row}"
        return f"#row-{unit}-{row}"


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


def _metric_keys(comparison: Comparison) -> list[str]:
    """The metric names of the page, in the order the rows first have them: the names of each row's metrics
    (:data:`~msprobe_cmp.comparator.rowtable.METRIC_NAMES` order), new ones appended, over every row of every unit."""
    keys: list[str] = []
    for u in comparison.units:
        present = u.rows.metric_state != METRIC_ABSENT  # bool [n, K]
        if not len(present):
            continue  # a unit without rows (no entries on either side)
        first = present.argmax(axis=0).tolist()  # the first row having each metric (the row of its first pattern)
        for k in sorted(np.flatnonzero(present.any(axis=0)).tolist(), key=lambda k: (first[k], k)):
            if METRIC_NAMES[k] not in keys:
                keys.append(METRIC_NAMES[k])
    return keys


def _page_side_texts(t: RowTable, s: int, rows: np.ndarray, names: list[str | None], shape_texts: list[str | None]
                     ) -> list[list[str | None]]:
    """Side ``s`` of the rows ``rows`` of ``t``, decoded for the page: its dtype, shape text, md5, file name and value
    (None where the side has none); ``names``: the table's strings with None last (code -1)."""
    sc = t.side_columns(s)
    return [
        [names[c] for c in sc.dtype[rows].tolist()],
        [shape_texts[c] for c in sc.shape[rows].tolist()],
        [names[c] for c in sc.md5[rows].tolist()],
        [names[c] for c in sc.data_name[rows].tolist()],
        [names[c] for c in sc.value[rows].tolist()],
    ]


def _int_columns(columns: list[list[int]]) -> np.ndarray:
    """int64 [m, k]: the k columns (lists of m ints each) side by side, a row a line."""
    return np.array(columns, dtype=np.int64).reshape(len(columns), -1).T.copy()


def _side_numbers(side: list[list[str | None]], number: Callable[[str | None], int]) -> np.ndarray:
    """int64 [m, 5]: ``number`` of each text of a side's five columns (:func:`_page_side_texts`), a row a line."""
    return _int_columns([list(map(number, column)) for column in side])


@dataclass
class _PageUnit:
    """One unit's kept rows of the page, their texts already numbered (indexes into the page's ``strings``, stack
    indexes into its ``stacks``), one item per kept row: what :meth:`PageData.row_texts` makes the rows of."""

    index: int
    table: RowTable
    kept: np.ndarray
    #: int64 [m, 9]: entry, argument path, family, direction, parent cell, stack, B's name, parent chain, B's stack
    numbers: np.ndarray
    reasons: np.ndarray  # the rows' reasons and notes tuple codes (int [m] each)
    notes: np.ndarray
    texts: dict[int, str]  # reasons / notes tuple code -> the JSON list of its strings' indexes
    sides: tuple[np.ndarray, np.ndarray]  # A's, B's: int64 [m, 5], the dtype, shape, md5, file name, value indexes


class PageData:
    """The JSON document the page's script renders (:func:`build_page_data`), its rows made a chunk at a time.

    Making it numbers every text of the kept rows (strings in the order the rows meet them, stacks and their frames
    likewise), which the document lists before the rows; the rows themselves, the bulk of the document, are made
    by :meth:`row_chunks` when they are written.

    Args:
        comparison: the comparison.
        max_rows: at most this many rows in execution order are kept, plus every failing row.
        max_stack_chars: budget of call-stack text kept.
    """

    def __init__(self, comparison: Comparison, max_rows: int = MAX_ROWS, max_stack_chars: int = MAX_STACK_CHARS
                 ) -> None:
        s = _Strings([], {})
        frames = _Strings([], {})
        metric_keys = _metric_keys(comparison)
        self.metric_columns = np.array([METRIC_INDEX[k] for k in metric_keys], dtype=np.int64)
        metric_index = {k: j for j, k in enumerate(metric_keys)}
        total = 0
        stacks: list[list[int]] = []
        stack_of: dict[tuple[str, ...], int] = {}
        stack_chars = 0
        stacks_left_out = 0
        families: dict[str, str] = {}
        family_of: dict[str, tuple[str, int]] = {}
        ref = _Interned(s.table)
        s.index = ref  # the same mapping, with None -> -1
        self.units: list[_PageUnit] = []

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

        shapes: dict[tuple[int, ...], str] = {}
        direction_index = {d: k for k, d in enumerate(_DIRECTIONS)}
        kept_rows = 0
        for ui, u in enumerate(comparison.units):
            t = u.rows
            n = len(t)
            kept = np.flatnonzero((np.arange(total, total + n) < max_rows) | (t.verdict == FAIL))
            total += n
            if not len(kept):
                continue
            kept_rows += len(kept)
            strings = t.strings
            table_stacks = t.stacks
            stack_ids: dict[int, int] = {}  # stack code -> its index, for stacks already kept

            def stack_id_of(code: int, stack_ids: dict[int, int] = stack_ids,
                            table_stacks: Sequence[tuple[str, ...]] = table_stacks) -> int:
                found = stack_ids.get(code)
                if found is None:
                    found = stack_ref(table_stacks[code])
                    if found >= 0:
                        stack_ids[code] = found
                return found

            shape_texts: list[str | None] = []
            for shape in t.shapes:
                text = shapes.get(shape)
                if text is None:
                    text = shapes[shape] = str(list(shape))
                shape_texts.append(text)
            shape_texts.append(None)  # code -1
            names = [*strings, None]  # code -1 -> None
            tuples = t.tuples
            parent_chains = u.parent_chains
            entries = [strings[c] for c in t.entry[kept].tolist()]
            paths = [strings[c] for c in t.arg_path[kept].tolist()]
            chain_of: dict[str, str | None] = {}
            for entry in dict.fromkeys(entries):  # each entry once
                chain = parent_chains.get(entry, ())
                chain_of[entry] = " < ".join(chain) if chain else None
                if entry not in family_of:
                    name, direction = _family_and_direction(entry)
                    families[entry] = name
                    family_of[entry] = (name, direction_index[direction])
            chains = [chain_of[e] for e in entries]
            family_names = [family_of[e][0] for e in entries]
            parents = [names[c] for c in t.parent_cell[kept].tolist()]
            reasons = t.reasons[kept].tolist()
            notes = t.notes[kept].tolist()
            names_b = [f"{names[eb] or e}.{names[pb]}" if names[pb] else names[eb]
                       for e, eb, pb in zip(entries, t.entry_b[kept].tolist(), t.arg_path_b[kept].tolist(),
                                            strict=True)]
            side_a = _page_side_texts(t, 0, kept, names, shape_texts)
            side_b = _page_side_texts(t, 1, kept, names, shape_texts)
            # Strings are numbered in the order the rows meet them: per row the parent chain, entry, argument path,
            # family, parent cell, A's dtype, shape, md5, file name and value, B's, the reasons, the notes and B's
            # name (a reasons / notes tuple stands for its strings, in order).
            met = dict.fromkeys(_chain.from_iterable(zip(
                chains, entries, paths, family_names, parents, *side_a, *side_b,
                [tuples[c] for c in reasons], [tuples[c] for c in notes], names_b, strict=True)))
            get = ref.__getitem__  # a string not met before is numbered
            for key in met:
                if type(key) is tuple:
                    for x in key:
                        get(x)
                else:
                    get(key)
            stack_column: list[int] = []
            stack_b_column: list[int] = []
            for stack, stack_b in zip(t.stack[kept].tolist(), t.stack_b[kept].tolist(), strict=True):
                # A's stack, then B's: frames numbered in that order; -2: B's is the same as A's
                stack_column.append(stack_id_of(stack))
                stack_b_column.append(-2 if stack_b == stack or table_stacks[stack_b] == table_stacks[stack]
                                      else stack_id_of(stack_b))
            self.units.append(_PageUnit(
                index=ui, table=t, kept=kept,
                numbers=_int_columns([list(map(get, entries)), list(map(get, paths)), list(map(get, family_names)),
                                      [family_of[e][1] for e in entries], list(map(get, parents)), stack_column,
                                      list(map(get, names_b)), list(map(get, chains)), stack_b_column]),
                reasons=t.reasons[kept], notes=t.notes[kept],
                texts={c: "[" + ",".join(str(ref[x]) for x in tuples[c]) + "]" for c in {*reasons, *notes}},
                sides=(_side_numbers(side_a, get), _side_numbers(side_b, get)),
            ))
        rows_left_out = total - kept_rows
        cells = []
        for u in comparison.units:
            position = {c.cell: k for k, c in enumerate(u.cells)}
            partner = {a: b for b, a in paired_cells(u.rows).items()} if u.cells else {}
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
                    s.ref(partner[c.cell]) if c.cell in partner else -1,  # B's call merged into it (another framework)
                    _page_number(c.max_noise_ratio),  # its worst error relative to rounding noise (the colour)
                ]
                for c in u.cells
            ])
        left_out = []
        if rows_left_out:
            left_out.append(f"{rows_left_out} of {total} rows are not in this page (it holds at most {max_rows} rows "
                            "in execution order, and every failing row); comparison.json and comparison.csv hold "
                            "them all")
        if stacks_left_out:
            left_out.append(f"the call stacks of {stacks_left_out} entries are not in this page (at most "
                            f"{max_stack_chars} characters of stack text are kept); comparison.json holds them")
        #: What the document lists before its rows, in order.
        self.before_rows: dict[str, Any] = {
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
        }
        #: What the document lists after its rows, in order.
        self.after_rows: dict[str, Any] = {"cells": cells, "total_rows": total, "left_out": left_out}

    @property
    def left_out(self) -> list[str]:
        """What the page leaves out (rows beyond the cap, stacks beyond the budget), one sentence each."""
        return self.after_rows["left_out"]

    def row_chunks(self, chunk_rows: int = CHUNK_ROWS) -> Iterator[list[list[Any]]]:
        """The document's ``rows``, at most ``chunk_rows`` at a time, in order: each row a list (``ROW_FIELDS`` in
        the template's script), its numbers as the page shows them: :meth:`row_texts` read back."""
        dumps = compact_encoder(self.before_rows)
        for texts in self.row_texts(dumps, chunk_rows):
            yield json.loads("[" + ",".join(texts) + "]")

    def row_texts(self, dumps: Callable[[Any], str], chunk_rows: int = CHUNK_ROWS) -> Iterator[list[str]]:
        """The JSON text of each of the document's ``rows`` as the encoder ``dumps`` writes it, at most ``chunk_rows``
        at a time, in order (:meth:`_row_texts`)."""
        floats = _page_spelling(dumps)
        for u in self.units:
            for j in range(0, len(u.kept), chunk_rows):
                yield self._row_texts(u, j, j + chunk_rows, dumps, floats)

    def _row_texts(self, u: _PageUnit, start: int, stop: int, dumps: Callable[[Any], str], floats: FloatSpelling
                   ) -> list[str]:
        """The rows of ``u``'s kept rows ``start`` to ``stop``, each ``[unit, index, entry, path, class, verdict,
        differs, family, direction, parent, stack, side A, side B, metrics, reasons, notes, B's name, compared by,
        parent chain, B's stack]`` (a side ``null`` or ``[kind, dtype, shape, max, min, mean, norm, md5, file name,
        value]``): made column by column, the numbers of neighbouring columns written together (:func:`int_rows`,
        :func:`float_rows`, ``floats``: :func:`_page_spelling`), the words as ``dumps`` writes them."""
        rows = u.kept[start:stop]
        n = len(rows)
        w = u.table.take(rows)
        numbers = u.numbers[start:stop]
        sides: list[list[str]] = []
        for s, strings in enumerate(u.sides):
            sc = w.side_columns(s)
            kinds = np.array([f"[{dumps(k)}," for k in SIDE_KINDS], dtype=object)[sc.kind].tolist()
            side = list(joined_rows((
                kinds, int_rows(strings[start:stop, :2]), ",",
                float_rows(_page_values(sc.stats), sc.stats_defined, floats), ",", int_rows(strings[start:stop, 2:]),
                "]"), n))
            for i in np.flatnonzero(sc.kind == ABSENT).tolist():
                side[i] = "null"
            sides.append(side)
        columns = self.metric_columns
        texts = u.texts
        return list(joined_rows((
            "[", int_rows(np.column_stack((np.full(n, u.index), rows, numbers[:, :2], w.match_class, w.verdict,
                                           w.differs, numbers[:, 2:6]))),
            ",", sides[0], ",", sides[1], ",[",
            float_rows(_page_values(w.metrics[:, columns]), w.metric_state[:, columns] == METRIC_VALUE, floats), "],",
            [texts[c] for c in u.reasons[start:stop].tolist()], ",", [texts[c] for c in u.notes[start:stop].tolist()],
            ",", int_rows(numbers[:, 6:7]), ",",
            np.array([dumps(by) for by in COMPARED_BY], dtype=object)[w.compared_by].tolist(), ",",
            int_rows(numbers[:, 7:]), "]"), n))

    def json_chunks(self) -> Iterator[str]:
        """The document as compact JSON text in pieces (:func:`render_script_json`'s text of
        :func:`build_page_data`, escaped the same way), its rows a chunk at a time (:meth:`row_texts`).

        The encoder is chosen on the fields before the rows (:func:`~msprobe_cmp.reports.common.compact_encoder`):
        they hold every text of the document but the fixed words (class, verdict, kind names) and the sentences of
        ``left_out``; the rows and the cells hold numbers (ints within 64 bits), indexes and those words.
        """
        dumps = compact_encoder(self.before_rows)
        chunks = ([",".join(texts)] for texts in self.row_texts(dumps))
        return map(_script_safe, spliced_json(dumps, self.before_rows, "rows", chunks, self.after_rows))


def build_page_data(comparison: Comparison, max_rows: int = MAX_ROWS,
                    max_stack_chars: int = MAX_STACK_CHARS) -> dict[str, Any]:
    """The JSON document the page's script renders: rows, cells, stacks (interned strings, numbers as
    the page shows them), plus what was left out (:class:`PageData`, its rows all made).

    Each row is a list (see ``ROW_FIELDS`` in the template's script); strings are indexes into
    ``strings`` (numbered in the order the rows meet them); stacks are lists of indexes into ``frames``.  Each
    unit's kept rows are read from its columns: the numbers rounded in bulk (:func:`page_numbers`' rounding), the
    names and texts decoded once per table.
    """
    page = PageData(comparison, max_rows, max_stack_chars)
    return {**page.before_rows, "rows": [row for rows in page.row_chunks() for row in rows], **page.after_rows}


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


@functools.cache
def _environment() -> Environment:
    """The template environment, made once per process (a split comparison renders a page per unit)."""
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
            found = np.flatnonzero(u.rows.class_mask(cls))[:NOT_COMPARABLE_EXAMPLES - len(examples)]  # type: ignore[arg-type]
            examples += [(ui, u.rows[i].detached()) for i in found.tolist()]
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


def html_chunks(comparison: Comparison, *, max_rows: int = MAX_ROWS, max_stack_chars: int = MAX_STACK_CHARS,
                facts: ReportFacts | None = None, page_rows: int | None = None) -> Iterator[str]:
    """report.html of ``comparison`` in pieces, in order: the page before its row data, the data
    (:meth:`PageData.json_chunks`: its rows a chunk at a time), the page after it.  The page around the data is
    rendered whole by the template, with a marker where the data goes.  When the comparison is split
    (:func:`unit_page_paths`: several units, more rows than ``page_rows``), this is the aggregate page instead: the
    same summary, plots and largest disagreements, the units each with a link to its own page
    (:func:`unit_page_chunks`), and no row data.

    Args:
        comparison: the finished comparison.
        max_rows: at most this many rows are embedded (plus every failing row); the page says how many
            were left out.
        max_stack_chars: budget of call-stack text embedded in the page.
        facts: what the reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`),
            made here when not given.
        page_rows: the most rows one page holds for several units (default :data:`PAGE_ROWS`).

    Raises:
        RuntimeError: the rendered template does not hold the marker exactly once (a template fault).
    """
    return _report_chunks(comparison, facts, max_rows, max_stack_chars, unit_page_paths(comparison, page_rows))


def _report_chunks(comparison: Comparison, facts: ReportFacts | None, max_rows: int, max_stack_chars: int,
                   paths: list[str]) -> Iterator[str]:
    """:func:`html_chunks` of ``comparison`` whose units' own pages are ``paths`` (:func:`unit_page_paths`)."""
    view = _View(unit_pages=tuple(paths)) if paths else _View()
    return _page_chunks(comparison, ReportFacts.of(comparison, facts), max_rows, max_stack_chars, view)


def unit_page_chunks(comparison: Comparison, unit: int, *, max_rows: int = MAX_ROWS,
                     max_stack_chars: int = MAX_STACK_CHARS) -> Iterator[str]:
    """The page of unit ``unit`` (index into ``comparison.units``) of a split comparison
    (:func:`unit_page_paths`), in pieces: the page of the one-unit comparison :func:`unit_comparison`, made as any
    one-unit report.html is (:func:`html_chunks`' code), with a link back to the aggregate report.html.  Only this
    unit's rows are read.

    Raises:
        IndexError: no such unit.
        RuntimeError: as :func:`html_chunks`.
    """
    one = unit_comparison(comparison, unit)
    back = _Back("../report.html", unit, len(comparison.units))
    return _page_chunks(one, ReportFacts(one), max_rows, max_stack_chars, _View(back=back))


def html_pages(comparison: Comparison, *, facts: ReportFacts | None = None, page_rows: int | None = None
               ) -> list[tuple[str, Callable[[], Iterator[str]]]]:
    """Every HTML page of ``comparison``: ``(path relative to the output directory, pieces)``, report.html first,
    then each unit's page when the comparison is split (:func:`unit_page_paths`), in unit order.  ``pieces()``
    renders the page when called (:func:`html_chunks`, :func:`unit_page_chunks`), so a writer that writes one page
    before making the next holds one unit's rows at a time."""
    paths = unit_page_paths(comparison, page_rows)  # once, for report.html's links and the pages' names
    pages: list[tuple[str, Callable[[], Iterator[str]]]] = [
        ("report.html", lambda: _report_chunks(comparison, facts, MAX_ROWS, MAX_STACK_CHARS, paths))]
    pages += [(path, lambda ui=ui: unit_page_chunks(comparison, ui))  # type: ignore[misc]
              for ui, path in enumerate(paths)]
    return pages


def _page_chunks(comparison: Comparison, facts: ReportFacts, max_rows: int, max_stack_chars: int, view: _View
                 ) -> Iterator[str]:
    """The page of ``comparison`` as ``view`` says (a whole page, an aggregate page, a unit's page), in pieces:
    :func:`html_chunks`."""
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
    page = None if view.unit_pages else PageData(comparison, max_rows, max_stack_chars)
    template = _environment().get_template("report.html.j2")
    compared, unit_compared = facts.compared_counts()
    marker = f"page-data-{secrets.token_hex(16)}"  # no text of the page can hold it by chance
    html = template.render(
        c=comparison,
        compared=compared,
        unit_compared=unit_compared,
        columns=HTML_COLUMNS[comparison.mode],
        thresholds=thresholds,
        largest=facts.disagreements(TOP_ROWS),
        also_shown=ALSO_NAMES_SHOWN,
        also_listed=ALSO_NAMES_LISTED,
        short_notes=SHORT_NOTES_CHARS,
        max_floor=MAX_FLOOR,
        float32_floor=rounding_floor(comparison.rules.localisation.cross_kernel_noise_ulps, FLOAT_EPS["float32"]),
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
        left_out=[] if page is None else page.left_out,
        unit_pages=view.unit_pages,
        rowhref=view.row_href,
        back=view.back,
        total_rows=sum(len(u.rows) for u in comparison.units),
        data_json=Markup(marker),
        origin_json=render_script_json(_origin_cell(comparison)),
        plots=(render_trace_svg(comparison, facts), render_scatter_svg(comparison, facts),
               render_histogram_svg(comparison, facts)),
    )
    if page is None:  # an aggregate page: no row data
        if marker in html:
            raise RuntimeError("report.html.j2 shows the page data on an aggregate page")
        yield html
        return
    parts = html.split(marker)
    if len(parts) != 2:
        raise RuntimeError(f"report.html.j2 shows the page data {len(parts) - 1} times, not once")
    yield parts[0]
    yield from page.json_chunks()
    yield parts[1]


def _origin_cell(comparison: Comparison) -> list[Any] | None:
    """``[unit, cell call]`` of the likely origin's cell (what the cell tree highlights and opens the way to), or None
    (no origin, or no cell encloses it)."""
    origin = comparison.likely_origin
    if origin is None or origin.cell is None or origin.ref.unit >= len(comparison.units):
        return None
    return [origin.ref.unit, origin.cell]


def render_html(comparison: Comparison, *, max_rows: int = MAX_ROWS, max_stack_chars: int = MAX_STACK_CHARS,
                facts: ReportFacts | None = None, page_rows: int | None = None) -> str:
    """report.html of the comparison, one self-contained HTML page (summary, plots, cell tree, every row; for a split
    comparison the aggregate page): :func:`html_chunks` (which describes the arguments) joined.

    Raises:
        RuntimeError: as :func:`html_chunks`.
    """
    return "".join(html_chunks(comparison, max_rows=max_rows, max_stack_chars=max_stack_chars, facts=facts,
                               page_rows=page_rows))


__all__ = [
    "HTML_COLUMNS",
    "MAX_ROWS",
    "MAX_STACK_CHARS",
    "NOTHING_COMPARED_CLASS",
    "PAGE_ROWS",
    "PageData",
    "UNIT_PAGES_DIR",
    "STATISTICS_ONLY_CLASS",
    "build_page_data",
    "format_full",
    "format_number",
    "format_side",
    "html_chunks",
    "html_pages",
    "render_html",
    "render_script_json",
    "select_largest_disagreements",
    "unit_comparison",
    "unit_page_chunks",
    "unit_page_paths",
]
