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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from importlib import resources
from itertools import chain as _chain
from typing import Any, BinaryIO
from xml.sax import saxutils

import numpy as np
import orjson

from msprobe_cmp.comparator.compare import (
    LOWER_BOUND_NAME,
    STAT_METRIC_NAMES,
    TENSOR_METRIC_NAMES,
    CellRollup,
    Comparison,
    ComparisonRow,
    RowRef,
    UnitComparison,
    UnitRef,
)
from msprobe_cmp.comparator.matching import MATCH_CLASSES
from msprobe_cmp.comparator.rowtable import (
    ABSENT,
    COMPARED_BY,
    FAIL,
    METRIC_ABSENT,
    METRIC_VALUE,
    PASS,
    SIDE_KINDS,
    SKIP,
    VERDICTS,
    WARNING,
    RowTable,
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
    dumps_standard,
    format_number,
    origin_text,
    row_windows,
    side_texts,
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


def _json_numbers(values: np.ndarray, defined: np.ndarray) -> np.ndarray:
    """``values`` (float64) as :func:`_json_number` writes them, as an object array: None where not ``defined``,
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` for the non-finite ones, Python floats otherwise."""
    out = values.astype(object)
    if not np.isfinite(values[defined]).all():
        out[np.isnan(values)] = "NaN"
        out[values == np.inf] = "Infinity"
        out[values == -np.inf] = "-Infinity"
    out[~defined] = None
    return out


def _json_sides(t: RowTable, s: int) -> list[dict[str, Any] | None]:
    """Side ``s`` (0 = A, 1 = B) of every row of ``t`` as comparison.json writes it: None where the row is absent
    from that side, else ``{"kind", "dtype", "shape", "max", "min", "mean", "norm", "md5", "data_name", "value"}``."""
    sc = t.side_columns(s)
    strings = [*t.strings, None]  # code -1 -> None
    kinds = [None if k == ABSENT else SIDE_KINDS[k] for k in range(len(SIDE_KINDS))]
    stats = _json_numbers(sc.stats, sc.stats_defined).tolist()
    shapes = t.shapes
    return [
        None if kind is None else {
            "kind": kind, "dtype": strings[dtype], "shape": None if shape < 0 else list(shapes[shape]),
            "max": st[0], "min": st[1], "mean": st[2], "norm": st[3], "md5": strings[md5],
            "data_name": strings[data_name], "value": strings[value],
        }
        for kind, dtype, shape, st, md5, data_name, value in zip(
            [kinds[k] for k in sc.kind.tolist()], sc.dtype.tolist(), sc.shape.tolist(), stats, sc.md5.tolist(),
            sc.data_name.tolist(), sc.value.tolist(), strict=True)
    ]


def _json_metrics(t: RowTable) -> list[dict[str, Any]]:
    """Every row's metrics as comparison.json writes them: ``{name: value}`` in :data:`METRIC_COLUMNS` order, the
    metrics the row has (None where undefined, non-finite values as text)."""
    n = len(t)
    out: list[dict[str, Any]] = [{}] * n
    state = t.metric_state
    present = state != METRIC_ABSENT
    if not present.any():
        return out
    values = _json_numbers(t.metrics, state == METRIC_VALUE)
    patterns, which = t.metric_patterns()
    for p, columns in enumerate(patterns):
        if not columns:
            continue
        keys = [METRIC_COLUMNS[k] for k in columns]
        if len(patterns) == 1:  # every row has the same metrics
            return [dict(zip(keys, row_values, strict=True)) for row_values in values[:, list(columns)].tolist()]
        rows = np.flatnonzero(which == p)
        for i, row_values in zip(rows.tolist(), values[rows][:, list(columns)].tolist(), strict=True):
            out[i] = dict(zip(keys, row_values, strict=True))
    return out


def _json_rows(t: RowTable, first: int = 0) -> list[dict[str, Any]]:
    """Every row of ``t`` as comparison.json writes it, read from the columns; ``first``: the unit's index of the
    table's first row (``t`` is a :meth:`~msprobe_cmp.comparator.rowtable.RowTable.window` of the unit's rows)."""
    entries, paths = t.names("entry"), t.names("arg_path")
    differs = (None, False, True)
    return [
        {
            "index": i,
            "name": f"{entry}.{path}",
            "entry": entry,
            "entry_b": entry_b or entry,
            "arg_path": path,
            "arg_path_b": path_b or path,
            "mapped_by": mapped_by,
            "match_class": MATCH_CLASSES[cls],
            "compared_by": COMPARED_BY[by],
            "a": a,
            "b": b,
            "metrics": metrics,
            "verdict": VERDICTS[verdict],
            "reasons": reasons,
            "notes": notes,
            "differs": differs[d + 1],
            "parent_cell": parent,
        }
        for i, (entry, path, entry_b, path_b, mapped_by, cls, by, a, b, metrics, verdict, reasons, notes, d, parent)
        in enumerate(zip(
            entries, paths, t.names("entry_b"), t.names("arg_path_b"), t.names("mapped_by"), t.match_class.tolist(),
            t.compared_by.tolist(), _json_sides(t, 0), _json_sides(t, 1), _json_metrics(t), t.verdict.tolist(),
            t.texts("reasons"), t.texts("notes"), t.differs.tolist(), t.names("parent_cell"), strict=True), first)
    ]


def _json_stacks(t: RowTable) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The unit's ``stacks`` and ``stacks_b``: each entry's call stack (the first non-empty one of its rows) and B's
    where it differs from A's."""
    stacks: dict[str, list[str]] = {}
    stacks_b: dict[str, list[str]] = {}
    table, strings = t.stacks, t.strings
    for entry, stack, stack_b in zip(t.entry.tolist(), t.stack.tolist(), t.stack_b.tolist(), strict=True):
        frames, frames_b = table[stack], table[stack_b]
        if frames or frames_b:
            name = strings[entry]
            if frames and name not in stacks:
                stacks[name] = list(frames)
            if frames_b and stack_b != stack and frames_b != frames and name not in stacks_b:
                stacks_b[name] = list(frames_b)
    return stacks, stacks_b


def _json_unit_fields(unit: UnitComparison, compared: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A unit of comparison.json but its ``rows`` (:func:`_json_rows`): the fields before them and the fields after
    them, in the document's order."""
    stacks, stacks_b = _json_stacks(unit.rows)
    before = {
        "a": _json_unit_ref(unit.unit_a),
        "b": _json_unit_ref(unit.unit_b),
        "verdict": unit.verdict,
        "class_counts": dict(unit.counts),
        "verdict_counts": dict(unit.verdict_counts),
        "compared_count": compared,
        "first_divergent": unit.first_divergent,
        "first_failing": unit.first_failing,
        "notes": list(unit.notes),
    }
    after = {
        "cells": [_json_cell(c) for c in unit.cells],
        "stacks": stacks,
        "stacks_b": stacks_b,
        "parent_chains": {entry: list(chain) for entry, chain in unit.parent_chains.items() if chain},
    }
    return before, after


def _json_head(comparison: Comparison, compared: int) -> dict[str, Any]:
    """comparison.json but its ``units`` (the last field)."""
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
    }


def _json_document(comparison: Comparison, facts: ReportFacts | None = None) -> dict[str, Any]:
    """The whole of comparison.json as one value (:func:`render_json`; the file is written in parts by
    :func:`write_json`, from the same fields)."""
    compared, unit_compared = ReportFacts.of(comparison, facts).compared_counts()
    units = []
    for unit, n in zip(comparison.units, unit_compared, strict=True):
        before, after = _json_unit_fields(unit, n)
        units.append({**before, "rows": _json_rows(unit.rows), **after})
    return {**_json_head(comparison, compared), "units": units}


def _json_parts(comparison: Comparison, facts: ReportFacts | None, dumps: Callable[[Any], bytes]
                ) -> Iterator[bytes | memoryview]:
    """comparison.json in parts, each encoded by ``dumps`` (compact JSON as bytes): the fields before the rows, then
    each unit's rows :data:`~msprobe_cmp.reports.common.CHUNK_ROWS` at a time, then the fields after them.  Joined,
    the parts are ``dumps`` of :func:`_json_document`: compact JSON of a list or object is its items' JSON joined
    by commas between its brackets."""
    compared, unit_compared = ReportFacts.of(comparison, facts).compared_counts()
    yield dumps(_json_head(comparison, compared))[:-1] + b',"units":['
    for k, (unit, n) in enumerate(zip(comparison.units, unit_compared, strict=True)):
        before, after = _json_unit_fields(unit, n)
        yield (b"," if k else b"") + dumps(before)[:-1] + b',"rows":['
        for start, window in row_windows(unit.rows):
            if start:
                yield b","
            yield memoryview(dumps(_json_rows(window, start)))[1:-1]  # the items, without copying them
        yield b"]," + dumps(after)[1:]
    yield b"]}"


def _dumps_standard_utf8(doc: Any) -> bytes:
    """``doc`` as the standard library writes it compactly (:func:`~msprobe_cmp.reports.common.dumps_compact`'s
    fallback), encoded as the CLI writes every report (UTF-8, a lone surrogate as a backslash escape)."""
    return dumps_standard(doc).encode("utf-8", errors="backslashreplace")


def write_json(comparison: Comparison, fh: BinaryIO, *, facts: ReportFacts | None = None) -> None:
    """Write comparison.json (:func:`render_json`'s document, compact) to the binary file ``fh`` from its current
    position, a bounded number of rows at a time: the bytes ``render_json(comparison).encode("utf-8",
    errors="backslashreplace")`` gives, without the whole text in memory.

    orjson writes the document; should it refuse a part (a lone surrogate in a name, an integer beyond 64 bits), the
    file is cut back to where it started and the standard library writes the whole document instead (so every
    float is in one encoder's form), as :func:`~msprobe_cmp.reports.common.dumps_compact` does.  ``facts``: what the
    reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`).

    Raises:
        OSError: ``fh`` cannot be written (or, after a refused part, cannot be rewound: it must be seekable).
    """
    start = fh.tell()
    try:
        for part in _json_parts(comparison, facts, orjson.dumps):
            fh.write(part)
    except (orjson.JSONEncodeError, TypeError):
        fh.seek(start)
        fh.truncate()
        for part in _json_parts(comparison, facts, _dumps_standard_utf8):
            fh.write(part)


def render_json_utf8(comparison: Comparison, *, facts: ReportFacts | None = None) -> bytes:
    """``render_json(comparison).encode("utf-8", errors="backslashreplace")``: the bytes :func:`write_json` writes
    (how the CLI writes the file), in memory.  ``facts``: what the reports of this comparison share
    (:class:`~msprobe_cmp.reports.common.ReportFacts`)."""
    buf = io.BytesIO()
    write_json(comparison, buf, facts=facts)
    return buf.getvalue()


def render_json(comparison: Comparison, *, indent: int | None = None) -> str:
    """The whole comparison as a versioned, strict JSON document (module docstring).

    Top-level keys: ``schema``, ``version``, ``verdict``, ``mode``, ``input_a`` (target),
    ``input_b`` (baseline), ``input_noise`` (the ``--noise`` rerun, or null), ``thresholds``, ``class_counts``,
    ``verdict_counts``, ``compared_count``,
    ``first_divergent`` / ``first_failing`` (``{"unit", "row", "name", "step", "rank"}`` or null),
    ``unpaired``, ``notes``, ``units`` (each with its ``rows``, the per-cell roll-up ``cells`` and the
    ``stacks`` of their entries).

    The document is built from the rows' columns once; the compact form is written by
    :func:`~msprobe_cmp.reports.common.dumps_compact` (orjson, or the standard library for what orjson refuses: a lone
    surrogate), the indented one by the standard library: the same JSON value either way.
    """
    doc = _json_document(comparison)
    if indent is None:
        return dumps_compact(doc)
    return json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=False)


