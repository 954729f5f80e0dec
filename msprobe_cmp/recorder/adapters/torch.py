"""PyTorch and mindtorch adapter: the only module of msprobe-cmp that imports torch.

One adapter serves both flavours of the torch API; ``framework="pytorch"`` is real torch,
``framework="mindtorch"`` is mindtorch (mindnlp's PyTorch API on MindSpore, whose ``torch.Tensor`` *is*
``mindspore.Tensor``).  What it installs (all removed by :meth:`TorchAdapter.close`):

* **Modules** (L0, mix): on every submodule of the model (not the root, msprobe's convention), a forward
  pre-hook (names the call ``Module.<path>.<Class>.forward.<n>``, pushes it on the construct stack) and a
  forward hook with kwargs (records inputs, outputs and the module's own parameters).  Backward, per call
  (so ``backward.<n>`` is forward call ``n``'s, whatever order the backward runs in):

  - ``input`` = gradients w.r.t. the call's floating-point outputs, from a tensor hook on each output wherever it
    sits (tuples, dicts, ``ModelOutput``, named tuples: the forward ``output``'s argument paths);
  - ``output`` = gradients w.r.t. its positional inputs (PyTorch only), from post-hooks on the autograd nodes the
    call created (:mod:`.torch_grads`): nothing is put between a tensor and its consumers, so the module receives
    its caller's tensors and training stays bit-identical.

  Inputs are collected at the pre-hook, before the module runs (an in-place module changes them); buffers after
  the call (``buffers``) and, for those it changed, before it (``buffers_before``).  Under mindtorch (no such
  autograd graph) ``output`` is not captured (``null``, listed in ``not_captured``).

  Each direct trainable parameter gets a gradient hook (``Tensor.register_hook``; mindtorch: MindSpore's
  ``TensorPy.register_hook``, since mindtorch's own ``register_hook`` is broken) that fills
  ``Module.<path>.<Class>.parameters_grad``.
* **APIs** (L1, mix): the functions listed in ``api_lists/torch_*.txt`` that the installed torch has:
  ``torch`` → ``Torch.``, ``torch.Tensor`` methods (dunders included) → ``Tensor.``,
  ``torch.nn.functional`` → ``Functional.``, ``torch.distributed`` → ``Distributed.``.  Only the
  outermost wrapped call is recorded; calls made by torch's module backward-hook machinery
  (``BackwardHook.setup_input_hook`` / ``setup_output_hook``, which msprobe records as ``Tensor.view_as``)
  and by the recorder itself never are.

API backward, when gradients are being recorded (PyTorch: grad mode on and the tensor requires grad;
mindtorch: inside ``mindtorch.autograd.value_and_grad`` / ``mindspore.value_and_grad``): ``input`` = the
gradients w.r.t. the call's floating-point outputs (tensor hooks), ``output`` = w.r.t. its positional
inputs, positionally (PyTorch only, from the call's own autograd nodes as for modules; in-place APIs included).
The API receives its arguments unchanged.

Statistics are reduced in float64 on the host from ``tensor.detach()`` (bf16 upcast to float32 first, as
the MindSpore adapter does; the tensor task saves that float32 array as ``.npy``, with ``torch.bfloat16`` as
the leaf dtype).  dtypes use torch's spelling (``torch.float32``; mindtorch's ``mindspore.float32`` is
written ``torch.float32`` too); leaves carry ``requires_grad``.  ``async_dump`` (PyTorch): a float64
statistics vector per tensor is computed on the tensor's device and fetched at ``stop()`` / ``step()``;
under mindtorch it falls back to the synchronous path.

Not recorded (never failures): TorchScript modules (skipped at ``start(model)``, listed in ``not_captured``),
calls inside torch.func transforms or fake/proxy tracing (listed once per step), and compiled regions (every
wrapper and hook returns to the original first when ``torch.compiler.is_compiling()``, so dynamo traces only the
original calls).  docs/recorder.md details these and what the input views change inside a module.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from msprobe_cmp.dump.schema import ValueLeaf
from msprobe_cmp.recorder.adapters.base import WRAPPED_MARK, AdapterBase, fetch_stacked, never
from msprobe_cmp.recorder.adapters.torch_grads import EdgeWatch, InputGrads
from msprobe_cmp.recorder.adapters.torch_support import (
    _FLOAT_DTYPES,
    _HOST_ONLY_DTYPES,
    API_FAMILIES,
    COMPILED_MODULE_REASON,
    FUNCTORCH_KEY,
    FUNCTORCH_REASON,
    MINDTORCH_API_INPUT_GRADS_KEY,
    MINDTORCH_BACKWARD_KEY,
    MINDTORCH_NO_API_INPUT_GRADS,
    MINDTORCH_NO_BACKWARD,
    MINDTORCH_NO_INPUT_GRADS,
    PASSTHROUGH_REASON,
    SCRIPT_MODULE_REASON,
    TRACING_KEY,
    TRACING_REASON,
    UNSEEN_REASON,
    _ModuleBackward,
    _ModuleState,
    import_torch,
    unreached_reason,
)
from msprobe_cmp.recorder.api_lists import load_api_names
from msprobe_cmp.recorder.collector import DeferredTensor, HostTensor, TensorStamp
from msprobe_cmp.recorder.config import RecordConfig
from msprobe_cmp.recorder.service import ApiCall, CellCall, describe_error

logger = logging.getLogger(__name__)



class TorchAdapter(AdapterBase):
    """Installs torch (or mindtorch) hooks that feed a :class:`RecorderService`.

    Args:
        config: the recording configuration.
        framework: ``"pytorch"`` or ``"mindtorch"`` (written to dump.json's ``framework``).

    Raises:
        MissingFrameworkError: when torch (mindtorch) is not installed.
        ConfigError: when another recorder's wrappers are installed.
    """

    _logger = logger
    _MODEL_KIND = "torch.nn.Module"
    _PARTS = "modules"
    _UNFIRED_BACKWARD = "the module ran with gradients enabled but no gradient reached its outputs in this step"

    def __init__(self, config: RecordConfig, framework: str = "pytorch") -> None:
        torch = import_torch(framework)
        self._torch = torch
        self._mindtorch = framework == "mindtorch"
        # mindtorch: whether a gradient context was seen while recording this step (see stop()).
        self._mindtorch_grad_seen = False
        # mindtorch: the step in which Tensor.backward() was last called while recording (see stop()).
        self._mindtorch_backward_step: int | None = None
        self._mindtorch_backward_watch: tuple[Any, str, Any, Any, bool] | None = None
        self._tensor_type = torch.Tensor
        self._model_type = torch.nn.Module

        # The classes naming non-tensor values, resolved once.  Only real classes outside builtins qualify:
        # mindtorch has torch.memory_format = None and torch.layout = object (which every value is an instance of).
        classes = {name: getattr(torch, name, None) for name in ("dtype", "device", "memory_format", "layout")}
        usable = {n: c for n, c in classes.items() if isinstance(c, type) and c.__module__ != "builtins"}
        # torch.dtype; mindtorch's is MindSpore's dtype base class (type(torch.float32) would be Float only).
        self._dtype_type: type = usable.pop("dtype", type(torch.float32))
        # The other non-tensor values recorded as leaves: (class, leaf type).
        self._value_types: tuple[tuple[type, str], ...] = tuple((c, f"torch.{n}") for n, c in usable.items())
        # Gradients w.r.t. inputs from autograd's own nodes (PyTorch; mindtorch has no such graph).
        self._edges = (
            EdgeWatch(torch, lambda: self.service.collecting())
            if not self._mindtorch and EdgeWatch.available(torch)
            else None
        )
        # Hooks put on outputs that are leaves (a parameter a module returns): removed at step() and close().
        self._leaf_hooks: list[Any] = []
        # DDP: the hooked parameters per module, whose .grad is read after the all-reduce (parameters_grad_reduced),
        # and whether that read is queued for the current backward pass.
        self._ddp_modules: list[tuple[str, str, int | None, list[tuple[str, Any]]]] = []
        self._reduced_queued = False
        self._ms_hook: Callable[[Any, Callable[[Any], Any]], Any] | None = None
        self._ms_requires_grad: Callable[[], bool] | None = None
        # torch.compile: dynamo folds is_compiling() to True while tracing, so a compiled region holds only the
        # original calls (no recorder code is traced, no graph break, no recompilation).
        self._compiling = _working(getattr(getattr(torch, "compiler", None), "is_compiling", None)) or never
        c = getattr(torch, "_C", None)
        # torch.func transforms (vmap, grad, jvp): their wrapped tensors cannot be recorded.
        self._functorch_active = _working(getattr(c, "_are_functorch_transforms_active", None))
        # Tracing with fake/proxy/functional tensors (AOTAutograd, inductor, export): values do not exist.
        keys = getattr(c, "_TorchDispatchModeKey", None)
        modes = tuple(getattr(keys, name) for name in ("FAKE", "PROXY", "FUNCTIONAL") if hasattr(keys, name))
        get_mode = getattr(c, "_get_dispatch_mode", None)
        self._tracing_active = (
            _working(lambda: any(get_mode(k) is not None for k in modes)) if modes and get_mode is not None else None
        )
        script_type = getattr(getattr(torch, "jit", None), "ScriptModule", None)
        self._script_type: type | None = script_type if isinstance(script_type, type) else None
        if self._mindtorch:
            self._setup_mindtorch()
        self._async = config.async_dump and not self._mindtorch
        self._save_tensors = config.saves_tensors
        super().__init__(config, framework=framework, cell_prefix="Module")
        if self._mindtorch_backward_watch is not None:
            self._replace(*self._mindtorch_backward_watch)  # restored by close()

    def _warn_config(self, config: RecordConfig) -> None:
        if config.async_dump and self._mindtorch:
            logger.warning("msprobe-cmp: async_dump is not supported under mindtorch; statistics are synchronous")
        super()._warn_config(config)

    def _setup_mindtorch(self) -> None:
        # mindtorch's tensors are MindSpore tensors; its Tensor.register_hook is broken (it forwards to a
        # missing ``_data``), MindSpore's own C++ registration works inside a MindSpore gradient context.
        from mindspore._c_expression import TensorPy

        try:
            from mindspore.common.hook_handle import _TensorHookHandle
        except ImportError:  # pragma: no cover - older MindSpore
            _TensorHookHandle = None

        try:
            from mindspore.graph import api as ms_api
        except ImportError:
            from mindspore.common import api as ms_api
        executor = ms_api._pynative_executor

        def hook(tensor: Any, fn: Callable[[Any], Any]) -> Any:
            hook_id = TensorPy.register_hook(tensor, fn)
            if _TensorHookHandle is None:
                return None
            handle = _TensorHookHandle(tensor)
            handle.id = hook_id
            return handle

        self._ms_hook = hook
        self._ms_requires_grad = lambda: bool(executor.requires_grad())
        self._training_sync = executor.sync  # mindtorch: see AdapterBase._surface_training_error

        # Outside a MindSpore gradient context Tensor.backward() is not seen by the hooks (on CPU it computes
        # nothing at all): a call while recording tells a step that tried to train, whose missing backward
        # stop() declares, from a forward-only one.  The call itself is passed on unchanged.
        tensor_type = self._tensor_type
        original = getattr(tensor_type, "backward", None)
        if not callable(original):
            return

        @functools.wraps(original)
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            svc = self.service
            if svc.is_on:
                self._mindtorch_backward_step = svc.current_step
            return original(tensor, *args, **kwargs)

        # Installed by __init__ once the service exists (it needs AdapterBase's patch list).
        self._mindtorch_backward_watch = (tensor_type, "backward", original, backward, "backward" in vars(tensor_type))

    # ----------------------------------------------------------------- lifecycle

    def stop(self) -> None:
        """Switch recording off and flush the step's files so far."""
        svc = self.service
        if (
            self._mindtorch
            and svc.is_on
            and self._mindtorch_backward_step == svc.current_step
            and not self._mindtorch_grad_seen
            and svc.config.records_direction("backward")
        ):
            # The step tried to train (Tensor.backward() was called) but no gradient context was seen: say why it
            # has no backward at all, instead of leaving it silently absent.  A forward-only step (no_grad, or
            # simply no backward) declares nothing.
            svc.note_not_captured(MINDTORCH_BACKWARD_KEY, MINDTORCH_NO_BACKWARD)
        super().stop()

    def _unfired_call(self, pending: _ModuleBackward) -> CellCall | None:
        return None if pending.fired else pending.call

    def step(self) -> None:
        """Remove the hooks put on leaf outputs this step, then as :meth:`AdapterBase.step`."""
        self._remove_leaf_hooks()
        super().step()

    def _remove_leaf_hooks(self) -> None:
        for handle in self._leaf_hooks:
            try:
                handle.remove()
            except Exception:  # pragma: no cover - removing what was registered
                pass
        self._leaf_hooks.clear()

    def close(self) -> None:
        """Remove everything (see :meth:`AdapterBase.close`), the hooks on leaf outputs included."""
        self._remove_leaf_hooks()
        super().close()

    def _reset_step(self) -> None:
        self._mindtorch_grad_seen = False
        super()._reset_step()

    # ----------------------------------------------------------------- flavour differences

    def _detect_rank(self) -> int | None:
        try:
            dist = self._torch.distributed
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:  # no distributed support: not distributed
            return None
        return None

    def _world_size(self) -> int | None:
        """The number of ranks of the initialised default process group; None when not distributed or unknown."""
        try:
            dist = self._torch.distributed
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_world_size())
        except Exception:  # no distributed support, or no default group: unknown
            return None
        return None

    def _dtype_name(self, dtype: Any) -> str:
        name = str(dtype)
        if name.startswith("mindspore."):
            return "torch." + name[len("mindspore.") :]
        return name

    def _is_float_tensor(self, value: object) -> bool:
        if not isinstance(value, self._tensor_type):
            return False
        self._surface_training_error()
        return self._dtype_name(value.dtype) in _FLOAT_DTYPES

    def _grad_enabled(self) -> bool:
        if self._ms_requires_grad is not None:
            enabled = bool(self._ms_requires_grad())
            if enabled and self.service.is_on:
                self._mindtorch_grad_seen = True
            return enabled
        return bool(self._torch.is_grad_enabled())

    def _wants_grad(self, value: object) -> bool:
        """True when a gradient can arrive for ``value`` (a float tensor in a gradient context)."""
        if not self._is_float_tensor(value):
            return False
        if self._mindtorch:
            return self._grad_enabled()
        return bool(value.requires_grad) and self._grad_enabled()  # type: ignore[attr-defined]

    def _hook_tensor(self, tensor: Any, fn: Callable[[Any], None]) -> Any:
        if self._ms_hook is not None:
            return self._ms_hook(tensor, fn)
        return tensor.register_hook(fn)

    def _in_transform(self) -> bool:
        """True inside a torch.func transform (vmap, grad, jvp, ...) or while torch traces with fake/proxy
        tensors: nothing is recorded there (noted in this step's ``not_captured`` while recording is on)."""
        try:
            if self._functorch_active is not None and self._functorch_active():
                what, reason = FUNCTORCH_KEY, FUNCTORCH_REASON
            elif self._tracing_active is not None and self._tracing_active():
                what, reason = TRACING_KEY, TRACING_REASON
            else:
                return False
        except Exception:  # called from wrappers and hooks: never raise
            return False
        if self.service.is_on:
            self.service.note_not_captured(what, reason)
        return True

    # ----------------------------------------------------------------- conversion

    def _convert(self, value: object) -> HostTensor | DeferredTensor | ValueLeaf | None:
        """Framework object → host value (called by the collector, inside the service's collecting guard)."""
        torch = self._torch
        if isinstance(value, self._tensor_type):
            self._surface_training_error()
            dtype = self._dtype_name(value.dtype)
            requires_grad = bool(getattr(value, "requires_grad", False))
            if self._async and dtype not in _HOST_ONLY_DTYPES and not self._is_sparse(value):
                return self._defer(value, dtype, requires_grad)
            return HostTensor(self._host_array(value, dtype), dtype, "torch.Tensor", requires_grad)
        if isinstance(value, self._dtype_type):
            return ValueLeaf("torch.dtype", self._dtype_name(value))
        for cls, kind in self._value_types:  # device, memory_format, layout: those that are classes here
            if isinstance(value, cls):
                text = str(value)
                if kind == "torch.device" and self._mindtorch:
                    # mindtorch's str() is "device(type=cpu)": written as torch writes it ("cpu", "cuda:0").
                    device_type, index = getattr(value, "type", None), getattr(value, "index", None)
                    if isinstance(device_type, str):
                        text = device_type if index is None else f"{device_type}:{index}"
                return ValueLeaf(kind, text)
        group_type = getattr(getattr(torch, "distributed", None), "ProcessGroup", None)
        if isinstance(group_type, type) and isinstance(value, group_type):
            # A collective's ``group``: named by the global ranks it holds (``[0, 1]``), null if unknown.
            ranks: tuple[int, ...] | None
            try:
                ranks = tuple(int(r) for r in torch.distributed.get_process_group_ranks(value))
            except Exception:  # not a group of this process's default group, or no such function
                ranks = None
            return ValueLeaf("torch.distributed.ProcessGroup", ranks)
        return None

    def _tensor_stamp(self) -> TensorStamp | None:
        """PyTorch: ``(_version, data_ptr(), shape, stride(), dtype, requires_grad)`` of a tensor in the autograd
        graph (``requires_grad``: activations, parameters) or read by a backward hook (a gradient: inside
        ``backward()`` with gradients disabled); None for the rest (a module's buffers, the inputs, masks, a
        forward under ``no_grad()``, a checkpointed forward recomputed in the backward), which are read every time:
        kernels write some such tensors without counting it (BatchNorm's running statistics).

        The version counter counts every in-place operation on the tensor and its views (``detach()`` shares it);
        the data pointer, shape and strides show ``tensor.data = other`` and ``set_``.  Writes PyTorch does not
        count (through ``.data``, a numpy view or DLPack) to such a tensor between two of its records within one
        ``start()``..``stop()`` are not seen.  mindtorch: None (MindSpore tensors have no version counter)."""
        if self._mindtorch:
            return None
        torch = self._torch
        graph_task = getattr(torch._C, "_current_graph_task_id", None)
        grad_enabled = torch.is_grad_enabled

        def stamp(t: Any) -> tuple[Any, ...] | None:
            try:
                if not t.requires_grad and (graph_task is None or grad_enabled() or graph_task() == -1):
                    return None
                return (t._version, t.data_ptr(), t.shape, t.stride(), t.dtype, t.requires_grad)
            except Exception:  # inference-mode tensors have no version counter, sparse ones no strides
                return None

        return stamp

    def _host_array(self, value: Any, dtype: str) -> np.ndarray:
        if self._mindtorch:
            t = value.float() if dtype == "torch.bfloat16" else value
            return np.asarray(t.asnumpy())
        # detach() first: what follows records nothing for autograd (no no_grad() block needed, a few microseconds
        # a tensor)
        t = value.detach()
        if self._is_sparse(t):
            t = t.to_dense()  # sparse layouts: statistics (and files) of the dense values
        if dtype == "torch.bfloat16":
            t = t.float()  # numpy has no bf16: upcast exactly, as the MindSpore adapter does
        t = t.cpu().resolve_conj().resolve_neg()
        try:
            return t.numpy()
        except TypeError:  # dtypes numpy lacks (float8_*, complex32): upcast exactly, the dtype stays torch's
            return (t.to(self._torch.complex64) if t.is_complex() else t.float()).numpy()

    def _is_sparse(self, value: Any) -> bool:
        layout = getattr(value, "layout", None)
        return layout is not None and layout != getattr(self._torch, "strided", layout)

    def _defer(self, value: Any, dtype: str, requires_grad: bool) -> DeferredTensor:
        """async_dump: the tensor's float64 statistics vector (or, tensor task, a copy), left on the device."""
        torch = self._torch
        shape = tuple(int(d) for d in value.shape)
        if value.numel() == 0:
            return DeferredTensor(dtype, shape, type="torch.Tensor", requires_grad=requires_grad)
        with torch.no_grad():
            t = value.detach()
            if self._save_tensors:
                copy = t.float() if dtype == "torch.bfloat16" else t.clone()
                return DeferredTensor(dtype, shape, copy=copy, type="torch.Tensor", requires_grad=requires_grad)
            flat = t.reshape(-1).to(torch.float64)
            head = torch.stack([flat.max(), flat.min(), flat.sum(), torch.dot(flat, flat)])
            if dtype in _FLOAT_DTYPES:
                counts = torch.stack(
                    [torch.isnan(flat).sum(), torch.isposinf(flat).sum(), torch.isneginf(flat).sum()]
                ).to(torch.float64)
            else:
                counts = torch.zeros(3, dtype=torch.float64, device=flat.device)
            stats = torch.cat([head, counts])
        return DeferredTensor(dtype, shape, stats=stats, type="torch.Tensor", requires_grad=requires_grad)

    def fetch_stats(self, vectors: Sequence[Any]) -> Any:
        """Deferred statistics vectors → one float64 numpy array ``[len(vectors), 7]`` (one transfer per
        :data:`~msprobe_cmp.recorder.adapters.base.FETCH_CHUNK` vectors: they are stacked on the device first)."""
        torch = self._torch
        return fetch_stacked(vectors, lambda chunk: torch.stack(chunk).cpu().numpy(), torch.no_grad)

    def fetch_copy(self, copy: Any) -> Any:
        """A deferred device copy (tensor task) → its numpy array."""
        return copy.cpu().numpy()

    # ----------------------------------------------------------------- APIs

    def _owners(self, target: str) -> list[Any]:
        """The objects whose attributes are replaced for ``target``.  Under mindtorch, ``torch.X`` is a proxy
        module distinct from ``mindtorch.X`` (which mindtorch's own modules call), so both are wrapped."""
        if target == "Tensor":
            return [self._tensor_type]
        names = [target]
        if self._mindtorch:
            names.insert(0, "mindtorch" + target[len("torch") :])
        owners: list[Any] = []
        for module_name in names:
            try:
                owner = importlib.import_module(module_name)
            except ImportError as exc:  # e.g. a build without distributed support
                logger.info("msprobe-cmp: %s not wrapped: %r", module_name, exc)
                continue
            if all(owner is not o for o in owners):
                owners.append(owner)
        return owners

    def _install_apis(self) -> None:
        if not self._mindtorch:
            _load_dynamo_tables()
        ours: set[int] = set()
        for family, target, list_file in API_FAMILIES:
            for owner in self._owners(target):
                for name in load_api_names(list_file):
                    try:
                        original = getattr(owner, name, None)
                    except Exception:  # a lazy attribute that fails to load
                        continue
                    if original is None or isinstance(original, type) or not callable(original):
                        continue
                    if id(original) in ours:
                        continue  # the same function reached through a second owner (mindtorch's proxy)
                    wrapper = self._wrap_api(owner, target, family, name, original)
                    ours.add(id(wrapper))
        if not self._mindtorch:
            self._guard_backward_hook_machinery()
        self._apis_installed = True

    def _guard_backward_hook_machinery(self) -> None:
        """Run torch's module backward-hook setup (``BackwardHook.setup_input_hook`` / ``setup_output_hook``,
        which call ``view_as`` through ``BackwardHookFunction``) under the collecting guard, so its tensor
        calls are never recorded."""
        try:
            from torch.utils.hooks import BackwardHook
        except ImportError:  # pragma: no cover - very old torch
            return
        svc = self.service
        for name in ("setup_input_hook", "setup_output_hook"):
            original = vars(BackwardHook).get(name)
            if original is None or getattr(original, WRAPPED_MARK, False):
                continue

            def make(original: Callable[..., Any]) -> Callable[..., Any]:
                @functools.wraps(original)
                def guarded(hook: Any, args: Any) -> Any:
                    with svc.collecting():
                        return original(hook, args)

                setattr(guarded, WRAPPED_MARK, True)
                return guarded

            self._replace(BackwardHook, name, original, make(original))

    def _substitute_inputs(
        self, family: str, api: str, call: ApiCall, args: Sequence[Any]
    ) -> tuple[Any, ...]:
        """PyTorch: takes the gradient edges of the call's positional inputs (:mod:`.torch_grads`); the API
        receives its arguments unchanged.  mindtorch: gradients w.r.t. API inputs are not captured (noted)."""
        svc = self.service
        if self._edges is None:
            svc.note_not_captured(MINDTORCH_API_INPUT_GRADS_KEY, MINDTORCH_NO_API_INPUT_GRADS)
            return tuple(args)
        with svc.collecting():
            call.grad_state = self._edges.begin(args, self._wants_grad)
        return tuple(args)

    def _hook_api_outputs(self, key: str, call: ApiCall, outputs: Sequence[Any]) -> None:
        svc = self.service
        grads: InputGrads | None = call.grad_state
        call.grad_state = None
        with svc.collecting():
            found = [((i,), value) for i, value in enumerate(outputs) if self._wants_grad(value)]
            hooked, _ = self._hook_outputs(
                found,
                grads,
                call.backward_name,
                lambda path: self._grad_hook(key, call, "input", path[0]),
                call.grad_inputs,
            )
            if grads is not None:
                self._attach(
                    grads, hooked, key, lambda pos, grad: svc.api_grad(call, "output", pos, grad), call.backward_name
                )

    def _hook_outputs(
        self,
        found: list[tuple[tuple[Any, ...], Any]],
        grads: InputGrads | None,
        bwd: str,
        hook_for: Callable[[tuple[Any, ...]], Callable[[Any], None]],
        slots: Any,
    ) -> tuple[list[Any], list[tuple[Any, ...]]]:
        """Hook the gradient of each output tensor ``found`` (``(path, tensor)``) with ``hook_for(path)``; returns the
        hooked tensors and their paths, which are noted for the end of the step (a gradient arrived when ``slots``, the
        list or skeleton the hooks fill, holds one at its path; one that did not is declared,
        :meth:`AdapterBase._expect_gradients`).  Declared instead:
        an output that is an input unchanged (pass-through), the same tensor at a later path (its total gradient is
        recorded at its first path), and, when nothing is hooked although outputs need a gradient, the backward
        entry itself."""
        svc = self.service
        hooked: list[Any] = []
        paths: list[tuple[Any, ...]] = []
        first: dict[int, tuple[Any, ...]] = {}
        for path, tensor in found:
            text = ".".join(map(str, path))
            if id(tensor) in first:
                svc.note_not_captured(
                    f"{bwd}.input.{text}",
                    f"the same tensor as output {'.'.join(map(str, first[id(tensor)]))}: the gradients w.r.t. the "
                    "two positions cannot be told apart; the tensor's total gradient is recorded there",
                )
                continue
            first[id(tensor)] = path
            if self._passthrough(grads, tensor, bwd, path):
                continue
            handle = self._hook_tensor(tensor, hook_for(path))
            if getattr(tensor, "grad_fn", True) is None and handle is not None:
                self._leaf_hooks.append(handle)  # a leaf keeps its hooks across steps
            hooked.append(tensor)
            paths.append(path)
        if found and not paths:
            svc.note_not_captured(bwd, "no output of the call has a gradient of its own to observe (see the items "
                                  f"{bwd}.input.*): no backward entry")
        reason = unreached_reason("output")
        self._expect_gradients([(f"{bwd}.input.{'.'.join(map(str, p))}", slots, p, reason) for p in paths])
        return hooked, paths

    def _passthrough(self, grads: InputGrads | None, tensor: Any, bwd: str, path: tuple[Any, ...]) -> bool:
        """True (and both gradients declared in ``not_captured``) when output ``tensor`` is one of the call's
        inputs unchanged: its gradient at the call's boundary cannot be observed without changing the graph."""
        if grads is None or self._edges is None:
            return False
        pos = self._edges.is_passthrough(grads, tensor)
        if pos is None:
            return False
        svc = self.service
        grads.passthrough.add(pos)
        svc.note_not_captured(f"{bwd}.input.{'.'.join(map(str, path))}", PASSTHROUGH_REASON)
        svc.note_not_captured(f"{bwd}.output.{pos}", PASSTHROUGH_REASON)
        return True

    def _attach(
        self, grads: InputGrads, outputs: list[Any], key: str, deliver: Callable[[int, Any], None], bwd: str
    ) -> None:
        """Hook the call's own autograd nodes for its input gradients (:meth:`EdgeWatch.attach`); inputs whose
        edge could not be taken are declared in ``not_captured``."""
        assert self._edges is not None
        svc = self.service
        for pos, reason in grads.failed.items():
            svc.note_not_captured(f"{bwd}.output.{pos}", reason)
        for pos, first in grads.duplicates.items():
            svc.note_not_captured(
                f"{bwd}.output.{pos}",
                f"the same tensor as input {first}: its gradient from this call (summed over both positions) is "
                f"recorded at output.{first}",
            )
        self._edges.attach(
            grads, outputs, deliver, lambda fn, *args: self._guarded_grad_hook(f"{key}.backward", fn, *args)
        )
        if outputs:
            for pos in grads.unseen:
                svc.note_not_captured(f"{bwd}.output.{pos}", UNSEEN_REASON)

    # ----------------------------------------------------------------- model: modules and parameters

    def _install_model(self, models: tuple[Any, ...], is_list: bool) -> None:
        svc = self.service
        self._models = models
        self._ddp_modules = []
        if not svc.tracks_cells:
            return
        for model_index, model in enumerate(models):
            mi = model_index if is_list else None
            if self._is_script(model):
                svc.note_not_captured("model" if mi is None else f"model[{mi}]", SCRIPT_MODULE_REASON, persistent=True)
                continue
            if type(model).__name__ == "OptimizedModule":  # start(torch.compile(model))
                svc.note_not_captured("model" if mi is None else f"model[{mi}]", COMPILED_MODULE_REASON,
                                      persistent=True)
            scripted: list[str] = []
            for path, module in model.named_modules():
                if path == "":
                    continue  # the root model is not hooked (msprobe's convention)
                if any(path.startswith(prefix) for prefix in scripted):
                    continue  # inside a TorchScript module, already listed
                if self._is_script(module):
                    scripted.append(path + ".")
                    svc.note_not_captured(f"Module.{path}", SCRIPT_MODULE_REASON, persistent=True)
                    continue
                if type(module).__name__ == "OptimizedModule":  # torch.compile's wrapper of a submodule
                    svc.note_not_captured(f"Module.{path}", COMPILED_MODULE_REASON, persistent=True)
                self._hook_module_atomically(module, path, type(module).__name__, mi)

    def _is_data_parallel(self, model_index: int | None) -> bool:
        """Whether the model ``start()`` got (``models[model_index]``) is a ``DistributedDataParallel``."""
        ddp = getattr(getattr(getattr(self._torch, "nn", None), "parallel", None), "DistributedDataParallel", None)
        if not isinstance(ddp, type) or not self._models:
            return False
        return isinstance(self._models[model_index or 0], ddp)

    def _param_hook(self, path: str, cls: str, mi: int | None, name: str) -> Callable[[Any], None]:
        """The parameter's gradient hook (see AdapterBase); under DDP it also queues, once per backward pass, the
        reading of every hooked parameter's ``.grad`` after DDP's all-reduce (:meth:`_record_reduced`)."""
        local = super()._param_hook(path, cls, mi, name)
        if not self._ddp_modules or self._edges is None:
            return local
        queue = self._edges.queue_callback
        finish = self._guarded_grad_hook(f"{self.service.cell_prefix}.{path}.parameters_grad_reduced",
                                         lambda _: self._record_reduced()).fire

        def hook(grad: Any) -> None:
            local(grad)
            if not self._reduced_queued and self.service.is_on:
                self._reduced_queued = True
                # DDP queues its own end-of-backward callback (which writes the averaged gradients into .grad)
                # when its first bucket is ready; a callback queued from inside a callback runs after it.
                queue(lambda: queue(lambda: finish(None)))
            return None

        return hook

    def _record_reduced(self) -> None:
        """End of a DDP backward pass: each hooked parameter's ``.grad`` (DDP's averaged gradient) into
        ``<module>.parameters_grad_reduced``."""
        self._reduced_queued = False
        # the all-reduce wrote the gradients read by the parameter hooks (their buckets): read them anew
        self.service.collector.forget_reads()
        for path, cls, mi, params in self._ddp_modules:
            grads = [(n, p.grad) for n, p in params if p.grad is not None]
            if grads:
                self.service.parameter_grad_reduced(path, cls, mi, grads)

    def _named_parts(self, model: Any) -> Iterator[tuple[str, Any]]:
        return iter(model.named_modules())

    def _is_script(self, module: Any) -> bool:
        return self._script_type is not None and isinstance(module, self._script_type)

    def _hook_module_atomically(self, module: Any, path: str, cls: str, mi: int | None) -> None:
        """Hook one module, or (on a failure: a module kind that refuses hooks) leave it unhooked, listed in
        ``not_captured``; the other modules are hooked all the same."""
        handles, states = len(self._handles), len(self._states)
        try:
            self._hook_module(module, path, cls, mi)
        except Exception as exc:
            for handle in self._handles[handles:]:
                try:
                    handle.remove()
                except Exception:  # pragma: no cover - removing what was just registered
                    pass
            del self._handles[handles:]
            del self._states[states:]
            text = describe_error(exc)
            self.service.note_not_captured(
                f"Module.{path}", f"its hooks could not be installed; not recorded: {text}", persistent=True
            )
            logger.warning(
                "msprobe-cmp: module %s (%s) is not recorded: its hooks could not be installed: %s", path, cls, text
            )

    def _hook_module(self, module: Any, path: str, cls: str, mi: int | None) -> None:
        svc = self.service
        state = _ModuleState()
        self._states.append(state)
        key = f"Module.{path}"
        backward_key = f"{key}.backward"
        params = list(module.named_parameters(recurse=False))
        grad_params = [name for name, p in params if p.requires_grad]
        compiling = self._compiling

        def pre_hook(_module: Any, args: Any, kwargs: Any) -> Any:
            if compiling() or not svc.cell_active() or svc.is_disabled(key) or self._in_transform():
                return None
            # The inputs are collected now, before the module runs (an in-place module changes them).
            call = svc.run_guarded(key, lambda: svc.begin_cell(path, cls, mi, args, kwargs))
            if call is None:
                return None
            # From here the call is on the construct stack: the forward hook pops it, whatever happens.
            state.open_calls.append((call, None))
            state.snapshots.append(None)
            if call.recorded and svc.config.records_direction("forward"):
                state.snapshots[-1] = svc.run_guarded(key, lambda: self._snapshot_buffers(module), disable=False)
            svc.run_guarded(key, lambda: prepare_backward(call, args), disable=False)
            return None  # the module always receives its caller's arguments unchanged

        def prepare_backward(call: CellCall, args: Any) -> None:
            """Open the call's backward bookkeeping; PyTorch: its inputs' gradient edges (:mod:`.torch_grads`)."""
            if not (call.recorded and svc.config.records_direction("backward") and self._grad_enabled()):
                return
            backward = _ModuleBackward(call, len(args))
            state.open_calls[-1] = (call, backward)
            edges = self._edges
            if edges is None or not svc.config.records_io("output"):
                return  # gradients w.r.t. inputs not recorded (data_mode) or not capturable (mindtorch)
            bwd = call.forward_name.replace(".forward.", ".backward.")
            with svc.collecting():
                # A failure here costs this call its input gradients only.
                backward.grads = svc.run_guarded(
                    backward_key, lambda: edges.begin(args, self._wants_grad), disable=False, what=bwd
                )

        def forward_hook(_module: Any, args: Any, kwargs: Any, output: Any) -> None:
            if not state.open_calls or compiling() or self._in_transform():
                return None
            call, backward = state.open_calls.pop()
            snapshot = state.snapshots.pop() if state.snapshots else None
            try:
                with svc.collecting():
                    done = svc.run_guarded(key, lambda: record_forward(call, args, kwargs, output, snapshot))
                    if done and backward is not None:
                        bwd = call.forward_name.replace(".forward.", ".backward.")
                        hooked = svc.run_guarded(
                            backward_key,
                            lambda: self._hook_module_outputs(key, backward, output),
                            disable=False,
                            what=bwd,
                        )
                        if hooked:
                            state.awaiting_backward.append(backward)
            finally:
                svc.leave_cell(call)  # popped even when the hook is disabled or failed
            return None

        def record_forward(call: CellCall, args: Any, kwargs: Any, output: Any, snapshot: Any) -> bool:
            after, before = self._buffers_after(module, call, snapshot)
            svc.end_cell(call, args, kwargs, output, params, grad_params if self._grad_enabled() else [], after, before)
            return True

        self._handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        try:
            self._handles.append(module.register_forward_hook(forward_hook, with_kwargs=True, always_call=True))
        except TypeError:  # mindtorch: no always_call
            self._handles.append(module.register_forward_hook(forward_hook, with_kwargs=True))
        if self._is_data_parallel(mi) and grad_params and self._edges is not None:
            self._ddp_modules.append((path, cls, mi, [(n, p) for n, p in params if n in grad_params]))
        for name, param in params:
            if name in grad_params:
                try:
                    handle = self._hook_tensor(param, self._param_hook(path, cls, mi, name))
                except Exception as exc:
                    svc.note_not_captured(
                        f"{key}.parameters_grad",
                        f"could not hook parameter {name}: {describe_error(exc)}",
                        persistent=True,
                    )
                    continue
                if handle is not None:
                    self._handles.append(handle)

    def _snapshot_buffers(self, module: Any) -> dict[str, tuple[Any, int, Any]]:
        """Before a module call: each own buffer's ``(tensor, version counter, copy)``; the copy (only of buffers
        of at most :data:`MAX_BUFFER_COPY` elements) is what ``buffers_before`` records if the call changes it."""
        out: dict[str, tuple[Any, int, Any]] = {}
        with self.service.collecting(), self._torch.no_grad():
            for name, buf in module.named_buffers(recurse=False):
                try:
                    version = buf._version
                except Exception:  # mindtorch (no version counter), an inference-mode tensor (untracked)
                    continue
                copy = buf.detach().clone() if buf.numel() <= MAX_BUFFER_COPY else None
                out[name] = (buf, int(version), copy)
        return out

    def _buffers_after(
        self, module: Any, call: CellCall, snapshot: dict[str, tuple[Any, int, Any]] | None
    ) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        """After a module call: its own buffers ``(name, tensor)`` and, for those the call changed (another tensor,
        another version, or other values: BatchNorm's kernel updates its running statistics in place without
        bumping their version counter), their values before it (a change to a buffer too large to copy is
        declared)."""
        after = list(module.named_buffers(recurse=False))
        before: list[tuple[str, Any]] = []
        torch = self._torch
        for name, buf in after:
            old = (snapshot or {}).get(name)
            if old is None:
                continue
            if old[0] is buf and old[1] == _version_of(buf):
                if old[2] is None:
                    continue
                with self.service.collecting(), torch.no_grad():
                    if torch.equal(old[2], buf):
                        continue
            if old[2] is None:
                self.service.note_not_captured(
                    f"{call.forward_name}.buffers_before.{name}",
                    f"the buffer changed in the call but has more than {MAX_BUFFER_COPY} elements: not copied",
                )
                continue
            before.append((name, old[2]))
        return after, before

    def _hook_module_outputs(self, key: str, backward: _ModuleBackward, output: Any) -> bool:
        """Hook each floating-point output tensor that will get a gradient, wherever it sits in the output
        (tuples, lists, dicts, ``ModelOutput`` and other dataclasses, named tuples: the backward entry's ``input``
        mirrors the forward ``output``'s structure and argument paths), and the module's own autograd nodes
        for the gradients w.r.t. its inputs.  Returns whether any output was hooked (a backward is then
        expected)."""
        outputs = output if isinstance(output, (tuple, list)) else (output,)  # as the forward record splits it
        found: list[tuple[tuple[Any, ...], Any]] = []
        backward.grad_outputs = [self._grad_skeleton(o, (i,), found, 0) for i, o in enumerate(outputs)]
        bwd = backward.call.forward_name.replace(".forward.", ".backward.")
        grads = backward.grads
        backward.grads = None
        hooked, paths = self._hook_outputs(
            found,
            grads,
            bwd,
            lambda path: self._module_grad_hook(key, backward, "input", path),
            backward.grad_outputs,
        )
        if grads is not None:
            self._attach(
                grads, hooked, key, lambda pos, grad: self._module_grad_hook(key, backward, "output", pos)(grad), bwd
            )
        if paths and self._mindtorch:
            self.service.note_not_captured(bwd + ".output", MINDTORCH_NO_INPUT_GRADS)
        return bool(paths)

    def _module_grad_hook(
        self, key: str, backward: _ModuleBackward, field: str, position: tuple[Any, ...] | int
    ) -> Callable[[Any], None]:
        """A gradient hook filling the backward entry's ``input`` at output path ``position`` (a tuple) or its
        ``output`` at input ``position`` (an int), then (re)putting the entry (:meth:`_record_module_grad`)."""
        return self._guarded_grad_hook(
            f"{key}.backward", TorchAdapter._record_module_grad, self, backward, field, position
        ).fire

    def _record_module_grad(
        self, backward: _ModuleBackward, field: str, position: tuple[Any, ...] | int, grad: Any
    ) -> None:
        svc = self.service
        call = backward.call
        backward.fired = True
        if call.step != svc.current_step or not svc.config.records_io(field):
            return
        bwd = call.forward_name.replace(".forward.", ".backward.")
        if isinstance(position, tuple):
            leaf = svc.collect(grad, bwd, "input." + ".".join(map(str, position)))
            _set_at(backward.grad_outputs, position, leaf)
        else:
            backward.grad_inputs[position] = svc.collect(grad, bwd, f"output.{position}")
        svc.cell_backward(call, tuple(backward.grad_outputs), tuple(backward.grad_inputs))


