"""A real MindSpore model with a data-dependent branch, recorded twice and compared.

Run A takes the branch (one extra ``Functional.tanh`` call and an extra ``Functional.mul``), run B does
not; everything else is the same computation on the same weights.  Exact name matching would pair A's
``Functional.mul.1`` with B's ``Functional.mul.0`` and report every later mul as a difference; the call
alignment must show the extra calls as ``only_in_a`` and pair the rest with their true partners.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump import load_dump

ms = pytest.importorskip("mindspore")


def _record(dump_path: Path, take_branch: bool) -> None:
    from mindspore import nn, ops

    from msprobe_cmp import PrecisionDebugger

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(8, 8)
            self.fc2 = nn.Dense(8, 4)

        def construct(self, x: Any, flag: bool) -> Any:
            h = ops.mul(self.fc1(x), 2.0)
            if flag:  # data-dependent in real models (e.g. a router or a NaN guard)
                h = ops.mul(ops.tanh(h), 1.0)
            h = ops.mul(h, 0.5)
            return self.fc2(h)

    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = Net()
    rs = np.random.RandomState(7)
    for dense in (net.fc1, net.fc2):
        dense.weight.set_data(ms.Tensor(rs.randn(*dense.weight.shape).astype(np.float32) * 0.3))
        dense.bias.set_data(ms.Tensor(np.zeros(dense.bias.shape, np.float32)))
    x = ms.Tensor(np.random.RandomState(0).randn(4, 8).astype(np.float32))
    debugger = PrecisionDebugger(dump_path=str(dump_path), task="tensor", level="mix", framework="mindspore")
    try:
        debugger.start(net)
        net(x, take_branch)
        debugger.stop()
        debugger.step()
    finally:
        debugger.close()


def test_an_extra_branch_shows_as_unpaired_calls_not_shifted_pairs(tmp_path: Path) -> None:
    _record(tmp_path / "a", take_branch=True)
    _record(tmp_path / "b", take_branch=False)
    a, b = load_dump(tmp_path / "a"), load_dump(tmp_path / "b")
    names_a = [e.name for e in a.units[0].entries]
    assert "Functional.tanh.0.forward" in names_a and "Functional.mul.2.forward" in names_a  # the branch ran in A

    c = compare(a, b)
    rows = c.units[0].rows
    only_a = {r.entry_name for r in rows if r.match_class == "only_in_a"}
    assert only_a == {"Functional.tanh.0.forward", "Functional.mul.1.forward"}
    # A's last mul (index 2, after the branch) pairs with B's mul.1: same computation, same values.
    shifted = [r for r in rows if r.entry_name == "Functional.mul.2.forward"]
    assert shifted and all(r.entry_name_b == "Functional.mul.1.forward" for r in shifted)
    assert not [r for r in rows if r.match_class == "shape_mismatch"]
    # Before the branch everything is identical; fc1's rows and the first mul pass with MaxAbsErr 0.
    first = {r.name: r for r in rows}
    assert first["Functional.mul.0.forward.output.0"].metric("MaxAbsErr") == 0.0
    assert first["Cell.fc1.Dense.forward.0.output.0"].metric("MaxAbsErr") == 0.0
    # After it, values differ (tanh changed them): the input of A's mul.2 is tanh(h), B's mul.1 gets h.
    h = np.load(b.units[0].directory / "dump_tensor_data" / "Functional.mul.1.forward.input.0.npy")
    th = np.load(a.units[0].directory / "dump_tensor_data" / "Functional.mul.2.forward.input.0.npy")
    np.testing.assert_allclose(th, np.tanh(h), atol=2e-4)  # MindSpore's CPU tanh is an approximation
    assert first["Functional.mul.2.forward.input.0"].metric("MaxAbsErr") == pytest.approx(
        float(np.max(np.abs(th.astype(np.float64) - h))), rel=1e-12
    )
