"""What recording costs per training step on real model code (issue 14: "not much slower than before").

    .venv/bin/python bench/record_overhead_corpus.py [--models bert,gpt2,llama,resnet18,mindcv-resnet18]
                                                     [--configs "mix statistics"] [--rounds 4] [--block 4]
                                                     [--recorder-src DIR] [--profile N]
                                                     [--msprobe-python PY] [--gc-steps N]

The models are the real-model corpus of the tests: tests/realmodels/torch_corpus.py (PyTorch: transformers' BERT,
GPT-2 and Llama in tiny configurations, pytorchcv's ResNet-18 on 2 images of 224x224, trained with SGD) and
tests/realmodels/mindspore_corpus.py (``mindcv-resnet18``: mindcv's ResNet-18 on 2 images of 64x64, MindSpore
PyNative, ``value_and_grad`` and Momentum; each step ends with ``loss.asnumpy()``, so the asynchronous dispatch is
finished inside the timed region).  One process per
model alternates ``--rounds`` times a block of plain steps (no recorder) and a block of recorded steps (a fresh
``PrecisionDebugger`` per block, closed after it), so other load on the machine disturbs both alike; the first step
of each block is not counted.  Prints the median plain and recorded step times, their ratio and the recorded
entries per step.  ``--recorder-src DIR`` measures the ``msprobe_cmp`` of another checkout (e.g. a ``git worktree``
of an earlier revision) instead of the installed one; the corpus is read from this checkout.  ``--profile N`` then
runs N more recorded steps of each model under cProfile and prints where their time goes (the functions by own time
and by cumulative time, and the share of the steps' wall time spent in the recorder's own modules), issue 18's
profile.

Tensor task (``--configs "mix tensor"``): also prints the MB and files written to ``dump_tensor_data/`` per recorded
step and the time ``dd if=/dev/zero bs=1M`` takes to write as many MB into the same directory's file system (page
cache, no fsync, as the recorder writes) and to create the same files (their sizes) with plain ``open().write()``:
the floors issue 18 compares the task's cost (recorded - plain) with.
``--msprobe-python PY`` (a side environment holding mindstudio-probe 1.2.2, torch 2.13 and the corpus's model
packages) also runs bench/msprobe_record_steps.py there for each PyTorch model and configuration: msprobe's own
plain and recorded step times and how many times faster msprobe-cmp records the same step.
``--gc-steps N`` then runs N plain and N recorded steps of each model back to back and prints their means and the
time Python's garbage collector took in them (issue 18, third part: its full collections, hundreds of milliseconds
every ten or more recorded steps on the transformers, are what medians hide).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))  # the corpus module (tests/realmodels)


def _use_recorder_from(src: Path) -> None:
    """Import ``msprobe_cmp`` from ``src`` instead of the installed (editable) package."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                        and "editable" not in getattr(f, "__name__", "").lower()]
    sys.path.insert(0, str(src))


def _stepper(name: str) -> tuple[Any, str]:
    """``(one_step(debugger or None), framework)`` for corpus model ``name``."""
    if name.startswith("mindcv-"):
        import mindspore as ms

        from tests.realmodels import mindspore_corpus

        case = mindspore_corpus.BUILDERS[name[len("mindcv-"):]](ms)
        grad_step, optimizer = mindspore_corpus.trainer(case, ms)

        def ms_step(dbg: Any) -> None:
            if dbg is not None:
                dbg.start(case.model)
            loss, grads = grad_step()
            if dbg is not None:
                dbg.stop()
            optimizer(grads)
            if dbg is not None:
                dbg.step()
            loss.asnumpy()

        return ms_step, "mindspore"
    import torch

    from tests.realmodels import torch_corpus

    tcase = torch_corpus.BUILDERS[name](torch)
    opt = torch.optim.SGD(tcase.model.parameters(), lr=0.01)
    return (lambda dbg: torch_corpus.train_step(tcase, opt, dbg)), "pytorch"


