"""What the reports say about a listed disagreement and about rows the mode could not compare (new-user and breaker
findings): the HTML largest-disagreements table shows each row's reasons (and short notes) and every other name of its
tensor; summary.md cuts names, never the count; rows a tensor / md5 comparison judged by their statistics only are
listed under "Not comparable"; a failure whose statistics hold a NaN or ±Inf that the other side's do not ranks first.

Pages are read with a small tree built by the standard library's HTML parser, not with regular expressions."""

from __future__ import annotations

import math
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.comparator.rowtable import RowTable
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, RankDump, Seq, TensorLeaf, load_dump
from msprobe_cmp.reports import common, render_html, render_markdown
from msprobe_cmp.reports.html import NOTHING_COMPARED_CLASS, STATISTICS_ONLY_CLASS
from msprobe_cmp.reports.tables import markdown_text

# ------------------------------------------------------------------ a small HTML tree

_VOID = {"br", "meta", "input", "img", "hr", "link", "col", "wbr"}


class Node:
    """An element: tag, attributes and children (nodes and text)."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def elements(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.elements()

    def find_all(self, tag: str, cls: str | None = None) -> list[Node]:
        return [e for e in self.elements() if e.tag == tag and (cls is None or cls in e.classes)]

    def by_id(self, ident: str) -> Node | None:
        return next((e for e in self.elements() if e.attrs.get("id") == ident), None)

    def child_elements(self, tag: str) -> list[Node]:
        return [c for c in self.children if isinstance(c, Node) and c.tag == tag]


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, 0, -1):
            if self.stack[k].tag == tag:
                del self.stack[k:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


def largest_rows(page: Node) -> list[dict]:
    """The largest-disagreements table, one dict per listed row."""
    table = page.by_id("largest")
    assert table is not None
    out = []
    for tr in table.find_all("tr")[1:]:
        cells = tr.child_elements("td")
        name_cell = cells[0]
        main = name_cell.child_elements("a")
        also_div = next((d for d in name_cell.child_elements("div") if "also" in d.classes), None)
        shown, hidden, more, left = [], [], None, None
        if also_div is not None:
            shown = [(a.attrs["href"], a.text()) for a in also_div.child_elements("a")]
            details = also_div.child_elements("details")
            if details:
                more = details[0].child_elements("summary")[0].text()
                hidden = [(a.attrs["href"], a.text()) for a in details[0].child_elements("a")]
                spans = details[0].child_elements("span")
                left = spans[0].text() if spans else None
        why = [d.text() for d in name_cell.child_elements("div") if "why" in d.classes]
        notes = [d.text() for d in name_cell.child_elements("div") if "notes" in d.classes]
        out.append({
            "href": main[0].attrs["href"], "name": main[0].text(), "shown": shown, "more": more, "hidden": hidden,
            "left": left, "why": why, "notes": notes, "verdict": cells[2].text(), "unit": cells[1].text(),
            "numbers": [td.text() for td in cells[3:]],
        })
    return out


def not_comparable_rows(page: Node) -> dict[str, dict]:
    table = page.by_id("not-comparable")
    if table is None:
        return {}
    out = {}
    for tr in table.find_all("tr")[1:]:
        cells = tr.child_elements("td")
        links = cells[3].child_elements("a")
        notes = cells[3].child_elements("span")
        out[cells[0].text()] = {"count": int(cells[1].text()), "why": cells[2].text(),
                                "names": [a.text() for a in links], "notes": [s.text() for s in notes]}
    return out


# ------------------------------------------------------------------ dumps


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), md5=None, data_name=None):
    return TensorLeaf("mindspore.Tensor", "Float32", shape, max=mx, min=mn, mean=mean, norm=norm, md5=md5,
                      data_name=data_name)


def unit(entries, task="statistics"):
    return RankDump(Path("mem"), 0, 0, DumpMeta(task, "L1", "mindspore"), tuple(entries))


def fwd(name, leaf):
    return Entry.forward(name, Seq(), Map(), Seq((leaf,)))


def _stats(arr: np.ndarray) -> dict[str, float]:
    x = arr.astype(np.float64)
    return {"mx": float(np.max(x)), "mn": float(np.min(x)), "mean": float(np.mean(x)), "norm": float(np.linalg.norm(x))}


def write_tensor_side(root: Path, arrays: dict[str, np.ndarray], missing: set[str] = frozenset()) -> Path:
    """A tensor-mode dump of one forward entry per name (its output); the names in ``missing`` name a tensor
    file that is not written."""
    w = DumpWriter(root / "step0" / "rank", DumpMeta("tensor", "L1", "mindspore"))
    for name, arr in arrays.items():
        arr = arr.astype(np.float32)
        data_name = f"{name}.output.0.npy"
        if name not in missing:
            w.save_tensor(data_name, arr)
        w.put(fwd(name, t(shape=arr.shape, data_name=data_name, **_stats(arr))))
    w.flush()
    return root


X = np.linspace(-1.0, 1.0, 32)


# ------------------------------------------------------------------ 4. ranking: non-finite disagreements first


@pytest.mark.parametrize(("x", "y", "expected"), [
    (math.nan, 1.0, True), (1.0, math.nan, True), (math.inf, 1.0, True), (-math.inf, 3.0, True),
    (math.nan, math.inf, True), (math.inf, -math.inf, True),
    (math.nan, math.nan, False), (math.inf, math.inf, False), (-math.inf, -math.inf, False),
    (1.0, 2.0, False), (None, math.nan, False), (math.nan, None, False),
])
def test_which_statistics_disagree_in_their_non_finite_values(x, y, expected):
    for stat in ("max", "min", "mean", "norm"):
        a, b = replace(t(), **{stat: x}), replace(t(), **{stat: y})
        c = compare(unit([Entry.forward("Functional.f.0.forward", Seq(), Map(), Seq((a,)))]),
                    unit([Entry.forward("Functional.f.0.forward", Seq(), Map(), Seq((b,)))]))
        (row,) = c.units[0].rows
        assert common.nonfinite_disagreement(row) is expected, (stat, x, y)


def _statistics_comparison() -> Comparison:
    # (A, B) per entry; every row fails.  Lower bounds of the finite failures: f_big 10, f_mid 5, both_nan 3
    # (its Min), inf_same 4 (its Min); the flagged rows: nan_early (Min shifted by 2), nan_late, inf_vs_ninf, nan_b.
    pairs = {
        "f_big": (t(mx=11.0), t()),
        "nan_early": (t(mx=math.nan, mn=-3.0), t()),
        "f_mid": (t(mx=6.0), t()),
        "nan_late": (t(mx=math.nan), t()),
        "both_nan": (t(mx=math.nan, mn=-4.0), t(mx=math.nan)),
        "inf_same": (t(mx=math.inf, mn=-5.0), t(mx=math.inf)),
        "inf_vs_ninf": (t(mx=math.inf), t(mx=-math.inf)),
        "nan_b": (t(), t(norm=math.nan)),
        "warn_nan": (t(mx=1.0 + 1e-3), t()),  # made a warning below
    }
    a = [fwd(f"Functional.{k}.0.forward", v[0]) for k, v in pairs.items()]
    b = [fwd(f"Functional.{k}.0.forward", v[1]) for k, v in pairs.items()]
    return compare(unit(a), unit(b))


def test_failures_with_disagreeing_non_finite_statistics_rank_first():
    c = _statistics_comparison()
    rows = {r.entry_name.split(".")[1]: r for r in c.units[0].rows}
    assert {k: r.verdict for k, r in rows.items() if k != "warn_nan"} == dict.fromkeys(
        ("f_big", "nan_early", "f_mid", "nan_late", "both_nan", "inf_same", "inf_vs_ninf", "nan_b"), "fail")
    ranked = [d.row.entry_name.split(".")[1] for d in common.rank_disagreements(c, 20)]
    # first the NaN/Inf disagreements (nan_early has the largest bound of them, 2 from its Min; the other three tie
    # at their bound 0 and keep their execution order), then the finite failures by bound: 10, 5, 4, 3
    assert ranked[:8] == ["nan_early", "nan_late", "inf_vs_ninf", "nan_b", "f_big", "f_mid", "inf_same", "both_nan"]
    for k in range(1, 10):  # a shorter list is a prefix of a longer one
        assert common.rank_disagreements(c, k) == common.rank_disagreements(c, 20)[:k]


def test_a_warning_with_a_nan_stays_below_every_failure():
    a = [fwd("Functional.fail.0.forward", t(mx=3.0)), fwd("Functional.warn.0.forward", t(mx=math.nan))]
    b = [fwd("Functional.fail.0.forward", t()), fwd("Functional.warn.0.forward", t())]
    c = compare(unit(a), unit(b))
    warned = c.units[0].rows[1].replaced(verdict="warning")
    c = replace(c, units=(replace(c.units[0], rows=RowTable.from_rows((c.units[0].rows[0], warned))),))
    assert common.nonfinite_disagreement(warned)
    assert [d.row.entry_name for d in common.rank_disagreements(c)] == ["Functional.fail.0.forward",
                                                                       "Functional.warn.0.forward"]


def test_a_nan_tensor_ranks_above_every_finite_failure_in_tensor_mode(tmp_path):
    # A's nan tensor: Cosine and MaxAbsErr are undefined, which would rank it last of the failures
    arrays_b = {"Functional.scale.0.forward": X, "Functional.flip.0.forward": X, "Functional.nan.0.forward": X}
    arrays_a = {"Functional.scale.0.forward": X * 3.0, "Functional.flip.0.forward": -X,
                "Functional.nan.0.forward": np.where(np.arange(X.size) == 5, np.nan, X)}
    c = compare(load_dump(write_tensor_side(tmp_path / "a", arrays_a)),
                load_dump(write_tensor_side(tmp_path / "b", arrays_b)))
    rows = {r.entry_name: r for r in c.units[0].rows}
    assert {r.verdict for r in rows.values()} == {"fail"}
    assert rows["Functional.nan.0.forward"].metric("Cosine") is None
    ranked = [d.row.entry_name for d in common.rank_disagreements(c)]
    # flip: Cosine -1, below scale's 1 (equal directions): numpy says so too
    assert float(-X @ X / (np.linalg.norm(X) ** 2)) < float(3 * X @ X / (3 * np.linalg.norm(X) ** 2))
    assert ranked == ["Functional.nan.0.forward", "Functional.flip.0.forward", "Functional.scale.0.forward"]
    md = render_markdown(c)
    first = next(line for line in md.splitlines() if line.startswith("| Functional"))
    assert first.startswith("| Functional.nan.0.forward.output.0 | step0/rank | fail |")
    assert "NaN or ±Inf" in md


@pytest.mark.parametrize("with_inf", [True, False])
def test_many_equal_nan_failures_give_the_list_of_a_full_sort(with_inf):
    """NaN propagation: hundreds of failures ranked equal at the top (A all NaN, as the recorder writes a tensor
    holding a NaN: each its own tensor), among them (``with_inf``) one +Inf tensor recorded 31 times (one tensor, its
    other names complete), then finite failures."""
    a, b = [], []
    for k in range(500):
        if with_inf and k < 465 and k % 15 == 0:
            la = t(mx=math.inf)  # the same tensor each time: +Inf on A, 1 on B
        elif k < 465:
            la = t(mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan)
        else:
            la = t(mx=3.0 + k)  # finite failures, the later the larger
        a.append(fwd(f"Functional.f.{k}.forward", la))
        b.append(fwd(f"Functional.f.{k}.forward", t()))
    c = compare(unit(a), unit(b))
    assert {v for v, n in c.verdict_counts if n} == {"fail"}
    # expected: the NaN / +Inf rows in execution order, the +Inf ones as one tensor at its first place; then the
    # finite failures by the size of their Max difference, largest first
    expected: list[tuple[str, list[str]]] = []
    inf_names = [f"Functional.f.{k}.forward.output.0" for k in range(0, 465, 15)]
    for k in range(465):
        name = f"Functional.f.{k}.forward.output.0"
        if with_inf and k == 0:
            expected.append((name, inf_names[1:]))
        elif k % 15 or not with_inf:
            expected.append((name, []))
    expected += [(f"Functional.f.{k}.forward.output.0", []) for k in range(499, 464, -1)]
    for limit in (1, 5, 15, 40, 460, 1000):
        got = [(d.row.name, [o.name for o in d.also]) for d in common.rank_disagreements(c, limit)]
        assert got == expected[:limit], limit


def test_the_ranking_text_says_so_in_every_mode():
    for mode, text in common.RANKING.items():
        assert text.startswith("failing first (at their top the failures whose statistics hold a NaN or ±Inf"), mode


# ------------------------------------------------------------------ 2. the other names: all in the page, the count kept


def test_also_recorded_as_cuts_names_never_the_count():
    names = [f"Functional.op_{k}_" + "x" * 110 + ".0.forward.output.0" for k in range(5)]  # 145 characters each
    assert all(len(n) == 145 for n in names)
    text = common.also_recorded_as(names, 3, max_chars=300)
    # "also recorded as " (17) + one name (145) + " and 4 more" (11) = 173; a second name (+147) would be 320 > 300
    assert text == f"also recorded as {names[0]} and 4 more"
    assert len(common.also_recorded_as(names, 3, max_chars=320)) == 320  # now both fit: 17 + 145 + 2 + 145 + 11
    assert common.also_recorded_as(names, 3, max_chars=320) == f"also recorded as {names[0]}, {names[1]} and 3 more"
    # a first name too long on its own is cut, the count kept
    cut = common.also_recorded_as(names, 3, max_chars=100)
    assert cut == "also recorded as " + names[0][:100 - 17 - 11 - 1] + "…" + " and 4 more"
    assert len(cut) == 100
    # short names: unchanged by the limit
    assert common.also_recorded_as(["a", "b", "c", "d"], 3, max_chars=300) == "also recorded as a, b, c and 1 more"
    assert common.also_recorded_as(["a", "b"], 3, max_chars=300) == "also recorded as a, b"


def _same_tensor_comparison(copies: int, name_pad: str = "") -> Comparison:
    """One failing statistics tensor recorded ``copies`` times (an entry each), then a smaller failure."""
    a = [fwd(f"Functional.copy{name_pad}.{k}.forward", t(mx=3.0)) for k in range(copies)]
    b = [fwd(f"Functional.copy{name_pad}.{k}.forward", t()) for k in range(copies)]
    a.append(fwd("Functional.other.0.forward", t(mx=2.5)))
    b.append(fwd("Functional.other.0.forward", t()))
    return compare(unit(a), unit(b))


def test_summary_md_keeps_the_count_when_the_names_are_long():
    pad = "_" + "y" * 130
    c = _same_tensor_comparison(6, pad)
    md = render_markdown(c)
    line = next(x for x in md.splitlines() if x.startswith("| Functional.copy"))
    name_cell = line.split(" | ")[0][2:]
    names = [f"Functional.copy{pad}.{k}.forward.output.0" for k in range(6)]
    assert len(names[1]) == 165
    # the five other names: one fits in 300 characters with " and 4 more" (17 + 165 + 11), two do not
    # (17 + 165 + 2 + 165 + 11)
    assert name_cell == f"{markdown_text(names[0])} (also recorded as {markdown_text(names[1])} and 4 more)"
    # before, the text was cut at 300 characters: "…" and no count


def test_the_page_lists_every_other_name_behind_and_n_more():
    c = _same_tensor_comparison(6)
    index = {r.entry_name: r.index for r in c.units[0].rows}
    (first, second) = largest_rows(parse_html(render_html(c)))
    assert first["name"] == "Functional.copy.0.forward.output.0"
    assert first["shown"] == [(f"#row-0-{index[f'Functional.copy.{k}.forward']}", f"Functional.copy.{k}.forward.output.0")
                              for k in (1, 2, 3)]
    assert first["more"] == "and 2 more"
    assert first["hidden"] == [(f"#row-0-{index[f'Functional.copy.{k}.forward']}",
                                f"Functional.copy.{k}.forward.output.0") for k in (4, 5)]
    assert first["left"] is None
    assert second["name"] == "Functional.other.0.forward.output.0" and second["shown"] == [] and second["more"] is None


def test_the_page_caps_the_full_list_and_says_how_many_it_left_out():
    copies = common.ALSO_NAMES_LISTED + 12  # the first copy is listed; ALSO_NAMES_LISTED + 11 other names
    c = _same_tensor_comparison(copies)
    (first, _) = largest_rows(parse_html(render_html(c)))
    others = [f"Functional.copy.{k}.forward.output.0" for k in range(1, copies)]
    listed = [name for _, name in first["shown"] + first["hidden"]]
    assert listed == others[:common.ALSO_NAMES_LISTED]
    assert first["more"] == f"and {len(others) - 3} more"
    assert first["left"] == (f"(the first {common.ALSO_NAMES_LISTED} of {len(others)} names; 11 more not listed)")
    md = render_markdown(c)
    assert f"Functional.copy.3.forward.output.0 and {len(others) - 3} more)" in md  # summary.md keeps the cap


# ------------------------------------------------------------------ 1. reasons and notes in the page's table


def test_each_listed_row_shows_its_reasons_and_short_notes_escaped(tmp_path):
    # the new user's case: a row whose tensor file is missing, judged by its statistics (which pass: a warning with
    # no number but the statistics diffs), listed because its values differ
    evil = "Functional.<b title=x>.0.forward"
    arrays_b = {evil: X, "Functional.scale.0.forward": X, "Functional.noted.0.forward": X}
    arrays_a = {evil: X + 1e-3, "Functional.scale.0.forward": X * 3.0, "Functional.noted.0.forward": X + 2.0}
    c = compare(load_dump(write_tensor_side(tmp_path / "a", arrays_a, missing={evil})),
                load_dump(write_tensor_side(tmp_path / "b", arrays_b)))
    rows = {r.entry_name: r for r in c.units[0].rows}
    assert (rows[evil].compared_by, rows[evil].verdict, rows[evil].differs) == ("statistics", "warning", True)
    # notes: a short one on "noted", long ones on "scale" (set here: the renderer shows what the row holds)
    long_note = "n" * 250
    new_rows = RowTable.from_rows([
        r.replaced(notes=("a short note <i>", )) if r.entry_name == "Functional.noted.0.forward"
        else r.replaced(notes=(long_note, "another")) if r.entry_name == "Functional.scale.0.forward"
        else r for r in c.units[0].rows])
    c = replace(c, units=(replace(c.units[0], rows=new_rows),))
    html = render_html(c)
    assert "<b title=x>" not in html and "<i>" not in html  # every text from the dump is escaped
    listed = largest_rows(parse_html(html))
    # failing first, by Cosine: X + 2 points away from X (Cosine below 1), 3 X along it (Cosine 1); then the warning
    x32 = X.astype(np.float32).astype(np.float64)
    shifted = (X + 2.0).astype(np.float32).astype(np.float64)
    assert float(shifted @ x32 / (np.linalg.norm(shifted) * np.linalg.norm(x32))) < 0.99
    assert [r["name"] for r in listed] == ["Functional.noted.0.forward.output.0", "Functional.scale.0.forward.output.0",
                                           f"{evil}.output.0"]
    assert [r["verdict"] for r in listed] == ["fail", "fail", "warning"]
    evil_row = listed[2]
    assert evil_row["why"] == ["; ".join(rows[evil].reasons)]
    assert "compared statistics instead" in evil_row["why"][0] and "not compared" in evil_row["why"][0]
    assert f"{evil}.output.0.npy" in evil_row["why"][0]  # the file to look for, as text
    assert evil_row["numbers"][:6] == ["–"] * 6  # no tensor metric: the reason is all the page can say
    assert listed[0]["notes"] == ["a short note <i>"]
    assert listed[1]["notes"] == ["2 note(s): click the row's name to read them"]
    assert all(r["why"] for r in listed)


# ------------------------------------------------------------------ 3. rows judged by their statistics only


def test_rows_judged_by_statistics_are_listed_as_not_comparable(tmp_path):
    arrays_b = {f"Functional.op.{k}.forward": X * (k + 1) for k in range(6)}
    arrays_a = dict(arrays_b)
    arrays_a["Functional.op.4.forward"] = X * 5 + 3.0  # its statistics fail (Max differs by 3)
    missing_a = {"Functional.op.1.forward", "Functional.op.4.forward"}  # A's file of op.1 and op.4 is not written
    c = compare(load_dump(write_tensor_side(tmp_path / "a", arrays_a, missing=missing_a)),
                load_dump(write_tensor_side(tmp_path / "b", arrays_b)))
    assert c.mode == "tensor"
    verdicts = {r.entry_name: r.verdict for r in c.units[0].rows}
    assert verdicts == {**{n: "pass" for n in arrays_b}, "Functional.op.1.forward": "warning",
                        "Functional.op.4.forward": "fail"}
    page = parse_html(render_html(c))
    table = not_comparable_rows(page)
    assert list(table) == [STATISTICS_ONLY_CLASS]
    entry = table[STATISTICS_ONLY_CLASS]
    assert entry["count"] == 2
    assert entry["names"] == ["Functional.op.1.forward.output.0", "Functional.op.4.forward.output.0"]
    assert all("Functional.op." in n and "compared statistics instead" in n for n in entry["notes"])
    assert entry["why"].startswith("tensor mode could not compare their values")
    section = page.text()
    assert "none: every row was matched" not in section
    md = render_markdown(c)
    lines = [x for x in md.splitlines() if x.startswith("- **Judged by their statistics only:**")]
    assert lines == ["- **Judged by their statistics only:** 2 of 6 compared rows (" + common.STATISTICS_ONLY_WHY["tensor"]
                     + "); first: Functional.op.1.forward.output.0 (step0/rank)"]


def test_md5_rows_without_a_checksum_are_listed_too():
    # op.1: no checksum on A; op.2: none on B (the reader makes a blank one None); the others carry one on both sides
    a = [fwd(f"Functional.op.{k}.forward", t(md5=f"{k:08x}" if k != 1 else None)) for k in range(4)]
    b = [fwd(f"Functional.op.{k}.forward", t(md5=f"{k:08x}" if k != 2 else None)) for k in range(4)]
    c = compare(unit(a), unit(b))
    assert c.mode == "md5"
    entry = not_comparable_rows(parse_html(render_html(c)))[STATISTICS_ONLY_CLASS]
    assert (entry["count"], entry["names"]) == (2, ["Functional.op.1.forward.output.0",
                                                    "Functional.op.2.forward.output.0"])
    assert entry["why"] == ("md5 mode could not compare their checksums: a checksum missing or blank on either side; "
                            "their statistics were compared instead")
    assert "- **Judged by their statistics only:** 2 of 4 compared rows" in render_markdown(c)


def test_statistics_mode_has_no_such_rows():
    a = [fwd(f"Functional.op.{k}.forward", t(mx=1.0 + k)) for k in range(3)]
    b = [fwd(f"Functional.op.{k}.forward", t()) for k in range(3)]
    c = compare(unit(a), unit(b))
    assert common.judged_by_statistics(c) == common.StatisticsOnly(0, (), "")
    html = render_html(c)
    assert "none: every row was matched" in html and not_comparable_rows(parse_html(html)) == {}
    assert "Judged by their statistics only" not in render_markdown(c)


# ------------------------------------------------------------------ matched rows with nothing to compare (skip)


def _null_entry(name):
    return Entry.forward(name, Seq(), Map(), Seq((None,)))


NO_STATS = {"mx": None, "mn": None, "mean": None, "norm": None}


def test_matched_rows_with_nothing_to_compare_are_listed_as_not_comparable():
    # statistics mode: one failing row, two entries null on both sides, one tensor without statistics on either side
    # (a data_name, so it is not a placeholder: not_captured)
    a = [fwd("Functional.ok.0.forward", t(mx=3.0)), _null_entry("Functional.null.0.forward"),
         _null_entry("Functional.null.1.forward"), fwd("Functional.bare.0.forward", t(**NO_STATS, data_name="x.npy"))]
    b = [fwd("Functional.ok.0.forward", t()), _null_entry("Functional.null.0.forward"),
         _null_entry("Functional.null.1.forward"), fwd("Functional.bare.0.forward", t(**NO_STATS, data_name="x.npy"))]
    c = compare(unit(a), unit(b))
    rows = {r.entry_name: r for r in c.units[0].rows}
    assert [(r.match_class, r.verdict) for r in rows.values()] == [("matched", "fail")] + [("matched", "skip")] * 3
    assert dict(c.verdict_counts)["skip"] == 3
    assert rows["Functional.null.0.forward"].reasons == ("null on both sides: nothing recorded",)
    assert rows["Functional.bare.0.forward"].reasons == ("no statistics recorded on either side",)

    found = common.matched_not_compared(c)
    assert found.total == 3 and found.why == common.NOTHING_COMPARED_WHY
    assert [r.entry_name for _, r in found.examples] == ["Functional.null.0.forward", "Functional.null.1.forward",
                                                         "Functional.bare.0.forward"]
    assert common.matched_not_compared(c, examples=1).examples == found.examples[:1]

    html = render_html(c)
    assert "none: every row was matched" not in html
    table = not_comparable_rows(parse_html(html))
    assert list(table) == [NOTHING_COMPARED_CLASS]
    entry = table[NOTHING_COMPARED_CLASS]
    assert entry["count"] == 3 and entry["why"] == common.NOTHING_COMPARED_WHY
    assert entry["names"] == ["Functional.null.0.forward.output.0", "Functional.null.1.forward.output.0",
                              "Functional.bare.0.forward.output.0"]
    assert entry["notes"] == ["(null on both sides: nothing recorded)", "(null on both sides: nothing recorded)",
                              "(no statistics recorded on either side)"]

    md = render_markdown(c)
    lines = [x for x in md.splitlines() if x.startswith("- **Matched, nothing to compare:**")]
    assert lines == [f"- **Matched, nothing to compare:** 3 row(s) ({common.NOTHING_COMPARED_WHY}); first: "
                     f"Functional.null.0.forward.output.0 ({markdown_text(c.units[0].unit_a.label)}): "
                     "null on both sides: nothing recorded"]


def test_tensor_mode_lists_both_kinds_apart(tmp_path):
    # op.1: A's file missing, statistics compared (judged by statistics only); op.2: A's file missing and neither side
    # recorded statistics (nothing compared: skip)
    def side(root, arrays, missing):
        w = DumpWriter(root / "step0" / "rank", DumpMeta("tensor", "L1", "mindspore"))
        for name, arr in arrays.items():
            data_name = f"{name}.output.0.npy"
            if name not in missing:
                w.save_tensor(data_name, arr.astype(np.float32))
            stats = NO_STATS if name == "Functional.op.2.forward" else _stats(arr.astype(np.float32))
            w.put(fwd(name, t(shape=arr.shape, data_name=data_name, **stats)))
        w.flush()
        return root

    arrays = {f"Functional.op.{k}.forward": X * (k + 1) for k in range(4)}
    missing = {"Functional.op.1.forward", "Functional.op.2.forward"}
    c = compare(load_dump(side(tmp_path / "a", arrays, missing)), load_dump(side(tmp_path / "b", arrays, set())))
    rows = {r.entry_name: r for r in c.units[0].rows}
    assert c.mode == "tensor"
    assert (rows["Functional.op.1.forward"].compared_by, rows["Functional.op.1.forward"].verdict) == (
        "statistics", "warning")
    assert (rows["Functional.op.2.forward"].compared_by, rows["Functional.op.2.forward"].verdict) == ("none", "skip")
    table = not_comparable_rows(parse_html(render_html(c)))
    assert list(table) == [STATISTICS_ONLY_CLASS, NOTHING_COMPARED_CLASS]
    assert (table[STATISTICS_ONLY_CLASS]["count"], table[STATISTICS_ONLY_CLASS]["names"]) == (
        1, ["Functional.op.1.forward.output.0"])
    assert (table[NOTHING_COMPARED_CLASS]["count"], table[NOTHING_COMPARED_CLASS]["names"]) == (
        1, ["Functional.op.2.forward.output.0"])
    skip_note = table[NOTHING_COMPARED_CLASS]["notes"][0]
    assert "no statistics recorded on either side" in skip_note and "compared statistics instead" in skip_note
    md = render_markdown(c)
    assert "- **Judged by their statistics only:** 1 of 3 compared rows" in md
    assert "- **Matched, nothing to compare:** 1 row(s)" in md


def test_no_line_when_every_matched_row_was_compared():
    c = compare(unit([fwd("Functional.op.0.forward", t(mx=2.0))]), unit([fwd("Functional.op.0.forward", t())]))
    assert common.matched_not_compared(c) == common.NothingCompared(0, (), "")
    assert "none: every row was matched" in render_html(c)
    assert "nothing to compare" not in render_markdown(c)


# ------------------------------------------------------------------ the noise factor only with a noise rerun


def thresholds_table(page: Node) -> dict[str, str]:
    """The "Thresholds in force" table: label -> value."""
    elements = list(page.elements())
    start = next(k for k, e in enumerate(elements) if e.tag == "h2" and e.text() == "Thresholds in force")
    table = next(e for e in elements[start:] if e.tag == "table")
    return {tr.child_elements("th")[0].text(): tr.child_elements("td")[0].text() for tr in table.find_all("tr")}


NOISE_LABEL = "--noise: failures within this many times the run-to-run noise are warnings"


@pytest.mark.parametrize("factor", [None, 3.0])
def test_the_noise_factor_is_shown_only_when_a_rerun_was_compared(factor):
    from msprobe_cmp.comparator import CompareOptions, Rules

    rules = Rules() if factor is None else Rules(noise_factor=factor)
    a = unit([fwd("Functional.op.0.forward", t(mx=3.0))])
    b = unit([fwd("Functional.op.0.forward", t())])
    rerun = unit([fwd("Functional.op.0.forward", t(mx=2.5))])  # noise: Max off by 1.5; A's 2 is within 2 x 1.5
    without = compare(a, b, CompareOptions(rules=rules))
    assert without.input_noise is None  # how the comparator says no rerun was compared
    plain = thresholds_table(parse_html(render_html(without)))
    assert NOISE_LABEL not in plain
    assert plain["relative-error floor"] == "eps of the coarser dtype"
    with_noise = compare(a, b, CompareOptions(rules=rules, noise=rerun))
    assert with_noise.input_noise == str(rerun.directory) == "mem"
    # the field alone decides, not the notes' wording
    assert NOISE_LABEL not in thresholds_table(parse_html(render_html(replace(with_noise, input_noise=None))))
    shown_without_notes = thresholds_table(parse_html(render_html(replace(with_noise, notes=()))))
    assert shown_without_notes[NOISE_LABEL] == ("2" if factor is None else "3")
    shown = thresholds_table(parse_html(render_html(with_noise)))
    assert shown[NOISE_LABEL] == ("2" if factor is None else "3")
    assert {k: v for k, v in shown.items() if k != NOISE_LABEL} == plain


# ------------------------------------------------------------------ long reasons are cut outside the row table


def test_cut_text():
    assert common.cut_text("x" * 500) == "x" * 500
    assert common.cut_text("x" * 501) == "x" * 500 + "…"
    assert common.cut_text("abcdef", 3) == "abc…"
    assert common.cut_text("") == ""


def test_a_huge_reason_is_cut_outside_the_row_table():
    dims = 50_000  # a shape of 50,000 dimensions of 1: "shape differs: A [1, 1, ...], B [...]" is 300 KB
    a = [fwd("Functional.big.0.forward", t(shape=(1,) * dims)), fwd("Functional.op.0.forward", t(mx=3.0))]
    b = [fwd("Functional.big.0.forward", t(shape=(2,) + (1,) * dims)), fwd("Functional.op.0.forward", t())]
    c = compare(unit(a), unit(b))
    big = c.units[0].rows[0]
    assert big.match_class == "shape_mismatch" and big.verdict == "fail"
    reason = "; ".join(big.reasons)
    assert len(reason) > 300_000
    html = render_html(c)
    hint = " (cut to 500 characters: the row's details hold the whole text)"
    cut = reason[:500] + "…"
    page = parse_html(html)
    # the largest disagreements (op's Max differs by 2, big's statistics are equal): big's reason cut
    listed = largest_rows(page)
    assert [r["name"] for r in listed] == ["Functional.op.0.forward.output.0", "Functional.big.0.forward.output.0"]
    assert listed[1]["why"] == [cut + hint]
    # "Not comparable": its example's reason cut
    assert not_comparable_rows(page)["shape_mismatch"]["notes"] == [f"({cut}{hint})"]
    # the first divergent / failing row: its reasons and both sides' summaries (the shape again) cut
    side_a = common.format_side(big.a)
    assert len(side_a) > 150_000
    highlights = [e for e in page.elements() if e.tag == "table" and "kv" in e.classes
                  and any(th.text() == "Reasons" for th in e.find_all("th"))]
    assert len(highlights) == 2  # first divergent and first failing: the same row
    for table in highlights:
        cells = {tr.child_elements("th")[0].text(): tr.child_elements("td")[0].text() for tr in table.find_all("tr")}
        assert cells["Reasons"] == cut + hint
        assert cells["A"] == side_a[:500] + "…" + hint
    # the whole reason is in the page once: in the rows' data (the row's details), nowhere else
    assert html.count(reason[:1000]) == 1
    script = html[html.index('<script type="application/json"'):]
    assert reason[:1000] in script
    assert len(html) < len(reason) + 2 * len(side_a) + 200_000  # the data block (reason and both shapes) and the rest


# ------------------------------------------------------------------ a NaN tensor recorded three times is listed once


def test_a_nan_tensor_recorded_three_times_takes_one_place():
    # linear's output holds a NaN on A (Max NaN, as a device max that skips nothing and a mean over finite values
    # would not: the statistics keep numbers besides the NaN); it is also the cell's output and relu's input.
    # Another NaN tensor of the same shape differs in its Mean; a third has A all NaN (recorded twice: never merged).
    nan_a, nan_b = t(mx=math.nan, mean=0.25), t(mean=0.25)
    other_a, other_b = t(mx=math.nan, mean=0.5), t(mean=0.5)
    all_nan = t(mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan)
    names_a = [("Functional.linear.0.forward", nan_a, nan_b), ("Cell.fc.Dense.forward.0", nan_a, nan_b),
               ("Functional.relu.0.forward", nan_a, nan_b), ("Functional.other.0.forward", other_a, other_b),
               ("Functional.gone.0.forward", all_nan, t()), ("Functional.gone.1.forward", all_nan, t()),
               ("Functional.finite.0.forward", t(mx=3.0), t())]
    c = compare(unit([fwd(n, la) for n, la, _ in names_a]), unit([fwd(n, lb) for n, _, lb in names_a]))
    assert {r.verdict for r in c.units[0].rows} == {"fail"}
    ranked = [(d.row.entry_name, [o.entry_name for o in d.also]) for d in common.rank_disagreements(c)]
    # the NaN disagreements first in execution order (equal keys: no finite statistic differs), then the finite one
    assert ranked == [("Functional.linear.0.forward", ["Cell.fc.Dense.forward.0", "Functional.relu.0.forward"]),
                      ("Functional.other.0.forward", []), ("Functional.gone.0.forward", []),
                      ("Functional.gone.1.forward", []), ("Functional.finite.0.forward", [])]
    # the same rows recorded with +Inf in place of NaN were merged before: now NaN and Inf agree
    rows = c.units[0].rows
    assert common.tensor_identity(rows[0]) == common.tensor_identity(rows[2]) is not None
    assert hash(common.tensor_identity(rows[0])) == hash(common.tensor_identity(rows[1]))
    assert common.tensor_identity(rows[0]) != common.tensor_identity(rows[3])
    assert common.tensor_identity(rows[4]) is None and common.tensor_identity(rows[5]) is None
    md = render_markdown(c)
    first = next(line for line in md.splitlines() if line.startswith("| Functional"))
    assert first.startswith("| Functional.linear.0.forward.output.0 (also recorded as Cell.fc.Dense.forward.0.output.0, "
                            "Functional.relu.0.forward.output.0) |")


def test_nan_in_another_place_or_a_side_all_nan_is_never_merged():
    base = {"mx": 1.0, "mn": -1.0, "mean": 0.0, "norm": 2.0}
    cases = {  # (A, B) of two rows that must stay apart
        "nan in max vs in min": ((t(**{**base, "mx": math.nan}), t()), (t(**{**base, "mn": math.nan}), t())),
        "A all NaN": ((t(**dict.fromkeys(base, math.nan)), t()),) * 2,
        "B all NaN": ((t(mx=3.0), t(**dict.fromkeys(base, math.nan))),) * 2,
    }
    for label, pairs in cases.items():
        entries = [(f"Functional.f.{k}.forward", la, lb) for k, (la, lb) in enumerate(pairs)]
        c = compare(unit([fwd(n, la) for n, la, _ in entries]), unit([fwd(n, lb) for n, _, lb in entries]))
        listed = common.rank_disagreements(c)
        assert [(d.row.entry_name, d.also) for d in listed] == [(n, ()) for n, _, _ in entries], label
