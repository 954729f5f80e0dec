"""report.html in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium).

Without the browser these tests skip, except under CI (env var CI set), where they fail: .ci/run
installs the packages.  A screenshot of each report is saved under the test's tmp dir and copied to
``test-artifacts/`` at the repository root (git-ignored).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from msprobe_cmp.comparator import compare
from msprobe_cmp.comparator.rowtable import RowTable
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, load_dump
from msprobe_cmp.reports import render_html

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
EVIL = "Functional.<script>window.__pwned=1</script>.0.forward"
EVIL_IMG = 'Functional.<img src=x onerror="window.__pwned=2">.0.forward'


def _leaf(mx=1.0, mn=-1.0, mean=0.0, norm=2.0):
    return TensorLeaf("mindspore.Tensor", "Float32", (4, 8), max=mx, min=mn, mean=mean, norm=norm)


def _write_pair(root: Path, n: int, *, evil: bool) -> tuple[Path, Path]:
    """Two statistics dumps of ``n`` API entries (2 rows each) inside a few cells, with stacks."""
    sides = {}
    for side in ("a", "b"):
        w = DumpWriter(root / side / "step0" / "rank", DumpMeta("statistics", "mix", "mindspore"))
        cells = [f"Cell.block{k}.Dense.forward.0" for k in range(4)]
        for k, cell in enumerate(cells):
            w.put(Entry.forward(cell, Seq((_leaf(),)), Map(), Seq((_leaf(),))))
            w.set_parent(cell, "Cell.net.Net.forward.0" if k else None)
        for i in range(n):
            name = f"Functional.op{i % 7}.{i // 7}.forward"
            if evil and i == 3:
                name = EVIL
            if evil and i == 4:
                name = EVIL_IMG
            drift = (i % 11) * 0.05 if side == "a" else 0.0
            big = 3.0 if side == "a" and i % 97 == 5 else 0.0  # some rows fail
            out = _leaf(mx=1.0 + drift + big, mean=0.01 * (i % 5), norm=2.0 + drift)
            if i % 13 == 0:
                out = _leaf()  # identical: zero error
            w.put(Entry.forward(name, Seq((_leaf(norm=1.0 + i % 3),)), Map(), Seq((out,))))
            w.set_stack(name, [f"File train.py, line {10 + i % 5}, in step <&>", "File model.py, line 3, in construct"])
            w.set_parent(name, cells[i % len(cells)])
        if evil and side == "a":
            w.put(Entry.forward("Functional.extra.0.forward", Seq((_leaf(),)), Map(), Seq((_leaf(),))))
        w.flush()
        sides[side] = root / side
    return sides["a"], sides["b"]


def _open(driver, path: Path, timeout: float = 30.0) -> float:
    start = time.perf_counter()
    driver.get(path.as_uri())
    _wait(driver, lambda: driver.execute_script("return document.getElementById('shown').textContent") != "", timeout)
    return time.perf_counter() - start


def _wait(driver, cond, timeout: float = 10.0) -> float:
    start = time.perf_counter()
    while not cond():
        if time.perf_counter() - start > timeout:
            raise AssertionError("timed out waiting for the page")
        time.sleep(0.02)
    return time.perf_counter() - start


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _shown(driver) -> str:
    return driver.execute_script("return document.getElementById('shown').textContent")


def _visible_names(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows-body tr.row')).map(function (tr) {"
        " return tr.cells[1].textContent + '.' + tr.cells[2].textContent; });")


def _screenshot(driver, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    driver.save_screenshot(str(shot))
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / name)
    assert shot.stat().st_size > 10_000
    return shot



def _as_steps(small, steps: int):
    """The one-unit comparison ``small`` repeated as ``steps`` units, steps 0 .. steps-1, counts summed."""
    (unit,) = small.units
    units = tuple(
        replace(unit, unit_a=replace(unit.unit_a, step=k, label=f"step{k}/rank"),
                unit_b=replace(unit.unit_b, step=k, label=f"step{k}/rank"))
        for k in range(steps)
    )
    return replace(small, units=units, counts=tuple((k, steps * n) for k, n in small.counts),
                   verdict_counts=tuple((k, steps * n) for k, n in small.verdict_counts))


def test_report_in_chromium(driver, tmp_path):
    a, b = _write_pair(tmp_path / "dumps", 300, evil=True)
    c = compare(load_dump(a), load_dump(b))
    assert c.verdict == "fail"
    page = tmp_path / "report.html"
    page.write_text(render_html(c), encoding="utf-8")
    _open(driver, page)
    assert _errors(driver) == []
    total = sum(len(u.rows) for u in c.units)
    assert _shown(driver) == f"{total} of {total} rows shown"
    assert len(_visible_names(driver)) == 100  # one page of rows in the DOM

    # markup in entry names is text: nothing ran, nothing was inserted
    assert driver.execute_script("return window.__pwned === undefined")
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    q = driver.find_element("id", "q")
    q.send_keys("pwned")
    _wait(driver, lambda: _shown(driver).startswith("4 of"))
    entries = driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows-body tr.row')).map(function (tr) { return tr.cells[1].textContent; });")
    assert sorted(set(entries)) == sorted([EVIL, EVIL_IMG])
    assert driver.execute_script("return window.__pwned === undefined")
    q.clear()
    driver.execute_script("var q = document.getElementById('q'); q.value = ''; q.dispatchEvent(new Event('input'));")
    _wait(driver, lambda: _shown(driver).startswith(f"{total} of"))

    # sorting by a metric column changes the visible rows; again reverses it
    before = _visible_names(driver)
    header = driver.find_element("xpath", "//tr[@id='rows-head']/th[text()='Max diff']")
    col = int(header.get_attribute("data-col"))
    assert col < len(driver.find_elements("css selector", "#rows-head th")) - 1
    header.click()
    _wait(driver, lambda: _visible_names(driver) != before)
    ascending = _visible_names(driver)
    header.click()
    _wait(driver, lambda: _visible_names(driver) != ascending)
    values = driver.execute_script(
        "var c = arguments[0]; return Array.from(document.querySelectorAll('#rows-body tr.row'))"
        ".map(function (tr) { return tr.cells[c].textContent; });", col)
    numbers = [float(v) for v in values if v != "–"]
    assert numbers == sorted(numbers, reverse=True) and numbers[0] > 1.0

    # filters: verdict, class, direction
    driver.find_element("css selector", "input.vf[value='pass']").click()
    _wait(driver, lambda: not _shown(driver).startswith(f"{total} of"))
    verdicts = set(driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows-body tr.row td.verdict')).map(function (td) { return td.textContent; });"))
    assert verdicts and "pass" not in verdicts
    driver.find_element("id", "reset").click()
    _wait(driver, lambda: _shown(driver).startswith(f"{total} of"))
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "f-class")).select_by_visible_text("only_in_a")
    _wait(driver, lambda: _shown(driver).startswith("2 of"))
    assert all(n.startswith("Functional.extra.0.forward") for n in _visible_names(driver))
    driver.find_element("id", "reset").click()
    Select(driver.find_element("id", "f-family")).select_by_visible_text("Cell")
    _wait(driver, lambda: _shown(driver).startswith("8 of"))
    driver.find_element("id", "reset").click()
    _wait(driver, lambda: _shown(driver).startswith(f"{total} of"))

    # an entry expands to both sides' statistics, its metrics and its call stack
    driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows-body tr.row')).filter(function (tr) {"
        " return tr.cells[1].textContent.indexOf('Functional.op') === 0; })[0];").click()
    detail = driver.find_element("css selector", "#rows-body tr.detail")
    assert "A (target)" in detail.text and "B (baseline)" in detail.text and "Max diff" in detail.text
    assert "File train.py, line" in detail.text and "in step <&>" in detail.text

    # the first divergent link jumps to its row, expanded
    driver.find_element("css selector", "table.kv a.rowlink").click()
    ref = c.first_divergent
    _wait(driver, lambda: driver.execute_script(
        f"var tr = document.getElementById('row-{ref.unit}-{ref.row}'); return !!tr && tr.classList.contains('target');"))

    # plots drawn, with content; the cell tree expands
    for svg in ("plot-trace", "plot-scatter", "plot-histogram"):
        size = driver.execute_script(f"var r = document.getElementById('{svg}').getBoundingClientRect(); return [r.width, r.height];")
        assert size[0] > 300 and size[1] > 100, svg
    assert driver.execute_script("return document.querySelectorAll('#plot-histogram rect.bar').length") >= 2
    assert driver.execute_script("return !!document.getElementById('first-divergent-mark')")
    root_cell = driver.find_element("css selector", "#cell-tree details details > summary")
    assert "Cell.net.Net.forward.0" in root_cell.text
    root_cell.click()
    _wait(driver, lambda: driver.execute_script("return document.querySelectorAll('#cell-tree .leaf').length") == 4)  # block0 at the top, block1-3 inside net
    assert _errors(driver) == []
    driver.execute_script("window.scrollTo(0, 0)")
    _screenshot(driver, tmp_path, "report-small.png")


def test_100k_rows_stay_responsive(driver, tmp_path):
    # a real 10,000-row comparison of dumps written by DumpWriter, its unit repeated as ten steps
    a, b = _write_pair(tmp_path / "dumps", 4998, evil=False)
    small = compare(load_dump(a), load_dump(b))
    (unit,) = small.units
    assert len(unit.rows) == 10_004
    c = _as_steps(small, 10)
    total = sum(len(u.rows) for u in c.units)
    assert total == 100_040
    start = time.perf_counter()
    html = render_html(c, page_rows=total)  # one page holding every row (the default limit splits beyond 100,000)
    render_s = time.perf_counter() - start
    page = tmp_path / "report-100k.html"
    page.write_text(html, encoding="utf-8")
    size_mb = page.stat().st_size / 1e6
    assert render_s < 20, f"rendering took {render_s:.1f}s"
    assert size_mb < 40, f"{size_mb:.1f} MB"

    load_s = _open(driver, page, timeout=60)
    assert _shown(driver) == f"{total} of {total} rows shown"
    assert load_s < 15, f"page load took {load_s:.1f}s"
    assert _errors(driver) == []

    # text filter over 100k rows (typing is debounced by 120 ms)
    t0 = time.perf_counter()
    driver.execute_script("var q = document.getElementById('q'); q.value = 'op3.7'; q.dispatchEvent(new Event('input'));")
    _wait(driver, lambda: not _shown(driver).startswith(f"{total} of"))
    filter_s = time.perf_counter() - t0
    names = _visible_names(driver)
    assert names and all("op3.7" in n.lower() for n in names)

    driver.find_element("id", "reset").click()
    _wait(driver, lambda: _shown(driver).startswith(f"{total} of"))
    t0 = time.perf_counter()
    first = _visible_names(driver)
    header = driver.find_element("xpath", "//tr[@id='rows-head']/th[text()='L2norm diff']")
    header.click()
    header.click()  # descending: the largest differences first
    _wait(driver, lambda: _visible_names(driver) != first)
    sort_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    driver.find_element("css selector", "input.vf[value='pass']").click()
    _wait(driver, lambda: not _shown(driver).startswith(f"{total} of"))
    verdict_s = time.perf_counter() - t0
    assert max(filter_s, sort_s, verdict_s) < 3.0, (filter_s, sort_s, verdict_s)
    assert _errors(driver) == []
    driver.execute_script("window.scrollTo(0, 0)")
    _screenshot(driver, tmp_path, "report-100k.png")
    print(f"100k rows: render {render_s:.1f}s, {size_mb:.1f} MB, load {load_s:.1f}s, filter {filter_s:.2f}s, "
          f"sort {sort_s:.2f}s, verdict filter {verdict_s:.2f}s")


def test_split_report_and_a_units_page_in_chromium(driver, tmp_path, monkeypatch):
    """Beyond PAGE_ROWS rows report.html is an aggregate page without row data; its links open each unit's own page
    at the row, which links back."""
    import msprobe_cmp.reports.html as html
    from msprobe_cmp.cli import write_reports

    a, b = _write_pair(tmp_path / "dumps", 300, evil=True)
    small = compare(load_dump(a), load_dump(b))
    (unit,) = small.units
    c = _as_steps(small, 3)
    monkeypatch.setattr(html, "PAGE_ROWS", 2 * len(unit.rows))
    out = tmp_path / "out"
    write_reports(c, out)
    pages = ["step0_rank.html", "step1_rank.html", "step2_rank.html"]
    assert sorted(p.name for p in (out / "report_units").iterdir()) == pages

    driver.get((out / "report.html").as_uri())
    _wait(driver, lambda: driver.execute_script("return document.readyState") == "complete", 30)
    assert _errors(driver) == []
    assert driver.execute_script("return window.__pwned === undefined")
    assert driver.execute_script("return document.getElementById('rows') === null")  # no row table here
    assert driver.execute_script(
        "return Array.from(document.querySelectorAll('a.unit-page')).map(function (a) { return a.getAttribute('href'); })"
    ) == [f"report_units/{p}" for p in pages] * 2  # the pairing table and the list under "Entries"
    for svg in ("plot-trace", "plot-scatter", "plot-histogram"):
        size = driver.execute_script(f"var r = document.getElementById('{svg}').getBoundingClientRect(); return [r.width, r.height];")
        assert size[0] > 300 and size[1] > 100, svg
    assert driver.execute_script("return document.querySelectorAll('#largest a.rowlink').length") > 0
    _screenshot(driver, tmp_path, "report-split.png")

    # the first divergent row's link opens its unit's page at the row, expanded
    ref = c.first_divergent
    driver.find_element("css selector", "table.kv a.rowlink").click()
    _wait(driver, lambda: driver.current_url.endswith(f"/report_units/step{ref.unit}_rank.html#row-0-{ref.row}"), 30)
    _wait(driver, lambda: driver.execute_script(
        f"var tr = document.getElementById('row-0-{ref.row}'); return !!tr && tr.classList.contains('target');"), 30)
    n = len(unit.rows)
    assert _shown(driver) == f"{n} of {n} rows shown"
    assert driver.find_element("css selector", "#rows-body tr.detail").text.count("A (target)") == 1
    assert driver.execute_script("return window.__pwned === undefined")
    assert _errors(driver) == []
    _screenshot(driver, tmp_path, "report-unit-page.png")

    # back to the summary, then another unit's page from the pairing table
    driver.find_element("id", "back-link").click()
    _wait(driver, lambda: driver.current_url.endswith("/out/report.html"), 30)
    driver.find_element("css selector", "a.unit-page[href='report_units/step2_rank.html']").click()
    _wait(driver, lambda: driver.current_url.endswith("/report_units/step2_rank.html"), 30)
    _wait(driver, lambda: driver.execute_script(
        "var e = document.getElementById('shown'); return !!e && e.textContent !== '';"), 30)
    assert _shown(driver) == f"{n} of {n} rows shown"
    assert "Unit 3 of 3" in driver.find_element("id", "back").text
    assert _errors(driver) == []


def _write_tensor_pair(root: Path) -> tuple[Path, Path]:
    """Two tensor-mode dumps (ten metric columns in the tables) of long-named APIs; one tensor is recorded six times
    and one of A's tensor files is missing (judged by its statistics)."""
    import numpy as np

    x = np.linspace(-1.0, 1.0, 64)
    sides = {}
    for side in ("a", "b"):
        w = DumpWriter(root / side / "step0" / "rank", DumpMeta("tensor", "L1", "mindspore"))
        arrays = {f"Functional.a_rather_long_operator_name_of_layer_{k}_in_the_decoder_block.0.forward":
                  x * (1 + k) + (0.25 * k if side == "a" else 0.0) for k in range(6)}
        arrays |= {f"Functional.copy.{k}.forward": x[::-1] if side == "a" else x for k in range(6)}
        arrays["Functional.missing_file.0.forward"] = x + (0.5 if side == "a" else 0.0)
        for name, arr in arrays.items():
            arr = arr.astype(np.float32)
            data_name = f"{name}.output.0.npy"
            if not (side == "a" and name == "Functional.missing_file.0.forward"):
                w.save_tensor(data_name, arr)
            v = arr.astype(np.float64)
            leaf = TensorLeaf("mindspore.Tensor", "Float32", arr.shape, float(v.max()), float(v.min()), float(v.mean()),
                              float(np.linalg.norm(v)), data_name=data_name)
            w.put(Entry.forward(name, Seq(), Map(), Seq((leaf,))))
        w.flush()
        sides[side] = root / side
    return sides["a"], sides["b"]


