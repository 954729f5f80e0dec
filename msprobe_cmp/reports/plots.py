"""Inline SVG plots of a :class:`~msprobe_cmp.comparator.compare.Comparison`, drawn in Python.

Three plots, each a self-contained ``<svg>`` element (no script, no external resource):

- :func:`render_trace_svg`: 1 - Cosine (or the error) and the relative error along execution order (every unit's
  rows one after another), on log axes, failing rows in red and warnings in amber (in every plot), the likely origin
  and the first divergent row marked;
  the relative error is the localisation's (the ``relative_error`` column, what the likely origin is found by) with
  the rounding-noise floor each row is judged against shaded below it (the ``noise_floor`` column);
- :func:`render_scatter_svg`: relative error against the baseline's recorded L2 norm (log-log);
- :func:`render_histogram_svg`: the rows' error on a log axis, one bar per decade, with explicit
  bars for exact zeros and for non-finite values.

The plots only place the Comparison's numbers on a canvas: a value is mapped to a pixel, values
sharing a pixel column (trace) or a pixel cell (scatter) are drawn as one mark, and histogram bars
are as tall as the rows they hold.  No metric is derived (1 - Cosine is how Cosine is drawn, not a metric).  No two
labels meet: each has a line of its own or is left out where it would meet another (:func:`_fit`).  Every text
taken from a dump is escaped.
The rows are read a unit at a time into accumulators bounded by the canvas (:class:`_PlotData`: per pixel column
the values' extremes, per decade the counts, per scatter cell the counts), so memory does not grow with the number
of rows or units, and the marks are those of every row placed one by one.  Drawing is linear in the number of rows
and the output size is bounded by the canvas, not by the number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from markupsafe import Markup, escape

from msprobe_cmp.comparator.compare import Comparison
from msprobe_cmp.comparator.rowtable import FAIL, WARNING, RowTable
from msprobe_cmp.reports.common import ReportFacts, format_number, select_error_metric, select_relative_metric

WIDTH = 960
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 20, 26, 34
_BAND = 28  # height of the "0" / "NaN/inf" bands of a log axis: their labels a line (_LINE) from the nearest decade
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'
_COLOR_ALL = "#4a6fa5"
_COLOR_FAIL = "#cf222e"
_COLOR_WARN = "#bf8700"
_COLOR_MARK = "#0969da"
_COLOR_ORIGIN = "#bc4c00"
_COLOR_NOISE = "#e6eaef"
#: The trace panel of the localisation's relative error (the ``relative_error`` column, not a metric).
RELATIVE_ERROR = "relative error"
_LINE = 14  # a line of text: 11 px type and its leading
_CHAR = 6.6  # the widest a character of the 11 px type is taken to be, for keeping labels apart (a bound, not a fit)


def _extent(x: float, text: str, anchor: str) -> tuple[float, float]:
    """The horizontal span a label of ``text`` placed at ``x`` with ``anchor`` takes at most (:data:`_CHAR`)."""
    w = _CHAR * len(text)
    return (x, x + w) if anchor == "start" else (x - w, x) if anchor == "end" else (x - w / 2, x + w / 2)


def _fit(labels: Sequence[tuple[float, str, str]], keep: Sequence[int] = (), gap: float = 6.0) -> list[int]:
    """Which of ``labels`` (``(x, text, anchor)`` each, on one line) to draw so that no two meet: those in ``keep``
    first (the axis's bands), then the others from left to right, each when it clears every one kept by ``gap``
    pixels.  The indexes, in the order given."""
    spans: list[tuple[float, float]] = []
    chosen: list[int] = []
    order = [*keep, *sorted((k for k in range(len(labels)) if k not in keep), key=lambda k: labels[k][0])]
    for k in order:
        lo, hi = _extent(*labels[k])
        if all(hi + gap <= a or lo >= b + gap for a, b in spans):
            spans.append((lo, hi))
            chosen.append(k)
    return sorted(chosen)


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def _svg_open(svg_id: str, height: int, title: str) -> list[str]:
    return [
        f'<svg id="{svg_id}" class="plot" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>',
    ]


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{_fmt(x)}" y="{_fmt(y)}" text-anchor="{anchor}" {_FONT}{extra}>{escape(text)}</text>'


def _empty(svg_id: str, title: str, why: str) -> Markup:
    parts = _svg_open(svg_id, 60, title)
    parts.append(_text(WIDTH / 2, 34, f"{title}: {why}", "middle", ' fill="#57606a"'))
    parts.append("</svg>")
    return Markup("".join(parts))


def _decade_label(e: int) -> str:
    return f"1e{e}"


class _LogAxis:
    """A log10 axis over [lo, hi] decades with two extra bands: exact zeros below, non-finite above."""

    def __init__(self, values: Iterable[float], start: float, length: float, *, flip: bool,
                 band: float = _BAND) -> None:
        v = np.asarray(values if isinstance(values, (list, tuple)) else list(values), dtype=np.float64)
        positive = v[np.isfinite(v) & (v > 0)]
        if len(positive):
            lo = math.floor(math.log10(float(positive.min())))
            hi = math.ceil(math.log10(float(positive.max())))
        else:
            lo, hi = -6, 0
        if hi <= lo:
            hi = lo + 1
        self.lo, self.hi = lo, hi
        self.flip = flip  # True for a y axis (larger values drawn higher)
        self.start, self.length = start, length
        # the inner range leaves room for the two bands
        self.band = band
        self.inner_start = start + band
        self.inner_length = length - 2 * band

    def place(self, v: float) -> float:
        """Pixel coordinate of ``v`` (zero → the zero band, NaN/±Inf → the non-finite band)."""
        if not math.isfinite(v):
            frac = 1.0 + self.band / 2 / self.inner_length
        elif v <= 0:
            frac = -self.band / 2 / self.inner_length
        else:
            frac = (math.log10(v) - self.lo) / (self.hi - self.lo)
        px = frac * self.inner_length
        return self.inner_start + (self.inner_length - px if self.flip else px)

    def place_all(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        """:meth:`place` of every value (float64), computed with the same operations in the same order:
        ``math.log10`` for the logarithms, then IEEE arithmetic element by element."""
        v = np.array(values, dtype=np.float64)
        finite = np.isfinite(v)
        positive = finite & (v > 0)
        logs = np.zeros(len(v))
        logs[positive] = list(map(math.log10, v[positive].tolist()))
        frac = (logs - self.lo) / (self.hi - self.lo)
        frac[finite & ~positive] = -self.band / 2 / self.inner_length
        frac[~finite] = 1.0 + self.band / 2 / self.inner_length
        px = frac * self.inner_length
        return self.inner_start + (self.inner_length - px if self.flip else px)

    def place_decade(self, e: int) -> float:
        """Pixel coordinate of ``10**e``: :meth:`place` of ``10.0**e`` where that is a positive float, else the
        decade's own position ``(e - lo) / (hi - lo)`` (``10.0**e`` overflows for ``e > 308``, which an axis
        over values near the float64 maximum reaches, and is 0.0 for ``e < -323``)."""
        if -323 <= e <= 308:
            return self.place(10.0**e)
        px = (e - self.lo) / (self.hi - self.lo) * self.inner_length
        return self.inner_start + (self.inner_length - px if self.flip else px)

    def ticks(self, spacing: float = _LINE) -> list[tuple[float, str]]:
        """(pixel, label) of the decade ticks (at most 10, and at least ``spacing`` pixels apart: every ``step``-th
        decade) and of the two bands."""
        span = self.hi - self.lo
        step = max(1, math.ceil(span / 10), math.ceil(span * spacing / self.inner_length))
        out = [(self.place_decade(e), _decade_label(e)) for e in range(self.lo, self.hi + 1, step)]
        out.append((self.place(0.0), "0"))
        out.append((self.place(math.inf), "NaN/inf"))
        return out


def _y_axis(parts: list[str], ticks: Sequence[tuple[float, str]], left: float, right: float) -> None:
    for y, label in ticks:
        parts.append(f'<line x1="{_fmt(left - 4)}" y1="{_fmt(y)}" x2="{_fmt(right)}" y2="{_fmt(y)}" '
                     'stroke="#d8dee4" stroke-width="0.5"/>')
        parts.append(_text(left - 6, y + 4, label, "end"))


def _positions(comparison: Comparison) -> tuple[list[int], int]:
    """Start of each unit in the global execution order, and the total row count (from the units' lengths: a
    spooled unit is not read)."""
    offsets, total = [], 0
    for u in comparison.units:
        offsets.append(total)
        total += len(u.rows)
    return offsets, total


class _Extremes:
    """What placing values on an axis needs of them, per bucket (a pixel column, or one bucket for a whole axis),
    filled a batch of values at a time: the smallest and largest positive finite value, the smallest and largest
    finite value, whether a finite value <= 0 and whether a NaN / ±Inf was seen, and how many values.

    A log axis places every value <= 0 in one band and every non-finite one in another, and places positive values
    monotonically; a linear axis places finite values monotonically (clipped) and non-finite ones in a band.  So the
    lowest and highest pixel of a bucket's values are the pixels of these few representatives (:meth:`marks`),
    computed with the same operations: the marks are the same, bit for bit, as from every value.
    """

    def __init__(self, buckets: int) -> None:
        self.min_pos = np.full(buckets, np.inf)
        self.max_pos = np.full(buckets, -np.inf)
        self.min_fin = np.full(buckets, np.inf)
        self.max_fin = np.full(buckets, -np.inf)
        self.nonpos = np.zeros(buckets, dtype=bool)
        self.nonfinite = np.zeros(buckets, dtype=bool)
        self.count = 0

    def add(self, buckets: np.ndarray, values: np.ndarray) -> None:
        """Take ``values`` (float64 [m]) into the buckets ``buckets`` (int [m], one per value)."""
        self.count += len(values)
        if not len(values):
            return
        finite = np.isfinite(values)
        positive = finite & (values > 0)
        np.minimum.at(self.min_pos, buckets[positive], values[positive])
        np.maximum.at(self.max_pos, buckets[positive], values[positive])
        np.minimum.at(self.min_fin, buckets[finite], values[finite])
        np.maximum.at(self.max_fin, buckets[finite], values[finite])
        self.nonpos[buckets[finite & ~positive]] = True
        self.nonfinite[buckets[~finite]] = True

    def positive_range(self) -> list[float]:
        """The smallest and largest positive finite value over every bucket (``[]`` when none): what
        :class:`_LogAxis` derives its decades from."""
        lo, hi = float(self.min_pos.min()), float(self.max_pos.max())
        return [lo, hi] if lo <= hi else []

    def finite_range(self) -> list[float]:
        """The smallest and largest finite value over every bucket (``[]`` when none)."""
        lo, hi = float(self.min_fin.min()), float(self.max_fin.max())
        return [lo, hi] if lo <= hi else []

    def marks(self, log: bool, place_all: Callable[[np.ndarray], np.ndarray]) -> dict[int, tuple[float, float]]:
        """``{bucket: (lowest pixel, highest pixel)}`` of the buckets holding values, placed by ``place_all``
        (float64 [m] -> pixels [m]) on a log or linear axis."""
        if log:
            candidates = [(self.min_pos, self.min_pos <= self.max_pos), (self.max_pos, self.min_pos <= self.max_pos),
                          (np.zeros_like(self.min_pos), self.nonpos)]
        else:
            candidates = [(self.min_fin, self.min_fin <= self.max_fin), (self.max_fin, self.min_fin <= self.max_fin)]
        candidates.append((np.full_like(self.min_pos, np.inf), self.nonfinite))
        present = np.zeros(len(self.min_pos), dtype=bool)
        for _, there in candidates:
            present |= there
        where = np.flatnonzero(present)
        if not len(where):
            return {}
        lo = np.full(len(where), np.inf)
        hi = np.full(len(where), -np.inf)
        for values, there in candidates:
            pick = there[where]
            if pick.any():
                ys = place_all(values[where][pick])
                lo[pick] = np.minimum(lo[pick], ys)
                hi[pick] = np.maximum(hi[pick], ys)
        return dict(zip(where.tolist(), zip(lo.tolist(), hi.tolist(), strict=True), strict=True))


@dataclass
class _Panel:
    """One panel of the trace plot (a log axis): its metric, whether it is drawn as ``1 - value`` and its guides, and
    its rows' drawn values per pixel column (all rows, the warnings and the failing ones) and over the whole axis."""

    key: str
    one_minus: bool
    guides: list[tuple[float, str]]
    columns: _Extremes
    warning: _Extremes
    failing: _Extremes
    axis: _Extremes
    noise: _Extremes | None  # the relative-error panel: its rows' rounding-noise floors per pixel column

    @property
    def title(self) -> str:
        """The panel's title: its metric, or ``1 - <metric>``, on a log axis."""
        if self.key == RELATIVE_ERROR:
            return "Relative error (log axis); shaded: within rounding noise"
        return f"{'1 - ' if self.one_minus else ''}{self.key} (log axis)"


