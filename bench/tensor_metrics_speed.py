"""Throughput and memory of ``compute_tensor_metrics`` on one pair of npy memmaps.

    .venv/bin/python bench/tensor_metrics_speed.py [--elems 16777216] [--dtype float32] [--repeat 3]
        [--chunks 14,16,18] [--workers 1,2]
    PYTHONPATH=<old worktree> .venv/bin/python bench/tensor_metrics_speed.py   # the code at another commit

Writes A (standard normal) and B = A + 1e-4 * noise as ``.npy`` files in a temporary directory, then, in
this process and alternating so that the machine's load affects all alike:

- the reference: ``np.load`` of both files (a copy out of the warm page cache), as ``bench/compare_speed.py``
  measures it;
- ``compute_tensor_metrics`` on the two files opened with ``mmap_mode="r"`` (as ``dump/reader.py`` opens
  them), for each chunk size (``2**k`` elements) and worker count given, when the imported
  ``msprobe_cmp.comparator.metrics`` has ``CHUNK_ELEMENTS`` / ``CHUNK_WORKERS``; once otherwise.

Prints the median time of ``--repeat`` runs, the throughput (bytes of both files / time), its ratio to the
reference's, and the tracemalloc peak of one run (numpy registers its allocations with tracemalloc; the
memmapped file pages are not allocations and are not counted) as a multiple of one file's data bytes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np


def _median_time(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _traced_peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elems", type=int, default=16 * 1024 * 1024, help="elements per tensor (default 16M)")
    p.add_argument("--dtype", default="float32", help="numpy dtype of both tensors (default float32)")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration; the median is printed")
    p.add_argument("--chunks", default="14,16,18", help="chunk sizes to try, as powers of two (default 14,16,18)")
    p.add_argument("--workers", default="1,2", help="worker thread counts to try (default 1,2)")
    args = p.parse_args(argv)

    from msprobe_cmp.comparator import metrics

    configs: list[tuple[int, int] | None] = [None]
    if hasattr(metrics, "CHUNK_ELEMENTS"):
        configs = [(1 << int(k), int(w)) for k in args.chunks.split(",") for w in args.workers.split(",")]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="tensor-metrics-speed-") as tmp:
        fa, fb = Path(tmp) / "a.npy", Path(tmp) / "b.npy"
        a = rng.standard_normal(args.elems).astype(args.dtype)
        np.save(fa, a)
        np.save(fb, (a + 1e-4 * rng.standard_normal(args.elems)).astype(args.dtype))
        del a
        nbytes = 2 * args.elems * np.dtype(args.dtype).itemsize

        def read() -> None:
            np.load(fa, allow_pickle=False)
            np.load(fb, allow_pickle=False)

        def compare() -> None:
            metrics.compute_tensor_metrics(np.load(fa, mmap_mode="r"), np.load(fb, mmap_mode="r"))

        read()
        compare()  # warm the page cache and the imports
        print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {args.elems} x {args.dtype} per side, "
              f"{nbytes / 1e6:.0f} MB in all, median of {args.repeat}")
        print("| configuration | time | throughput | / read | tracemalloc peak / one tensor |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for cfg in configs:
            if cfg is not None:
                metrics.CHUNK_ELEMENTS, metrics.CHUNK_WORKERS = cfg  # type: ignore[attr-defined]
            t_read = _median_time(read, args.repeat)
            t_cmp = _median_time(compare, args.repeat)
            peak = _traced_peak(compare)
            name = "whole arrays (no CHUNK_ELEMENTS)" if cfg is None else f"chunk 2^{cfg[0].bit_length() - 1}, " \
                f"{cfg[1]} worker(s)"
            print(f"| {name} | {t_cmp:.3f} s | {nbytes / t_cmp / 1e6:.0f} MB/s | {t_read / t_cmp:.3f} | "
                  f"{peak / (nbytes / 2):.3f} ({peak / 1e6:.1f} MB) |")
            print(f"| np.load both files (reference) | {t_read:.3f} s | {nbytes / t_read / 1e6:.0f} MB/s | 1 | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
