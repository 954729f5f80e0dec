"""Measure the parent's memory and the wall time of comparing many ranks through ``--scheduler`` (issue 16).

    .venv/bin/python bench/ranks_memory.py [--ranks 16,32,64] [--entries 10000] [--serial-ranks R] [--quick]
                                           [--workers 2] [--rss-limit-mb 8000] [--workdir DIR] [--json FILE]

1. Writes one dump pair (A and B, one step) of max(``--ranks``) rank units of ``--entries`` forward API entries x 3
   tensors each, statistics only, with ``compare_speed.py``'s writer (imported, not copied: every rank holds the
   same entries, B = A x (1 + 1e-4 noise)), two writer processes at a time.  The pairs of fewer ranks are views of
   its first R ranks (hard links).
2. Starts a ``distributed.LocalCluster`` of ``--workers`` worker processes (one thread each) in this process, and
   for each R runs ``python -m msprobe_cmp.cli A B -o OUT --scheduler <its address>`` (what the ``msprobe-cmp``
   command runs) from a small child process that samples the CLI's VmHWM and reads its ``ru_maxrss`` when it ends
   (``compare_speed.run_measured``): the **parent's peak RSS** (the CLI process; the Dask workers are not its
   children) and its wall time, start-up and report writing included, plus the workers' peak RSS
   (cumulative over the runs: a worker process lives through all of them).  A CLI whose process tree passes
   ``--rss-limit-mb`` is killed and shown as such (a guard for a shared machine; the code before the streaming
   work keeps every unit in the parent, ~30 KB per entry).
3. Runs the same comparison serially (no ``--scheduler``) for ``--serial-ranks`` (default: the smallest R) and
   checks that the reports equal the Dask run's: comparison.json parsed (every field: neither timing nor output
   paths are in it; any difference is listed by its JSON path), the other four reports and the units' own pages
   (``report_units/*.html``, written when the rows are more than one report.html holds) byte for byte.

Prints a Markdown table.  Issue 16's target: the parent's peak RSS under 300 MB and flat in R.  The default run
(64 x 10k entries; 16, 32, 64 ranks) took 15.5 minutes on a busy 2-core host (load 4-7) with the code before the
streaming work (writing the dumps 2.4 min; 16 ranks 3.3 min; 32 and 64 ranks stopped by the 8 GB guard; serial
1.3 min); ``--entries 2000`` 4 minutes; ``--quick`` (2 and 4 ranks x 500 entries) under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_speed as cs  # bench/compare_speed.py: the writer and the measured runs

REPORTS = ("comparison.json", "comparison.csv", "junit.xml", "summary.md", "report.html")


def _worker(kind: str, rest: list[str]) -> dict[str, Any]:
    if kind == "make":  # root, entries, first rank, end rank
        for r in range(int(rest[2]), int(rest[3])):
            cs._make_statistics_unit(Path(rest[0]), int(rest[1]), r)
        return {}
    # measure: log, rss limit (MB, 0 = none), the command as a JSON list
    limit = float(rest[1]) or None
    # cwd: the run's own directory (``python -m`` puts the working directory first on the path)
    return cs.run_measured(json.loads(rest[2]), env=cs.child_env(), cwd=str(Path(rest[0]).parent), log=Path(rest[0]),
                           rss_limit_mb=limit)


def _child(kind: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--worker", kind, *args], stdout=subprocess.PIPE,
                            text=True, env=cs.child_env())


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench worker failed (exit {proc.returncode})")
    return json.loads(lines[-1])


def write_pair(root: Path, entries: int, ranks: int, procs: int = 2) -> float:
    """``root/A`` and ``root/B`` of ``ranks`` units ``step0/rank<r>``, written by ``procs`` processes; seconds."""
    t0 = time.perf_counter()
    bounds = [ranks * k // procs for k in range(procs + 1)]
    running = [_child("make", str(root), str(entries), str(lo), str(hi))
               for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]
    for p in running:
        _result(p)
    return time.perf_counter() - t0


def linked_view(full: Path, view: Path, ranks: int) -> None:
    """``view``: the first ``ranks`` rank units of ``full``, every file a hard link."""
    for side in ("A", "B"):
        for r in range(ranks):
            src = full / side / "step0" / f"rank{r}"
            dst = view / side / "step0" / f"rank{r}"
            dst.mkdir(parents=True)
            for f in src.iterdir():
                os.link(f, dst / f.name)


def measure_cli(root: Path, out: Path, limit_mb: float, *extra: str) -> dict[str, Any]:
    cmd = cs.cli_command(root / "A", root / "B", out, *extra)
    r = _result(_child("measure", str(out) + ".log", str(limit_mb), json.dumps(cmd)))
    if r["killed_over_mb"] is None and r["exit"] not in (0, 1):
        raise RuntimeError(f"msprobe-cmp exited {r['exit']}: {Path(str(out) + '.log').read_text()[-3000:]}")
    return r


def json_differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """The JSON paths where ``a`` and ``b`` (parsed JSON) differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}" for k in a.keys() ^ b.keys()]
        for k in a.keys() & b.keys():
            out += json_differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path} (length {len(a)} vs {len(b)})"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_differences(x, y, f"{path}[{i}]")]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
    return [] if same else [path]


