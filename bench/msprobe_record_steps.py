"""msprobe 1.2.2's PyTorch recorder on a corpus model's training step: run in a side environment (issue 18).

    <side env>/bin/python bench/msprobe_record_steps.py --model resnet18 [--level mix] [--task statistics]
                                                         [--plain 6] [--recorded 6]

Runs in an environment holding mindstudio-probe 1.2.2, torch 2.13 and the corpus's model packages (pytorchcv,
transformers), never msprobe_cmp (bench/record_overhead_corpus.py ``--msprobe-python`` runs it there).  The model,
batch, loss and optimiser step are those of tests/realmodels/torch_corpus.py, as msprobe-cmp's measurement uses.
msprobe's ``PrecisionDebugger`` is a process-wide singleton whose API wrappers stay installed once started, so plain
and recorded steps cannot alternate as in record_overhead_corpus.py: ``--plain`` plain steps run first, then
``--recorded`` steps recorded by msprobe (``start(model)`` before the forward, ``stop()`` after the backward,
``step()`` after the optimiser), each block's first step not counted.  Prints one JSON line: the median plain and
recorded step times (ms), their ratio and the entries msprobe wrote for one step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))  # the corpus module (tests/realmodels)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--level", default="mix")
    ap.add_argument("--task", default="statistics")
    ap.add_argument("--plain", type=int, default=6)
    ap.add_argument("--recorded", type=int, default=6)
    args = ap.parse_args(argv)

    import torch
    from msprobe.pytorch import PrecisionDebugger

    from tests.realmodels import torch_corpus

    case = torch_corpus.BUILDERS[args.model](torch)
    opt = torch.optim.SGD(case.model.parameters(), lr=0.01)

    def timed(dbg: object) -> float:
        t = time.perf_counter()
        torch_corpus.train_step(case, opt, dbg)
        return time.perf_counter() - t

    plain = [timed(None) for _ in range(args.plain)][1:]
    with tempfile.TemporaryDirectory() as d:
        config = Path(d) / "config.json"
        config.write_text(json.dumps({
            "task": args.task, "dump_path": str(Path(d) / "dump"), "rank": [], "step": [], "level": args.level,
            "enable_dataloader": False,
            args.task: {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        }))
        dbg = PrecisionDebugger(config_path=str(config))
        recorded = [timed(dbg) for _ in range(args.recorded)][1:]
        dumps = sorted((Path(d) / "dump").glob("step*/rank*/dump.json"))
        entries = len(json.loads(dumps[0].read_text())["data"]) if dumps else 0
    p, r = statistics.median(plain), statistics.median(recorded)
    print(json.dumps({"model": args.model, "level": args.level, "task": args.task, "plain_ms": p * 1e3,
                      "recorded_ms": r * 1e3, "ratio": r / p, "entries": entries}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