def _text(value: object) -> str:
    return "" if value is None else neutralize_cell(str(value))


def _value_cell(dtype: str | None, value: str | None) -> object:
    """A non-tensor value (its type name and ``repr`` text) for the CSV: numbers as numbers, anything else as
    neutralised text."""
    if value is None:
        return ""
    if dtype in ("int", "float", "bool") or (dtype or "").startswith(("numpy.", "float", "int")):
        try:
            number = float(value)
        except ValueError:
            return _text(value)
        return int(number) if dtype == "int" and number.is_integer() else number
    return _text(value)


def _csv_number_column(values: np.ndarray, defined: np.ndarray) -> list[object]:
    """A column of numbers as CSV cells: the float's text as the csv module writes it (``repr``) where ``defined``,
    ``""`` elsewhere."""
    out: list[object] = list(map(float.__repr__, np.where(defined, values, 0.0).tolist()))
    if not defined.all():
        for i in np.flatnonzero(~defined).tolist():
            out[i] = ""
    return out


class _CsvCells:
    """Makes the CSV cells of a unit's rows (:data:`CSV_COLUMNS`), a window of rows at a time: what the cells are
    made of that belongs to the unit's tables (its strings as they are and neutralised, its shapes as text, the
    value cells and ``Err_message`` texts met so far) is made once per unit, and a column's cells are picked from it
    by the column's codes."""

    def __init__(self, unit: UnitComparison) -> None:
        t = unit.rows
        self.strings, self.tuples = t.strings, t.tuples
        # object [S + 1] arrays indexed by a string code; the last item stands for code -1 (None)
        self.raw = np.array([*t.strings, ""], dtype=object)
        self.texts = np.array([*(neutralize_cell(x) for x in t.strings), ""], dtype=object)
        self.has_text = np.array([*(bool(x) for x in t.strings), False])  # an empty name counts as none
        self.shape_texts = np.array([*(str(list(shape)) for shape in t.shapes), ""], dtype=object)
        self.value_cells: dict[tuple[int, int], object] = {}
        self.whys: dict[tuple[int, int], object] = {}
        step, rank = unit.unit_a.step, unit.unit_a.rank
        self.step: object = "" if step is None else step
        self.rank: object = "" if rank is None else rank

    def _value_cell(self, dtype: int, value: int) -> object:
        """:func:`_value_cell` of a side's dtype and value codes."""
        strings = self.strings
        return _value_cell(None if dtype < 0 else strings[dtype], None if value < 0 else strings[value])

    def _why(self, reasons: int, notes: int) -> object:
        """The ``Err_message`` cell of a row's reasons and notes codes: the texts joined with ``"; "``, neutralised."""
        tuples = self.tuples
        return _text("; ".join((*tuples[reasons], *tuples[notes])) or None)

    @staticmethod
    def _pair_cells(first: np.ndarray, second: np.ndarray, cells: dict[tuple[int, int], object],
                    make: Callable[[int, int], object]) -> list[object]:
        """``make(first[i], second[i])`` for every row ``i`` (int [n] codes each), made once per distinct pair
        (``cells`` keeps them for the next window)."""
        if not len(first):
            return []
        pairs, which = np.unique(np.stack((first, second), axis=1), axis=0, return_inverse=True)
        made = np.empty(len(pairs), dtype=object)
        for k, (x, y) in enumerate(pairs.tolist()):
            cell = cells.get((x, y))
            made[k] = cell if cell is not None else cells.setdefault((x, y), make(x, y))
        return made[which.reshape(-1)].tolist()

    def columns(self, t: RowTable) -> list[list[object]]:
        """The cells of the rows of ``t`` (a :meth:`~msprobe_cmp.comparator.rowtable.RowTable.window` of the unit's
        rows), column by column (:data:`CSV_COLUMNS`): metrics and statistics as the text the csv module writes for
        their floats, the other numbers as numbers, texts neutralised (:func:`neutralize_cell`), ``""`` for a
        missing value.

        A row name ``<entry>.<arg path>`` is neutralised as its entry name is (the name starts with it, or with
        the dot when it is empty); B's uses B's own entry name and argument path where they are names.
        """
        n = len(t)
        texts, raw, has_text, shape_texts = self.texts, self.raw, self.has_text, self.shape_texts
        a, b = t.side_columns(0), t.side_columns(1)
        entry_b = np.where(has_text[t.entry_b], t.entry_b, t.entry)
        path_b = np.where(has_text[t.arg_path_b], t.arg_path_b, t.arg_path)
        columns: list[list[object]] = [
            np.where(a.kind == ABSENT, "", texts[t.entry] + "." + raw[t.arg_path]).tolist(),
            np.where(b.kind == ABSENT, "", texts[entry_b] + "." + raw[path_b]).tolist(),
            texts[a.dtype].tolist(), texts[b.dtype].tolist(),
            shape_texts[a.shape].tolist(), shape_texts[b.shape].tolist(),
        ]
        state = t.metric_state
        blank: list[object] = [""] * n
        for k in range(len(METRIC_COLUMNS)):
            defined = state[:, k] == METRIC_VALUE
            columns.append(_csv_number_column(t.metrics[:, k], defined) if defined.any() else blank)
        for side in (a, b):
            for k in range(4):
                defined = side.stats_defined[:, k]
                columns.append(_csv_number_column(side.stats[:, k], defined) if defined.any() else blank)
        columns += [texts[a.md5].tolist(), texts[b.md5].tolist()]
        for side in (a, b):
            columns.append(self._pair_cells(side.dtype, side.value, self.value_cells, self._value_cell))
        columns.append([VERDICTS[v] for v in t.verdict.tolist()])
        columns.append(self._pair_cells(t.reasons, t.notes, self.whys, self._why))
        columns.append([MATCH_CLASSES[c] for c in t.match_class.tolist()])
        columns.append([COMPARED_BY[c] for c in t.compared_by.tolist()])
        columns += [[self.step] * n, [self.rank] * n]
        columns.append(texts[t.parent_cell].tolist())
        # A's file name, else B's
        columns.append(texts[np.where(has_text[a.data_name], a.data_name, b.data_name)].tolist())
        return columns


