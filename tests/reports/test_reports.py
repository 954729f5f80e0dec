"""Reports: HTML (autoescaped, self-contained), JSON (versioned, strict, every number), CSV (msprobe columns, safe)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from markupsafe import escape

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.dump import DumpMeta, Entry, Map, RankDump, Seq, TensorLeaf, ValueLeaf, load_dump
from msprobe_cmp.reports import render_csv, render_html, render_json
from msprobe_cmp.reports.tables import CSV_COLUMNS, JSON_SCHEMA, neutralize_cell

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
EVIL = "Functional.<script>alert(1)</script>.0.forward"


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32"):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm)


def unit(entries, name="mem"):
    return RankDump(Path(name), 0, 0, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


def fwd(name, *inputs):
    return Entry.forward(name, Seq(tuple(inputs)), Map(), Seq(()))


@pytest.fixture(scope="module")
def small() -> Comparison:
    a = [
        fwd("Functional.ok.0.forward", t()),
        fwd(EVIL, t(mx=1.5)),
        fwd('=HYPERLINK("x").0.forward', t()),
        fwd("Functional.bad.0.forward", t(mx=5.0, mean=3.0)),
        fwd("Functional.nan.0.forward", t(mx=math.nan)),
        fwd("Functional.val.0.forward", ValueLeaf("str", "-1+1")),
        fwd("Functional.a_only.0.forward", t()),
    ]
    b = [
        fwd("Functional.ok.0.forward", t()),
        fwd(EVIL, t()),
        fwd('=HYPERLINK("x").0.forward', t()),
        fwd("Functional.bad.0.forward", t()),
        fwd("Functional.nan.0.forward", t(mx=math.nan)),
        fwd("Functional.val.0.forward", ValueLeaf("str", "-1+1")),
    ]
    return compare(unit(a, "run_a"), unit(b, "run_b"))


@pytest.fixture(scope="module")
def fixture_tensor() -> Comparison:
    return compare(load_dump(FIXTURES / "tensor_b"), load_dump(FIXTURES / "tensor_a"))


# ------------------------------------------------------------------ HTML


def test_html_autoescapes_entry_names(small):
    html = render_html(small)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # summary tables (jinja2 autoescape)
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in html  # the rows' JSON block
    assert html.count("<script") == 3  # the data block, the origin's block and the report's own inline script
    assert html.count("</script>") == 3


def test_html_is_self_contained(small, fixture_tensor):
    for c in (small, fixture_tensor):
        html = render_html(c)
        assert "http://" not in html.lower() and "https://" not in html.lower()
        assert "<link" not in html and " src=" not in html


def test_html_header_and_rows(small):
    html = render_html(small)
    assert small.verdict == "fail"
    assert 'class="badge v-fail">fail' in html
    assert "statistics" in html and "run_a" in html and "run_b" in html
    assert "only_in_a" in html and "First divergent row" in html and "First failing row" in html
    assert 'class="r-fail' in html  # failing rows highlighted
    bad = next(r for r in small.units[0].rows if r.entry_name == "Functional.bad.0.forward")
    assert bad.verdict == "fail" and str(escape(bad.reasons[0])) in html


def _page_data(html):
    start = html.index('<script type="application/json" id="report-data">') + len('<script type="application/json" id="report-data">')
    return json.loads(html[start:html.index("</script>", start)])


def test_html_fixture_lists_every_row_in_execution_order(fixture_tensor):
    html = render_html(fixture_tensor)
    data = _page_data(html)
    strings = data["strings"]
    for ui, u in enumerate(fixture_tensor.units):
        embedded = [r for r in data["rows"] if r[0] == ui]
        assert [r[1] for r in embedded] == [r.index for r in u.rows]
        assert [strings[r[2]] + "." + strings[r[3]] for r in embedded] == [r.name for r in u.rows]
    assert "Primitive.matmul.MatMul.0.forward" in html and "Cosine" in data["metrics"]


def test_html_rows_are_page_data_not_table_markup():
    entries = [fwd(f"Functional.op{i}.0.forward", t(), t(mean=0.1), t(norm=3.0)) for i in range(1000)]
    c = compare(unit(entries), unit(entries))
    html = render_html(c)
    assert len(_page_data(html)["rows"]) == 3000
    assert html.count("<tr") < 200  # rows are data rendered by the page's script, not <tr> elements


# ------------------------------------------------------------------ JSON


def test_json_round_trips_with_every_number(fixture_tensor):
    doc = json.loads(render_json(fixture_tensor), parse_constant=lambda tok: pytest.fail(f"non-strict JSON: {tok}"))
    assert doc["schema"] == JSON_SCHEMA and doc["version"] == 2
    assert doc["verdict"] == fixture_tensor.verdict and doc["mode"] == "tensor"
    assert doc["class_counts"] == dict(fixture_tensor.counts)
    assert doc["first_divergent"]["name"] == fixture_tensor.first_divergent.name
    assert doc["thresholds"]["default"]["cosine_fail_below"] == 0.9
    for u_doc, u in zip(doc["units"], fixture_tensor.units, strict=True):
        assert len(u_doc["rows"]) == len(u.rows)
        for r_doc, r in zip(u_doc["rows"], u.rows, strict=True):
            assert r_doc["name"] == r.name and r_doc["verdict"] == r.verdict
            assert r_doc["metrics"] == {k: v for k, v in r.metrics}  # exact floats survive
            if r.a is not None and r.a.kind == "tensor":
                assert r_doc["a"]["max"] == r.a.max and r_doc["a"]["shape"] == list(r.a.shape)


def test_json_nonfinite_numbers_are_strings(small):
    doc = json.loads(render_json(small), parse_constant=lambda tok: pytest.fail(f"non-strict JSON: {tok}"))
    nan_row = next(r for r in doc["units"][0]["rows"] if r["entry"] == "Functional.nan.0.forward")
    assert nan_row["a"]["max"] == "NaN"


# ------------------------------------------------------------------ CSV


def _parse(text):
    return list(csv.reader(io.StringIO(text)))


def test_csv_columns_and_numbers(fixture_tensor):
    rows = _parse(render_csv(fixture_tensor))
    header = rows[0]
    assert tuple(header) == CSV_COLUMNS
    for col in (
        "NPU Name",
        "Bench Name",
        "NPU Dtype",
        "Bench Dtype",
        "NPU Tensor Shape",
        "Bench Tensor Shape",
        "Cosine",
        "MaxAbsErr",
        "MaxRelativeErr",
        "One Thousandth Err Ratio",
        "Five Thousandths Err Ratio",
        "EucDist",
        "Max diff",
        "Result",
        "Err_message",
    ):
        assert col in header
    assert len(rows) - 1 == sum(len(u.rows) for u in fixture_tensor.units)
    i = header.index
    weight = next(r for r in rows[1:] if r[0] == "Cell.blocks.0.Dense.forward.0.parameters.weight")
    assert float(weight[i("MaxAbsErr")]) == pytest.approx(0.001, abs=1e-6)
    assert float(weight[i("Cosine")]) < 1.0 and weight[i("Result")] == "pass"
    # signed diffs stay numbers, never neutralised
    negatives = [r[i("Min diff")] for r in rows[1:] if r[i("Min diff")].startswith("-")]
    assert negatives and all(float(v) < 0 for v in negatives)


def test_csv_neutralises_formula_text(small):
    rows = _parse(render_csv(small))
    i = rows[0].index
    names = [r[i("NPU Name")] for r in rows[1:]]
    assert '\'=HYPERLINK("x").0.forward.input.0' in names
    values = [r[i("NPU Value")] for r in rows[1:] if r[i("NPU Value")]]
    assert values == ["'-1+1'"]  # repr of the string starts with a quote: already safe
    for r in rows[1:]:
        for cell in r:
            if cell and cell[0] in "=+@\t\r":
                pytest.fail(f"unneutralised cell {cell!r}")
    assert neutralize_cell("=1+1") == "'=1+1" and neutralize_cell("-x") == "'-x" and neutralize_cell("\tx") == "'\tx"
    assert neutralize_cell("ok") == "ok"


def test_largest_disagreements_lists_worst_rows_first(tmp_path):
    import numpy as np

    from msprobe_cmp.dump import DumpWriter
    from msprobe_cmp.reports.html import select_largest_disagreements

    base = np.linspace(1.0, 2.0, 100)
    # name -> target array; the baseline is `base` for every entry
    targets = {
        "Functional.same.0.forward": base,                     # identical: not listed
        "Functional.small.0.forward": base + 1e-4,             # Cosine ~1, MaxAbsErr 1e-4: pass
        "Functional.flip.0.forward": base[::-1].copy(),        # Cosine < 1 but > 0.9, MaxAbsErr 1: fails (cos<0.99)
        "Functional.big.0.forward": base + 2.0,                # MaxAbsErr 2 > 1: fails, Cosine stays high
    }
    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("tensor", "L1", "mindspore"))
        for name, arr in targets.items():
            data = arr if side == "a" else base
            w.save_tensor(f"{name}.npy", data.astype(np.float32))
            leaf = TensorLeaf("mindspore.Tensor", "Float32", (100,), float(data.max()), float(data.min()),
                              float(data.mean()), float(np.linalg.norm(data)), data_name=f"{name}.npy")
            w.put(Entry.forward(name, Seq(), Map(), Seq((leaf,))))
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    listed = [r.entry_name for _, r in select_largest_disagreements(c)]
    cos_flip = np.dot(base[::-1], base) / np.dot(base, base)
    cos_big = np.dot(base + 2, base) / (np.linalg.norm(base + 2) * np.linalg.norm(base))
    assert cos_flip < cos_big  # so among the two failing rows the flipped one comes first
    assert listed == ["Functional.flip.0.forward", "Functional.big.0.forward", "Functional.small.0.forward"]
    html = render_html(c)
    assert "Largest disagreements" in html and html.index("Functional.flip.0.forward") < html.index("Entries in execution")


def test_largest_disagreements_in_statistics_mode_rank_by_the_maxabserr_bound_and_keep_failing_mismatches(tmp_path):
    import numpy as np

    from msprobe_cmp.reports.common import select_largest_disagreements

    def leaf(shift: float, shape=(100,)) -> TensorLeaf:
        data = np.linspace(1.0, 2.0, int(np.prod(shape))) + shift
        return TensorLeaf("mindspore.Tensor", "Float32", shape, float(data.max()), float(data.min()),
                          float(data.mean()), float(np.linalg.norm(data)))

    # (target shift, baseline shift): the MaxAbsErr lower bound is max(|dMax|, |dMin|, |dMean|, |dNorm|/sqrt(n)),
    # which for a constant shift is the shift itself
    shifts = {"Functional.tiny.0.forward": 1e-6, "Functional.mid.0.forward": 1e-3, "Functional.large.0.forward": 0.1}
    a = [Entry.forward(n, Seq(), Map(), Seq((leaf(s),))) for n, s in shifts.items()]
    b = [Entry.forward(n, Seq(), Map(), Seq((leaf(0.0),))) for n in shifts]
    # a shape mismatch fails although its statistics are equal
    a.append(Entry.forward("Functional.reshape.0.forward", Seq(), Map(), Seq((leaf(0.0, (10, 10)),))))
    b.append(Entry.forward("Functional.reshape.0.forward", Seq(), Map(), Seq((leaf(0.0),))))
    c = compare(unit(a), unit(b))
    listed = [r.entry_name for _, r in select_largest_disagreements(c)]
    assert listed == ["Functional.reshape.0.forward", "Functional.large.0.forward", "Functional.mid.0.forward",
                      "Functional.tiny.0.forward"]
    from msprobe_cmp.reports import render_markdown

    assert "Ranked: failing first" in render_markdown(c)
