"""The port demo's workload: a digits classifier written in PyTorch, its MindSpore port, and the port with one bug.

The model (both frameworks, the same attribute names, so the cell paths agree: ``Cell.bn2.BatchNorm1d.forward.0``
↔ ``Module.bn2.BatchNorm1d.forward.0``)::

    fc1 = Linear/Dense(64, 32), bn1 = BatchNorm1d(32), fc2 = Linear/Dense(32, 32), bn2 = BatchNorm1d(32),
    act = ReLU() (shared), out = Linear/Dense(32, 10)
    forward: act(bn1(fc1(x))) -> act(bn2(fc2(.))) -> out(.)          [batch, 64] float32 -> [batch, 10] float32

trained with cross-entropy (mean) and plain SGD (learning rate :data:`LEARNING_RATE`, no momentum) on batches of
:data:`~msprobe_cmp.recorder.adapters.digits_demo.BATCH_SIZE` of scikit-learn's digits
(:func:`~msprobe_cmp.recorder.adapters.digits_demo.load_digits_standardized`).
Every run starts from the same weights (:func:`~msprobe_cmp.recorder.adapters.digits_demo.initial_weights`, one
numpy ``RandomState(seed)``; BatchNorm's scale 1, shift 0, moving mean 0, moving variance 1: both frameworks'
defaults) and sees the same batches (a fixed permutation drawn from ``RandomState(seed)``).

The port's one convention to translate is BatchNorm's momentum: PyTorch's ``momentum=0.1`` is the weight of the
new batch statistics, MindSpore's ``momentum`` is the weight of the old moving statistics, so the correct port
passes ``momentum=0.9`` (:data:`MINDSPORE_MOMENTUM`).  The buggy port (``port="bug"``) copies PyTorch's number
into :data:`BUG_CELL` (``bn2``): its moving mean and variance become 0.1·old + 0.9·batch instead of
0.9·old + 0.1·batch.  The training forward normalises with the batch statistics, so the losses do not change;
the moving statistics, which evaluation uses, do.

Needs torch (``port="pytorch"``) or mindspore (the two ports), and scikit-learn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.adapters.digits_demo import (
    digits_batches,
    initial_weights,
    load_digits_standardized,
)
from msprobe_cmp.recorder.adapters.mindspore import import_mindspore
from msprobe_cmp.recorder.adapters.torch_support import import_torch
from msprobe_cmp.recorder.debugger import PrecisionDebugger

#: The runs :func:`run_port_training` knows: the PyTorch original, its correct MindSpore port, the buggy port.
PORTS = ("pytorch", "mindspore", "bug")
LAYER_SIZES = (64, 32, 32, 10)
LEARNING_RATE = 0.1
TORCH_MOMENTUM = 0.1  # PyTorch's BatchNorm default: weight of the batch statistics
MINDSPORE_MOMENTUM = 1.0 - TORCH_MOMENTUM  # MindSpore's convention: weight of the old moving statistics
#: The cell the buggy port changes (its attribute name on both sides).
BUG_CELL = "bn2"
BUG_DESCRIPTION = (f"the port builds {BUG_CELL} as BatchNorm1d(32, momentum={TORCH_MOMENTUM}), PyTorch's number, but "
                   f"MindSpore's momentum weighs the old moving statistics: PyTorch's {TORCH_MOMENTUM} is MindSpore's "
                   f"{MINDSPORE_MOMENTUM}")


def require_frameworks() -> None:
    """Check that every run can start: torch, mindspore and scikit-learn import.

    Raises:
        MissingFrameworkError: the first one missing, with the extra that installs it.
    """
    import_torch("pytorch")
    import_mindspore()
    load_digits_standardized()


def _build_torch(seed: int, bias: bool) -> Any:
    torch = import_torch("pytorch")
    nn = torch.nn

    class DigitsNet(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(LAYER_SIZES[0], LAYER_SIZES[1], bias=bias)
            self.bn1 = nn.BatchNorm1d(LAYER_SIZES[1], momentum=TORCH_MOMENTUM)
            self.fc2 = nn.Linear(LAYER_SIZES[1], LAYER_SIZES[2], bias=bias)
            self.bn2 = nn.BatchNorm1d(LAYER_SIZES[2], momentum=TORCH_MOMENTUM)
            self.act = nn.ReLU()
            self.out = nn.Linear(LAYER_SIZES[2], LAYER_SIZES[3])

        def forward(self, x: Any) -> Any:
            x = self.act(self.bn1(self.fc1(x)))
            x = self.act(self.bn2(self.fc2(x)))
            return self.out(x)

    net = DigitsNet()
    with torch.no_grad():
        for linear, (w, b) in zip((net.fc1, net.fc2, net.out), initial_weights(seed, LAYER_SIZES), strict=True):
            linear.weight.copy_(torch.from_numpy(w))
            if linear.bias is not None:
                linear.bias.copy_(torch.from_numpy(b))
    return net


def _build_mindspore(seed: int, bug: bool, bias: bool) -> Any:
    ms = import_mindspore()
    nn = ms.nn

    class DigitsNet(nn.Cell):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(LAYER_SIZES[0], LAYER_SIZES[1], has_bias=bias)
            self.bn1 = nn.BatchNorm1d(LAYER_SIZES[1], momentum=MINDSPORE_MOMENTUM)
            self.fc2 = nn.Dense(LAYER_SIZES[1], LAYER_SIZES[2], has_bias=bias)
            # the bug: PyTorch's number in MindSpore's convention
            self.bn2 = nn.BatchNorm1d(LAYER_SIZES[2], momentum=TORCH_MOMENTUM if bug else MINDSPORE_MOMENTUM)
            self.act = nn.ReLU()
            self.out = nn.Dense(LAYER_SIZES[2], LAYER_SIZES[3])

        def construct(self, x: Any) -> Any:
            x = self.act(self.bn1(self.fc1(x)))
            x = self.act(self.bn2(self.fc2(x)))
            return self.out(x)

    net = DigitsNet()
    for dense, (w, b) in zip((net.fc1, net.fc2, net.out), initial_weights(seed, LAYER_SIZES), strict=True):
        dense.weight.set_data(ms.Tensor(w))
        if dense.has_bias:
            dense.bias.set_data(ms.Tensor(b))
    return net


def run_port_training(
    dump_path: str | Path | None,
    *,
    port: str,
    steps: int = 3,
    level: str = "mix",
    task: str = "tensor",
    seed: int = 0,
    bias_before_norm: bool = False,
) -> dict[str, Any]:
    """Train one of the three runs for ``steps`` SGD steps, recording every step under ``dump_path``.

    Each step: ``debugger.start(net)``, forward, loss, backward (``loss.backward()`` / ``value_and_grad``),
    ``debugger.stop()``, the optimizer update (not recorded), ``debugger.step()``.

    Args:
        dump_path: dump root (``step<N>/rank/`` below it); None trains without recording.
        port: ``"pytorch"`` (the original), ``"mindspore"`` (its correct port) or ``"bug"`` (the port with
            :data:`BUG_CELL`'s momentum in the wrong convention).
        steps: training steps (≥ 1), one batch of 64 each.
        level, task: the recording level and task (``PrecisionDebugger``'s).
        seed: seeds the initial weights and the batch order.
        bias_before_norm: give ``fc1`` and ``fc2`` a bias (the demo's have none, as layers before a BatchNorm are
            usually written).  Their bias gradient is then zero but for rounding (BatchNorm removes the mean):
            ~1e-8 on both sides, with a Cosine between them that is a random number (a test of the comparator's
            rounding-noise rule).

    Returns:
        ``{"port", "losses": [float per step], "moving_mean": float32 [32] and "moving_variance": float32 [32]
        (``bn2``'s after the last step), "dump_path": str | None}``.

    Raises:
        ConfigError: an unknown ``port``, ``steps`` < 1 or invalid recording options.
        MissingFrameworkError: torch, mindspore or scikit-learn (whichever the run needs) is not installed.
    """
    if port not in PORTS:
        raise ConfigError(f"arguments: port: expected one of {', '.join(PORTS)}, got {port!r}")
    if steps < 1:
        raise ConfigError(f"arguments: steps: expected a positive integer, got {steps}")
    batches = digits_batches(steps, seed)
    framework = "pytorch" if port == "pytorch" else "mindspore"
    train = _train_torch if port == "pytorch" else _train_mindspore
    debugger = None
    if dump_path is not None:  # built before the model, as the recorder asks
        debugger = PrecisionDebugger(dump_path=str(dump_path), task=task, level=level, framework=framework)
    net, step_fn, finish = train(seed, port == "bug", bias_before_norm)
    losses: list[float] = []
    # One PyTorch thread while training: PyTorch's CPU kernels split a reduction between threads, so the thread count
    # (the machine's cores, or OMP_NUM_THREADS) changes the sum order and the losses' last digits (2.2080584 with
    # one thread, 2.2080586 with two on one machine).  The CPU's vector width still moves the last bit (2.2080586
    # with one thread on another), so a printed loss may differ by one in its sixth decimal.  Restored after.
    torch = import_torch("pytorch") if port == "pytorch" else None
    threads = torch.get_num_threads() if torch is not None else 0
    if torch is not None:
        torch.set_num_threads(1)
    try:
        for x, y in batches:
            if debugger is not None:
                debugger.start(net)
            loss, update = step_fn(x, y)
            if debugger is not None:
                debugger.stop()
            update()
            if debugger is not None:
                debugger.step()
            losses.append(loss)
    finally:
        if debugger is not None:
            debugger.close()
        if torch is not None:
            torch.set_num_threads(threads)
    mean, variance = finish()
    return {"port": port, "losses": losses, "moving_mean": mean, "moving_variance": variance,
            "dump_path": None if dump_path is None else str(dump_path)}


def _train_torch(seed: int, bug: bool, bias: bool) -> tuple[Any, Any, Any]:
    """The PyTorch model and its step (``(x, y) -> (loss, update)``) and final-state reader."""
    torch = import_torch("pytorch")
    torch.manual_seed(seed)
    net = _build_torch(seed, bias)
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)

    def step_fn(x: np.ndarray, y: np.ndarray) -> tuple[float, Any]:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y.astype(np.int64)))
        loss.backward()
        return float(loss.detach()), optimizer.step

    def finish() -> tuple[np.ndarray, np.ndarray]:
        bn = getattr(net, BUG_CELL)
        return bn.running_mean.detach().numpy().copy(), bn.running_var.detach().numpy().copy()

    return net, step_fn, finish


def _train_mindspore(seed: int, bug: bool, bias: bool) -> tuple[Any, Any, Any]:
    """The MindSpore port (with the bug when ``bug``) and its step and final-state reader."""
    ms = import_mindspore()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(seed)
    net = _build_mindspore(seed, bug, bias)
    net.set_train(True)
    optimizer = ms.nn.SGD(net.trainable_params(), learning_rate=LEARNING_RATE)

    def forward(x: Any, y: Any) -> Any:
        return ms.ops.cross_entropy(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def step_fn(x: np.ndarray, y: np.ndarray) -> tuple[float, Any]:
        loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
        return float(loss.asnumpy()), lambda: optimizer(grads)

    def finish() -> tuple[np.ndarray, np.ndarray]:
        bn = getattr(net, BUG_CELL)
        return bn.moving_mean.asnumpy().copy(), bn.moving_variance.asnumpy().copy()

    return net, step_fn, finish
