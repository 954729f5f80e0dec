"""Record every porting bug of tests/realmodels/bugs.py against its correct counterpart, compare each pair in
statistics and tensor mode through the ``msprobe-cmp`` command (``msprobe_cmp.cli.main``), and write a Markdown
table of what the comparator says: verdict, exit code, first failing row, likely origin, and whether that origin
names the module the bug changed.

    .venv/bin/python tools/porting_bugs.py [--out docs/porting-bugs.md] [--work DIR] [--only NAME ...] [--no-port]

Every side is recorded once with task ``tensor`` (its dumps carry the statistics too): the correct side once per
model, each bug's side once.  The dumps go to a temporary directory, removed at the
end unless ``--work`` names one.  The statistics-mode comparison reads the same dumps: with ``--mode statistics``
when the command has that option, else from a copy of each dump.json that says ``"task": "statistics"`` (what the
comparator then auto-detects) beside the same stack.json and construct.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from msprobe_cmp import cli  # noqa: E402
from tests.realmodels import bugs  # noqa: E402

MODES = ("statistics", "tensor")


@dataclass(frozen=True)
class Result:
    """One comparison: a bug (or a control) in one mode."""

    name: str
    title: str
    changed: str
    mode: str
    exit_code: int
    api_exit_code: int
    outcome: bugs.Outcome
    control_changed_fail: int | None
    seconds: float


def statistics_view(dump: Path, into: Path) -> Path:
    """A copy of ``dump``'s dump.json files saying ``"task": "statistics"``, beside links to its stack.json and
    construct.json (no tensor files), under ``into``; returns ``into``."""
    for file in dump.rglob("dump.json"):
        rank_dir = into / file.parent.relative_to(dump)
        rank_dir.mkdir(parents=True, exist_ok=True)
        doc = json.loads(file.read_text())
        doc["task"] = "statistics"
        (rank_dir / "dump.json").write_text(json.dumps(doc))
        for other in ("stack.json", "construct.json"):
            if (file.parent / other).exists():
                (rank_dir / other).symlink_to(file.parent / other)
    return into


def run_cli(a: Path, b: Path, mode: str, out: Path, work: Path) -> int:
    """``msprobe-cmp A B -o OUT --force`` in ``mode``; returns its exit code (its terminal summary is dropped)."""
    args = [str(a), str(b), "-o", str(out), "--force"]
    if mode == "statistics":  # the command has no --mode: copies of the dumps saying task statistics
        for i, dump in enumerate((a, b)):
            view = work / "statistics-views" / dump.name
            if not view.exists():
                statistics_view(dump, view)
            args[i] = str(view)
    with contextlib.redirect_stdout(io.StringIO()):
        return cli.main(args)


def compare_pair(name: str, title: str, changed: str, a: Path, b: Path, work: Path,
                 controls: dict[str, object]) -> list[Result]:
    """Both modes of one (A, B) pair; ``controls`` maps a mode to the bug-free comparison of the same model (filled
    in here when ``name`` is a control)."""
    out = []
    for mode in MODES:
        start = time.perf_counter()
        code = run_cli(a, b, mode, work / "reports" / f"{name}-{mode}", work)
        comparison = bugs.compare_dumps(a, b, mode)
        seconds = time.perf_counter() - start
        if name.startswith("control"):
            controls[mode] = comparison
            in_control = None
        else:
            in_control = bugs.outcome(controls[mode], changed).changed_fail
        out.append(Result(name, title, changed, mode, code, cli.exit_code_for(comparison),
                          bugs.outcome(comparison, changed), in_control, seconds))
        print(f"  {name:18s} {mode:10s} exit {code}  {comparison.verdict}", file=sys.stderr, flush=True)
    return out


def _cell(text: object) -> str:
    return "-" if text is None or text == "" else str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str | None) -> str:
    return "-" if not text else f"`{_cell(text)}`"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _names(value: bool) -> str:
    return "yes" if value else "no"


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A Markdown table: the header line, the separator, one line per row."""
    return [f"| {' | '.join(headers)} |", "| " + " | ".join("---" for _ in headers) + " |",
            *(f"| {' | '.join(row)} |" for row in rows)]


