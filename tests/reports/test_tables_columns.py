"""comparison.csv and comparison.json written column-wise (issue 16): pinned against independent references.

The floats of a column are spelled in bulk (``tables.float_texts``: orjson's shortest digits, respelled where
``repr`` differs); each is checked against ``repr`` (the csv module's and the standard library's spelling) and
``orjson.dumps`` of the Python float (what the document's per-row dictionaries gave) over random bit patterns and
the boundaries.  The rows of both reports are checked against references built from the row views
(``ComparisonRow``), not from the columns the writers read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.comparator.rowtable import RowTable
from msprobe_cmp.dump import DumpMeta, Entry, Map, RankDump, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.reports import render_csv, render_json, tables
from msprobe_cmp.reports.common import dumps_standard
from msprobe_cmp.reports.tables import (
    CSV_COLUMNS,
    CSV_FLOATS,
    JSON_FLOATS,
    JSON_STANDARD_FLOATS,
    METRIC_COLUMNS,
    float_rows,
    float_texts,
    int_rows,
    render_json_utf8,
    write_json,
)

# ------------------------------------------------------------------ floats


def _bits(n: int, seed: int) -> np.ndarray:
    """``n`` float64 values of uniformly random bit patterns (every exponent, subnormals, NaN payloads, ±Inf)."""
    return np.random.default_rng(seed).integers(0, 2**64, n, dtype=np.uint64).view(np.float64)


def _boundaries() -> np.ndarray:
    """Values within 8 ulps of each power of ten from 1e-12 to 1e22 (where the spellings switch form), both signs,
    and the special values: ±0, the smallest subnormal and normal, the largest float, integers as floats."""
    out: list[float] = []
    for e in range(-12, 23):
        x = 10.0**e
        for _ in range(8):
            x = float(np.nextafter(x, 0.0))
        for _ in range(16):
            out += [x, -x]
            x = float(np.nextafter(x, math.inf))
    out += [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
            -1.7976931348623157e308, 1.0, -1.0, 123.0, 2.0**53, 2.0**53 + 2, 2.0**63, 1e16, 9999999999999998.0,
            1.5e-5, 9.99e-5, 1e-9, 9.9e-10]
    return np.array(out)


def _decades(n: int, seed: int) -> np.ndarray:
    """``n`` random values whose magnitudes spread evenly over 1e-12 .. 1e18, both signs."""
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-12, 18, n)


def _csv_reference(x: float, defined: bool) -> str:
    return repr(x) if defined else ""


def _json_reference(x: float, defined: bool) -> str:
    """The text the per-row dictionaries gave: ``_json_number`` of the float, then orjson (None: null)."""
    if not defined:
        return "null"
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return orjson.dumps(x).decode()


def _standard_reference(x: float, defined: bool) -> str:
    if not defined or not math.isfinite(x):
        return _json_reference(x, defined)
    return json.dumps(x)


@pytest.mark.parametrize("values", [
    pytest.param(_bits(200_000, 1), id="random bits"),
    pytest.param(_decades(200_000, 2), id="decades"),
    pytest.param(_boundaries(), id="boundaries"),
    pytest.param(np.array([math.nan, -math.nan, math.inf, -math.inf, 0.0, 1e-5]), id="non-finite"),
    pytest.param(np.random.default_rng(3).integers(-2**60, 2**60, 20_000).astype(np.float64), id="integers"),
])
def test_float_texts_equal_the_per_value_spellings(values):
    defined = np.random.default_rng(len(values)).random(values.shape) < 0.9
    xs, ds = values.tolist(), defined.tolist()
    for spelling, reference in ((CSV_FLOATS, _csv_reference), (JSON_FLOATS, _json_reference),
                                (JSON_STANDARD_FLOATS, _standard_reference)):
        got = float_texts(values, defined, spelling)
        expected = [reference(x, d) for x, d in zip(xs, ds, strict=True)]
        wrong = [(x, g, e) for x, g, e in zip(xs, got, expected, strict=True) if g != e]
        assert not wrong, (spelling, wrong[:5])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), max_size=40),
       st.integers(0, 3))
def test_float_texts_of_any_floats_in_any_block_shape(xs, width):
    values = np.array(xs, dtype=np.float64)
    if width and len(values) % width == 0:
        values = values.reshape(-1, width)  # a block of rows: texts in C order, row by row
    defined = np.ones(values.shape, dtype=bool)
    assert float_texts(values, defined, CSV_FLOATS) == [repr(x) for x in values.reshape(-1).tolist()]
    assert float_texts(values, defined, JSON_FLOATS) == [_json_reference(x, True) for x in values.reshape(-1).tolist()]


def test_float_texts_of_no_values_and_of_a_wrong_mask():
    assert float_texts(np.zeros((0, 4)), np.zeros((0, 4), dtype=bool), CSV_FLOATS) == []
    assert float_texts(np.zeros(3), np.zeros(3, dtype=bool), CSV_FLOATS) == ["", "", ""]
    with pytest.raises(ValueError, match="shape"):
        float_texts(np.zeros((2, 4)), np.zeros(8, dtype=bool), CSV_FLOATS)


@pytest.mark.parametrize("width", [1, 2, 17, 23])
@pytest.mark.parametrize("values", [
    pytest.param(_bits(23 * 2_000, 5), id="random bits"),
    pytest.param(_decades(23 * 2_000, 6), id="decades"),
    pytest.param(np.resize(_boundaries(), 23 * 100), id="boundaries"),
])
def test_float_rows_are_the_rows_texts_joined_by_commas(values, width):
    """Each row's text is its values' texts (per value, from the references) joined by commas, whatever the mix of
    missing, non-finite and finite values in the row, in every spelling."""
    values = values[:len(values) // width * width].reshape(-1, width)
    defined = np.random.default_rng(width).random(values.shape) < 0.8
    for spelling, reference in ((CSV_FLOATS, _csv_reference), (JSON_FLOATS, _json_reference),
                                (JSON_STANDARD_FLOATS, _standard_reference)):
        expected = [",".join(reference(x, d) for x, d in zip(row, mask, strict=True))
                    for row, mask in zip(values.tolist(), defined.tolist(), strict=True)]
        assert float_rows(values, defined, spelling) == expected


def test_float_rows_of_rows_without_values_and_of_bad_input():
    assert float_rows(np.zeros((3, 0)), np.zeros((3, 0), dtype=bool), CSV_FLOATS) == ["", "", ""]
    assert float_rows(np.zeros((0, 4)), np.zeros((0, 4), dtype=bool), CSV_FLOATS) == []
    assert float_rows(np.array([[math.nan, 1e-5, -math.inf]]), np.ones((1, 3), dtype=bool),
                      JSON_FLOATS) == ['"NaN",0.00001,"-Infinity"']
    assert float_rows(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[False, False], [True, False]]),
                      CSV_FLOATS) == [",", "3.0,"]
    with pytest.raises(ValueError, match="dimensions"):
        float_rows(np.zeros(4), np.zeros(4, dtype=bool), CSV_FLOATS)
    with pytest.raises(ValueError, match="shape"):
        float_rows(np.zeros((2, 4)), np.zeros((4, 2), dtype=bool), CSV_FLOATS)
    with pytest.raises(ValueError, match="comma"):
        float_rows(np.zeros((1, 1)), np.zeros((1, 1), dtype=bool), CSV_FLOATS._replace(undefined="n,a"))


def test_int_rows_are_each_rows_numbers_joined_by_commas():
    values = np.random.default_rng(9).integers(-2**63, 2**63 - 1, (500, 7), dtype=np.int64)
    values[0] = [0, -1, 2**63 - 1, -2**63, 10, -10, 1]
    assert int_rows(values) == [",".join(map(str, row)) for row in values.tolist()]
    assert int_rows(np.array([[3], [-2]], dtype=np.int8)) == ["3", "-2"]
    assert int_rows(np.zeros((0, 3), dtype=np.int64)) == []
    assert int_rows(np.zeros((2, 0), dtype=np.int64)) == ["", ""]
    with pytest.raises(ValueError, match="signed integers"):
        int_rows(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="signed integers"):
        int_rows(np.zeros(2, dtype=np.int64))


# ------------------------------------------------------------------ a comparison with every kind of row


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32", md5=None):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm, md5=md5)


def fwd(name, *inputs):
    return Entry.forward(name, Seq(tuple(inputs)), Map(), Seq(()))


def unit(entries, name, step=0, rank=0):
    return RankDump(Path(name), step, rank, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


def _pair(k: int) -> tuple[list[Entry], list[Entry]]:
    """Unit ``k``'s entries on A and B: quoted and formula-like names, NaN/±Inf/missing statistics, every decade of
    differences, values, md5s, null leaves and rows of one side only."""
    rng = np.random.default_rng(k)
    a, b = [], []
    for i in range(40):
        x = float(10.0 ** rng.uniform(-11, 17))
        name = [f"Functional.lin{k}.{i}.forward", f'Functional.q"{i},x.0.forward', f"=Functional.eq{i}.0.forward",
                f"Functional.nl\n{i}.0.forward"][i % 4]
        a.append(fwd(name, t(mx=x, mn=-x, mean=x / 3, norm=x * 7, shape=(i % 3 + 1, 2))))
        b.append(fwd(name, t(mx=x * (1 + 10.0 ** -rng.integers(1, 12)), mn=-x, mean=x / 3 + 1e-7, norm=x * 7,
                             shape=(i % 3 + 1, 2))))
    a += [
        fwd("Functional.nonfinite.0.forward", t(mx=math.nan, mn=-math.inf, mean=math.inf)),
        fwd("Functional.none.0.forward", t(mx=None, mn=None, mean=None, norm=None), None),
        fwd("Functional.values.0.forward", ValueLeaf("int", 3), ValueLeaf("float", 2.5e-05), ValueLeaf("str", 'a,"b"'),
            ValueLeaf("str", "-1+1"), ValueLeaf("bool", True)),
        fwd("Functional.md5.0.forward", t(md5="-abc,")),
        fwd("Functional.a_only.0.forward", t(shape=())),
    ]
    b += [
        fwd("Functional.nonfinite.0.forward", t(mx=math.nan, mn=-1.0, mean=math.inf)),
        fwd("Functional.none.0.forward", t(mx=None, mn=None, mean=None, norm=None), t()),
        fwd("Functional.values.0.forward", ValueLeaf("int", 4), ValueLeaf("float", 2.5e-05), ValueLeaf("str", 'a,"b"'),
            ValueLeaf("str", "-1+1"), ValueLeaf("bool", True)),
        fwd("Functional.md5.0.forward", t(md5="-abc,")),
        fwd("Functional.b_only.0.forward", t()),
    ]
    return a, b


@pytest.fixture(scope="module")
def mixed() -> Comparison:
    """Two units (step 0 and 1) of the rows :func:`_pair` makes."""
    a0, b0 = _pair(0)
    a1, b1 = _pair(1)
    from msprobe_cmp.dump.reader import Dump

    return compare(Dump(Path("run_a"), (unit(a0, "run_a/step0/rank0"), unit(a1, "run_a/step1/rank0", step=1))),
                   Dump(Path("run_b"), (unit(b0, "run_b/step0/rank0"), unit(b1, "run_b/step1/rank0", step=1))))


@pytest.fixture
def small_chunks(monkeypatch):
    """The writers' windows of rows 7 rows long (instead of CHUNK_ROWS): every unit spans several windows."""
    windows = tables.row_windows
    monkeypatch.setattr(tables, "row_windows", lambda table: windows(table, 7))


