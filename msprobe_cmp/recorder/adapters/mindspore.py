"""MindSpore PyNative adapter: the only module that imports mindspore.

What it installs (all removed by :meth:`MindSporeAdapter.close`):

* **Cells** (L0, mix): on every cell of the model except the root, a forward pre-hook (names the
  call, pushes it on the construct stack), a forward hook with kwargs and ``always_call`` (records
  inputs, outputs and the cell's direct parameters; when ``construct`` raised, only closes the call and lists it
  in ``not_captured``: :data:`CONSTRUCT_RAISED`), a backward hook (records gradients w.r.t. the
  cell's outputs as ``input`` and w.r.t. its inputs as ``output``), and ``Parameter.register_hook``
  on each direct trainable parameter (fills ``<cell>.parameters_grad``).
* **APIs** (L1, mix): the functions listed in ``api_lists/mindspore_*.txt`` that the installed
  MindSpore has are replaced by wrappers: ``mindspore.ops`` → ``Functional.``, ``mindspore.mint`` →
  ``Mint.``, ``mindspore.mint.nn.functional`` → ``MintFunctional.``, ``mindspore.Tensor`` methods →
  ``Tensor.``.  Only the outermost wrapped call is recorded.
* **Primitives** (L1 with a model, mix): each Primitive instance held as an attribute of a model cell
  gets its class swapped for a subclass whose ``__call__`` records ``Primitive.<attr>.<Class>.<n>``
  (``nn.Dense`` calls ``self.matmul``/``self.bias_add``, not ``mindspore.ops`` functions).

API backward, in a gradient context only (``value_and_grad``/``grad``):

* gradients w.r.t. the outputs (the backward entry's ``input``) come from ``Tensor.register_hook``
  on each floating-point output;
* gradients w.r.t. each floating-point positional input (its ``output``) come from a hook on an
  ``ops.deepcopy`` (Identity) copy of that input, which the wrapped API then receives instead (values are the
  same, so results are unchanged).  Inputs an API may write get no copy (a copy would receive the write): the
  first input of an in-place API (``add_``, ``__iadd__``, ``assign_add``; its other inputs are copied) and the
  inputs a Primitive with ``side_effect_mem`` writes (``BatchNorm``'s ``gamma``, ``beta`` and running
  statistics; its ``x`` is copied: :data:`SIDE_EFFECT_READ_INPUTS`).  Neither do the inputs of APIs that return
  views or cast, nor bfloat16 inputs on CPU (no Identity kernel there: :data:`_NO_CPU_COPY_DTYPES`).  Inputs
  that need no gradient stay ``null`` too.

At the end of a step (``step()``, ``close()``), every floating-point slot left ``null`` in an API backward entry
that exists is listed in ``not_captured`` (``<entry>.output.<i>`` / ``<entry>.input.<i>``) with its reason: an
input deliberately not copied (above), or an output whose gradient hook never fired (the output did not reach
what was differentiated, e.g. ``BatchNorm``'s batch statistics).  An input whose copy's hook never fired is not
listed: MindSpore does not say whether it needed a gradient (the batch) or none reached it.

Cell backward entries are paired with their forward call last-in-first-out per cell (backward runs
in reverse order of the forward calls), so ``backward.<n>`` carries the index of forward call ``n``.

Every hook body runs under :meth:`RecorderService.run_guarded`: an exception is logged once per run,
listed in that step's ``not_captured`` and skips that hook for the rest of the step (it records again
from the next step); the framework call itself always runs exactly as without the recorder.

Without ``async_dump`` a captured tensor is brought to the host at once (``asnumpy()``; bf16 upcast on the device
first).  Copying it on the device and fetching all copies at the next flush (:data:`DEFER_HOST_COPIES`) is
implemented but off (see there).

``async_dump``: a captured tensor is not copied to the host.  Its max, min, sum, sum of squares and
NaN/+Inf/-Inf counts are computed on its device in float64 by Primitive instances the adapter owns
(never wrapped, never recorded, run under ``_no_grad``) and stacked into one 7-element device
vector; at ``stop()``/``step()`` the service asks :meth:`MindSporeAdapter.fetch_stats` for all of
them at once (stacked on the device, one ``asnumpy``).  In the tensor task a device copy is held
instead and fetched at flush.  Complex tensors keep the synchronous path.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from msprobe_cmp.dump.schema import ValueLeaf
from msprobe_cmp.errors import MissingFrameworkError
from msprobe_cmp.recorder.adapters.base import (
    WRAPPED_MARK,
    AdapterBase,
    GradSlot,
    fetch_stacked,
    note_passed_on,
    writes_in_place,
)
from msprobe_cmp.recorder.api_lists import load_api_names
from msprobe_cmp.recorder.collector import DEVICE_STAT_FIELDS, DeferredTensor, HostTensor
from msprobe_cmp.recorder.config import RecordConfig
from msprobe_cmp.recorder.service import ApiCall, CellCall

logger = logging.getLogger(__name__)


#: (family prefix, target, api list file); target "Tensor" is the class, the others module paths.
API_FAMILIES = (
    ("Functional", "mindspore.ops", "mindspore_ops.txt"),
    ("Mint", "mindspore.mint", "mindspore_mint.txt"),
    ("MintFunctional", "mindspore.mint.nn.functional", "mindspore_mint_functional.txt"),
    ("Tensor", "Tensor", "mindspore_tensor.txt"),
    ("Distributed", "mindspore.communication.comm_func", "mindspore_distributed.txt"),
)
#: Jit entries: ``Jit.<function or cell class>.<n>``; the jit executor's ``__call__`` is wrapped.
JIT_FAMILY = "Jit"
#: The reason written to ``not_captured`` for every recorded jit call.
JIT_NOT_CAPTURED = (
    "jit-compiled region: only its inputs and outputs are recorded; the APIs, Primitives and cells inside "
    "it run in a compiled graph and produce no per-API records"
)

#: APIs whose inputs are never replaced by identity copies: they return views or the input itself,
#: or only read metadata.  (In-place APIs: :data:`WRITES_FIRST_INPUT_APIS`.)
NO_COPY_APIS = frozenset(
    {
        "__getitem__",
        "view",
        "reshape",
        "transpose",
        "permute",
        "squeeze",
        "unsqueeze",
        "expand_dims",
        "flatten",
        "narrow",
        "select",
        "split",
        "chunk",
        "unbind",
        "t",
        "broadcast_to",
        "expand",
        "expand_as",
        "swapaxes",
        "contiguous",
        "to",
        "type",
        "astype",
        "float",
        "half",
        "double",
        "bfloat16",
        "int",
        "long",
        "cast",
        "shape",
        "ones_like",
        "zeros_like",
    }
)
#: APIs that write their first input in place (besides names ending in "_" and "__i*__": ``writes_in_place``): that
#: input gets no copy (the copy would receive the write instead); their other inputs are only read and are copied.
WRITES_FIRST_INPUT_APIS = frozenset({"assign", "assign_add", "assign_sub", "scatter_update", "scatter_nd_update"})
#: Primitive classes treated the same way.
NO_COPY_PRIMITIVES = frozenset(
    {
        "Reshape",
        "Transpose",
        "ExpandDims",
        "Squeeze",
        "Flatten",
        "Shape",
        "StridedSlice",
        "Split",
        "BroadcastTo",
        "Cast",
        "Identity",
        "ZerosLike",
        "OnesLike",
    }
)
#: Primitives that write some of their inputs in place (``side_effect_mem``) → the positions of the inputs their
#: signature declares read-only (``sig_rw.RW_READ``), which get a copy; the others are left alone, since a copy
#: would receive the write.  ``BatchNorm(is_training=True)``: ``x`` is read; ``scale``, ``bias``, ``mean`` and
#: ``variance`` are declared written (the running statistics are updated in place).  A side-effect Primitive not
#: listed gets no copy at all.
SIDE_EFFECT_READ_INPUTS: dict[str, frozenset[int]] = {"BatchNorm": frozenset({0})}
#: ``not_captured`` reasons of API backward slots left null (declared at the end of a step: ``_expect_api_gradients``).
NOT_COPIED_IN_PLACE = "input written in place by the API: not replaced by a copy, so its gradient is not observed"
NOT_COPIED_SIDE_EFFECT = (
    "input the Primitive declares written in place (side_effect_mem): not replaced by a copy, so its gradient is "
    "not observed (a trainable parameter's is in its cell's parameters_grad)"
)
NOT_COPIED_VIEW = "input of a view/cast/shape API: not replaced by a copy, so its gradient is not observed"
NOT_COPIED_DTYPE = "{dtype} input on CPU (no Identity kernel): not replaced by a copy, so its gradient is not observed"
NO_GRADIENT_TO_OUTPUT = (
    "no gradient reached this output (its hook never fired: it does not contribute to what was differentiated)"
)
_FLOAT_DTYPES = frozenset({"Float16", "Float32", "Float64", "BFloat16"})
#: Floating dtypes the CPU Identity kernel (``ops.deepcopy``) does not take (MindSpore 2.7 and 2.10): their API
#: inputs get no copy on CPU.  The copy's kernel-selection error, even caught, corrupts the gradient context it
#: happens in (the user's ``value_and_grad`` then raised "Can not find top cell for backward").
_NO_CPU_COPY_DTYPES = frozenset({"BFloat16"})
#: Off: copying captured tensors on the device and fetching them at the next flush (``_defer_copy``) is ~30x
#: cheaper per tensor on CPU, but a failing kernel of the user's (PyNative dispatch is asynchronous) then raises in
#: the recorder's later copies, so the entries of calls after it are lost, depending on timing (seen in
#: tests/recorder/test_recorder_mindspore_safety.py). Kept for issue 7 until the copies can be isolated.
DEFER_HOST_COPIES = False
#: Dtypes copied on the device and fetched at the next flush when async_dump is off (see ``_defer_copy``).
_DEFERRED_COPY_DTYPES = frozenset(
    {"Float16", "Float32", "Float64", "BFloat16", "Int8", "Int16", "Int32", "Int64", "UInt8"}
)
#: Dtypes whose statistics are always fetched synchronously (abs() of complex values stays on the host).
_HOST_ONLY_DTYPES = frozenset({"Complex64", "Complex128"})


class _DeviceStats:
    """The adapter's own Primitive instances for async_dump statistics (created before anything is wrapped)."""

    def __init__(self, ms: Any) -> None:
        ops = ms.ops
        self.float64 = ms.float64
        self.reduce_max = ops.ReduceMax()
        self.reduce_min = ops.ReduceMin()
        self.reduce_sum = ops.ReduceSum()
        self.mul = ops.Mul()
        self.equal = ops.Equal()
        self.not_equal = ops.NotEqual()
        self.cast = ops.Cast()
        self.reshape = ops.Reshape()
        self.stack = ops.Stack()
        self.concat = ops.Concat()
        self.pos_inf = ms.Tensor(float("inf"), ms.float64)
        self.neg_inf = ms.Tensor(float("-inf"), ms.float64)
        self.no_counts = ms.Tensor([0.0, 0.0, 0.0], ms.float64)

    def vector(self, value: Any, floating: bool) -> Any:
        """The device vector of :data:`~msprobe_cmp.recorder.collector.DEVICE_STAT_FIELDS` for ``value``."""
        flat = self.reshape(self.cast(value, self.float64), (-1,))
        head = self.stack(
            [
                self.reduce_max(flat),
                self.reduce_min(flat),
                self.reduce_sum(flat),
                self.reduce_sum(self.mul(flat, flat)),
            ]
        )
        if not floating:
            return self.concat((head, self.no_counts))
        masks = self.stack([self.not_equal(flat, flat), self.equal(flat, self.pos_inf), self.equal(flat, self.neg_inf)])
        return self.concat((head, self.reduce_sum(self.cast(masks, self.float64), 1)))


