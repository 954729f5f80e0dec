"""Record a small MindSpore training run with msprobe-cmp's PrecisionDebugger.

    python examples/train_mindspore_mlp.py --dump-path ./dump_a --level mix --task statistics --steps 3

writes ``./dump_a/step<N>/rank/{dump.json, stack.json, construct.json}`` (plus ``dump_tensor_data/`` with
``--task tensor``).  Record a second run (e.g. after changing the model or its precision) and compare:

    msprobe-cmp ./dump_a ./dump_b
"""

from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from mindspore import nn

from msprobe_cmp.recorder import PrecisionDebugger


class MLP(nn.Cell):
    """Two hidden blocks sharing one ReLU, then a head: 16 → 16 → 16 → 4."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.CellList([nn.Dense(16, 16), nn.Dense(16, 16)])
        self.act = nn.ReLU()
        self.head = nn.Dense(16, 4)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        for block in self.blocks:
            x = self.act(block(x))
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump-path", required=True, help="directory to write the dump to")
    parser.add_argument("--level", default="mix", choices=["L0", "L1", "mix"], help="cells, APIs, or both")
    parser.add_argument("--task", default="statistics", choices=["statistics", "tensor"])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    ms.set_seed(0)
    rng = np.random.RandomState(0)
    x = ms.Tensor(rng.randn(8, 16).astype(np.float32))
    y = ms.Tensor(rng.randn(8, 4).astype(np.float32))

    net = MLP()
    loss_fn = nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)

    with PrecisionDebugger(
        dump_path=args.dump_path, level=args.level, task=args.task, framework="mindspore"
    ) as debugger:
        for step in range(args.steps):
            debugger.start(net)  # hooks are installed once; recording is on for this step
            loss, grads = grad_fn(x, y)  # forward and backward are recorded
            debugger.stop()  # recording off; this step's files are written
            optimizer(grads)
            debugger.step()  # next step directory, counters reset
            print(f"step {step}: loss {float(loss.asnumpy()):.6f}")
    print(f"dump written to {args.dump_path}")


if __name__ == "__main__":
    main()
