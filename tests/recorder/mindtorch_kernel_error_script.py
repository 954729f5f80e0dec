"""Run in the mindtorch environment by test_recorder_mindtorch.py: a failing kernel of the training's own
(``torch.matmul`` of shapes (2, 3) and (4, 5), whose error MindSpore raises at the next synchronisation) at
step 1 of three, without and then with the recorder (level L1); writes what the training saw to result.json."""

import json
import sys

import mindtorch  # noqa: F401  (makes "import torch" resolve to mindtorch)
import torch

from msprobe_cmp import PrecisionDebugger

out_dir = sys.argv[1]
a = torch.ones(2, 3)
b = torch.ones(4, 5)
x = torch.ones(2, 3)


def run(dbg):
    """One line per step: the value of the step's sync, or the error the training's sync raised there."""
    seen = []
    for step in range(3):
        if dbg is not None:
            dbg.start()
        try:
            if step == 1:
                torch.matmul(a, b)  # fails in the kernel, not at the call
            seen.append(float((torch.square(x) + 1).sum().asnumpy()))
        except Exception as exc:
            seen.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
        if dbg is not None:
            dbg.stop()
            dbg.step()
    return seen


plain = run(None)
dbg = PrecisionDebugger(dump_path=out_dir + "/dump", level="L1")
recorded = run(dbg)
dbg.close()
with open(out_dir + "/result.json", "w") as f:
    json.dump({"plain": plain, "recorded": recorded}, f)