_BOX = """
var t = document.getElementById('largest'), box = t.parentNode, r = box.getBoundingClientRect();
var heads = Array.from(t.rows[0].cells), last = heads[heads.length - 1].getBoundingClientRect();
return {table: t.getBoundingClientRect().width, left: r.left, right: r.right, client: box.clientWidth,
        scroll: box.scrollWidth, overflow: getComputedStyle(box).overflowX, window: window.innerWidth,
        last: heads[heads.length - 1].textContent, lastRight: last.right};
"""


def test_largest_disagreements_fit_the_window_or_scroll_in_their_own_box(driver, tmp_path):
    a, b = _write_tensor_pair(tmp_path / "dumps")
    c = compare(load_dump(a), load_dump(b))
    assert c.mode == "tensor"
    page = tmp_path / "largest.html"
    page.write_text(render_html(c), encoding="utf-8")
    _open(driver, page)
    assert _errors(driver) == []
    box = driver.execute_script(_BOX)
    assert box["window"] == 1400 and box["last"] == "L2norm diff"
    assert box["overflow"] == "auto" and box["right"] <= box["window"]
    assert box["table"] <= box["client"] + 0.5 and box["lastRight"] <= box["right"]  # these numbers fit: no scrolling

    # the other names behind "and 2 more" open in place, and the missing file's reason is shown under its name
    summary = driver.find_element("css selector", "#largest details.more summary")
    assert summary.text == "and 2 more"
    hidden = driver.find_elements("css selector", "#largest details.more a.rowlink")
    assert [h.get_attribute("textContent") for h in hidden] == [f"Functional.copy.{k}.forward.output.0" for k in (4, 5)]
    assert not any(h.is_displayed() for h in hidden)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", summary)
    summary.click()
    _wait(driver, lambda: all(h.is_displayed() for h in hidden))
    why = driver.execute_script(
        "return Array.from(document.querySelectorAll('#largest .why')).map(function (d) { return d.textContent; });")
    assert any("Functional.missing_file.0.forward.output.0.npy" in w and "compared statistics instead" in w for w in why)

    # the widest numbers (12 characters in each of the ten columns) and a long unit label: the table no longer
    # fits, and scrolls inside its box instead of widening the page
    unit = c.units[0]
    rows = RowTable.from_rows([
        r.replaced(metrics=tuple((k, -1.23456789e-05 if v is not None else None) for k, v in r.metrics))
        for r in unit.rows])
    wide = replace(c, units=(replace(unit, rows=rows, unit_a=replace(unit.unit_a, label="step1234/rank15")),))
    page = tmp_path / "largest-wide.html"
    page.write_text(render_html(wide), encoding="utf-8")
    _open(driver, page)
    box = driver.execute_script(_BOX)
    assert box["right"] <= box["window"] and box["scroll"] > box["client"]
    assert box["lastRight"] > box["right"]  # "L2norm diff" is out of view ...
    driver.execute_script("var box = document.getElementById('largest').parentNode; box.scrollLeft = box.scrollWidth;")
    box = driver.execute_script(_BOX)
    assert box["lastRight"] <= box["right"]  # ... until the box is scrolled
    assert _errors(driver) == []
    driver.execute_script("document.getElementById('largest').scrollIntoView()")
    _screenshot(driver, tmp_path, "report-largest.png")


