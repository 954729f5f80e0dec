"""The ``msprobe-cmp`` command: compare two dumps into reports, render a saved comparison again, or run the demo.

Usage::

    msprobe-cmp TARGET BASELINE [-o OUT] [--force]        (also: msprobe-cmp compare TARGET BASELINE ...)
    msprobe-cmp render RESULT -o OUT [--force]
    msprobe-cmp demo [-o OUT] [--steps N] [--force]

A compare writes the five reports and the saved comparison (:data:`~msprobe_cmp.comparator.saved.SAVED_FILE`,
``comparison-data.npz``) into OUT; ``render`` loads that file (RESULT: the file or the directory holding it) and
writes every report again with the same writer (:func:`write_reports`), byte for byte, without the dumps.  The
first word ``render`` (like ``demo``) is always the sub-command: a dump directory of that name is given as
``./render`` or after ``compare``.

``main(argv) -> int`` is the whole command (docs/design.md §4): user errors
(:class:`~msprobe_cmp.errors.MsprobeCmpError`, bad options) are one line on stderr and exit 2;
any other exception is a bug and keeps its traceback.  Exit codes (docs/design.md §2): 0 no
regression, 1 regression found, 2 unusable input or usage error, 3 nothing comparable; 4 is a
bug in msprobe-cmp (traceback shown), never a verdict.
"""

from __future__ import annotations

import argparse
import errno
import os
import queue
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np

from msprobe_cmp import __version__
from msprobe_cmp.comparator import CompareOptions, Comparison, compare
from msprobe_cmp.comparator.compare import pair_units, unit_namespaces
from msprobe_cmp.comparator.mapping import (
    ApiMappingRecord,
    NameMapping,
    load_api_mapping,
    load_cell_mapping,
    mapping_file_pairs,
    render_cell_mapping,
)
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.comparator.rules_file import load_rules
from msprobe_cmp.comparator.saved import SAVED_FILE, load_comparison, saved_file, write_saved
from msprobe_cmp.dump.reader import (
    Dump,
    load_dump,
    paused_gc,
    register_tensor_loader,
    scan_dump,
    tensor_loader_for,
    unregister_tensor_loader,
)
from msprobe_cmp.dump.writer import create_temp, write_bytes_atomic
from msprobe_cmp.errors import ConfigError, DumpFormatError, MissingFrameworkError, MsprobeCmpError
from msprobe_cmp.forked import Forked, Tell, can_fork, interrupts_held, raise_interrupt
from msprobe_cmp.reports import relative_paths, render_markdown
from msprobe_cmp.reports.common import ReportFacts, arguments_line, judged_by_statistics, origin_line
from msprobe_cmp.reports.html import UNIT_PAGES_DIR, html_pages
from msprobe_cmp.reports.tables import csv_chunks, json_chunks, junit_chunks

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_COMPARED = 3
EXIT_INTERNAL_ERROR = 4

REPORT_FILES = ("report.html", "comparison.json", "comparison.csv", "junit.xml", "summary.md")
#: Every file a compare writes into its output directory: the reports and the saved comparison (``render`` reads it).
OUTPUT_FILES = (*REPORT_FILES, SAVED_FILE)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors become one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{message} (see '{self.prog} --help')")


