"""The MindSpore recorder on real model code (mindcv's ResNet-18: ``out += identity``, BatchNorm through the
``BatchNorm`` Primitive, a ReLU cell used twice per block): training bit-identical, ``Tensor.__iadd__`` recorded
with what it received, BatchNorm's backward captured or declared, every gap declared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.realmodels.conftest import need
from tests.realmodels.walk import floating, undeclared_gaps

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore")

from msprobe_cmp import PrecisionDebugger  # noqa: E402
from msprobe_cmp.recorder.adapters.mindspore import (  # noqa: E402
    NO_GRADIENT_TO_OUTPUT,
    NOT_COPIED_IN_PLACE,
    NOT_COPIED_SIDE_EFFECT,
)
from tests.realmodels import mindspore_corpus  # noqa: E402

STEPS = 3
#: The ResNet-18 blocks in execution order (each runs ``out += identity`` once).
BLOCKS = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


def _build() -> mindspore_corpus.Case:
    need("mindcv.models")
    return mindspore_corpus.resnet18(ms)


def _train(steps: int, dump: Path | None = None, **debugger: Any) -> dict[str, bytes]:
    """``steps`` Momentum steps of a fresh model (recorded into ``dump`` when given: start before the gradient
    computation, stop after it, step after the optimizer): each step's loss (``loss<i>``), then every parameter by
    name (BatchNorm's moving_mean / moving_variance included), as bytes."""
    case = _build()
    grad_step, optimizer = mindspore_corpus.trainer(case, ms)
    dbg = PrecisionDebugger(dump_path=str(dump), framework="mindspore", **debugger) if dump else None
    out: dict[str, bytes] = {}
    for step in range(steps):
        if dbg:
            dbg.start(case.model)
        loss, grads = grad_step()
        if dbg:
            dbg.stop()
        optimizer(grads)
        if dbg:
            dbg.step()
        out[f"loss{step}"] = loss.asnumpy().tobytes()
    if dbg:
        dbg.close()
    names = [name for name, _ in case.model.parameters_and_names()]
    return {**out, **dict(zip(names, mindspore_corpus.state_bytes(case.model), strict=True))}


def _doc(dump: Path, step: int = 0) -> dict[str, Any]:
    return json.loads((dump / f"step{step}" / "rank" / "dump.json").read_text())


@pytest.fixture(scope="module")
def plain() -> dict[str, bytes]:
    """Three steps without the recorder."""
    return _train(STEPS)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """Three mix/statistics steps: the dump and what the training produced (shared by the tests below)."""
    dump = tmp_path_factory.mktemp("resnet18_mix")
    return dump, _train(STEPS, dump, level="mix", task="statistics")


@pytest.mark.parametrize(("level", "task"), [("L0", "statistics"), ("L1", "statistics"), ("mix", "statistics"),
                                             ("L0", "tensor"), ("L1", "tensor"), ("mix", "tensor")])
def test_three_steps_are_bit_identical_with_and_without_the_recorder(
    tmp_path: Path, plain: dict[str, bytes], recording: tuple[Path, dict[str, bytes]], level: str, task: str
) -> None:
    if (level, task) == ("mix", "statistics"):
        dump, recorded = recording
    else:
        dump, recorded = tmp_path, _train(STEPS, tmp_path, level=level, task=task)
    assert list(recorded) == list(plain) and len(plain) == STEPS + 62 + 40  # losses, trainable, BN statistics
    differ = [name for name in plain if plain[name] != recorded[name]]
    assert differ == [], f"{level}/{task}: differ at {differ}"
    assert len({plain[f"loss{i}"] for i in range(STEPS)}) == STEPS  # it trained (three different losses)
    assert _doc(dump, STEPS - 1)["data"]  # and it recorded


def test_the_order_mindspore_sums_gradients_in_is_unchanged(tmp_path: Path) -> None:
    """A tensor feeding three consumers (a hooked cell, an API, a hooked cell) whose gradients sum to 1e8 + 1 - 1e8
    in float32: the result depends on the order MindSpore adds them in (0 or 1).  The recorder's cell backward
    hooks (L0, mix) and Identity copies (L1, mix) must not change that order.  (ResNet-18's tensors have at most two
    consumers, and a sum of two is the same in either order.)"""
    nn, ops = ms.nn, ms.ops

    class Scale(nn.Cell):
        def __init__(self, k: float) -> None:
            super().__init__()
            self.k = k

        def construct(self, x: Any) -> Any:
            return ops.mul(x, self.k)

    class Net(nn.Cell):
        def __init__(self, ks: tuple[float, float, float]) -> None:
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.ones(4, np.float32)), name="w")
            self.a, self.k, self.c = Scale(ks[0]), ks[1], Scale(ks[2])

        def construct(self, x: Any) -> Any:
            h = ops.mul(x, self.w)
            return (self.a(h) + h * self.k + self.c(h)).sum()

    def grad_of_w(ks: tuple[float, float, float], level: str | None) -> bytes:
        net = Net(ks)
        grad_fn = ms.value_and_grad(lambda x: net(x), None, [net.w])
        dbg = PrecisionDebugger(dump_path=str(tmp_path / f"{level}{ks}"), level=level, framework="mindspore") \
            if level else None
        if dbg:
            dbg.start(net)
        _, grads = grad_fn(ms.Tensor(np.ones(4, np.float32)))
        if dbg:
            dbg.stop()
            dbg.close()
        return bytes(grads[0].asnumpy().tobytes())

    results = {}
    for ks in ((1.0, 1e8, -1e8), (1e8, 1.0, -1e8)):
        plain = grad_of_w(ks, None)
        results[ks] = np.frombuffer(plain, np.float32)[0]
        assert [grad_of_w(ks, level) == plain for level in ("L0", "L1", "mix")] == [True] * 3, ks
    assert sorted(results.values()) == [0.0, 1.0]  # the order matters here: 1e8 + 1 - 1e8 is 0 or 1