def test_a_real_regression_shows_its_origin_above_the_fold(driver, tmp_path):
    """msprobe 1.2.2's own MindSpore dumps (one weight changed): at 1,400 x 900 the likely origin, the first failing
    row and the counts are on the first screen, the page does not scroll sideways, and each row's name, verdict and
    reason are in view without scrolling the table."""
    fixtures = ROOT / "tests" / "data" / "msprobe-1.2.2-mindspore"
    c = compare(load_dump(fixtures / "tensor_b"), load_dump(fixtures / "tensor_a"))
    assert c.likely_origin is not None
    page = tmp_path / "report-origin.html"
    page.write_text(render_html(c), encoding="utf-8")
    driver.set_window_size(1400, 900)
    try:
        _open(driver, page)
        assert _errors(driver) == []
        height, width, scroll_width = driver.execute_script(
            "return [window.innerHeight, window.innerWidth, document.documentElement.scrollWidth]")
        assert scroll_width <= width, (scroll_width, width)
        for block in ("likely-origin", "first-failing", "counts"):
            box = driver.execute_script(f"return document.getElementById('{block}').getBoundingClientRect().toJSON()")
            assert 0 <= box["top"] and box["bottom"] <= height, (block, box, height)
        origin = driver.find_element("css selector", "#likely-origin a.rowlink")
        assert origin.text == c.likely_origin.where
        assert c.likely_origin.evidence in driver.find_element("id", "origin-evidence").text
        # name, verdict and reason of a row inside the visible part of the rows' box
        right = driver.execute_script("return document.getElementById('rows-box').getBoundingClientRect().right")
        ends = driver.execute_script(
            "var tr = document.querySelector('#rows-body tr.row');"
            "return ['name', 'verdict', 'reason'].map(function (k) {"
            " return tr.querySelector('td.' + k).getBoundingClientRect().right; });")
        assert max(ends) <= right, (ends, right)
        driver.execute_script("window.scrollTo(0, 0)")
        _screenshot(driver, tmp_path, "report-origin-1400.png")
        origin.click()  # the origin's link opens its row
        ref = c.likely_origin.ref
        _wait(driver, lambda: driver.execute_script(
            f"var tr = document.getElementById('row-{ref.unit}-{ref.row}'); return !!tr && tr.classList.contains('target');"))
        # the address names the row, and Back returns to where the link was (the top of this page), not to the page
        # before it; so does the link to the origin in the cell tree
        assert driver.execute_script("return location.hash") == f"#row-{ref.unit}-{ref.row}"
        assert driver.execute_script("return window.scrollY") > 500
        driver.back()
        _wait(driver, lambda: driver.execute_script("return window.scrollY") == 0)
        assert driver.execute_script("return [location.pathname.split('/').pop(), location.hash]") == [page.name, ""]
        driver.find_element("id", "origin-in-tree").click()
        assert driver.execute_script("return location.hash") == "#cell-tree"
        assert driver.execute_script(
            "var r = document.querySelector('#cell-tree .origin-cell').getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight")
        driver.back()
        _wait(driver, lambda: driver.execute_script("return window.scrollY") == 0)
        assert driver.execute_script("return [location.pathname.split('/').pop(), location.hash]") == [page.name, ""]
        # at 800 px, the step / rank table scrolls in its own box: the page does not scroll sideways
        driver.set_window_size(800, 900)
        width, scroll_width = driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth]")
        assert scroll_width <= width, (scroll_width, width)
    finally:
        driver.set_window_size(1400, 1800)