def import_mindspore() -> Any:
    """Import and return the ``mindspore`` package.

    Raises:
        MissingFrameworkError: when mindspore is not installed.
    """
    try:
        import mindspore
    except ImportError:
        raise MissingFrameworkError("mindspore") from None
    return mindspore


class _CopyRule(NamedTuple):
    """Which floating-point positional inputs of one API get an Identity copy (``copies(position)``), and the
    ``not_captured`` reason of the others."""

    copies: Callable[[int], bool]
    reason: str


def _always(_position: int) -> bool:
    return True


def _never(_position: int) -> bool:
    return False


def _after_first(position: int) -> bool:
    return position > 0


COPY_ALL = _CopyRule(_always, "")


def api_copy_rule(api: str) -> _CopyRule:
    """The copy rule of a wrapped API (``Functional.``/``Tensor.``/``Mint.`` ... name ``api``): none for views and
    casts, all but the first input for in-place APIs, all otherwise."""
    if api in NO_COPY_APIS:
        return _CopyRule(_never, NOT_COPIED_VIEW)
    if api in WRITES_FIRST_INPUT_APIS or writes_in_place(api):
        return _CopyRule(_after_first, NOT_COPIED_IN_PLACE)
    return COPY_ALL


def primitive_copy_rule(cls_name: str, side_effect: bool) -> _CopyRule:
    """The copy rule of a Primitive of class ``cls_name``; ``side_effect``: its ``side_effect_mem`` attribute (it
    writes some inputs in place; only those :data:`SIDE_EFFECT_READ_INPUTS` declares read are copied)."""
    if cls_name in NO_COPY_PRIMITIVES:
        return _CopyRule(_never, NOT_COPIED_VIEW)
    if side_effect:
        return _CopyRule(SIDE_EFFECT_READ_INPUTS.get(cls_name, frozenset()).__contains__, NOT_COPIED_SIDE_EFFECT)
    return COPY_ALL