def _csv_row(unit: UnitComparison, row: ComparisonRow) -> list[object]:
    """The cells of one row of ``unit`` (:meth:`_CsvCells.columns` of that row alone: for tests and single rows)."""
    return [column[0] for column in _CsvCells(unit).columns(unit.rows.window(row.index, row.index + 1))]


# A text cell holding one of these makes the csv module quote it (QUOTE_MINIMAL: the delimiter, the quote
# character, a line-terminator character); NUL is listed too, to leave every unusual cell to the csv module.
_CSV_SPECIAL = (",", '"', "\n", "\r", "\x00")
_CSV_SPECIAL_RE = re.compile('[,"\n\r\x00]')


def _csv_text_column(cells: list[object]) -> list[str]:
    """A column of cells as ``csv.writer(lineterminator="\\n")`` writes each: numbers with ``str`` (``repr`` for a
    float), texts as they are unless they hold a character of :data:`_CSV_SPECIAL`, which the csv module writes
    itself (once per distinct text)."""
    try:
        joined = "".join(cells)  # type: ignore[arg-type]
        out: list[str] = cells  # type: ignore[assignment]
    except TypeError:  # numbers among the cells
        out = [x if type(x) is str else str(x) for x in cells]
        joined = "".join(out)
    if not any(ch in joined for ch in _CSV_SPECIAL):
        return out
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    written: dict[str, str] = {}
    for text in set(out):
        if _CSV_SPECIAL_RE.search(text):
            buf.seek(0)
            buf.truncate()
            writer.writerow((text,))
            written[text] = buf.getvalue()[:-1]
    get = written.get
    return [get(x, x) for x in out]


