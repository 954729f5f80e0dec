"""The framework-agnostic recording service: switches, counters, steps, entries, construct and stack.

A framework adapter installs hooks and calls this service with *framework* values; the service
decides whether to record, names the entry, turns the values into records through a
:class:`~msprobe_cmp.recorder.collector.Collector` (which calls the adapter's converter for
framework objects) and hands them to the step's :class:`~msprobe_cmp.dump.writer.DumpWriter`.

All state (counters, the current step, the construct stack) lives on the instance; nothing is
module-level.  Names follow :mod:`msprobe_cmp.dump.naming`:

* API call ``n`` of a family/API in the current step: ``<Family>.<api>.<n>.forward``; its
  backward entry carries the same ``n``.
* Cell call ``n``: ``Cell.<path>.<Class>.forward.<n>``; its backward entry carries the same ``n``
  (msprobe 26.x's convention; msprobe 1.2.2 numbered backward calls in backward order).
* ``Cell.<path>.<Class>.parameters_grad``: a placeholder (``[null]`` per parameter) put after the
  cell's first forward in a step, filled by parameter-gradient hooks; every gradient a parameter
  receives in the step is kept, in arrival order (``{"weight": [g0, g1]}``).
* Jit-compiled calls: ``Jit.<name>.<n>.forward`` / ``.backward``.

Filters (all evaluated at the forward call; a backward entry is written only for a call whose
forward passed them): step, rank, ``list``, ``scope`` and ``data_mode``.  The ``structure`` task
keeps names, stacks and construct.json but writes no data.  The ``debug`` level writes only what
:meth:`RecorderService.debug_save` receives, to ``debug.json``.

What could not be captured (failed hooks, cells whose backward never fired, jit regions without
per-API records) is listed in the dump.json header under ``not_captured``.

``async_dump``: the adapter's converter returns device-side summaries; the collector hands out
placeholders, and every flush (:meth:`RecorderService.end`, :meth:`RecorderService.advance_step`)
first fetches all pending summaries in one go and swaps the placeholders in the entries put since
the previous flush (and in debug.json's values).  Placeholders still held by open bookkeeping (a
backward entry re-put by a late gradient) are swapped again at the next flush.
"""

from __future__ import annotations

import dataclasses
import linecache
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, TypeVar

from msprobe_cmp.dump.naming import api_name, cell_name, parameters_grad_name, parse_name
from msprobe_cmp.dump.schema import (
    NOT_CAPTURED_KEY,
    NOT_CAPTURED_STEP,
    RECORDING_KEY,
    DumpMeta,
    Entry,
    JsonObject,
    Map,
    Node,
    Seq,
    TensorLeaf,
    ValueLeaf,
)
from msprobe_cmp.dump.writer import DumpWriter
from msprobe_cmp.recorder.collector import Collector, DeviceFetcher, LeafConverter, TensorStamp
from msprobe_cmp.recorder.config import RecordConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Frames from files under this directory (the recorder itself) are left out of stack.json.
_RECORDER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: At most this many frames per stack.json entry.
MAX_STACK_FRAMES = 64
#: The ``not_captured`` key used when deferred (async_dump) values could not be fetched at a flush.
ASYNC_NOT_CAPTURED = "async_dump"
#: The ``not_captured`` key of a step flushed at close while still being recorded (see :meth:`RecorderService.end`).
INCOMPLETE_STEP_KEY = NOT_CAPTURED_STEP
#: Deferred device copies (see the adapters) are fetched before they hold more elements than this (~256 MB
#: of float32): the one wait for the device is then paid every that many elements instead of once a step.
MAX_PENDING_COPY_ELEMENTS = 64 * 1024 * 1024
#: Suffix of the entry holding a module's gradients after a data-parallel all-reduce (PyTorch DDP): ``<cell>`` +
#: ``.parameters_grad`` + this.
REDUCED_SUFFIX = "_reduced"
#: not_captured reason of a parameters_grad placeholder no gradient filled in its step.
UNREACHED_PARAMETER = (
    "no gradient reached this parameter in this step (its module ran with gradients enabled, but no backward pass "
    "reached the parameter before step())"
)
#: Hook failures are logged and listed with at most this many characters of the exception's text.
MAX_ERROR_CHARS = 300


def backward_name_of(forward_name: str | None) -> str | None:
    """The backward twin of a forward API or cell entry name (same call index), or None.

    ``"Cell.fc1.Dense.forward.0"`` → ``"Cell.fc1.Dense.backward.0"``;
    ``"Functional.relu.2.forward"`` → ``"Functional.relu.2.backward"``.
    """
    if forward_name is None:
        return None
    parsed = parse_name(forward_name)
    return parsed.twin("backward") if parsed.direction == "forward" else None


#: The note :func:`note_passed_on` puts on an exception the recorder's wrapper passes on (its first words).
PASSED_ON = "msprobe-cmp: raised by "


def note_passed_on(exc: BaseException, api: str) -> None:
    """Say on ``exc``, raised by the API ``api`` that a recorder wrapper called for the user's code, that the error is
    the call's own: the wrapper, the last frame of the traceback, only passed it on.  The note names the user's call
    site: the first frame above the wrapper that is not the framework's (torch, mindspore, mindtorch) nor
    msprobe-cmp's own (:func:`_framework_dirs`).  One note an exception: a wrapped API
    called by another (``torch.nn.functional.linear`` calling a wrapped op) rewrites it as the exception leaves the
    outer one, so it names the call the user wrote.  Never raises (a hook must not change the error it observes)."""
    try:
        caller = sys._getframe(2)
        while caller.f_back is not None and caller.f_code.co_filename.startswith(_framework_dirs()):
            caller = caller.f_back  # torch's nn.Linear calling F.linear: the user's line is above
        _note(exc, f"{PASSED_ON}{api} itself, called at {caller.f_code.co_filename}, line {caller.f_lineno}: the "
                   "error is the call's; msprobe-cmp's recorder (its wrapper is the last frame above) only passed it "
                   "on")
    except Exception:  # an exception type that refuses notes: it goes on as it is
        pass


