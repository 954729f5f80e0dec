"""Data and small helpers of the PyTorch/mindtorch adapter (:mod:`msprobe_cmp.recorder.adapters.torch`):
API families, the APIs whose inputs are never replaced by views, not_captured reasons, the torch import and the
per-module / per-call bookkeeping.  Imports torch only inside :func:`import_torch`."""

from __future__ import annotations

import importlib
from typing import Any

from msprobe_cmp.dump.schema import NOT_CAPTURED_BACKWARD
from msprobe_cmp.errors import MissingFrameworkError
from msprobe_cmp.recorder.service import CellCall

#: (family prefix, target, api list file); target "Tensor" is the class, the others module paths.
API_FAMILIES = (
    ("Torch", "torch", "torch_torch.txt"),
    ("Tensor", "Tensor", "torch_tensor.txt"),
    ("Functional", "torch.nn.functional", "torch_functional.txt"),
    ("Distributed", "torch.distributed", "torch_distributed.txt"),
)

#: not_captured reason of a gradient that cannot be observed because an output is one of the call's inputs.
PASSTHROUGH_REASON = (
    "the call returned this input tensor itself (no autograd node of its own: nn.Identity, eval-mode dropout, "
    "x.contiguous() of a contiguous x), so its gradient at the call's boundary cannot be told apart from that "
    "tensor's other consumers' without changing the autograd graph; not recorded"
)


def unreached_reason(what: str) -> str:
    """not_captured reason of a hooked gradient slot that stayed empty although the call's backward ran."""
    return f"no gradient reached this {what} in this step (it does not lead to what backward() was called on)"


#: not_captured reason of an input no autograd node created by the call sends a gradient to.
UNSEEN_REASON = (
    "no autograd node created during the call sends a gradient to this input (the call does not use it, its gradient "
    "flows through a node made before the call, such as autocast's cached cast of a weight used twice, or it was "
    "changed in place through a view): not recorded"
)

_FLOAT_DTYPES = frozenset({"torch.float16", "torch.float32", "torch.float64", "torch.bfloat16"})
_HOST_ONLY_DTYPES = frozenset({"torch.complex32", "torch.complex64", "torch.complex128"})
#: not_captured reasons of the mindtorch flavour.
MINDTORCH_NO_INPUT_GRADS = (
    "mindtorch has no full backward hooks: gradients w.r.t. module inputs (the backward entry's output) are "
    "not captured"
)
MINDTORCH_BACKWARD_KEY = NOT_CAPTURED_BACKWARD
#: Declared at stop() only for a step that called Tensor.backward() while recording (never for a forward-only one).
MINDTORCH_NO_BACKWARD = (
    "mindtorch: Tensor.backward() was called in this step but no gradient was computed inside a gradient context: "
    "its Tensor.backward() computes no gradients on CPU (mindnlp 0.5.1 on MindSpore 2.7), so backward and "
    "parameters_grad entries are recorded only when the step runs inside mindtorch.autograd.value_and_grad"
)
MINDTORCH_API_INPUT_GRADS_KEY = "API backward output (mindtorch)"
MINDTORCH_NO_API_INPUT_GRADS = (
    "under mindtorch, gradients w.r.t. API inputs (API backward entries' output) are not captured: tensor hooks "
    "on substitute inputs are not attempted there; only gradients w.r.t. API outputs are"
)


#: not_captured of a TorchScript module (``torch.jit.script`` / ``trace``), which accepts no Python hooks.
COMPILED_MODULE_REASON = (
    "compiled with torch.compile: calls inside the compiled region are not recorded (the recorder steps aside "
    "while dynamo traces); record the eager module, e.g. start(model._orig_mod), for a full dump"
)
SCRIPT_MODULE_REASON = (
    "a TorchScript module (torch.jit.script / torch.jit.trace) accepts no Python hooks: it and its submodules are "
    "not recorded as modules (no forward, backward or parameters_grad entries), and the APIs it calls run inside "
    "TorchScript, unrecorded; the rest of the model is recorded"
)
#: not_captured of calls made inside torch.func transforms.
FUNCTORCH_KEY = "torch.func transforms"
FUNCTORCH_REASON = (
    "calls made inside torch.func transforms (vmap, grad, jvp, ...; functorch-wrapped tensors) are not recorded: "
    "their values are batched or wrapped tensors with no storage"
)

#: not_captured of calls made while torch traces with fake/proxy/functional tensors (torch.compile, export).
TRACING_KEY = "torch tracing (fake/proxy tensors)"
TRACING_REASON = (
    "calls made while torch traces a graph with fake, proxy or functional tensors (torch.compile's "
    "AOTAutograd/inductor, torch.export, make_fx) carry no values and are not recorded"
)


def import_torch(framework: str = "pytorch") -> Any:
    """Import and return the ``torch`` module (for ``"mindtorch"``, ``import mindtorch`` first, which makes
    ``import torch`` resolve to mindtorch).

    Raises:
        MissingFrameworkError: when torch (or mindtorch) is not installed.
    """
    if framework == "mindtorch":
        try:
            importlib.import_module("mindtorch")
        except ImportError:
            raise MissingFrameworkError("mindtorch") from None
    try:
        import torch
    except ImportError:
        raise MissingFrameworkError("torch") from None
    return torch


class _ModuleBackward:
    """One module call's backward bookkeeping: the gradient leaves collected so far.

    Attributes:
        call: the forward call (its index names the backward entry).
        grad_outputs: leaves of the gradients w.r.t. the call's outputs (the entry's ``input``).
        grad_inputs: leaves of the gradients w.r.t. its positional inputs (the entry's ``output``).
        fired: whether any gradient arrived.
        grads: PyTorch: the inputs' gradient edges taken at the pre-hook (:mod:`.torch_grads`), until the
            forward hook attaches them.
    """

    __slots__ = ("call", "grad_outputs", "grad_inputs", "fired", "grads")

    def __init__(self, call: CellCall, n_inputs: int) -> None:
        self.call = call
        self.grad_outputs: list[Any] = []
        self.grad_inputs: list[Any] = [None] * max(n_inputs, 1)
        self.fired = False
        self.grads: Any = None


class _ModuleState:
    """Per-module bookkeeping: open forward calls (with, in ``snapshots``, their buffers before the call) and
    calls whose backward is expected in this step."""

    __slots__ = ("open_calls", "awaiting_backward", "snapshots")

    def __init__(self) -> None:
        self.open_calls: list[tuple[CellCall, _ModuleBackward | None]] = []
        self.snapshots: list[Any] = []
        self.awaiting_backward: list[_ModuleBackward] = []
