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
import functools
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict
from importlib import resources
from itertools import chain as _chain
from itertools import repeat
from typing import Any, BinaryIO, NamedTuple
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
    compact_encoder,
    differing_arguments,
    dumps_standard,
    format_number,
    origin_text,
    row_windows,
    side_texts,
    spliced_json,
)

#: Identity of the JSON document; bump :data:`JSON_VERSION` on any incompatible change.
JSON_SCHEMA = "msprobe-cmp.comparison"
JSON_VERSION = 2  # 2: each cell's max_noise_ratio

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


# --------------------------------------------------------------------------------------------------
# Floats as text, a column at a time


class FloatSpelling(NamedTuple):
    """How a report spells a float64 value (:func:`float_texts`).

    Attributes:
        python_repr: True: Python's ``repr`` (``1e-05``; what the csv module and the standard library's JSON encoder
            write); False: orjson's spelling (``0.00001``; what orjson writes for a float).  Both give the shortest
            text that reads back as the same float; they differ only in where the exponent starts and in its digits.
        nan, inf, ninf: the text of NaN, +Inf and -Inf.
        undefined: the text of a value that is not defined (a missing statistic or metric).
    """

    python_repr: bool
    nan: str
    inf: str
    ninf: str
    undefined: str


#: The CSV's numbers: what ``csv.writer`` writes for a float (its ``repr``), ``""`` for a missing one.
CSV_FLOATS = FloatSpelling(True, "nan", "inf", "-inf", "")

def _json_number(x: float | None) -> float | str | None:
    """A number of comparison.json: as it is, or the string of a non-finite one (module docstring)."""
    if x is None or math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


#: comparison.json's numbers as orjson writes them; non-finite ones as strings (:func:`_json_number`), missing ones
#: null.
JSON_FLOATS = FloatSpelling(False, f'"{_json_number(math.nan)}"', f'"{_json_number(math.inf)}"',
                            f'"{_json_number(-math.inf)}"', "null")

#: comparison.json's numbers as the standard library writes them (the encoder of a document orjson refuses).
JSON_STANDARD_FLOATS = JSON_FLOATS._replace(python_repr=True)

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _orjson_text(values: np.ndarray) -> bytes:
    """orjson's text of ``values`` (float64 [n], C-contiguous, every value finite): the values' texts separated by
    commas, between brackets."""
    return orjson.dumps(values, option=_NUMPY)


def _spelled(text: np.ndarray, at: np.ndarray, word: bytes) -> bool:
    """Whether ``word`` is in ``text`` (uint8 [m]) at each of the positions ``at`` (int [k])."""
    if len(at) and (at.min() < 0 or at.max() + len(word) > len(text)):
        return False
    return bool((text[at[:, None] + np.arange(len(word))] == np.frombuffer(word, dtype=np.uint8)).all())


#: Finite floats of every span where orjson's and ``repr``'s spellings could differ (positional and exponent forms,
#: their boundaries 1e-5, 1e-4, 1e-9 and 1e16, signed zero, integers as floats, subnormals, the largest float).
_PROBE = (0.0, -0.0, 1.0, -2.5, 123.0, 0.1, 1e-4, 9.75e-05, -1e-5, 1.5e-06, 1e-9, 9.99e-10, 1e-10, 1e15, 1e16,
          -1.5e16, 1e22, 1e300, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 12345678.9, 0.3333333333333333)


@functools.cache
def _orjson_spells_as_expected() -> bool:
    """Whether this process's orjson gives :data:`_PROBE` the text :func:`_repr_text`'s respelling expects
    (orjson 3.13's, checked once per process): when it does not, :func:`_repr_text` writes each ``repr``."""
    expected = [repr(x) for x in _PROBE]
    try:
        text = orjson.dumps(np.array(_PROBE), option=_NUMPY)
    except (TypeError, orjson.JSONEncodeError):
        return False
    got = text.decode("ascii")[1:-1].split(",")
    fifth = [i for i, x in enumerate(_PROBE) if 1e-5 <= abs(x) < 1e-4]
    single = [i for i, x in enumerate(_PROBE) if 1e-9 <= abs(x) < 1e-5]
    respelled = {i: repr(_PROBE[i]) for i in (*fifth, *single)}
    return (all(got[i].lstrip("-").startswith("0.0000") for i in fifth)
            and all("e-" in got[i] and got[i].rsplit("e-", 1)[1] == str(int(expected[i].rsplit("e-", 1)[1]))
                    for i in single)
            and [respelled.get(i, t) for i, t in enumerate(got)] == expected)


def _each_repr(values: np.ndarray) -> bytes:
    """:func:`_repr_text` made value by value with ``repr``."""
    return ("[" + ",".join(map(float.__repr__, values.tolist())) + "]").encode("ascii")