def _framework_dirs() -> tuple[str, ...]:
    """The package directories of the frameworks imported (torch, mindspore, mindtorch) and of msprobe-cmp, each
    ending in a path separator: a frame whose file is in one is not the user's call site (:func:`note_passed_on`)."""
    dirs = []
    for name in ("torch", "mindspore", "mindtorch", "msprobe_cmp"):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None)
        if origin:
            dirs.append(os.path.join(os.path.dirname(origin), ""))
    return tuple(dirs)


def _note(exc: BaseException, text: str) -> None:
    """Put ``text`` on ``exc`` as its msprobe-cmp note: in place of one already there (:data:`PASSED_ON`), else
    added."""
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and notes and isinstance(notes[-1], str) and notes[-1].startswith(PASSED_ON):
        notes[-1] = text
    else:
        exc.add_note(text)


def note_surfaced(exc: BaseException, what: str) -> None:
    """Say on ``exc``, an error of the training's own that the recorder's synchronisation surfaced
    (:class:`TrainingError`) while recording ``what``, that it is the training's: an operator the user's code queued
    earlier failed (MindSpore PyNative runs them asynchronously), and the recorder only passed it on.  Never raises."""
    try:
        _note(exc, f"{PASSED_ON}the training's own computation: an operator your code queued earlier failed, and "
                   f"the error surfaced when the recorder read a tensor of {what} (operators run asynchronously); "
                   "the recorder (the last frames above) only passed it on")
    except Exception:
        pass


