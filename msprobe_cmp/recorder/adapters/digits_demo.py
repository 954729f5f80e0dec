"""A small MLP trained on scikit-learn's bundled digits with MindSpore, recorded with PrecisionDebugger.

The recorder's own training workload (its tests train it at every level and task) and the digits data of
``msprobe-cmp demo`` (:mod:`msprobe_cmp.recorder.adapters.digits_port` takes :func:`load_digits_standardized` and
:func:`initial_weights` from here).  Two runs that differ only in ``hidden_dtype`` give a precision change to
compare: ``"float16"`` computes the two hidden ``nn.Dense`` layers in float16 (``Cell.to_float``, mixed
precision as users apply it; MindSpore 2.10 has CPU kernels for it) while everything else stays
float32.  Both runs start from identical weights (numpy ``RandomState(seed)``) and see the same
batches, so every entry name matches between the runs and the first difference appears in the
first hidden layer (``Primitive.matmul.MatMul.0.forward``, whose input is cast to float16).

Needs mindspore and scikit-learn (no download: ``load_digits`` ships with scikit-learn).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from msprobe_cmp.errors import ConfigError, MissingFrameworkError
from msprobe_cmp.recorder.adapters.mindspore import import_mindspore
from msprobe_cmp.recorder.debugger import PrecisionDebugger

HIDDEN_DTYPES = ("float32", "float16")
LAYER_SIZES = (64, 64, 64, 10)
BATCH_SIZE = 64
LEARNING_RATE = 0.5


def load_digits_standardized() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1797 × 64 pixel values 0..16, labels 0..9), standardized per feature.

    Returns:
        ``(features float32 [1797, 64], labels int32 [1797])``; constant features become 0.

    Raises:
        MissingFrameworkError: when scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingFrameworkError("scikit-learn", "mindspore") from None
    digits = load_digits()
    x = np.asarray(digits.data, dtype=np.float64)
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return x.astype(np.float32), np.asarray(digits.target, dtype=np.int32)


def digits_batches(steps: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``steps`` training batches of :data:`BATCH_SIZE` both demos use: features float32 [64, 64] and labels int32
    [64] of :func:`load_digits_standardized`, taken in a fixed permutation drawn from ``RandomState(seed)``.

    Raises:
        MissingFrameworkError: when scikit-learn is not installed.
    """
    features, labels = load_digits_standardized()
    order = np.random.RandomState(seed).permutation(len(labels))
    out = []
    for step in range(steps):
        start = (step * BATCH_SIZE) % (len(order) - BATCH_SIZE)
        idx = order[start : start + BATCH_SIZE]
        out.append((features[idx], labels[idx]))
    return out


def initial_weights(seed: int, sizes: tuple[int, ...] = LAYER_SIZES) -> list[tuple[np.ndarray, np.ndarray]]:
    """Weights ``[out, in]`` and biases ``[out]`` of each dense layer of an MLP of widths ``sizes`` (input first),
    uniform in ±1/sqrt(fan_in), drawn in that order from one ``np.random.RandomState(seed)`` (float32)."""
    rs = np.random.RandomState(seed)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / np.sqrt(fan_in)
        w = rs.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
        b = rs.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
        layers.append((w, b))
    return layers


def build_mlp(hidden_dtype: str, seed: int) -> Any:
    """The MLP 64→64→64→10 with ReLU (``fc1``, ``fc2``, ``out``, shared ``relu``), fixed initial weights.

    With ``hidden_dtype="float16"`` the hidden layers run in float16 and their result is cast back
    to float32 before the output layer (the same cast runs in float32 mode, so names match).
    """
    ms = import_mindspore()
    nn = ms.nn

    class DigitsMLP(nn.Cell):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(LAYER_SIZES[0], LAYER_SIZES[1])
            self.fc2 = nn.Dense(LAYER_SIZES[1], LAYER_SIZES[2])
            self.out = nn.Dense(LAYER_SIZES[2], LAYER_SIZES[3])
            self.relu = nn.ReLU()

        def construct(self, x: Any) -> Any:
            x = self.relu(self.fc1(x))
            x = self.relu(self.fc2(x))
            return self.out(ms.ops.cast(x, ms.float32))

    net = DigitsMLP()
    for dense, (w, b) in zip((net.fc1, net.fc2, net.out), initial_weights(seed), strict=True):
        dense.weight.set_data(ms.Tensor(w))
        dense.bias.set_data(ms.Tensor(b))
    if hidden_dtype == "float16":
        net.fc1.to_float(ms.float16)
        net.fc2.to_float(ms.float16)
    return net


