"""Measure how fast msprobe-cmp compares two dumps and how much memory it needs (issues 7 and 16).

    .venv/bin/python bench/compare_speed.py [--sizes 1000,10000,100000] [--tensor-gb GB] [--quick]
                                            [--profile] [--ranks R [--rank-entries N]] [--workdir DIR] [--json FILE]
                                            [--msprobe-python PATH] [--no-cli]

1. Statistics mode: for each size N, writes a pair of dumps (A and B, one step, one rank) of N forward
   API entries with 3 tensors each (two inputs, one output: msprobe's measurement) with
   :class:`msprobe_cmp.dump.DumpWriter`; B's statistics differ from A's by about 1e-4 relative.  Then, each in
   a fresh child process, on the same pair:

   - the **orjson floor** (issue 16): reading both dump.json files and ``orjson.loads`` of each into Python
     objects, nothing else (the least any reader that builds Python objects pays);
   - the phases: ``load_dump`` (both sides), ``compare`` and writing the five reports
     (``msprobe_cmp.cli.write_reports``) timed separately, with the child's peak RSS (VmHWM; see
     ``_peak_rss_mb``) and the CPU time (``time.process_time``) of loading and of comparing: on a host shared with
     other work the wall time swings by 2x from run to run, the CPU time much less;
   - **end to end through the CLI** (issue 16): ``python -m msprobe_cmp.cli A B -o OUT`` (what the
     ``msprobe-cmp`` command runs), its wall time from start to exit, interpreter start-up
     and imports included, and its peak RSS (see :func:`run_measured`).  The ratio "CLI / orjson floor" is printed
     (issue 16's target: at most 3x; peak RSS at most 500 MB);
   - with ``--msprobe-python PATH`` (the python of a side environment holding mindstudio-probe 1.2.2; how to
     make one: bench/README.md), **msprobe 1.2.2's compare** of the same pair
     (``PATH -m msprobe.msprobe -f mindspore compare -i compare.json -o OUT``, statistics mode, A as "npu" and B as
     "bench", A's stack.json), wall time and peak RSS (its main process, and the sum over its process tree),
     and the speed-up "msprobe wall / msprobe-cmp CLI wall" (issue 16's target: at least 40x).  Without it the
     speed-up is against ``MSPROBE_BASELINE``, msprobe measured once on this machine kind.
2. Tensor mode: a pair of dumps holding ``--tensor-gb`` GB of float32 npy files in total (both sides;
   4 MB tensors and one entry of 16 MB tensors, the largest), B = A + small noise.  One child reads
   every npy file of both sides with ``np.load`` three times (the reference throughput is the first pass, as
   before issue 16; the best of the three, where freed memory is reused, is printed beside it), another
   compares them (:func:`worker_compare_tensor`): first the fused kernel's one-time start-up (importing numba
   and loading the compiled kernel from numba's cache, or compiling it on a first run), then load + compare
   twice in the same process (wall and CPU time of each), then the reports.  The ratio "compare / np.load"
   is printed from the wall and the CPU time of the faster compare, and with the start-up added to it (what
   one command comparing only these tensors pays).  All run on a warm page cache (the files were just written
   and fit in memory).

``--ranks R`` also times a dump of R rank units compared serially and with ``--jobs 2`` (the unit pairs in
two spawned worker processes).  ``--profile`` also prints a cProfile of the largest statistics compare (top
functions by cumulative and internal time).  The default run (1k, 10k, 100k, 0.2 GB of tensors) takes about
3-5 minutes on 2 cores with the code before issue 16's columnar core (the 100k pair: ~30-50 s of phases and ~35-55 s
through the CLI); ``--msprobe-python`` adds msprobe's own time (~5-10 s, ~30 s and ~300-550 s for the three sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: msprobe 1.2.2 ``-f mindspore compare``, statistics mode, N entries x 3 tensors: (seconds, peak RSS MB).
MSPROBE_BASELINE = {1_000: (5.1, 690), 10_000: (17.4, 956), 100_000: (149.0, 3.6 * 1024)}
APIS = ("Functional.linear", "Tensor.add", "Functional.relu", "Functional.softmax", "Tensor.mul", "Mint.matmul")
SMALL_ELEMS = 1024 * 1024  # 4 MB float32 tensors
LARGE_ELEMS = 4 * SMALL_ELEMS  # the largest tensor: 16 MB


def _rss_now_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _peak_rss_mb() -> float:
    """Peak RSS of this process: VmHWM (the high-water mark of this process's own memory map, reset by
    exec).  ``ru_maxrss`` is not used alone: Linux carries the parent's RSS at fork/exec over into it, so a
    child of a large parent would report the parent's size.  The larger of the two is never smaller."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _proc_status_kb(pid: int, field: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _descendants(pid: int) -> list[int]:
    """``pid``'s living descendants (through ``/proc/<pid>/task/<tid>/children``)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def run_measured(cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
                 log: Path | None = None, interval: float = 0.05, rss_limit_mb: float | None = None,
                 timeout: float = 7200) -> dict[str, Any]:
    """Run ``cmd`` (a separate program) and measure its wall time and peak memory.

    Returns ``wall_s`` (start to exit), ``exit`` (its exit code; -9 when killed), ``peak_rss_mb`` (its own peak:
    the larger of its VmHWM sampled every ``interval`` s while it runs and ``ru_maxrss`` from ``wait4`` when it
    ends), ``tree_peak_rss_mb`` (the largest sum of VmRSS over it and its descendants seen by the sampling: msprobe
    1.2.2 compares in a multiprocessing pool) and ``killed_over_mb`` (``rss_limit_mb`` when its RSS passed that
    limit and it was killed, else None: a guard for a shared machine), ``user_s`` and ``sys_s`` (its CPU time and
    that of the children it waited for, from ``wait4``).

    ``ru_maxrss`` alone is exact only for a small caller: Linux carries the caller's RSS at fork into it, so call
    this from a small process (the bench's children are); the VmHWM samples miss at most the last ``interval``.
    stdout and stderr go to ``log`` (or are discarded).
    """
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        hwm_kb = tree_kb = 0
        killed = None
        n = 0
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                wall = time.perf_counter() - t0
                break
            hwm_kb = max(hwm_kb, _proc_status_kb(proc.pid, "VmHWM") or 0)
            if n % 4 == 0:  # the process tree less often: walking /proc costs
                rss = _proc_status_kb(proc.pid, "VmRSS") or 0
                tree = rss + sum(_proc_status_kb(k, "VmRSS") or 0 for k in _descendants(proc.pid))
                tree_kb = max(tree_kb, tree)
                if rss_limit_mb is not None and killed is None and tree / 1024 > rss_limit_mb:
                    killed = rss_limit_mb
                    os.killpg(proc.pid, 9)
            if time.perf_counter() - t0 > timeout and killed is None:
                killed = float("inf")
                os.killpg(proc.pid, 9)
            n += 1
            time.sleep(interval)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    peak_kb = max(hwm_kb, ru.ru_maxrss)
    return {"wall_s": wall, "exit": proc.returncode, "peak_rss_mb": peak_kb / 1024,
            "tree_peak_rss_mb": max(tree_kb, peak_kb) / 1024, "killed_over_mb": killed,
            "user_s": ru.ru_utime, "sys_s": ru.ru_stime}


def cli_command(target: Path, baseline: Path, out: Path, *extra: str) -> list[str]:
    """The msprobe-cmp command as the bench runs it: ``python -m msprobe_cmp.cli`` (what the ``msprobe-cmp`` script
    runs), with ``--force``."""
    return [sys.executable, "-m", "msprobe_cmp.cli", str(target), str(baseline), "-o", str(out), "--force", *extra]


def child_env() -> dict[str, str]:
    """The environment of the bench's children: ``PYTHONPATH`` as given, then the checkout holding this script, so
    ``PYTHONPATH=<worktree>`` measures that worktree's code with this script."""
    given = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=(given + os.pathsep if given else "") + str(REPO))


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ----------------------------------------------------------------------------------------------
# Generating the dump pairs.