def _measure(name: str, level: str, task: str, rounds: int, block: int) -> dict[str, float]:
    from msprobe_cmp import PrecisionDebugger

    step, framework = _stepper(name)

    def one_step(dbg: Any) -> float:
        t = time.perf_counter()
        step(dbg)
        return time.perf_counter() - t

    plain: list[float] = []
    recorded: list[float] = []
    entries = 0
    files: list[Path] = []
    for _ in range(rounds):
        plain += [one_step(None) for _ in range(block)][1:]
        with tempfile.TemporaryDirectory() as d:
            dbg = PrecisionDebugger(dump_path=d, level=level, task=task, framework=framework)
            recorded += [one_step(dbg) for _ in range(block)][1:]
            dbg.close()
            entries = len(json.loads((Path(d) / "step0" / "rank" / "dump.json").read_text())["data"])
            files = [f for f in (Path(d) / "step1").rglob("dump_tensor_data/*") if f.is_file()]
            mb = sum(f.stat().st_size for f in files) / 1e6
            dd = _dd_seconds(mb, Path(d)) if files else 0.0
            plain_files = _files_seconds([f.stat().st_size for f in files], Path(d)) if files else 0.0
    p, r = statistics.median(plain), statistics.median(recorded)
    out = {"plain_ms": p * 1e3, "recorded_ms": r * 1e3, "ratio": r / p, "entries": entries}
    if files:
        out.update(tensor_mb=mb, tensor_files=len(files), dd_ms=dd * 1e3, files_ms=plain_files * 1e3)
    return out


def _dd_seconds(mb: float, where: Path) -> float:
    """Seconds ``dd`` takes to write ``mb`` MB (rounded up to whole MiB blocks) into a new file in ``where``."""
    target = where / "dd.bin"
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={max(1, math.ceil(mb / 1.048576))}"],
                   check=True, capture_output=True)
    seconds = time.perf_counter() - t
    target.unlink()
    return seconds


def _files_seconds(sizes: list[int], where: Path) -> float:
    """Seconds plain ``open(..., "wb").write()`` takes to create files of ``sizes`` bytes in a new directory of
    ``where`` (the floor of writing a step's tensor files one by one: this VM's disk spends ~0.5 ms creating a file)."""
    target = where / "floor"
    target.mkdir()
    payload = bytes(max(sizes, default=0))
    t = time.perf_counter()
    for i, size in enumerate(sizes):
        with open(target / f"{i}.npy", "wb") as fh:
            fh.write(memoryview(payload)[:size])
    seconds = time.perf_counter() - t
    for i in range(len(sizes)):
        (target / f"{i}.npy").unlink()
    target.rmdir()
    return seconds


def _msprobe(python: str, name: str, level: str, task: str) -> dict[str, float] | None:
    """bench/msprobe_record_steps.py's result in the side environment ``python`` (None when it failed)."""
    script = Path(__file__).resolve().parent / "msprobe_record_steps.py"
    done = subprocess.run([python, str(script), "--model", name, "--level", level, "--task", task],
                          capture_output=True, text=True, cwd=REPO)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"msprobe 1.2.2 on {name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
        return None
    result: dict[str, float] = json.loads(lines[-1])
    return result


def _profile(name: str, level: str, task: str, steps: int, top: int = 25) -> None:
    """cProfile of ``steps`` recorded steps of ``name`` (after one unprofiled warm-up step), printed."""
    import cProfile
    import io
    import pstats

    from msprobe_cmp import PrecisionDebugger

    step, framework = _stepper(name)
    step(None)
    with tempfile.TemporaryDirectory() as d:
        dbg = PrecisionDebugger(dump_path=d, level=level, task=task, framework=framework)
        step(dbg)  # the hooks' first installation is not what a steady-state step pays
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        for _ in range(steps):
            step(dbg)
        prof.disable()
        wall = time.perf_counter() - t
        dbg.close()
    stats = pstats.Stats(prof)
    ours = sum(tt for (file, _, _), (_, _, tt, _, _) in stats.stats.items()  # type: ignore[attr-defined]
               if "/msprobe_cmp/" in file)
    print(f"--- {name} {level} {task}: {steps} recorded steps under cProfile, {wall / steps * 1e3:.1f} ms a step; "
          f"own time in msprobe_cmp's modules {ours / steps * 1e3:.1f} ms a step")
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
        text = out.getvalue()
        print(f"by {key}:\n" + text[text.find("ncalls"):].rstrip())