def csv_chunks(comparison: Comparison) -> Iterator[str]:
    """:func:`render_csv`'s text in pieces, in order: the header line, then the lines of
    :data:`~msprobe_cmp.reports.common.CHUNK_ROWS` rows at a time (each piece ends with a newline), so that no more
    than a chunk's text is in memory at once."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(CSV_COLUMNS)
    yield buf.getvalue()
    for unit in comparison.units:
        cells = _CsvCells(unit)
        for _, window in row_windows(unit.rows):
            columns = [_csv_text_column(column) for column in cells.columns(window)]
            yield "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def render_csv(comparison: Comparison) -> str:
    """Every row of every unit as CSV text with :data:`CSV_COLUMNS` (module docstring): :func:`csv_chunks` joined.

    Row names are ``<entry>.<arg path>``; ``Bench Name`` / ``NPU Name`` are empty when the row is
    absent from that side.  ``Step`` and ``Rank`` are A's ids (empty when None).

    The text is what ``csv.writer(lineterminator="\\n")`` writes for the cells (:meth:`_CsvCells.columns`), byte for
    byte: each column is written as text (:func:`_csv_text_column`) and the lines joined.
    """
    return "".join(csv_chunks(comparison))


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


def _metrics_texts(t: RowTable, rows: np.ndarray) -> list[str | None]:
    """``"<name>=<number>, ..."`` of the metrics with a value of each of the rows ``rows`` of ``t``; None for a row
    without any metric (not even an undefined one)."""
    out: list[str | None] = []
    for states, values in zip(t.metric_state[rows].tolist(), t.metrics[rows].tolist(), strict=True):
        if not any(states):
            out.append(None)
            continue
        out.append(", ".join(f"{METRIC_COLUMNS[k]}={format_number(v)}"
                             for k, (st, v) in enumerate(zip(states, values, strict=True)) if st == METRIC_VALUE))
    return out


#: What an attribute value escapes beyond ``& < >`` (as ``xml.etree.ElementTree`` writes it: CR, LF and tab as
#: character references, so that they survive attribute-value normalisation).
_XML_ATTR_ENTITIES = {'"': "&quot;", "\r": "&#13;", "\n": "&#10;", "\t": "&#09;"}


#: A character :func:`_xml_attr` changes: one XML 1.0 cannot hold, or one of ``& < > "``, tab, LF, CR.
_XML_ATTR_CHANGES = re.compile('[^\x20\x21\x23-\x25\x27-\x3b\x3d\x3f-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]')


def _xml_attr(text: str) -> str:
    """``text`` as an XML attribute value between double quotes: :func:`xml_text`, then escaped by
    :func:`xml.sax.saxutils.escape` with :data:`_XML_ATTR_ENTITIES` (the bytes ``ElementTree`` writes)."""
    if not _XML_ATTR_CHANGES.search(text):
        return text
    return saxutils.escape(xml_text(text), _XML_ATTR_ENTITIES)


def _xml_cdata(text: str) -> str:
    """``text`` as XML character data: :func:`xml_text`, then ``& < >`` escaped by :func:`xml.sax.saxutils.escape`."""
    return saxutils.escape(xml_text(text))


def _xml_attrs(attrs: dict[str, str]) -> str:
    """``attrs`` as an element's attributes: `` a="v"`` each, values escaped (:func:`_xml_attr`)."""
    return "".join(f' {k}="{_xml_attr(v)}"' for k, v in attrs.items())


