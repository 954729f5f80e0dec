"""Helpers for the recorder tests: the msprobe fixture model, trained for real with MindSpore on CPU.

The model is the one behind tests/data/msprobe-1.2.2-mindspore (FIXTURES_README.md):
``blocks = [Dense(16,16), Dense(16,16)]``, one shared ``act = ReLU``, ``head = Dense(16,4)``, MSE loss,
Adam lr 1e-2, weights from ``RandomState(1234)`` (weight ``randn(out,in)/sqrt(in)``, bias
``randn(out)/sqrt(out)``), batch 8 from ``RandomState(0)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest


@dataclass
class Trained:
    """What a training run produced: per-step losses, grads of the first step, final weights."""

    losses: list[np.ndarray] = field(default_factory=list)
    first_grads: dict[str, np.ndarray] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    net: Any = None


def _build(ms: Any) -> Any:
    nn = ms.nn

    class FixtureNet(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.CellList([nn.Dense(16, 16), nn.Dense(16, 16)])
            self.act = nn.ReLU()
            self.head = nn.Dense(16, 4)

        def construct(self, x: Any) -> Any:
            for block in self.blocks:
                x = self.act(block(x))
            return self.head(x)

    net = FixtureNet()
    rs = np.random.RandomState(1234)
    for dense in (net.blocks[0], net.blocks[1], net.head):
        out_dim, in_dim = dense.weight.shape
        dense.weight.set_data(ms.Tensor((rs.randn(out_dim, in_dim) / np.sqrt(in_dim)).astype(np.float32)))
        dense.bias.set_data(ms.Tensor((rs.randn(out_dim) / np.sqrt(out_dim)).astype(np.float32)))
    return net


@pytest.fixture(scope="session")
def ms() -> Any:
    """The mindspore module (tests using it are skipped without MindSpore)."""
    return pytest.importorskip("mindspore")


@pytest.fixture
def failing_kernel(ms: Any) -> tuple[Any, Callable[[], None]]:
    """``(a, run)``: ``a`` a [2, 3] float32 tensor of ones, and ``run()`` the user's code with a kernel that fails
    asynchronously (``a @ b`` with ``b`` [4, 5]: PyNative raises at the next synchronisation, not at the call)
    followed by the user's own synchronisation (``(a² + 1).asnumpy()``)."""
    a = ms.Tensor(np.ones((2, 3), np.float32))
    b = ms.Tensor(np.ones((4, 5), np.float32))

    def run() -> None:
        ms.ops.matmul(a, b)
        (ms.ops.square(a) + 1).asnumpy()

    return a, run


@pytest.fixture(scope="session")
def fixture_data() -> tuple[np.ndarray, np.ndarray]:
    """The fixture batch: x [8, 16], y [8, 4], float32."""
    rs = np.random.RandomState(0)
    return rs.randn(8, 16).astype(np.float32), rs.randn(8, 4).astype(np.float32)


@pytest.fixture
def build_net(ms: Any) -> Callable[[], Any]:
    """Factory of fresh fixture models with the fixture's initial weights."""
    return lambda: _build(ms)


@pytest.fixture
def train(ms: Any, fixture_data: tuple[np.ndarray, np.ndarray]) -> Callable[..., Trained]:
    """``train(steps, debugger=None, net=None)``: the fixture's training loop (start/stop/step per step)."""

    def run(steps: int, debugger: Any = None, net: Any = None) -> Trained:
        net = net if net is not None else _build(ms)
        loss_fn = ms.nn.MSELoss()
        optimizer = ms.nn.Adam(net.trainable_params(), learning_rate=1e-2)
        x, y = ms.Tensor(fixture_data[0]), ms.Tensor(fixture_data[1])

        def forward(x: Any, y: Any) -> Any:
            return loss_fn(net(x), y)

        grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        out = Trained(net=net)
        for step in range(steps):
            if debugger is not None:
                debugger.start(net)
            loss, grads = grad_fn(x, y)
            if debugger is not None:
                debugger.stop()
            if step == 0:
                out.first_grads = {p.name: g.asnumpy().copy() for p, g in zip(optimizer.parameters, grads, strict=True)}
            optimizer(grads)
            if debugger is not None:
                debugger.step()
            out.losses.append(loss.asnumpy().copy())
        out.weights = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
        return out

    return run


# ----------------------------------------------------------------------------- PyTorch twin of the fixture model


@pytest.fixture(scope="session")
def torch_mod() -> Any:
    """The torch module (tests using it are skipped without torch)."""
    return pytest.importorskip("torch")


def build_torch_fixture_net(torch: Any) -> Any:
    """The fixture model in PyTorch (``blocks=[Linear(16,16)]*2``, shared ``act=ReLU``, ``head=Linear(16,4)``),
    weights drawn exactly as in :func:`_build` (RandomState(1234), blocks.0 weight, bias, blocks.1 ..., head)."""
    nn = torch.nn

    class FixtureNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(16, 16), nn.Linear(16, 16)])
            self.act = nn.ReLU()
            self.head = nn.Linear(16, 4)

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = self.act(block(x))
            return self.head(x)

    net = FixtureNet()
    rs = np.random.RandomState(1234)
    with torch.no_grad():
        for lin in (net.blocks[0], net.blocks[1], net.head):
            out_dim, in_dim = lin.weight.shape
            lin.weight.copy_(torch.from_numpy((rs.randn(out_dim, in_dim) / np.sqrt(in_dim)).astype(np.float32)))
            lin.bias.copy_(torch.from_numpy((rs.randn(out_dim) / np.sqrt(out_dim)).astype(np.float32)))
    return net


@pytest.fixture
def torch_train(torch_mod: Any, fixture_data: tuple[np.ndarray, np.ndarray]) -> Callable[..., Trained]:
    """``torch_train(steps, debugger=None, net=None)``: the PyTorch fixture loop (msprobe's: start, zero_grad,
    forward, MSE, backward, Adam step, stop, step), so the optimizer's Tensor calls are recorded too."""
    torch = torch_mod

    def run(steps: int, debugger: Any = None, net: Any = None) -> Trained:
        net = net if net is not None else build_torch_fixture_net(torch)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        loss_fn = torch.nn.MSELoss()  # calls F.mse_loss(..., reduction="mean"), as msprobe's fixture run did
        x, y = torch.from_numpy(fixture_data[0]), torch.from_numpy(fixture_data[1])
        out = Trained(net=net)
        for step in range(steps):
            if debugger is not None:
                debugger.start(net)
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            if step == 0:
                out.first_grads = {n: p.grad.detach().numpy().copy() for n, p in net.named_parameters()}
            optimizer.step()
            if debugger is not None:
                debugger.stop()
                debugger.step()
            out.losses.append(loss.detach().numpy().copy())
        out.weights = {n: p.detach().numpy().copy() for n, p in net.named_parameters()}
        return out

    return run
