"""The recorder never changes training, survives its own failures, and removes everything it installed."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder import PrecisionDebugger
from msprobe_cmp.recorder.adapters.mindspore import NOT_COPIED_DTYPE, NOT_COPIED_VIEW, WRAPPED_MARK
from msprobe_cmp.recorder.service import RecorderService


def _assert_same_training(a: Any, b: Any) -> None:
    assert len(a.losses) == len(b.losses)
    for la, lb in zip(a.losses, b.losses, strict=True):
        np.testing.assert_array_equal(la, lb)
    assert a.weights.keys() == b.weights.keys()
    for name in a.weights:
        np.testing.assert_array_equal(a.weights[name], b.weights[name], err_msg=name)


@pytest.mark.parametrize(("level", "task"), [("mix", "tensor"), ("L0", "statistics"), ("L1", "statistics")])
def test_training_is_bit_identical_with_and_without_recorder(
    tmp_path: Path, train: Callable[..., Any], level: str, task: str
) -> None:
    plain = train(3)
    with PrecisionDebugger(dump_path=tmp_path, level=level, task=task, framework="mindspore") as dbg:
        recorded = train(3, dbg)
    _assert_same_training(plain, recorded)
    assert not np.array_equal(plain.weights["head.weight"], train(0).weights["head.weight"])  # it did train
    assert (tmp_path / "step2" / "rank" / "dump.json").is_file()


def test_a_failing_cell_hook_is_disabled_and_training_goes_on(
    tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = RecorderService.end_cell

    def broken_end_cell(self: RecorderService, call: Any, *args: Any, **kwargs: Any) -> None:
        if call.path == "blocks.1":
            raise RuntimeError("boom in a hook")
        original(self, call, *args, **kwargs)

    monkeypatch.setattr(RecorderService, "end_cell", broken_end_cell)
    plain = train(2)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
            recorded = train(2, dbg)
    _assert_same_training(plain, recorded)
    failures = [r for r in caplog.records if "boom in a hook" in r.getMessage()]
    assert len(failures) == 1  # logged once per run; it fails (and is skipped for the rest of) every step
    assert "Cell.blocks.1" in failures[0].getMessage()
    data = json.loads((tmp_path / "step1" / "rank" / "dump.json").read_text())["data"]
    assert "Cell.blocks.1.Dense.forward.0" not in data
    # Every other hook keeps recording.
    assert {
        "Cell.blocks.0.Dense.forward.0",
        "Cell.head.Dense.forward.0",
        "Primitive.matmul.MatMul.1.forward",
        "Cell.head.Dense.backward.0",
    } <= set(data)


def test_a_failing_gradient_hook_is_disabled_and_training_goes_on(
    tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise ValueError("gradient hook failure")

    monkeypatch.setattr(RecorderService, "api_grad", broken)
    monkeypatch.setattr(RecorderService, "parameter_grad", broken)
    plain = train(2)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
            recorded = train(2, dbg)
    _assert_same_training(plain, recorded)
    assert any("gradient hook failure" in r.getMessage() for r in caplog.records)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Primitive.matmul.MatMul.0.forward" in data and "Cell.head.Dense.backward.0" in data
    assert not [n for n in data if n.startswith("Primitive.") and n.endswith("backward")]
    # The placeholder stays null when its hook never delivered (msprobe does the same).
    assert data["Cell.head.Dense.parameters_grad"] == {"weight": [None], "bias": [None]}


def test_user_errors_inside_recorded_calls_propagate_unchanged(tmp_path: Path, ms: Any) -> None:
    a = ms.Tensor(np.ones((2, 3), np.float32))
    b = ms.Tensor(np.ones((4, 5), np.float32))
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        dbg.start()
        with pytest.raises((ValueError, RuntimeError, TypeError)):
            ms.ops.matmul(a, b).asnumpy()
        # The recorder is still usable after the user's error.
        out = ms.ops.square(a)
        dbg.stop()
    np.testing.assert_array_equal(out.asnumpy(), np.ones((2, 3), np.float32))
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Functional.square.0.forward" in data


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


def test_a_failing_kernel_of_the_training_reaches_the_user_and_the_dump_says_so(
    tmp_path: Path, ms: Any, failing_kernel: tuple[Any, Callable[[], None]]
) -> None:
    # PyNative dispatch is asynchronous: a kernel's error surfaces at the next synchronisation, once. Without the
    # recorder that is the user's own asnumpy(); with it, the recorder's copy of the next tensor, which must not
    # swallow it (it used to: the user's asnumpy() then succeeded).
    a, failing_then_sync = failing_kernel  # (2, 3) @ (4, 5): fails in the kernel, not at the call

    with pytest.raises(RuntimeError) as plain:
        failing_then_sync()
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        dbg.start()
        before = ms.ops.square(a)
        with pytest.raises(RuntimeError) as recorded:
            failing_then_sync()
        after = ms.ops.square(a)  # the recorder keeps recording after the user's error
        dbg.stop()
    assert "MatMul" in _first_line(plain.value)
    assert _first_line(recorded.value) == _first_line(plain.value)
    np.testing.assert_array_equal(after.asnumpy(), np.ones((2, 3), np.float32))
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    data = doc["data"]
    assert data["Functional.square.0.forward"]["output"][0]["Max"] == 1.0  # captured before the error
    assert "Functional.square.1.forward" in data or "Functional.square.2.forward" in data  # and after it
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert "Functional.matmul" in reasons and "the training raised an error" in reasons["Functional.matmul"]
    assert "MatMul" in reasons["Functional.matmul"]
    np.testing.assert_array_equal(before.asnumpy(), np.ones((2, 3), np.float32))


def test_a_failing_kernel_met_while_an_api_backward_is_prepared_reaches_the_user(tmp_path: Path, ms: Any) -> None:
    # data_mode backward only: the first synchronisation after the failing kernel is the gradient-hook set-up of
    # an API call, a guarded step nested in the call's own guard.
    a = ms.Tensor(np.ones((2, 3), np.float32))
    b = ms.Tensor(np.ones((4, 5), np.float32))
    x = ms.Tensor(np.ones((2, 3), np.float32))

    def forward(x: Any) -> Any:
        ms.ops.matmul(a, b)
        return ms.ops.square(x).sum()

    def train_step() -> None:
        loss, _grad = ms.value_and_grad(forward)(x)
        loss.asnumpy()

    with pytest.raises(RuntimeError) as plain:
        train_step()
    cfg = tmp_path / "config.json"
    dump = tmp_path / "dump"
    cfg.write_text(
        json.dumps({"dump_path": str(dump), "level": "L1", "task": "statistics", "statistics": {"data_mode": ["backward"]}})
    )
    dbg = PrecisionDebugger(cfg, framework="mindspore")
    try:
        dbg.start()
        with pytest.raises(RuntimeError) as recorded:
            train_step()
        dbg.stop()
    finally:
        dbg.close()
    assert _first_line(recorded.value) == _first_line(plain.value)
    doc = json.loads((dump / "step0" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert any("the training raised an error" in r and "MatMul" in r for r in reasons.values()), reasons


def test_a_failing_kernel_pending_when_a_construct_raises_still_reaches_the_user(tmp_path: Path, ms: Any) -> None:
    # MindSpore calls an always_call forward hook from its except block and silences what the hook raises: the
    # recorder's synchronisation there consumed the pending kernel error, whose re-raise was then silenced (lost).
    a = ms.Tensor(np.ones((2, 3), np.float32))
    b = ms.Tensor(np.ones((4, 5), np.float32))
    x = ms.Tensor(np.ones((2, 3), np.float32))

    class Inner(ms.nn.Cell):
        def construct(self, x: Any) -> Any:
            ms.ops.matmul(a, b)  # queued; fails in the kernel
            raise ValueError("the user's own error")

    class Net(ms.nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.fc = ms.nn.Dense(3, 3)

        def construct(self, x: Any) -> Any:
            return self.inner(self.fc(x))

    net = Net()

    def run() -> list[str]:
        seen = []
        for sync in (lambda: net(x), lambda: ms.ops.square(x).asnumpy()):
            try:
                sync()
            except Exception as exc:
                seen.append(f"{type(exc).__name__}: {_first_line(exc)}")
        return seen

    plain = run()
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        dbg.start(net)
        recorded = run()
        dbg.stop()
    assert plain[0] == "ValueError: the user's own error" and "MatMul" in plain[1] and len(plain) == 2
    assert recorded == plain
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    assert list(reasons) == ["Cell.inner.Inner.forward.0"] and "construct raised" in reasons["Cell.inner.Inner.forward.0"]
    assert "Cell.fc.Dense.forward.0" in doc["data"]


def test_a_model_run_inside_the_users_except_block_is_recorded(tmp_path: Path, ms: Any) -> None:
    # The forward hook tells "construct raised" from the exception being handled when the cell began: a model
    # called while the user handles an exception of their own is recorded as usual.
    fc = ms.nn.Dense(2, 2, weight_init=ms.Tensor(np.eye(2, dtype=np.float32)), bias_init="zeros")

    class Net(ms.nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = fc

        def construct(self, x: Any) -> Any:
            return self.fc(x)

    net = Net()
    with PrecisionDebugger(dump_path=tmp_path, level="L0", framework="mindspore") as dbg:
        dbg.start(net)
        try:
            raise KeyError("the user's own, handled")
        except KeyError:
            out = net(ms.Tensor(np.array([[3.0, -1.0]], np.float32)))
        dbg.stop()
    np.testing.assert_array_equal(out.asnumpy(), [[3.0, -1.0]])  # identity weights, zero bias
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    assert doc["not_captured"] == []
    assert doc["data"]["Cell.fc.Dense.forward.0"]["output"][0]["Max"] == 3.0


def test_close_removes_everything(tmp_path: Path, ms: Any, build_net: Callable[[], Any]) -> None:
    net = build_net()
    originals = {
        "square": ms.ops.square,
        "mint.add": ms.mint.add,
        "relu": ms.mint.nn.functional.relu,
    }
    had_sub = "__sub__" in vars(ms.Tensor)
    float_method = vars(ms.Tensor)["float"]
    prim_types = {id(c.matmul): type(c.matmul) for c in (net.blocks[0], net.blocks[1], net.head)}
    x = ms.Tensor(np.ones((2, 16), np.float32))
    dbg = PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore")
    dbg.start(net)
    assert getattr(ms.ops.square, WRAPPED_MARK, False)
    assert getattr(type(net.head.matmul), WRAPPED_MARK, False)
    dbg.start(net)  # a second start with the same model installs nothing more
    net(x)
    dbg.stop()
    dbg.close()
    dbg.close()  # harmless
    assert ms.ops.square is originals["square"]
    assert ms.mint.add is originals["mint.add"]
    assert ms.mint.nn.functional.relu is originals["relu"]
    assert ("__sub__" in vars(ms.Tensor)) == had_sub
    assert vars(ms.Tensor)["float"] is float_method
    for cell in (net.blocks[0], net.blocks[1], net.head):
        assert type(cell.matmul) is prim_types[id(cell.matmul)]
    names = list(json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"])
    assert names.count("Cell.head.Dense.forward.0") == 1 and "Cell.head.Dense.forward.1" not in names
    # After close nothing is recorded any more: a new step directory never appears.
    dbg.start(net)
    net(x)
    dbg.stop()
    dbg.step()
    assert not (tmp_path / "step1").exists()
    # And the cells carry no hooks: a fresh recorder sees each call exactly once.
    with PrecisionDebugger(dump_path=tmp_path / "again", level="L0", framework="mindspore") as again:
        again.start(net)
        net(x)
        again.stop()
    again_names = list(json.loads((tmp_path / "again" / "step0" / "rank" / "dump.json").read_text())["data"])
    assert again_names.count("Cell.head.Dense.forward.0") == 1 and "Cell.head.Dense.forward.1" not in again_names


def test_two_active_recorders_are_refused(tmp_path: Path, ms: Any) -> None:
    with PrecisionDebugger(dump_path=tmp_path / "a", level="L1", framework="mindspore") as first:
        first.start()
        with pytest.raises(ConfigError, match="already wrapped by another PrecisionDebugger"):
            PrecisionDebugger(dump_path=tmp_path / "b", level="L1", framework="mindspore")
        # The first one still works.
        ms.ops.square(ms.Tensor([2.0], ms.float32))
        first.stop()
    assert (
        "Functional.square.0.forward"
        in json.loads((tmp_path / "a" / "step0" / "rank" / "dump.json").read_text())["data"]
    )


def test_recording_outside_a_grad_context_has_no_backward(
    tmp_path: Path, build_net: Callable[[], Any], ms: Any
) -> None:
    net = build_net()
    with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
        dbg.start(net)
        net(ms.Tensor(np.ones((2, 16), np.float32)))
        dbg.stop()
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert "Cell.head.Dense.forward.0" in data
    assert not [n for n in data if "backward" in n]
    # The placeholders are written at forward and stay null without a backward pass.
    assert data["Cell.head.Dense.parameters_grad"] == {"weight": [None], "bias": [None]}


def test_bfloat16_tensors_are_upcast_before_statistics(tmp_path: Path, ms: Any) -> None:
    values = np.array([[1.5, -2.25], [3.0, 0.125]], np.float32)  # exactly representable in bfloat16
    t = ms.Tensor(values).astype(ms.bfloat16)
    with PrecisionDebugger(dump_path=tmp_path, level="L1", task="tensor", framework="mindspore") as dbg:
        dbg.start()
        out = t * t
        dbg.stop()
    assert out.dtype == ms.bfloat16
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    leaf = data["Tensor.__mul__.0.forward"]["input_args"][0]
    assert leaf["dtype"] == "BFloat16"
    assert [leaf["Max"], leaf["Min"], leaf["Mean"]] == [3.0, -2.25, pytest.approx(0.59375)]
    assert leaf["Norm"] == pytest.approx(float(np.linalg.norm(values)))
    saved = np.load(tmp_path / "step0" / "rank" / "dump_tensor_data" / leaf["data_name"], allow_pickle=False)
    assert saved.dtype == np.float32 and np.array_equal(saved, values)


def test_bfloat16_training_under_value_and_grad_is_unchanged(tmp_path: Path, ms: Any) -> None:
    # The API backward's Identity copy of a bfloat16 input has no CPU kernel; its error, although caught as a hook
    # failure, broke the user's value_and_grad ("Can not find top cell for backward").
    x_np = np.array([[1.5, -2.25, 3.0], [0.125, 4.0, -1.0]], np.float32)  # exactly representable in bfloat16
    w_np = np.array([[2.0, 0.5, -1.0], [1.0, -0.25, 3.0]], np.float32)
    x = ms.Tensor(x_np).astype(ms.bfloat16)
    w = ms.Parameter(ms.Tensor(w_np).astype(ms.bfloat16), name="w")

    def f(x: Any) -> Any:
        return ms.ops.sum(ms.ops.add(ms.ops.mul(x, w), x).astype(ms.float32))

    def train_step() -> tuple[float, Any]:
        loss, grads = ms.value_and_grad(f, None, [w])(x)
        return float(loss.asnumpy()), grads[0].astype(ms.float32).asnumpy()

    plain = train_step()
    with PrecisionDebugger(dump_path=tmp_path, level="L1", framework="mindspore") as dbg:
        dbg.start()
        recorded = train_step()
        dbg.stop()
    # By hand: every product and sum is exact in bfloat16 (at most 8 significant bits), d(loss)/dw = x.
    assert plain[0] == recorded[0] == float((x_np * w_np + x_np).sum())
    np.testing.assert_array_equal(plain[1], x_np)
    np.testing.assert_array_equal(recorded[1], x_np)
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    backward = doc["data"]["Functional.mul.0.backward"]
    assert backward["input"][0]["dtype"] == "BFloat16" and backward["input"][0]["Max"] == 1.0  # d(loss)/d(x * w)
    assert backward["output"] == [None, None]  # no copy of a bfloat16 input on CPU: its gradient is not captured
    # ... and the header says so (and that astype, a cast, gets no copy either)
    reasons = {item["what"]: item["reason"] for item in doc["not_captured"]}
    bf16 = NOT_COPIED_DTYPE.format(dtype="BFloat16")
    assert reasons == {
        "Functional.mul.0.backward.output.0": bf16,
        "Functional.mul.0.backward.output.1": bf16,
        "Functional.add.0.backward.output.0": bf16,
        "Functional.add.0.backward.output.1": bf16,
        "Tensor.astype.0.backward.output.0": NOT_COPIED_VIEW,
    }


def test_a_dump_path_with_an_earlier_run_is_warned_about(
    tmp_path: Path, ms: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "step0" / "rank").mkdir(parents=True)
    (tmp_path / "step7").mkdir()
    with caplog.at_level("WARNING"):
        PrecisionDebugger(dump_path=str(tmp_path), level="L0", framework="mindspore").close()
    assert "already holds 2 step directories from an earlier run (step0, step7)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        PrecisionDebugger(dump_path=str(tmp_path / "fresh"), level="L0", framework="mindspore").close()
    assert "earlier run" not in caplog.text


def test_a_cell_hook_failing_in_one_step_records_again_in_the_next(
    tmp_path: Path, train: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Per-step disabling: a hook that failed in step 0 is skipped for the rest of step 0 only; its failure is
    listed in step 0's not_captured, not in step 1's; the construct stack is popped even for the failed call."""
    original = RecorderService.end_cell

    def broken_in_step0(self: RecorderService, call: Any, *args: Any, **kwargs: Any) -> None:
        if call.path == "blocks.1" and self.current_step == 0:
            raise RuntimeError("boom in step 0")
        original(self, call, *args, **kwargs)

    monkeypatch.setattr(RecorderService, "end_cell", broken_in_step0)
    plain = train(2)
    with caplog.at_level(logging.WARNING, logger="msprobe_cmp"):
        with PrecisionDebugger(dump_path=tmp_path, level="mix", framework="mindspore") as dbg:
            recorded = train(2, dbg)
    _assert_same_training(plain, recorded)
    step0 = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    step1 = json.loads((tmp_path / "step1" / "rank" / "dump.json").read_text())
    assert [n["what"] for n in step0["not_captured"]] == ["Cell.blocks.1"]
    assert "Cell.blocks.1.Dense.forward.0" not in step0["data"]
    assert step1["not_captured"] == [] and "Cell.blocks.1.Dense.forward.0" in step1["data"]
    construct = json.loads((tmp_path / "step0" / "rank" / "construct.json").read_text())
    assert construct["Cell.head.Dense.forward.0"] is None  # the failed call did not stay on the stack
    assert len([r for r in caplog.records if "boom in step 0" in r.getMessage()]) == 1


def test_an_error_of_the_users_call_reaches_them_as_their_own(tmp_path: Path) -> None:
    """An op in the user's construct that fails (a reshape to a size that does not fit) raises the same error with
    the recorder: MindSpore raises it at the next synchronisation (the user's ``asnumpy()`` without the recorder, the
    recorder's read of a tensor with it), and the note says it is the training's own, passed on."""
    import mindspore as ms
    from mindspore import nn, ops

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(4, 4)

        def construct(self, x: Any) -> Any:
            return ops.reshape(self.fc(x), (3, 3))  # 8 elements into 9

    x = ms.Tensor(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError) as plain:
        Net()(x).asnumpy()
    net = Net()
    with PrecisionDebugger(dump_path=tmp_path, level="mix", task="statistics", framework="mindspore") as dbg:
        dbg.start(net)
        with pytest.raises(ValueError) as caught:
            net(x).asnumpy()
    assert str(caught.value).splitlines()[0] == str(plain.value).splitlines()[0]
    (note,) = caught.value.__notes__
    assert note.startswith("msprobe-cmp: raised by the training's own computation: an operator your code queued "
                           "earlier failed") and note.endswith("only passed it on")