def _compare_parser() -> _Parser:
    p = _Parser(
        prog="msprobe-cmp",
        usage="msprobe-cmp [-h] [--version] TARGET BASELINE [-o OUT] [--force] [--rules FILE] "
        "[--min-matched-share X]\n"
        "       [--noise RERUN] [--cell-mapping FILE] [--api-mapping FILE] [--write-mapping FILE] [--jobs N]\n"
        "       [--scheduler ADDRESS] [--absolute-paths]\n"
        "       msprobe-cmp render [-h] RESULT -o OUT [--force]\n"
        "       msprobe-cmp demo [-h] [-o OUT] [--steps N] [--force]",
        description="Compare two msprobe dumps (TARGET against BASELINE) and write HTML/JSON/CSV reports. "
        "Run 'msprobe-cmp demo' for a worked example: a PyTorch model, its MindSpore port and a buggy port; "
        "'msprobe-cmp render RESULT -o OUT' writes the reports of a saved comparison (comparison-data.npz) again "
        "without the dumps.",
        epilog="A debug-level recording (debug.json, written by save()) is read wherever a dump.json would be "
        "(the file itself, or a rank directory holding no dump.json); its variables are compared as "
        "<name>.<n>.tensor rows. "
        "Exit codes: 0 no regression, 1 regression found, 2 unusable input or usage error, "
        "3 nothing comparable, 4 internal error (a bug).",
    )
    p.add_argument("target", metavar="TARGET", type=Path,
                   help="dump root, step<N> dir, rank dir (rank, rank<R>), dump.json or debug.json to check")
    p.add_argument("baseline", metavar="BASELINE", type=Path,
                   help="the reference dump (msprobe's 'bench'); same forms as TARGET")
    p.add_argument("-o", "--output", type=Path, default=Path("msprobe-cmp-report"), metavar="OUT",
                   help="directory for report.html, comparison.json, comparison.csv, junit.xml, summary.md and "
                   f"{SAVED_FILE} (the saved comparison 'msprobe-cmp render' reads) (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="overwrite existing report files in the output directory")
    p.add_argument("--rules", type=Path, metavar="FILE",
                   help="verdict thresholds, per-pattern/per-dtype overrides and the matched-share floor "
                   "(.toml or .yaml; see docs/compare.md)")
    p.add_argument("--min-matched-share", type=float, metavar="X",
                   help="below this share of matched rows the verdict is too_few_matched (exit 3) unless a row "
                   "fails; overrides the rules file; default 0.5")
    p.add_argument("--noise", type=Path, metavar="RERUN",
                   help="a rerun of BASELINE (same code, same data): failures within the run-to-run noise it "
                   "shows (x noise_factor, default 2) become warnings")
    p.add_argument("-cm", "--cell-mapping", type=Path, metavar="FILE",
                   help="MindSpore cell -> PyTorch module names ('blocks.0.Dense: blocks.0.Linear', msprobe's "
                   "format); used when the two dumps are different frameworks, before the built-in class table")
    p.add_argument("-am", "--api-mapping", type=Path, metavar="FILE",
                   help="MindSpore -> PyTorch API records (ms_api/pt_api, ms_args/pt_args, ms_output/pt_output; "
                   "msprobe's format); used across frameworks before the built-in API table")
    p.add_argument("--write-mapping", type=Path, metavar="FILE",
                   help="write the MindSpore cell -> PyTorch module pairs used (inferred from classes, parameter "
                   "shapes and call order where paths or classes differ, plus --cell-mapping's) as a cell-mapping "
                   "file to edit and pass back with --cell-mapping (not overwritten unless --force)")
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="compare N (step, rank) unit pairs at once in worker processes; the result is the serial "
                   "one (default: %(default)s)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="compare the unit pairs on a Dask distributed cluster (tcp://host:8786; needs "
                   "pip install 'msprobe-cmp[dask]'); its workers must see the dumps under the same paths")
    p.add_argument("--absolute-paths", action="store_true",
                   help="show the inputs by their absolute, resolved paths in the reports (by default a dump "
                   "given as an absolute path is shown from its dump root's last component on, "
                   "/runs/fp16/step0/rank -> fp16/step0/rank, a relative one as typed)")
    p.add_argument("--version", action="version", version=f"msprobe-cmp {__version__}")
    return p


def _demo_parser() -> _Parser:
    p = _Parser(
        prog="msprobe-cmp demo",
        description="A port, checked: train a small digits classifier written in PyTorch, its correct MindSpore "
        "port and the port with one porting bug (a BatchNorm momentum left in PyTorch's convention), record the "
        "three runs (level mix, task tensor) and compare each port against the PyTorch run: the correct port "
        "passes, the buggy one fails with its likely origin at the changed cell.  Exit 0 when both verdicts come "
        "out so.",
    )
    p.add_argument("-o", "--output", type=Path, default=Path("msprobe-cmp-demo"), metavar="OUT",
                   help="directory for the three dumps (OUT/dumps) and the two comparisons' reports (OUT/correct, "
                   "OUT/bug) (default: %(default)s)")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="training steps to record (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="replace an earlier demo in the output directory")
    return p


def _render_parser() -> _Parser:
    p = _Parser(
        prog="msprobe-cmp render",
        description=f"Write the reports of a saved comparison again, without the dumps: RESULT is the {SAVED_FILE} "
        "a compare wrote into its output directory, or that directory. The reports are the compare's, byte for "
        "byte.",
        epilog="Exit codes: the compare's verdict (0 no regression, 1 regression found, 3 nothing comparable); "
        "2 unusable RESULT or usage error.",
    )
    p.add_argument("result", metavar="RESULT", type=Path,
                   help=f"the saved comparison ({SAVED_FILE}) or the output directory of a compare holding it")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                   help=f"directory for the reports and a copy of {SAVED_FILE}; not RESULT's own directory")
    p.add_argument("--force", action="store_true", help="overwrite existing report files in the output directory")
    return p


def _check_outputs(out: Path, force: bool, names: Sequence[str] = (*OUTPUT_FILES, UNIT_PAGES_DIR),
                   dirs: Sequence[str] = (UNIT_PAGES_DIR,)) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out}: exists and is not a directory")
    for name in names:
        target = out / name
        if os.path.lexists(target):  # lexists: a dangling symlink counts too
            if not force:
                raise ConfigError(f"--output {out}: {name} already exists; pass --force to overwrite it")
            if target.is_dir() and name not in dirs:
                raise ConfigError(f"--output {out}: {name} is a directory; remove it or choose another --output")


def _say(text: str, stream: TextIO | None = None) -> None:
    """Print ``text`` to ``stream`` (default stdout) and flush; a reader that went away (``| head``) is not an
    error: the rest of the output is dropped and the exit code stays the verdict's."""
    out = sys.stdout if stream is None else stream
    try:
        print(text, file=out, flush=True)
    except BrokenPipeError:
        try:  # later writes and the interpreter's final flush go nowhere instead of failing again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


#: The longest error or summary line printed whole; a longer one (a dump's 100,000-character key or entry name) keeps
#: its head, which names the file and field, and its tail, which says what is wrong.
_MAX_LINE_CHARS = 2000


