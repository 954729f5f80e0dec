"""The report formats, pinned on small inputs against independent references (issue 7's faster writers).

Each faster writer is checked against the definition it replaces: the page's 6-significant-digit numbers against
``float(f"{x:.6g}")``, the CSV against the csv module writing the same cells, junit.xml against ElementTree's
indented form of its own tree, comparison.json against the standard library's encoder of plain dictionaries,
the plots' bulk placement against the one-value placement.
"""

from __future__ import annotations

import csv
import io
import json
import math
import struct
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.comparator.rowtable import RowTable
from msprobe_cmp.dump import DumpMeta, Entry, Map, RankDump, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.reports import common, plots, render_csv, render_json, render_junit, render_markdown
from msprobe_cmp.reports.html import PageData, build_page_data, page_numbers
from msprobe_cmp.reports.tables import CSV_COLUMNS, _csv_row, render_json_utf8


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32", md5=None):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm, md5=md5)


def unit(entries, name="mem", step=0):
    return RankDump(Path(name), step, 0, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


def fwd(name, *inputs):
    return Entry.forward(name, Seq(tuple(inputs)), Map(), Seq(()))


NASTY_NAMES = ['Functional.a,b.0.forward', 'Functional.q"uote.0.forward', 'Functional.nl\nx.0.forward',
               "Functional.cr\rx.0.forward", "Functional.nul\x00x.0.forward", "Functional.tab\tx.0.forward",
               "Functional.<&>.0.forward", "-Functional.neg.0.forward", "=Functional.eq.0.forward"]


@pytest.fixture(scope="module")
def nasty() -> Comparison:
    """Text the CSV module must quote, markup, formula starts, shapes of 0-3 dims, NaN/±Inf/None statistics,
    values, one-sided rows, failing and warning rows."""
    a = [fwd(n, t(mx=1.0 + k, shape=(2, 3))) for k, n in enumerate(NASTY_NAMES)]
    a += [
        fwd("Functional.shapes.0.forward", t(shape=()), t(shape=(5,)), t(shape=(1, 2, 3))),
        fwd("Functional.nonfinite.0.forward", t(mx=math.nan, mn=-math.inf, mean=math.inf)),
        fwd("Functional.none.0.forward", t(mx=None, mn=None, mean=None, norm=None)),
        fwd("Functional.values.0.forward", ValueLeaf("int", 3), ValueLeaf("float", 2.5), ValueLeaf("str", 'a,"b"'),
            ValueLeaf("str", "-1+1"), ValueLeaf("bool", True)),
        fwd("Functional.md5.0.forward", t(md5="-abc,")),
        fwd("Functional.tiny.0.forward", t(mx=1e-300, mn=5e-324, mean=0.1, norm=1e300)),
        fwd("Functional.a_only.0.forward", t()),
    ]
    b = [fwd(n, t(shape=(2, 3))) for n in NASTY_NAMES]
    b += [
        fwd("Functional.shapes.0.forward", t(shape=()), t(shape=(5,)), t(shape=(1, 2, 3))),
        fwd("Functional.nonfinite.0.forward", t(mx=math.nan, mn=-1.0, mean=math.inf)),
        fwd("Functional.none.0.forward", t(mx=None, mn=None, mean=None, norm=None)),
        fwd("Functional.values.0.forward", ValueLeaf("int", 4), ValueLeaf("float", 2.5), ValueLeaf("str", 'a,"b"'),
            ValueLeaf("str", "-1+1"), ValueLeaf("bool", True)),
        fwd("Functional.md5.0.forward", t(md5="-abc,")),
        fwd("Functional.tiny.0.forward", t(mx=2e-300, mn=5e-324, mean=0.1000001, norm=1e300)),
        fwd("Functional.b_only.0.forward", t()),
    ]
    return compare(unit(a, "run_a"), unit(b, "run_b"))


# ------------------------------------------------------------------ the page's numbers


def _reference_page_number(x):
    """The definition: 6 significant digits, 12 when 6 would round a difference to 0 or ±1; text for NaN/±Inf."""
    if x is None or isinstance(x, int):
        return x
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    r = float(f"{x:.6g}")
    if r != x and r in (0.0, 1.0, -1.0):
        r = float(f"{x:.12g}")
    return r


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def _near_boundaries() -> list[float]:
    """Floats within a few ulps of powers of ten and of 6-digit rounding midpoints, both signs."""
    out: list[float] = []
    for e in range(-22, 24, 3):
        for base in (10.0**e, float(f"1.000005e{e}"), float(f"9.999995e{e}"), float(f"1.234565e{e}")):
            x = base
            for _ in range(3):
                x = math.nextafter(x, -math.inf)
            for _ in range(7):
                out += [x, -x]
                x = math.nextafter(x, math.inf)
    return out


def test_page_numbers_equal_the_definition_on_edge_values():
    values = [0.0, -0.0, None, 3, True, 2**70, math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308,
              0.9999995, 0.99999994, 1.0000005, -0.9999999, 123456.5, 123457.5, 999999.5, 99999.95, 1e-7,
              np.float64(0.1234567), *_near_boundaries()]
    got = page_numbers(values)
    assert len(got) == len(values)
    for x, g in zip(values, got, strict=True):
        assert _same(g, _reference_page_number(x)), (x, g)
    assert got[:3] == [0.0, -0.0, None] and math.copysign(1.0, got[1]) == -1.0
    assert page_numbers([]) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none(), st.integers(-10**6, 10**6)),
                max_size=60))