_TEXT_BOXES = """
var boxes = [];
document.querySelectorAll('svg.plot').forEach(function (svg) {
  svg.querySelectorAll('text').forEach(function (t) {
    var r = t.getBoundingClientRect();
    boxes.push([svg.id + ': ' + t.textContent, r.left, r.top, r.right, r.bottom]);
  });
});
document.querySelectorAll('h1, h2').forEach(function (h) {
  var r = h.getBoundingClientRect();
  boxes.push(['heading: ' + h.textContent, r.left, r.top, r.right, r.bottom]);
});
return boxes;
"""


def _meeting(boxes: list) -> list[tuple[str, str]]:
    """The pairs of text boxes that share more than one square pixel."""
    out = []
    for k, (name, l1, t1, r1, b1) in enumerate(boxes):
        for other, l2, t2, r2, b2 in boxes[k + 1:]:
            if (min(r1, r2) - max(l1, l2)) * (min(b1, b2) - max(t1, t2)) > 1 and min(r1, r2) > max(l1, l2):
                out.append((name, other))
    return out


@pytest.mark.parametrize("pair", [("tensor_b", "tensor_a"), ("statistics_b", "statistics_a"),
                                  ("statistics_a", "torch_statistics_a")])
def test_no_two_labels_of_the_plots_meet_at_1400_or_800_px(driver, tmp_path, pair):
    """Every text of the three plots and every heading, as the browser lays them out: no two boxes meet, in a
    1,400 px and an 800 px window (msprobe 1.2.2's own dumps: a tensor pair with a likely origin, a statistics pair,
    MindSpore against PyTorch)."""
    fixtures = ROOT / "tests" / "data" / "msprobe-1.2.2-mindspore"
    c = compare(load_dump(fixtures / pair[0]), load_dump(fixtures / pair[1]))
    page = tmp_path / "report-plots.html"
    page.write_text(render_html(c), encoding="utf-8")
    try:
        for width in (1400, 800):
            driver.set_window_size(width, 1000)
            _open(driver, page)
            boxes = driver.execute_script(_TEXT_BOXES)
            assert sum(": " in b[0] and not b[0].startswith("heading") for b in boxes) > 20  # the plots' labels
            assert _meeting(boxes) == [], width
            if pair[0] == "tensor_b":
                driver.execute_script("document.getElementById('plots').scrollIntoView()")
                _screenshot(driver, tmp_path, f"report-plots-{width}.png")
    finally:
        driver.set_window_size(1400, 1800)