def _repr_text(values: np.ndarray) -> bytes:
    """``repr`` of each of ``values`` (float64 [n], C-contiguous, every value finite), in order, separated by commas,
    with one byte more at each end (a bracket or a comma): orjson's text of them all, respelled in place where
    orjson spells a value otherwise (:func:`float_texts`).

    In the text's bytes, a value in ``[1e-5, 1e-4)`` (``0.0000975``) gets its first digit and a point written over the
    last two bytes of ``0.0000``, the bytes before them marked to go (``xxxxx9.75``; a single digit's point goes too)
    and its comma marked for ``e-05,``; a value with a one-digit exponent (``1.5e-6``) gets the exponent's minus
    marked for ``-0``; then each kind of mark is replaced in one pass over the text."""
    if not _orjson_spells_as_expected():
        return _each_repr(values)
    text = _orjson_text(values)
    magnitude = np.abs(values)
    fifth = np.flatnonzero((magnitude >= 1e-5) & (magnitude < 1e-4))
    single = np.flatnonzero((magnitude >= 1e-9) & (magnitude < 1e-5))
    if not len(fifth) and not len(single):
        return text
    b = np.frombuffer(text, dtype=np.uint8).copy()
    b[0] = b[-1] = ord(",")  # every value between two commas
    commas = np.flatnonzero(b == ord(","))
    ends = commas[1:]
    starts = commas[:-1][fifth] + 1 + np.signbit(values[fifth])  # each "0.0000"'s first byte
    if not (_spelled(b, starts, b"0.0000") and _spelled(b, ends[single] - 3, b"e-")):
        return _each_repr(values)  # not the spelling respelled here: repr itself
    b[ends[single] - 2] = ord("z")  # the exponent's minus: "e-6," is "ez6,"
    b[starts + 5] = b[starts + 6]  # the first digit
    b[starts + 6] = np.where(ends[fifth] - starts > 7, ord("."), ord("x"))
    b[(starts[:, None] + np.arange(5)).reshape(-1)] = ord("x")
    b[ends[fifth]] = ord("y")
    out = b.tobytes()
    if len(fifth):
        out = out.replace(b"x", b"").replace(b"y", b"e-05,")
    if len(single):
        out = out.replace(b"z", b"-0")
    return out


#: Marks in :func:`float_rows`' text: a byte to remove, and the byte standing for each of a spelling's words
#: (:attr:`FloatSpelling.nan`, ``inf``, ``ninf``, ``undefined``).  No float's text holds a control character.
_GONE = 0x05
_WORD_MARKS = (0x01, 0x02, 0x03, 0x04)


def float_rows(values: np.ndarray, defined: np.ndarray, spelling: FloatSpelling) -> list[str]:
    """The text of each row of ``values`` (float64 [n, k]) as ``spelling`` spells its values (:func:`float_texts`),
    the row's k texts joined by commas (a CSV line's cells, a JSON array's items): one string a row, the row's
    values written in one text, not one string each.  ``defined``: bool [n, k], False where the value is missing
    (its text is ``spelling.undefined``).

    The finite values are written by orjson all at once (respelled as ``repr`` writes them for
    ``spelling.python_repr``: :func:`_repr_text`), the others as ``0.0`` and that text then replaced by the value's
    word, each kind of word in one pass over the text.  The rows are the text cut at every k-th comma (at every
    comma for one value a row: the words hold none).

    Raises:
        ValueError: ``values`` is not 2-D, ``defined`` does not have its shape, or a word of ``spelling`` holds a
            comma, a line break or a control character (which would be taken for the text's marks).
    """
    if np.ndim(values) != 2:
        raise ValueError(f"values has {np.ndim(values)} dimensions, not 2")
    if np.shape(defined) != np.shape(values):
        raise ValueError(f"defined has shape {np.shape(defined)}, values {np.shape(values)}")
    words = (spelling.nan, spelling.inf, spelling.ninf, spelling.undefined)
    if any(ch in ",\n" or ord(ch) < 0x20 for word in words for ch in word):
        raise ValueError(f"a word of {spelling} holds a comma, a line break or a control character")
    n, k = np.shape(values)
    if not n * k:
        return [""] * n
    flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    given = np.asarray(defined, dtype=bool).reshape(-1)
    usable = np.isfinite(flat) & given
    odd = np.flatnonzero(~usable)
    finite = np.where(usable, flat, 0.0) if len(odd) else flat
    text = _repr_text(finite) if spelling.python_repr else _orjson_text(finite)
    out = text[1:-1]  # the values' texts, separated by commas
    used: list[int] = []
    if len(odd) or k > 1:  # marks to write in the text's bytes
        b = np.frombuffer(out, dtype=np.uint8).copy()
        commas = np.flatnonzero(b == ord(","))
        if len(odd):  # each such value's "0.0" becomes its word's mark and two bytes to remove
            raw = flat[odd]
            word = np.where(given[odd], np.where(np.isnan(raw), 0, np.where(raw > 0, 1, 2)), 3)
            used = np.flatnonzero(np.bincount(word, minlength=4)).tolist()
            starts = np.concatenate(([0], commas + 1))[odd]
            b[starts] = np.array(_WORD_MARKS, dtype=np.uint8)[word]
            b[starts + 1] = b[starts + 2] = _GONE
        if k > 1:
            b[commas[k - 1::k]] = ord("\n")  # the end of each row
        out = b.tobytes()
    if used:
        out = out.replace(bytes((_GONE,)), b"")
        for w in used:
            out = out.replace(bytes((_WORD_MARKS[w],)), words[w].encode("utf-8"))
    return out.decode("utf-8").split("\n" if k > 1 else ",")