def test_page_numbers_equal_the_definition(values):
    got = page_numbers(values)
    assert all(_same(g, _reference_page_number(x)) for x, g in zip(values, got, strict=True))


def test_page_numbers_of_random_bit_patterns():
    rs = np.random.RandomState(7)
    values = np.frombuffer(rs.bytes(8 * 20000), dtype=np.float64).tolist()
    values += (rs.standard_normal(20000) * 10.0 ** rs.randint(-20, 20, 20000)).tolist()
    got = page_numbers(values)
    assert all(_same(g, _reference_page_number(x)) for x, g in zip(values, got, strict=True))


def test_page_rows_carry_rounded_numbers_and_interned_strings(nasty):
    data = build_page_data(nasty)
    rows = {data["strings"][r[2]]: r for r in data["rows"]}
    tiny = rows["Functional.tiny.0.forward"]
    side_a = tiny[11]
    assert side_a[0] == "tensor" and data["strings"][side_a[1]] == "Float32"
    assert data["strings"][side_a[2]] == "[4]"
    assert side_a[3:7] == [1e-300, 5e-324, 0.1, 1e300]
    assert tiny[12][3:7] == [2e-300, 5e-324, 0.1, 1e300]  # 0.1000001 shown with 6 digits
    nonfinite = rows["Functional.nonfinite.0.forward"]
    assert nonfinite[11][3:7] == ["NaN", "-inf", "inf", 2.0]
    assert rows["Functional.none.0.forward"][11][3:7] == [None, None, None, None]
    metric = data["metrics"].index("Max diff")
    assert tiny[13][metric] == -1e-300
    # each distinct string once; None is -1
    assert len(set(data["strings"])) == len(data["strings"])
    assert rows["Functional.a_only.0.forward"][12] is None


@pytest.mark.parametrize("name", ["Functional.plain.0.forward", "Functional.s\ud800.0.forward"])
def test_page_rows_are_the_pages_encoder_writing_the_rows(name):
    """The rows' text is what the page's encoder writes for the rows read back from it: orjson's spelling of the
    numbers, or the standard library's (``1.5e-05``, not ``0.000015``) when a name holds a lone surrogate, which
    orjson refuses; NaN and ±Inf as their words, missing numbers as null, one-sided rows' other side as null."""
    a = [fwd(name, t(mx=1.5e-05, mn=-2.5e-07, mean=math.nan, norm=None)),
         fwd("Functional.inf.0.forward", t(mx=math.inf, mn=-math.inf, mean=123456789.0, norm=0.1)),
         fwd("Functional.a_only.0.forward", t())]
    b = [fwd(name, t(mx=1.6e-05, mn=-2.4e-07, mean=math.nan, norm=None)),
         fwd("Functional.inf.0.forward", t(mx=math.inf, mn=-1.0, mean=-0.0, norm=0.3))]
    c = compare(unit(a, "run_a"), unit(b, "run_b"))
    text = "".join(PageData(c).json_chunks())
    rows = text[text.index(',"rows":[') + len(',"rows":['):text.index('],"cells":')]
    data = build_page_data(c)
    surrogate = "\ud800" in name
    encoder = common.dumps_standard if surrogate else common.dumps_compact
    assert rows == encoder(data["rows"])[1:-1]
    assert ("1.5e-05" in rows) is surrogate and ("0.000015" in rows) is not surrogate
    first = {data["strings"][r[2]]: r for r in data["rows"]}
    assert first[name][11][3:7] == [1.5e-05, -2.5e-07, "NaN", None]
    assert first["Functional.inf.0.forward"][11][3:7] == ["inf", "-inf", 123457000.0, 0.1]
    assert first["Functional.a_only.0.forward"][12] is None