#: Buffers of at most this many elements are copied before a module call, so that their values before the call
#: can be recorded when the call changes them (BatchNorm's running statistics, ``num_batches_tracked``).
MAX_BUFFER_COPY = 1 << 20


def _version_of(tensor: Any) -> int | None:
    """``tensor._version``, or None where it is not tracked (inference-mode tensors, mindtorch)."""
    try:
        return int(tensor._version)
    except Exception:
        return None


def _set_at(skeleton: Any, path: tuple[Any, ...], value: Any) -> None:
    """Put ``value`` at ``path`` in a gradient skeleton (nested lists and dicts)."""
    node = skeleton
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _load_dynamo_tables() -> None:
    """Import ``torch._dynamo`` (when it imports) before any API is wrapped.

    Dynamo builds its tables of torch functions (``torch._dynamo.trace_rules``: which callables go into a graph
    as torch ops) once, when it is first imported, from what ``torch.tanh``, ``torch.Tensor.add`` and so on are
    at that moment.  Imported while the recorder's wrappers stand in for them (the first ``torch.optim`` optimizer
    imports it, and users build theirs after the debugger), those tables hold the wrappers: every
    ``torch.compile`` in the process, during recording or after ``close()``, then breaks its graph at each
    wrapped API and runs the recorder's code in dynamo frames (which guard on the tensors' ids and recompile
    until dynamo's limit).  Imported first, the tables hold the originals and the wrappers stay plain Python
    functions that dynamo traces through (they return to the original while ``is_compiling()``).  Costs about a
    second once per process when nothing imported dynamo yet; a torch without it is left alone.
    """
    try:
        importlib.import_module("torch._dynamo")
    except Exception:  # a build without dynamo, or one whose import fails: nothing to protect
        logger.debug("torch._dynamo does not import; API wrappers installed without it")


def _working(check: Callable[[], Any] | None) -> Callable[[], bool] | None:
    """``check`` when it is callable and answers without raising now (so it can be called from every wrapper),
    else None."""
    if not callable(check):
        return None
    try:
        bool(check())
    except Exception:
        return None
    return check


def key_of(family: str, api: str) -> str:
    """The hook key (and ``not_captured`` name) of an API: ``"<Family>.<api>"``."""
    return f"{family}.{api}"
