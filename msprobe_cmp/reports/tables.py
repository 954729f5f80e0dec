"""Machine-readable renderings of a :class:`~msprobe_cmp.comparator.compare.Comparison`: JSON and CSV.

Renderers only render: every number comes from the Comparison as it is; nothing is recomputed.

JSON (:func:`render_json`): ``{"schema": "msprobe-cmp.comparison", "version": 1, ...}``, strict
JSON (no ``NaN`` tokens): a non-finite number is written as the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"``; None is ``null``.

CSV (:func:`render_csv`): one line per row of every unit, with msprobe's column names where msprobe
has the column (:data:`CSV_COLUMNS`).  Two deliberate differences: statistics-mode relative
differences are plain ratios (msprobe writes ``"12.5%"`` strings) and are named
``"Max relative diff"`` ... instead of msprobe's ``MaxRelativeErr`` ..., which msprobe also uses for
the tensor-mode column of another meaning; and ``Result`` holds ``pass``/``warning``/``fail``/``skip``.
Numbers are written as numbers; a text cell starting with ``= + - @``, tab or CR gets a leading
apostrophe so that spreadsheets do not run it as a formula.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from typing import Any

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
    d = asdict(side)
    d["shape"] = None if side.shape is None else list(side.shape)
    for key in ("max", "min", "mean", "norm"):
        d[key] = _json_number(d[key])
    return d


def _json_rules(rules: Rules) -> dict[str, Any]:
    return {
        "default": {k: _json_number(v) for k, v in asdict(rules.default).items()},
        "min_matched_share": rules.min_matched_share,
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


def _json_unit(unit: UnitComparison) -> dict[str, Any]:
    stacks: dict[str, list[str]] = {}
    for row in unit.rows:
        if row.stack and row.entry_name not in stacks:
            stacks[row.entry_name] = list(row.stack)
    return {
        "a": _json_unit_ref(unit.unit_a),
        "b": _json_unit_ref(unit.unit_b),
        "verdict": unit.verdict,
        "class_counts": dict(unit.counts),
        "verdict_counts": dict(unit.verdict_counts),
        "compared_count": unit.compared_count,
        "first_divergent": unit.first_divergent,
        "first_failing": unit.first_failing,
        "notes": list(unit.notes),
        "rows": [_json_row(r) for r in unit.rows],
        "cells": [_json_cell(c) for c in unit.cells],
        "stacks": stacks,
    }


def render_json(comparison: Comparison, *, indent: int | None = 1) -> str:
    """The whole comparison as a versioned, strict JSON document (module docstring).

    Top-level keys: ``schema``, ``version``, ``verdict``, ``mode``, ``input_a`` (target),
    ``input_b`` (baseline), ``thresholds``, ``class_counts``, ``verdict_counts``, ``compared_count``,
    ``first_divergent`` / ``first_failing`` (``{"unit", "row", "name", "step", "rank"}`` or null),
    ``unpaired``, ``notes``, ``units`` (each with its ``rows``, the per-cell roll-up ``cells`` and the
    ``stacks`` of their entries).
    """
    doc = {
        "schema": JSON_SCHEMA,
        "version": JSON_VERSION,
        "verdict": comparison.verdict,
        "mode": comparison.mode,
        "input_a": comparison.input_a,
        "input_b": comparison.input_b,
        "thresholds": _json_rules(comparison.rules),
        "class_counts": dict(comparison.counts),
        "verdict_counts": dict(comparison.verdict_counts),
        "compared_count": comparison.compared_count,
        "first_divergent": _json_row_ref(comparison, comparison.first_divergent),
        "first_failing": _json_row_ref(comparison, comparison.first_failing),
        "unpaired": [_json_unit_ref(u) for u in comparison.unpaired],
        "notes": list(comparison.notes),
        "units": [_json_unit(u) for u in comparison.units],
    }
    return json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=False)


def _text(value: object) -> str:
    return "" if value is None else neutralize_cell(str(value))


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
    cells += ["" if (v := row.metric(name)) is None else v for name in METRIC_COLUMNS]
    for side in (a, b):
        values = [None if side is None else getattr(side, attr) for _, attr in _STAT_COLUMNS]
        cells += ["" if v is None else v for v in values]
    cells += [_text(a.md5 if a else None), _text(b.md5 if b else None)]
    cells += [_text(a.value if a else None), _text(b.value if b else None)]
    cells += [row.verdict, _text("; ".join((*row.reasons, *row.notes)) or None)]
    cells += [row.match_class, row.compared_by]
    step, rank = unit.unit_a.step, unit.unit_a.rank
    cells += ["" if step is None else step, "" if rank is None else rank]
    cells += [_text(row.parent_cell), _text((a.data_name if a else None) or (b.data_name if b else None))]
    return cells


def render_csv(comparison: Comparison) -> str:
    """Every row of every unit as CSV text with :data:`CSV_COLUMNS` (module docstring).

    Row names are ``<entry>.<arg path>``; ``Bench Name`` / ``NPU Name`` are empty when the row is
    absent from that side.  ``Step`` and ``Rank`` are A's ids (empty when None).
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for unit in comparison.units:
        for row in unit.rows:
            writer.writerow(_csv_row(unit, row))
    return buf.getvalue()