def int_rows(values: np.ndarray) -> list[str]:
    """The text of each row of ``values`` (an integer array [n, k]): its k numbers in decimal joined by commas (a
    JSON array's items), written by orjson all at once and cut into rows.

    Raises:
        ValueError: ``values`` is not a 2-D array of signed integers.
    """
    if np.ndim(values) != 2 or np.asarray(values).dtype.kind != "i":
        raise ValueError(f"values is not a 2-D array of signed integers: {np.ndim(values)} dimensions of "
                         f"{np.asarray(values).dtype}")
    if not len(values):
        return []
    return orjson.dumps(np.ascontiguousarray(values, dtype=np.int64), option=_NUMPY).decode("ascii")[2:-2].split("],[")


def float_texts(values: np.ndarray, defined: np.ndarray, spelling: FloatSpelling) -> list[str]:
    """The text of each of ``values`` as ``spelling`` spells it, in C order (a 2-D block row by row).

    ``values``: float64 array of any shape; ``defined``: bool array of the same shape, False where the value is
    missing (its text is ``spelling.undefined`` whatever the value).  The finite values are written by orjson
    (shortest round-trip digits, as ``repr`` has them too); for ``spelling.python_repr`` the two spans where
    orjson's spelling differs from ``repr`` are respelled in bulk (:func:`_repr_text`):
    ``[1e-5, 1e-4)`` in magnitude, positional in orjson (``0.0000975``) and ``9.75e-05`` in ``repr``; and
    ``[1e-9, 1e-5)``, whose one-digit exponent orjson writes without ``repr``'s leading zero (``1.5e-6`` against
    ``1.5e-06``).  Elsewhere the two agree (``1e+16``, ``-0.0``, ``123.0``, ``5e-324``), as the property tests check
    over random bit patterns and the boundaries (orjson 3.13's spelling).  Made as :func:`float_rows` of one value
    a row.

    Raises:
        ValueError: ``defined`` does not have the shape of ``values``.
    """
    if np.shape(defined) != np.shape(values):
        raise ValueError(f"defined has shape {np.shape(defined)}, values {np.shape(values)}")
    return float_rows(np.reshape(values, (-1, 1)), np.reshape(defined, (-1, 1)), spelling)


def _scatter(texts: list[str], rows: np.ndarray, new: list[str]) -> None:
    """``texts[rows[k]] = new[k]`` for every k."""
    for i, text in zip(rows.tolist(), new, strict=True):
        texts[i] = text


#: Text pieces of ``n`` rows: a list of one text per row, or one text that is every row's.
_Pieces = list[str] | str


def _picked(words: np.ndarray, codes: np.ndarray) -> _Pieces:
    """``words[codes]`` (an object array of texts, int codes [n]) as pieces of rows: one text when every row has
    the same."""
    if len(codes) and (codes == codes[0]).all():
        return str(words[codes[0]])
    return words[codes].tolist()


def joined_rows(pieces: Iterable[list[str] | str], n: int, sep: str = "") -> Iterator[str]:
    """The text of each of ``n`` rows: the row's item of every piece, in order, joined by ``sep``; a piece is a list
    of one text per row, or one text that is every row's (:data:`_Pieces`).  Neighbouring pieces that are one text
    for every row are joined once.

    Raises:
        ValueError: a list piece does not have ``n`` items (when the rows are taken).
    """
    merged: list[_Pieces] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += sep + piece
        else:
            merged.append(piece)
    return map(sep.join, zip(*(repeat(p, n) if isinstance(p, str) else p for p in merged), strict=True))


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
        "max_noise_ratio": _json_number(cell.max_noise_ratio),
    }