def _nested_pair(root: Path) -> tuple[Path, Path]:
    """Two statistics dumps of net > block{0,1,2} > 3 ops each, identical but for block 2's second op, whose output
    is 3x larger on A: the likely origin sits two levels down the cell tree."""
    sides = {}
    for side in ("a", "b"):
        w = DumpWriter(root / side / "step0" / "rank", DumpMeta("statistics", "mix", "mindspore"))
        w.put(Entry.forward("Cell.net.Net.forward.0", Seq((_leaf(),)), Map(), Seq((_leaf(),))))
        w.set_parent("Cell.net.Net.forward.0", None)
        for b in range(3):
            block = f"Cell.net.block{b}.Block.forward.0"
            w.put(Entry.forward(block, Seq((_leaf(),)), Map(), Seq((_leaf(),))))
            w.set_parent(block, "Cell.net.Net.forward.0")
            for k in range(3):
                name = f"Functional.op{k}.{b}.forward"
                scale = 3.0 if side == "a" and (b, k) == (2, 1) else 1.0
                w.put(Entry.forward(name, Seq((_leaf(),)), Map(), Seq((_leaf(mx=scale, norm=2.0 * scale),))))
                w.set_parent(name, block)
        w.flush()
        sides[side] = root / side
    return sides["a"], sides["b"]