# ------------------------------------------------------------------ comparison.json


def _number(x):
    if x is None or math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _side(s):
    if s is None:
        return None
    return {"kind": s.kind, "dtype": s.dtype, "shape": None if s.shape is None else list(s.shape),
            "max": _number(s.max), "min": _number(s.min), "mean": _number(s.mean), "norm": _number(s.norm),
            "md5": s.md5, "data_name": s.data_name, "value": s.value}


def _row(r) -> dict:
    """A row of comparison.json, from the row's view (the document's definition, field by field)."""
    return {"index": r.index, "name": f"{r.entry_name}.{r.arg_path}", "entry": r.entry_name,
            "entry_b": r.entry_name_b or r.entry_name, "arg_path": r.arg_path, "arg_path_b": r.arg_path_b or r.arg_path,
            "mapped_by": r.mapped_by, "match_class": r.match_class, "compared_by": r.compared_by, "a": _side(r.a),
            "b": _side(r.b), "metrics": {k: _number(v) for k, v in r.metrics}, "verdict": r.verdict,
            "reasons": list(r.reasons), "notes": list(r.notes), "differs": r.differs, "parent_cell": r.parent_cell}


def _reference_document(c: Comparison, text: str) -> dict:
    """``text`` parsed, each unit's rows replaced by the rows made from the views."""
    doc = json.loads(text)
    for u, written in zip(c.units, doc["units"], strict=True):
        written["rows"] = [_row(r) for r in u.rows]
    return doc


