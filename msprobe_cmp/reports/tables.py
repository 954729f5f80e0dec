"""Machine-readable renderings of a :class:`~msprobe_cmp.comparator.compare.Comparison`: JSON, CSV,
JUnit XML and a Markdown summary.

Renderers only render: every number comes from the Comparison as it is; nothing is recomputed.

JSON (:func:`render_json`): ``{"schema": "msprobe-cmp.comparison", "version": 1, ...}``, strict
JSON (no ``NaN`` tokens): a non-finite number is written as the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"``; None is ``null``.  The document is described by a JSON Schema (draft 2020-12)
shipped in the package (:func:`load_json_schema`, ``templates/comparison.schema.json``).

CSV (:func:`render_csv`): one line per row of every unit, with msprobe's column names where msprobe
has the column (:data:`CSV_COLUMNS`).  Two deliberate differences: statistics-mode relative
differences are plain ratios (msprobe writes ``"12.5%"`` strings) and are named
``"Max relative diff"`` ... instead of msprobe's ``MaxRelativeErr`` ..., which msprobe also uses for
the tensor-mode column of another meaning; and ``Result`` holds ``pass``/``warning``/``fail``/``skip``.
Numbers are written as numbers; a text cell starting with ``= + - @``, tab or CR gets a leading
apostrophe so that spreadsheets do not run it as a formula.

JUnit XML (:func:`render_junit`): one ``<testsuite>`` for the overall verdict (a single test case
that fails unless the verdict is ``pass``, so that "nothing compared" is red in CI too), then one
``<testsuite>`` per paired step/rank unit with one ``<testcase>`` per row (``classname`` = entry
name, ``name`` = argument path): failing rows carry a ``<failure>`` with the reasons and metrics,
rows not compared a ``<skipped>`` with why, warnings a ``<system-out>``; unpaired units are skipped
test cases of a last suite.  Characters XML 1.0 cannot hold are written as ``\\uXXXX`` text.

Markdown (:func:`render_markdown`): a short summary for CI job summaries and pull-request
comments (verdict, counts, first divergent / failing row, how many rows a tensor / md5 comparison judged by their
statistics only, how many matched rows had nothing to compare (verdict skip), largest disagreements: each tensor
once, with the other names it was recorded under, the first three spelled out and the rest counted); every text
from a dump is escaped so that it renders as text.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import asdict
from importlib import resources
from typing import Any
from xml.sax import saxutils

import orjson

from msprobe_cmp.comparator.compare import (
    LOWER_BOUND_NAME,
    STAT_METRIC_NAMES,
    TENSOR_METRIC_NAMES,
    CellRollup,
    Comparison,
    ComparisonRow,
    RowRef,
    SideSummary,
    UnitComparison,
    UnitRef,
)
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.reports.common import (
    ALSO_NAMES_SHOWN,
    ARGUMENTS_SHOWN,
    RANKING,
    ReportFacts,
    also_recorded_as,
    differing_arguments,
    dumps_compact,
    format_number,
    format_side,
    origin_text,
)

#: Identity of the JSON document; bump :data:`JSON_VERSION` on any incompatible change.
JSON_SCHEMA = "msprobe-cmp.comparison"
JSON_VERSION = 1

#: The metric columns, in order: the row metric names (msprobe's column names where msprobe has them).
METRIC_COLUMNS: tuple[str, ...] = (*TENSOR_METRIC_NAMES, *STAT_METRIC_NAMES, LOWER_BOUND_NAME)

_STAT_COLUMNS = (("max", "max"), ("min", "min"), ("mean", "mean"), ("l2norm", "norm"))

#: Every CSV column, in order.
CSV_COLUMNS: tuple[str, ...] = (
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    *METRIC_COLUMNS,
    *(f"NPU {c}" for c, _ in _STAT_COLUMNS),
    *(f"Bench {c}" for c, _ in _STAT_COLUMNS),
    "NPU MD5",
    "Bench MD5",
    "NPU Value",
    "Bench Value",
    "Result",
    "Err_message",
    "Match Class",
    "Compared By",
    "Step",
    "Rank",
    "Parent Cell",
    "Data_name",
)

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralize_cell(text: str) -> str:
    """``text`` with a leading apostrophe when it starts like a spreadsheet formula (= + - @ tab CR)."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _json_number(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _json_side(side: SideSummary | None) -> dict[str, Any] | None:
    if side is None:
        return None
    # Field by field: dataclasses.asdict deep-copies and is the slowest part of large reports.
    return {
        "kind": side.kind,
        "dtype": side.dtype,
        "shape": None if side.shape is None else list(side.shape),
        "max": _json_number(side.max),
        "min": _json_number(side.min),
        "mean": _json_number(side.mean),
        "norm": _json_number(side.norm),
        "md5": side.md5,
        "data_name": side.data_name,
        "value": side.value,
    }