def _terminal_text(text: str) -> str:
    """A message as one printable line (control characters from a dump's names escaped, so they cannot drive the
    terminal), cut in the middle when longer than :data:`_MAX_LINE_CHARS`."""
    text = _printable(text)
    if len(text) <= _MAX_LINE_CHARS:
        return text
    head, tail = text[:1400], text[-400:]
    return f"{head} ... ({len(text) - len(head) - len(tail)} characters left out) ... {tail}"


def _printable(text: str) -> str:
    """``text`` with control characters escaped, so names from a dump cannot drive the terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def write_reports(comparison: Comparison, out: Path) -> dict[str, Path]:
    """Render ``comparison`` as HTML, JSON, CSV, JUnit XML and a Markdown summary into ``out`` and save it there
    (:func:`~msprobe_cmp.comparator.saved.write_saved`, for ``msprobe-cmp render``); each file written
    atomically; the names are :data:`OUTPUT_FILES`.  A comparison of several units with more rows than one page
    holds (:data:`~msprobe_cmp.reports.html.PAGE_ROWS`) also gets one page per unit in ``out/report_units/``
    (:func:`~msprobe_cmp.reports.html.html_pages`), which report.html links to.  The compare, the demo and
    ``render`` all write through here, so a rendered comparison gives the same bytes.

    Returns:
        ``{"html": path, "json": path, "csv": path, "junit": path, "markdown": path, "saved": path}``, and
        ``"unit_pages": out/report_units`` when the units have pages of their own.

    Raises:
        OSError: a file cannot be written.
    """
    out.mkdir(parents=True, exist_ok=True)
    with paused_gc():
        return _write_reports(comparison, out)


def _write_reports(comparison: Comparison, out: Path) -> dict[str, Path]:
    """The saved comparison and then each report are written to a temporary file, a unit or a bounded chunk of rows
    at a time, never whole in memory (:data:`~msprobe_cmp.reports.common.CHUNK_ROWS`): the saved comparison first (a
    comparison that cannot be saved fails before any report is rendered), the units' own pages last, one unit's
    rows in memory at a time; comparison.json and comparison.csv are written by a process forked for them while this
    one writes the pages, junit.xml and summary.md (:func:`_write_together`: two cores for the largest files; this
    process alone where no process can be forked).  None replaces its file until every one is written (a comparison
    that cannot be saved or rendered writes nothing).  Then an earlier saved comparison in ``out`` is removed, and so
    are the pages in ``out/report_units`` of units this comparison does not have (the whole directory when
    report.html holds every row); the reports replace their files and the saved comparison replaces its own last.
    A failure midway (a full disk) so leaves reports without a saved comparison, never a saved comparison next to
    reports of another comparison: ``render`` cannot reproduce a stale one, and the saved file's presence says the
    reports beside it are its own."""
    facts = ReportFacts(comparison)  # what the five reports share (counts, ranking, plot data), derived once
    paths = {"html": out / "report.html", "json": out / "comparison.json", "csv": out / "comparison.csv",
             "junit": out / "junit.xml", "markdown": out / "summary.md", "saved": out / SAVED_FILE}
    (_, html), *unit_pages = html_pages(comparison, facts=facts)
    pages_dir = out / UNIT_PAGES_DIR
    keep = {(out / path).name for path, _ in unit_pages}
    if unit_pages and (pages_dir.exists() or pages_dir.is_symlink()) and not pages_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (the units' pages are written there): move it away",
                                 str(pages_dir))

    def then() -> None:
        paths["saved"].unlink(missing_ok=True)

    facts.compared_counts()  # derived here, once, for the writers of both processes
    _write_together([
        (paths["saved"], lambda fh: write_saved(fh, comparison)),  # replaced last (the first written replaces last)
        (paths["json"], lambda fh: _write_text(fh, json_chunks(comparison, facts=facts))),
        (paths["csv"], lambda fh: _write_text(fh, csv_chunks(comparison))),
        (paths["html"], lambda fh: _write_text(fh, html())),
        (paths["junit"], lambda fh: _write_text(fh, junit_chunks(comparison, facts=facts))),
        (paths["markdown"], lambda fh: _write_text(fh, [render_markdown(comparison, facts=facts)])),
        *((out / path, lambda fh, pieces=pieces: _write_text(fh, pieces())) for path, pieces in unit_pages),
    ], then, alongside=(paths["json"], paths["csv"]))  # the two tables there, the pages (and their facts) here
    _remove_stale_pages(pages_dir, keep)
    if unit_pages:
        paths["unit_pages"] = pages_dir
    return paths


def _remove_stale_pages(pages_dir: Path, keep: set[str]) -> None:
    """Once the new reports replaced theirs: remove the pages in ``pages_dir`` (``OUT/report_units``) of an earlier
    comparison's units that are not in ``keep`` (this comparison's page names), and the directory when it is left
    empty.  Best effort: a page that cannot be removed stays (report.html no longer links it); nothing is removed
    through a symlinked directory."""
    if not pages_dir.is_dir() or pages_dir.is_symlink():
        return
    for old in pages_dir.glob("*.html"):  # an earlier comparison's pages of units this one does not have
        if old.name not in keep:
            try:
                old.unlink(missing_ok=True)
            except OSError:
                pass
    try:
        if not keep and not any(pages_dir.iterdir()):
            pages_dir.rmdir()
    except OSError:
        pass


#: How many encoded pieces of a report :func:`_write_text` lets wait for its writing thread (each at most a chunk of
#: rows' text, a few MB: :data:`~msprobe_cmp.reports.common.CHUNK_ROWS`).
_PIECES_WAITING = 2


def _write_text(fh: BinaryIO, pieces: Iterable[str]) -> None:
    """Write ``pieces`` of text to ``fh`` as every report is encoded: UTF-8, a lone surrogate escape (``"\\ud800"``
    in a dump's names, which UTF-8 cannot encode) written as a backslash escape.

    The bytes are handed, in order, to a thread that writes them while the next pieces are made (``fh.write`` lets
    other threads run while the kernel copies the bytes: hundreds of MB for a large comparison, about a third of the
    reports' time); at most :data:`_PIECES_WAITING` pieces wait for it.  The thread has ended when this returns or
    raises: an error of ``fh.write`` (a full disk) is raised here, once the pieces made so far are dropped; an error
    making the pieces (an interrupt) is raised once the thread has stopped.

    Raises:
        OSError: ``fh`` cannot be written.
    """
    waiting: queue.Queue[bytes | None] = queue.Queue(_PIECES_WAITING)
    failed: list[BaseException] = []

    def drain() -> None:
        while (data := waiting.get()) is not None:
            if not failed:  # after a failure, the pieces still coming are dropped
                try:
                    fh.write(data)
                except BaseException as exc:  # raised in the caller's thread
                    failed.append(exc)

    writer = threading.Thread(target=drain, name="msprobe-cmp report writer", daemon=True)
    writer.start()
    try:
        for piece in pieces:
            if failed:
                break
            waiting.put(piece.encode("utf-8", errors="backslashreplace"))
    finally:
        waiting.put(None)
        writer.join()
    if failed:
        raise failed[0]


def _fill_temp(path: Path, write: Callable[[BinaryIO], object], made: Callable[[str], object] | None = None) -> str:
    """A temporary file beside ``path`` (its directory made when missing) filled by ``write(fh)`` and closed, with
    the mode a plain ``open(path, "w")`` would give it; its name.  Removed again when ``write`` raises.  ``made``:
    called with the name as soon as the file exists (a forked writer tells its parent:
    :func:`_write_together`).

    Raises:
        OSError: the file cannot be made or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path)
    try:
        if made is not None:
            made(tmp)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or exc.filename == tmp:  # a write that failed (a full disk): name the report
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _write_together(files: Sequence[tuple[Path, Callable[[BinaryIO], object]]], then: Callable[[], object],
                    alongside: Collection[Path] = ()) -> None:
    """Write each ``(path, write)`` of ``files`` atomically, none replacing its file before all were written: each
    ``write(fh)`` fills a temporary file beside its path (:func:`_fill_temp`).  This process writes them one after the
    other, in order, except the files whose paths are in ``alongside``: once the files before the first of them are
    written, a process is forked (:class:`~msprobe_cmp.forked.Forked`, where :func:`~msprobe_cmp.forked.can_fork`) that
    writes those, in order, telling this one each temporary file as soon as it exists, while this one goes on with the
    others (the two cores of a small machine; one file open at a time in each process).  Where no process can be forked,
    this process writes them too, in their place.  Once all are written, ``then()`` runs and the files replace theirs
    (``os.replace``, in this process), the last one first.  When a ``write`` or ``then`` raises, no file was replaced,
    every temporary file is removed and so is every directory made for them that is left empty; the forked process is
    stopped first when this one fails, and its error is raised here when it fails (the same exception, with its
    traceback as a note; a process ended by a signal is a :class:`ChildProcessError`).

    Raises:
        OSError: a file cannot be written or replaced (files replaced before it stay replaced; the temporary files
            of the others are removed).
    """
    made = [p.parent for p, _ in files if not p.parent.exists()]
    temps: dict[int, str] = {}  # index in files -> its temporary file
    apart = [k for k, (path, _) in enumerate(files) if path in alongside] if can_fork() else []
    helper: Forked | None = None

    def write_apart(tell: Tell) -> None:
        for k in apart:
            path, write = files[k]
            _fill_temp(path, write, partial(tell, k))

    try:
        for k, (path, write) in enumerate(files):
            if apart and k == apart[0] and helper is None:
                helper = Forked.start(write_apart, "to write reports alongside")
            if helper is None or k not in apart:
                temps[k] = _fill_temp(path, write)
        if helper is not None:
            temps.update(helper.finish())  # type: ignore[arg-type]
            helper = None  # reaped, its files among temps
        then()
        with interrupts_held():
            for k in sorted(temps, reverse=True):
                os.replace(temps[k], files[k][0])
                del temps[k]
    except BaseException:
        if helper is not None:
            temps.update(helper.stop())  # type: ignore[arg-type]
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
        for directory in dict.fromkeys(made):
            try:
                directory.rmdir()  # only when empty
            except OSError:
                pass
        raise


def exit_code_for(comparison: Comparison) -> int:
    """The CLI exit code of a comparison: 0 pass, 1 fail, 3 nothing compared or too few rows matched."""
    if comparison.verdict == "pass":
        return EXIT_OK
    if comparison.verdict == "fail":
        return EXIT_REGRESSION
    return EXIT_NOTHING_COMPARED


def render_summary(comparison: Comparison, files: dict[str, Path]) -> str:
    """A few lines for the terminal: verdict, counts, the likely origin, the arguments that differ, where the runs
    start to differ, the first row the mode could not compare (judged by its statistics only), the notes, the report
    path (and the directory of the units' own pages when there are some: ``files["unit_pages"]``)."""
    compared = comparison.compared_count
    # rows a tensor / md5 comparison could not compare (no tensor file, no checksum): counted on the verdict line,
    # the first named below in the reports' wording (reports.common.STATISTICS_ONLY_WHY)
    stats_only = judged_by_statistics(comparison, examples=1)
    by_stats = stats_only.total
    mode = f"{comparison.mode} mode"
    if by_stats:
        mode += f"; {by_stats} of {compared} compared rows judged by statistics only"
    lines = [f"verdict: {comparison.verdict.upper()}  ({mode})"]
    total = sum(n for _, n in comparison.counts)
    share = comparison.matched_share
    # The share also counts the rows of units found on one side only, which no class count holds: say so.
    unpaired = (f", counting the rows of the {len(comparison.unpaired)} unit(s) found on one side only"
                if comparison.unpaired else "")
    lines.append("rows: " + (", ".join(f"{k} {v}" for k, v in comparison.counts if v) or "none")
                 + (f"  ({share:.1%} of {comparison.matched_share_of} matched{unpaired}, floor "
                    f"{comparison.rules.min_matched_share:.0%})" if share is not None and total else ""))
    lines.append("verdicts: " + (", ".join(f"{k} {v}" for k, v in comparison.verdict_counts if v) or "none"))
    if compared:
        lines.append(_terminal_text(origin_line(comparison)))
    arguments = arguments_line(comparison)
    if arguments:
        lines.append(_terminal_text(arguments))
    first_diff = comparison.first_divergent
    if first_diff is not None:
        lines.append(f"first divergent: {_terminal_text(first_diff.label)}")
    elif compared == 0:
        lines.append("first divergent: - (nothing was compared)")
    else:
        lines.append(f"first divergent: none: the {compared} compared rows are identical"
                     + (f" ({by_stats} of them by their statistics only)" if by_stats else ""))
    first_fail = comparison.first_failing
    if first_fail is not None:
        lines.append(f"first failing:   {_terminal_text(first_fail.label)}")
    if stats_only.examples:
        ui, row = stats_only.examples[0]
        lines.append(_terminal_text(f"first judged by statistics only: {row.name} "
                                    f"({comparison.units[ui].unit_a.label}); {stats_only.why}"))
    for note in comparison.notes:
        lines.append(f"note: {_terminal_text(note)}")
    if comparison.verdict in ("nothing_compared", "too_few_matched"):
        for side, cls in (("A", "only_in_a"), ("B", "only_in_b")):
            names = list(dict.fromkeys(r.entry_name for u in comparison.units for r in u.rows if r.match_class == cls))
            if names:
                more = f" (and {len(names) - 10} more)" if len(names) > 10 else ""
                shown = ", ".join(names[:10])
                lines.append(_terminal_text(f"entries only in {side}: {shown}{more}"))
    lines.append(f"report: {files['html']}")
    if "unit_pages" in files:  # report.html sums up; each unit's rows are on its own page
        lines.append(f"each unit's rows: {files['unit_pages']}{os.sep}")
    return "\n".join(lines)


@contextmanager
def _option_input(option: str) -> Iterator[None]:
    """Prefix any user error (or file-system refusal) raised inside the block with ``option``, so a bad
    input path or file names the option it came from (``--noise: /missing: does not exist``)."""
    try:
        yield
    except MsprobeCmpError as exc:
        raise ConfigError(f"{option}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{option}: {_os_error_text(exc)}") from None


def _os_error_text(exc: OSError) -> str:
    """A file-system refusal as one message: ``<file>: <reason>`` (the file only when the error names one)."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def _rules_from_args(args: argparse.Namespace) -> Rules:
    rules = Rules()
    if args.rules is not None:
        with _option_input("--rules"):
            rules = load_rules(args.rules)
    if args.min_matched_share is not None:
        if not 0.0 <= args.min_matched_share <= 1.0:
            raise ConfigError(f"--min-matched-share: must be between 0 and 1, got {args.min_matched_share}")
        rules = replace(rules, min_matched_share=args.min_matched_share)
    return rules


def _mapping_from_args(args: argparse.Namespace) -> NameMapping:
    cells: dict[str, str] = {}
    apis: tuple[ApiMappingRecord, ...] = ()
    if args.cell_mapping is not None:
        with _option_input("--cell-mapping"):
            cells = load_cell_mapping(args.cell_mapping)
    if args.api_mapping is not None:
        with _option_input("--api-mapping"):
            apis = load_api_mapping(args.api_mapping)
    return NameMapping(
        cells=cells,
        apis=apis,
        cell_source=args.cell_mapping.name if args.cell_mapping is not None else None,
        api_source=args.api_mapping.name if args.api_mapping is not None else None,
    )


class _Stages:
    """Progress over the stages of a compare (loading, comparing, writing) on stderr, drawn by tqdm
    only when stderr is a terminal: silent in CI logs and pipes."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False,
                         bar_format="{desc} [{n_fmt}/{total_fmt}] {elapsed}")
        self._started = False

    def start(self, what: str) -> None:
        """Show that ``what`` is under way (the previous stage is counted as done)."""
        if self._started:
            self._bar.update(1)
        self._started = True
        self._bar.set_description_str(what)

    def unit(self, done: int, total: int, label: str) -> None:
        """Progress inside the compare stage: ``done`` of ``total`` (step, rank) units."""
        if done < total:
            self._bar.set_description_str(f"comparing {label} ({done + 1}/{total})")

    def close(self) -> None:
        """Remove the progress line."""
        self._bar.close()


