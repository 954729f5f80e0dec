"""JSON Schema, JUnit XML (against our own XSD), Markdown summary, the page's data block and plots, CLI outputs."""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from msprobe_cmp.cli import REPORT_FILES, main
from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, RankDump, Seq, TensorLeaf, load_dump
from msprobe_cmp.reports import load_json_schema, render_html, render_json, render_junit, render_markdown
from msprobe_cmp.reports.html import build_page_data, render_script_json
from msprobe_cmp.reports.plots import render_histogram_svg, render_scatter_svg, render_trace_svg
from msprobe_cmp.reports.tables import markdown_text, xml_text

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
EVIL = "Functional.<script>alert(1)</script>.0.forward"
XSD = Path(__file__).with_name("junit.xsd")
CONTROL = "Functional.ctl\x01\x1b[31m.0.forward"


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32"):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm)


def unit(entries, name="mem"):
    return RankDump(Path(name), 0, 0, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


def fwd(name, *inputs):
    return Entry.forward(name, Seq(tuple(inputs)), Map(), Seq(()))


@pytest.fixture(scope="module")
def validator():
    schema = load_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def junit_schema():
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture(scope="module")
def mixed():
    """Failing, warning, skipped, markup, control characters, NaN, one-sided rows and an unpaired unit."""
    a = [
        fwd("Functional.ok.0.forward", t()),
        fwd(EVIL, t(mx=1.5)),
        fwd(CONTROL, t()),
        fwd("Functional.bad|pipe.0.forward", t(mx=5.0, mean=3.0)),
        fwd("Functional.warn.0.forward", t(mx=1.2, mn=-1.0)),
        fwd("Functional.nan.0.forward", t(mx=math.nan)),
        fwd("Functional.zero.0.forward", t(mx=0.0, mn=0.0, mean=0.0, norm=0.0)),
        fwd("Functional.a_only.0.forward", t()),
    ]
    b = [
        fwd("Functional.ok.0.forward", t()),
        fwd(EVIL, t()),
        fwd(CONTROL, t()),
        fwd("Functional.bad|pipe.0.forward", t()),
        fwd("Functional.warn.0.forward", t()),
        fwd("Functional.nan.0.forward", t(mx=math.nan)),
        fwd("Functional.zero.0.forward", t(mx=0.0, mn=0.0, mean=0.0, norm=0.0)),
        fwd("Functional.b_only.0.forward", t()),
    ]
    return compare(unit(a, "run_a"), unit(b, "run_b"))


def _dump(root: Path, entries, task="statistics", steps=(0,)):
    for step in steps:
        w = DumpWriter(root / f"step{step}" / "rank", DumpMeta(task, "L1", "mindspore"))
        for e in entries:
            w.put(e)
            w.set_stack(e.name, [f"File train.py, line {step}, in <module>", "File <model>.py, line 7, in construct"])
        w.flush()
    return root


# ------------------------------------------------------------------ JSON Schema


def test_json_schema_is_shipped_in_the_package():
    schema = load_json_schema()
    assert schema["properties"]["schema"]["const"] == "msprobe-cmp.comparison"
    assert schema["properties"]["version"]["const"] == 2


@pytest.mark.parametrize("case", ["tensor", "statistics", "mixed", "unpaired", "noise"])
def test_json_output_validates_against_the_schema(case, validator, mixed, tmp_path):
    if case == "tensor":
        c = compare(load_dump(FIXTURES / "tensor_b"), load_dump(FIXTURES / "tensor_a"))
    elif case == "statistics":
        c = compare(load_dump(FIXTURES / "statistics_b"), load_dump(FIXTURES / "statistics_a"))
    elif case == "mixed":
        c = mixed
    elif case == "unpaired":
        a = _dump(tmp_path / "a", [fwd("Functional.x.0.forward", t())], steps=(0, 1))
        b = _dump(tmp_path / "b", [fwd("Functional.x.0.forward", t(mx=2.0))], steps=(0, 2))
        c = compare(load_dump(a), load_dump(b))
        assert c.unpaired
    else:
        a = _dump(tmp_path / "a", [fwd("Functional.x.0.forward", t(mx=3.0))])
        b = _dump(tmp_path / "b", [fwd("Functional.x.0.forward", t())])
        n = _dump(tmp_path / "n", [fwd("Functional.x.0.forward", t(mx=2.5))])
        c = compare(load_dump(a), load_dump(b), CompareOptions(rules=Rules(), noise=load_dump(n)))
    doc = json.loads(render_json(c))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    assert doc["input_noise"] == (str(tmp_path / "n") if case == "noise" else None)


def test_json_schema_rejects_what_we_do_not_write(validator, mixed):
    doc = json.loads(render_json(mixed))
    assert validator.is_valid(doc)
    for mutate in (
        lambda d: d.pop("units"),
        lambda d: d.update(verdict="maybe"),
        lambda d: d.update(surprise=1),
        lambda d: d.update(input_noise=3),
        lambda d: d["units"][0]["rows"][0].update(verdict="ok"),
        lambda d: d["units"][0]["rows"][0]["metrics"].update(Cosine="0.5"),
        lambda d: d["units"][0]["rows"][0]["a"].update(max="nan"),
        lambda d: d["class_counts"].pop("matched"),
    ):
        bad = copy.deepcopy(doc)
        mutate(bad)
        assert not validator.is_valid(bad)


# ------------------------------------------------------------------ JUnit XML


def test_junit_validates_and_counts(mixed, junit_schema):
    text = render_junit(mixed)
    junit_schema.validate(text)
    root = ET.fromstring(text)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["msprobe-cmp verdict", "step0/rank0 vs step0/rank0"]
    verdicts = dict(mixed.verdict_counts)
    unit_suite = suites[1]
    assert int(unit_suite.get("tests")) == len(mixed.units[0].rows)
    assert int(unit_suite.get("failures")) == verdicts["fail"] == len(unit_suite.findall("testcase/failure"))
    assert int(unit_suite.get("skipped")) == verdicts["skip"] == len(unit_suite.findall("testcase/skipped"))
    assert int(root.get("failures")) == verdicts["fail"] + 1  # + the overall verdict
    bad = next(c for c in unit_suite if c.get("classname") == "Functional.bad|pipe.0.forward")
    failure = bad.find("failure")
    assert failure is not None and failure.get("message") == "; ".join(mixed.units[0].rows[bad_index(mixed)].reasons)
    assert "Max diff=4" in failure.text
    evil = next(c for c in unit_suite if c.get("classname") == EVIL)  # markup survives as text
    assert evil.get("name") == "input.0"
    ctl = [c.get("classname") for c in unit_suite if c.get("classname", "").startswith("Functional.ctl")]
    assert ctl == ["Functional.ctl\\u0001\\u001b[31m.0.forward"]
    assert suites[0].find("testcase/failure").get("type") == "fail"


def bad_index(c):
    return next(r.index for r in c.units[0].rows if r.entry_name == "Functional.bad|pipe.0.forward")


def test_junit_marks_nothing_compared_and_unpaired_units(junit_schema, tmp_path):
    a = _dump(tmp_path / "a", [fwd("Functional.x.0.forward", t())], steps=(0, 1))
    b = _dump(tmp_path / "b", [fwd("Functional.y.0.forward", t())], steps=(0, 2))
    c = compare(load_dump(a), load_dump(b))
    assert c.verdict == "nothing_compared" and c.unpaired
    text = render_junit(c)
    junit_schema.validate(text)
    root = ET.fromstring(text)
    overall = root.find("testsuite")
    assert overall.find("testcase/failure").get("type") == "nothing_compared"
    unpaired = root.findall("testsuite")[-1]
    assert unpaired.get("name") == "unpaired units" and len(unpaired.findall("testcase/skipped")) == 2


def test_junit_passing_comparison_has_no_failure(junit_schema):
    c = compare(load_dump(FIXTURES / "statistics_b"), load_dump(FIXTURES / "statistics_a"))
    assert c.verdict == "pass"
    text = render_junit(c)
    junit_schema.validate(text)
    root = ET.fromstring(text)
    assert root.get("failures") == "0" and not root.findall(".//failure")


def test_xml_text_escapes_what_xml_cannot_hold():
    assert xml_text("a\x00b\x1bc\ud800d\ufffe") == "a\\u0000b\\u001bc\\ud800d\\ufffe"
    assert xml_text("tab\tnl\n<&>") == "tab\tnl\n<&>"  # legal characters kept (ElementTree escapes markup)


# ------------------------------------------------------------------ Markdown


def test_markdown_summary(mixed):
    md = render_markdown(mixed)
    assert md.startswith("## msprobe-cmp: FAIL")
    assert "**First divergent:**" in md and "**First failing:**" in md
    assert "### Largest disagreements" in md
    assert "<script>" not in md and "\\<script\\>alert\\(1\\)\\</script\\>" in md
    assert "bad\\|pipe" in md  # a pipe cannot split a table cell
    assert "\x01" not in md and "\x1b" not in md
    for line in md.splitlines():
        if line.startswith("| Functional.bad"):
            assert line.count(" | ") == line.replace("\\|", "").count(" | ")


def test_markdown_text_escapes():
    assert markdown_text("a*b_c`d<e>f|g[h](i)") == "a\\*b\\_c\\`d\\<e\\>f\\|g\\[h\\]\\(i\\)"
    assert markdown_text("line\nbreak") == "line break"
    assert len(markdown_text("x" * 5000)) <= 300


# ------------------------------------------------------------------ HTML data block and plots


def test_script_json_cannot_close_its_block():
    nasty = {"s": "</script><script>alert(1)</script><!-- \u2028 & </SCRIPT >", "n": 1.5}
    text = str(render_script_json(nasty))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == nasty


def test_page_data_rows_and_left_out(mixed):
    data = build_page_data(mixed)
    assert len(data["rows"]) == data["total_rows"] == len(mixed.units[0].rows)
    assert data["left_out"] == []
    capped = build_page_data(mixed, max_rows=2, max_stack_chars=0)
    fails = sum(1 for r in mixed.units[0].rows[2:] if r.verdict == "fail")
    assert len(capped["rows"]) == 2 + fails  # failing rows are always kept
    assert any("rows are not in this page" in x for x in capped["left_out"])


def test_page_says_what_it_left_out(tmp_path):
    entries = [fwd(f"Functional.op{i}.0.forward", t()) for i in range(30)]
    a = _dump(tmp_path / "a", entries)
    c = compare(load_dump(a), load_dump(a))
    html = render_html(c, max_rows=10, max_stack_chars=10)
    assert "Left out of this page: 20 of 30 rows" in html
    assert "call stacks of" in html


def test_plots_draw_zero_and_nonfinite_errors(mixed):
    hist = str(render_histogram_svg(mixed))
    assert 'id="plot-histogram"' in hist and ">0</text>" in hist and "NaN/inf" in hist
    assert 'class="bar"' in hist and 'class="bar-fail"' in hist
    assert "<script" not in hist
    trace = str(render_trace_svg(mixed))
    assert 'id="plot-trace"' in trace and 'id="first-divergent-mark"' in trace
    assert "&lt;script&gt;" in trace or "Functional.ok" not in trace  # names are escaped
    scatter = str(render_scatter_svg(mixed))
    assert 'id="plot-scatter"' in scatter and "<rect" in scatter


def test_plots_of_tensor_mode_and_empty_comparisons():
    c = compare(load_dump(FIXTURES / "tensor_b"), load_dump(FIXTURES / "tensor_a"))
    trace = str(render_trace_svg(c))
    assert "Cosine" in trace and "Relative error" in trace and "MaxRelativeErr" not in trace
    empty = compare(unit([]), unit([]))
    for render in (render_trace_svg, render_scatter_svg, render_histogram_svg):
        svg = str(render(empty))
        assert svg.startswith("<svg") and svg.endswith("</svg>")
    only_zero = compare(unit([fwd("Functional.z.0.forward", t())]), unit([fwd("Functional.z.0.forward", t())]))
    assert "<rect class=\"bar\"" in str(render_histogram_svg(only_zero))  # all errors exactly 0: one bar


# ------------------------------------------------------------------ CLI


def test_cli_writes_every_report_and_never_overwrites(tmp_path, junit_schema, validator, capsys):
    a = _dump(tmp_path / "a", [fwd("Functional.x.0.forward", t(mx=3.0))])
    b = _dump(tmp_path / "b", [fwd("Functional.x.0.forward", t())])
    out = tmp_path / "out"
    assert main([str(a), str(b), "-o", str(out)]) == 1
    assert set(REPORT_FILES) >= {"junit.xml", "summary.md"}
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    junit_schema.validate(str(out / "junit.xml"))
    assert validator.is_valid(json.loads((out / "comparison.json").read_text()))
    assert (out / "summary.md").read_text().startswith("## msprobe-cmp: FAIL")
    err = capsys.readouterr().err
    assert err == ""  # no progress output when stderr is not a terminal
    for name in ("junit.xml", "summary.md"):
        fresh = tmp_path / f"fresh_{name}"
        fresh.mkdir()
        (fresh / name).write_text("keep me")
        assert main([str(a), str(b), "-o", str(fresh)]) == 2
        assert (fresh / name).read_text() == "keep me"
        assert f"{name} already exists" in capsys.readouterr().err
        assert main([str(a), str(b), "-o", str(fresh), "--force"]) == 1
        assert (fresh / name).read_text() != "keep me"


def test_unit_labels_and_markup_stay_text_in_every_output(mixed):
    c = replace(mixed, input_a="<b>a</b>", input_b="b&amp;")
    html = render_html(c)
    assert "<b>a</b>" not in html and "&lt;b&gt;a&lt;/b&gt;" in html
    assert "\\<b\\>a\\</b\\>" in render_markdown(c)
    assert ET.fromstring(render_junit(c)).find("testsuite/properties/property[@name='input_a']").get("value") == "<b>a</b>"