def test_json_rows_are_the_rows_views_byte_for_byte(mixed, small_chunks):
    text = render_json(mixed)
    doc = _reference_document(mixed, text)
    assert text == orjson.dumps(doc).decode()
    rows = [r for u in doc["units"] for r in u["rows"]]
    assert {r["verdict"] for r in rows} >= {"pass", "fail", "warning", "skip"}
    assert any(r["a"] is None for r in rows) and any(r["b"] is None for r in rows)
    assert any(r["a"] and r["a"]["max"] == "NaN" for r in rows)
    assert len({tuple(r["metrics"]) for r in rows}) > 2  # several sets of metrics within a window
    assert render_json_utf8(mixed) == text.encode("utf-8")
    assert json.loads(render_json(mixed, indent=1)) == doc


def test_json_is_the_same_in_any_windows(mixed, monkeypatch):
    whole = render_json(mixed)
    windows = tables.row_windows
    for size in (1, 3, 44):
        monkeypatch.setattr(tables, "row_windows", lambda table, size=size: windows(table, size))
        assert render_json(mixed) == whole


class _Unseekable(io.RawIOBase):
    """A pipe-like file: writable, not seekable."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


def test_a_lone_surrogate_makes_the_whole_document_the_standard_librarys(mixed, small_chunks):
    """orjson refuses the surrogate, found before anything is written: every part, floats too, is the standard
    library's (``1e-05``, not ``0.00001``), to a file that cannot be rewound."""
    u = mixed.units[1]
    rows = RowTable.from_rows((u.rows[0].replaced(entry_name="Functional.s\ud800.0.forward", notes=("n\udfff",)),
                               *u.rows[1:]))
    from dataclasses import replace

    c = replace(mixed, units=(mixed.units[0], replace(u, rows=rows)))
    text = render_json(c)
    assert text == dumps_standard(_reference_document(c, text))
    assert "e-05" in text and "0.0000" not in text
    out = _Unseekable()
    write_json(c, out)
    assert bytes(out.data) == text.encode("utf-8", errors="backslashreplace")
    assert "0.0000" in render_json(mixed)  # orjson's spelling where nothing is refused