def _load_pt_tensor(path: Path) -> np.ndarray:
    """Read one ``.pt`` tensor file of msprobe's PyTorch tensor-mode dumps (torch is imported on first use).

    Raises:
        DumpFormatError: the file cannot be read, or torch is not installed (the row then falls back to
            its statistics, with a note saying why).
    """
    from msprobe_cmp.recorder.adapters.torch_files import load_pt_tensor

    try:
        return load_pt_tensor(path)
    except MissingFrameworkError as exc:
        raise DumpFormatError(path, None, f"reading .pt tensor files needs torch: {exc}") from None


def _load_input(path: Path, absolute: bool, scan: bool = False) -> Dump:
    """Load the dump at ``path`` as typed, or, when ``absolute`` (``--absolute-paths``), from its resolved
    absolute path, so every path the comparison carries (inputs, unit directories, notes) is absolute.  A
    missing path keeps the typed form: its error names what the user wrote.  With ``scan``, the units' headers
    only (:func:`~msprobe_cmp.dump.reader.scan_dump`): workers read the entries."""
    return (scan_dump if scan else load_dump)(path.resolve() if absolute and path.exists() else path)


def _run_compare(argv: Sequence[str]) -> int:
    # .pt tensor files (msprobe's PyTorch dumps) are readable during this command only: main() leaves no state.
    if tensor_loader_for(".pt") is not None:
        return _compare(argv)
    register_tensor_loader(".pt", _load_pt_tensor)
    try:
        return _compare(argv)
    finally:
        unregister_tensor_loader(".pt")


