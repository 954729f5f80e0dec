"""MindSpore PyNative adapter: the only module that imports mindspore.

What it installs (all removed by :meth:`MindSporeAdapter.close`):

* **Cells** (L0, mix): on every cell of the model except the root, a forward pre-hook (names the
  call, pushes it on the construct stack), a forward hook with kwargs and ``always_call`` (records
  inputs, outputs and the cell's direct parameters), a backward hook (records gradients w.r.t. the
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
  same, so results are unchanged).  APIs that return views, cast, or write in place get no copy, so
  their ``output`` stays ``null``; inputs that need no gradient stay ``null`` too.

Cell backward entries are paired with their forward call last-in-first-out per cell (backward runs
in reverse order of the forward calls), so ``backward.<n>`` carries the index of forward call ``n``.

Every hook body runs under :meth:`RecorderService.run_guarded`: an exception is logged once and
disables that hook; the framework call itself always runs exactly as without the recorder.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from msprobe_cmp.dump.schema import ValueLeaf
from msprobe_cmp.errors import ConfigError, MissingFrameworkError
from msprobe_cmp.recorder.api_lists import load_api_names
from msprobe_cmp.recorder.collector import DEVICE_STAT_FIELDS, DeferredTensor, HostTensor
from msprobe_cmp.recorder.config import RecordConfig
from msprobe_cmp.recorder.service import ApiCall, CellCall, RecorderService

logger = logging.getLogger(__name__)

#: Marks our wrappers (functions and Primitive subclasses) so a second recorder refuses to stack.
WRAPPED_MARK = "__msprobe_cmp_wrapped__"

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
#: or only read metadata.  Names ending in "_" (in-place) and "__i*__" are excluded as well.
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
        # in-place on their first argument: a copy would receive the write instead
        "assign",
        "assign_add",
        "assign_sub",
        "scatter_update",
        "scatter_nd_update",
    }
)
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
_FLOAT_DTYPES = frozenset({"Float16", "Float32", "Float64", "BFloat16"})
#: Dtypes whose statistics are always fetched synchronously (abs() of complex values stays on the host).
_HOST_ONLY_DTYPES = frozenset({"Complex64", "Complex128"})
#: At most this many statistics vectors are stacked into one device tensor before a host transfer.
FETCH_CHUNK = 4096


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


def _copies_inputs(api: str) -> bool:
    dunder = api.startswith("__") and api.endswith("__")
    inplace = (api.endswith("_") and not dunder) or (dunder and api.startswith("__i") and api != "__invert__")
    return not (api in NO_COPY_APIS or inplace)


def _as_models(model: Any, cell_type: type) -> tuple[tuple[Any, ...], bool]:
    if model is None:
        return (), False
    if isinstance(model, (list, tuple)):
        for i, m in enumerate(model):
            if not isinstance(m, cell_type):
                raise ConfigError(f"start(model): model[{i}] is a {type(m).__name__}, not a mindspore.nn.Cell")
        return tuple(model), True
    if not isinstance(model, cell_type):
        raise ConfigError(f"start(model): expected a mindspore.nn.Cell or a list of them, got {type(model).__name__}")
    return (model,), False


class _Patch:
    """One replaced attribute (a module function or a Tensor method) and how to put it back."""

    __slots__ = ("owner", "name", "original", "had_own", "wrapper")

    def __init__(self, owner: Any, name: str, original: Any, had_own: bool, wrapper: Any) -> None:
        self.owner = owner
        self.name = name
        self.original = original
        self.had_own = had_own
        self.wrapper = wrapper

    def restore(self) -> None:
        current = getattr(self.owner, self.name, None)
        if current is not self.wrapper:
            logger.warning("msprobe-cmp: %s.%s was replaced by someone else; leaving it", self.owner, self.name)
            return
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)


class _CellState:
    """Per-cell bookkeeping: open forward calls and forward calls awaiting their backward."""

    __slots__ = ("open_calls", "awaiting_backward")

    def __init__(self) -> None:
        self.open_calls: list[CellCall] = []
        self.awaiting_backward: list[CellCall] = []


class MindSporeAdapter:
    """Installs MindSpore hooks that feed a :class:`RecorderService`.

    Args:
        config: the recording configuration.

    Raises:
        MissingFrameworkError: when mindspore is not installed.
    """

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
        self._tensor_type = ms.Tensor
        self._dtype_type = ms.dtype.Type
        self._bfloat16 = ms.bfloat16
        self._float32 = ms.float32
        # Originals captured before anything is wrapped: the recorder's own operations.
        # ops.deepcopy = the Identity kernel (ops.identity is deprecated and warns).
        self._identity = ms.ops.deepcopy
        self._cast = ms.ops.cast
        self._async = config.async_dump
        self._device_stats = _DeviceStats(ms) if config.async_dump else None
        self._save_tensors = config.saves_tensors
        self.service = RecorderService(
            config, framework="mindspore", rank=self._detect_rank(), convert=self._convert, fetcher=self
        )
        self._patches: list[_Patch] = []
        self._prims: list[tuple[Any, type]] = []
        self._handles: list[Any] = []
        self._cell_states: list[_CellState] = []
        self._models: tuple[Any, ...] = ()
        self._apis_installed = False
        self._closed = False
        self._warned_save = False
        if config.ranks and self.service.rank is None:
            logger.warning(
                "msprobe-cmp: %s: rank %s is set but this run is not distributed; recording as 'rank'",
                config.source,
                list(config.ranks),
            )
        # API wrappers go in now, so names bound after the debugger is built (``from mindspore.ops
        # import relu``) are wrapped too; the switch (start/stop) decides what is recorded.
        if self.service.tracks_apis:
            self._install_apis()

    # ----------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (everything removed)."""
        return self._closed

    def start(self, model: Any = None) -> None:
        """Install hooks (once per model) and switch recording on if the current step is selected.

        Raises:
            ConfigError: when ``model`` is not a Cell (or list of Cells), when L0/mix get no model, or when
                another recorder's wrappers are installed.
        """
        if self._closed:
            return
        svc = self.service
        if svc.finished():
            self.close()
            return
        models, is_list = _as_models(model, self._ms.nn.Cell)
        if svc.tracks_cells and not models:
            raise ConfigError(f"start(model): level {svc.config.level} records cells and needs the model")
        if not svc.step_selected():
            return
        if svc.tracks_apis and not self._apis_installed:
            self._install_apis()
        if models and (
            len(models) != len(self._models) or any(a is not b for a, b in zip(models, self._models, strict=True))
        ):
            self._remove_model_hooks()
            self._install_model(models, is_list)
        svc.begin()

    def stop(self) -> None:
        """Switch recording off and flush the step's files so far."""
        self.service.end()

    def step(self) -> None:
        """Flush and close the current step, advance to the next; remove everything after the last step."""
        svc = self.service
        for state in self._cell_states:
            for call in state.awaiting_backward:
                if call.recorded and call.step == svc.current_step:
                    svc.note_not_captured(
                        call.forward_name.replace(".forward.", ".backward."),
                        "the cell ran with gradients enabled but its backward hook never fired "
                        "(no gradient reached its outputs, or MindSpore did not call the hook)",
                    )
        svc.advance_step()
        for state in self._cell_states:
            state.open_calls.clear()
            state.awaiting_backward.clear()
        if self.service.finished():
            logger.info("msprobe-cmp: last selected step recorded; hooks removed")
            self.close()

    def close(self) -> None:
        """Flush, then remove every hook, wrapper and class swap; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.service.end(closing=True)
        self._remove_model_hooks()
        for patch in reversed(self._patches):
            try:
                patch.restore()
            except Exception as exc:  # keep restoring the rest
                logger.warning("msprobe-cmp: could not restore %s: %r", patch.name, exc)
        self._patches.clear()
        self._apis_installed = False

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """Debug level: record ``variable`` as ``<name>.<n>`` and, in a gradient context, its gradients as
        ``<name>_grad.<n>`` in ``step<N>/rank<R>/debug.json``.

        Does nothing (one warning) at other levels, and nothing for steps the config does not select.
        """
        svc = self.service
        if self._closed or svc.finished() or not svc.step_selected():
            return
        if svc.config.level != "debug":
            if not self._warned_save:
                self._warned_save = True
                logger.warning("msprobe-cmp: save() records only at level debug (this run: %s)", svc.config.level)
            return
        if not isinstance(name, str) or not name:
            logger.warning("msprobe-cmp: save(): name must be a non-empty string, got %r; not recorded", name)
            return
        key = f"save.{name}"
        names = svc.run_guarded(key, lambda: svc.debug_save(name, variable))
        if names is None or not save_backward or not self._grad_enabled():
            return
        grad_entry = names[1]

        def hook_all() -> None:
            hooked: list[tuple[tuple[Any, ...], Any]] = []
            skeleton = self._grad_skeleton(variable, (), hooked, 0)
            if not hooked:
                return
            svc.debug_expect_grad(grad_entry, skeleton)
            for position, tensor in hooked:
                tensor.register_hook(self._debug_grad_hook(f"{key}.backward", grad_entry, position))

        svc.run_guarded(f"{key}.backward", hook_all)

    def _grad_skeleton(self, value: Any, position: tuple[Any, ...], out: list[Any], depth: int) -> Any:
        if self._is_float_tensor(value):
            out.append((position, value))
            return None
        if depth >= 10:
            return None
        if isinstance(value, (list, tuple)):
            return [self._grad_skeleton(v, (*position, i), out, depth + 1) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self._grad_skeleton(v, (*position, str(k)), out, depth + 1) for k, v in value.items()}
        return None

    def _debug_grad_hook(self, key: str, grad_entry: str, position: tuple[Any, ...]) -> Callable[[Any], None]:
        svc = self.service

        def hook(grad: Any) -> None:
            svc.run_guarded(key, lambda: svc.debug_grad(grad_entry, position, grad))
            return None

        return hook

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

    def _is_float_tensor(self, value: object) -> bool:
        return isinstance(value, self._tensor_type) and str(value.dtype) in _FLOAT_DTYPES

    def _convert(self, value: object) -> HostTensor | DeferredTensor | ValueLeaf | None:
        """Framework object → host value (called by the collector, inside the service's collecting guard)."""
        if isinstance(value, self._tensor_type):
            dtype = str(value.dtype)
            if self._device_stats is not None and dtype not in _HOST_ONLY_DTYPES:
                return self._defer(value, dtype)
            with self._no_grad():
                if value.dtype == self._bfloat16:
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

    def fetch_stats(self, vectors: Sequence[Any]) -> Any:
        """Deferred statistics vectors → one float64 numpy array ``[len(vectors), 7]`` (one transfer per
        :data:`FETCH_CHUNK` vectors: they are stacked on the device first)."""
        stats = self._device_stats
        if stats is None or not vectors:
            return np.zeros((0, len(DEVICE_STAT_FIELDS)), np.float64)
        parts = []
        with self._no_grad():
            for start in range(0, len(vectors), FETCH_CHUNK):
                parts.append(stats.stack(list(vectors[start : start + FETCH_CHUNK])).asnumpy())
        return np.concatenate(parts).astype(np.float64, copy=False)

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
                if getattr(original, WRAPPED_MARK, False):
                    self.close()
                    raise ConfigError(
                        f"PrecisionDebugger(): {target}.{name} is already wrapped by another PrecisionDebugger; "
                        "close() it first"
                    )
                had_own = name in vars(owner)
                wrapper = self._make_api_wrapper(family, name, original, _copies_inputs(name))
                setattr(owner, name, wrapper)
                self._patches.append(_Patch(owner, name, original, had_own, wrapper))
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
        if getattr(original, WRAPPED_MARK, False):
            self.close()
            raise ConfigError(
                "PrecisionDebugger(): the jit executor is already wrapped by another PrecisionDebugger; "
                "close() it first"
            )
        wrapper = self._make_jit_call(original)
        executor.__call__ = wrapper
        self._patches.append(_Patch(executor, "__call__", original, True, wrapper))

    def _make_jit_call(self, original: Callable[..., Any]) -> Any:
        svc = self.service
        before = self._api_before
        after = self._api_after

        @functools.wraps(original)
        def __call__(executor: Any, *args: Any, **kwargs: Any) -> Any:
            if not svc.api_active():
                return original(executor, *args, **kwargs)
            owner = getattr(executor, "obj", None)
            skip = 1 if owner is not None else 0
            fn = getattr(executor, "fn", None)
            name = type(owner).__name__ if owner is not None else getattr(fn, "__name__", "jit")
            key = f"{JIT_FAMILY}.{name}"
            if svc.is_disabled(key):
                return original(executor, *args, **kwargs)
            user_args = args[skip:]
            prepared = svc.run_guarded(key, lambda: before(JIT_FAMILY, name, user_args, kwargs, True))
            call_args = args if prepared is None else (*args[:skip], *prepared[1])
            with svc.inside_api():
                out = original(executor, *call_args, **kwargs)
            if prepared is not None:
                call = prepared[0]
                svc.run_guarded(key, lambda: after(key, call, out))
                if call.recorded:
                    svc.note_not_captured(call.forward_name, JIT_NOT_CAPTURED)
            return out

        setattr(__call__, WRAPPED_MARK, True)
        return __call__

    def _make_api_wrapper(self, family: str, api: str, original: Callable[..., Any], copy_inputs: bool) -> Any:
        svc = self.service
        key = f"{family}.{api}"
        before = self._api_before
        after = self._api_after

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not svc.api_active() or svc.is_disabled(key):
                return original(*args, **kwargs)
            prepared = svc.run_guarded(key, lambda: before(family, api, args, kwargs, copy_inputs))
            call_args = args if prepared is None else prepared[1]
            with svc.inside_api():
                out = original(*call_args, **kwargs)
            if prepared is not None:
                call = prepared[0]
                svc.run_guarded(key, lambda: after(key, call, out))
            return out

        setattr(wrapper, WRAPPED_MARK, True)
        return wrapper

    def _api_before(
        self, family: str, api: str, args: Sequence[Any], kwargs: dict[str, Any], copy_inputs: bool
    ) -> tuple[ApiCall, tuple[Any, ...]]:
        svc = self.service
        call = svc.begin_api(family, api, args, kwargs)
        call_args = tuple(args)
        if call.record_backward and self._grad_enabled():
            call.grad_outputs = [None] * len(args)
            if copy_inputs:
                replaced = list(args)
                for i, arg in enumerate(args):
                    if self._is_float_tensor(arg):
                        with svc.collecting():
                            copy = self._identity(arg)
                        copy.register_hook(self._grad_hook(f"{family}.{api}", call, "output", i))
                        replaced[i] = copy
                call_args = tuple(replaced)
        else:
            call.record_backward = False
        return call, call_args

    def _api_after(self, key: str, call: ApiCall, out: Any) -> None:
        svc = self.service
        svc.end_api(call, out)
        if not call.record_backward:
            return
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        call.grad_inputs = [None] * len(outputs)
        for i, value in enumerate(outputs):
            if self._is_float_tensor(value):
                value.register_hook(self._grad_hook(key, call, "input", i))

    def _grad_hook(self, key: str, call: ApiCall, field: str, position: int) -> Callable[[Any], None]:
        svc = self.service
        hook_key = f"{key}.backward"

        def hook(grad: Any) -> None:
            svc.run_guarded(hook_key, lambda: svc.api_grad(call, field, position, grad))
            return None

        return hook

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

    def _remove_model_hooks(self) -> None:
        for handle in self._handles:
            try:
                handle.remove()
            except Exception as exc:  # keep removing the rest
                logger.warning("msprobe-cmp: could not remove a hook: %r", exc)
        self._handles.clear()
        for prim, original_cls in self._prims:
            prim.__class__ = original_cls
        self._prims.clear()
        self._cell_states.clear()
        self._models = ()

    def _hook_cell(self, cell: Any, path: str, cls: str, mi: int | None) -> None:
        svc = self.service
        state = _CellState()
        self._cell_states.append(state)
        key = f"Cell.{path}"
        params = [(name, p) for name, p in cell.parameters_and_names(expand=False)]
        grad_params = [name for name, p in params if p.requires_grad]
        grad_enabled = self._grad_enabled

        def pre_hook(_cell: Any, _args: Any, _kwargs: Any) -> None:
            if svc.cell_active() and not svc.is_disabled(key):
                call = svc.run_guarded(key, lambda: svc.begin_cell(path, cls, mi))
                if call is not None:
                    state.open_calls.append(call)
            return None

        def forward_hook(_cell: Any, args: Any, kwargs: Any, output: Any) -> None:
            if not state.open_calls:
                return None
            call = state.open_calls.pop()

            def record() -> None:
                svc.end_cell(call, args, kwargs, output, params, grad_params)
                if grad_enabled() and svc.config.records_direction("backward"):
                    state.awaiting_backward.append(call)

            svc.run_guarded(key, record)
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
        self._handles.append(cell.register_forward_hook(forward_hook, with_kwargs=True, always_call=True))
        try:
            self._handles.append(cell.register_backward_hook(backward_hook))
        except Exception as exc:  # e.g. a cell kind MindSpore refuses backward hooks on
            svc.note_not_captured(
                f"{key}.backward", f"could not register the cell's backward hook: {exc!r}", persistent=True
            )
        for name, param in params:
            if name in grad_params:
                self._handles.append(param.register_hook(self._param_hook(path, cls, mi, name)))

    def _param_hook(self, path: str, cls: str, mi: int | None, name: str) -> Callable[[Any], None]:
        svc = self.service
        key = f"Cell.{path}.parameters_grad"

        def hook(grad: Any) -> None:
            svc.run_guarded(key, lambda: svc.parameter_grad(path, cls, mi, name, grad))
            return None

        return hook

    def _swap_primitives(self, cell: Any) -> None:
        primitive_type = self._ms.ops.Primitive
        known = {id(p) for p, _ in self._prims}
        for attr, value in list(vars(cell).items()):
            if not isinstance(value, primitive_type) or id(value) in known:
                continue
            original_cls = type(value)
            if getattr(original_cls, WRAPPED_MARK, False):
                continue  # held by another cell we already swapped, or by another recorder
            copy_inputs = original_cls.__name__ not in NO_COPY_PRIMITIVES and not getattr(
                value, "side_effect_mem", False
            )
            call = self._make_primitive_call(attr, original_cls, copy_inputs)
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

    def _make_primitive_call(self, attr: str, original_cls: type, copy_inputs: bool) -> Callable[..., Any]:
        svc = self.service
        api = f"{attr}.{original_cls.__name__}"
        key = f"Primitive.{api}"
        original_call = original_cls.__call__
        before = self._api_before
        after = self._api_after

        def __call__(prim: Any, *args: Any, **kwargs: Any) -> Any:
            if not svc.api_active() or svc.is_disabled(key):
                return original_call(prim, *args, **kwargs)
            prepared = svc.run_guarded(key, lambda: before("Primitive", api, args, kwargs, copy_inputs))
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
