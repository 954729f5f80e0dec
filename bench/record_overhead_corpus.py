"""What recording costs per training step on real model code (issue 14: "not much slower than before").

    .venv/bin/python bench/record_overhead_corpus.py [--models bert,gpt2,llama,resnet18,mindcv-resnet18]
                                                     [--configs "mix statistics"] [--rounds 4] [--block 4]
                                                     [--recorder-src DIR] [--profile N]

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
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    for _ in range(rounds):
        plain += [one_step(None) for _ in range(block)][1:]
        with tempfile.TemporaryDirectory() as d:
            dbg = PrecisionDebugger(dump_path=d, level=level, task=task, framework=framework)
            recorded += [one_step(dbg) for _ in range(block)][1:]
            dbg.close()
            entries = len(json.loads((Path(d) / "step0" / "rank" / "dump.json").read_text())["data"])
    p, r = statistics.median(plain), statistics.median(recorded)
    return {"plain_ms": p * 1e3, "recorded_ms": r * 1e3, "ratio": r / p, "entries": entries}


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,gpt2,llama,resnet18,mindcv-resnet18")
    ap.add_argument("--configs", default="mix statistics", help="';'-separated '<level> <task>' (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--recorder-src", type=Path, help="a checkout whose msprobe_cmp is measured")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also profile N recorded steps a model")
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
            print(f"{name:10} {config:18} {m['plain_ms']:9.1f} {m['recorded_ms']:12.1f} {m['ratio']:6.2f} "
                  f"{m['entries']:8d}", flush=True)
            if args.profile:
                _profile(name, level, task, args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