def _compare(argv: Sequence[str]) -> int:
    args = _compare_parser().parse_args(list(argv))
    inputs = [p for p in (args.target, args.baseline, args.noise) if p is not None]
    holder = _input_holding(args.output, inputs)
    if holder is not None:  # before --force is asked for: it would not help
        raise ConfigError(f"--output {args.output}: inside the input dump {holder}; write the reports elsewhere")
    _check_outputs(args.output, args.force)
    rules = _rules_from_args(args)  # validate options before reading dumps
    mapping = _mapping_from_args(args)
    if args.jobs < 1:
        raise ConfigError(f"--jobs: must be at least 1, got {args.jobs}")
    if args.noise is not None and not args.noise.exists():  # before spending minutes on TARGET and BASELINE
        raise ConfigError(f"--noise: {args.noise}: does not exist")
    if args.write_mapping is not None:
        _check_mapping_output(args.write_mapping, args.force, args.output, inputs)
    # with workers (--jobs, --scheduler) this process reads the headers only and the workers the entries, so its
    # memory does not grow with the dumps; --write-mapping reads the entries here
    scan = (args.scheduler is not None or args.jobs > 1) and args.write_mapping is None
    stages = _Stages(5 if args.noise is not None else 4)
    # a scan's units come back from their workers one at a time: their rows are kept in files meanwhile
    spool = tempfile.TemporaryDirectory(prefix="msprobe-cmp-units-") if scan else None
    try:
        try:
            stages.start(f"{'scanning' if scan else 'loading'} {args.target}")
            dump_a = _load_input(args.target, args.absolute_paths, scan)
            stages.start(f"{'scanning' if scan else 'loading'} {args.baseline}")
            dump_b = _load_input(args.baseline, args.absolute_paths, scan)
            noise = None
            if args.noise is not None:
                stages.start(f"{'scanning' if scan else 'loading'} {args.noise}")
                with _option_input("--noise"):
                    noise = _load_input(args.noise, args.absolute_paths, scan)
            stages.start(f"comparing {len(dump_a.units)} unit(s) with {len(dump_b.units)}")
            options = CompareOptions(rules=rules, noise=noise, progress=stages.unit, mapping=mapping, jobs=args.jobs,
                                     scheduler=args.scheduler, spool=None if spool is None else Path(spool.name))
            comparison = compare(dump_a, dump_b, options)
            if not args.absolute_paths:
                comparison = relative_paths(comparison, [p for p in (args.target, args.baseline, args.noise) if p])
            mapping_text = None if args.write_mapping is None else _mapping_file_text(dump_a, dump_b, mapping)
            del dump_a, dump_b, noise  # the reports need only the comparison: the dumps' records are freed first
            stages.start(f"writing reports into {args.output}")
            files = write_reports(comparison, args.output)
            if args.write_mapping is not None and mapping_text is not None:
                try:
                    write_bytes_atomic(args.write_mapping, mapping_text.encode())
                except OSError as exc:
                    why = exc.strerror or exc
                    raise ConfigError(f"--write-mapping: {args.write_mapping}: cannot write: {why}") from None
        finally:
            stages.close()
        _say(render_summary(comparison, files))
        if args.write_mapping is not None:
            _say(f"cell mapping written to {args.write_mapping} (edit it, then pass it with --cell-mapping)"
                 if mapping_text is not None else
                 f"--write-mapping: nothing written to {args.write_mapping}: the two dumps are not MindSpore against "
                 "PyTorch, so no cell pairs were inferred")
        return exit_code_for(comparison)
    finally:
        if spool is not None:
            spool.cleanup()