def compare_reports(serial: Path, dask: Path) -> dict[str, Any]:
    """Each report of the two runs, equal or not (comparison.json parsed; the others, the units' own pages in
    ``report_units/`` included, byte for byte)."""
    out: dict[str, Any] = {}
    pages = sorted({str(p.relative_to(d)) for d in (serial, dask) for p in (d / "report_units").glob("*.html")})
    if pages:
        same = [(serial / p).exists() and (dask / p).exists()
                and (serial / p).read_bytes() == (dask / p).read_bytes() for p in pages]
        out[f"report_units/ ({len(pages)} pages)"] = "identical" if all(same) else \
            f"{same.count(False)} differ or are missing"
    for name in REPORTS:
        fa, fb = serial / name, dask / name
        if not (fa.exists() and fb.exists()):
            out[name] = "missing"
        elif name == "comparison.json":
            diffs = json_differences(json.loads(fa.read_text()), json.loads(fb.read_text()))
            out[name] = "equal" if not diffs else diffs[:20]
        else:
            out[name] = "identical" if fa.read_bytes() == fb.read_bytes() else "differs"
    return out


def _fmt_run(r: dict[str, Any]) -> tuple[str, str]:
    if r.get("killed_over_mb"):
        return f"killed after {r['wall_s']:.0f} s", f"> {r['killed_over_mb']:.0f} MB (killed)"
    return f"{r['wall_s']:.1f} s", f"{r['peak_rss_mb']:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="16,32,64", help="rank counts to compare (default: %(default)s)")
    p.add_argument("--entries", type=int, default=10000, help="API entries per rank unit (default: %(default)s)")
    p.add_argument("--serial-ranks", type=int, help="rank count also compared serially, reports checked equal "
                   "(default: the smallest of --ranks; 0 skips)")
    p.add_argument("--quick", action="store_true", help="smoke test: ranks 2,4 x 500 entries")
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes (default: %(default)s)")
    p.add_argument("--rss-limit-mb", type=float, default=8000, help="kill a CLI run whose process tree passes this "
                   "RSS (0: no limit; default: %(default)s)")
    p.add_argument("--workdir", type=Path, help="where the dumps are written (default: a temporary directory)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker[0], args.worker[1:])))
        return 0
    ranks = [2, 4] if args.quick else sorted(int(r) for r in args.ranks.split(",") if r.strip())
    entries = 500 if args.quick else args.entries
    serial_r = ranks[0] if args.serial_ranks is None else args.serial_ranks
    started = time.perf_counter()
    print(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}; "
          f"{max(ranks)} ranks x {entries:,} entries", flush=True)
    os.environ["PYTHONPATH"] = cs.child_env()["PYTHONPATH"]  # the Dask workers import msprobe_cmp from it too
    from distributed import Client, LocalCluster

    results: dict[str, Any] = {"entries": entries, "workers": args.workers, "runs": [], "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        full = Path(tmp) / f"ranks{max(ranks)}"
        gen_s = write_pair(full, entries, max(ranks))
        dump_mb = sum(f.stat().st_size for f in (full / "A").rglob("*.json")) / 1e6
        print(f"  wrote {max(ranks)} ranks x {entries:,} entries in {gen_s:.0f} s ({dump_mb:.0f} MB of json a side)",
              flush=True)
        results.update(generate_s=gen_s, dump_json_mb_per_side=dump_mb)
        roots = {}
        for r in ranks:
            roots[r] = full if r == max(ranks) else Path(tmp) / f"ranks{r}"
            if r != max(ranks):
                linked_view(full, roots[r], r)
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) \
                as cluster, Client(cluster) as client:
            for r in ranks:
                load = os.getloadavg()[0]
                run = measure_cli(roots[r], Path(tmp) / f"out_dask_{r}", args.rss_limit_mb,
                                  "--scheduler", cluster.scheduler_address)
                workers = client.run(cs._peak_rss_mb)
                run.update(ranks=r, how="scheduler", load=load, workers_peak_rss_mb=max(workers.values()))
                results["runs"].append(run)
                wall, rss = _fmt_run(run)
                print(f"  {r} ranks, --scheduler: {wall}, parent peak RSS {rss}, workers' peak RSS so far "
                      f"{run['workers_peak_rss_mb']:.0f} MB (load {load:.2f})", flush=True)
        if serial_r:
            if serial_r not in roots:
                raise SystemExit(f"--serial-ranks {serial_r}: not one of --ranks")
            load = os.getloadavg()[0]
            run = measure_cli(roots[serial_r], Path(tmp) / f"out_serial_{serial_r}", args.rss_limit_mb)
            run.update(ranks=serial_r, how="serial", load=load)
            results["runs"].append(run)
            wall, rss = _fmt_run(run)
            print(f"  {serial_r} ranks, serial: {wall}, peak RSS {rss} (load {load:.2f})", flush=True)
            dask_run = next(d for d in results["runs"] if d["ranks"] == serial_r and d["how"] == "scheduler")
            if run.get("killed_over_mb") or dask_run.get("killed_over_mb"):
                results["reports_equal"] = None
            else:
                results["reports_equal"] = compare_reports(Path(tmp) / f"out_serial_{serial_r}",
                                                           Path(tmp) / f"out_dask_{serial_r}")
    results["bench_s"] = time.perf_counter() - started

    print(f"\n{entries:,} entries x 3 tensors per rank unit, one step; --scheduler on a LocalCluster of {args.workers} "
          "worker processes; parent = the msprobe-cmp process")
    print("| ranks | entries in all | how | wall time | parent peak RSS | added per rank since the row above | "
          "workers' peak RSS | exit |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    prev = None
    for run in results["runs"]:
        wall, rss = _fmt_run(run)
        per = "-"
        if prev is not None and run["how"] == "scheduler" and not run.get("killed_over_mb"):
            per = f"{(run['peak_rss_mb'] - prev['peak_rss_mb']) / (run['ranks'] - prev['ranks']):.0f} MB"
        prev = None if run.get("killed_over_mb") else run
        wk = f"{run['workers_peak_rss_mb']:.0f} MB" if "workers_peak_rss_mb" in run else "-"
        how = "--scheduler" if run["how"] == "scheduler" else "serial"
        print(f"| {run['ranks']} | {run['ranks'] * entries:,} | {how} | {wall} | {rss} | {per} | {wk} | "
              f"{run['exit']} |")
    eq = results.get("reports_equal")
    if eq is not None:
        print(f"\nreports of the serial and --scheduler runs of {serial_r} ranks: "
              + ", ".join(f"{k} {v if isinstance(v, str) else 'differs at ' + ', '.join(v)}" for k, v in eq.items()))
    elif serial_r:
        print("\nreports not checked: a run was killed")
    print(f"issue 16's target: parent peak RSS < 300 MB and flat in R; this run took {results['bench_s'] / 60:.1f} min")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    ok = eq is None or all(v in ("equal", "identical") for v in eq.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