def _writers(root: Path, task: str, rank: int = 0) -> tuple[Any, Any]:
    from msprobe_cmp.dump import DumpMeta, DumpWriter

    meta = DumpMeta(task=task, level="L1", framework="mindspore")
    return tuple(DumpWriter(root / side / "step0" / f"rank{rank}", meta) for side in ("A", "B"))  # type: ignore[return-value]


def _names(n: int) -> list[str]:
    counters = dict.fromkeys(APIS, 0)
    out = []
    for i in range(n):
        api = APIS[i % len(APIS)]
        out.append(f"{api}.{counters[api]}.forward")
        counters[api] += 1
    return out


def make_statistics_pair(root: Path, n: int, ranks: int = 1) -> None:
    """Dumps ``root/A`` and ``root/B`` of ``n`` forward entries x 3 tensors, statistics only (``ranks`` units
    ``step0/rank<r>`` of ``n`` entries each)."""
    for r in range(ranks):
        _make_statistics_unit(root, n, r)


def _make_statistics_unit(root: Path, n: int, rank: int) -> None:
    import numpy as np

    from msprobe_cmp.dump import Entry, Map, Seq, TensorLeaf

    rs = np.random.RandomState(n)
    base = rs.standard_normal((n, 3, 4))
    base[..., 3] = np.abs(base[..., 3]) * 100  # Norm >= 0
    noisy = base * (1 + 1e-4 * rs.standard_normal(base.shape))
    counts = (("nan_count", 0), ("pos_inf_count", 0), ("neg_inf_count", 0))
    names = _names(n)
    for writer, stats in zip(_writers(root, "statistics", rank), (base, noisy), strict=True):
        s = stats.tolist()
        for i, name in enumerate(names):
            leaves = [TensorLeaf("mindspore.Tensor", "Float32", (64, 512), *s[i][k], extra=counts) for k in range(3)]
            writer.put(Entry.forward(name, Seq((leaves[0], leaves[1])), Map(), Seq((leaves[2],))))
            writer.set_stack(name, [f"File /work/model.py, line {10 + i % 50}, in construct, \n x = op(x)"])
            writer.set_parent(name, None)
        writer.flush()