def _input_holding(path: Path, inputs: Sequence[Path]) -> Path | None:
    """The first of ``inputs`` (dump paths as given: a directory, or a dump.json whose directory counts) that holds
    ``path`` (or is it), symlinks resolved, or None (an input that does not exist holds nothing).  A command writes
    nothing into a dump it reads: a report beside a dump.json is mistaken for the recording's own files, and
    ``--force`` would replace files there."""
    target = Path(os.path.realpath(path))  # a symlink loop stays as it is (Path.resolve raises RuntimeError)
    for given in inputs:
        root = Path(os.path.realpath(given))
        if not root.exists():
            continue  # the input's own error comes later
        root = root if root.is_dir() else root.parent
        if target.is_relative_to(root):
            return given
    return None


def _check_mapping_output(path: Path, force: bool, out: Path, inputs: Sequence[Path]) -> None:
    """Refuse a ``--write-mapping`` path that would replace something it must not: an existing file without
    ``--force``; anything but a regular file (a directory, a device), even with it; a file inside an input dump;
    a report file of ``--output``."""
    if os.path.lexists(path) and not path.is_file():
        raise ConfigError(f"--write-mapping: {path}: exists and is not a regular file")
    if path.exists() and not force:
        raise ConfigError(f"--write-mapping: {path}: exists (give --force to replace it)")
    if not path.absolute().parent.is_dir():
        raise ConfigError(f"--write-mapping: {path}: its directory does not exist")
    holder = _input_holding(path, inputs)
    if holder is not None:
        raise ConfigError(f"--write-mapping: {path}: inside the input dump {holder}; write it elsewhere")
    target = path.resolve()
    if target.parent == out.resolve() and target.name in OUTPUT_FILES:
        raise ConfigError(f"--write-mapping: {path}: a report file of --output {out}; choose another name")