@dataclass
class _Histogram:
    """The histogram's counts by decade of the error (``floor(log10(v))`` of each positive finite value), of exact
    zeros (finite values <= 0) and of NaN / ±Inf: ``[all rows, failing rows, warnings]`` each; and the values'
    range."""

    decades: dict[int, list[int]]
    zeros: list[int]
    nonfinite: list[int]
    axis: _Extremes


@dataclass
class _PlotData:
    """What the three plots draw, gathered from the units one at a time (:func:`_plot_data`): bounded by the canvas
    (pixel columns, decades), not by the number of rows.  The scatter plot's cells need its axes first, so its
    counts are gathered in a second walk over the units (:func:`_scatter_cells`)."""

    offsets: list[int]
    total: int
    panels: list[_Panel]
    scatter_key: str
    scatter_x: _Extremes
    scatter_y: _Extremes
    histogram_key: str
    histogram: _Histogram
    scatter_cells: tuple[dict[tuple[int, int], int], ...] | None = None


def _trace_panels(comparison: Comparison) -> list[tuple[str, bool, list[tuple[float, str]]]]:
    """The trace plot's panels: (metric, whether it is drawn as ``1 - value``, guides), every one on a log axis.
    Cosine is drawn as 1 - Cosine: on a log axis 0.99999994 and 0.9996 are 4 decades apart, where a linear 0.9-1
    axis draws them on one line; a Cosine of 1 (or above, by rounding) goes to the band marked 0.  The last panel is
    the localisation's relative error (:data:`RELATIVE_ERROR`), not MaxRelativeErr: that one divides by each element
    of the baseline and reaches 1e5 on passing rows whose baseline holds values near zero."""
    t = comparison.rules.default
    panels: list[tuple[str, bool, list[tuple[float, str]]]] = []
    if comparison.mode == "tensor":
        panels.append(("Cosine", True, [
            (1.0 - t.cosine_fail_below, f"fail: Cosine < {format_number(t.cosine_fail_below)}"),
            (1.0 - t.cosine_suspect_below, f"Cosine < {format_number(t.cosine_suspect_below)}"),
        ]))
    else:
        key = select_error_metric(comparison)
        panels.append((key, False, [(t.max_abs_err_fail_above, f"fail > {format_number(t.max_abs_err_fail_above)}")]))
    panels.append((RELATIVE_ERROR, False, []))
    return panels