class _BackwardSlots:
    """The slots of one API call's backward entry a gradient was expected in (``ApiCall.grad_state``): outputs
    whose gradient hook was registered, and inputs deliberately left without a copy (position → reason)."""

    __slots__ = ("hooked_outputs", "uncopied")

    def __init__(self) -> None:
        self.hooked_outputs: list[int] = []
        self.uncopied: dict[int, str] = {}


#: The ``not_captured`` reason of a cell call whose ``construct`` raised (see ``forward_hook`` in ``_hook_cell``).
CONSTRUCT_RAISED = (
    "the cell's construct raised an exception: its forward entry is not recorded (its tensors are left untouched, "
    "so a failing kernel of the training's still reaches the training's own next synchronisation)"
)


class _CellState:
    """Per-cell bookkeeping: open forward calls (each with the exception being handled when it began, if any) and
    forward calls awaiting their backward."""

    __slots__ = ("open_calls", "awaiting_backward")

    def __init__(self) -> None:
        self.open_calls: list[tuple[CellCall, BaseException | None]] = []
        self.awaiting_backward: list[CellCall] = []


def _hook_if_differentiable(tensor: Any, fn: Callable[[Any], None]) -> bool:
    """``tensor.register_hook(fn)``; False (and nothing registered) when MindSpore refuses because the tensor
    needs no gradient (``ops.stop_gradient`` upstream): no gradient will come, which is not a recorder failure.

    Raises:
        Exception: any other refusal (the hook guard then reports it).
    """
    try:
        tensor.register_hook(fn)
    except RuntimeError as exc:
        if "requires grad is false" in str(exc):
            return False
        raise
    return True


