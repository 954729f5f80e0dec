"""Reports: render a finished Comparison as HTML, JSON, CSV, JUnit XML or Markdown text (no computing, no
file handling: the large reports are also given in pieces, a bounded chunk of rows at a time, or written to a binary
stream the caller opened)."""

from msprobe_cmp.reports.html import render_html
from msprobe_cmp.reports.paths import relative_paths
from msprobe_cmp.reports.tables import load_json_schema, render_csv, render_json, render_junit, render_markdown

__all__ = [
    "load_json_schema", "relative_paths", "render_csv", "render_html", "render_json", "render_junit", "render_markdown",
]
