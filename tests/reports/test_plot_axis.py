"""The plots' log axis over values near the float64 limits: decade ticks beyond float range are placed at their
decade (they raised OverflowError before, so the command ended with an internal error and no report)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe_cmp.reports import plots


@pytest.mark.parametrize("flip", [False, True])
def test_decade_ticks_beyond_float_range(flip: bool) -> None:
    # values 1e299 .. 1.5e308: decades lo = 299, hi = ceil(log10(1.5e308)) = 309 (one tick per decade), and
    # 10.0**309 overflows
    axis = plots._LogAxis([1e299, 1.5e308], 0.0, 334.0, flip=flip, band=2.0)
    assert (axis.lo, axis.hi) == (299, 309)
    ticks = axis.ticks()
    assert [label for _, label in ticks] == [f"1e{e}" for e in range(299, 310)] + ["0", "NaN/inf"]
    # by hand: inner range [2, 332] (330 px); decade 309 is the top end of the inner range (frac 1.0),
    # i.e. pixel 332 along the axis, 2 when the axis is flipped
    top = dict((label, px) for px, label in ticks)["1e309"]
    assert top == (2.0 if flip else 332.0)


def test_decade_ticks_inside_float_range_unchanged() -> None:
    # a decade 10**e that is a positive float is still placed through place(10.0**e)
    axis = plots._LogAxis([1e-3, 1e3], 10.0, 200.0, flip=False)
    for px, label in axis.ticks()[:-2]:
        e = int(label[2:])
        assert px == axis.place(10.0**e)


def test_decade_below_float_range_is_placed_at_its_decade() -> None:
    # 5e-324 (the smallest subnormal): lo = floor(log10(5e-324)) = -324, and 10.0**-324 is 0.0, which place()
    # puts in the zero band (pixel 2 - 1 = 1 here); the tick is placed at its decade, the bottom end of the inner
    # range (pixel 2) instead
    axis = plots._LogAxis([5e-324, 1e-318], 0.0, 334.0, flip=False, band=2.0)
    assert (axis.lo, axis.hi) == (-324, -318)
    assert dict((label, px) for px, label in axis.ticks())["1e-324"] == 2.0


def test_fit_keeps_the_bands_then_the_labels_that_clear_the_ones_kept():
    from msprobe_cmp.reports.plots import _CHAR, _fit

    w = _CHAR * 3  # a three-character label
    labels = [(100.0, "abc", "middle"), (100.0 + w + 5, "def", "middle"),  # 5 px apart: too close (gap 6)
              (100.0 + w + 7, "ghi", "middle"), (0.0, "0", "start"), (400.0, "NaN", "end")]
    # kept first: the bands (3 and 4); then from the left: abc, not def (5 px from abc), ghi (7 px from abc)
    assert _fit(labels, keep=(3, 4)) == [0, 2, 3, 4]
    # a band kept first wins over a label it meets
    assert _fit([(10.0, "long label", "start"), (12.0, "0", "start")], keep=(1,)) == [1]


def test_cosine_is_drawn_as_one_minus_cosine_on_a_log_axis():
    from msprobe_cmp.comparator.rules import Rules
    from msprobe_cmp.reports.plots import RELATIVE_ERROR, _trace_panels

    class _C:  # what _trace_panels reads of a comparison
        mode = "tensor"
        rules = Rules()

    (key, one_minus, guides), (relative, rel_one_minus, _) = _trace_panels(_C())  # type: ignore[arg-type]
    assert (key, one_minus, relative, rel_one_minus) == ("Cosine", True, RELATIVE_ERROR, False)
    assert [g for g, _ in guides] == [1.0 - 0.9, 1.0 - 0.99]
    # 0.99999994 and 0.9996 as drawn: 4 decades apart (a linear 0.9-1 axis put them on one line)
    assert math.floor(math.log10(1.0 - 0.99999994)) == -8 and math.floor(math.log10(1.0 - 0.9996)) == -4


def test_the_relative_error_panel_shades_the_rounding_noise_floor_of_its_rows():
    """The band's top is where the rows' floor (16 ulps of float32: same framework) sits on the panel's log axis,
    read off the panel's own decade labels; it spans the measured rows' columns."""
    import re
    from pathlib import Path

    from msprobe_cmp.comparator import compare
    from msprobe_cmp.dump import load_dump
    from msprobe_cmp.reports.plots import render_trace_svg

    fixtures = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
    c = compare(load_dump(fixtures / "tensor_b"), load_dump(fixtures / "tensor_a"))
    floors = np.concatenate([u.rows.noise_floor[~np.isnan(u.rows.noise_floor)] for u in c.units])
    assert set(floors.tolist()) == {16 * 2.0**-23}
    svg = str(render_trace_svg(c))
    assert "Relative error (log axis); shaded: within rounding noise" in svg
    title_y = float(re.search(r'y="([\d.]+)"[^>]*>Relative error \(log axis\)', svg).group(1))
    (band,) = re.findall(r'class="noise-band" d="([^"]*)"', svg)
    (x0, top, x1, bottom, _), = re.findall(r"M([\d.]+) ([\d.]+)H([\d.]+)V([\d.]+)H([\d.]+)Z", band)
    # the decade labels of this panel (below its title): y + 4 is the tick's pixel
    ticks = {int(e): float(y) - 4 for y, e in re.findall(r'<text x="72.0" y="([\d.]+)"[^>]*>1e(-?\d+)</text>', svg)
             if float(y) > title_y}
    (lo, y_lo), (hi, y_hi) = min(ticks.items()), max(ticks.items())
    want = y_lo + (math.log10(16 * 2.0**-23) - lo) / (hi - lo) * (y_hi - y_lo)
    assert abs(float(top) - want) < 0.15
    (zero,) = [float(y) - 4 for y in re.findall(r'<text x="72.0" y="([\d.]+)"[^>]*>0</text>', svg) if float(y) > title_y]
    assert float(bottom) > zero > y_lo  # through the band of exact zeros, below the lowest decade
    assert float(x0) == 78 and float(x1) > 900  # the first measured row's column to past the last one's


def test_warnings_are_amber_in_every_plot():
    """msprobe's own pair has warnings and no failure: each plot draws the warnings in amber, as many as there are
    (the histogram's amber bars add up to the warnings that have the error metric), and nothing in red."""
    import re
    from pathlib import Path

    from msprobe_cmp.comparator import compare
    from msprobe_cmp.dump import load_dump
    from msprobe_cmp.reports.plots import render_histogram_svg, render_scatter_svg, render_trace_svg

    fixtures = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
    c = compare(load_dump(fixtures / "tensor_b"), load_dump(fixtures / "tensor_a"))
    warnings = [r for u in c.units for r in u.rows if r.verdict == "warning"]
    assert len(warnings) == 2 and dict(c.verdict_counts)["fail"] == 0
    trace, scatter, hist = (str(render(c)) for render in (render_trace_svg, render_scatter_svg, render_histogram_svg))
    assert 'stroke="#bf8700" stroke-width="3"' in trace and 'stroke="#cf222e" stroke-width="3"' not in trace
    assert 'fill="#bf8700"' in scatter and '<rect x' in scatter
    counted = sum(int(n) for n in re.findall(r'class="bar-warning"[^>]*><title>[^<]*: (\d+) failing rows and warnings',
                                               hist))
    assert counted == sum(1 for r in warnings if r.metric("MaxAbsErr") is not None)
    assert 'class="bar-fail"' not in hist