def test_stacks_are_each_entrys_first(monkeypatch):
    """``_json_stacks`` against the row-by-row definition, on random codes (empty stacks, B's equal or not)."""
    rng = np.random.default_rng(5)
    stacks = ((), ("f1",), ("f2", "g"), ("f1",) * 2, ("h",))
    for _ in range(50):
        n = int(rng.integers(0, 60))
        table = SimpleNamespace(stacks=stacks, strings=("e0", "e1", "e2", "e3", "e1"),
                                entry=rng.integers(0, 5, n), stack=rng.integers(0, 5, n), stack_b=rng.integers(0, 5, n))
        expected: tuple[dict, dict] = ({}, {})
        for e, s, sb in zip(table.entry.tolist(), table.stack.tolist(), table.stack_b.tolist(), strict=True):
            name = table.strings[e]
            if stacks[s] and name not in expected[0]:
                expected[0][name] = stacks[s]
            if stacks[sb] and sb != s and stacks[sb] != stacks[s] and name not in expected[1]:
                expected[1][name] = stacks[sb]
        got = tables._json_stacks(table)
        assert got == expected and [list(d) for d in got] == [list(d) for d in expected]


# ------------------------------------------------------------------ comparison.csv


def _neutral(text: str) -> str:
    return "'" + text if text.startswith(("=", "+", "-", "@", "\t", "\r")) else text


def _value(side) -> object:
    """A value cell as the csv module gets it: numbers as numbers, other text neutralised."""
    if side is None or side.value is None:
        return ""
    if side.dtype in ("int", "float", "bool"):
        try:
            number = float(side.value)
        except ValueError:
            return _neutral(side.value)
        return int(number) if side.dtype == "int" and number.is_integer() else number
    return _neutral(side.value)