def _stats(a: np.ndarray) -> dict[str, float]:
    a = a.astype(np.float64)
    return {"Max": float(a.max()), "Min": float(a.min()), "Mean": float(a.mean()), "Norm": float(np.sqrt((a * a).sum()))}


def _same(leaf: dict[str, Any], want: dict[str, float]) -> bool:
    return leaf["Max"] == want["Max"] and leaf["Min"] == want["Min"] and all(
        leaf[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12) for k in ("Mean", "Norm")
    )


def _block_tensors() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per block, ``(bn2 output, identity)`` of the first step's forward, from forward hooks on a fresh model run
    without the recorder (same seeds, so the same values): what ``out += identity`` adds."""
    case = _build()
    got: dict[str, dict[str, np.ndarray]] = {}
    cells = dict(case.model.cells_and_names())
    for block in BLOCKS:
        slot = got.setdefault(block, {})

        def keep(key: str, slot: dict[str, np.ndarray] = slot) -> Any:
            return lambda _cell, _args, out: slot.__setitem__(key, out.asnumpy().copy())

        cells[f"{block}.bn2"].register_forward_hook(keep("bn2"))
        if f"{block}.down_sample" in cells:
            cells[f"{block}.down_sample"].register_forward_hook(keep("identity"))
        else:  # identity = the block's input
            cells[block].register_forward_pre_hook(
                lambda _cell, args, slot=slot: slot.__setitem__("identity", args[0].asnumpy().copy()))
    case.loss_of(case.model, case.batch).asnumpy()
    return {block: (got[block]["bn2"], got[block]["identity"]) for block in BLOCKS}


def test_tensor_iadd_records_its_inputs_before_the_addition(recording: tuple[Path, dict[str, bytes]]) -> None:
    dump = recording[0]
    data = _doc(dump)["data"]
    construct = json.loads((dump / "step0" / "rank" / "construct.json").read_text())
    iadds = [n for n in data if n.startswith("Tensor.__iadd__.") and n.endswith(".forward")]
    assert iadds == [f"Tensor.__iadd__.{i}.forward" for i in range(len(BLOCKS))]
    reference = _block_tensors()
    for i, block in enumerate(BLOCKS):
        entry = data[f"Tensor.__iadd__.{i}.forward"]
        assert construct[f"Tensor.__iadd__.{i}.forward"] == f"Cell.{block}.BasicBlock.forward.0"
        bn2_out, identity = reference[block]
        out, ident = entry["input_args"]
        # what it received, computed independently: the block's bn2 output and its identity branch ...
        assert _same(out, _stats(bn2_out)), block
        assert _same(ident, _stats(identity)), block
        # ... the same as the recorder's entries of the preceding BatchNorm cell ...
        bn2 = data[f"Cell.{block}.bn2.BatchNorm2d.forward.0"]["output"][0]
        assert {k: out[k] for k in ("Max", "Min", "Mean", "Norm")} == {k: bn2[k] for k in ("Max", "Min", "Mean",
                                                                                            "Norm")}
        # ... not the sum it produced, which is what the block's second ReLU received
        total = _stats(bn2_out + identity)
        assert _same(entry["output"][0], total) and not _same(out, total), block
        relu_in = data[f"Cell.{block}.relu.ReLU.forward.1"]["input_args"][0]
        assert _same(relu_in, total), block
        # Its backward: the gradient w.r.t. the sum is the one w.r.t. the ReLU's input, and passes unchanged to the
        # identity branch (copied, so captured); the in-place target gets no copy and is declared.
        backward = data[f"Tensor.__iadd__.{i}.backward"]
        relu_grad = data[f"Cell.{block}.relu.ReLU.backward.1"]["output"][0]
        assert backward["input"][0] == relu_grad
        assert backward["output"][1] == backward["input"][0]
        assert backward["output"][0] is None
    reasons = {item["what"]: item["reason"] for item in _doc(dump)["not_captured"]}
    for i in range(len(BLOCKS)):
        assert reasons[f"Tensor.__iadd__.{i}.backward.output.0"] == NOT_COPIED_IN_PLACE


def test_batchnorm_primitive_backward_is_captured_or_declared(recording: tuple[Path, dict[str, bytes]]) -> None:
    doc = _doc(recording[0])
    data = doc["data"]
    construct = json.loads((recording[0] / "step0" / "rank" / "construct.json").read_text())
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    prims = [n for n in data if n.startswith("Primitive.bn_train.BatchNorm.") and n.endswith(".forward")]
    assert len(prims) == 20
    for fwd in prims:
        bwd = fwd.replace(".forward", ".backward")
        cell_bwd = construct[fwd].replace(".forward.", ".backward.")  # Cell.<path>.BatchNorm2d.backward.0
        backward, cell = data[bwd], data[cell_bwd]
        # x and y: the gradients w.r.t. the Primitive's input and first output are the BatchNorm cell's (a hook on
        # an Identity copy of x and on y against MindSpore's cell backward hook: independent captures)
        assert backward["output"][0] is not None and backward["output"][0] == cell["output"][0], bwd
        assert backward["input"][0] is not None and backward["input"][0] == cell["input"][0], bwd
        # gamma, beta, moving_mean, moving_variance are written in place (no copy); the batch statistics and the
        # reserve outputs get no gradient (nn.BatchNorm2d keeps output 0 only): all declared
        for i in range(1, 5):
            assert backward["output"][i] is None and reasons[f"{bwd}.output.{i}"] == NOT_COPIED_SIDE_EFFECT, bwd
            assert backward["input"][i] is None and reasons[f"{bwd}.input.{i}"] == NO_GRADIENT_TO_OUTPUT, bwd
        # the gradients of gamma and beta are the cell's parameters_grad; beta's is the sum of dy over N, H, W, so
        # its mean is dy's mean times N*H*W
        pgrad = data[construct[fwd].rsplit(".forward.", 1)[0] + ".parameters_grad"]
        dy = backward["input"][0]
        n, _, h, w = dy["shape"]
        assert pgrad["gamma"][0] is not None
        assert pgrad["beta"][0]["Mean"] == pytest.approx(dy["Mean"] * n * h * w, rel=1e-5, abs=1e-8 * dy["Norm"])


def test_every_gap_is_declared(recording: tuple[Path, dict[str, bytes]]) -> None:
    doc = _doc(recording[0])
    x = _build().batch["x"].asnumpy()
    is_batch = {"shape": list(x.shape), "Max": float(x.max()), "Min": float(x.min())}

    def needs_grad(leaf: Any) -> bool:
        # MindSpore leaves carry no requires_grad: every floating tensor needs a gradient except the batch's images
        # (MindSpore's own cell backward hook gives None for them)
        return floating(leaf) and {k: leaf.get(k) for k in is_batch} != is_batch

    for prefix in ("Cell.", "Primitive.", "Functional.", "Tensor."):
        assert undeclared_gaps(doc, prefix=prefix, needs_grad=needs_grad) == [], prefix
    data = doc["data"]
    cells = [n for n in data if n.startswith("Cell.") and ".forward." in n]
    assert len(cells) == 75 and all(n.replace(".forward.", ".backward.") in data for n in cells)
    assert data["Cell.conv1.Conv2d.backward.0"]["output"] == [None]  # the batch: the only null left, not a gap
    assert data["Cell.conv1.Conv2d.forward.0"]["input_args"][0]["shape"] == is_batch["shape"]
    pgrads = {n: e for n, e in data.items() if n.endswith(".parameters_grad")}
    assert sum(len(e) for e in pgrads.values()) == 62  # every trainable parameter, each with its gradient
    assert all(g is not None for e in pgrads.values() for gs in e.values() for g in gs)
