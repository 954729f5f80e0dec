"""``PrecisionDebugger``: the user-facing recorder, msprobe's API.

Typical use (MindSpore PyNative)::

    debugger = PrecisionDebugger(dump_path="./dump", task="statistics", level="mix")
    for x, y in batches:
        debugger.start(net)          # hooks installed once; recording switched on for this step
        loss, grads = grad_fn(x, y)  # forward + backward are recorded
        debugger.stop()              # recording off, files of the step flushed
        optimizer(grads)
        debugger.step()              # step<N>/ closed, counters reset
    debugger.close()                 # everything installed is removed (also done by ``with``)

Debug level: ``debugger.save(loss, "loss")`` anywhere in the step writes ``loss.<n>`` (and, inside a
gradient context, ``loss_grad.<n>``) to ``step<N>/rank<R>/debug.json``; ``start()`` is not needed.

The framework is imported when the debugger is constructed (never by ``import msprobe_cmp``); API
wrappers are installed then, so functions imported from MindSpore *after* the constructor ran are
wrapped too.  A name bound *before* it (``from mindspore.ops import relu`` above the constructor)
keeps the original function and is not recorded.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.config import RecordConfig, load_config

FRAMEWORKS = ("mindspore", "pytorch", "mindtorch")
#: Accepted spellings of ``framework=`` → the adapter name.
FRAMEWORK_ALIASES = {"mindspore": "mindspore", "pytorch": "pytorch", "torch": "pytorch", "mindtorch": "mindtorch"}

logger = logging.getLogger(__name__)


class _Adapter(Protocol):
    closed: bool
    service: Any

    def start(self, model: Any = None) -> None: ...

    def stop(self) -> None: ...

    def step(self) -> None: ...

    def close(self) -> None: ...

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None: ...


def _warn_about_an_earlier_dump(dump_path: Path) -> None:
    """Say so when ``dump_path`` already holds step directories: this run replaces the steps it records
    and leaves the others, so the directory would mix two runs."""
    try:
        earlier = sorted(p.name for p in dump_path.iterdir() if p.is_dir() and p.name.startswith("step"))
    except OSError:
        return
    if earlier:
        shown = ", ".join(earlier[:5]) + (", ..." if len(earlier) > 5 else "")
        logger.warning(
            "msprobe-cmp: %s already holds %d step directories from an earlier run (%s): the steps this run "
            "records replace them and the others stay, so the dump may mix two runs; use an empty dump_path",
            dump_path, len(earlier), shown,
        )


def _torch_is_mindtorch(torch_module: Any) -> bool:
    """True when the imported ``torch`` is mindtorch: its ``Tensor`` class is (a subclass of) a class defined
    in a ``mindspore`` module.  Reads the class's MRO only; imports nothing."""
    tensor_cls = getattr(torch_module, "Tensor", None)
    if not isinstance(tensor_cls, type):
        return False
    return any(str(getattr(c, "__module__", "")).split(".")[0] == "mindspore" for c in tensor_cls.__mro__)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None or has no __spec__
        return False


def detect_framework(framework: str | None = None) -> str:
    """The recorder adapter to use: ``"mindspore"``, ``"pytorch"`` or ``"mindtorch"``.

    An explicit ``framework`` always wins (``"torch"`` is an alias of ``"pytorch"``).  Otherwise, from what
    the process has already imported (``sys.modules``; nothing is imported to decide):

    * ``torch`` is mindtorch (its ``Tensor`` is a MindSpore tensor class), or ``mindtorch`` is imported and
      ``torch`` is not → ``"mindtorch"``;
    * real ``torch`` imported, ``mindspore`` not → ``"pytorch"``; ``mindspore`` imported, ``torch`` not →
      ``"mindspore"``;
    * both real ``torch`` and ``mindspore`` imported → ConfigError asking for ``framework=``;
    * neither imported → ``"mindspore"`` if it is installed, else ``"pytorch"`` if torch is installed, else
      ``"mindspore"`` (whose adapter then raises MissingFrameworkError naming the package to install).

    Raises:
        ConfigError: for an unknown ``framework``, or when the choice is ambiguous.
    """
    if framework is not None:
        if not isinstance(framework, str) or framework.lower() not in FRAMEWORK_ALIASES:
            raise ConfigError(
                f"arguments: framework: expected one of mindspore, pytorch (or torch), mindtorch, got {framework!r}"
            )
        return FRAMEWORK_ALIASES[framework.lower()]
    torch_module = sys.modules.get("torch")
    has_ms = sys.modules.get("mindspore") is not None
    if torch_module is not None and _torch_is_mindtorch(torch_module):
        return "mindtorch"
    if torch_module is None and sys.modules.get("mindtorch") is not None:
        return "mindtorch"
    if torch_module is not None and has_ms:
        raise ConfigError(
            "arguments: framework: both torch and mindspore are imported; pass framework='pytorch' or "
            "framework='mindspore' to PrecisionDebugger"
        )
    if torch_module is not None:
        return "pytorch"
    if has_ms:
        return "mindspore"
    if not _installed("mindspore") and _installed("torch"):
        return "pytorch"
    return "mindspore"


