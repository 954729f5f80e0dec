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

The framework is imported only when :meth:`PrecisionDebugger.start` first runs, so importing
``msprobe_cmp`` works without any framework installed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.config import RecordConfig, load_config

FRAMEWORKS = ("mindspore",)

logger = logging.getLogger(__name__)


class _Adapter(Protocol):
    closed: bool
    service: Any

    def start(self, model: Any = None) -> None: ...

    def stop(self) -> None: ...

    def step(self) -> None: ...

    def close(self) -> None: ...


class PrecisionDebugger:
    """Record a training run in msprobe's dump format.

    Args:
        config_path: an msprobe ``config.json`` (optional).
        dump_path, task, level, step: override the file's values (``step``: a list of ints and
            ``"a-b"`` ranges; ``task``: ``"statistics"``/``"tensor"``; ``level``: ``"L0"``/``"L1"``/``"mix"``).
        framework: ``"mindspore"`` (the only adapter in this version).

    Raises:
        ConfigError: on an invalid configuration (one line naming the file and field).

    Unlike msprobe's, this class is not a singleton: each instance records independently, but two
    instances cannot wrap the same APIs at once (the second ``start()`` raises ConfigError).
    """

    def __init__(
        self,
        config_path: str | Path | None = None,
        *,
        dump_path: str | Path | None = None,
        task: str | None = None,
        level: str | None = None,
        step: Any = None,
        framework: str = "mindspore",
    ) -> None:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"arguments: framework: expected one of {', '.join(FRAMEWORKS)}, got {framework!r}")
        self.config: RecordConfig = load_config(config_path, dump_path=dump_path, task=task, level=level, step=step)
        self.framework = framework
        self._adapter: _Adapter | None = None
        if self.config.scope:
            logger.warning("msprobe-cmp: %s: scope is accepted but not applied by this recorder", self.config.source)

    def _get_adapter(self) -> _Adapter:
        if self._adapter is None:
            from msprobe_cmp.recorder.adapters import create_adapter

            self._adapter = create_adapter(self.framework, self.config)
        return self._adapter

    @property
    def current_step(self) -> int:
        """The step being recorded (starts at 0, advanced by :meth:`step`)."""
        if self._adapter is None:
            return 0
        return int(self._adapter.service.current_step)

    def start(self, model: Any = None) -> None:
        """Install hooks on ``model`` (a Cell or a list of Cells; needed for L0/mix) and start recording.

        Hooks are installed once per model; calling ``start`` again with the same model only
        switches recording on.  Does nothing for steps the config does not select.

        Raises:
            MissingFrameworkError: when the framework is not installed.
            ConfigError: on a wrong model argument, or when another debugger's wrappers are active.
        """
        self._get_adapter().start(model)

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