def _json_rules(rules: Rules) -> dict[str, Any]:
    return {
        "default": {k: _json_number(v) for k, v in asdict(rules.default).items()},
        "min_matched_share": rules.min_matched_share,
        "noise_factor": _json_number(rules.noise_factor),
        "argument_differs": rules.argument_differs,
        "localisation": {k: _json_number(v) if not isinstance(v, bool) else v
                         for k, v in asdict(rules.localisation).items()},
        "overrides": [
            {
                "pattern": o.pattern,
                "dtype": o.dtype,
                "thresholds": {k: _json_number(v) for k, v in asdict(o.thresholds).items()},
            }
            for o in rules.overrides
        ],
    }


def _json_row(row: ComparisonRow) -> dict[str, Any]:
    return {
        "index": row.index,
        "name": row.name,
        "entry": row.entry_name,
        "entry_b": row.entry_name_b or row.entry_name,
        "arg_path": row.arg_path,
        "arg_path_b": row.arg_path_b or row.arg_path,
        "mapped_by": row.mapped_by,
        "match_class": row.match_class,
        "compared_by": row.compared_by,
        "a": _json_side(row.a),
        "b": _json_side(row.b),
        "metrics": {k: _json_number(v) for k, v in row.metrics},
        "verdict": row.verdict,
        "reasons": list(row.reasons),
        "notes": list(row.notes),
        "differs": row.differs,
        "parent_cell": row.parent_cell,
    }


def _json_unit_ref(ref: UnitRef) -> dict[str, Any]:
    return asdict(ref)