def _xml_element(tag: str, attrs: dict[str, str], text: str | None = None) -> str:
    """An element without children: ``<tag a="v">text</tag>``, or ``<tag a="v" />`` without text."""
    head = _xml_attrs(attrs)
    if text:
        return f"<{tag}{head}>{_xml_cdata(text)}</{tag}>"
    return f"<{tag}{head} />"


def _xml_parent_parts(tag: str, attrs: dict[str, str], chunks: Iterable[list[str]], level: int) -> Iterator[str]:
    """:func:`_xml_parent`'s text in pieces, its children given as lists of written children (chunks), each list
    rendered when its turn comes."""
    head = _xml_attrs(attrs)
    inner = "\n" + " " * (level + 1)
    yield f"<{tag}{head}>"
    empty = True
    for chunk in chunks:
        if chunk:
            yield inner + inner.join(chunk)
            empty = False
    yield f"{inner if empty else ''}\n{' ' * level}</{tag}>"


def _xml_parent(tag: str, attrs: dict[str, str], children: list[str], level: int) -> str:
    """An element holding ``children`` (already written), indented as ``ElementTree.indent(space=" ")`` does at
    nesting ``level``: each child on its own line one space deeper, the end tag on a line of its own."""
    return "".join(_xml_parent_parts(tag, attrs, [children], level))


