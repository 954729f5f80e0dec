"""What the framework adapters share: lifecycle, debug-level ``save()``, attribute patches and small hooks.

:class:`AdapterBase` holds the logic that is the same for MindSpore and torch/mindtorch; each adapter
(:mod:`~msprobe_cmp.recorder.adapters.mindspore`, :mod:`~msprobe_cmp.recorder.adapters.torch`) derives
from it and supplies the framework-specific pieces (converting values, detecting the rank, installing API
wrappers and model hooks, registering tensor hooks).  This module imports no framework.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np

from msprobe_cmp.dump.schema import ValueLeaf
from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.collector import DEVICE_STAT_FIELDS, DeferredTensor, HostTensor, TensorStamp
from msprobe_cmp.recorder.config import RecordConfig
from msprobe_cmp.recorder.service import ApiCall, CellCall, RecorderService, TrainingError, note_passed_on

logger = logging.getLogger(__name__)

#: Marks our wrappers (functions and Primitive subclasses) so a second recorder refuses to stack.
WRAPPED_MARK = "__msprobe_cmp_wrapped__"
#: At most this many statistics vectors are stacked into one device tensor before a host transfer.
FETCH_CHUNK = 4096


def never() -> bool:
    """Always False: the default of :attr:`AdapterBase._compiling` (a framework without a graph compiler)."""
    return False


def writes_in_place(api: str) -> bool:
    """True for an API named as writing in place: ``*_`` (not a dunder), or ``__i*__`` other than ``__invert__``."""
    dunder = api.startswith("__") and api.endswith("__")
    return (api.endswith("_") and not dunder) or (dunder and api.startswith("__i") and api != "__invert__")


def fetch_stacked(
    vectors: Sequence[Any],
    stack_to_host: Callable[[list[Any]], Any],
    no_grad: Callable[[], AbstractContextManager[Any]],
) -> np.ndarray:
    """Deferred statistics vectors → one float64 array ``[len(vectors), 7]``: ``stack_to_host`` stacks at most
    :data:`FETCH_CHUNK` of them on the device and returns them as one numpy array, under ``no_grad()``."""
    if not vectors:
        return np.zeros((0, len(DEVICE_STAT_FIELDS)), np.float64)
    parts = []
    with no_grad():
        for start in range(0, len(vectors), FETCH_CHUNK):
            parts.append(stack_to_host(list(vectors[start : start + FETCH_CHUNK])))
    return np.concatenate(parts).astype(np.float64, copy=False)


class _Patch:
    """One replaced attribute (a module function or a Tensor method) and how to put it back."""

    __slots__ = ("owner", "name", "original", "had_own", "wrapper")

    def __init__(self, owner: Any, name: str, original: Any, had_own: bool, wrapper: Any) -> None:
        self.owner = owner
        self.name = name
        self.original = original
        self.had_own = had_own
        self.wrapper = wrapper

    def restore(self, log: logging.Logger) -> None:
        current = getattr(self.owner, self.name, None)
        if current is not self.wrapper:
            log.warning("msprobe-cmp: %s.%s was replaced by someone else; leaving it", self.owner, self.name)
            return
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)


#: A gradient slot of a call noted for the end of the step (:meth:`AdapterBase._expect_gradients`):
#: ``(not_captured name, container, path, reason)``.
GradSlot = tuple[str, Any, tuple[Any, ...], str]


def value_at(container: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in ``container`` (nested lists and dicts: a call's gradient slots or skeleton), or
    None where the path leads nowhere."""
    node = container
    for key in path:
        try:
            node = node[key]
        except (IndexError, KeyError, TypeError):
            return None
    return node