class TrainingError(Exception):
    """An error of the training's own that surfaced inside a recording hook: :meth:`RecorderService.run_guarded`
    re-raises :attr:`original` instead of reporting a hook failure.

    MindSpore PyNative runs kernels asynchronously: a failing kernel of the user's raises at the next
    synchronisation, whoever makes it, and only there (the next one succeeds).  Without the recorder that is the
    user's own next ``asnumpy()`` (or any other sync); with it, it is often the recorder's copy of a tensor.  If
    the recorder swallowed the error there, the user would never see it.  The adapter therefore synchronises
    before touching a tensor and wraps what that raises in this class (errors of the recorder's own operations,
    which come after that synchronisation, stay hook failures).

    Attributes:
        original: the framework's exception, re-raised unchanged.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def describe_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``"<Type>: <message>"`` on one line (whitespace runs collapsed), cut to ``limit`` characters: some
    framework errors (torch's dispatcher) carry several kilobytes of text."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ApiCall:
    """One recorded API call of the current step (mutable bookkeeping, not a dump record).

    Attributes:
        forward_name, backward_name: the entry names.
        parent: the innermost cell forward entry active at the call (construct.json), or None.
        input_args, input_kwargs: the collected input nodes (taken before the call runs).
        grad_inputs: gradient leaves w.r.t. the forward *outputs* (the backward entry's ``input``).
        grad_outputs: gradient leaves w.r.t. the forward positional *inputs* (its ``output``).
        recorded: whether the forward entry passes the filters (name list, data mode).
        record_backward: whether its gradients are recorded.
        step: the step the call belongs to (late gradients of an older step are dropped).
    """

    __slots__ = (
        "forward_name",
        "backward_name",
        "parent",
        "input_args",
        "input_kwargs",
        "grad_inputs",
        "grad_outputs",
        "recorded",
        "record_backward",
        "step",
        "grad_state",
    )

    def __init__(self, forward_name: str, backward_name: str, parent: str | None, step: int) -> None:
        self.forward_name = forward_name
        self.backward_name = backward_name
        self.parent = parent
        self.input_args: Seq = Seq()
        self.input_kwargs: Map = Map()
        self.grad_inputs: list[Node] = []
        self.grad_outputs: list[Node] = []
        self.recorded = True
        self.record_backward = True
        self.step = step
        #: The adapter's bookkeeping of this call's backward (PyTorch: the inputs' gradient edges), or None.
        self.grad_state: Any = None


class CellCall:
    """One recorded cell forward call of the current step (mutable bookkeeping).

    Attributes:
        path, cls, model_index: identify the cell (for names).
        index: the forward call index.
        forward_name: ``Cell.<path>.<Class>.forward.<index>``.
        parent: the enclosing cell's forward entry, or None at top level.
        recorded: whether the entry passes the filters (name list, data mode).
        inputs: the collected ``(input_args, input_kwargs)``, taken at the pre-hook before the cell runs (so an
            in-place cell such as ``nn.ReLU(inplace=True)`` records what it received), or None when not taken.
    """

    __slots__ = ("path", "cls", "model_index", "index", "forward_name", "parent", "recorded", "step", "inputs")

    def __init__(
        self,
        path: str,
        cls: str,
        model_index: int | None,
        index: int,
        forward_name: str,
        parent: str | None,
        recorded: bool,
        step: int,
    ) -> None:
        self.path = path
        self.cls = cls
        self.model_index = model_index
        self.index = index
        self.forward_name = forward_name
        self.parent = parent
        self.recorded = recorded
        self.step = step
        self.inputs: tuple[Seq, Map] | None = None


class RecorderService:
    """Record-keeping shared by every framework adapter.

    Args:
        config: what to record.
        framework: written to dump.json's ``framework`` (``"mindspore"``).
        rank: the process rank, or None when not distributed (directory ``rank``).
        convert: the adapter's converter of framework objects (see :mod:`~msprobe_cmp.recorder.collector`).
        tensor_types: the framework's tensor classes (the collector converts their instances first).
        cell_prefix: ``"Cell"`` (MindSpore) or ``"Module"``.
        fetcher: brings deferred device values to the host (``async_dump``); see
            :class:`~msprobe_cmp.recorder.collector.DeviceFetcher`.
        stamp: the adapter's :data:`~msprobe_cmp.recorder.collector.TensorStamp`, or None: a tensor read again
            within one ``start()``..``stop()`` window, unchanged by its stamp, reuses its first leaf.

    Lifecycle: :meth:`begin` (switch on, if the step is selected) → hooks call ``*_api_*``/``*_cell_*``
    → :meth:`end` (switch off, flush) → :meth:`advance_step` (flush, next step, counters reset).
    """

    def __init__(
        self,
        config: RecordConfig,
        *,
        framework: str,
        rank: int | None,
        convert: LeafConverter,
        tensor_types: tuple[type, ...] = (),
        cell_prefix: str = "Cell",
        fetcher: DeviceFetcher | None = None,
        stamp: TensorStamp | None = None,
    ) -> None:
        self.config = config
        self.framework = framework
        self.rank = rank
        #: This recording's id in every dump.json it writes (:data:`~msprobe_cmp.dump.schema.RECORDING_KEY`): the
        #: start time, the process id and a random part, e.g. ``2026-11-30T07:40:12-4242-9f1c2a7b``.
        self.recording_id = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cell_prefix = cell_prefix
        self.collector = Collector(
            convert, save_tensors=config.saves_tensors, checksum=config.summary_mode == "md5", fetcher=fetcher,
            tensor_types=tensor_types, stamp=stamp,
        )
        if config.async_dump and config.summary_mode == "md5" and not config.saves_tensors:
            logger.warning(
                "msprobe-cmp: %s: summary_mode md5 is skipped under async_dump with the statistics task "
                "(the values never reach the host); statistics are still recorded",
                config.source,
            )
        # async_dump: entries put since the last flush (they may hold placeholders).
        self._deferred_names: set[str] = set()
        self.current_step = 0
        self._on = False
        self._in_api = 0
        self._collecting = 0
        self._writer: DumpWriter | None = None
        # The JSON text of each distinct stack, shared by the writers of every step (DumpWriter's stack_texts).
        self._stack_texts: dict[tuple[str, ...], str] = {}
        self._api_counts: dict[str, int] = {}
        self._cell_counts: dict[str, int] = {}
        self._cell_stack: list[CellCall] = []
        self._pgrad: dict[str, dict[str, list[Node]]] = {}
        # Hooks that failed in the current step: skipped for the rest of it, enabled again at the next step.
        self._disabled: set[str] = set()
        # Hook keys whose failure was already logged (one warning per key for the whole run).
        self._warned: set[str] = set()
        # what → reason: install-time gaps persist across steps (a hook that could not be installed); the rest,
        # hook failures included, is per step.
        self._failures: dict[str, str] = {}
        self._missing: dict[str, str] = {}
        # scope [start, end]: open once the start call begins, closed when the end call ends (per step).
        self._scope_open = False
        self._scope_done = False
        self._scope_end_call: object | None = None
        # debug level: save() entries of the step, their counters, and gradient slots still open.
        self._debug: dict[str, Node] = {}
        self._debug_counts: dict[str, int] = {}
        self._debug_grads: dict[str, object] = {}
        self.structure_only = config.task == "structure"
        #: Set when writing the dump failed (:meth:`stop_for_write_error`); recording is then off for good.
        self.write_error: str | None = None
        self._stack_cache: dict[tuple[int, ...], tuple[tuple[CodeType, ...], tuple[str, ...]]] = {}
        # How many run_guarded calls are active (a TrainingError is handed back by the outermost one).
        self._guard_depth = 0

    # ----------------------------------------------------------------- switches and steps

    @property
    def is_on(self) -> bool:
        """True between :meth:`begin` and :meth:`end` of a selected step."""
        return self._on

    @property
    def tracks_cells(self) -> bool:
        """True at levels that record cells (L0, mix)."""
        return self.config.level in ("L0", "mix")

    @property
    def tracks_apis(self) -> bool:
        """True at levels that record APIs (L1, mix)."""
        return self.config.level in ("L1", "mix")

    def step_selected(self) -> bool:
        """True when the current step and this rank are selected by the config."""
        return self.config.records_step(self.current_step) and self.config.records_rank(self.rank)

    def finished(self) -> bool:
        """True once the current step is past the last selected step (nothing more to record)."""
        return self.config.past_last_step(self.current_step)

    def begin(self) -> bool:
        """Switch recording on for the current step if it is selected; returns whether it is on
        (never after a write error stopped recording)."""
        self._on = self.step_selected() and not self.finished() and self.write_error is None
        if self._on:
            self.writer()
        return self._on

    def end(self, *, closing: bool = False) -> None:
        """Switch recording off and flush what the step holds so far (the step stays open).

        With ``closing`` (the debugger is being closed, or the process exits) while recording is still on,
        i.e. ``stop()`` never came for this step (an exception or ``KeyboardInterrupt`` left the step
        early), the step is flushed as it is and its header's ``not_captured`` says it is incomplete.
        """
        if closing and self._on:
            self.note_not_captured(
                INCOMPLETE_STEP_KEY,
                "incomplete: the debugger was closed (or the process exited) while this step was being "
                "recorded, before stop(); the entries after that point are missing",
            )
        self._on = False
        self.collector.forget_reads()
        # stop(): the step stays open, so its files need not survive a power loss yet (advance_step makes them
        # durable); at close they must.
        self.flush(durable=closing)

    def advance_step(self) -> None:
        """Flush and close the current step, then start the next one with fresh counters.  A parameter whose
        ``parameters_grad`` placeholder got no gradient in the step (a forward with gradients enabled that no
        backward followed, a module whose output does not reach the loss) is listed in ``not_captured`` first."""
        if self._writer is not None:
            for pg, slots in self._pgrad.items():
                for param, leaves in slots.items():
                    if not leaves:
                        self.note_not_captured(f"{pg}.{param}", UNREACHED_PARAMETER)
        self._on = False
        self.flush()
        self._writer = None
        self._api_counts.clear()
        self._cell_counts.clear()
        self._cell_stack.clear()
        self._pgrad.clear()
        self._missing.clear()
        self._disabled.clear()
        self._scope_open = self._scope_done = False
        self._scope_end_call = None
        self._debug.clear()
        self._debug_counts.clear()
        self._debug_grads.clear()
        self._deferred_names.clear()
        self.collector.reset_deferred()
        self.collector.start_step()
        self.current_step += 1

    def flush(self, *, durable: bool = True) -> None:
        """Write the current step's files (no-op when nothing was opened).

        With ``durable`` the files are fsync'ed (see :meth:`~msprobe_cmp.dump.writer.DumpWriter.flush`); they are
        replaced atomically either way, so a crash never leaves a torn dump.json.

        A failure to write (disk full, permissions) is logged as an error, not raised: recording must
        never stop the training it observes.
        """
        if self._writer is None:
            return
        writer = self._writer
        if self.config.async_dump or self.collector.deferred_in_step:
            self._resolve_deferred(writer)
        writer.meta = dataclasses.replace(
            writer.meta, extra=((NOT_CAPTURED_KEY, self._not_captured_json()), (RECORDING_KEY, self.recording_id))
        )
        try:
            if self.config.level == "debug":
                self._flush_debug(writer)
            else:
                writer.flush(durable=durable)
        except OSError as exc:
            self.stop_for_write_error(writer.rank_dir, exc)

    def stop_for_write_error(self, where: Path, exc: OSError) -> None:
        """The dump cannot be written (no space left, permissions, a read-only file system): log one
        error and stop recording for the rest of the run; training goes on.

        The step being written keeps whatever reached the disk before (dump.json, written last by an
        atomic rename, is either the previous complete flush or absent); empty directories it created
        are removed.
        """
        if self.write_error is None:
            self.write_error = f"{where}: {exc.strerror or exc}"
            logger.error(
                "msprobe-cmp: could not write %s: %s; recording stopped (training continues)",
                where, exc.strerror or exc,
            )
        self._on = False
        self._writer = None
        for d in (where / "dump_tensor_data", where, where.parent):
            try:
                d.rmdir()  # only when empty
            except OSError:
                pass

    def _resolve_deferred(self, writer: DumpWriter) -> None:
        """Fetch every pending device value and swap the placeholders in the entries put since the last flush.

        A failure (a device error surfacing now, a tensor file that cannot be written) is logged and
        listed in ``not_captured``; the placeholders are then written with null statistics.
        """
        try:
            with self.collecting():
                self.collector.resolve_pending()
        except Exception as exc:  # recording must never stop training
            self.note_not_captured(
                ASYNC_NOT_CAPTURED, f"deferred statistics could not be fetched from the device: {exc!r}"
            )
            logger.warning("msprobe-cmp: async_dump: could not fetch deferred values: %r", exc, exc_info=exc)
        for name in self._deferred_names:
            entry = writer.get(name)
            if entry is not None:
                writer.put(self.collector.substitute_entry(entry))
        self._deferred_names.clear()
        self._debug = {name: self.collector.substitute(node) for name, node in self._debug.items()}

    def _not_captured_json(self) -> tuple[JsonObject, ...]:
        items = {**self._failures, **self._missing}
        return tuple(JsonObject((("what", what), ("reason", reason))) for what, reason in items.items())

    @property
    def not_captured(self) -> dict[str, str]:
        """What could not be captured so far in this step (``what`` → ``reason``), as written to the header."""
        return {**self._failures, **self._missing}

    def note_not_captured(self, what: str, reason: str, *, persistent: bool = False) -> None:
        """List ``what`` (an entry name or hook key) in the header's ``not_captured`` with ``reason``.

        Args:
            persistent: keep it in every later step too (a hook that could not be installed); otherwise only
                this step.
        """
        target = self._failures if persistent else self._missing
        if what not in target:
            target[what] = reason

    def _flush_debug(self, writer: DumpWriter) -> None:
        writer.write_debug(self._debug)

    def step_dir(self, step: int | None = None) -> Path:
        """``<dump_path>/step<N>/rank`` (or ``rank<R>`` when distributed)."""
        n = self.current_step if step is None else step
        rank_dir = "rank" if self.rank is None else f"rank{self.rank}"
        return self.config.dump_path / f"step{n}" / rank_dir

    def writer(self) -> DumpWriter:
        """The current step's writer (created on first use; nothing is written before a flush)."""
        if self._writer is None:
            rank_dir = self.step_dir()
            data_dir = str(rank_dir / "dump_tensor_data") if self.config.saves_tensors else None
            # The header's extra keys (not_captured, the recording id) are set by each flush.
            meta = DumpMeta(
                task=self.config.task, level=self.config.level, framework=self.framework, dump_data_dir=data_dir
            )
            self._writer = DumpWriter(rank_dir, meta, stack_texts=self._stack_texts)
        return self._writer

    def api_active(self) -> bool:
        """True when an API wrapper should record: switch on, not inside another recorded API,
        not inside the recorder's own collection."""
        return self._on and not self._in_api and not self._collecting

    def cell_active(self) -> bool:
        """True when a cell hook should record (switch on, not inside the recorder's own collection)."""
        return self._on and not self._collecting

    @contextmanager
    def inside_api(self) -> Iterator[None]:
        """Mark the body as running inside a recorded API: nested wrapped calls are not recorded."""
        self._in_api += 1
        try:
            yield
        finally:
            self._in_api -= 1

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Mark the body as the recorder's own work: no wrapper or hook records anything."""
        self._collecting += 1
        try:
            yield
        finally:
            self._collecting -= 1

    # ----------------------------------------------------------------- failure isolation

    def is_disabled(self, key: str) -> bool:
        """True when the hook ``key`` failed earlier in this step (it records nothing more until the next step)."""
        return key in self._disabled

    def hook_failed(self, key: str, exc: BaseException, *, disable: bool = True, what: str | None = None) -> None:
        """A recording hook failed: list it in this step's ``not_captured``, log one short warning the first
        time ``key`` fails in the run (the traceback at debug level); training goes on.

        Args:
            key: the hook key (``"Functional.linear"``, ``"Module.fc.backward"``).
            disable: skip ``key`` for the rest of the current step (it is enabled again by
                :meth:`advance_step`); otherwise only the failing call lost its part.
            what: the ``not_captured`` name (default ``key``), e.g. the one backward entry that is missing.

        A failure to write (an ``OSError`` from saving a tensor file) stops all recording instead
        (:meth:`stop_for_write_error`): the next hooks would fail the same way.
        """
        if isinstance(exc, OSError) and self._writer is not None:
            self.stop_for_write_error(self._writer.rank_dir, exc)
            return
        text = describe_error(exc)
        if disable:
            self._disabled.add(key)
            reason = f"recording hook failed; skipped for the rest of this step: {text}"
        else:
            reason = f"recording hook failed for this call: {text}"
        self.note_not_captured(what or key, reason)
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(
                "msprobe-cmp: recording hook %s failed (%s); %s; training goes on (later failures of this hook "
                "are listed in not_captured only)",
                key,
                text,
                "skipped for the rest of this step" if disable else "this call is not fully recorded",
            )
            logger.debug("msprobe-cmp: traceback of the %s failure", key, exc_info=exc)

    def run_guarded(self, key: str, fn: Callable[[], T], *, disable: bool = True, what: str | None = None) -> T | None:
        """Run ``fn`` unless ``key`` is disabled in this step; on an exception report it
        (:meth:`hook_failed`, with ``disable`` and ``what``) and return None.

        Raises:
            BaseException: the training's own error when ``fn`` raises :class:`TrainingError` (its ``original``;
                ``what`` or ``key`` is then listed in ``not_captured``, the hook stays enabled).
        """
        if key in self._disabled:
            return None
        self._guard_depth += 1
        try:
            return fn()
        except TrainingError as exc:  # the user's error, surfaced at the recorder's synchronisation: give it back
            if self._guard_depth > 1:
                raise  # an enclosing guard hands it back (and notes the call)
            self.note_not_captured(
                what or key,
                "the training raised an error while this call was being recorded (a failing kernel of its own, "
                f"surfaced at the recorder's synchronisation and re-raised): {describe_error(exc.original)}",
            )
            note_surfaced(exc.original, what or key)
            raise exc.original from None
        except Exception as exc:  # a hook must never break training
            self.hook_failed(key, exc, disable=disable, what=what)
            return None
        finally:
            self._guard_depth -= 1

    @property
    def disabled_hooks(self) -> frozenset[str]:
        """Keys of the hooks disabled after a failure in the current step."""
        return frozenset(self._disabled)

    # ----------------------------------------------------------------- collection helpers

    def put(self, entry: Entry) -> None:
        """Hand ``entry`` to the step's writer (the structure task writes no data)."""
        if not self.structure_only:
            self.writer().put(entry)
            if self.config.async_dump or self.collector.deferred_in_step:
                self._deferred_names.add(entry.name)

    def collect(self, value: object, entry_name: str, arg_path: str) -> Node:
        """Collect one value into a node (saving tensors in the tensor task; nothing in the structure task)."""
        if self.structure_only:
            return None
        self._collecting += 1  # as collecting(), without a generator per value (several hundred a step)
        try:
            node = self.collector.collect(value, writer=self.writer(), entry_name=entry_name, arg_path=arg_path)
            if self.collector.pending_copy_elements > MAX_PENDING_COPY_ELEMENTS:
                self._resolve_deferred(self.writer())  # bound the device memory the deferred copies hold
            return node
        finally:
            self._collecting -= 1

    def collect_seq(self, values: Sequence[object], entry_name: str, field: str) -> Seq:
        """Collect positional values as ``<field>.<i>``."""
        return Seq(tuple(self.collect(v, entry_name, f"{field}.{i}") for i, v in enumerate(values)))

    def collect_map(self, values: Mapping[str, object], entry_name: str, field: str) -> Map:
        """Collect keyword values as ``<field>.<key>``."""
        return Map(tuple((str(k), self.collect(v, entry_name, f"{field}.{k}")) for k, v in values.items()))

    def capture_stack(self) -> tuple[str, ...]:
        """The caller's Python stack, innermost first, without the recorder's own frames.

        Lines read ``"File <path>, line <n>, in <function>, \\n <source line>"`` (msprobe's form);
        source lines come from :mod:`linecache`.  Results are cached per chain of code positions, keyed by the
        code objects' ids and the frames' last instruction offsets: a code object's hash is computed anew at each
        call (over its bytecode and constants) and a frame's line number is looked up in its code's line table,
        each ~0.5-1 us a frame.  Line numbers are read only on a cache miss; the cache holds the code objects,
        so an id in a key is never reused.
        """
        frame: FrameType | None = sys._getframe(1)
        key: list[int] = []
        codes: list[CodeType] = []
        while frame is not None and len(codes) < MAX_STACK_FRAMES:
            code = frame.f_code
            if not code.co_filename.startswith(_RECORDER_DIR):
                key += (id(code), frame.f_lasti)
                codes.append(code)
            frame = frame.f_back
        frozen = tuple(key)
        cached = self._stack_cache.get(frozen)
        if cached is not None:
            return cached[1]
        lines: list[str] = []
        frame = sys._getframe(1)
        while frame is not None and len(lines) < len(codes):
            code = frame.f_code
            if not code.co_filename.startswith(_RECORDER_DIR):
                source = linecache.getline(code.co_filename, frame.f_lineno).strip()
                lines.append(f"File {code.co_filename}, line {frame.f_lineno}, in {code.co_name}, \n {source}")
            frame = frame.f_back
        result = tuple(lines)
        if len(self._stack_cache) < 100_000:
            self._stack_cache[frozen] = (tuple(codes), result)
        return result

    def _current_parent(self) -> CellCall | None:
        return self._cell_stack[-1] if self._cell_stack else None

    def _name_selected(self, name: str) -> bool:
        if self.config.records_name(name):
            return True
        # A list entry naming a cell selects everything recorded inside that cell.
        return any(self.config.records_name(c.forward_name) for c in self._cell_stack)

    def _scope_enter(self, name: str) -> tuple[bool, bool]:
        """Advance the scope range for a forward call named ``name``: ``(inside, is_the_end_call)``."""
        bounds = self.config.scope_bounds
        if bounds is None:
            return True, False
        if self._scope_done:
            return False, False
        if not self._scope_open and name == bounds[0]:
            self._scope_open = True
        return self._scope_open, self._scope_open and name == bounds[1]

    def _scope_leave(self, call: object) -> None:
        if call is self._scope_end_call:
            self._scope_done = True
            self._scope_open = False
            self._scope_end_call = None

    def _selected(self, name: str, call: object) -> bool:
        """Both the ``list`` and the ``scope`` filters for a forward call (the scope advances here)."""
        inside, is_end = self._scope_enter(name)
        if is_end:
            self._scope_end_call = call
        return inside and self._name_selected(name)

    # ----------------------------------------------------------------- API calls

    def begin_api(self, family: str, api: str, args: Sequence[object], kwargs: Mapping[str, object]) -> ApiCall:
        """Name an API call, collect its inputs (before it runs) and note its parent and stack.

        Args:
            family: ``"Functional"``, ``"Tensor"``, ``"Mint"``, ``"MintFunctional"``, ``"Primitive"``.
            api: the API name (``"relu"``, ``"__sub__"``, ``"matmul.MatMul"`` for a Primitive).
            args, kwargs: the call's arguments as the framework received them.

        Returns:
            The call's bookkeeping; pass it to :meth:`end_api` with the outputs.
        """
        stem = f"{family}.{api}"
        index = self._api_counts.get(stem, 0)
        self._api_counts[stem] = index + 1
        fwd = api_name(family, api, index, "forward")
        parent = self._current_parent()
        call = ApiCall(
            fwd, api_name(family, api, index, "backward"), parent.forward_name if parent else None, self.current_step
        )
        selected = self._selected(fwd, call)
        call.record_backward = selected and self.config.records_direction("backward")
        if not (selected and self.config.records_direction("forward")):
            # Counted (names stay stable under filtering) but not written.
            call.recorded = False
            return call
        if self.config.records_io("input"):
            call.input_args = self.collect_seq(args, fwd, "input")
            call.input_kwargs = self.collect_map(kwargs, fwd, "kwargs")
        writer = self.writer()
        writer.set_stack(fwd, self.capture_stack())
        if self.tracks_cells:
            writer.set_parent(fwd, call.parent)
        return call

    def end_api(self, call: ApiCall, output: object) -> None:
        """Collect an API call's outputs and put its forward entry."""
        self._scope_leave(call)
        if not call.recorded or call.step != self.current_step:
            return
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        out_seq = self.collect_seq(outputs, call.forward_name, "output") if self.config.records_io("output") else Seq()
        self.put(Entry.forward(call.forward_name, call.input_args, call.input_kwargs, out_seq))

    def prepare_api_backward(self, call: ApiCall, n_outputs: int, n_inputs: int) -> None:
        """Size the gradient slots of ``call`` (done once the numbers of outputs and inputs are known)."""
        call.grad_inputs = [None] * n_outputs
        call.grad_outputs = [None] * n_inputs

    def api_grad(self, call: ApiCall, field: str, position: int, grad: object) -> None:
        """Store one gradient of an API call and (re)put its backward entry.

        Args:
            call: the forward call.
            field: ``"input"`` (gradient w.r.t. forward output ``position``) or ``"output"``
                (gradient w.r.t. forward positional input ``position``).
            grad: the gradient tensor.
        """
        if not call.record_backward or call.step != self.current_step or self._writer is None:
            return
        if field == "input" and not self.config.records_io("input"):
            return
        if field == "output" and not self.config.records_io("output"):
            return
        slots = call.grad_inputs if field == "input" else call.grad_outputs
        slots[position] = self.collect(grad, call.backward_name, f"{field}.{position}")
        writer = self.writer()
        self.put(Entry.backward(call.backward_name, Seq(tuple(call.grad_inputs)), Seq(tuple(call.grad_outputs))))
        if self.tracks_cells:
            writer.set_parent(call.backward_name, backward_name_of(call.parent))

    # ----------------------------------------------------------------- cells

    def begin_cell(
        self,
        path: str,
        cls: str,
        model_index: int | None,
        args: Sequence[object] | None = None,
        kwargs: Mapping[str, object] | None = None,
    ) -> CellCall:
        """Name a cell forward call (counted at its pre-hook), push it on the construct stack and, when the
        call is recorded, collect its inputs ``args`` / ``kwargs`` now, before the cell runs: an in-place cell
        (``nn.ReLU(inplace=True)``, ``x += y`` on its input) then records the values it received, not the ones
        it left behind."""
        stem = cell_name(path, cls, "forward", 0, prefix=self.cell_prefix, model_index=model_index)
        index = self._cell_counts.get(stem, 0)
        self._cell_counts[stem] = index + 1
        fwd = cell_name(path, cls, "forward", index, prefix=self.cell_prefix, model_index=model_index)
        parent = self._current_parent()
        call = CellCall(
            path, cls, model_index, index, fwd, parent.forward_name if parent else None, False, self.current_step
        )
        call.recorded = self._selected(fwd, call)
        if args is not None and call.recorded and self.config.records_direction("forward"):
            # Before the push: a failure here leaves nothing on the construct stack.
            if self.config.records_io("input"):
                call.inputs = (self.collect_seq(args, fwd, "input"), self.collect_map(kwargs or {}, fwd, "kwargs"))
            else:
                call.inputs = (Seq(), Map())
        self._cell_stack.append(call)
        return call

    def leave_cell(self, call: CellCall) -> None:
        """Pop ``call`` (and any call left above it) off the construct stack and close the scope range it
        ends; does nothing when ``call`` is no longer on the stack.  The adapter's forward hook calls it
        whatever happened to the recording, so a failed or skipped call never becomes the parent of later
        entries."""
        if any(c is call for c in self._cell_stack):
            while self._cell_stack:
                if self._cell_stack.pop() is call:
                    break
        self._scope_leave(call)

    def end_cell(
        self,
        call: CellCall,
        args: Sequence[object],
        kwargs: Mapping[str, object],
        output: object,
        parameters: Sequence[tuple[str, object]],
        grad_params: Sequence[str],
        buffers: Sequence[tuple[str, object]] = (),
        buffers_before: Sequence[tuple[str, object]] = (),
    ) -> None:
        """Pop a cell call, put its forward entry (with its direct parameters) and its
        parameters_grad placeholder.

        Args:
            call: from :meth:`begin_cell`.
            args, kwargs: the cell's inputs, collected here only when :meth:`begin_cell` did not take them;
                output: its output (a tuple/list is several outputs).
            parameters: the cell's own (non-recursive) parameters, ``(local name, value)``.
            grad_params: local names of those parameters that get gradients (placeholders).
            buffers: the module's own buffers after the call, ``(local name, value)`` (PyTorch);
                buffers_before: the values before the call of those it changed.
        """
        self.leave_cell(call)
        if call.step != self.current_step:
            return
        writer = self.writer()
        writer.set_parent(call.forward_name, call.parent)
        if not call.recorded:
            return
        fwd = call.forward_name
        if self.config.records_direction("forward"):
            if call.inputs is not None:
                in_seq, in_map = call.inputs
            elif self.config.records_io("input"):
                in_seq = self.collect_seq(args, fwd, "input")
                in_map = self.collect_map(kwargs, fwd, "kwargs")
            else:
                in_seq, in_map = Seq(), Map()
            outputs = output if isinstance(output, (tuple, list)) else (output,)
            out_seq = self.collect_seq(outputs, fwd, "output") if self.config.records_io("output") else Seq()
            params = Map(tuple((name, self.collect(value, fwd, f"parameters.{name}")) for name, value in parameters))
            before = Map(tuple((n, self.collect(v, fwd, f"buffers_before.{n}")) for n, v in buffers_before))
            after = Map(tuple((n, self.collect(v, fwd, f"buffers.{n}")) for n, v in buffers))
            self.put(Entry.forward(fwd, in_seq, in_map, out_seq, params, after, before))
            writer.set_stack(fwd, self.capture_stack())
        if grad_params and self.config.records_direction("backward"):
            pg = parameters_grad_name(call.path, call.cls, prefix=self.cell_prefix, model_index=call.model_index)
            if pg not in self._pgrad:
                self._pgrad[pg] = {p: [] for p in grad_params}
                self._put_pgrad(pg)

    def cell_backward(
        self,
        call: CellCall,
        grads_wrt_outputs: Sequence[object],
        grads_wrt_inputs: Sequence[object],
    ) -> None:
        """Put a cell's backward entry: ``input`` = grads w.r.t. its outputs, ``output`` = w.r.t. its inputs.

        Args:
            call: the forward call this backward belongs to (its index and parent name the entry; nothing
                is written unless that forward call passed the filters).
        """
        if self._writer is None or call.step != self.current_step:
            return
        bwd = cell_name(
            call.path, call.cls, "backward", call.index, prefix=self.cell_prefix, model_index=call.model_index
        )
        if not (call.recorded and self.config.records_direction("backward")):
            return
        in_seq = self.collect_seq(grads_wrt_outputs, bwd, "input") if self.config.records_io("input") else Seq()
        out_seq = self.collect_seq(grads_wrt_inputs, bwd, "output") if self.config.records_io("output") else Seq()
        writer = self.writer()
        self.put(Entry.backward(bwd, in_seq, out_seq))
        if self.tracks_cells:
            writer.set_parent(bwd, backward_name_of(call.parent))

    def parameter_grad(self, path: str, cls: str, model_index: int | None, param: str, grad: object) -> None:
        """Add a gradient of ``param`` to the cell's parameters_grad entry (only if its placeholder exists).

        Every gradient of the step is kept in arrival order: a parameter used twice in one backward
        pass (if the framework reports the parts separately) or several backward passes before
        ``step()`` (gradient accumulation) give ``{"weight": [g0, g1, ...]}``; the tensor files are
        ``<entry>.<param>.npy`` for the first and ``<entry>.<param>.<k>.npy`` for the k-th (k ≥ 1).
        """
        if self._writer is None:
            return
        pg = parameters_grad_name(path, cls, prefix=self.cell_prefix, model_index=model_index)
        slots = self._pgrad.get(pg)
        if slots is None or param not in slots:
            return
        grads = slots[param]
        grads.append(self.collect(grad, pg, param if not grads else f"{param}.{len(grads)}"))
        self._put_pgrad(pg)

    def parameter_grad_reduced(
        self, path: str, cls: str, model_index: int | None, grads: Sequence[tuple[str, object]]
    ) -> None:
        """Put ``<cell>.parameters_grad_reduced``: the gradients a data-parallel wrapper (PyTorch DDP) left in the
        parameters' ``.grad`` after its all-reduce, one ``(param, gradient)`` each, at the end of a backward pass
        (an msprobe-cmp extension; a later pass of the step replaces it).  Only for a cell whose
        ``parameters_grad`` placeholder exists in the step."""
        if self._writer is None:
            return
        pg = parameters_grad_name(path, cls, prefix=self.cell_prefix, model_index=model_index)
        slots = self._pgrad.get(pg)
        if slots is None:
            return
        name = pg + REDUCED_SUFFIX
        self.put(Entry(name, tuple((p, Seq((self.collect(g, name, p),))) for p, g in grads if p in slots)))

    def _put_pgrad(self, name: str) -> None:
        slots = self._pgrad[name]
        self.put(
            Entry.parameters_grad(name, [(p, Seq(tuple(leaves) if leaves else (None,))) for p, leaves in slots.items()])
        )

    # ----------------------------------------------------------------- debug level: save()

    def debug_save(self, name: str, value: object) -> tuple[str, str]:
        """Record ``value`` (tensor, scalar, nested list/tuple/dict) as debug.json entry ``<name>.<n>``.

        ``n`` counts saves of ``name`` in the step from 0.  Tensor files (tensor task) are
        ``<name>.<n>.tensor[.<index path>].npy``.

        Returns:
            ``(entry name, gradient entry name "<name>_grad.<n>")``; the caller registers gradient
            hooks that call :meth:`debug_grad` and opens the gradient slot with :meth:`debug_expect_grad`.
        """
        index = self._debug_counts.get(name, 0)
        self._debug_counts[name] = index + 1
        entry = f"{name}.{index}"
        writer = self.writer()
        with self.collecting():
            self._debug[entry] = self.collector.collect(value, writer=writer, entry_name=entry, arg_path="tensor")
        return entry, f"{name}_grad.{index}"

    def debug_expect_grad(self, grad_entry: str, skeleton: object) -> None:
        """Open ``grad_entry`` with an all-null structure shaped like ``skeleton``.

        Args:
            skeleton: nested lists/dicts whose leaves are None (the positions gradients may fill).
        """
        self._debug_grads[grad_entry] = skeleton
        self._debug[grad_entry] = _skeleton_node(skeleton)

    def debug_grad(self, grad_entry: str, position: Sequence[object], grad: object) -> None:
        """Fill one position (a key path into the saved value) of ``grad_entry`` with ``grad``."""
        if grad_entry not in self._debug_grads or self._writer is None:
            return
        skeleton = self._debug_grads[grad_entry]
        arg_path = ".".join(["tensor", *(str(p) for p in position)])
        with self.collecting():
            leaf = self.collector.collect(grad, writer=self.writer(), entry_name=grad_entry, arg_path=arg_path)
        if not position:
            self._debug_grads[grad_entry] = leaf
        else:
            target: Any = skeleton
            for key in position[:-1]:
                target = target[key]
            target[position[-1]] = leaf
        self._debug[grad_entry] = _skeleton_node(self._debug_grads[grad_entry])


def _skeleton_node(value: object) -> Node:
    """A mutable skeleton (lists/dicts of collected nodes or None) → a frozen node."""
    if isinstance(value, list):
        return Seq(tuple(_skeleton_node(v) for v in value))
    if isinstance(value, dict):
        return Map(tuple((str(k), _skeleton_node(v)) for k, v in value.items()))
    if isinstance(value, (TensorLeaf, ValueLeaf, Seq, Map)):
        return value
    return None