def test_the_cell_tree_opens_the_way_to_the_origin_and_lists_a_cells_rows(driver, tmp_path):
    c = compare(*map(load_dump, _nested_pair(tmp_path / "dumps")))
    origin = c.likely_origin
    assert origin is not None and origin.where == "Cell.net.block2.Block.forward.0"
    page = tmp_path / "report-tree.html"
    page.write_text(render_html(c), encoding="utf-8")
    _open(driver, page)
    assert _errors(driver) == []
    marked = driver.find_elements("css selector", "#cell-tree .origin-cell")
    assert len(marked) == 1 and marked[0].is_displayed()  # Net opened on the way: block 2 is in view
    assert marked[0].find_element("css selector", ".cname").text == origin.where
    assert "likely origin" in marked[0].text
    marked[0].find_element("css selector", "a.cellrows").click()
    # block 2's rows: its own (input and output) and its three ops' (input and output each), failing ones first
    _wait(driver, lambda: _shown(driver).startswith("8 of"))
    names = _visible_names(driver)
    verdicts = driver.execute_script(
        "return Array.from(document.querySelectorAll('#rows-body tr.row td.verdict')).map(function (td) {"
        " return td.textContent; });")
    severity = {"fail": 3, "warning": 2, "pass": 1, "skip": 0}
    assert "fail" in verdicts and [severity[v] for v in verdicts] == sorted((severity[v] for v in verdicts),
                                                                             reverse=True)
    assert sorted(names) == sorted(
        [f"Cell.net.block2.Block.forward.0.{p}" for p in ("input.0", "output.0")]
        + [f"Functional.op{k}.2.forward.{p}" for k in range(3) for p in ("input.0", "output.0")])
    assert "inside Cell.net.block2.Block.forward.0" in _shown(driver)
    driver.find_element("id", "reset").click()
    _wait(driver, lambda: _shown(driver).startswith(f"{len(c.units[0].rows)} of"))