def test_page_cap_keeps_failing_rows_and_counts_the_rest(nasty):
    total = sum(len(u.rows) for u in nasty.units)
    failing = [r for u in nasty.units for r in u.rows if r.verdict == "fail"]
    data = build_page_data(nasty, max_rows=2)
    kept_rows = data["rows"]
    first_two = [r.index for r in nasty.units[0].rows[:2]]
    assert [r[1] for r in kept_rows[:2]] == first_two
    assert sum(1 for r in kept_rows if data["verdicts"][r[5]] == "fail") >= len([r for r in failing if r.index >= 2])
    assert len(kept_rows) == 2 + sum(1 for r in nasty.units[0].rows[2:] if r.verdict == "fail")
    assert data["left_out"][0].startswith(f"{total - len(kept_rows)} of {total} rows")


# ------------------------------------------------------------------ CSV


def test_csv_is_what_the_csv_module_writes_for_the_cells(nasty):
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for u in nasty.units:
        for r in u.rows:
            writer.writerow(_csv_row(u, r))
    assert render_csv(nasty) == buf.getvalue()


def _csv_cell(text: str) -> str:
    """A CSV cell as RFC 4180 writes it: quoted (inner quotes doubled) when it holds a comma, quote or newline."""
    return '"' + text.replace('"', '""') + '"' if any(ch in text for ch in ',"\n') else text


def test_csv_line_format_by_hand():
    c = compare(unit([fwd("Functional.x.0.forward", t(mx=1.5, shape=(2, 3)))]),
                unit([fwd("Functional.x.0.forward", t(mx=1.25, shape=(2, 3)))]))
    line = render_csv(c).splitlines()[1]
    row = c.units[0].rows[0]
    metrics = dict(row.metrics)
    cells = ["" if metrics.get(k) is None else repr(metrics[k]) for k in CSV_COLUMNS[6:21]]
    expected = ("Functional.x.0.forward.input.0,Functional.x.0.forward.input.0,Float32,Float32,"
                f'"[2, 3]","[2, 3]",{",".join(cells)},1.5,-1.0,0.0,2.0,1.25,-1.0,0.0,2.0,,,,,'
                f"{row.verdict},{_csv_cell('; '.join((*row.reasons, *row.notes)))},matched,statistics,0,0,,")
    assert line == expected
    assert metrics["Max diff"] == 0.25 and "0.25" in cells


def test_csv_rows_with_text_to_quote_round_trip(nasty):
    parsed = list(csv.reader(io.StringIO(render_csv(nasty), newline="")))
    names = [row[0] for row in parsed[1:] if row[0]]
    # a lone CR is not quoted by Python 3.11's csv module when the line terminator is "\n" (as before)
    for n in (n for n in NASTY_NAMES if "\r" not in n):
        expected = ("'" + n if n.startswith(("=", "-")) else n) + ".input.0"
        assert expected in names


# ------------------------------------------------------------------ JUnit


def test_junit_is_elementtrees_indented_form_of_its_own_tree(nasty):
    c = replace(nasty, input_a='a "q" &\r\n\tb', notes=("note <1>", "  "))
    text = render_junit(c)
    root = ET.fromstring(text.encode("utf-8"))
    ET.indent(root, space=" ")
    assert text == '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
    assert 'value="a &quot;q&quot; &amp;&#13;&#10;&#09;b"' in text


def test_junit_small_by_hand():
    c = compare(unit([fwd("Functional.ok.0.forward", t()), fwd("Functional.a&b.0.forward", t())]),
                unit([fwd("Functional.ok.0.forward", t())]))
    text = render_junit(c)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="msprobe-cmp" tests="3" '
                           'failures="0" errors="0" skipped="1" time="0">\n <testsuite name="msprobe-cmp verdict" tests="1" '
                           'failures="0" errors="0" skipped="0" time="0">\n  <properties>\n   '
                           '<property name="verdict" value="pass" />\n')
    assert ('\n  <testcase classname="Functional.ok.0.forward" name="input.0" time="0" />\n'
            '  <testcase classname="Functional.a&amp;b.0.forward" name="input.0" time="0">\n'
            '   <skipped message="present in A only" />\n  </testcase>\n </testsuite>\n</testsuites>\n') in text


# ------------------------------------------------------------------ JSON


def test_json_rows_spell_sides_and_nonfinite_statistics(nasty):
    doc = json.loads(render_json(nasty))
    side = doc["units"][0]["rows"][0]["a"]
    assert list(side) == ["kind", "dtype", "shape", "max", "min", "mean", "norm", "md5", "data_name", "value"]
    rows = {r["entry"]: r for r in doc["units"][0]["rows"]}
    assert rows["Functional.nonfinite.0.forward"]["a"]["max"] == "NaN"
    assert rows["Functional.nonfinite.0.forward"]["a"]["mean"] == "Infinity"
    assert render_json_utf8(nasty) == render_json(nasty).encode("utf-8")


