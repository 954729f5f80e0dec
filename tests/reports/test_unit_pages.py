"""report.html of a comparison of many units: beyond :data:`~msprobe_cmp.reports.html.PAGE_ROWS` rows an aggregate
page plus one page per unit (``report_units/``); the largest disagreements and the plots gathered a unit at a time
with bounded memory (rows kept are detached copies; plots from per-pixel / per-decade accumulators)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.comparator.spool import spool_unit
from msprobe_cmp.dump import Dump, DumpMeta, Entry, Map, RankDump, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.reports import common, html, render_html
from msprobe_cmp.reports.html import unit_comparison, unit_page_chunks, unit_page_paths


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0):
    return TensorLeaf("mindspore.Tensor", "Float32", (4,), max=mx, min=mn, mean=mean, norm=norm)


def unit(entries, step, rank=0):
    return RankDump(Path(f"mem/step{step}/rank{rank}"), step, rank, DumpMeta("statistics", "L1", "mindspore"),
                    tuple(entries))


def fwd(name, *leaves):
    return Entry.forward(name, Seq(tuple(leaves)), Map(), Seq(()))


def _a_value(k: int, i: int) -> float:
    """A's Max of entry ``i`` of unit ``k``: distinct drifts over several decades, every 7th row failing, every 11th
    identical, one NaN."""
    if i % 11 == 0:
        return 1.0
    if k == 1 and i == 5:
        return math.nan
    return 1.0 + (i % 13 + 1) * 10.0 ** -(i % 6) * (k + 1) + (3.0 if i % 7 == 0 else 0.0)


def _comparison(units: int = 3, entries: int = 60) -> Comparison:
    a = [unit([fwd(f"Functional.f{i % 5}.{i}.forward", t(mx=_a_value(k, i))) for i in range(entries)], k)
         for k in range(units)]
    b = [unit([fwd(f"Functional.f{i % 5}.{i}.forward", t()) for i in range(entries)], k) for k in range(units)]
    return compare(Dump(Path("a"), tuple(a)), Dump(Path("b"), tuple(b)))


@pytest.fixture(scope="module")
def c() -> Comparison:
    return _comparison()


def _rows(c: Comparison) -> int:
    return sum(len(u.rows) for u in c.units)


def test_pages_are_split_only_for_several_units_beyond_the_limit(c):
    n = _rows(c)
    assert n == 180
    assert unit_page_paths(c, page_rows=n) == []  # every row fits one page
    assert unit_page_paths(c, page_rows=n - 1) == ["report_units/step0_rank0.html", "report_units/step1_rank0.html",
                                                   "report_units/step2_rank0.html"]
    assert unit_page_paths(c) == []  # the default limit is far above 180 rows
    one = replace(c, units=c.units[:1])
    assert unit_page_paths(one, page_rows=1) == []  # one unit is always one page


def test_unit_page_names_are_file_safe_and_distinct(c):
    labels = [("x/y", "x/y"), ("x_y", "x_y"), ("X_Y", "other:b")]
    units = tuple(replace(u, unit_a=replace(u.unit_a, label=la), unit_b=replace(u.unit_b, label=lb))
                  for u, (la, lb) in zip(c.units, labels, strict=True))
    assert unit_page_paths(replace(c, units=units), page_rows=1) == [
        "report_units/x_y.html", "report_units/x_y-1.html", "report_units/X_Y_vs_other_b.html"]


def test_unit_page_names_fit_a_file_system_and_never_repeat(c):
    """A suffixed name that an earlier label already spells gets a further suffix; a long label is cut to
    PAGE_NAME_BYTES and ends with 8 hex digits of its SHA-256; no name starts with '-' or '.'."""
    import hashlib

    from msprobe_cmp.reports.html import PAGE_NAME_BYTES

    def paths(*labels: str) -> list[str]:
        units = tuple(replace(u, unit_a=replace(u.unit_a, label=la), unit_b=replace(u.unit_b, label=la))
                      for u, la in zip(c.units, labels, strict=True))
        return unit_page_paths(replace(c, units=units), page_rows=1)

    assert paths("a", "a-2", "a") == ["report_units/a.html", "report_units/a-2.html", "report_units/a-2-1.html"]
    assert paths("a", "a-2", "A") == ["report_units/a.html", "report_units/a-2.html", "report_units/A-2-1.html"]
    long = "step" + "9" * 300 + "/rank"
    cut = "step" + "9" * (PAGE_NAME_BYTES - 9 - 4)
    digest = hashlib.sha256(("step" + "9" * 300 + "_rank").encode()).hexdigest()[:8]
    got = paths(long + "0", long + "1", "-x/.y")
    assert got[0] == f"report_units/{cut}~{hashlib.sha256(('step' + '9' * 300 + '_rank0').encode()).hexdigest()[:8]}.html"
    assert got[1].startswith(f"report_units/{cut}~") and got[1] != got[0] and digest not in got[1]
    assert all(len(g.split("/")[1]) == PAGE_NAME_BYTES + 5 for g in got[:2])
    assert got[2] == "report_units/x_.y.html"


def _row_links(page: str) -> list[str]:
    return re.findall(r'href="([^"]*#row-\d+-\d+)"', page)


def _svgs(page: str) -> list[str]:
    return re.findall(r'<svg id="plot-[a-z]+".*?</svg>', page, flags=re.S)


def test_aggregate_page_links_every_row_to_its_units_page(c):
    whole = render_html(c)
    aggregate = render_html(c, page_rows=_rows(c) - 1)
    paths = unit_page_paths(c, page_rows=_rows(c) - 1)
    assert 'id="report-data"' in whole and "<script" in whole
    assert 'id="report-data"' not in aggregate and "<script" not in aggregate  # no row data: nothing to script
    for path in paths:
        assert f'<a class="unit-page" href="{path}">its rows</a>' in aggregate
    # the same row links in the same order (pairing, first divergent / failing, largest disagreements), each now
    # to the row on its unit's page, where the unit is the page's only one (0)
    expected = []
    for link in _row_links(whole):
        ui, row = map(int, re.fullmatch(r"#row-(\d+)-(\d+)", link).groups())
        expected.append(f"{paths[ui]}#row-0-{row}")
    assert expected and _row_links(aggregate) == expected
    ref = c.first_divergent
    assert f'href="{paths[ref.unit]}#row-0-{ref.row}">{ref.name}</a>' in aggregate
    # the plots are the same whether or not the rows are on this page
    assert len(_svgs(aggregate)) == 3 and _svgs(aggregate) == _svgs(whole)
    assert f"its {_rows(c)} rows in 3 units are more than one page holds" in aggregate


def test_a_units_page_is_the_one_unit_comparison_page_with_a_link_back(c):
    for ui, u in enumerate(c.units):
        page = "".join(unit_page_chunks(c, ui))
        data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page,
                                    flags=re.S).group(1))
        assert data["units"] == [[u.unit_a.label, u.unit_b.label]]
        assert [(r[0], r[1]) for r in data["rows"]] == [(0, i) for i in range(len(u.rows))]
        assert f'<span id="verdict" class="badge v-{u.verdict}">{u.verdict}</span>' in page
        assert f'Unit {ui + 1} of 3 of the comparison' in page and 'href="../report.html"' in page
        # the page of the unit as a comparison of its own, but for the line linking back
        without_back = re.sub(r'<p id="back".*?</p>\n', "", page, count=1, flags=re.S)
        assert without_back == render_html(unit_comparison(c, ui))


def test_a_units_comparison_has_the_units_own_first_rows_and_origin(c):
    for ui, u in enumerate(c.units):
        one = unit_comparison(c, ui)
        assert one.units == (u,) and one.verdict == u.verdict and one.counts == u.counts
        assert one.first_divergent.unit == 0 and one.first_divergent.row == u.first_divergent
        assert one.first_divergent.name == u.rows[u.first_divergent].name
        assert (one.first_failing.row if one.first_failing else None) == u.first_failing
    assert unit_comparison(c, 0).likely_origin.ref.row == c.likely_origin.ref.row  # the comparison's is unit 0's


def test_histogram_counts_every_row_of_every_unit(c):
    key = common.select_error_metric(c)
    svg = _svgs(render_html(c, page_rows=1))[2]
    drawn = {span: int(n) for cls, span, n in re.findall(
        rf'<rect class="(bar)"[^>]*><title>{re.escape(key)} (.*?): (\d+) rows</title>', svg)}
    counts: Counter[str] = Counter()
    values = [r.metric(key) for u in c.units for r in u.rows if r.metric(key) is not None]
    positive = [v for v in values if math.isfinite(v) and v > 0]
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    for v in values:
        if not math.isfinite(v):
            counts["NaN/inf"] += 1
        elif v <= 0:
            counts["0"] += 1
        else:
            e = min(max(math.floor(math.log10(v)), lo), hi - 1)
            counts[f"[1e{e}, 1e{e + 1})"] += 1
    assert drawn == dict(counts) and sum(drawn.values()) == len(values) > 100


def _spooled(c: Comparison, directory: Path) -> Comparison:
    units = tuple(spool_unit(u, directory, f"u{k}") for k, u in enumerate(c.units))
    return replace(c, units=units)


def test_spooled_units_give_the_same_pages(c, tmp_path):
    s = _spooled(c, tmp_path)
    limit = _rows(c) - 1
    assert render_html(s, page_rows=limit) == render_html(c, page_rows=limit)
    assert ["".join(unit_page_chunks(s, k)) for k in range(3)] == ["".join(unit_page_chunks(c, k)) for k in range(3)]


def _candidates(c: Comparison) -> list[tuple[int, object]]:
    return [(ui, r) for ui, u in enumerate(c.units) for r in u.rows
            if r.verdict == "fail" or (r.differs and r.verdict != "skip")]


def test_ranking_kept_a_unit_at_a_time_is_the_sorted_prefix_and_detached():
    c = _comparison(units=4, entries=150)
    full = sorted(_candidates(c), key=lambda item: common._disagreement_key(item[1]))  # stable: unit, row order
    assert len(full) > 4 * (8 * 3 + 64)  # each unit has more candidates than it keeps
    distinct, seen = [], set()
    for ui, r in full:  # each tensor once: the first of its rows, in ranking order
        ident = common.tensor_identity(r)
        if ident is None or (ui, ident) not in seen:
            distinct.append((ui, r.index))
            seen.add((ui, ident))
    ranked = common.rank_disagreements(c, 3)
    assert [(d.unit, d.row.index) for d in ranked] == distinct[:3]
    for d in ranked:
        original = c.units[d.unit].rows[d.row.index]
        assert d.row == original and d.row.table is not original.table and len(d.row.table) == 1
        assert d.row.name == original.name and str(d.row.as_tuple()) == str(original.as_tuple())  # NaN as text


def test_ranking_gathers_more_rows_when_the_kept_ones_do_not_settle_it():
    """One failing tensor recorded under 300 names ranks first in each unit: the best rows kept per unit (88 for a
    limit of 3) hold one tensor only, so more are gathered until the list is settled."""
    same = t(mx=50.0)
    a = [unit([fwd(f"Functional.same.{i}.forward", same) for i in range(300)]
              + [fwd(f"Functional.other.{i}.forward", t(mx=1.0 + i)) for i in range(1, 4)], k) for k in range(2)]
    b = [unit([fwd(f"Functional.same.{i}.forward", t()) for i in range(300)]
              + [fwd(f"Functional.other.{i}.forward", t()) for i in range(1, 4)], k) for k in range(2)]
    c = compare(Dump(Path("a"), tuple(a)), Dump(Path("b"), tuple(b)))
    ranked = common.rank_disagreements(c, 3)
    assert [(d.unit, d.row.name, len(d.also)) for d in ranked] == [
        (0, "Functional.same.0.forward.input.0", 299), (1, "Functional.same.0.forward.input.0", 299),
        (0, "Functional.other.3.forward.input.0", 0)]
    assert [o.index for o in ranked[0].also] == list(range(1, 300))


def test_examples_and_arguments_kept_for_the_reports_are_detached():
    a = [unit([fwd("Functional.ln.0.forward", t(mx=3.0), ValueLeaf("float", 1e-5)),
               fwd(f"Functional.extra.{k}.forward", t())], k) for k in range(2)]
    b = [unit([fwd("Functional.ln.0.forward", t(), ValueLeaf("float", 1e-12))], k) for k in range(2)]
    c = compare(Dump(Path("a"), tuple(a)), Dump(Path("b"), tuple(b)))
    facts = common.ReportFacts(c)
    kept = [(d.unit, r) for d in facts.disagreements(5) for r in (d.row, *d.also)]
    kept += [(ui, r) for *_, rows in html._not_comparable(c, facts) for ui, r in rows]
    kept += [(a.unit, a.row) for a in common.differing_arguments(c)]
    assert len(kept) == 4 + 2 + 2  # disagreements: the failing tensor and the eps of each unit; only in A; eps
    for ui, r in kept:
        assert len(r.table) == 1 and r == c.units[ui].rows[r.index]


def test_a_detached_row_reads_as_the_row_and_holds_only_its_own_texts(c):
    rows = c.units[2].rows
    r = rows[17]
    d = r.detached()
    assert (d.index, d.position, r.position) == (17, 0, 17)
    assert d == r and d.as_tuple() == r.as_tuple()
    assert d.table is not rows and len(d.table) == 1
    assert rows[3].entry_name not in d.table.strings
    assert common.tensor_identity(d) == common.tensor_identity(r)
    assert common._disagreement_key(d) == common._disagreement_key(r)