def _suite_attrs(name: str, tests: int, failures: int, skipped: int) -> dict[str, str]:
    return {"name": name, "tests": str(tests), "failures": str(failures), "errors": "0", "skipped": str(skipped),
            "time": "0"}


def _junit_cases(t: RowTable, attrs: dict[str, str]) -> list[str]:
    """The ``<testcase>`` of every row of ``t``, at nesting level 2, read from the columns; ``attrs`` holds the
    names already written as attribute values (filled here)."""
    strings = t.strings
    written: list[str] = [""] * len(strings)  # code -> attribute value, for the codes of entries and paths
    for code in np.unique(np.concatenate((t.entry, t.arg_path))).tolist():
        name = strings[code]
        attr = attrs.get(name)
        if attr is None:
            attr = attrs[name] = _xml_attr(name)
        written[code] = attr
    heads = [f' classname="{written[entry]}" name="{written[path]}" time="0"'
             for entry, path in zip(t.entry.tolist(), t.arg_path.tolist(), strict=True)]
    cases = [f"<testcase{head} />" for head in heads]  # a passing row (and any other without details)
    others = np.flatnonzero(t.verdict != PASS)
    if not len(others):
        return cases
    tuples = t.tuples
    reasons, notes = t.reasons[others].tolist(), t.notes[others].tolist()
    verdicts, classes = t.verdict[others].tolist(), t.match_class[others].tolist()
    metrics = _metrics_texts(t, others)
    failing = t.verdict[others] == FAIL
    side_a = iter(side_texts(t, 0, others[failing]))
    side_b = iter(side_texts(t, 1, others[failing]))
    parents = t.parent_cell[others].tolist()
    for j, i in enumerate(others.tolist()):
        why = "; ".join((*tuples[reasons[j]], *tuples[notes[j]]))
        verdict, cls = verdicts[j], MATCH_CLASSES[classes[j]]
        if verdict == FAIL:
            details = [f"class: {cls}", f"A: {next(side_a)}", f"B: {next(side_b)}"]
            if metrics[j] is not None:
                details.append(f"metrics: {metrics[j]}")
            parent = None if parents[j] < 0 else strings[parents[j]]
            if parent:
                details.append(f"parent cell: {parent}")
            child = _xml_element("failure", {"message": why or "fail", "type": cls}, "\n".join(details))
        elif verdict == SKIP:
            child = _xml_element("skipped", {"message": why or cls})
        elif verdict == WARNING:
            child = _xml_element("system-out", {}, f"warning: {why}\nmetrics: {metrics[j] or ''}")
        else:
            continue
        cases[i] = f"<testcase{heads[i]}>\n   {child}\n  </testcase>"
    return cases