def make_tensor_pair(root: Path, total_gb: float) -> tuple[int, int]:
    """Dumps ``root/A`` and ``root/B`` holding ``total_gb`` GB of float32 npy files in all; returns
    ``(tensor count per side, largest tensor bytes)``."""
    import numpy as np

    from msprobe_cmp.dump import Entry, Map, Seq, TensorLeaf
    from msprobe_cmp.dump.naming import tensor_file_name

    rs = np.random.RandomState(0)
    per_side = total_gb * 1e9 / 2
    sizes = [LARGE_ELEMS] * 3
    while sum(sizes) * 4 + 3 * SMALL_ELEMS * 4 <= per_side:
        sizes += [SMALL_ELEMS] * 3
    names = _names(len(sizes) // 3)
    wa, wb = _writers(root, "tensor")
    for e, name in enumerate(names):
        leaves: dict[str, list[Any]] = {"A": [], "B": []}
        for k in range(3):
            n = sizes[3 * e + k]
            shape = (n // 1024, 1024)
            a = rs.standard_normal(shape).astype(np.float32)
            b = a + np.float32(1e-4) * rs.standard_normal(shape).astype(np.float32)
            path = ("input.0", "input.1", "output.0")[k]
            data_name = tensor_file_name(name, path)
            for side, arr, writer in (("A", a, wa), ("B", b, wb)):
                writer.save_tensor(data_name, arr)
                leaves[side].append(TensorLeaf("mindspore.Tensor", "Float32", shape, float(arr.max()),
                                               float(arr.min()), float(arr.mean()),
                                               float(np.linalg.norm(arr.ravel())), data_name=data_name))
        for side, writer in (("A", wa), ("B", wb)):
            lv = leaves[side]
            writer.put(Entry.forward(name, Seq((lv[0], lv[1])), Map(), Seq((lv[2],))))
    wa.flush()
    wb.flush()
    return len(sizes), LARGE_ELEMS * 4


# ----------------------------------------------------------------------------------------------
# Child processes (fresh interpreter each: peak RSS is the compare's own).


def worker_compare(root: str, out: str, profile: str | None, jobs: int = 1) -> dict[str, Any]:
    import msprobe_cmp.cli as cli
    from msprobe_cmp import compare, load_dump
    from msprobe_cmp.comparator import CompareOptions

    baseline_mb = _rss_now_mb()

    def run() -> dict[str, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        a = load_dump(Path(root) / "A")
        b = load_dump(Path(root) / "B")
        c1, t1 = time.process_time(), time.perf_counter()
        comparison = compare(a, b, CompareOptions(jobs=jobs)) if jobs > 1 else compare(a, b)
        c2, t2 = time.process_time(), time.perf_counter()
        cli.write_reports(comparison, Path(out))
        t3 = time.perf_counter()
        return {"load_s": t1 - t0, "compare_s": t2 - t1, "report_s": t3 - t2, "total_s": t3 - t0,
                "load_cpu_s": c1 - c0, "compare_cpu_s": c2 - c1,
                "rows": sum(len(u.rows) for u in comparison.units), "mode": comparison.mode,
                "verdict": comparison.verdict}

    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        res = prof.runcall(run)
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf)
        st.sort_stats("cumulative").print_stats(25)
        st.sort_stats("tottime").print_stats(20)
        Path(profile).write_text(buf.getvalue())
    else:
        res = run()
    return dict(res, peak_rss_mb=_peak_rss_mb(), baseline_rss_mb=baseline_mb,
                report_bytes=_dir_size(Path(out)))


def worker_orjson(root: str) -> dict[str, Any]:
    """The orjson floor: read both sides' dump.json and ``orjson.loads`` each into Python objects (both kept), with
    the cyclic garbage collector off: the floor at its lowest (with it on, its collections of the millions of new
    dicts and lists more than double the time at 100k entries)."""
    import gc

    import orjson

    gc.disable()

    files = [Path(root) / side / "step0" / "rank0" / "dump.json" for side in ("A", "B")]
    t0 = time.perf_counter()
    parse = 0.0
    keep = []
    for f in files:
        data = f.read_bytes()
        t1 = time.perf_counter()
        keep.append(orjson.loads(data))
        parse += time.perf_counter() - t1
        del data
    total = time.perf_counter() - t0
    return {"orjson_s": total, "orjson_parse_only_s": parse, "orjson_peak_rss_mb": _peak_rss_mb(),
            "entries_a": len(keep[0].get("data", {}))}


def worker_cli(root: str, out: str) -> dict[str, Any]:
    """End to end through the CLI, started from this small process (see :func:`run_measured`)."""
    # cwd: not a checkout (``python -m`` puts the working directory first on the path)
    r = run_measured(cli_command(Path(root) / "A", Path(root) / "B", Path(out)), env=child_env(),
                     cwd=str(Path(out).parent), log=Path(out + ".log"))
    if r["exit"] not in (0, 1):
        raise RuntimeError(f"msprobe-cmp exited {r['exit']}: {Path(out + '.log').read_text()[-3000:]}")
    return r


def msprobe_command(python: str, spec: Path, out: Path) -> list[str]:
    """msprobe 1.2.2's compare (``msprobe -f mindspore compare``) run by the side environment's ``python``."""
    return [python, "-m", "msprobe.msprobe", "-f", "mindspore", "compare", "-i", str(spec), "-o", str(out)]


def worker_msprobe(root: str, out: str, python: str) -> dict[str, Any]:
    """msprobe 1.2.2's compare of the pair (statistics: the dumps hold no tensors), A as "npu", B as "bench"."""
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    spec = outdir.parent / (outdir.name + "-compare.json")
    rank = Path(root) / "{}" / "step0" / "rank0"
    spec.write_text(json.dumps({"npu_path": str(rank).format("A") + "/dump.json",
                                "bench_path": str(rank).format("B") + "/dump.json",
                                "stack_path": str(rank).format("A") + "/stack.json",
                                "is_print_compare_log": False}))
    log = outdir.parent / (outdir.name + ".log")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = run_measured(msprobe_command(python, spec, outdir), env=env, cwd=str(outdir), log=log, interval=0.1)
    results = sorted(outdir.glob("compare_result_*.xlsx"))
    if r["exit"] != 0 or not results:
        raise RuntimeError(f"msprobe compare failed (exit {r['exit']}, {len(results)} xlsx): "
                           f"{log.read_text(errors='replace')[-3000:]}")
    r["xlsx_bytes"] = results[-1].stat().st_size
    return r


def worker_read(root: str, passes: int = 3) -> dict[str, Any]:
    """The reference: ``np.load`` of every npy file of both sides (a copy out of the warm page cache), ``passes``
    times; the first pass's wall and CPU time (``read_s``, ``read_cpu_s``) and the fastest pass's."""
    import numpy as np

    files = sorted(Path(root).glob("*/step0/rank0/dump_tensor_data/*.npy"))
    walls, cpus = [], []
    total = 0
    for _ in range(passes):
        c0, t0 = time.process_time(), time.perf_counter()
        total = 0
        for f in files:
            total += np.load(f, allow_pickle=False).nbytes
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"read_s": walls[0], "read_cpu_s": cpus[0], "read_best_s": min(walls), "read_best_cpu_s": min(cpus),
            "bytes": total, "files": len(files), "peak_rss_mb": _peak_rss_mb()}


def worker_compare_tensor(root: str, out: str) -> dict[str, Any]:
    """Tensor mode: the fused kernel's start-up, then load + compare twice, then the reports (see the module
    docstring).  The start-up is timed as ``compute_tensor_metrics`` of a pair of two-chunk float32 arrays (the
    bench's dtype): importing numba and loading (or compiling) the kernel for float32, as the first large
    tensor of a compare would."""
    import numpy as np

    import msprobe_cmp.cli as cli
    from msprobe_cmp import compare, load_dump
    from msprobe_cmp.comparator import metrics

    baseline_mb = _rss_now_mb()
    t0 = time.perf_counter()
    c0 = time.process_time()
    two_chunks = np.ones(2 * metrics.CHUNK_ELEMENTS, np.float32)
    metrics.compute_tensor_metrics(two_chunks, two_chunks)
    res: dict[str, Any] = {"startup_s": time.perf_counter() - t0, "startup_cpu_s": time.process_time() - c0}
    comparison = None
    for k in (1, 2):
        del comparison
        c0, t0 = time.process_time(), time.perf_counter()
        comparison = compare(load_dump(Path(root) / "A"), load_dump(Path(root) / "B"))
        res[f"compare{k}_s"], res[f"compare{k}_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    cli.write_reports(comparison, Path(out))
    res.update(report_s=time.perf_counter() - t0, rows=sum(len(u.rows) for u in comparison.units),
               verdict=comparison.verdict, peak_rss_mb=_peak_rss_mb(), baseline_rss_mb=baseline_mb)
    return res


def _child(kind: str, *args: str) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, "--worker", kind, *args], capture_output=True, text=True,
                         env=child_env(), timeout=7200)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} worker failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return,unused-ignore]


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000", help="statistics dump sizes in API entries "
                   "(default: %(default)s)")
    p.add_argument("--tensor-gb", type=float, default=0.2, help="GB of npy files in the tensor pair, both sides "
                   "together (issue 7 asks for 1; 0 skips; default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="sizes 1000,10000 and 0.1 GB of tensors")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the largest statistics compare")
    p.add_argument("--ranks", type=int, default=0, help="also time a dump of this many rank units of "
                   "--rank-entries entries each, compared serially and with --jobs 2 (0 skips; default: %(default)s)")
    p.add_argument("--rank-entries", type=int, default=5000, help="entries per rank unit for --ranks "
                   "(default: %(default)s)")
    p.add_argument("--workdir", type=Path, help="where the dumps are written (default: a temporary directory)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--msprobe-python", metavar="PATH", help="python of a side environment with mindstudio-probe "
                   "1.2.2 (and mindspore 2.10.0, which its '-f mindspore compare' imports; bench/README.md): also run "
                   "msprobe's compare on each statistics pair and print the measured speed-up")
    p.add_argument("--no-cli", action="store_true", help="skip the orjson floor and the end-to-end CLI run")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        kind, *rest = args.worker
        if kind == "compare":
            profile = rest[2] if len(rest) > 2 and rest[2] != "-" else None
            print(json.dumps(worker_compare(rest[0], rest[1], profile, int(rest[3]) if len(rest) > 3 else 1)))
        elif kind == "make-statistics":
            make_statistics_pair(Path(rest[0]), int(rest[1]), int(rest[2]) if len(rest) > 2 else 1)
            print("{}")
        elif kind == "orjson":
            print(json.dumps(worker_orjson(rest[0])))
        elif kind == "cli":
            print(json.dumps(worker_cli(rest[0], rest[1])))
        elif kind == "msprobe":
            print(json.dumps(worker_msprobe(rest[0], rest[1], rest[2])))
        elif kind == "make-tensor":
            count, largest = make_tensor_pair(Path(rest[0]), float(rest[1]))
            print(json.dumps({"tensors_per_side": count, "largest_bytes": largest}))
        elif kind == "compare-tensor":
            print(json.dumps(worker_compare_tensor(rest[0], rest[1])))
        else:
            print(json.dumps(worker_read(rest[0])))
        return 0
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    tensor_gb = 0.1 if args.quick and args.tensor_gb == 0.2 else args.tensor_gb
    print(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, Any] = {"statistics": [], "tensor": None}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n in sizes:
            root = Path(tmp) / f"stats_{n}"
            t0 = time.perf_counter()
            _child("make-statistics", str(root), str(n))  # generated in a child: this process stays small
            gen_s = time.perf_counter() - t0
            json_mb = (root / "A" / "step0" / "rank0" / "dump.json").stat().st_size / 1e6
            prof = str(Path(tmp) / "profile.txt") if args.profile and n == max(sizes) else None
            r = _child("compare", str(root), str(Path(tmp) / f"out_{n}"), *([prof] if prof else []))
            r.update(entries=n, dump_json_mb=json_mb, generate_s=gen_s)
            results["statistics"].append(r)
            print(f"  {n:>7} entries: load {r['load_s']:.2f} s, compare {r['compare_s']:.2f} s, reports "
                  f"{r['report_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB (CPU time: load "
                  f"{r.get('load_cpu_s', float('nan')):.2f} s, compare {r.get('compare_cpu_s', float('nan')):.2f} s)",
                  flush=True)
            if not args.no_cli:
                r.update(_child("orjson", str(root)))
                cli = _child("cli", str(root), str(Path(tmp) / f"cli_{n}"))
                r.update(cli_s=cli["wall_s"], cli_peak_rss_mb=cli["peak_rss_mb"], cli_exit=cli["exit"],
                         cli_cpu_s=cli["user_s"] + cli["sys_s"], cli_over_orjson=cli["wall_s"] / r["orjson_s"])
                print(f"           orjson floor {r['orjson_s']:.2f} s (parse alone {r['orjson_parse_only_s']:.2f} s); "
                      f"CLI end to end {r['cli_s']:.2f} s, peak RSS {r['cli_peak_rss_mb']:.0f} MB (exit "
                      f"{r['cli_exit']}): {r['cli_over_orjson']:.1f}x the floor", flush=True)
            if args.msprobe_python:
                try:
                    ms = _child("msprobe", str(root), str(Path(tmp) / f"msprobe_{n}"), args.msprobe_python)
                except RuntimeError as exc:
                    r["msprobe_error"] = str(exc)
                    print(f"           msprobe 1.2.2 failed: {exc}", flush=True)
                else:
                    r.update(msprobe_s=ms["wall_s"], msprobe_peak_rss_mb=ms["peak_rss_mb"],
                             msprobe_tree_peak_rss_mb=ms["tree_peak_rss_mb"], msprobe_cpu_s=ms["user_s"] + ms["sys_s"])
                    mine = r.get("cli_s", r["total_s"])
                    r["msprobe_speedup"] = ms["wall_s"] / mine
                    cpu = ""
                    if "cli_cpu_s" in r:  # CPU time (user + sys, its pool included): steadier on a busy host
                        r["msprobe_cpu_speedup"] = r["msprobe_cpu_s"] / r["cli_cpu_s"]
                        cpu = f" ({r['msprobe_cpu_speedup']:.1f}x in CPU time)"
                    print(f"           msprobe 1.2.2 compare {ms['wall_s']:.2f} s, peak RSS {ms['peak_rss_mb']:.0f} MB "
                          f"(process tree {ms['tree_peak_rss_mb']:.0f} MB): msprobe-cmp "
                          f"{r['msprobe_speedup']:.1f}x faster{cpu}", flush=True)
            if prof:
                results["profile"] = Path(prof).read_text()
            shutil.rmtree(root)
        if args.ranks > 0:
            root = Path(tmp) / "ranks"
            _child("make-statistics", str(root), str(args.rank_entries), str(args.ranks))
            runs = {}
            for jobs in (1, 2):
                runs[jobs] = _child("compare", str(root), str(Path(tmp) / f"out_ranks_{jobs}"), "-", str(jobs))
                print(f"  {args.ranks} ranks x {args.rank_entries} entries, jobs {jobs}: load "
                      f"{runs[jobs]['load_s']:.2f} s, compare {runs[jobs]['compare_s']:.2f} s, reports "
                      f"{runs[jobs]['report_s']:.2f} s", flush=True)
            results["ranks"] = {"ranks": args.ranks, "entries": args.rank_entries, "serial": runs[1], "jobs2": runs[2]}
            shutil.rmtree(root)
        if tensor_gb > 0:
            root = Path(tmp) / "tensor"
            t0 = time.perf_counter()
            made = _child("make-tensor", str(root), str(tensor_gb))
            gen_s = time.perf_counter() - t0
            read = _child("read", str(root))
            r = _child("compare-tensor", str(root), str(Path(tmp) / "out_tensor"))
            r.update(made, **{k: v for k, v in read.items() if k.startswith("read_") or k == "bytes"},
                     read_peak_rss_mb=read["peak_rss_mb"], generate_s=gen_s)
            results["tensor"] = r
            shutil.rmtree(root)

    print("\nstatistics mode (N API entries x 3 tensors, one step, one rank); phases in one child, then the CLI end "
          "to end in another; msprobe 1.2.2 " + ("measured in this run" if args.msprobe_python else
                                                 "from MSPROBE_BASELINE (measured earlier on this machine kind)"))
    print("| entries | dump.json per side | load | compare | reports | phases total | phases peak RSS "
          "| orjson floor | CLI end to end | CLI peak RSS | CLI / floor | msprobe total / RSS | speed-up | "
          "memory ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results["statistics"]:
        if "msprobe_s" in r:
            base: tuple[float, float] | None = (r["msprobe_s"], r["msprobe_peak_rss_mb"])
            mark = ""
        else:
            base = MSPROBE_BASELINE.get(r["entries"])
            mark = " (earlier)"
        mine_s = r.get("cli_s", r["total_s"])
        mine_mb = r.get("cli_peak_rss_mb", r["peak_rss_mb"])
        ref = f"{base[0]:.1f} s / {base[1]:.0f} MB{mark}" if base else "-"
        speed = f"{base[0] / mine_s:.1f}x" if base else "-"
        mem = f"{mine_mb / base[1]:.2f}" if base else "-"
        floor = f"{r['orjson_s']:.2f} s" if "orjson_s" in r else "-"
        cli_cols = f"{r['cli_s']:.2f} s | {r['cli_peak_rss_mb']:.0f} MB | {r['cli_over_orjson']:.1f}x" \
            if "cli_s" in r else "- | - | -"
        print(f"| {r['entries']:,} | {r['dump_json_mb']:.1f} MB | {r['load_s']:.2f} s | {r['compare_s']:.2f} s | "
              f"{r['report_s']:.2f} s | {r['total_s']:.2f} s | {r['peak_rss_mb']:.0f} MB | {floor} | {cli_cols} | "
              f"{ref} | {speed} | {mem} |")
    print("Issue 16's targets at 100k: CLI / floor <= 3x, CLI peak RSS <= 500 MB, speed-up >= 40x (speed-up and memory "
          "ratio: msprobe against the CLI end to end when it ran, else against the phases' total)")
    rk = results.get("ranks")
    if rk:
        one, two = rk["serial"], rk["jobs2"]
        print(f"\n{rk['ranks']} rank units x {rk['entries']:,} entries: compare (units) serial "
              f"{one['compare_s']:.2f} s, "
              f"--jobs 2 {two['compare_s']:.2f} s ({one['compare_s'] / two['compare_s']:.2f}x); total with load and "
              f"reports {one['total_s']:.2f} s vs {two['total_s']:.2f} s")
    t = results["tensor"]
    if t:
        total_mb = t["bytes"] / 1e6
        warm = min((1, 2), key=lambda k: t[f"compare{k}_s"])
        cmp_s, cmp_cpu = t[f"compare{warm}_s"], t[f"compare{warm}_cpu_s"]
        print(f"\ntensor mode: {t['tensors_per_side']} float32 tensors per side, {total_mb:.0f} MB of npy in all, "
              f"largest tensor {t['largest_bytes'] / 1e6:.0f} MB (warm page cache)")
        print("| step | wall | throughput | CPU | peak RSS |")
        print("| --- | ---: | ---: | ---: | ---: |")
        print(f"| np.load every npy file (reference: first pass) | {t['read_s']:.3f} s | "
              f"{total_mb / t['read_s']:.0f} MB/s | {t['read_cpu_s']:.3f} s | {t['read_peak_rss_mb']:.0f} MB |")
        print(f"| np.load every npy file (best of 3 passes) | {t['read_best_s']:.3f} s | "
              f"{total_mb / t['read_best_s']:.0f} MB/s | {t['read_best_cpu_s']:.3f} s | |")
        print(f"| fused kernel start-up (once per process) | {t['startup_s']:.3f} s | | {t['startup_cpu_s']:.3f} s | |")
        for k in (1, 2):
            print(f"| msprobe-cmp load + compare ({('first', 'second')[k - 1]}) | {t[f'compare{k}_s']:.3f} s | "
                  f"{total_mb / t[f'compare{k}_s']:.0f} MB/s | {t[f'compare{k}_cpu_s']:.3f} s | "
                  f"{t['peak_rss_mb']:.0f} MB |")
        print(f"| msprobe-cmp reports | {t['report_s']:.2f} s | | | |")
        print(f"compare throughput / reference (first-pass np.load) throughput: {t['read_s'] / cmp_s:.2f} wall, "
              f"{t['read_cpu_s'] / cmp_cpu:.2f} CPU; with the start-up added: "
              f"{t['read_s'] / (cmp_s + t['startup_s']):.2f} wall; against the best np.load pass: "
              f"{t['read_best_s'] / cmp_s:.2f} wall, {t['read_best_cpu_s'] / cmp_cpu:.2f} CPU")
        print(f"peak RSS {t['peak_rss_mb']:.0f} MB = interpreter after imports {t['baseline_rss_mb']:.0f} MB + "
              f"{(t['peak_rss_mb'] - t['baseline_rss_mb']) / (t['largest_bytes'] / 1e6 / 1.048576):.1f} x the "
              f"largest tensor (numba's code included)")
    if "profile" in results:
        print(f"\ncProfile of the {max(sizes):,}-entry statistics compare:\n{results['profile']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