def _chain_pair(root: Path, parents: dict[str, str | None], differing: str) -> tuple[Path, Path]:
    """Two statistics dumps of the cells and ops of ``parents`` (entry -> parent cell, construct.json as given, cycles
    and all), identical but for the output of ``differing``, 3x larger on A."""
    sides = {}
    for side in ("a", "b"):
        w = DumpWriter(root / side / "step0" / "rank", DumpMeta("statistics", "mix", "mindspore"))
        for name, parent in parents.items():
            scale = 3.0 if side == "a" and name == differing else 1.0
            w.put(Entry.forward(name, Seq((_leaf(),)), Map(), Seq((_leaf(mx=scale, norm=2.0 * scale),))))
            w.set_parent(name, parent)
        w.flush()
        sides[side] = root / side
    return sides["a"], sides["b"]


@pytest.mark.parametrize("shape", ["cycle", "deep", "separator"])
def test_odd_cell_trees_load_and_filter_right(driver, tmp_path, shape):
    """construct.json with a cycle (Cell.x <-> Cell.y), the origin 100 cells deep (beyond what the page opens at
    load), or a cell name holding the chain separator " < ": the page loads without errors, and "its rows" of a cell
    lists exactly that cell's rows."""
    if shape == "cycle":
        parents = {"Cell.x.X.forward.0": "Cell.y.Y.forward.0", "Cell.y.Y.forward.0": "Cell.x.X.forward.0",
                   "Functional.op.0.forward": "Cell.x.X.forward.0"}
        differing, cell, inside = "Functional.op.0.forward", None, []
    elif shape == "deep":
        cells = [f"Cell.d{k}.D.forward.0" for k in range(100)]
        parents = {c: (cells[k - 1] if k else None) for k, c in enumerate(cells)}
        parents["Functional.op.0.forward"] = cells[-1]
        differing, cell, inside = "Functional.op.0.forward", cells[-1], [cells[-1], "Functional.op.0.forward"]
    else:
        odd = "Cell.z < Cell.a.A.forward.0 < q.Z.forward.0"
        parents = {"Cell.a.A.forward.0": None, odd: None, "Functional.inA.0.forward": "Cell.a.A.forward.0",
                   "Functional.inZ.0.forward": odd}
        differing, cell, inside = "Functional.inA.0.forward", "Cell.a.A.forward.0", ["Cell.a.A.forward.0",
                                                                                    "Functional.inA.0.forward"]
    c = compare(*map(load_dump, _chain_pair(tmp_path / "dumps", parents, differing)))
    page = tmp_path / f"report-{shape}.html"
    page.write_text(render_html(c), encoding="utf-8")
    took = _open(driver, page)
    assert took < 20 and _errors(driver) == []
    if cell is None:  # the cycle: each of its cells can be reached (the first one is listed at the top level)
        top = driver.execute_script(
            "return Array.from(document.querySelectorAll('#cell-tree > details > ul > li')).map(function (li) {"
            " return li.querySelector('.cname').textContent; })")
        assert top == [c.units[0].cells[0].cell] and top[0] in ("Cell.x.X.forward.0", "Cell.y.Y.forward.0")
        return
    if shape == "deep":  # beyond the depth opened at load: open the way by hand, to the last cell
        driver.execute_script("""
            var det = document.querySelector('#cell-tree details details');
            while (det) { det.build(); det.open = true; det = det.querySelector(':scope > ul > li > details'); }""")
        _wait(driver, lambda: driver.execute_script(
            "return Array.from(document.querySelectorAll('#cell-tree .cname')).some(function (e) {"
            f" return e.textContent === '{cell}'; }})"))
    link = driver.execute_script(
        "var name = arguments[0]; return Array.from(document.querySelectorAll('#cell-tree .cname')).filter("
        "function (e) { return e.textContent === name; })[0].parentNode.querySelector('a.cellrows');", cell)
    link.click()
    expected = sorted(f"{name}.{p}" for name in inside for p in ("input.0", "output.0"))
    _wait(driver, lambda: sorted(_visible_names(driver)) == expected)