def run_digits_training(
    dump_path: str | Path | None,
    *,
    hidden_dtype: str = "float32",
    steps: int = 5,
    level: str = "mix",
    task: str = "statistics",
    seed: int = 0,
    summary_mode: str = "statistics",
    async_dump: bool = False,
    name_list: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Train the digits MLP for ``steps`` SGD steps, recording every step under ``dump_path``.

    Args:
        dump_path: dump root (``step<N>/rank/`` below it); None trains without recording.
        hidden_dtype: ``"float32"`` or ``"float16"`` (hidden layers in float16).
        steps: number of training steps (one batch of 64 each; batches follow a fixed permutation).
        level, task: the recording level (``L0``/``L1``/``mix``/``debug``) and task
            (``statistics``/``tensor``/``structure``).  At ``debug`` the logits and the loss of every
            step are recorded with ``save()`` (with their gradients).
        seed: seeds the initial weights and the batch order.
        summary_mode: ``"statistics"`` or ``"md5"``.
        async_dump: msprobe's ``async_dump`` (statistics stay on the device until ``stop()``/``step()``).
        name_list: msprobe's ``list`` filter (required by the tensor task under ``async_dump``).

    Returns:
        ``{"losses": [float per step], "train_accuracy": float (after training, whole set),
        "hidden_dtype", "steps", "level", "task", "dump_path": str | None}``.

    Raises:
        ConfigError: on an unknown ``hidden_dtype`` or invalid recording options.
        MissingFrameworkError: when mindspore or scikit-learn is missing.
    """
    if hidden_dtype not in HIDDEN_DTYPES:
        raise ConfigError(f"arguments: hidden_dtype: expected one of {', '.join(HIDDEN_DTYPES)}, got {hidden_dtype!r}")
    if steps < 1:
        raise ConfigError(f"arguments: steps: expected a positive integer, got {steps}")
    ms = import_mindspore()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(seed)
    features, labels = load_digits_standardized()  # the whole set, for the accuracy after training
    batches = digits_batches(steps, seed)
    net = build_mlp(hidden_dtype, seed)
    loss_fn = ms.nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = ms.nn.SGD(net.trainable_params(), learning_rate=LEARNING_RATE)

    debugger = None
    if dump_path is not None:
        config = {
            "dump_path": str(dump_path),
            "task": task,
            "level": level,
            "async_dump": async_dump,
            task: {"summary_mode": summary_mode, "list": list(name_list)},
        }
        with tempfile.TemporaryDirectory() as tmp:
            config_path = Path(tmp) / "config.json"
            config_path.write_text(json.dumps(config), encoding="utf-8")
            debugger = PrecisionDebugger(config_path, framework="mindspore")

    def forward(x: Any, y: Any) -> Any:
        logits = net(x)
        loss = loss_fn(logits, y)
        if debugger is not None and level == "debug":
            debugger.save(logits, "logits")
            debugger.save(loss, "loss")
        return loss

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    losses: list[float] = []
    try:
        for batch_x, batch_y in batches:
            x, y = ms.Tensor(batch_x), ms.Tensor(batch_y)
            if debugger is not None:
                debugger.start(net)
            loss, grads = grad_fn(x, y)
            if debugger is not None:
                debugger.stop()
            optimizer(grads)
            if debugger is not None:
                debugger.step()
            losses.append(float(loss.asnumpy()))
    finally:
        if debugger is not None:
            debugger.close()
    logits = net(ms.Tensor(features)).asnumpy()
    accuracy = float(np.mean(np.argmax(logits, axis=1) == labels))
    return {
        "losses": losses,
        "train_accuracy": accuracy,
        "hidden_dtype": hidden_dtype,
        "steps": steps,
        "level": level,
        "task": task,
        "dump_path": None if dump_path is None else str(dump_path),
    }