def _json_used(t: RowTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which strings, tuples and shapes of ``t``'s tables its rows write into comparison.json: bool masks [S + 1],
    [T + 1], [H + 1] over the codes, the last item standing for code -1 (null)."""
    strings = np.zeros(len(t.strings) + 1, dtype=bool)
    tuples = np.zeros(len(t.tuples) + 1, dtype=bool)
    shapes = np.zeros(len(t.shapes) + 1, dtype=bool)
    for column in (t.entry, t.arg_path, t.entry_b, t.arg_path_b, t.mapped_by, t.parent_cell):
        strings[column] = True
    for s in (0, 1):
        side = t.side_columns(s)
        for column in (side.dtype, side.md5, side.data_name, side.value):
            strings[column] = True
        shapes[side.shape] = True
    tuples[t.reasons] = True
    tuples[t.notes] = True
    return strings, tuples, shapes


def _json_table(items: Sequence[Any], used: np.ndarray, dumps: Callable[[Any], str]) -> np.ndarray:
    """object [len(items) + 1]: ``dumps`` of each item ``used`` marks (``"null"`` for the others and for the last
    slot, code -1)."""
    table = np.full(len(items) + 1, "null", dtype=object)
    codes = np.flatnonzero(used[:-1])
    table[codes] = [dumps(items[k]) for k in codes.tolist()]
    return table


def _json_string_table(strings: Sequence[str], used: np.ndarray, dumps: Callable[[Any], str]) -> np.ndarray:
    """:func:`_json_table` of a table of strings: when ``dumps`` escapes none of the strings used (its text of
    their list is as long as the strings quoted and joined by commas: both encoders only lengthen a string they
    escape), each is its text between double quotes, made in bulk; else each is written by ``dumps``."""
    codes = np.flatnonzero(used[:-1])
    picked = [strings[k] for k in codes.tolist()]
    if len(dumps(picked)) != sum(map(len, picked)) + 3 * len(picked) + (1 if picked else 2):
        return _json_table(strings, used, dumps)
    table = np.full(len(strings) + 1, "null", dtype=object)
    table[codes] = '"' + np.array(picked, dtype=object) + '"'
    return table


_JSON_CLASSES = np.array([orjson.dumps(c).decode() for c in MATCH_CLASSES], dtype=object)
_JSON_COMPARED_BY = np.array([orjson.dumps(c).decode() for c in COMPARED_BY], dtype=object)
_JSON_VERDICTS = np.array([orjson.dumps(v).decode() for v in VERDICTS], dtype=object)
_JSON_KINDS = np.array([orjson.dumps(k).decode() for k in SIDE_KINDS], dtype=object)
_JSON_DIFFERS = np.array(["null", "false", "true"], dtype=object)  # by the differs code + 1
_JSON_METRIC_KEYS = [orjson.dumps(name).decode() for name in METRIC_COLUMNS]


def _blanked(pieces: list[_Pieces], rows: np.ndarray, first: str, n: int) -> list[_Pieces]:
    """``pieces`` (of ``n`` rows) with the rows ``rows`` (bool [n]) written as ``first`` alone: ``first`` as their
    first piece's item and ``""`` as each other piece's."""
    out: list[_Pieces] = []
    for k, piece in enumerate(pieces):
        column = np.full(n, piece, dtype=object) if isinstance(piece, str) else np.array(piece, dtype=object)
        column[rows] = first if k == 0 else ""
        out.append(column.tolist())
    return out


class _JsonRows:
    """Writes the rows of one unit into comparison.json, a window of rows at a time (:meth:`text`): the texts of
    the unit's strings, tuples and shapes (as the document's encoder ``dumps`` writes them, the ones the rows write
    only) are made once; each field of the rows is then picked from them by its codes, or written column-wise
    (:func:`float_texts` with ``floats``), and each row's text joined from the pieces of its fields, in the
    document's order."""

    def __init__(self, t: RowTable, dumps: Callable[[Any], str], floats: FloatSpelling) -> None:
        used_strings, used_tuples, used_shapes = _json_used(t)
        self.strings = _json_string_table(t.strings, used_strings, dumps)
        # a row's name, <entry>.<arg path>: its entry's text without the closing quote, then its path's without
        # the opening one (JSON escapes a string character by character)
        self.opened = np.array([x[:-1] for x in self.strings.tolist()], dtype=object)
        self.closed = np.array([x[1:] for x in self.strings.tolist()], dtype=object)
        self.has_text = np.array([*(bool(x) for x in t.strings), False])  # an empty name counts as none
        self.tuples = _json_table([list(x) for x in t.tuples], used_tuples, dumps)
        self.shapes = _json_table([list(x) for x in t.shapes], used_shapes, dumps)
        self.floats = floats

    def _side(self, t: RowTable, s: int) -> list[_Pieces]:
        """The pieces of side ``s`` (0 = A, 1 = B) of each row: ``null`` where the row is absent from that side,
        else ``{"kind", "dtype", "shape", "max", "min", "mean", "norm", "md5", "data_name", "value"}``."""
        side = t.side_columns(s)
        absent = side.kind == ABSENT
        if absent.all():
            return ["null"]
        strings = self.strings
        stats: list[_Pieces] = ["null"] * 4
        if side.stats_defined.any():
            cells = float_texts(side.stats, side.stats_defined, self.floats)
            stats = [cells[k::4] for k in range(4)]
        pieces: list[_Pieces] = [
            '{"kind":', _picked(_JSON_KINDS, side.kind), ',"dtype":', _picked(strings, side.dtype),
            ',"shape":', _picked(self.shapes, side.shape), ',"max":', stats[0], ',"min":', stats[1],
            ',"mean":', stats[2], ',"norm":', stats[3], ',"md5":', _picked(strings, side.md5),
            ',"data_name":', _picked(strings, side.data_name), ',"value":', _picked(strings, side.value), "}"]
        return _blanked(pieces, absent, "null", len(t)) if absent.any() else pieces

    def _metrics(self, t: RowTable) -> list[_Pieces]:
        """The pieces of each row's metrics: ``{name: value}`` in :data:`METRIC_COLUMNS` order, the metrics the row
        has (null where undefined, non-finite values as text)."""
        state = t.metric_state
        used = np.flatnonzero((state != METRIC_ABSENT).any(axis=0))
        if not len(used):
            return ["{}"]
        cells = float_texts(t.metrics[:, used], state[:, used] == METRIC_VALUE, self.floats)
        values = {k: cells[j::len(used)] for j, k in enumerate(used.tolist())}
        patterns, which = t.metric_patterns()

        def pieces(columns: tuple[int, ...], rows: np.ndarray | None) -> list[_Pieces]:
            """The pieces of the metrics of the rows ``rows`` (all when None), whose metrics are ``columns``."""
            if not columns:
                return ["{}"]
            out: list[_Pieces] = []
            for j, k in enumerate(columns):
                out.append(("{" if j == 0 else ",") + _JSON_METRIC_KEYS[k] + ":")
                out.append(values[k] if rows is None else np.array(values[k], dtype=object)[rows].tolist())
            return [*out, "}"]

        if len(patterns) == 1:
            return pieces(patterns[0], None)
        texts = [""] * len(t)  # rows of several sets of metrics: each row's object made whole
        for p, columns in enumerate(patterns):
            rows = np.flatnonzero(which == p)
            _scatter(texts, rows, list(joined_rows(pieces(columns, rows), len(rows))))
        return [texts]

    def text(self, t: RowTable, first: int) -> str:
        """The rows of ``t`` (a :meth:`~msprobe_cmp.comparator.rowtable.RowTable.window` of the unit's rows whose
        first row is the unit's row ``first``) as comparison.json writes them, joined by commas: each row
        ``{"index", "name", "entry", "entry_b", "arg_path", "arg_path_b", "mapped_by", "match_class",
        "compared_by", "a", "b", "metrics", "verdict", "reasons", "notes", "differs", "parent_cell"}`` (B's names
        are A's where B has none)."""
        strings, has_text = self.strings, self.has_text
        entry_b = np.where(has_text[t.entry_b], t.entry_b, t.entry)
        path_b = np.where(has_text[t.arg_path_b], t.arg_path_b, t.arg_path)
        return ",".join(joined_rows((
            '{"index":', list(map(str, range(first, first + len(t)))),
            ',"name":', _picked(self.opened, t.entry), ".", _picked(self.closed, t.arg_path),
            ',"entry":', _picked(strings, t.entry), ',"entry_b":', _picked(strings, entry_b),
            ',"arg_path":', _picked(strings, t.arg_path), ',"arg_path_b":', _picked(strings, path_b),
            ',"mapped_by":', _picked(strings, t.mapped_by), ',"match_class":', _picked(_JSON_CLASSES, t.match_class),
            ',"compared_by":', _picked(_JSON_COMPARED_BY, t.compared_by),
            ',"a":', *self._side(t, 0), ',"b":', *self._side(t, 1), ',"metrics":', *self._metrics(t),
            ',"verdict":', _picked(_JSON_VERDICTS, t.verdict), ',"reasons":', _picked(self.tuples, t.reasons),
            ',"notes":', _picked(self.tuples, t.notes), ',"differs":', _picked(_JSON_DIFFERS, t.differs + 1),
            ',"parent_cell":', _picked(strings, t.parent_cell), "}"), len(t)))


