"""The MindSpore twin of ``examples/torch_api_mlp.py``: same model, weights, data, loss and optimizer.

    python examples/mindspore_twin_mlp.py --dump ./dump_mindspore --steps 2
    msprobe-cmp ./dump_mindspore ./dump_torch          # no mapping file needed: Dense ↔ Linear is built in

Model: ``blocks`` = ``CellList([Dense(16, 16), Dense(16, 16)])``, one shared ``act = ReLU()`` used after each
block, ``head = Dense(16, 4)``: the attribute names equal the PyTorch model's, so cell paths agree
(``Cell.blocks.0.Dense.forward.0`` ↔ ``Module.blocks.0.Linear.forward.0``).  ``nn.Dense`` stores its weight as
[out, in] like ``torch.nn.Linear`` and computes ``x @ W.T + b`` (Primitives ``MatMul(transpose_b=True)`` and
``BiasAdd``).  Weights and data: the recipe of ``torch_api_mlp.py`` (``RandomState(1234)``, ``randn(*shape) /
sqrt(shape[-1])`` per parameter in order; ``RandomState(0)`` for x [8, 16] then y [8, 4]), from
``examples/mlp_recipe.py``, which both examples import.  Loss ``mindspore.ops.mse_loss`` (mean; recorded as
``Functional.mse_loss`` like PyTorch's ``torch.nn.functional.mse_loss``, so the loss rows match by name too),
gradients from ``mindspore.value_and_grad``,
``nn.Adam`` with lr 1e-2, betas 0.9/0.999 (PyTorch's defaults) and ``eps = 1e-8·√(1−β₂)`` (see below).

Adam's ε: PyTorch adds ε to the bias-corrected ``√v̂ = √v / √(1−β₂ᵗ)`` (torch.optim.Adam's documented
algorithm); MindSpore's ``nn.Adam`` folds the corrections into the learning rate and adds ε to the raw ``√v``
(its docstring's formula).  With the same ε the two updates differ wherever a gradient is within a few orders of
ε: here (dead ReLU units, gradients ~1e-7) by up to 5e-4 after two steps.  ``ε_MindSpore = ε_PyTorch·√(1−β₂)``
makes step 1 identical; at step t PyTorch's equivalent ε is then ``ε·√(1−β₂)/√(1−β₂ᵗ)`` (7e-9 at t = 2), so the
weights agree to ~2e-7 after two steps (tests/integration/test_example_agreement.py measures it) and drift apart
slowly only for near-zero gradients in long runs.

``--save-npz FILE`` writes ``losses`` (float64 [steps]), ``x``, ``y``, and the parameters before the first step
(``init.<name>``) and after the last (``param.<name>``), float32, under the PyTorch names.
Without ``--dump`` nothing is recorded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mlp_recipe import LEARNING_RATE, OUT, PARAMETER_SHAPES, WIDTH, make_batch, make_parameters

BETA1, BETA2 = 0.9, 0.999
ADAM_EPS = 1e-8 * (1.0 - BETA2) ** 0.5  # PyTorch's eps 1e-8, moved from sqrt(v_hat) to sqrt(v): see the docstring


class MLP(nn.Cell):
    """Two hidden blocks sharing one ReLU, then a head: [8, 16] → [8, 16] → [8, 16] → [8, 4], float32."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.CellList([nn.Dense(WIDTH, WIDTH), nn.Dense(WIDTH, WIDTH)])
        self.act = nn.ReLU()
        self.head = nn.Dense(WIDTH, OUT)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        """[batch, 16] float32 → [batch, 4] float32."""
        for block in self.blocks:
            x = self.act(block(x))
        return self.head(x)


def build_model() -> MLP:
    """A fresh ``MLP`` holding ``make_parameters()``."""
    net = MLP()
    params = {p.name: p for p in net.trainable_params()}
    if list(params) != [name for name, _ in PARAMETER_SHAPES]:
        raise RuntimeError(f"unexpected parameter names {list(params)}")
    for name, value in make_parameters().items():
        params[name].set_data(ms.Tensor(value))
    return net


@dataclass
class RunResult:
    """Per-step losses (Python floats); parameters before the first and after the last step (name → float32)."""

    losses: list[float] = field(default_factory=list)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    parameters: dict[str, np.ndarray] = field(default_factory=dict)


def run(steps: int = 2, dump: str | None = None, level: str = "mix", task: str = "statistics") -> RunResult:
    """Train ``steps`` steps, recording forward and backward of each with ``PrecisionDebugger`` when ``dump`` is
    a path (the optimizer update is not recorded).  Raises the recorder's ``ConfigError`` for a bad level/task."""
    net = build_model()
    x_np, y_np = make_batch()
    x, y = ms.Tensor(x_np), ms.Tensor(y_np)
    optimizer = nn.Adam(net.trainable_params(), learning_rate=LEARNING_RATE, beta1=BETA1, beta2=BETA2, eps=ADAM_EPS)
    grad_fn = ms.value_and_grad(lambda a, b: ops.mse_loss(net(a), b), None, optimizer.parameters)
    debugger = None
    if dump is not None:
        from msprobe_cmp import PrecisionDebugger

        debugger = PrecisionDebugger(dump_path=dump, task=task, level=level, framework="mindspore")
    result = RunResult()
    result.initial = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    try:
        for _ in range(steps):
            if debugger is not None:
                debugger.start(net)
            loss, grads = grad_fn(x, y)
            if debugger is not None:
                debugger.stop()
            optimizer(grads)
            if debugger is not None:
                debugger.step()
            result.losses.append(float(loss.asnumpy()))
    finally:
        if debugger is not None:
            debugger.close()
    result.parameters = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--dump DIR --steps N --level L --task T [--save-npz FILE]``; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", help="record into this directory (msprobe layout); nothing is recorded without it")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--level", default="mix", choices=["L0", "L1", "mix"])
    parser.add_argument("--task", default="statistics", choices=["statistics", "tensor"])
    parser.add_argument("--save-npz", help="write losses, batch, initial and final parameters to this .npz file")
    args = parser.parse_args(argv)

    result = run(args.steps, args.dump, args.level, args.task)
    for step, loss in enumerate(result.losses):
        print(f"[MindSpore {ms.__version__}] step {step}: loss {loss:.7f}")
    if args.save_npz:
        x, y = make_batch()
        np.savez(args.save_npz, losses=np.array(result.losses, dtype=np.float64), x=x, y=y,
                 **{f"init.{name}": value for name, value in result.initial.items()},
                 **{f"param.{name}": value for name, value in result.parameters.items()})
    if args.dump:
        print(f"[MindSpore {ms.__version__}] dump written to {args.dump}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