def _csv_cells(u, r) -> list[object]:
    """A CSV line's cells, from the row's view and the unit (the report's definition, column by column)."""
    a, b, metrics = r.a, r.b, dict(r.metrics)

    def stats(s):
        return ["" if s is None or getattr(s, k) is None else getattr(s, k) for k in ("max", "min", "mean", "norm")]

    def text(s, field):
        value = None if s is None else getattr(s, field)
        return "" if value is None else _neutral(value)

    return [
        "" if a is None else _neutral(f"{r.entry_name}.{r.arg_path}"),
        "" if b is None else _neutral(f"{r.entry_name_b or r.entry_name}.{r.arg_path_b or r.arg_path}"),
        text(a, "dtype"), text(b, "dtype"),
        "" if a is None or a.shape is None else str(list(a.shape)),
        "" if b is None or b.shape is None else str(list(b.shape)),
        *("" if metrics.get(k) is None else metrics[k] for k in METRIC_COLUMNS), *stats(a), *stats(b),
        text(a, "md5"), text(b, "md5"), _value(a), _value(b), r.verdict,
        _neutral("; ".join((*r.reasons, *r.notes))), r.match_class, r.compared_by,
        "" if u.unit_a.step is None else u.unit_a.step, "" if u.unit_a.rank is None else u.unit_a.rank,
        _neutral(r.parent_cell or ""), text(a, "data_name") or text(b, "data_name"),
    ]


def test_csv_is_the_csv_modules_text_of_the_rows_views(mixed, small_chunks):
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")  # writes a float as its repr
    writer.writerow(CSV_COLUMNS)
    for u in mixed.units:
        for r in u.rows:
            writer.writerow(_csv_cells(u, r))
    text = render_csv(mixed)
    assert text == buf.getvalue()
    numbers = [float(x) for line in list(csv.reader(io.StringIO(text)))[1:] for x in line[6:29] if x]
    assert any(1e-5 <= abs(x) < 1e-4 for x in numbers) and any(1e-9 <= abs(x) < 1e-5 for x in numbers)
    assert any(struct.pack("<d", x) == struct.pack("<d", math.inf) for x in numbers)


def test_another_orjson_spelling_falls_back_to_repr(monkeypatch):
    """An orjson that spells ``[1e-5, 1e-4)`` or a one-digit exponent otherwise than 3.13 does (the respelling's
    premise) does not make a wrong number: each value is written as its ``repr``."""
    for spelled in (b"[1e-5]", b"[1.5e-06]"):
        fake = SimpleNamespace(dumps=lambda values, option=None, spelled=spelled: spelled, __version__="0")
        monkeypatch.setattr(tables, "orjson", fake)
        value = float(spelled[1:-1])
        assert float_texts(np.array([value]), np.ones(1, dtype=bool), CSV_FLOATS) == [repr(value)]


def test_an_orjson_spelling_other_spans_otherwise_is_not_used(monkeypatch):
    """An orjson whose spelling differs from ``repr`` outside the respelled spans (here ``1e16`` for ``1e+16``) is
    found by the once-per-process probe, and every value is written as its ``repr``."""
    real = tables.orjson.dumps

    def dumps(values, option=None):
        return real(values, option=option).replace(b"1e+16", b"1e16")

    monkeypatch.setattr(tables, "orjson", SimpleNamespace(dumps=dumps, JSONEncodeError=TypeError))
    tables._orjson_spells_as_expected.cache_clear()
    try:
        values = np.array([1e16, 0.5, 2.5e-5, 3e-7])
        assert float_texts(values, np.ones(4, dtype=bool), CSV_FLOATS) == ["1e+16", "0.5", "2.5e-05", "3e-07"]
        assert not tables._orjson_spells_as_expected()
    finally:
        tables._orjson_spells_as_expected.cache_clear()


@pytest.mark.parametrize(("dtype", "value", "cell"), [
    ("int", "12345678901234567890", "12345678901234567890"),  # beyond float64's 2**53: exact, not ...7168
    ("int", "9007199254740993", "9007199254740993"),
    ("int", str(10**400), str(10**400)),  # not inf
    ("int", "-3", "-3"),
    ("numpy.int64", "7", "7"),
    ("numpy.uint8", "255", "255"),
    ("float", "0.1", "0.1"),
    ("numpy.float32", "7", "7.0"),  # a float type's integral value stays a float
    ("int", "1.5", "1.5"),
    ("bool", "True", "True"),
    (None, None, ""),
])
def test_value_cells_keep_integers_exact(dtype, value, cell):
    assert tables._value_cell(dtype, value) == cell