class MindSporeAdapter(AdapterBase):
    """Installs MindSpore hooks that feed a :class:`RecorderService`.

    Args:
        config: the recording configuration.

    Raises:
        MissingFrameworkError: when mindspore is not installed.
    """

    _logger = logger
    _MODEL_KIND = "mindspore.nn.Cell"
    _PARTS = "cells"
    _UNFIRED_BACKWARD = (
        "the cell ran with gradients enabled but its backward hook never fired "
        "(no gradient reached its outputs, or MindSpore did not call the hook)"
    )

    def __init__(self, config: RecordConfig) -> None:
        ms = import_mindspore()
        try:  # mindspore.common.api is deprecated since 2.9 in favour of mindspore.graph.api
            from mindspore.graph import api as ms_api
        except ImportError:
            from mindspore.common import api as ms_api
        _no_grad, _pynative_executor = ms_api._no_grad, ms_api._pynative_executor
        self._jit_executor_cls = getattr(ms_api, "_JitExecutor", None)

        self._ms = ms
        self._no_grad = _no_grad
        self._executor = _pynative_executor
        # Synchronised before the recorder touches a tensor (AdapterBase._surface_training_error), under async_dump
        # too: the recorder's statistics kernels queued earlier cannot be what fails there (they take every dtype
        # on CPU, and a missing kernel fails at dispatch, synchronously, inside the hook's guard), and reading the
        # tensor's shape right after waits for the queue anyway (before, that read met the user's error and the
        # hook swallowed it).  ~1.5 us when nothing is pending.  Not with deferred copies (DEFER_HOST_COPIES, off).
        self._training_sync = None if DEFER_HOST_COPIES else _pynative_executor.sync
        self._tensor_type = ms.Tensor
        self._model_type = ms.nn.Cell
        self._dtype_type = ms.dtype.Type
        self._bfloat16 = ms.bfloat16
        self._float32 = ms.float32
        # Originals captured before anything is wrapped: the recorder's own operations.
        # ops.deepcopy = the Identity kernel (ops.identity is deprecated and warns).
        self._identity = ms.ops.deepcopy
        self._cast = ms.ops.cast
        self._async = config.async_dump
        self._device_stats = _DeviceStats(ms) if config.async_dump else None
        # Without async_dump: captured tensors are copied on the device (an exact ``x * 1`` of the same dtype,
        # queued like any other kernel) and brought to the host at the next flush, all in one go, instead of
        # one ``asnumpy()`` per tensor, each of which waits for the whole asynchronous dispatch queue.
        self._copy_mul = ms.ops.Mul()
        self._ones: dict[Any, Any] = {}
        # The dtypes whose API inputs get no Identity copy on this device (read at the first substitution).
        self._no_copy_dtypes: frozenset[str] | None = None
        self._save_tensors = config.saves_tensors
        self._prims: list[tuple[Any, type]] = []
        # Per hook key (``Functional.add``, ``Primitive.bn_train.BatchNorm``): which inputs get an Identity copy.
        self._copy_rules: dict[str, _CopyRule] = {}
        super().__init__(config, framework="mindspore", cell_prefix="Cell")

    # ----------------------------------------------------------------- lifecycle hooks

    def _unfired_call(self, pending: CellCall) -> CellCall | None:
        # a cell's backward hook pops its call, so what is still awaiting never got one
        return pending if pending.recorded else None

    # ----------------------------------------------------------------- conversion

    @staticmethod
    def _detect_rank() -> int | None:
        try:
            from mindspore.communication import management

            if management.GlobalComm.INITED:
                return int(management.get_rank())
        except Exception:  # no distributed support: not distributed
            return None
        return None

    def _world_size(self) -> int | None:
        """The number of ranks once communication is initialised (``get_group_size()``); None otherwise."""
        try:
            from mindspore.communication import management

            if management.GlobalComm.INITED:
                return int(management.get_group_size())
        except Exception:  # no distributed support: unknown
            return None
        return None

    def _is_float_tensor(self, value: object) -> bool:
        if not isinstance(value, self._tensor_type):
            return False
        self._surface_training_error()
        return str(value.dtype) in _FLOAT_DTYPES

    def _wants_grad(self, value: object) -> bool:
        return self._is_float_tensor(value)

    def _convert(self, value: object) -> HostTensor | DeferredTensor | ValueLeaf | None:
        """Framework object → host value (called by the collector, inside the service's collecting guard)."""
        if isinstance(value, self._tensor_type):
            self._surface_training_error()
            dtype = str(value.dtype)
            if self._device_stats is not None and dtype not in _HOST_ONLY_DTYPES:
                return self._defer(value, dtype)
            if DEFER_HOST_COPIES and dtype in _DEFERRED_COPY_DTYPES:
                deferred = self._defer_copy(value, dtype)
                if deferred is not None:
                    return deferred
            with self._no_grad():
                if dtype == "BFloat16":
                    # bf16 reductions have no CPU kernel and numpy has no bf16: upcast on device first.
                    array = self._cast(value, self._float32).asnumpy()
                else:
                    array = value.asnumpy()
            return HostTensor(array, dtype, "mindspore.Tensor")
        if isinstance(value, self._dtype_type):
            return ValueLeaf("mindspore.dtype", str(value))
        return None

    def _defer(self, value: Any, dtype: str) -> DeferredTensor:
        """async_dump: the tensor's statistics vector (or, tensor task, a copy), left on the device."""
        shape = tuple(int(d) for d in value.shape)
        if value.size == 0:
            return DeferredTensor(dtype, shape)
        stats = self._device_stats
        assert stats is not None
        with self._no_grad():
            if self._save_tensors:
                # A copy, so later in-place updates (optimizer steps) cannot change what is saved.
                copy = self._cast(value, self._float32) if value.dtype == self._bfloat16 else self._identity(value)
                return DeferredTensor(dtype, shape, copy=copy)
            return DeferredTensor(dtype, shape, stats=stats.vector(value, dtype in _FLOAT_DTYPES))

    def _defer_copy(self, value: Any, dtype: str) -> DeferredTensor | None:
        """A device copy of ``value`` (bfloat16: upcast to float32), fetched and summarised on the host at flush
        exactly as an immediate ``asnumpy()`` would have been; None when the copy cannot be made (then the
        caller copies synchronously)."""
        shape = tuple(int(d) for d in value.shape)
        try:
            with self._no_grad():
                if dtype == "BFloat16":
                    copy = self._cast(value, self._float32)
                else:
                    one = self._ones.get(value.dtype)
                    if one is None:
                        one = self._ones[value.dtype] = self._ms.Tensor(1, value.dtype)
                    copy = self._copy_mul(value, one)  # x * 1 is exact in every float and integer dtype
        except Exception:  # a dtype without a Mul kernel: synchronous copy instead
            return None
        if str(copy.dtype) != ("Float32" if dtype == "BFloat16" else dtype):
            # A cell's mixed precision (``to_float``) cast the copy's inputs: its values are not the tensor's.
            return None
        return DeferredTensor(dtype, shape, copy=copy)

    def fetch_stats(self, vectors: Sequence[Any]) -> Any:
        """Deferred statistics vectors → one float64 numpy array ``[len(vectors), 7]`` (one transfer per
        :data:`~msprobe_cmp.recorder.adapters.base.FETCH_CHUNK` vectors: they are stacked on the device first)."""
        stats = self._device_stats
        if stats is None:  # nothing is deferred without async_dump
            return np.zeros((0, len(DEVICE_STAT_FIELDS)), np.float64)
        return fetch_stacked(vectors, lambda chunk: stats.stack(chunk).asnumpy(), self._no_grad)

    def fetch_copy(self, copy: Any) -> Any:
        """A deferred device copy (tensor task) → its numpy array."""
        with self._no_grad():
            return copy.asnumpy()

    def _grad_enabled(self) -> bool:
        return bool(self._executor.requires_grad())

    # ----------------------------------------------------------------- APIs

    def _install_apis(self) -> None:
        import importlib

        for family, target, list_file in API_FAMILIES:
            try:
                owner = self._tensor_type if target == "Tensor" else importlib.import_module(target)
            except ImportError as exc:  # e.g. a MindSpore build without communication support
                logger.info("msprobe-cmp: %s not wrapped: %r", target, exc)
                continue
            for name in load_api_names(list_file):
                original = getattr(owner, name, None)
                if original is None or isinstance(original, type) or not callable(original):
                    continue
                self._copy_rules[f"{family}.{name}"] = api_copy_rule(name)
                self._wrap_api(owner, target, family, name, original)
        self._install_jit()
        self._apis_installed = True

    def _install_jit(self) -> None:
        executor = self._jit_executor_cls
        if executor is None:
            logger.info("msprobe-cmp: this MindSpore has no _JitExecutor: jit calls are not recorded as Jit entries")
            return
        original = vars(executor).get("__call__")
        if original is None:
            return
        self._refuse_if_wrapped(original, "the jit executor")
        self._replace(executor, "__call__", original, self._make_jit_call(original))

    def _make_jit_call(self, original: Callable[..., Any]) -> Any:
        svc = self.service
        before = self._api_before
        after = self._api_after

        @functools.wraps(original)
        def __call__(executor: Any, *args: Any, **kwargs: Any) -> Any:
            owner = getattr(executor, "obj", None)
            fn = getattr(executor, "fn", None)
            name = type(owner).__name__ if owner is not None else getattr(fn, "__name__", "jit")
            key = f"{JIT_FAMILY}.{name}"
            if not svc.api_active() or svc.is_disabled(key):
                try:
                    return original(executor, *args, **kwargs)
                except BaseException as exc:
                    note_passed_on(exc, key)
                    raise
            skip = 1 if owner is not None else 0
            user_args = args[skip:]
            prepared = svc.run_guarded(key, lambda: before(JIT_FAMILY, name, user_args, kwargs))
            call_args = args if prepared is None else (*args[:skip], *prepared[1])
            with svc.inside_api():
                try:
                    out = original(executor, *call_args, **kwargs)
                except BaseException as exc:
                    note_passed_on(exc, key)
                    raise
            if prepared is not None:
                call = prepared[0]
                svc.run_guarded(key, lambda: after(key, call, out))
                if call.recorded:
                    svc.note_not_captured(call.forward_name, JIT_NOT_CAPTURED)
            return out

        setattr(__call__, WRAPPED_MARK, True)
        return __call__

    def _substitute_inputs(
        self, family: str, api: str, call: ApiCall, args: Sequence[Any]
    ) -> tuple[Any, ...]:
        """The arguments the API receives: an Identity copy, with a gradient hook, in place of each floating-point
        positional input its copy rule allows (the others are noted in ``call.grad_state`` with the reason)."""
        svc = self.service
        key = f"{family}.{api}"
        rule = self._copy_rules.get(key, COPY_ALL)
        slots = _BackwardSlots()
        call.grad_state = slots
        no_copy = self._uncopyable_dtypes()
        replaced = list(args)
        for i, arg in enumerate(args):
            if not self._is_float_tensor(arg):
                continue
            dtype = str(arg.dtype)
            if not rule.copies(i):
                slots.uncopied[i] = rule.reason
            elif dtype in no_copy:
                slots.uncopied[i] = NOT_COPIED_DTYPE.format(dtype=dtype)
            else:
                with svc.collecting():
                    copy = self._identity(arg)
                if _hook_if_differentiable(copy, self._grad_hook(key, call, "output", i)):
                    replaced[i] = copy
        return tuple(replaced)

    def _uncopyable_dtypes(self) -> frozenset[str]:
        """The floating dtypes whose API inputs get no Identity copy (:data:`_NO_CPU_COPY_DTYPES` on CPU, else
        none); the device target is read once, at the first call (kernels have run by then, so it is fixed)."""
        if self._no_copy_dtypes is None:
            try:
                target = str(self._ms.get_context("device_target"))
            except Exception:  # an unreadable context: assume the kernel may be missing
                target = "CPU"
            self._no_copy_dtypes = _NO_CPU_COPY_DTYPES if target == "CPU" else frozenset()
        return self._no_copy_dtypes

    def _hook_api_outputs(self, key: str, call: ApiCall, outputs: Sequence[Any]) -> None:
        slots = call.grad_state
        if not isinstance(slots, _BackwardSlots):  # no input substitution ran (data_mode without output)
            slots = call.grad_state = _BackwardSlots()
        for i, value in enumerate(outputs):
            if self._is_float_tensor(value) and _hook_if_differentiable(value, self._grad_hook(key, call, "input", i)):
                slots.hooked_outputs.append(i)
        self._expect_api_gradients(call, slots)

    def _expect_api_gradients(self, call: ApiCall, slots: _BackwardSlots) -> None:
        """Note the call's gradient slots for the end of the step (:meth:`AdapterBase._expect_gradients`): a hooked
        output no gradient reached and an input deliberately not copied are declared when the entry exists; the
        gradients of copied inputs only show that it does (MindSpore does not say whether one was needed)."""
        config = self.service.config

        bwd = call.backward_name
        expected: list[GradSlot] = []
        if config.records_io("input"):
            expected += [(f"{bwd}.input.{i}", call.grad_inputs, (i,), NO_GRADIENT_TO_OUTPUT)
                         for i in slots.hooked_outputs]
        if config.records_io("output"):
            expected += [(f"{bwd}.output.{i}", call.grad_outputs, (i,), slots.uncopied.get(i, ""))
                         for i in range(len(call.grad_outputs))]
        self._expect_gradients(expected)

    # ----------------------------------------------------------------- model: cells, parameters, primitives

    def _install_model(self, models: tuple[Any, ...], is_list: bool) -> None:
        svc = self.service
        self._models = models
        for model_index, model in enumerate(models):
            mi = model_index if is_list else None
            for path, cell in model.cells_and_names():
                if svc.tracks_apis:
                    self._swap_primitives(cell)
                if path == "" or not svc.tracks_cells:
                    continue  # the root model is not hooked (msprobe's convention)
                self._hook_cell(cell, path, type(cell).__name__, mi)

    def _named_parts(self, model: Any) -> Iterator[tuple[str, Any]]:
        return iter(model.cells_and_names())

    def _remove_model_hooks(self) -> None:
        super()._remove_model_hooks()
        for prim, original_cls in self._prims:
            prim.__class__ = original_cls
        self._prims.clear()

    def _hook_cell(self, cell: Any, path: str, cls: str, mi: int | None) -> None:
        svc = self.service
        state = _CellState()
        self._states.append(state)
        key = f"Cell.{path}"
        params = [(name, p) for name, p in cell.parameters_and_names(expand=False)]
        grad_params = [name for name, p in params if p.requires_grad]
        grad_enabled = self._grad_enabled

        def pre_hook(_cell: Any, args: Any, kwargs: Any) -> None:
            if svc.cell_active() and not svc.is_disabled(key):
                # The inputs are collected now, before the cell runs (a cell may change them in place).
                call = svc.run_guarded(key, lambda: svc.begin_cell(path, cls, mi, args, kwargs))
                if call is not None:
                    state.open_calls.append((call, sys.exc_info()[1]))
            return None

        def forward_hook(_cell: Any, args: Any, kwargs: Any, output: Any) -> None:
            if not state.open_calls:
                return None
            call, handling = state.open_calls.pop()
            if sys.exc_info()[1] is not handling:
                # ``always_call``: the construct raised and MindSpore calls this hook from its ``except`` block,
                # where it silences what the hook raises.  Touching a tensor here would synchronise and could
                # consume a pending kernel error of the training's, which could then not be re-raised: it was lost.
                if call.recorded and call.step == svc.current_step:
                    svc.note_not_captured(call.forward_name, CONSTRUCT_RAISED)
                svc.leave_cell(call)
                return None

            def record() -> None:
                svc.end_cell(call, args, kwargs, output, params, grad_params)
                if grad_enabled() and svc.config.records_direction("backward"):
                    state.awaiting_backward.append(call)

            try:
                svc.run_guarded(key, record)
            finally:
                svc.leave_cell(call)  # whatever happened, the call the pre-hook pushed is popped
            return None

        def backward_hook(_cell: Any, grad_input: Any, grad_output: Any) -> None:
            if not state.awaiting_backward:
                return None
            call = state.awaiting_backward.pop()
            if call.step != svc.current_step:
                return None
            svc.run_guarded(
                f"{key}.backward", lambda: svc.cell_backward(call, _as_tuple(grad_output), _as_tuple(grad_input))
            )
            return None

        self._handles.append(cell.register_forward_pre_hook(pre_hook, with_kwargs=True))
        try:
            self._handles.append(cell.register_forward_hook(forward_hook, with_kwargs=True, always_call=True))
        except TypeError:  # MindSpore before 2.8 (2.7.0 here) has no always_call: a cell whose construct raises
            # then leaves its call open until the step ends
            self._handles.append(cell.register_forward_hook(forward_hook, with_kwargs=True))
        try:
            self._handles.append(cell.register_backward_hook(backward_hook))
        except Exception as exc:  # e.g. a cell kind MindSpore refuses backward hooks on
            svc.note_not_captured(
                f"{key}.backward", f"could not register the cell's backward hook: {exc!r}", persistent=True
            )
        for name, param in params:
            if name in grad_params:
                self._handles.append(param.register_hook(self._param_hook(path, cls, mi, name)))

    def _swap_primitives(self, cell: Any) -> None:
        primitive_type = self._ms.ops.Primitive
        known = {id(p) for p, _ in self._prims}
        for attr, value in list(vars(cell).items()):
            if not isinstance(value, primitive_type) or id(value) in known:
                continue
            original_cls = type(value)
            if getattr(original_cls, WRAPPED_MARK, False):
                continue  # held by another cell we already swapped, or by another recorder
            rule = primitive_copy_rule(original_cls.__name__, bool(getattr(value, "side_effect_mem", False)))
            key = f"Primitive.{attr}.{original_cls.__name__}"
            previous = self._copy_rules.get(key)
            if rule is COPY_ALL and previous is not None:
                rule = previous  # instances under one key that disagree (one with side effects): the stricter wins
            self._copy_rules[key] = rule
            call = self._make_primitive_call(attr, original_cls)
            sub = type(
                original_cls.__name__,
                (original_cls,),
                {
                    "__call__": call,
                    WRAPPED_MARK: True,
                    "__module__": original_cls.__module__,
                    "__qualname__": original_cls.__qualname__,
                },
            )
            value.__class__ = sub
            self._prims.append((value, original_cls))
            known.add(id(value))

    def _make_primitive_call(self, attr: str, original_cls: type) -> Callable[..., Any]:
        svc = self.service
        api = f"{attr}.{original_cls.__name__}"
        key = f"Primitive.{api}"
        original_call = original_cls.__call__
        before = self._api_before
        after = self._api_after

        def __call__(prim: Any, *args: Any, **kwargs: Any) -> Any:
            if not svc.api_active() or svc.is_disabled(key):
                return original_call(prim, *args, **kwargs)
            prepared = svc.run_guarded(key, lambda: before("Primitive", api, args, kwargs))
            call_args = args if prepared is None else prepared[1]
            with svc.inside_api():
                out = original_call(prim, *call_args, **kwargs)
            if prepared is not None:
                call = prepared[0]
                svc.run_guarded(key, lambda: after(key, call, out))
            return out

        return __call__


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return (None,)
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)
