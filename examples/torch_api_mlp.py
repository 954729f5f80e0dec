"""One small model and training step written once against the PyTorch API; runs on real torch and on mindtorch.

    python examples/torch_api_mlp.py --dump ./dump_torch --steps 2                  # real PyTorch
    python examples/torch_api_mlp.py --dump ./dump_mindtorch --steps 2 --mindtorch  # mindtorch
    python examples/run_on_mindtorch.py --dump ./dump_mindtorch --steps 2           # the same, via the runner

Model (the model of msprobe's fixture dumps in ``tests/data/msprobe-1.2.2-mindspore/``): ``blocks`` =
``ModuleList([Linear(16, 16), Linear(16, 16)])``, one shared ``act = ReLU()`` used after each block, ``head =
Linear(16, 4)``; batch 8; ``F.mse_loss``; ``torch.optim.Adam(lr=1e-2)``.  Weights: ``np.random.RandomState(1234)``,
one ``randn(*shape) / sqrt(shape[-1])`` per parameter in ``named_parameters()`` order (``blocks.0.weight``,
``blocks.0.bias``, ``blocks.1.weight``, ..., ``head.bias``), float32.  Data: ``np.random.RandomState(0)``,
``x = randn(8, 16)`` then ``y = randn(8, 4)``, float32.  This recipe reproduces the parameter and input statistics
msprobe 1.2.2 recorded for that model (``torch_statistics_a`` and ``statistics_a``, step 0) to 1e-7, so those
dumps are an independent oracle for our recordings (the recipe lives in ``examples/mlp_recipe.py``, shared with the
twin).  ``examples/mindspore_twin_mlp.py`` is the MindSpore twin
(same weights, same data, same cell paths).

Each step: gradients cleared (``p.grad = None``), ``debugger.start(model)``, forward, loss, ``loss.backward()``,
``debugger.stop()``, then ``optimizer.step()`` (not recorded), ``debugger.step()``.

**mindtorch** (``--mindtorch``: ``import mindtorch`` runs before ``import torch``, so ``torch`` *is* mindtorch): on
CPU its training is broken (mindnlp 0.5.1 with MindSpore 2.7.0): ``Tensor.backward()`` does nothing (no parameter
gets a gradient), ``optimizer.zero_grad()`` needs ``mindtorch.autograd.profiler``, missing from the wheel, and the
optimizers have no CPU kernels.  So under mindtorch the script runs and records the forward and the loss, calls
``backward()`` (whatever it does is recorded), **skips the optimizer** and says so: every step then repeats step
0's forward.

``--save-npz FILE`` writes, for checks without any recorder, the per-step losses (``losses``, float64 [steps]), the
batch (``x``, ``y``), and the parameters before the first step (``init.<name>``) and after the last (``param.<name>``).
Without ``--dump`` nothing is recorded.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "--mindtorch" in sys.argv[1:]:
    import mindtorch  # noqa: F401  (must come before `import torch`: it makes `import torch` resolve to mindtorch)

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from mlp_recipe import LEARNING_RATE, OUT, PARAMETER_SHAPES, WIDTH, make_batch, make_parameters
from torch import nn


class MLP(nn.Module):
    """Two hidden blocks sharing one ReLU, then a head: [8, 16] → [8, 16] → [8, 16] → [8, 4], float32."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)])
        self.act = nn.ReLU()
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, 16] float32 → [batch, 4] float32."""
        for block in self.blocks:
            x = self.act(block(x))
        return self.head(x)


def is_mindtorch() -> bool:
    """True when ``torch`` is mindtorch (``import mindtorch`` ran first), False for real PyTorch."""
    return "mindtorch" in sys.modules and (getattr(torch, "__file__", "") or "").find("mindtorch") >= 0


def build_model() -> MLP:
    """A fresh ``MLP`` holding ``make_parameters()`` (copied in under ``no_grad``)."""
    model = MLP()
    values = make_parameters()
    params = dict(model.named_parameters())
    if list(params) != [name for name, _ in PARAMETER_SHAPES]:
        raise RuntimeError(f"unexpected parameter order {list(params)}")
    with torch.no_grad():
        for name, value in values.items():
            params[name].copy_(torch.tensor(value))
    return model


@dataclass
class RunResult:
    """What one run produced: per-step losses (Python floats), the parameters the model held before the first
    and after the last step (name → float32 array), and
    whether ``backward()`` gave every parameter a gradient (False under mindtorch on CPU) and the optimizer ran."""

    losses: list[float] = field(default_factory=list)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    parameters: dict[str, np.ndarray] = field(default_factory=dict)
    gradients: bool = True
    optimizer: bool = True


def run(
    steps: int = 2,
    dump: str | None = None,
    level: str = "mix",
    task: str = "statistics",
) -> RunResult:
    """Train ``steps`` steps (recording each with msprobe-cmp's ``PrecisionDebugger`` when ``dump`` is a path).

    Under mindtorch (see the module docstring) the optimizer is skipped.  Raises whatever the recorder raises for
    a bad ``level``/``task`` (``msprobe_cmp.errors.ConfigError``).
    """
    mindtorch = is_mindtorch()
    model = build_model()
    x_np, y_np = make_batch()
    x, y = torch.tensor(x_np), torch.tensor(y_np)
    optimizer = None if mindtorch else torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    debugger = None
    if dump is not None:
        from msprobe_cmp import PrecisionDebugger

        framework = "mindtorch" if mindtorch else "pytorch"
        debugger = PrecisionDebugger(dump_path=dump, task=task, level=level, framework=framework)
    result = RunResult(optimizer=optimizer is not None)
    result.initial = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    try:
        for _ in range(steps):
            for p in model.parameters():  # optimizer.zero_grad() without mindtorch's missing profiler module
                p.grad = None
            if debugger is not None:
                debugger.start(model)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if debugger is not None:
                debugger.stop()
            if any(p.grad is None for p in model.parameters()):
                result.gradients = False
            if optimizer is not None:
                optimizer.step()
            if debugger is not None:
                debugger.step()
            result.losses.append(float(loss.detach().numpy()))
    finally:
        if debugger is not None:
            debugger.close()
    result.parameters = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--dump DIR --steps N --level L --task T [--mindtorch] [--save-npz FILE]``; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", help="record into this directory (msprobe layout); nothing is recorded without it")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--level", default="mix", choices=["L0", "L1", "mix"])
    parser.add_argument("--task", default="statistics", choices=["statistics", "tensor"])
    parser.add_argument("--mindtorch", action="store_true",
                        help="run on mindtorch (when imported as a module, `import mindtorch` must already have run)")
    parser.add_argument("--save-npz", help="write losses, batch, initial and final parameters to this .npz file")
    args = parser.parse_args(argv)
    if args.mindtorch != is_mindtorch():
        wanted = "mindtorch" if args.mindtorch else "real PyTorch"
        got = "mindtorch" if is_mindtorch() else "real PyTorch"
        parser.error(f"--mindtorch asks for {wanted} but `torch` is {got} (use examples/run_on_mindtorch.py)")

    result = run(args.steps, args.dump, args.level, args.task)
    backend = "mindtorch" if is_mindtorch() else f"PyTorch {torch.__version__}"
    for step, loss in enumerate(result.losses):
        print(f"[{backend}] step {step}: loss {loss:.7f}")
    if not result.gradients:
        print(f"[{backend}] backward() gave no parameter gradients (mindtorch on CPU: Tensor.backward() is a no-op)")
    if not result.optimizer:
        print(f"[{backend}] optimizer skipped (mindtorch: no CPU kernels for Adam); every step repeats step 0")
    if args.save_npz:
        x, y = make_batch()
        np.savez(args.save_npz, losses=np.array(result.losses, dtype=np.float64), x=x, y=y,
                 **{f"init.{name}": value for name, value in result.initial.items()},
                 **{f"param.{name}": value for name, value in result.parameters.items()})
    if args.dump:
        print(f"[{backend}] dump written to {args.dump}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