def test_json_with_a_lone_surrogate_falls_back_to_the_standard_library(nasty):
    u = nasty.units[0]
    rows = RowTable.from_rows(
        (u.rows[0].replaced(entry_name="Functional.s\ud800.0.forward", notes=("n\udfff",)), *u.rows[1:]))
    c = replace(nasty, units=(replace(u, rows=rows),))
    text = render_json(c)
    assert json.loads(text)["units"][0]["rows"][0]["entry"] == "Functional.s\ud800.0.forward"
    assert render_json_utf8(c) == text.encode("utf-8", errors="backslashreplace")


# ------------------------------------------------------------------ plots and the ranking


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=40), st.booleans())
def test_log_axis_bulk_placement_equals_one_by_one(values, flip):
    axis = plots._LogAxis(values, 26.0, 170.0, flip=flip)
    bulk = axis.place_all(values).tolist()
    assert all(_same(b, axis.place(v)) for b, v in zip(bulk, values, strict=True))


@pytest.mark.parametrize("log", [True, False])
def test_column_marks_from_extremes_equal_placing_every_value(log):
    """The trace's strokes are placed from each pixel column's extremes, gathered a batch at a time: the same
    pixels as placing every value one by one and taking each column's lowest and highest."""
    rs = np.random.RandomState(3)
    xs = rs.randint(78, 90, 500)
    vs = np.exp(rs.standard_normal(500) * 8) * rs.choice([1.0, -1.0], 500)
    vs[rs.randint(0, 500, 40)] = 0.0
    vs[rs.randint(0, 500, 20)] = np.nan
    vs[rs.randint(0, 500, 20)] = np.inf
    xs[:30], vs[:30] = 95, np.nan  # a column holding only non-finite values
    axis = plots._LogAxis(vs.tolist(), 26.0, 170.0, flip=True)

    def linear(v):  # any monotone placement with a band for non-finite values
        out = 100.0 - np.minimum(np.maximum(np.asarray(v, dtype=np.float64), -5.0), 5.0) * 3.0
        out[~np.isfinite(np.asarray(v, dtype=np.float64))] = 7.0
        return out

    place_all = axis.place_all if log else linear
    expected: dict[int, tuple[float, float]] = {}
    for x, v in zip(xs.tolist(), vs.tolist(), strict=True):
        y = axis.place(v) if log else float(linear(np.array([v]))[0])
        old = expected.get(x)
        expected[x] = (y, y) if old is None else (min(old[0], y), max(old[1], y))
    ext = plots._Extremes(plots.WIDTH)
    for part in np.array_split(np.arange(500), 7):  # in batches, as unit after unit
        ext.add(xs[part], vs[part])
    assert ext.count == 500
    assert ext.marks(log, place_all) == dict(sorted(expected.items()))


def test_cell_counts_equal_a_loop():
    rs = np.random.RandomState(3)
    cx, cy = rs.randint(-3, 40, 500), rs.randint(5, 60, 500)
    counts = plots._cell_counts(cx, cy)
    assert counts == dict(sorted(Counter(zip(cx.tolist(), cy.tolist(), strict=True)).items()))
    assert list(counts) == sorted(counts)


def test_largest_disagreements_are_the_sorted_prefix_and_shared_through_the_facts():
    a = [fwd(f"Functional.f.{k}.forward", t(mx=1.0 + k / 7)) for k in range(40)]
    b = [fwd(f"Functional.f.{k}.forward", t()) for k in range(40)]
    c = compare(unit(a), unit(b))
    candidates = [(ui, r) for ui, u in enumerate(c.units) for r in u.rows if r.verdict == "fail"
                  or (r.differs and r.verdict != "skip")]
    full = sorted(candidates, key=lambda item: common._disagreement_key(item[1]))
    assert common.select_largest_disagreements(c, 15) == full[:15]
    assert [r.entry_name for _, r in full[:3]] == ["Functional.f.39.forward", "Functional.f.38.forward",
                                                  "Functional.f.37.forward"]
    facts = common.ReportFacts(c)
    assert facts.largest_disagreements(15) == full[:15]
    assert facts.largest_disagreements(10) == full[:10]  # the prefix of the ranked 15
    assert facts.largest_disagreements(20) == full[:20]
    assert facts.compared_counts() == (c.compared_count, tuple(u.compared_count for u in c.units))
    assert common.ReportFacts.of(c, facts) is facts
    other = compare(unit(a[:3]), unit(b[:3]))
    assert common.ReportFacts.of(other, facts) is not facts  # facts of another comparison are not used
    assert render_markdown(other, facts=facts) == render_markdown(other)