def _first_of_each(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The first row of each code among ``rows`` (int [m], ascending; ``codes`` int [n] per row), ascending."""
    _, first = np.unique(codes[rows], return_index=True)
    return rows[np.sort(first)]


def _json_stacks(t: RowTable) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The unit's ``stacks`` and ``stacks_b``: each entry's call stack (the first non-empty one of its rows) and B's
    (the first of its rows whose non-empty B stack differs from its A stack), by entry name, in the order the rows
    first give them; the frames as the table's tuples (both encoders write a tuple as a list)."""
    table, strings = t.stacks, t.strings
    filled = np.array([bool(frames) for frames in table], dtype=bool)
    stacks: dict[str, tuple[str, ...]] = {}
    rows = _first_of_each(t.entry, np.flatnonzero(filled[t.stack]))
    for entry, stack in zip(t.entry[rows].tolist(), t.stack[rows].tolist(), strict=True):
        stacks.setdefault(strings[entry], table[stack])
    differ = np.flatnonzero(filled[t.stack_b] & (t.stack_b != t.stack))
    if len(differ):
        differ = differ[[table[b] != table[a] for a, b in zip(t.stack[differ].tolist(), t.stack_b[differ].tolist(),
                                                               strict=True)]]
    stacks_b: dict[str, tuple[str, ...]] = {}
    rows = _first_of_each(t.entry, differ)
    for entry, stack in zip(t.entry[rows].tolist(), t.stack_b[rows].tolist(), strict=True):
        stacks_b.setdefault(strings[entry], table[stack])
    return stacks, stacks_b


def _json_unit_fields(unit: UnitComparison, compared: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A unit of comparison.json but its ``rows`` (:meth:`_JsonRows.text`): the fields before them and the fields
    after them, in the document's order."""
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


def _json_encoder(comparison: Comparison, head: dict[str, Any], unit_compared: Sequence[int]
                  ) -> tuple[Callable[[Any], str], dict[int, tuple[tuple[dict[str, Any], dict[str, Any]], _JsonRows]]]:
    """The encoder of the whole of comparison.json, chosen before any of it is written: orjson's, unless orjson
    refuses something the document holds (a lone surrogate in a name, an integer beyond 64 bits in a shape), then
    the standard library's, so that every float of the document is in one encoder's form.  Tried, as
    :func:`~msprobe_cmp.reports.common.compact_encoder` tries a sample, on the fields before the units, then on each
    unit, the last first: its fields (:func:`_json_unit_fields`) and the texts of what its rows write
    (:class:`_JsonRows`).  Returned with the first unit's fields and row texts when they were made with it
    (``{0: ((before, after), rows)}``)."""
    dumps = compact_encoder(head)
    made: dict[int, tuple[tuple[dict[str, Any], dict[str, Any]], _JsonRows]] = {}
    for k in reversed(range(len(comparison.units))):
        if dumps is dumps_standard:
            return dumps, {}
        unit = comparison.units[k]
        fields = _json_unit_fields(unit, unit_compared[k])
        dumps = compact_encoder(fields)
        if dumps is not dumps_standard:
            try:
                rows = _JsonRows(unit.rows, dumps, JSON_FLOATS)
            except (orjson.JSONEncodeError, TypeError):  # what compact_encoder catches
                dumps = dumps_standard
            else:
                if k == 0:
                    made[0] = (fields, rows)
    return dumps, made


def _json_texts(comparison: Comparison, facts: ReportFacts | None) -> Iterator[str]:
    """comparison.json's compact text in parts, in order: the fields before the units, then for each unit the fields
    before its rows, its rows :data:`~msprobe_cmp.reports.common.CHUNK_ROWS` at a time (:class:`_JsonRows`) and the
    fields after them; every part written by the encoder :func:`_json_encoder` chooses (the rows' numbers in its
    spelling: :data:`JSON_FLOATS` or :data:`JSON_STANDARD_FLOATS`).  Joined, the parts are that encoder's compact
    JSON of the whole document: compact JSON of a list or object is its items' JSON joined by commas between its
    brackets."""
    compared, unit_compared = ReportFacts.of(comparison, facts).compared_counts()
    head = _json_head(comparison, compared)
    dumps, made = _json_encoder(comparison, head, unit_compared)
    floats = JSON_STANDARD_FLOATS if dumps is dumps_standard else JSON_FLOATS

    def unit_texts(k: int, unit: UnitComparison, n: int) -> Iterator[str]:
        (before, after), rows = made.pop(k) if k in made else (_json_unit_fields(unit, n),
                                                               _JsonRows(unit.rows, dumps, floats))
        windows = ([rows.text(window, start)] for start, window in row_windows(unit.rows))
        return spliced_json(dumps, before, "rows", windows, after)

    units = (unit_texts(k, unit, n) for k, (unit, n) in enumerate(zip(comparison.units, unit_compared, strict=True)))
    return spliced_json(dumps, head, "units", units)


def _json_document(comparison: Comparison, facts: ReportFacts | None = None) -> dict[str, Any]:
    """The whole of comparison.json as one value: :func:`render_json`'s text parsed by the standard library (for
    the indented form)."""
    doc: dict[str, Any] = json.loads("".join(_json_texts(comparison, facts)))
    return doc


def write_json(comparison: Comparison, fh: BinaryIO, *, facts: ReportFacts | None = None) -> None:
    """Write comparison.json (:func:`render_json`'s document, compact) to the binary file ``fh`` from its current
    position, a bounded number of rows at a time: the bytes ``render_json(comparison).encode("utf-8",
    errors="backslashreplace")`` gives, without the whole text in memory.

    One encoder writes the whole document, chosen before anything is written (:func:`_json_encoder`): orjson's, or
    the standard library's when orjson refuses something the document holds (a lone surrogate in a name, an integer
    beyond 64 bits), as :func:`~msprobe_cmp.reports.common.dumps_compact` would for the whole document.  ``fh`` need
    not be seekable.  ``facts``: what the reports of this comparison share
    (:class:`~msprobe_cmp.reports.common.ReportFacts`).

    Raises:
        OSError: ``fh`` cannot be written.
    """
    for part in json_chunks(comparison, facts=facts):
        fh.write(part.encode("utf-8", errors="backslashreplace"))


def json_chunks(comparison: Comparison, *, facts: ReportFacts | None = None) -> Iterator[str]:
    """:func:`render_json`'s compact text in pieces, in order (what :func:`write_json` writes, before encoding): the
    fields before the units, then per unit its fields and its rows
    :data:`~msprobe_cmp.reports.common.CHUNK_ROWS` at a time, so that no more than a chunk's text is in memory at
    once.  ``facts``: what the reports of this comparison share (:class:`~msprobe_cmp.reports.common.ReportFacts`)."""
    return _json_texts(comparison, facts)


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

    The compact form is written from the rows' columns (:func:`_json_texts`) by one encoder: orjson, or the standard
    library for a document orjson refuses (a lone surrogate); the indented one is that text parsed and written by the
    standard library: the same JSON value either way.
    """
    text = "".join(_json_texts(comparison, None))
    if indent is None:
        return text
    return json.dumps(json.loads(text), indent=indent, allow_nan=False, ensure_ascii=False)


def _text(value: object) -> str:
    return "" if value is None else neutralize_cell(str(value))


#: The text of an integer, as ``repr`` writes one.
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _value_cell(dtype: str | None, value: str | None) -> str:
    """A non-tensor value (its type name and ``repr`` text) as a CSV cell: a number as the csv module writes it
    (``str`` of the int, exact at any size, for an integer type: ``int``, ``int*``, ``numpy.int*``, ``numpy.uint*``;
    ``repr`` of the float otherwise), anything else as neutralised text."""
    if value is None:
        return ""
    if dtype is not None and _INTEGER_TEXT.fullmatch(value) and (
            dtype == "int" or dtype.startswith(("int", "numpy.int", "numpy.uint"))):
        return str(int(value))
    if dtype in ("int", "float", "bool") or (dtype or "").startswith(("numpy.", "float", "int")):
        try:
            number = float(value)
        except ValueError:
            return _text(value)
        return str(int(number)) if dtype == "int" and number.is_integer() else repr(number)
    return _text(value)


_VERDICT_WORDS = np.array(VERDICTS, dtype=object)
_CLASS_WORDS = np.array(MATCH_CLASSES, dtype=object)
_COMPARED_BY_WORDS = np.array(COMPARED_BY, dtype=object)


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
        self.value_cells: dict[int, str] = {}
        self.whys: dict[int, str] = {}
        step, rank = unit.unit_a.step, unit.unit_a.rank
        self.step = "" if step is None else str(step)
        self.rank = "" if rank is None else str(rank)

    def _value_cell(self, dtype: int, value: int) -> str:
        """:func:`_value_cell` of a side's dtype and value codes."""
        strings = self.strings
        return _value_cell(None if dtype < 0 else strings[dtype], None if value < 0 else strings[value])

    def _why(self, reasons: int, notes: int) -> str:
        """The ``Err_message`` cell of a row's reasons and notes codes: the texts joined with ``"; "``, neutralised."""
        tuples = self.tuples
        return _text("; ".join((*tuples[reasons], *tuples[notes])) or None)

    @staticmethod
    def _pair_cells(first: np.ndarray, second: np.ndarray, cells: dict[int, str],
                    make: Callable[[int, int], str]) -> _Pieces:
        """``make(first[i], second[i])`` for every row ``i`` (int [n] codes each, -1 or more), made once per
        distinct pair (``cells`` keeps them for the next window, by the pair's key)."""
        if not len(first):
            return []
        width = int(max(first.max(), second.max())) + 2  # codes -1 .. width - 2
        pairs, which = np.unique((first.astype(np.int64) + 1) * width + (second + 1), return_inverse=True)
        made = np.empty(len(pairs), dtype=object)
        for k, pair in enumerate(pairs.tolist()):
            x, y = divmod(pair, width)
            key = (x << 32) | y  # the pair itself, whatever the window's width
            cell = cells.get(key)
            made[k] = cell if cell is not None else cells.setdefault(key, make(x - 1, y - 1))
        return str(made[0]) if len(made) == 1 else made[which.reshape(-1)].tolist()

    def columns(self, t: RowTable) -> tuple[list[_Pieces], list[_Pieces], list[_Pieces]]:
        """The cells of the rows of ``t`` (a :meth:`~msprobe_cmp.comparator.rowtable.RowTable.window` of the unit's
        rows), column by column (:data:`CSV_COLUMNS`), each as the text the csv module writes before quoting, in
        three parts: the text columns before the numbers (names, dtypes, shapes), the numbers (the metrics' and
        statistics' floats as their ``repr``, ``""`` for a missing value) and the text columns after them (numbers
        with ``str``, texts neutralised: :func:`neutralize_cell`).  A column is a list of one text per row, or one
        text when it is every row's cell; the numbers are, after the metric columns no row has (each ``""``), one
        text a row holding the rest of them joined by commas (:func:`float_rows`, :data:`CSV_FLOATS`).

        A row name ``<entry>.<arg path>`` is neutralised as its entry name is (the name starts with it, or with
        the dot when it is empty); B's uses B's own entry name and argument path where they are names.
        """
        texts, raw, has_text, shape_texts = self.texts, self.raw, self.has_text, self.shape_texts
        a, b = t.side_columns(0), t.side_columns(1)
        entry_b = np.where(has_text[t.entry_b], t.entry_b, t.entry)
        path_b = np.where(has_text[t.arg_path_b], t.arg_path_b, t.arg_path)
        before: list[_Pieces] = [
            np.where(a.kind == ABSENT, "", texts[t.entry] + "." + raw[t.arg_path]).tolist(),
            np.where(b.kind == ABSENT, "", texts[entry_b] + "." + raw[path_b]).tolist(),
            _picked(texts, a.dtype), _picked(texts, b.dtype), _picked(shape_texts, a.shape),
            _picked(shape_texts, b.shape),
        ]
        defined = t.metric_state == METRIC_VALUE
        used = np.flatnonzero(defined.any(axis=0))
        first = int(used[0]) if len(used) else len(METRIC_COLUMNS)  # the metric columns before it: no row has one
        numbers: list[_Pieces] = [""] * first
        numbers.append(float_rows(np.hstack((t.metrics[:, first:], a.stats, b.stats)),
                                  np.hstack((defined[:, first:], a.stats_defined, b.stats_defined)), CSV_FLOATS))
        after: list[_Pieces] = [_picked(texts, a.md5), _picked(texts, b.md5)]
        for side in (a, b):
            after.append(self._pair_cells(side.dtype, side.value, self.value_cells, self._value_cell))
        after.append(_picked(_VERDICT_WORDS, t.verdict))
        after.append(self._pair_cells(t.reasons, t.notes, self.whys, self._why))
        after.append(_picked(_CLASS_WORDS, t.match_class))
        after.append(_picked(_COMPARED_BY_WORDS, t.compared_by))
        after += [self.step, self.rank]
        after.append(_picked(texts, t.parent_cell))
        # A's file name, else B's
        after.append(_picked(texts, np.where(has_text[a.data_name], a.data_name, b.data_name)))
        return before, numbers, after


def _csv_row(unit: UnitComparison, row: ComparisonRow) -> list[str]:
    """The cells of one row of ``unit`` (:meth:`_CsvCells.columns` of that row alone: for tests and single rows)."""
    before, numbers, after = _CsvCells(unit).columns(unit.rows.window(row.index, row.index + 1))
    cells = [column if isinstance(column, str) else column[0] for column in (*before, *numbers, *after)]
    return [*cells[:len(before) + len(numbers) - 1], *cells[len(before) + len(numbers) - 1].split(","),
            *cells[len(before) + len(numbers):]]


# A text cell holding one of these makes the csv module quote it (QUOTE_MINIMAL: the delimiter, the quote
# character, a line-terminator character); NUL is listed too, to leave every unusual cell to the csv module.
_CSV_SPECIAL = (",", '"', "\n", "\r", "\x00")
_CSV_SPECIAL_RE = re.compile('[,"\n\r\x00]')


def _csv_text_column(cells: list[str]) -> list[str]:
    """A column of text cells as ``csv.writer(lineterminator="\\n")`` writes each: as they are unless they hold a
    character of :data:`_CSV_SPECIAL`, which the csv module writes itself (once per distinct text)."""
    joined = "".join(cells)
    if not any(ch in joined for ch in _CSV_SPECIAL):
        return cells
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    written: dict[str, str] = {}
    for text in set(cells):
        if _CSV_SPECIAL_RE.search(text):
            buf.seek(0)
            buf.truncate()
            writer.writerow((text,))
            written[text] = buf.getvalue()[:-1]
    get = written.get
    return [get(x, x) for x in cells]


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
            before, numbers, after = cells.columns(window)
            quoted = [_csv_text_column([column])[0] if isinstance(column, str) else _csv_text_column(column)
                      for column in (*before, *after)]
            yield "\n".join(joined_rows((*quoted[:len(before)], *numbers, *quoted[len(before):]), len(window),
                                          ",")) + "\n"


def render_csv(comparison: Comparison) -> str:
    """Every row of every unit as CSV text with :data:`CSV_COLUMNS` (module docstring): :func:`csv_chunks` joined.

    Row names are ``<entry>.<arg path>``; ``Bench Name`` / ``NPU Name`` are empty when the row is
    absent from that side.  ``Step`` and ``Rank`` are A's ids (empty when None).

    The text is what ``csv.writer(lineterminator="\\n")`` writes for the cells (:meth:`_CsvCells.columns`), byte for
    byte: each column is quoted as the csv module quotes it (:func:`_csv_text_column`) and the lines joined.
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
