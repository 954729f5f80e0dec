"""Check that msprobe's own compare reads msprobe-cmp's dumps and agrees with msprobe-cmp's numbers.

    .venv/bin/python bench/msprobe_compat.py [--msprobe-venv DIR] [--steps N] [--workdir DIR]

1. Records the demo workload (the digits MLP, float32 baseline and float16 target, level mix) with
   msprobe-cmp's recorder, once with task ``tensor`` and once with task ``statistics``.
2. Runs ``msprobe -f mindspore compare`` of mindstudio-probe 1.2.2 on each step (target as "npu",
   baseline as "bench") in a separate virtual environment (created on first use from the package
   registry: mindstudio-probe==1.2.2, mindspore==2.10.0, numpy<2, pandas<2.1, openpyxl; ~1.5 GB).
3. Compares msprobe-cmp's comparison.json with msprobe's xlsx row by row: Cosine and MaxAbsErr in
   tensor mode, the four "<stat> diff" columns in statistics mode.

Prints one line per step and mode and exits 1 when msprobe failed to read a dump or a number disagrees
(Cosine by more than 1e-5, MaxAbsErr and statistic differences by more than 1e-6 + 1e-5 relative).
Needs network access to the package registry the first time; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

MSPROBE_REQUIREMENTS = ["mindstudio-probe==1.2.2", "mindspore==2.10.0", "numpy<2", "pandas<2.1", "openpyxl"]

# Run inside the msprobe venv: read msprobe's xlsx into JSON rows {name: {column: value}}.
READ_XLSX = r"""
import json, sys
import pandas as pd
df = pd.read_excel(sys.argv[1])
rows = {}
for _, r in df.iterrows():
    rows[str(r["NPU Name"])] = {k: (None if pd.isna(v) else (v if isinstance(v, (int, float, str)) else str(v)))
                                for k, v in r.items()}
print(json.dumps(rows))
"""


def ensure_msprobe_venv(venv: Path) -> Path:
    """The ``msprobe`` executable of ``venv``, creating the venv and installing msprobe 1.2.2 if needed."""
    exe = venv / "bin" / "msprobe"
    if exe.exists():
        return exe
    print(f"creating {venv} with {' '.join(MSPROBE_REQUIREMENTS)} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *MSPROBE_REQUIREMENTS], check=True)
    return exe


def record(workdir: Path, task: str, steps: int) -> tuple[Path, Path]:
    """Record the demo's float32 (baseline) and float16 (target) runs with msprobe-cmp's recorder."""
    from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training

    roots = []
    for dtype in ("float32", "float16"):
        root = workdir / f"{task}_{dtype}"
        run_digits_training(root, hidden_dtype=dtype, steps=steps, level="mix", task=task)
        roots.append(root)
    return roots[0], roots[1]


def run_msprobe_compare(msprobe: Path, target_rank: Path, baseline_rank: Path, out: Path) -> dict[str, dict]:
    """Run msprobe 1.2.2's compare on one rank directory pair; return its result rows by NPU name."""
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "compare.json"
    spec.write_text(json.dumps({
        "npu_path": str(target_rank / "dump.json"),
        "bench_path": str(baseline_rank / "dump.json"),
        "stack_path": str(target_rank / "stack.json"),
        "is_print_compare_log": False,
    }))
    res = subprocess.run([str(msprobe), "-f", "mindspore", "compare", "-i", str(spec), "-o", str(out)],
                         capture_output=True, text=True, timeout=900)
    xlsx = sorted(out.glob("compare_result_*.xlsx"))
    if res.returncode != 0 or not xlsx:
        raise RuntimeError(f"msprobe compare failed (exit {res.returncode}): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    python = msprobe.parent / "python"
    rows = subprocess.run([str(python), "-c", READ_XLSX, str(xlsx[-1])], capture_output=True, text=True, check=True)
    return json.loads(rows.stdout)


def _number(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def check_step(ours: dict, theirs: dict[str, dict], mode: str) -> tuple[int, list[str]]:
    """Compare our rows of one unit with msprobe's; return (numbers checked, disagreements)."""
    pairs = [("Cosine", "Cosine", 1e-5, 0.0), ("MaxAbsErr", "MaxAbsErr", 1e-6, 1e-5)] if mode == "tensor" else [
        (f"{s} diff", f"{s} diff", 1e-6, 1e-5) for s in ("Max", "Min", "Mean", "L2norm")]
    checked, bad = 0, []
    for row in ours["rows"]:
        other = theirs.get(row["name"])
        if other is None:
            continue
        for our_key, their_key, atol, rtol in pairs:
            a, b = _number(row["metrics"].get(our_key)), _number(other.get(their_key))
            if a is None or b is None:
                continue
            checked += 1
            if abs(a - b) > atol + rtol * abs(b):
                bad.append(f"{row['name']} {our_key}: msprobe-cmp {a!r}, msprobe {b!r}")
    return checked, bad


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit code (0 all agree, 1 otherwise)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--msprobe-venv", type=Path, default=Path(tempfile.gettempdir()) / "msprobe-1.2.2-venv")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args(argv)
    from msprobe_cmp.comparator import compare
    from msprobe_cmp.dump import load_dump
    from msprobe_cmp.reports import render_json

    msprobe = ensure_msprobe_venv(args.msprobe_venv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="msprobe-compat-"))
    failures = 0
    for task in ("tensor", "statistics"):
        baseline, target = record(workdir, task, args.steps)
        ours = json.loads(render_json(compare(load_dump(target), load_dump(baseline))))
        for unit in ours["units"]:
            label = unit["a"]["label"]
            step_dir = label.split("/")[0]
            theirs = run_msprobe_compare(msprobe, target / step_dir / "rank", baseline / step_dir / "rank",
                                         workdir / f"msprobe_{task}_{step_dir}")
            checked, bad = check_step(unit, theirs, task)
            print(f"{task:10s} {label}: msprobe read {len(theirs)} rows; {checked} numbers checked, "
                  f"{len(bad)} disagree")
            for line in bad[:10]:
                print(f"    {line}")
            failures += len(bad) + (0 if checked else 1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
