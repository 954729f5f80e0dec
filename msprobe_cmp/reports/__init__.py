"""Reports: render a finished Comparison as HTML, JSON or CSV text (no computing, no file writing)."""

from msprobe_cmp.reports.html import render_html
from msprobe_cmp.reports.tables import render_csv, render_json

__all__ = ["render_csv", "render_html", "render_json"]