def _json_row_ref(comparison: Comparison, ref: RowRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    unit = comparison.units[ref.unit]
    return {
        "unit": ref.unit,
        "row": ref.row,
        "name": ref.name,
        "step": unit.unit_a.step,
        "rank": unit.unit_a.rank,
        "parent_cell": ref.parent_cell,
        "parents": list(ref.parents),
    }


def _json_origin(comparison: Comparison) -> dict[str, Any] | None:
    """The likely origin with its evidence (:class:`~msprobe_cmp.comparator.compare.LikelyOrigin`), or None."""
    o = comparison.likely_origin
    if o is None:
        return None
    return {
        **(_json_row_ref(comparison, o.ref) or {}),
        "kind": o.kind,
        "cell": o.cell,
        "cells": list(o.ref.parents),
        "error_in": _json_number(o.error_in),
        "error_out": _json_number(o.error_out),
        "ratio": _json_number(o.ratio),
        "floor": _json_number(o.floor),
        "arguments": list(o.arguments),
        "unpaired": list(o.unpaired),
        "text": o.text,
    }


def _json_cell(cell: CellRollup) -> dict[str, Any]:
    return {
        "cell": cell.cell,
        "parent": cell.parent,
        "depth": cell.depth,
        "rows": cell.rows,
        "failing": cell.failing,
        "differing": cell.differing,
        "min_cosine": _json_number(cell.min_cosine),
        "max_abs_err": _json_number(cell.max_abs_err),
        "worst_verdict": cell.worst_verdict,
        "first_divergent": cell.first_divergent,
    }


def _json_side_fast(side: SideSummary | None) -> SideSummary | dict[str, Any] | None:
    """``side`` itself when orjson writes it as :func:`_json_side` would (its fields by name, in order, all four
    statistics finite numbers), else :func:`_json_side`'s dictionary."""
    if side is None:
        return None
    mx, mn, mean, norm = side.max, side.min, side.mean, side.norm
    if (mx is not None and mn is not None and mean is not None and norm is not None
            and (mx + mn + mean + norm) * 0 == 0):  # NaN / ±Inf (or an overflowing sum): the careful path
        return side
    return _json_side(side)


def _json_metrics_fast(metrics: tuple[tuple[str, float | None], ...]) -> dict[str, Any]:
    """``{key: value}`` of a row's metrics as :func:`_json_row` writes them (non-finite values as text)."""
    out: dict[str, Any] = dict(metrics)
    values = out.values()
    if None in values:
        if any(v is not None and v - v != 0 for v in values):
            return {k: _json_number(v) for k, v in metrics}
    elif not (sum(values) * 0 == 0):  # a NaN / ±Inf (or an overflowing sum): the careful path
        return {k: _json_number(v) for k, v in metrics}
    return out


def _json_row_fast(row: ComparisonRow) -> dict[str, Any]:
    """:func:`_json_row` for orjson: the same document once written, built with less copying (sides as the
    dataclasses themselves where :func:`_json_side_fast` allows, tuples for lists)."""
    entry, arg_path = row.entry_name, row.arg_path
    return {
        "index": row.index,
        "name": f"{entry}.{arg_path}",
        "entry": entry,
        "entry_b": row.entry_name_b or entry,
        "arg_path": arg_path,
        "arg_path_b": row.arg_path_b or arg_path,
        "mapped_by": row.mapped_by,
        "match_class": row.match_class,
        "compared_by": row.compared_by,
        "a": _json_side_fast(row.a),
        "b": _json_side_fast(row.b),
        "metrics": _json_metrics_fast(row.metrics),
        "verdict": row.verdict,
        "reasons": row.reasons,
        "notes": row.notes,
        "differs": row.differs,
        "parent_cell": row.parent_cell,
    }


def _json_unit(unit: UnitComparison, fast: bool = False, compared: int | None = None) -> dict[str, Any]:
    stacks: dict[str, list[str]] = {}
    stacks_b: dict[str, list[str]] = {}
    for row in unit.rows:
        if row.stack and row.entry_name not in stacks:
            stacks[row.entry_name] = list(row.stack)
        if row.stack_b and row.stack_b != row.stack and row.entry_name not in stacks_b:
            stacks_b[row.entry_name] = list(row.stack_b)
    return {
        "a": _json_unit_ref(unit.unit_a),
        "b": _json_unit_ref(unit.unit_b),
        "verdict": unit.verdict,
        "class_counts": dict(unit.counts),
        "verdict_counts": dict(unit.verdict_counts),
        "compared_count": unit.compared_count if compared is None else compared,
        "first_divergent": unit.first_divergent,
        "first_failing": unit.first_failing,
        "notes": list(unit.notes),
        "rows": [_json_row_fast(r) for r in unit.rows] if fast else [_json_row(r) for r in unit.rows],
        "cells": [_json_cell(c) for c in unit.cells],
        "stacks": stacks,
        "stacks_b": stacks_b,
        "parent_chains": {entry: list(chain) for entry, chain in unit.parent_chains.items() if chain},
    }


def _json_document(comparison: Comparison, fast: bool, facts: ReportFacts | None = None) -> dict[str, Any]:
    compared, unit_compared = ReportFacts.of(comparison, facts).compared_counts()
    return {
        "schema": JSON_SCHEMA,
        "version": JSON_VERSION,
        "verdict": comparison.verdict,
        "mode": comparison.mode,
        "input_a": comparison.input_a,
        "input_b": comparison.input_b,
        "input_noise": comparison.input_noise,
        "thresholds": _json_rules(comparison.rules),
        "class_counts": dict(comparison.counts),
        "verdict_counts": dict(comparison.verdict_counts),
        "compared_count": compared,
        "matched_share": comparison.matched_share,
        "matched_share_of": comparison.matched_share_of,
        "first_divergent": _json_row_ref(comparison, comparison.first_divergent),
        "first_failing": _json_row_ref(comparison, comparison.first_failing),
        "likely_origin": _json_origin(comparison),
        "differing_arguments": [
            {**(_json_row_ref(comparison, RowRef(
                a.unit, a.row.index, a.row.name, "", a.row.parent_cell,
                comparison.units[a.unit].parent_chains.get(a.row.entry_name, ()))) or {}),
             "a": a.row.a.value if a.row.a else None, "b": a.row.b.value if a.row.b else None}
            for a in differing_arguments(comparison)
        ],
        "unpaired": [_json_unit_ref(u) for u in comparison.unpaired],
        "notes": list(comparison.notes),
        "units": [_json_unit(u, fast, n) for u, n in zip(comparison.units, unit_compared, strict=True)],
    }


def render_json_utf8(comparison: Comparison, *, facts: ReportFacts | None = None) -> bytes:
    """``render_json(comparison).encode("utf-8", errors="backslashreplace")`` (how the CLI writes the file),
    without the text copy in between when orjson writes the document (its bytes are that encoding).
    ``facts``: what the reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`)."""
    try:
        return orjson.dumps(_json_document(comparison, True, facts))
    except (orjson.JSONEncodeError, TypeError):
        return dumps_compact(_json_document(comparison, False, facts)).encode("utf-8", errors="backslashreplace")


def render_json(comparison: Comparison, *, indent: int | None = None) -> str:
    """The whole comparison as a versioned, strict JSON document (module docstring).

    Top-level keys: ``schema``, ``version``, ``verdict``, ``mode``, ``input_a`` (target),
    ``input_b`` (baseline), ``input_noise`` (the ``--noise`` rerun, or null), ``thresholds``, ``class_counts``,
    ``verdict_counts``, ``compared_count``,
    ``first_divergent`` / ``first_failing`` (``{"unit", "row", "name", "step", "rank"}`` or null),
    ``unpaired``, ``notes``, ``units`` (each with its ``rows``, the per-cell roll-up ``cells`` and the
    ``stacks`` of their entries).

    The compact form is written by orjson from a document that holds the rows' sides as the dataclasses
    themselves; when orjson refuses it (a lone surrogate, an integer beyond 64 bits, a number type orjson does
    not know), the document is rebuilt from plain dictionaries and lists and written by
    :func:`~msprobe_cmp.reports.common.dumps_compact`: the same JSON value either way.
    """
    if indent is None:
        try:
            return orjson.dumps(_json_document(comparison, fast=True)).decode("utf-8")
        except (orjson.JSONEncodeError, TypeError):
            return dumps_compact(_json_document(comparison, fast=False))
    return json.dumps(_json_document(comparison, fast=False), indent=indent, allow_nan=False, ensure_ascii=False)


def _text(value: object) -> str:
    return "" if value is None else neutralize_cell(str(value))


def _value_cell(side: SideSummary | None) -> object:
    """A non-tensor value for the CSV: numbers as numbers, anything else as neutralised text."""
    if side is None or side.value is None:
        return ""
    if side.dtype in ("int", "float", "bool") or (side.dtype or "").startswith(("numpy.", "float", "int")):
        try:
            number = float(side.value)
        except ValueError:
            return _text(side.value)
        return int(number) if side.dtype == "int" and number.is_integer() else number
    return _text(side.value)


def _shape_text(side: SideSummary | None) -> str:
    if side is None or side.shape is None:
        return ""
    return str(list(side.shape))


def _csv_row(unit: UnitComparison, row: ComparisonRow) -> list[object]:
    a, b = row.a, row.b
    cells: list[object] = [
        _text(row.name if a is not None else None),
        _text(row.name_b if b is not None else None),
        _text(a.dtype if a else None),
        _text(b.dtype if b else None),
        _shape_text(a),
        _shape_text(b),
    ]
    metrics = dict(row.metrics)
    if len(metrics) != len(row.metrics):  # a repeated key: row.metric() returns the first one
        metrics = dict(reversed(row.metrics))
    cells += ["" if (v := metrics.get(name)) is None else v for name in METRIC_COLUMNS]
    for side in (a, b):
        if side is None:
            cells += ["", "", "", ""]
        else:
            cells += ["" if v is None else v for v in (side.max, side.min, side.mean, side.norm)]
    cells += [_text(a.md5 if a else None), _text(b.md5 if b else None)]
    cells += [_value_cell(a), _value_cell(b)]
    cells += [row.verdict, _text("; ".join((*row.reasons, *row.notes)) or None)]
    cells += [row.match_class, row.compared_by]
    step, rank = unit.unit_a.step, unit.unit_a.rank
    cells += ["" if step is None else step, "" if rank is None else rank]
    cells += [_text(row.parent_cell), _text((a.data_name if a else None) or (b.data_name if b else None))]
    return cells


def _csv_quoted_shape(side: SideSummary, cache: dict[tuple[int, ...], str]) -> str:
    """The shape cell of a tensor side as the csv module writes it (``"[64, 512]"`` is quoted: it holds a comma;
    a shape text never holds a quote or a line break, so quoting it is wrapping it in quotes)."""
    shape = side.shape
    if shape is None:
        return ""
    text = cache.get(shape)
    if text is None:
        text = str(list(shape))
        text = cache[shape] = f'"{text}"' if "," in text else text
    return text


def _csv_stats(side: SideSummary | None) -> str:
    """The four statistic cells of a side (``max,min,mean,l2norm``), numbers as ``str`` writes them."""
    if side is None:
        return ",,,"
    mx, mn, mean, norm = side.max, side.min, side.mean, side.norm
    if mx is None or mn is None or mean is None or norm is None:
        return ",".join("" if v is None else str(v) for v in (mx, mn, mean, norm))
    return f"{mx!s},{mn!s},{mean!s},{norm!s}"


# A text cell holding one of these makes the csv module quote it (QUOTE_MINIMAL: the delimiter, the quote
# character, a line-terminator character); NUL is listed too, to leave every unusual cell to the csv module.
_CSV_SPECIAL = (",", '"', "\n", "\r", "\x00")


def _csv_side_cells(
    name: str, side: SideSummary | None, shapes: dict[tuple[int, ...], str]
) -> tuple[str, str, str, str]:
    """The name, dtype, md5 and (quoted) shape cells of one side of a row, as :func:`_csv_fast_line` writes them;
    four empty cells when the row is absent from that side."""
    if side is None:
        return "", "", "", ""
    if name.startswith(_FORMULA_START):
        name = "'" + name
    dtype = "" if side.dtype is None else neutralize_cell(side.dtype)
    md5 = "" if side.md5 is None else neutralize_cell(side.md5)
    return name, dtype, md5, _csv_quoted_shape(side, shapes)


def _csv_fast_line(
    unit_cells: str, row: ComparisonRow, metric_pos: dict[str, int], blank: list[str],
    shapes: dict[tuple[int, ...], str],
) -> str | None:
    """The CSV line of ``row`` (without the line break) exactly as ``csv.writer`` writes :func:`_csv_row`'s
    cells, or None when a text cell needs the csv module's quoting (the caller then uses it).

    Numbers are written with ``str`` (what the csv module does for floats and ints); the only cells quoted here
    are shapes (:func:`_csv_quoted_shape`); every text cell is checked for :data:`_CSV_SPECIAL`.
    """
    a, b = row.a, row.b
    name_a, dtype_a, md5_a, shape_a = _csv_side_cells(f"{row.entry_name}.{row.arg_path}", a, shapes)
    name_b, dtype_b, md5_b, shape_b = _csv_side_cells(row.name_b, b, shapes)
    value_a = "" if a is None or a.value is None else str(_value_cell(a))
    value_b = "" if b is None or b.value is None else str(_value_cell(b))
    why = "; ".join((*row.reasons, *row.notes)) if (row.reasons or row.notes) else ""
    if why and why.startswith(_FORMULA_START):
        why = "'" + why
    parent = "" if row.parent_cell is None else neutralize_cell(row.parent_cell)
    data_name = (a.data_name if a else None) or (b.data_name if b else None)
    data_name = "" if data_name is None else neutralize_cell(data_name)
    texts = (f"{name_a}{name_b}{dtype_a}{dtype_b}{md5_a}{md5_b}{value_a}{value_b}{why}{parent}{data_name}"
             f"{row.verdict}{row.match_class}{row.compared_by}")
    for ch in _CSV_SPECIAL:
        if ch in texts:
            return None
    metrics = blank.copy()
    for k, v in reversed(row.metrics):  # the first of a repeated key wins, as in row.metric()
        metrics[metric_pos.get(k, -1)] = "" if v is None else str(v)
    metrics.pop()  # the slot of metric names without a column
    return (f"{name_a},{name_b},{dtype_a},{dtype_b},{shape_a},{shape_b},{','.join(metrics)},{_csv_stats(a)},"
            f"{_csv_stats(b)},{md5_a},{md5_b},{value_a},{value_b},{row.verdict},{why},{row.match_class},"
            f"{row.compared_by},{unit_cells},{parent},{data_name}")


def render_csv(comparison: Comparison) -> str:
    """Every row of every unit as CSV text with :data:`CSV_COLUMNS` (module docstring).

    Row names are ``<entry>.<arg path>``; ``Bench Name`` / ``NPU Name`` are empty when the row is
    absent from that side.  ``Step`` and ``Rank`` are A's ids (empty when None).

    The text is what ``csv.writer(lineterminator="\\n")`` writes for :func:`_csv_row`'s cells, byte for byte:
    lines are joined directly (:func:`_csv_fast_line`) and a row with a text cell that needs quoting is
    written by the csv module itself.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    lines = [buf.getvalue()]
    metric_pos = {name: k for k, name in enumerate(METRIC_COLUMNS)}
    blank = [""] * (len(METRIC_COLUMNS) + 1)  # + 1: a slot for metric names without a column
    shapes: dict[tuple[int, ...], str] = {}
    for unit in comparison.units:
        step, rank = unit.unit_a.step, unit.unit_a.rank
        unit_cells = f"{'' if step is None else step},{'' if rank is None else rank}"
        for row in unit.rows:
            line = _csv_fast_line(unit_cells, row, metric_pos, blank, shapes)
            if line is None:
                buf.seek(0)
                buf.truncate()
                writer.writerow(_csv_row(unit, row))
                lines.append(buf.getvalue())
            else:
                lines.append(line + "\n")
    return "".join(lines)


# --------------------------------------------------------------------------------------------------
# JSON Schema

#: File name of the JSON Schema of :func:`render_json`'s document, inside this package.
JSON_SCHEMA_FILE = "comparison.schema.json"


def load_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the document :func:`render_json` writes."""
    text = resources.files("msprobe_cmp.reports").joinpath("templates", JSON_SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


# --------------------------------------------------------------------------------------------------
# JUnit XML

# Characters XML 1.0 cannot hold at all (control characters, lone surrogates, U+FFFE/U+FFFF).
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold written as a ``\\uXXXX`` escape."""
    return _XML_ILLEGAL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _metrics_text(row: ComparisonRow) -> str:
    return ", ".join(f"{k}={format_number(v)}" for k, v in row.metrics if v is not None)


#: What an attribute value escapes beyond ``& < >`` (as ``xml.etree.ElementTree`` writes it: CR, LF and tab as
#: character references, so that they survive attribute-value normalisation).
_XML_ATTR_ENTITIES = {'"': "&quot;", "\r": "&#13;", "\n": "&#10;", "\t": "&#09;"}


def _xml_attr(text: str) -> str:
    """``text`` as an XML attribute value between double quotes: :func:`xml_text`, then escaped by
    :func:`xml.sax.saxutils.escape` with :data:`_XML_ATTR_ENTITIES` (the bytes ``ElementTree`` writes)."""
    return saxutils.escape(xml_text(text), _XML_ATTR_ENTITIES)


def _xml_cdata(text: str) -> str:
    """``text`` as XML character data: :func:`xml_text`, then ``& < >`` escaped by :func:`xml.sax.saxutils.escape`."""
    return saxutils.escape(xml_text(text))


def _xml_element(tag: str, attrs: dict[str, str], text: str | None = None) -> str:
    """An element without children: ``<tag a="v">text</tag>``, or ``<tag a="v" />`` without text."""
    head = "".join(f' {k}="{_xml_attr(v)}"' for k, v in attrs.items())
    if text:
        return f"<{tag}{head}>{_xml_cdata(text)}</{tag}>"
    return f"<{tag}{head} />"


def _xml_parent(tag: str, attrs: dict[str, str], children: list[str], level: int) -> str:
    """An element holding ``children`` (already written), indented as ``ElementTree.indent(space=" ")`` does at
    nesting ``level``: each child on its own line one space deeper, the end tag on a line of its own."""
    head = "".join(f' {k}="{_xml_attr(v)}"' for k, v in attrs.items())
    inner = "\n" + " " * (level + 1)
    return f"<{tag}{head}>{inner}{inner.join(children)}\n{' ' * level}</{tag}>"


def _suite_attrs(name: str, tests: int, failures: int, skipped: int) -> dict[str, str]:
    return {"name": name, "tests": str(tests), "failures": str(failures), "errors": "0", "skipped": str(skipped),
            "time": "0"}


def _junit_case(r: ComparisonRow, head: str) -> str:
    """The ``<testcase>`` of a row (``head``: its start tag's attributes, written), at nesting level 2."""
    if r.verdict == "pass":
        return f"<testcase{head} />"
    why = "; ".join((*r.reasons, *r.notes))
    if r.verdict == "fail":
        details = [f"class: {r.match_class}", f"A: {format_side(r.a)}", f"B: {format_side(r.b)}"]
        if r.metrics:
            details.append(f"metrics: {_metrics_text(r)}")
        if r.parent_cell:
            details.append(f"parent cell: {r.parent_cell}")
        child = _xml_element("failure", {"message": why or "fail", "type": r.match_class}, "\n".join(details))
    elif r.verdict == "skip":
        child = _xml_element("skipped", {"message": why or r.match_class})
    elif r.verdict == "warning":
        child = _xml_element("system-out", {}, f"warning: {why}\nmetrics: {_metrics_text(r)}")
    else:
        return f"<testcase{head} />"
    return f"<testcase{head}>\n   {child}\n  </testcase>"


def render_junit(comparison: Comparison, *, facts: ReportFacts | None = None) -> str:
    """The comparison as JUnit XML (module docstring): CI systems show failing rows as failed tests.

    Written as text, element by element, in the form ``xml.etree.ElementTree`` gives the same tree after
    ``ElementTree.indent(space=" ")``: attributes in the order given, elements without content as
    ``<tag ... />``, one space of indentation per level.  ``facts``: what the reports of this comparison share
    (:class:`~msprobe_cmp.reports.common.ReportFacts`).
    """
    suites: list[str] = []
    totals = [0, 0, 0]

    def suite(name: str, tests: int, failures: int, skipped: int, children: list[str]) -> None:
        suites.append(_xml_parent("testsuite", _suite_attrs(name, tests, failures, skipped), children, 1))
        totals[0] += tests
        totals[1] += failures
        totals[2] += skipped

    compared = ReportFacts.of(comparison, facts).compared_counts()[0]
    props = [_xml_element("property", {"name": name, "value": value}) for name, value in (
        ("verdict", comparison.verdict), ("mode", comparison.mode), ("input_a", comparison.input_a),
        ("input_b", comparison.input_b), ("compared_count", str(compared)))]
    case_attrs = {"classname": "msprobe-cmp", "name": "overall verdict", "time": "0"}
    failed = comparison.verdict != "pass"
    if failed:
        first = comparison.first_failing
        message = f"verdict {comparison.verdict}" + (f": first failing row {first.label}" if first else "")
        failure = _xml_element("failure", {"message": message, "type": comparison.verdict},
                               "\n".join(comparison.notes) or None)
        case = _xml_parent("testcase", case_attrs, [failure], 2)
    else:
        case = _xml_element("testcase", case_attrs)
    suite("msprobe-cmp verdict", 1, int(failed), 0, [_xml_parent("properties", {}, props, 2), case])

    entries: dict[str, str] = {}  # entry name -> its classname attribute, written
    paths: dict[str, str] = {}  # argument path -> its name attribute, written
    for u in comparison.units:
        props = [_xml_element("property", {"name": name, "value": value}) for name, value in (
            ("verdict", u.verdict), ("directory_a", u.unit_a.directory), ("directory_b", u.unit_b.directory))]
        children = [_xml_parent("properties", {}, props, 2)]
        add = children.append
        failures = skipped = 0
        for r in u.rows:
            classname = entries.get(r.entry_name)
            if classname is None:
                classname = entries[r.entry_name] = _xml_attr(r.entry_name)
            name = paths.get(r.arg_path)
            if name is None:
                name = paths[r.arg_path] = _xml_attr(r.arg_path)
            verdict = r.verdict
            if verdict == "fail":
                failures += 1
            elif verdict == "skip":
                skipped += 1
            add(_junit_case(r, f' classname="{classname}" name="{name}" time="0"'))
        suite(f"{u.unit_a.label} vs {u.unit_b.label}", len(u.rows), failures, skipped, children)

    if comparison.unpaired:
        children = [
            _xml_parent("testcase", {"classname": "unpaired", "name": f"{ref.side.upper()} {ref.label}", "time": "0"},
                        [_xml_element("skipped", {"message": "no partner unit on the other side: not compared"})], 2)
            for ref in comparison.unpaired
        ]
        n = len(comparison.unpaired)
        suite("unpaired units", n, 0, n, children)

    root = _xml_parent("testsuites", _suite_attrs("msprobe-cmp", *totals), suites, 0)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + root + "\n"


# --------------------------------------------------------------------------------------------------
# Markdown summary

#: How many rows the Markdown summary's "largest disagreements" table lists.
MARKDOWN_TOP_ROWS = 10

#: Metric columns of the Markdown table per mode.
MARKDOWN_METRICS: dict[str, tuple[str, ...]] = {
    "tensor": ("Cosine", "MaxAbsErr", "MaxRelativeErr"),
    "statistics": (LOWER_BOUND_NAME, "Max diff", "Max relative diff", "L2norm relative diff"),
    "md5": ("Max diff", "L2norm diff"),
}

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~&$])")
_MD_MAX_TEXT = 300


def markdown_text(text: str) -> str:
    """``text`` as Markdown that renders as the same text: punctuation Markdown or HTML would act on
    is backslash-escaped, line breaks and control characters become spaces; long text is cut."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(flat) > _MD_MAX_TEXT:
        flat = flat[: _MD_MAX_TEXT - 1] + "…"
    return _MD_SPECIAL.sub(r"\\\1", flat)


def render_markdown(comparison: Comparison, top: int = MARKDOWN_TOP_ROWS, *, facts: ReportFacts | None = None) -> str:
    """A short Markdown summary (module docstring), for ``$GITHUB_STEP_SUMMARY`` or a PR comment.
    ``facts``: what the reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`)."""
    facts = ReportFacts.of(comparison, facts)
    lines = [f"## msprobe-cmp: {comparison.verdict.upper()}", ""]
    lines.append(f"**Verdict: {comparison.verdict}** ({comparison.mode} mode, {facts.compared_counts()[0]} rows "
                 "compared)  ")
    lines.append(f"A (target): {markdown_text(comparison.input_a)}  ")
    lines.append(f"B (baseline): {markdown_text(comparison.input_b)}")
    lines.append("")
    if facts.compared_counts()[0]:
        lines.append(f"**Likely origin:** {markdown_text(origin_text(comparison))}")
        lines.append("")
    lines.append("| | " + " | ".join(cls for cls, _ in comparison.counts) + " |")
    lines.append("|---|" + "---:|" * len(comparison.counts))
    lines.append("| rows | " + " | ".join(str(n) for _, n in comparison.counts) + " |")
    lines.append("")
    lines.append("| | " + " | ".join(v for v, _ in comparison.verdict_counts) + " |")
    lines.append("|---|" + "---:|" * len(comparison.verdict_counts))
    lines.append("| rows | " + " | ".join(str(n) for _, n in comparison.verdict_counts) + " |")
    lines.append("")
    arguments = differing_arguments(comparison)
    if arguments:
        listed = "; ".join(markdown_text(a.text) for a in arguments[:ARGUMENTS_SHOWN])
        more = f"; and {len(arguments) - ARGUMENTS_SHOWN} more" if len(arguments) > ARGUMENTS_SHOWN else ""
        lines.append(f"- **Arguments that differ ({len(arguments)}):** {listed}{more}")
    for title, ref in (("First divergent", comparison.first_divergent), ("First failing", comparison.first_failing)):
        if ref is None:
            lines.append(f"- **{title}:** none")
            continue
        row = comparison.row(ref)
        why = "; ".join(row.reasons)
        lines.append(f"- **{title}:** {markdown_text(ref.label)}" + (f": {markdown_text(why)}" if why else ""))
    if comparison.unpaired:
        listed = ", ".join(f"{u.side.upper()} {u.label}" for u in comparison.unpaired)
        lines.append(f"- **Unpaired units** (not compared): {markdown_text(listed)}")
    stats_only = facts.judged_by_statistics()
    if stats_only.total:
        ui, first = stats_only.examples[0]
        lines.append(f"- **Judged by their statistics only:** {stats_only.total} of {facts.compared_counts()[0]} "
                     f"compared rows ({stats_only.why}); first: "
                     f"{markdown_text(first.name)} ({markdown_text(comparison.units[ui].unit_a.label)})")
    nothing = facts.matched_not_compared()
    if nothing.total:
        ui, first = nothing.examples[0]
        why = "; ".join(first.reasons or first.notes)
        lines.append(f"- **Matched, nothing to compare:** {nothing.total} row(s) ({nothing.why}); "
                     f"first: {markdown_text(first.name)} ({markdown_text(comparison.units[ui].unit_a.label)})"
                     + (f": {markdown_text(why)}" if why else ""))
    lines.append("")
    largest = facts.disagreements(top)
    if largest:
        keys = MARKDOWN_METRICS[comparison.mode]
        lines.append(f"### Largest disagreements (top {len(largest)})")
        lines.append("")
        lines.append(f"Ranked: {RANKING.get(comparison.mode, RANKING['md5'])}.")
        lines.append("")
        lines.append("| Row | Unit | Verdict | " + " | ".join(keys) + " | Reason |")
        lines.append("|---|---|---|" + "---:|" * len(keys) + "---|")
        for ui, r, also in largest:
            values = " | ".join(format_number(r.metric(k)) for k in keys)
            reason = markdown_text("; ".join(r.reasons)) if r.reasons else ""
            unit = markdown_text(comparison.units[ui].unit_a.label)
            name = markdown_text(r.name)
            if also:  # the names are cut to markdown_text's limit, never the count of those not spelled out
                others = also_recorded_as([o.name for o in also], ALSO_NAMES_SHOWN, max_chars=_MD_MAX_TEXT)
                name += f" ({markdown_text(others)})"
            lines.append(f"| {name} | {unit} | {r.verdict} | {values} | {reason} |")
        lines.append("")
    if comparison.notes:
        lines.append("### Notes")
        lines.append("")
        shown = comparison.notes[:10]
        lines += [f"- {markdown_text(n)}" for n in shown]
        if len(comparison.notes) > len(shown):
            lines.append(f"- and {len(comparison.notes) - len(shown)} more (see report.html)")
        lines.append("")
    lines.append("Full report: report.html; every number: comparison.json.")
    return "\n".join(lines) + "\n"