class PrecisionDebugger:
    """Record a training run in msprobe's dump format.

    Args:
        config_path: an msprobe ``config.json`` (optional).
        dump_path, task, level, step, rank: override the file's values (``step``/``rank``: a list of ints
            and ``"a-b"`` ranges; ``task``: ``"statistics"``/``"tensor"``/``"structure"``; ``level``:
            ``"L0"``/``"L1"``/``"mix"``/``"debug"``).
        framework: ``"mindspore"``, ``"pytorch"`` (alias ``"torch"``) or ``"mindtorch"``; None (default)
            detects it from the imported modules (see :func:`detect_framework`).

    Raises:
        ConfigError: on an invalid configuration (one line naming the file and field), or when another
            debugger's API wrappers are installed (close it first).
        MissingFrameworkError: when the framework is not installed.
        ConfigError: when ``framework`` is None and both real torch and mindspore are imported.

    Unlike msprobe's, this class is not a singleton: each instance records independently, but two
    instances cannot wrap the same APIs at once (the second constructor at L1/mix raises ConfigError).
    """

    def __init__(
        self,
        config_path: str | Path | None = None,
        *,
        dump_path: str | Path | None = None,
        task: str | None = None,
        level: str | None = None,
        step: Any = None,
        rank: Any = None,
        framework: str | None = None,
    ) -> None:
        chosen = detect_framework(framework)
        self.config: RecordConfig = load_config(
            config_path, dump_path=dump_path, task=task, level=level, step=step, rank=rank
        )
        self.framework = chosen
        self._adapter: _Adapter | None = None
        _warn_about_an_earlier_dump(Path(self.config.dump_path))
        self._get_adapter()

    def _get_adapter(self) -> _Adapter:
        if self._adapter is None:
            from msprobe_cmp.recorder.adapters import create_adapter

            self._adapter = create_adapter(self.framework, self.config)
            # A debugger dropped without close() (or still open at interpreter exit) still flushes
            # and removes its wrappers.
            weakref.finalize(self, self._adapter.close)
        return self._adapter

    @property
    def current_step(self) -> int:
        """The step being recorded (starts at 0, advanced by :meth:`step`)."""
        if self._adapter is None:
            return 0
        return int(self._adapter.service.current_step)

    def start(self, model: Any = None) -> None:
        """Install hooks on ``model`` (a Cell / ``torch.nn.Module`` or a list of them; needed for L0/mix) and
        start recording.

        Hooks are installed once per model; calling ``start`` again with the same model only
        switches recording on.  Does nothing for steps the config does not select.

        Raises:
            MissingFrameworkError: when the framework is not installed.
            ConfigError: on a wrong model argument, or when another debugger's wrappers are active.
        """
        self._get_adapter().start(model)

    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """Debug level: record ``variable`` (a tensor, a scalar, nested lists/tuples/dicts of them) as
        ``<name>.<n>`` in the step's ``debug.json``; with ``save_backward`` and inside a gradient context,
        its gradients arrive as ``<name>_grad.<n>`` (tensors that get no gradient stay null).

        ``n`` counts saves of ``name`` within the step from 0.  Ignored (one warning) at other levels.
        """
        self._get_adapter().save(variable, name, save_backward)

    def stop(self) -> None:
        """Stop recording and flush the current step's files (the step stays open for late gradients)."""
        if self._adapter is not None:
            self._adapter.stop()

    def step(self) -> None:
        """Finish the current step (flush, reset counters) and move to the next one."""
        if self._adapter is not None:
            self._adapter.step()

    def close(self) -> None:
        """Flush and remove every hook and wrapper; safe to call more than once."""
        if self._adapter is not None:
            self._adapter.close()

    def __enter__(self) -> PrecisionDebugger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