def _gc_mean(name: str, level: str, task: str, steps: int) -> dict[str, float]:
    """Means over ``steps`` consecutive steps, plain then recorded (after 3 warm-up steps each), with the time
    Python's garbage collector took in them (``gc.callbacks``) and its full collections: a full collection of a
    large heap takes hundreds of milliseconds every ten or more recorded steps, which medians hide."""
    import gc

    from msprobe_cmp import PrecisionDebugger

    step, framework = _stepper(name)
    spent = [0.0, 0.0, 0.0]  # collection start, seconds collecting, full collections

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            spent[0] = time.perf_counter()
        else:
            spent[1] += time.perf_counter() - spent[0]
            spent[2] += info["generation"] == 2

    def run(dbg: Any) -> tuple[float, float, float]:
        for _ in range(3):
            step(dbg)
        spent[1:] = [0.0, 0.0]
        t = time.perf_counter()
        for _ in range(steps):
            step(dbg)
        return (time.perf_counter() - t) / steps, spent[1] / steps, spent[2]

    gc.callbacks.append(on_gc)
    try:
        plain, plain_gc, _ = run(None)
        with tempfile.TemporaryDirectory() as d:
            dbg = PrecisionDebugger(dump_path=d, level=level, task=task, framework=framework)
            recorded, recorded_gc, full = run(dbg)
            dbg.close()
    finally:
        gc.callbacks.remove(on_gc)
    return {"plain_ms": plain * 1e3, "recorded_ms": recorded * 1e3, "plain_gc_ms": plain_gc * 1e3,
            "gc_ms": recorded_gc * 1e3, "full": full}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,gpt2,llama,resnet18,mindcv-resnet18")
    ap.add_argument("--configs", default="mix statistics", help="';'-separated '<level> <task>' (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--recorder-src", type=Path, help="a checkout whose msprobe_cmp is measured")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also profile N recorded steps a model")
    ap.add_argument("--msprobe-python", help="a side environment's python with mindstudio-probe 1.2.2 and torch")
    ap.add_argument("--gc-steps", type=int, default=0, metavar="N",
                    help="also run N plain then N recorded steps a model: means and the garbage collector's share")
    args = ap.parse_args(argv)
    if args.recorder_src:
        _use_recorder_from(args.recorder_src)
    import msprobe_cmp

    print(f"msprobe_cmp from {Path(msprobe_cmp.__file__).parent}")
    print(f"{'model':10} {'config':18} {'plain ms':>9} {'recorded ms':>12} {'ratio':>6} {'entries':>8}")
    for name in args.models.split(","):
        for config in args.configs.split(";"):
            level, task = config.split()
            m = _measure(name, level, task, args.rounds, args.block)
            tail = ""
            if "tensor_mb" in m:
                tail = (f"  tensor files {m['tensor_mb']:.1f} MB / {m['tensor_files']} files a step; dd of as many MB "
                        f"{m['dd_ms']:.1f} ms, the same files written plainly {m['files_ms']:.1f} ms, against recorded "
                        f"- plain {m['recorded_ms'] - m['plain_ms']:.1f} ms")
            print(f"{name:10} {config:18} {m['plain_ms']:9.1f} {m['recorded_ms']:12.1f} {m['ratio']:6.2f} "
                  f"{m['entries']:8d}{tail}", flush=True)
            if args.msprobe_python and not name.startswith("mindcv-"):
                theirs = _msprobe(args.msprobe_python, name, level, task)
                if theirs is not None:
                    print(f"{'':10} msprobe 1.2.2: plain {theirs['plain_ms']:.1f} ms, recorded "
                          f"{theirs['recorded_ms']:.1f} ms ({theirs['ratio']:.2f}x), {theirs['entries']} entries; "
                          f"msprobe-cmp records the step {theirs['recorded_ms'] / m['recorded_ms']:.1f}x faster",
                          flush=True)
            if args.gc_steps:
                g = _gc_mean(name, level, task, args.gc_steps)
                print(f"{'':10} means over {args.gc_steps} steps: plain {g['plain_ms']:.1f} ms, recorded "
                      f"{g['recorded_ms']:.1f} ms ({g['recorded_ms'] / g['plain_ms']:.2f}x); garbage collector "
                      f"{g['plain_gc_ms']:.1f} ms vs {g['gc_ms']:.1f} ms a step, {g['full']:.0f} full collections "
                      "while recording", flush=True)
            if args.profile:
                _profile(name, level, task, args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