def render(results: list[Result], seconds: dict[str, float], total: float) -> str:
    """The Markdown page."""
    bug_results = [r for r in results if not r.name.startswith("control")]
    named = sum(1 for r in bug_results if r.outcome.origin_names_changed)
    detected = sum(1 for r in bug_results if r.outcome.detected)
    lines = [
        "# Porting bugs: what the comparator finds",
        "",
        "Generated by `.venv/bin/python tools/porting_bugs.py` (do not edit by hand): realistic porting bugs "
        "injected into real model code (transformers 4.57.1's BERT, mindcv 0.3.0's and pytorchcv's ResNet-18; "
        "random weights, fixed seeds), each recorded for one training step (forward and backward, level `mix`, "
        "task `tensor`) against its correct counterpart and compared with `msprobe-cmp TARGET BASELINE` in "
        "statistics and tensor mode. Definitions: `tests/realmodels/bugs.py`; test: "
        "`tests/realmodels/test_porting_bugs.py`.",
        "",
        "- A (target) carries the bug, B (baseline) is correct. BERT bugs: PyTorch against PyTorch "
        "(`attn_implementation=\"eager\"` on both sides). Port bugs: the MindSpore port (mindcv) against the "
        "PyTorch original (pytorchcv) with the same weights (`tests/realmodels/port.py`); rows carry A's "
        "(MindSpore's) names.",
        "- *verdict*: the comparison's verdict and its failing / warning rows; *exit*: the command's exit code "
        "(0 pass, 1 regression, 3 nothing comparable).",
        "- *likely origin*: the comparator's `likely_origin` (row, innermost enclosing cell); *names changed*: the "
        "changed module's path appears in the origin's entry name or its innermost enclosing cell.",
        "- the controls compare a correct side with a correct side: the BERT with a rerun of itself (must pass), "
        "and the MindSpore port with the PyTorch original (what the bug rows are measured against).",
        "- statistics mode: the command has no `--mode` option, so it reads copies of the same dump.json "
        "files saying `\"task\": \"statistics\"` (auto-detected as statistics mode); "
        "the Comparison objects come from `compare(..., CompareOptions(mode=...))` on the "
        "dumps themselves, and *exit* shows `(API: n)` where `exit_code_for` of that "
        "Comparison disagrees with the command's exit code.",
        "",
        f"Detected (fail, or a warning row): {detected} of {len(bug_results)} bug comparisons; likely origin names "
        f"the changed module: {named} of {len(bug_results)}.",
        "",
    ]
    lines += _table(
        ("bug", "changed module", "mode", "exit", "verdict (fail / warning rows)", "first failing row", "likely origin",
         "names changed"),
        [(_cell(r.title), f"`{r.changed}`", r.mode,
          str(r.exit_code) + ("" if r.exit_code == r.api_exit_code else f" (API: {r.api_exit_code})"),
          f"{r.outcome.verdict} ({r.outcome.fails} / {r.outcome.warnings})", _code(r.outcome.first_failing),
          "-" if r.outcome.origin is None else f"{_code(r.outcome.origin)} in {_code(r.outcome.origin_cell)}",
          _names(r.outcome.origin_names_changed) if not r.name.startswith("control") else "-") for r in results])
    lines += [
        "",
        "## Error at the changed module and elsewhere",
        "",
        "Largest MaxAbsErr (statistics mode: its lower bound from Max/Min/Mean/Norm) of a differing row inside the "
        "changed module (its entry name or an enclosing cell in it) and outside it (downstream rows carry the "
        "changed module's error on, so 'elsewhere' is often as large); fail / warning rows inside the changed "
        "module, and in brackets inside the same module in the bug-free comparison of that model (the BERT rerun, "
        "the bug-free port): a port bug is only told apart by what it adds to the port's own differences.",
        "",
    ]
    lines += _table(
        ("bug", "mode", "first divergent row", "in changed module: max err (row)",
         "fail+warn rows in it (bug-free: same module)", "elsewhere: max err (row)"),
        [(r.name, r.mode, _code(r.outcome.first_divergent),
          f"{_err(r.outcome.changed_err)} ({_code(r.outcome.changed_row)})",
          f"{r.outcome.changed_fail}" + ("" if r.control_changed_fail is None else f" ({r.control_changed_fail})"),
          f"{_err(r.outcome.other_err)} ({_code(r.outcome.other_row)})") for r in results])
    lines += ["", "## Origins in full", ""]
    for r in results:
        if r.outcome.origin_text:
            lines.append(f"- {r.name}, {r.mode}: {_cell(r.outcome.origin_text)}")
    lines += [
        "",
        "## Bugs",
        "",
    ]
    for bug in bugs.all_bugs():
        lines.append(f"- **{bug.name}** (`{bug.changed}`): {bug.description}.")
    lines += [
        "",
        "## Cost",
        "",
        f"Recording (one step each, seconds): {', '.join(f'{k} {v:.0f}' for k, v in seconds.items())}. "
        f"Whole run {total:.0f} s on {platform.machine()} (Python {platform.python_version()}).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command; returns 0 when every bug was recorded and compared."""
    p = argparse.ArgumentParser(prog="porting_bugs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "porting-bugs.md", help="the Markdown file to write")
    p.add_argument("--work", type=Path, help="keep the dumps and reports here (default: a temporary directory)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these bugs (names from tests/realmodels/bugs.py)")
    p.add_argument("--no-port", action="store_true", help="leave out the MindSpore-port bugs (the slow ones)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="porting-bugs-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = [b for b in bugs.all_bugs() if (not args.only or b.name in args.only)
              and not (args.no_port and b.family == "port")]
    if not bugs.port_available():
        print("tests/realmodels/port.py is missing: the port bugs are left out", file=sys.stderr)
    try:
        rec = bugs.Recorder(work / "dumps")
        results: list[Result] = []
        controls: dict[str, dict[str, object]] = {}
        for family in dict.fromkeys(b.family for b in chosen):
            a, b = rec.control(family)
            title = "control: rerun of the correct BERT" if family == "bert" else "control: the port, no bug"
            results += compare_pair(f"control-{family}", title, "-", a, b, work, controls.setdefault(family, {}))
        for bug in chosen:
            a, b = rec.pair(bug)
            results += compare_pair(bug.name, bug.title, bug.changed, a, b, work, controls[bug.family])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render(results, rec.seconds, time.perf_counter() - start))
        print(f"wrote {args.out}", file=sys.stderr)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
