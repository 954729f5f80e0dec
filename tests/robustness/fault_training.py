"""A small MindSpore training run with the recorder on, and a fault injected at step 2 (run as a script).

Usage: ``python fault_training.py MODE DUMP_PATH [TASK]`` with MODE one of

* ``plain``: no recorder (the reference losses);
* ``clean``: recorder on, no fault;
* ``kill``: the process SIGKILLs itself in the middle of step 2's forward pass;
* ``interrupt``: ``KeyboardInterrupt`` raised in the middle of step 2's forward pass (not caught);
* ``enospc``: from step 2 on, every file the dump writer creates sits on a full device (its writes
  fail with ``ENOSPC`` from the kernel: the temporary file's descriptor is opened on ``/dev/full``);
* ``hook_error``: at step 1 the collector raises inside every recording hook of ``relu`` calls.

Prints one JSON line per finished step, ``{"step": i, "loss": float}``, flushed, so the parent test knows
how far training got.  Run with the ``spawn``-safe ``subprocess`` module (never fork after MindSpore ran).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np

STEPS = 4
FAULT_STEP = 2


def main(mode: str, dump_path: str, task: str = "statistics") -> None:
    import mindspore as ms
    from mindspore import nn, ops

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    state = {"step": 0}

    class Fault(nn.Cell):
        """Identity, except that it injects the run's fault during step FAULT_STEP's forward."""

        def construct(self, x):
            if state["step"] == FAULT_STEP:
                if mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if mode == "interrupt":
                    raise KeyboardInterrupt
            return x

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            rng = np.random.RandomState(7)
            self.fc1 = nn.Dense(6, 8, weight_init=ms.Tensor(rng.randn(8, 6).astype(np.float32) / 3),
                                bias_init=ms.Tensor(np.zeros(8, np.float32)))
            self.fault = Fault()
            self.fc2 = nn.Dense(8, 2, weight_init=ms.Tensor(rng.randn(2, 8).astype(np.float32) / 3),
                                bias_init=ms.Tensor(np.zeros(2, np.float32)))

        def construct(self, x):
            return self.fc2(self.fault(ops.relu(self.fc1(x))))

    net = Net()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    data = np.random.RandomState(0).randn(STEPS, 4, 6).astype(np.float32)
    target = np.random.RandomState(1).randn(STEPS, 4, 2).astype(np.float32)

    def forward(x, y):
        return ops.mean((net(x) - y) ** 2)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    debugger = None
    if mode != "plain":
        from msprobe_cmp import PrecisionDebugger

        debugger = PrecisionDebugger(dump_path=dump_path, task=task, level="mix", framework="mindspore")

    if mode == "enospc":
        _fail_writes_from_step(state)
    if mode == "hook_error":
        _fail_relu_collection_at_step(state, 1)

    for i in range(STEPS):
        state["step"] = i
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(ms.Tensor(data[i]), ms.Tensor(target[i]))
        if debugger is not None:
            debugger.stop()
        optimizer(grads)
        if debugger is not None:
            debugger.step()
        print(json.dumps({"step": i, "loss": float(loss.asnumpy())}), flush=True)
    if debugger is not None:
        debugger.close()


def _fail_writes_from_step(state: dict[str, int]) -> None:
    """From step FAULT_STEP on, temporary files of the dump writer get a descriptor on /dev/full."""
    from msprobe_cmp.dump import writer

    real_create = writer.create_temp

    def create_temp(path):  # type: ignore[no-untyped-def]
        fd, name = real_create(path)
        if state["step"] >= FAULT_STEP:
            os.close(fd)
            fd = os.open("/dev/full", os.O_WRONLY)
        return fd, name

    writer.create_temp = create_temp  # type: ignore[attr-defined]


def _fail_relu_collection_at_step(state: dict[str, int], step: int) -> None:
    from msprobe_cmp.recorder.collector import Collector

    real_collect = Collector.collect

    def collect(self, value, *, writer, entry_name, arg_path):  # type: ignore[no-untyped-def]
        if state["step"] == step and "relu" in entry_name.lower():
            raise RuntimeError("injected fault in a recording hook")
        return real_collect(self, value, writer=writer, entry_name=entry_name, arg_path=arg_path)

    Collector.collect = collect  # type: ignore[method-assign]


if __name__ == "__main__":
    main(*sys.argv[1:])