def _mapping_file_text(dump_a: Dump, dump_b: Dump, mapping: NameMapping) -> str | None:
    """``--write-mapping``: the cell pairs of the cross-framework unit pairs (the user's and the inferred ones) as a
    cell-mapping file (:func:`~msprobe_cmp.comparator.mapping.mapping_file_pairs`), or None when no unit pair is
    MindSpore against PyTorch (nothing to write)."""
    pairs, _, _, _ = pair_units(tuple(dump_a.units), tuple(dump_b.units))
    sides = []
    for ua, ub in pairs:
        ns = unit_namespaces(ua, ub)
        if set(ns) == {"mindspore", "pytorch"}:
            sides.append((ua.entries, ub.entries) if ns[0] == "mindspore" else (ub.entries, ua.entries))
    if not sides:
        return None
    cells, left_out = mapping_file_pairs(sides, mapping.cells)
    header = ["MindSpore cell -> PyTorch module pairs written by msprobe-cmp --write-mapping (msprobe's -cm format):",
              "<cell path>.<MindSpore class>: <module path>.<PyTorch class>.  Edit, then pass with --cell-mapping."]
    if left_out:
        header.append(f"{left_out} cell(s) used at several places pair call by call with different modules: not "
                      "listed, they are inferred again.")
    return render_cell_mapping(cells, header)