class GradHook:
    """One gradient hook of the recorder: :meth:`fire` runs ``fn(*args, grad)`` inside
    :meth:`RecorderService.run_guarded` under ``key`` (a failure is the recorder's: logged, listed in
    ``not_captured``, the gradient left as it is) and does nothing while a graph compiler traces the code or
    inside a function transform.  It returns None, so the gradient is never replaced.

    One object with slots and one argument tuple, registered as a bound method (MindSpore takes only functions
    and methods as hooks): a hooked tensor keeps three small objects alive until its graph is freed, where a
    closure over a closure kept about a dozen (functions, their cell tuples, cells).  Objects that live through
    a training step are what the garbage collector's full collections are paid for (issue 18: ~2.4 us a
    surviving object a step on BERT tiny), and there are several hundred hooks a step.
    """

    __slots__ = ("_adapter", "_key", "_fn", "_args")

    def __init__(self, adapter: AdapterBase, key: str, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._adapter = adapter
        self._key = key
        self._fn = fn
        self._args = args

    def fire(self, grad: Any) -> None:
        """The tensor hook: ``grad`` is the tensor's gradient (any structure ``fn`` takes)."""
        adapter = self._adapter
        if adapter._compiling() or adapter._in_transform():
            return None
        fn, args = self._fn, self._args
        adapter.service.run_guarded(self._key, lambda: fn(*args, grad))
        return None

    def fire_node(self, grad_inputs: Any, _grad_outputs: Any) -> None:
        """The autograd-node post-hook (``Node.register_hook``): :meth:`fire` with the node's ``grad_inputs``."""
        self.fire(grad_inputs)
        return None


class AdapterBase(abc.ABC):
    """Lifecycle and hooks shared by the framework adapters; feeds a :class:`RecorderService`.

    A subclass sets its framework attributes (``_model_type`` among them) and then calls this ``__init__``,
    which builds the service, warns about the config, and installs the API wrappers at L1/mix.

    Args:
        config: the recording configuration.
        framework: written to dump.json's ``framework``.
        cell_prefix: ``"Cell"`` or ``"Module"`` (entry names and hook keys).
    """

    #: The adapter module's logger (its messages keep that module's name).
    _logger: ClassVar[logging.Logger] = logger
    #: What ``start(model)`` takes, for its error messages (``"mindspore.nn.Cell"``).
    _MODEL_KIND: ClassVar[str]
    #: What L0/mix hook, for the missing-model error (``"cells"``).
    _PARTS: ClassVar[str]
    #: The not_captured reason of a call whose backward was expected in a step but never came.
    _UNFIRED_BACKWARD: ClassVar[str]
    #: The model class ``start(model)`` accepts; set by the subclass before ``__init__``.
    _model_type: type
    #: The framework's tensor class; set by the subclass before ``__init__`` (the collector hands its instances
    #: to :meth:`_convert` first, without testing them against the plain Python and numpy types).
    _tensor_type: Any
    #: True while a graph compiler traces the code (``torch.compiler.is_compiling``): every wrapper and hook
    #: checks it first and then only calls the original, so a compiled region contains the original calls only.
    _compiling: Callable[[], bool] = staticmethod(never)
    #: The framework's synchronisation with its asynchronous dispatch, set by the subclass (MindSpore PyNative,
    #: mindtorch); None where the recorder's reads cannot meet the training's pending errors (PyTorch).
    _training_sync: Callable[[], Any] | None = None

    def __init__(self, config: RecordConfig, *, framework: str, cell_prefix: str) -> None:
        self.service = RecorderService(
            config,
            framework=framework,
            rank=self._detect_rank(),
            convert=self._convert,
            tensor_types=(self._tensor_type,),
            cell_prefix=cell_prefix,
            fetcher=self,
            stamp=self._tensor_stamp(),
        )
        self._patches: list[_Patch] = []
        self._handles: list[Any] = []
        # Per-cell (module) bookkeeping: each has ``open_calls`` and ``awaiting_backward`` lists.
        self._states: list[Any] = []
        self._models: tuple[Any, ...] = ()
        self._is_list = False
        # The models whose hooks were removed for steps the config does not select (reinstalled by start()).
        self._parked: tuple[tuple[Any, ...], bool] | None = None
        self._apis_installed = False
        self._closed = False
        self._warned_save = False
        self._rank_filter_checked = False
        # This step's calls whose gradients are observed: (slots, each (not_captured name, filled?, reason));
        # what stayed empty is declared at step() / close() (_declare_unfilled).
        self._expected: list[list[GradSlot]] = []
        self._warn_config(config)
        # API wrappers go in now, so names bound after the debugger is built (``from mindspore.ops
        # import relu``) are wrapped too; the switch (start/stop) decides what is recorded.
        if self.service.tracks_apis:
            self._install_apis()

    def _warn_config(self, config: RecordConfig) -> None:
        if config.ranks and self.service.rank is None:
            self._logger.warning(
                "msprobe-cmp: %s: rank %s is set but this run is not distributed; recording as 'rank'",
                config.source,
                list(config.ranks),
            )

    # ----------------------------------------------------------------- framework pieces

    @abc.abstractmethod
    def _detect_rank(self) -> int | None: ...

    def _world_size(self) -> int | None:
        """The number of ranks of the distributed job; None when not distributed or not known (the default)."""
        return None

    @abc.abstractmethod
    def _convert(self, value: object) -> HostTensor | DeferredTensor | ValueLeaf | None: ...

    @abc.abstractmethod
    def fetch_stats(self, vectors: Sequence[Any]) -> Any:
        """Deferred statistics vectors → one float64 numpy array ``[len(vectors), 7]``."""

    @abc.abstractmethod
    def fetch_copy(self, copy: Any) -> Any:
        """A deferred device copy (tensor task) → its numpy array."""

    def _tensor_stamp(self) -> TensorStamp | None:
        """The collector's :data:`~msprobe_cmp.recorder.collector.TensorStamp` for this framework's tensors, or
        None (the default: every record of a tensor reads it)."""
        return None

    @abc.abstractmethod
    def _grad_enabled(self) -> bool: ...

    @abc.abstractmethod
    def _wants_grad(self, value: object) -> bool:
        """True when ``value`` is a tensor whose gradient ``save()`` hooks."""

    @abc.abstractmethod
    def _install_apis(self) -> None: ...

    @abc.abstractmethod
    def _install_model(self, models: tuple[Any, ...], is_list: bool) -> None: ...

    @abc.abstractmethod
    def _unfired_call(self, pending: Any) -> CellCall | None:
        """The call of an ``awaiting_backward`` item whose backward did not come, else None."""

    def _hook_tensor(self, tensor: Any, fn: Callable[[Any], None]) -> Any:
        return tensor.register_hook(fn)

    def _in_transform(self) -> bool:
        """True inside a function transform whose values cannot be recorded (torch.func's vmap/grad/jvp);
        the adapter notes it in ``not_captured``.  Only asked while recording is on."""
        return False

    # ----------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (everything removed)."""
        return self._closed

    def start(self, model: Any = None) -> None:
        """Install hooks (once per model) and switch recording on if the current step is selected.

        Raises:
            ConfigError: when ``model`` is not the framework's model class (or a list of them), when L0/mix
                get no model, or when another recorder's wrappers are installed.
        """
        if self._closed:
            return
        svc = self.service
        if svc.finished():
            self.close()
            return
        models, is_list = self._as_models(model)
        if svc.tracks_cells and not models:
            raise ConfigError(f"start(model): level {svc.config.level} records {self._PARTS} and needs the model")
        if not self._rank_filter_checked:
            self._rank_filter_checked = True
            self._check_rank_filter()
        if not svc.step_selected():
            return
        if svc.tracks_apis and not self._apis_installed:
            self._install_apis()
        if not models and self._parked is not None:
            models, is_list = self._parked  # the hooks removed on excluded steps come back
        self._parked = None
        if models and (
            len(models) != len(self._models) or any(a is not b for a, b in zip(models, self._models, strict=True))
        ):
            self._remove_model_hooks()
            if self._install_model_atomically(models, is_list) and svc.tracks_apis:
                svc.run_guarded("start(model): pre-bound APIs", lambda: self._declare_prebound_apis(models, is_list),
                                disable=False)
        svc.begin()

    def _named_parts(self, model: Any) -> Iterator[tuple[str, Any]]:
        """``(path, cell or module)`` of every part of ``model``, the root as ``""`` (the adapter's walk)."""
        return iter(())

    def _declare_prebound_apis(self, models: tuple[Any, ...], is_list: bool) -> None:
        """Warn (once per attribute) and declare in ``not_captured`` every attribute of a model part that holds an
        API function the recorder wraps, taken before the wrappers were installed (transformers'
        ``GELUActivation`` stores ``torch.nn.functional.gelu`` when the model is built): its calls reach the
        original function and are not recorded.  Attributes holding our wrapper are fine."""
        originals: dict[int, str] = {}
        for p in self._patches:  # the first name a function is wrapped under (mindspore.ops before mint)
            if callable(p.original):
                originals.setdefault(id(p.original), f"{getattr(p.owner, '__name__', type(p.owner).__name__)}.{p.name}")
        if not originals:
            return
        prefix = self.service.cell_prefix
        for model_index, model in enumerate(models):
            for path, part in self._named_parts(model):
                try:
                    attrs = vars(part)
                except TypeError:
                    continue
                for attr, value in list(attrs.items()):
                    api = originals.get(id(value))
                    if api is None:
                        continue
                    where = ".".join(x for x in (str(model_index) if is_list else "", path, attr) if x)
                    what = f"{prefix}.{where}"
                    if what in self.service.not_captured:
                        continue
                    self.service.note_not_captured(
                        what,
                        f"holds {api} as it was before the debugger wrapped it (bound when the model was built): its "
                        "calls are not recorded; create the PrecisionDebugger before building the model",
                        persistent=True,
                    )
                    self._logger.warning(
                        "msprobe-cmp: %s (%s) holds %s bound before the debugger was created: those calls are not "
                        "recorded; create the PrecisionDebugger before building the model", where,
                        type(part).__name__, api)

    def _check_rank_filter(self) -> None:
        """At the first :meth:`start`, when the config lists ranks and the run is distributed: an info line on a
        rank the list leaves out (this process records nothing), and a warning when the job's world size is
        known and no listed rank exists in it (the whole job would record nothing, silently otherwise)."""
        ranks = self.service.config.ranks
        rank = self.service.rank
        if not ranks or rank is None:
            return  # no list, or not distributed (_warn_config said so)
        if rank not in ranks:
            self._logger.info("msprobe-cmp: rank %d is not in the rank list %s; it is not recorded", rank, list(ranks))
        try:
            world = self._world_size()
        except Exception:  # an unknown world size only skips the check
            world = None
        if world is not None and not any(r < world for r in ranks):
            self._logger.warning(
                "msprobe-cmp: %s: rank %s matches no rank of this %d-rank job (ranks 0-%d); nothing is recorded",
                self.service.config.source,
                list(ranks),
                world,
                world - 1,
            )

    def _install_model_atomically(self, models: tuple[Any, ...], is_list: bool) -> bool:
        """Install the model hooks, or none: on an unexpected failure everything installed so far is removed,
        the failure is logged once and listed in ``not_captured`` (APIs are still recorded) and the next
        ``start(model)`` tries again.  Returns whether the hooks are installed.

        Raises:
            ConfigError: from the installation (after removing what it installed).
        """
        self._is_list = is_list
        try:
            self._install_model(models, is_list)
        except ConfigError:
            self._remove_model_hooks()
            raise
        except Exception as exc:  # start() must not break training either
            self._remove_model_hooks()
            self.service.hook_failed(f"{self.service.cell_prefix} hooks (start(model))", exc, disable=False)
            return False
        return True

    def stop(self) -> None:
        """Switch recording off and flush the step's files so far."""
        self.service.end()

    def _expect_gradients(self, slots: list[GradSlot]) -> None:
        """Note one call's gradient slots, ``(not_captured name, container, path, reason if not filled)``: the
        slot is filled when :func:`value_at` ``(container, path)`` is not None (the container a list or nested
        gradient skeleton the call's hooks fill).  At the end of the step, when any of them was filled (the
        call's backward entry exists), the empty ones are declared; a slot with reason ``""`` only counts as
        evidence that the entry exists and is never declared.  (Tuples, not closures: they live until the end
        of the step, and each closure would hold several objects for the garbage collector.)"""
        if slots:
            self._expected.append(slots)

    def _declare_unfilled(self) -> None:
        """List in ``not_captured`` every slot noted by :meth:`_expect_gradients` that stayed empty in a call whose
        backward entry exists; a call none of whose slots was filled has no entry and is left alone."""
        expected, self._expected = self._expected, []
        for slots in expected:
            if any(value_at(container, path) is not None for _, container, path, _ in slots):
                for what, container, path, reason in slots:
                    if reason and value_at(container, path) is None:
                        self.service.note_not_captured(what, reason)

    def step(self) -> None:
        """Flush and close the current step, advance to the next; remove everything after the last step."""
        self._declare_unfilled()
        svc = self.service
        for state in self._states:
            for pending in state.awaiting_backward:
                call = self._unfired_call(pending)
                if call is not None and call.step == svc.current_step:
                    svc.note_not_captured(call.forward_name.replace(".forward.", ".backward."), self._UNFIRED_BACKWARD)
        svc.advance_step()
        self._reset_step()
        if svc.finished():
            self._logger.info("msprobe-cmp: last selected step recorded; hooks removed")
            self.close()
        elif self._models and not svc.step_selected():
            self._park_model_hooks()

    def _park_model_hooks(self) -> None:
        """Remove the model hooks (cell/module hooks, parameter hooks, Primitive swaps) while the steps are not
        selected: an installed hook costs time even when its body returns at once (MindSpore runs its
        cell-backward-hook op for every hooked cell).  The next ``start()`` of a selected step reinstalls them,
        on the model it is given or, without one, on the model they were removed from.  The API wrappers stay
        (installed once, they cost a flag check per call)."""
        self._parked = (self._models, self._is_list)
        self._remove_model_hooks()

    def _reset_step(self) -> None:
        for state in self._states:
            state.open_calls.clear()
            if hasattr(state, "snapshots"):
                state.snapshots.clear()
            state.awaiting_backward.clear()

    def close(self) -> None:
        """Flush, then remove every hook, wrapper and class swap; calling it again does nothing."""
        if self._closed:
            return
        self._declare_unfilled()
        self._closed = True
        self.service.end(closing=True)
        self._remove_model_hooks()
        for patch in reversed(self._patches):
            try:
                patch.restore(self._logger)
            except Exception as exc:  # keep restoring the rest
                self._logger.warning("msprobe-cmp: could not restore %s: %r", patch.name, exc)
        self._patches.clear()
        self._apis_installed = False
        self._parked = None

    def _as_models(self, model: Any) -> tuple[tuple[Any, ...], bool]:
        kind = self._MODEL_KIND
        if model is None:
            return (), False
        if isinstance(model, (list, tuple)):
            for i, m in enumerate(model):
                if not isinstance(m, self._model_type):
                    raise ConfigError(f"start(model): model[{i}] is a {type(m).__name__}, not a {kind}")
            return tuple(model), True
        if not isinstance(model, self._model_type):
            raise ConfigError(f"start(model): expected a {kind} or a list of them, got {type(model).__name__}")
        return (model,), False

    def _remove_model_hooks(self) -> None:
        for handle in self._handles:
            try:
                handle.remove()
            except Exception as exc:  # keep removing the rest
                self._logger.warning("msprobe-cmp: could not remove a hook: %r", exc)
        self._handles.clear()
        self._states.clear()
        self._models = ()

    # ----------------------------------------------------------------- debug level

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """Debug level: record ``variable`` as ``<name>.<n>`` and, when gradients flow (a gradient context),
        its gradients as ``<name>_grad.<n>`` in ``step<N>/rank<R>/debug.json``.

        Does nothing (one warning) at other levels, and nothing for steps the config does not select.
        """
        svc = self.service
        if self._closed or svc.finished() or not svc.step_selected():
            return
        if svc.config.level != "debug":
            if not self._warned_save:
                self._warned_save = True
                self._logger.warning("msprobe-cmp: save() records only at level debug (this run: %s)", svc.config.level)
            return
        if not isinstance(name, str) or not name:
            self._logger.warning("msprobe-cmp: save(): name must be a non-empty string, got %r; not recorded", name)
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
            # At level debug nothing is wrapped or hooked, so the guard only keeps the rule "the recorder's
            # own work runs under collecting()".
            with svc.collecting():
                for position, tensor in hooked:
                    self._hook_tensor(tensor, self._debug_grad_hook(f"{key}.backward", grad_entry, position))

        svc.run_guarded(f"{key}.backward", hook_all)

    def _grad_skeleton(self, value: Any, position: tuple[Any, ...], out: list[Any], depth: int) -> Any:
        """``value``'s structure with None in place of every leaf; appends ``(position, tensor)`` to ``out`` for
        each tensor that will get a gradient.  Containers are walked as the collector walks them, so positions are
        the argument paths of the forward record: named tuples and dataclasses (``ModelOutput``) by field name,
        mappings by key, lists and tuples by index."""
        if self._wants_grad(value):
            out.append((position, value))
            return None
        if depth >= 10:
            return None
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return {
                str(k): self._grad_skeleton(v, (*position, str(k)), out, depth + 1)
                for k, v in zip(value._fields, value, strict=True)
            }
        if isinstance(value, (list, tuple)):
            return [self._grad_skeleton(v, (*position, i), out, depth + 1) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            return {str(k): self._grad_skeleton(v, (*position, str(k)), out, depth + 1) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: self._grad_skeleton(getattr(value, f.name), (*position, f.name), out, depth + 1)
                for f in dataclasses.fields(value)
            }
        return None

    def _debug_grad_hook(self, key: str, grad_entry: str, position: tuple[Any, ...]) -> Callable[[Any], None]:
        return self._guarded_grad_hook(key, RecorderService.debug_grad, self.service, grad_entry, position).fire

    def _guarded_grad_hook(self, key: str, fn: Callable[..., None], *args: Any) -> GradHook:
        """A gradient hook running ``fn(*args, grad)`` inside :meth:`RecorderService.run_guarded` under ``key``
        (see :class:`GradHook`); register its :meth:`~GradHook.fire` on a tensor, its
        :meth:`~GradHook.fire_node` on an autograd node."""
        return GradHook(self, key, fn, args)

    def _surface_training_error(self) -> None:
        """Synchronise with the framework's asynchronous dispatch (:attr:`_training_sync`) before the recorder
        touches a tensor (its dtype, shape or values each wait for it there).  An error raised by that
        synchronisation is the training's own (a kernel queued by the user's code failed) and is handed back to
        the user as :class:`~msprobe_cmp.recorder.service.TrainingError` instead of being reported, and so
        swallowed, as a hook failure.  Nothing without a :attr:`_training_sync`.

        Raises:
            TrainingError: wrapping what the synchronisation raised.
        """
        sync = self._training_sync
        if sync is None:
            return
        try:
            sync()
        except Exception as exc:
            raise TrainingError(exc) from exc

    # ----------------------------------------------------------------- APIs

    def _replace(self, owner: Any, name: str, original: Any, wrapper: Any, had_own: bool = True) -> None:
        """Put ``wrapper`` in place of ``owner.name`` and remember how to restore it."""
        setattr(owner, name, wrapper)
        self._patches.append(_Patch(owner, name, original, had_own, wrapper))

    def _refuse_if_wrapped(self, original: Any, what: str) -> None:
        """Raise ConfigError (after closing) when ``original`` is another recorder's wrapper."""
        if getattr(original, WRAPPED_MARK, False):
            self.close()
            raise ConfigError(
                f"PrecisionDebugger(): {what} is already wrapped by another PrecisionDebugger; close() it first"
            )

    def _wrap_api(self, owner: Any, target: str, family: str, name: str, original: Any) -> Any:
        """Replace API ``owner.name`` (``original``) by a recording wrapper; returns the wrapper.

        Raises:
            ConfigError: when ``original`` is another recorder's wrapper.
        """
        self._refuse_if_wrapped(original, f"{target}.{name}")
        had_own = name in vars(owner)
        wrapper = self._make_api_wrapper(family, name, original)
        self._replace(owner, name, original, wrapper, had_own)
        return wrapper

    def _make_api_wrapper(self, family: str, api: str, original: Callable[..., Any]) -> Any:
        svc = self.service
        key = f"{family}.{api}"
        before = self._api_before
        after = self._api_after
        compiling = self._compiling
        in_transform = self._in_transform

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if compiling() or not svc.api_active() or svc.is_disabled(key) or in_transform():
                try:
                    return original(*args, **kwargs)
                except BaseException as exc:
                    note_passed_on(exc, key)
                    raise
            prepared = svc.run_guarded(key, lambda: before(family, api, args, kwargs))
            call_args = args if prepared is None else prepared[1]
            with svc.inside_api():
                try:
                    out = original(*call_args, **kwargs)
                except BaseException as exc:
                    note_passed_on(exc, key)
                    raise
            if prepared is not None:
                call = prepared[0]
                # A collective that writes its result into its first argument and returns None (torch's
                # all_reduce, broadcast, all_gather, ...): that argument, after the call, is its output.
                result = call_args[0] if in_place_collective and out is None and call_args else out
                svc.run_guarded(key, lambda: after(key, call, result))
            return out

        in_place_collective = family == "Distributed"
        setattr(wrapper, WRAPPED_MARK, True)
        return wrapper

    def _api_before(
        self, family: str, api: str, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[ApiCall, tuple[Any, ...]]:
        """Begin the API call; in a gradient context, prepare its backward: returns the call and the
        arguments the API receives (substitutes carrying gradient hooks, as the adapter decides)."""
        svc = self.service
        call = svc.begin_api(family, api, args, kwargs)
        if not (call.record_backward and self._grad_enabled()):
            call.record_backward = False
            return call, tuple(args)
        call.grad_outputs = [None] * len(args)
        if not svc.config.records_io("output"):
            return call, tuple(args)  # no substitutes when the gradients w.r.t. inputs are not recorded
        # A failure here costs this call its backward entry only: the forward entry is still recorded.
        substituted = svc.run_guarded(
            f"{family}.{api}.backward",
            lambda: self._substitute_inputs(family, api, call, args),
            disable=False,
            what=call.backward_name,
        )
        if substituted is None:
            call.record_backward = False
            return call, tuple(args)
        return call, substituted

    @abc.abstractmethod
    def _substitute_inputs(
        self, family: str, api: str, call: ApiCall, args: Sequence[Any]
    ) -> tuple[Any, ...]:
        """The arguments an API called in a gradient context receives (hooks for its backward ``output``)."""

    def _api_after(self, key: str, call: ApiCall, out: Any) -> None:
        """End the API call; when its backward is recorded, hook its outputs (the backward ``input``; a failure
        there costs this call its backward entry only)."""
        svc = self.service
        svc.end_api(call, out)
        if not call.record_backward:
            return
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        call.grad_inputs = [None] * len(outputs)
        svc.run_guarded(
            f"{key}.backward",
            lambda: self._hook_api_outputs(key, call, outputs),
            disable=False,
            what=call.backward_name,
        )

    @abc.abstractmethod
    def _hook_api_outputs(self, key: str, call: ApiCall, outputs: Sequence[Any]) -> None:
        """Hook the gradient of each output of ``call`` that gets one."""

    def _grad_hook(self, key: str, call: ApiCall, field: str, position: int) -> Callable[[Any], None]:
        return self._guarded_grad_hook(
            f"{key}.backward", RecorderService.api_grad, self.service, call, field, position
        ).fire

    # ----------------------------------------------------------------- model

    def _param_hook(self, path: str, cls: str, mi: int | None, name: str) -> Callable[[Any], None]:
        svc = self.service
        key = f"{svc.cell_prefix}.{path}.parameters_grad"
        return self._guarded_grad_hook(key, RecorderService.parameter_grad, svc, path, cls, mi, name).fire