def _panel_values(table: RowTable, key: str) -> tuple[np.ndarray, np.ndarray]:
    """What a trace panel draws of one unit: (float64 [n] values, bool [n] defined): the ``relative_error`` column
    for :data:`RELATIVE_ERROR` (defined where measured), else the metric ``key``."""
    if key == RELATIVE_ERROR:
        return table.relative_error, ~np.isnan(table.relative_error)
    return table.metric_column(key)


def _scatter_points(table: RowTable, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scatter plot's points of one unit: B's recorded norm, the metric ``key`` and the verdict code of each row
    having both."""
    metric, defined = table.metric_column(key)
    b = table.side_columns(1)
    keep = np.flatnonzero(defined & b.stats_defined[:, 3])
    return b.stats[keep, 3], metric[keep], table.verdict[keep]


def _plot_data(comparison: Comparison, facts: ReportFacts | None = None) -> _PlotData:
    """:class:`_PlotData` of ``comparison``, its units read one at a time; kept in ``facts`` for the other plots."""
    if facts is not None and facts.comparison is comparison and isinstance(facts.plot_data, _PlotData):
        return facts.plot_data
    offsets, total = _positions(comparison)
    panels = [_Panel(key, one_minus, guides, _Extremes(WIDTH), _Extremes(WIDTH), _Extremes(WIDTH), _Extremes(1),
                     _Extremes(WIDTH) if key == RELATIVE_ERROR else None)
              for key, one_minus, guides in _trace_panels(comparison)]
    data = _PlotData(offsets, total, panels, select_relative_metric(comparison), _Extremes(1), _Extremes(1),
                     select_error_metric(comparison), _Histogram({}, [0, 0, 0], [0, 0, 0], _Extremes(1)))
    scale = (WIDTH - _LEFT - _RIGHT) / max(total, 1)
    hist = data.histogram
    for offset, u in zip(offsets, comparison.units, strict=True):
        t = u.rows
        n = len(t)
        if not n:
            continue
        failing = t.verdict == FAIL
        warning = t.verdict == WARNING
        # int(): truncation (all > 0), as each row's position times the scale
        xs = (_LEFT + np.arange(offset, offset + n, dtype=np.int64).astype(np.float64) * scale).astype(np.int64)
        for panel in panels:
            values, defined = _panel_values(t, panel.key)
            keep = np.flatnonzero(defined)
            v = 1.0 - values[keep] if panel.one_minus else values[keep]
            panel.columns.add(xs[keep], v)
            if panel.noise is not None:
                panel.noise.add(xs[keep], t.noise_floor[keep])
            bad, warn = failing[keep], warning[keep]
            panel.failing.add(xs[keep][bad], v[bad])
            panel.warning.add(xs[keep][warn], v[warn])
            panel.axis.add(np.zeros(len(v), dtype=np.int64), v)
        norms, values, _ = _scatter_points(t, data.scatter_key)
        data.scatter_x.add(np.zeros(len(norms), dtype=np.int64), norms)
        data.scatter_y.add(np.zeros(len(values), dtype=np.int64), values)
        values, defined = t.metric_column(data.histogram_key)
        keep = np.flatnonzero(defined)
        v, bad, warn = values[keep], failing[keep], warning[keep]
        hist.axis.add(np.zeros(len(v), dtype=np.int64), v)
        finite = np.isfinite(v)
        positive = finite & (v > 0)
        for mask, counts in ((finite & ~positive, hist.zeros), (~finite, hist.nonfinite)):
            counts[0] += int(mask.sum())
            counts[1] += int((mask & bad).sum())
            counts[2] += int((mask & warn).sum())
        decades = np.floor(list(map(math.log10, v[positive].tolist()))).astype(np.int64)  # math.floor(math.log10(v))
        for which, column in ((decades, 0), (decades[bad[positive]], 1), (decades[warn[positive]], 2)):
            found, counts = np.unique(which, return_counts=True)
            for d, c in zip(found.tolist(), counts.tolist(), strict=True):
                hist.decades.setdefault(d, [0, 0, 0])[column] += c
    if facts is not None and facts.comparison is comparison:
        facts.plot_data = data
    return data


def _scatter_axes(data: _PlotData, height: int) -> tuple[_LogAxis, _LogAxis]:
    """The scatter plot's x axis (B's norm) and y axis (the relative metric)."""
    return (_LogAxis(data.scatter_x.positive_range(), _LEFT, WIDTH - _LEFT - _RIGHT, flip=False, band=60),
            _LogAxis(data.scatter_y.positive_range(), _TOP, height - _TOP - _BOTTOM, flip=True))


#: The scatter plot's cell, in pixels: rows sharing one are drawn as one square.
_CELL = 5

#: The scatter plot's height, in pixels.
_SCATTER_HEIGHT = 320


def _scatter_cells(comparison: Comparison, data: _PlotData) -> tuple[dict[tuple[int, int], int], ...]:
    """``({cell: other rows}, {cell: warnings}, {cell: failing rows})`` of the scatter plot, its units read one at a
    time (a second walk: the cells need the axes, which need every unit's range)."""
    if data.scatter_cells is None:
        x_axis, y_axis = _scatter_axes(data, _SCATTER_HEIGHT)
        layers: tuple[dict[tuple[int, int], int], ...] = ({}, {}, {})
        for u in comparison.units:
            if not len(u.rows):
                continue
            norms, values, verdicts = _scatter_points(u.rows, data.scatter_key)
            bad, warn = verdicts == FAIL, verdicts == WARNING
            # int(place(...) // cell): numpy's float floor division follows Python's (fmod-based) definition
            cells_x = np.floor_divide(x_axis.place_all(norms), _CELL).astype(np.int64)
            cells_y = np.floor_divide(y_axis.place_all(values), _CELL).astype(np.int64)
            for layer, pick in zip(layers, (~bad & ~warn, warn, bad), strict=True):
                for cell, n in _cell_counts(cells_x[pick], cells_y[pick]).items():
                    layer[cell] = layer.get(cell, 0) + n
        data.scatter_cells = layers
    return data.scatter_cells


def _column_path(marks: dict[int, tuple[float, float]], least: float = 1.5) -> str:
    """One SVG path of vertical strokes, one per pixel column (min..max of the values in it), each at least ``least``
    pixels long (centred on its values)."""
    d = []
    for x, (y1, y2) in sorted(marks.items()):
        if y2 - y1 < least:
            middle = (y1 + y2) / 2
            y1, y2 = middle - least / 2, middle + least / 2
        d.append(f"M{x + 0.5:.1f} {y1:.1f}V{y2:.1f}")
    return "".join(d)


def _noise_band(parts: list[str], floors: _Extremes, axis: _LogAxis) -> None:
    """Shade the panel from its bottom (the band of exact zeros included) up to the rounding-noise floor (a flipped log
    axis): a row drawn inside the shade is within rounding noise.  A pixel column holding rows takes the smallest floor
    of its rows (rows of several dtypes share a column: a float64 row above its own floor is never drawn inside the
    shade); the columns between two such columns take the floor of the one before (a step line from the first measured
    column to the last).  Runs of columns with one floor pixel are one rectangle."""
    where = np.flatnonzero(floors.min_pos <= floors.max_pos)
    if not len(where):
        return
    ys = axis.place_all(floors.min_pos[where]).tolist()
    ends = [*where[1:].tolist(), int(where[-1]) + 1]  # each column's floor holds until the next measured column
    bottom = axis.start + axis.length  # through the band of exact zeros: no error is within noise too
    runs: list[list[float]] = []  # [first column, end column (exclusive), y]
    for x, end, y in zip(where.tolist(), ends, ys, strict=True):
        if runs and runs[-1][2] == y:
            runs[-1][1] = end
        else:
            runs.append([x, end, y])
    d = "".join(f"M{x0:.0f} {_fmt(y)}H{x1:.0f}V{_fmt(bottom)}H{x0:.0f}Z" for x0, x1, y in runs)
    parts.append(f'<path class="noise-band" d="{d}" fill="{_COLOR_NOISE}" stroke="none"/>')


def _trace_panel(parts: list[str], panel: _Panel, top: float, height: float) -> list[str]:
    """Draw ``panel`` (at least one row has its metric) at ``top``, ``height`` pixels tall: its log axis, guides and
    one vertical stroke per pixel column from its lowest to its highest value (warnings again in amber, failing rows
    in red).  A guide's label sits at the right end of its line, above it, unless it would meet another guide's: then
    below it.

    Returns what goes in front of the markers' lines (drawn after them): the warnings' and failing rows' strokes and
    the panel's title, on a white halo (a marker's line passes behind it, not through it)."""
    floors = panel.noise.positive_range() if panel.noise is not None else []
    axis = _LogAxis([*panel.axis.positive_range(), *floors, *(g for g, _ in panel.guides if g > 0)], top, height,
                    flip=True)
    if panel.noise is not None:
        _noise_band(parts, panel.noise, axis)
    _y_axis(parts, axis.ticks(), _LEFT, WIDTH - _RIGHT)
    taken: list[float] = []
    for g, label in sorted(panel.guides, reverse=True):
        y = axis.place(g)
        parts.append(f'<line x1="{_LEFT}" y1="{_fmt(y)}" x2="{WIDTH - _RIGHT}" y2="{_fmt(y)}" stroke="{_COLOR_FAIL}" '
                     'stroke-width="0.8" stroke-dasharray="4 3"/>')
        base = y - 3 if all(abs(y - 3 - t) > _LINE for t in taken) else y + _LINE
        taken.append(base)
        parts.append(_text(WIDTH - _RIGHT - 2, base, label, "end", f' fill="{_COLOR_FAIL}"'))
    front: list[str] = []
    layers = (panel.columns.marks(True, axis.place_all), panel.warning.marks(True, axis.place_all),
              panel.failing.marks(True, axis.place_all))
    for layer, color, width, least, into in zip(layers, (_COLOR_ALL, _COLOR_WARN, _COLOR_FAIL), (1, 3, 3),
                                                (1.5, 7.0, 7.0), (parts, front, front), strict=True):
        if layer:  # warnings and failing rows drawn again, larger, in front: visible over the guides and markers
            into.append(f'<path class="marks" d="{_column_path(layer, least)}" stroke="{color}" '
                        f'stroke-width="{width}" fill="none"/>')
    front.append(_text(_LEFT, top - 8, panel.title,
                       extra=' font-weight="600" paint-order="stroke" stroke="#fff" stroke-width="4" '
                             'stroke-linejoin="round"'))
    return front


def _marker(parts: list[str], x: float, lane: float, top: float, bottom: float, mark_id: str, color: str,
            label: str) -> None:
    """A vertical line at ``x`` from just above ``top`` to ``bottom`` and its label on the line ``lane`` above the
    panels (its own line: no other text is drawn there, no other marker's line crosses it): right of the line, or left
    of it when it does not fit there and the left has more room, cut to the room on its side."""
    parts.append(f'<line id="{mark_id}" x1="{_fmt(x)}" y1="{_fmt(top - 4)}" x2="{_fmt(x)}" y2="{_fmt(bottom)}" '
                 f'stroke="{color}" stroke-width="1.5" stroke-dasharray="5 3"><title>{escape(label)}</title></line>')
    right, left = WIDTH - 2 - (x + 4), (x - 4) - 2  # the room on each side of the line, in pixels
    anchor = "start" if _extent(x + 4, label, "start")[1] <= WIDTH - 2 or right >= left else "end"
    room = int((right if anchor == "start" else left) / _CHAR)
    if len(label) > room:
        label = label[:max(room - 3, 0)] + "..."
    parts.append(_text(x + (4 if anchor == "start" else -4), lane, label, anchor, f' fill="{color}"'))


def render_trace_svg(comparison: Comparison, facts: ReportFacts | None = None) -> Markup:
    """1 - Cosine (tensor mode; else the error, MaxAbsErr's statistics lower bound) and the relative error along
    execution order, one log-axis panel each.

    The x axis is the row position in execution order over all units (unit boundaries are drawn); failing rows are
    red, warnings amber; the likely origin is an orange vertical line and the first divergent row a blue one, each
    labelled on a line of its own above the panels.  Exact zeros are drawn in a band marked "0" and NaN/±Inf in a
    band marked "NaN/inf".  No two labels meet: the panels' titles, the markers' labels, the row numbers, the units'
    labels (those that fit) and the axis caption each have their place.
    ``facts`` (:class:`~msprobe_cmp.reports.common.ReportFacts`) shares the rows' metric columns between the plots.
    """
    title = "Metrics along execution order"
    offsets, total = _positions(comparison)
    if total == 0:
        return _empty("plot-trace", title, "no rows")
    panels = _plot_data(comparison, facts).panels
    lanes = (14.0, 14.0 + _LINE)  # the markers' labels: the likely origin, then the first divergent row
    panel_h, gap, top0 = 170, 40, 14 + 2 * _LINE + 22
    height = top0 + len(panels) * panel_h + (len(panels) - 1) * gap + _BOTTOM + _LINE
    parts = _svg_open("plot-trace", height, title)
    drawn = 0
    front: list[str] = []  # drawn last: over the markers' and the units' lines
    for k, panel in enumerate(panels):
        drawn += panel.axis.count
        top = top0 + k * (panel_h + gap)
        if not panel.axis.count:
            parts.append(_text(_LEFT, top + panel_h / 2, f"{panel.title}: no row has this metric",
                               extra=' fill="#57606a"'))
            continue
        front += _trace_panel(parts, panel, top, panel_h)
    bottom = top0 + len(panels) * panel_h + (len(panels) - 1) * gap
    scale = (WIDTH - _LEFT - _RIGHT) / max(total, 1)
    ticks = []
    for k in range(5):
        pos = round((total - 1) * k / 4) if total > 1 else 0
        ticks.append((_LEFT + pos * scale, str(pos), "middle"))
    for k in _fit(ticks):
        x, label, _ = ticks[k]
        parts.append(f'<line x1="{_fmt(x)}" y1="{bottom}" x2="{_fmt(x)}" y2="{bottom + 4}" stroke="#57606a"/>')
        parts.append(_text(x, bottom + 14, label, "middle"))
    if len(comparison.units) > 1:
        units = [(_LEFT + off * scale + 2, u.unit_a.label, "start") for off, u in zip(offsets, comparison.units,
                                                                                     strict=True)]
        for x, _, _ in units:
            parts.append(f'<line x1="{_fmt(x - 2)}" y1="{top0}" x2="{_fmt(x - 2)}" y2="{bottom}" stroke="#8c959f" '
                         'stroke-width="0.5"/>')
        for k in _fit(units):
            parts.append(_text(units[k][0], bottom + 14 + _LINE, units[k][1], extra=' fill="#57606a"'))
    parts.append(_text(WIDTH - _RIGHT, bottom + 14 + 2 * _LINE, "row, in execution order →", "end"))
    origin = comparison.likely_origin
    if origin is not None:
        x = _LEFT + (offsets[origin.ref.unit] + origin.ref.row) * scale + 0.5
        _marker(parts, x, lanes[0], top0, bottom, "likely-origin-mark", _COLOR_ORIGIN, f"likely origin: {origin.where}")
    ref = comparison.first_divergent
    if ref is not None:
        x = _LEFT + (offsets[ref.unit] + ref.row) * scale + 0.5
        _marker(parts, x, lanes[1], top0, bottom, "first-divergent-mark", _COLOR_MARK, f"first divergent: {ref.name}")
    parts += front
    parts.append("</svg>")
    if not drawn:
        return _empty("plot-trace", title, "no row has a metric to plot")
    return Markup("".join(parts))


def _cell_counts(cx: np.ndarray, cy: np.ndarray) -> dict[tuple[int, int], int]:
    """``{(cell x, cell y): number of points}``, sorted by cell."""
    if not len(cx):
        return {}
    x0, y0 = int(cx.min()), int(cy.min())
    height = int(cy.max()) - y0 + 1
    keys, counts = np.unique((cx - x0) * height + (cy - y0), return_counts=True)  # sorted by (x, y)
    return {(x0 + k // height, y0 + k % height): n for k, n in zip(keys.tolist(), counts.tolist(), strict=True)}


def render_scatter_svg(comparison: Comparison, facts: ReportFacts | None = None) -> Markup:
    """Each row's relative error (y) against the baseline's recorded L2 norm (x), both log axes.

    Rows sharing a 5-pixel cell are one square, darker the more rows it holds; failing rows are red, warnings amber.
    ``facts`` (:class:`~msprobe_cmp.reports.common.ReportFacts`) shares the rows' metric columns between the plots.
    """
    data = _plot_data(comparison, facts)
    key = data.scatter_key
    title = f"{key} against the baseline's L2 norm"
    if not data.scatter_x.count:
        return _empty("plot-scatter", title, f"no row has both {key} and a recorded baseline norm")
    height = _SCATTER_HEIGHT
    x_axis, y_axis = _scatter_axes(data, height)
    parts = _svg_open("plot-scatter", height, title)
    _y_axis(parts, y_axis.ticks(), _LEFT, WIDTH - _RIGHT)
    bottom = height - _BOTTOM
    ticks = x_axis.ticks(spacing=40)  # the decades, then the bands "0" and "NaN/inf"
    for x, _ in ticks:
        parts.append(f'<line x1="{_fmt(x)}" y1="{_TOP}" x2="{_fmt(x)}" y2="{bottom + 4}" stroke="#d8dee4" '
                     'stroke-width="0.5"/>')
    labels = [(x, label, "middle") for x, label in ticks]
    for k in _fit(labels, keep=(len(labels) - 2, len(labels) - 1)):
        parts.append(_text(labels[k][0], bottom + 16, labels[k][1], "middle"))
    cell = _CELL
    cells = _scatter_cells(comparison, data)
    most = max(n for layer in cells for n in layer.values())
    for layer, color in zip(cells, (_COLOR_ALL, _COLOR_WARN, _COLOR_FAIL), strict=True):
        for (cx, cy), n in sorted(layer.items()):
            opacity = 0.35 + 0.65 * math.log1p(n) / math.log1p(most)
            parts.append(f'<rect x="{cx * cell}" y="{cy * cell}" width="{cell}" height="{cell}" fill="{color}" '
                         f'fill-opacity="{opacity:.2f}"/>')
    parts.append(_text(_LEFT, _TOP - 8, f"{key} (log)", extra=' font-weight="600"'))
    parts.append(_text(WIDTH - _RIGHT, bottom + 30, "baseline (B) L2 norm, as recorded (log) →", "end"))
    parts.append("</svg>")
    return Markup("".join(parts))


def render_histogram_svg(comparison: Comparison, facts: ReportFacts | None = None) -> Markup:
    """How many rows have their error (MaxAbsErr, or its statistics lower bound) in each decade.

    Exact zeros get their own bar marked "0" and NaN/±Inf one marked "NaN/inf", so neither breaks the
    log axis; the failing rows of each bar are drawn in red from its foot, its warnings in amber above them; the
    MaxAbsErr thresholds are marked.
    ``facts`` (:class:`~msprobe_cmp.reports.common.ReportFacts`) shares the rows' metric columns between the plots.
    """
    data = _plot_data(comparison, facts)
    key = data.histogram_key
    title = f"Histogram of {key} (log axis)"
    hist = data.histogram
    if not hist.axis.count:
        return _empty("plot-histogram", title, f"no row has {key}")
    axis = _LogAxis(hist.axis.positive_range(), 0, 1, flip=False)
    # bins: "0", one per decade [1e(e), 1e(e+1)), "NaN/inf"
    labels = ["0", *(_decade_label(e) for e in range(axis.lo, axis.hi)), "NaN/inf"]
    totals = [hist.zeros[0], *([0] * (len(labels) - 2)), hist.nonfinite[0]]
    failing = [hist.zeros[1], *([0] * (len(labels) - 2)), hist.nonfinite[1]]
    warnings = [hist.zeros[2], *([0] * (len(labels) - 2)), hist.nonfinite[2]]
    for decade, (n, n_failing, n_warning) in hist.decades.items():
        b = 1 + min(max(decade - axis.lo, 0), axis.hi - axis.lo - 1)  # a decade beyond the axis: its end bar
        totals[b] += n
        failing[b] += n_failing
        warnings[b] += n_warning
    height = 260
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    bar_w = plot_w / len(labels)
    most = max(totals)
    parts = _svg_open("plot-histogram", height, title)
    bottom = height - _BOTTOM
    for k in range(5):
        tick = most * k / 4
        y = bottom - plot_h * k / 4
        parts.append(f'<line x1="{_LEFT - 4}" y1="{_fmt(y)}" x2="{WIDTH - _RIGHT}" y2="{_fmt(y)}" stroke="#d8dee4" '
                     'stroke-width="0.5"/>')
        parts.append(_text(_LEFT - 6, y + 4, f"{tick:.0f}" if most >= 4 or k in (0, 4) else "", "end"))
    marks: list[tuple[float, str, str]] = []  # the x axis's labels, drawn once they are known to fit
    for b, label in enumerate(labels):
        x = _LEFT + b * bar_w
        for count, color, cls, what in ((totals[b], _COLOR_ALL, "bar", "rows"),
                                        (failing[b] + warnings[b], _COLOR_WARN, "bar-warning",
                                         "failing rows and warnings"),
                                        (failing[b], _COLOR_FAIL, "bar-fail", "failing rows")):
            if not count or (cls == "bar-warning" and not warnings[b]):
                continue
            h = plot_h * count / most
            span = label if b in (0, len(labels) - 1) else f"[{label}, {_decade_label(axis.lo + b)})"
            parts.append(f'<rect class="{cls}" x="{_fmt(x + 1)}" y="{_fmt(bottom - h)}" width="{_fmt(bar_w - 2)}" '
                         f'height="{_fmt(h)}" fill="{color}"><title>{escape(key)} {escape(span)}: {count} '
                         f"{what}</title></rect>")
        if b in (0, len(labels) - 1):
            marks.append((x + bar_w / 2, label, "middle"))
        else:
            parts.append(f'<line x1="{_fmt(x)}" y1="{bottom}" x2="{_fmt(x)}" y2="{bottom + 4}" stroke="#57606a"/>')
            marks.append((x, label, "middle"))
            if b == len(labels) - 2:
                marks.append((x + bar_w, _decade_label(axis.hi), "middle"))
    for k in _fit(marks, keep=(0, len(marks) - 1)):
        parts.append(_text(marks[k][0], bottom + 14, marks[k][1], "middle"))
    # the thresholds' labels share the title's line, above the bars: each where it fits, else left out (the dashed
    # line stays, its value in its tooltip)
    heading: list[tuple[float, str, str]] = [(_LEFT, "rows", "start")]
    t = comparison.rules.default
    for threshold in (t.max_abs_err_suspect_above, t.max_abs_err_fail_above):
        if threshold > 0 and axis.lo <= math.log10(threshold) <= axis.hi:
            x = _LEFT + bar_w * (1 + math.log10(threshold) - axis.lo)
            label = f"MaxAbsErr {format_number(threshold)}"
            parts.append(f'<line x1="{_fmt(x)}" y1="{_TOP}" x2="{_fmt(x)}" y2="{bottom}" stroke="{_COLOR_FAIL}" '
                         f'stroke-dasharray="4 3"><title>{escape(label)}</title></line>')
            heading.append((x, label, "middle"))
    for k in _fit(heading, keep=(0,)):
        x, label, anchor = heading[k]
        parts.append(_text(x, _TOP - 8, label, anchor, ' font-weight="600"' if k == 0 else f' fill="{_COLOR_FAIL}"'))
    parts.append(_text(WIDTH - _RIGHT, bottom + 28, f"{key}, one bar per decade; a separate bar for exact zeros →",
                       "end"))
    parts.append("</svg>")
    return Markup("".join(parts))


__all__ = ["render_histogram_svg", "render_scatter_svg", "render_trace_svg"]