def _run_demo(argv: Sequence[str]) -> int:
    """``msprobe-cmp demo [-o OUT] [--steps N] [--force]``: record the PyTorch original, its correct MindSpore port
    and the buggy port into OUT/dumps (:func:`~msprobe_cmp.recorder.demo.run_demo_recordings`), compare each port
    against the original into OUT/correct and OUT/bug, and print each verdict, the bug's likely origin and where to
    look.  Returns 0 when the correct port passes and the buggy one fails, 3 when a comparison had nothing to
    compare, else 1.

    Raises:
        ConfigError: a usage error, or OUT holds an earlier demo (without ``--force``).
        MissingFrameworkError: torch, mindspore or scikit-learn is not installed.
    """
    args = _demo_parser().parse_args(list(argv))
    if args.steps < 1:
        raise ConfigError(f"--steps: must be at least 1, got {args.steps}")
    out: Path = args.output
    parts = {"correct": out / "correct", "bug": out / "bug"}
    _check_outputs(out, args.force, ("dumps", *parts), dirs=("dumps", *parts))
    for directory in parts.values():
        _check_outputs(directory, args.force)
    from msprobe_cmp.recorder.demo import bug_description, run_demo_recordings

    _say(f"recording a digits classifier in PyTorch, its MindSpore port and a buggy port ({args.steps} training "
         f"step(s) each) into {out / 'dumps'} ...")
    runs = run_demo_recordings(out / "dumps", steps=args.steps, replace=args.force)
    for line in runs.lines:
        _say(line)
    verdicts = {}
    compared: dict[str, tuple[Comparison, dict[str, Path]]] = {}
    for part, port, label, expected in (("correct", runs.mindspore, "correct port vs PyTorch:", "pass"),
                                        ("bug", runs.bug, "buggy port vs PyTorch:  ", "fail")):
        comparison = compare(load_dump(port), load_dump(runs.pytorch))
        files = write_reports(comparison, parts[part])
        compared[part] = comparison, files
        verdicts[part] = comparison.verdict
        counts = dict(comparison.verdict_counts)
        as_expected = "as expected" if comparison.verdict == expected else f"UNEXPECTED: expected {expected.upper()}"
        _say(f"{label} {comparison.verdict.upper()} ({counts.get('fail', 0)} failing, {counts.get('warning', 0)} "
             f"warning rows; {as_expected}) -> {files['html']}")
    comparison, files = compared["bug"]
    _say(_terminal_text(f"the bug's {origin_line(comparison)}"))
    _say(f"the bug: {bug_description()}")
    origin = comparison.likely_origin
    first = comparison.first_failing
    _say(_terminal_text(
        f"open {files['html']}: start at its 'likely origin' line, then find "
        f"{origin.cell or origin.ref.name if origin else 'the first failing row'} in the cell tree"
        + (f"; the first failing row is {first.label}" if first else "")
        + "; the losses above agree (training normalises with the batch statistics), the moving statistics do not"))
    if verdicts == {"correct": "pass", "bug": "fail"}:
        return EXIT_OK
    if any(v in ("nothing_compared", "too_few_matched") for v in verdicts.values()):
        return EXIT_NOTHING_COMPARED
    return EXIT_REGRESSION


@contextmanager
def _render_hint() -> Iterator[None]:
    """When ``render``'s arguments or RESULT are unusable and a ``./render`` exists, the user may have meant to compare
    a dump directory named render: the error says how to."""
    try:
        yield
    except (ConfigError, DumpFormatError) as exc:
        if not os.path.lexists("render"):
            raise
        raise ConfigError(f"{exc} ('render' is the render command: to compare a dump named render, write ./render or "
                          "'msprobe-cmp compare render BASELINE')") from None


def _run_render(argv: Sequence[str]) -> int:
    """``msprobe-cmp render RESULT -o OUT [--force]``: load the saved comparison RESULT and write every report of it
    into OUT with :func:`write_reports` (the compare's own writer), then print the compare's summary.  OUT must not
    be RESULT's directory (the reports there are the ones being reproduced); existing report files in OUT are kept
    unless ``--force``.  Returns the verdict's exit code (:func:`exit_code_for`).

    Raises:
        ConfigError: a usage error, OUT is RESULT's directory or holds report files (without ``--force``).
        DumpFormatError: RESULT is missing, unreadable or not a saved comparison of this version.
    """
    with _render_hint():
        args = _render_parser().parse_args(list(argv))
    source = saved_file(args.result)
    out: Path = args.output
    # the directory as given and, through symlinks, the one the file really is in
    sources = {source.parent, Path(os.path.realpath(source)).parent}  # realpath: a symlink loop is no error here
    if out.exists() and out.is_dir() and any(d.is_dir() and os.path.samefile(out, d) for d in sources):
        raise ConfigError(f"render: --output {out}: holds the saved comparison {source} itself (and the reports it "
                          "reproduces); give another directory")
    _check_outputs(out, args.force)
    with _render_hint():
        comparison = load_comparison(source)
    files = write_reports(comparison, out)
    _say(render_summary(comparison, files))
    return exit_code_for(comparison)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "demo":
            return _run_demo(args[1:])
        if args and args[0] == "render":
            return _run_render(args[1:])
        if args and args[0] == "compare":
            args = args[1:]
        return _run_compare(args)
    except MsprobeCmpError as exc:
        _say(f"msprobe-cmp: error: {_terminal_text(str(exc))}", sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        _say("msprobe-cmp: interrupted", sys.stderr)
        return 130
    except OSError as exc:  # the file system refused a read or a write (a directory in the way, a full disk...)
        _say(f"msprobe-cmp: error: {_terminal_text(_os_error_text(exc))}", sys.stderr)
        return EXIT_USAGE
    except Exception:
        # A bug: show the traceback, but never exit 1, which CI reads as "regression found".
        traceback.print_exc()
        _say("msprobe-cmp: internal error (a bug in msprobe-cmp; please report it with the traceback above)",
             sys.stderr)
        return EXIT_INTERNAL_ERROR


def console_main() -> int:
    """The ``msprobe-cmp`` command: :func:`main` with the process's arguments.

    Python's cyclic garbage collector stays as it is: the blocks that build many records (loading, comparing,
    rendering) pause it themselves (:func:`msprobe_cmp.dump.reader.paused_gc`); measured on the 100k-entry bench
    pair, switching it off for the whole process gains nothing since the rows are columns.

    SIGTERM (``timeout``, a job scheduler stopping the command) is taken as Ctrl-C is: the command stops where it
    is, removes its temporary files and directories (reports half written, the rows of ``--jobs`` units) and exits
    with 130, leaving every report of an earlier run as it was.
    """
    signal.signal(signal.SIGTERM, raise_interrupt)
    return main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console_main())