def junit_chunks(comparison: Comparison, *, facts: ReportFacts | None = None) -> Iterator[str]:
    """:func:`render_junit`'s text in pieces, in order: a unit's test cases are written
    :data:`~msprobe_cmp.reports.common.CHUNK_ROWS` rows at a time, so that no more than a chunk's text is in memory
    at once.  ``facts``: what the reports of this comparison share
    (:class:`~msprobe_cmp.reports.common.ReportFacts`)."""
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
    # every suite as (name, tests, failures, skipped, its children in chunks); the root's totals come first
    suites: list[tuple[str, int, int, int, Iterable[list[str]]]] = [
        ("msprobe-cmp verdict", 1, int(failed), 0, [[_xml_parent("properties", {}, props, 2), case]])]
    attrs: dict[str, str] = {}  # entry name or argument path -> its attribute value, written
    for u in comparison.units:
        props = [_xml_element("property", {"name": name, "value": value}) for name, value in (
            ("verdict", u.verdict), ("directory_a", u.unit_a.directory), ("directory_b", u.unit_b.directory))]
        cases = (_junit_cases(window, attrs) for _, window in row_windows(u.rows))
        verdicts = dict(u.verdict_counts)
        suites.append((f"{u.unit_a.label} vs {u.unit_b.label}", len(u.rows), verdicts["fail"], verdicts["skip"],
                       _chain([[_xml_parent("properties", {}, props, 2)]], cases)))
    if comparison.unpaired:
        unpaired = [
            _xml_parent("testcase", {"classname": "unpaired", "name": f"{ref.side.upper()} {ref.label}", "time": "0"},
                        [_xml_element("skipped", {"message": "no partner unit on the other side: not compared"})], 2)
            for ref in comparison.unpaired
        ]
        n = len(comparison.unpaired)
        suites.append(("unpaired units", n, 0, n, [unpaired]))
    totals = (sum(s[1] for s in suites), sum(s[2] for s in suites), sum(s[3] for s in suites))
    # the root as _xml_parent writes it (it always holds the verdict's suite), each suite in pieces
    root = _xml_attrs(_suite_attrs("msprobe-cmp", *totals))
    yield f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites{root}>'
    for name, tests, failures, skipped, children in suites:
        yield "\n "
        yield from _xml_parent_parts("testsuite", _suite_attrs(name, tests, failures, skipped), children, 1)
    yield "\n</testsuites>\n"


def render_junit(comparison: Comparison, *, facts: ReportFacts | None = None) -> str:
    """The comparison as JUnit XML (module docstring): CI systems show failing rows as failed tests.

    Written as text, element by element, in the form ``xml.etree.ElementTree`` gives the same tree after
    ``ElementTree.indent(space=" ")``: attributes in the order given, elements without content as
    ``<tag ... />``, one space of indentation per level: :func:`junit_chunks` joined.  ``facts``: what the reports
    of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`).
    """
    return "".join(junit_chunks(comparison, facts=facts))


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
