"""The recorder: hooks a training run and writes msprobe-format dumps.

Public API: :class:`PrecisionDebugger` (start/stop/step/close) and :class:`RecordConfig`
(with :func:`load_config` to read msprobe's ``config.json``).  Framework code lives in
:mod:`msprobe_cmp.recorder.adapters` and is imported only when recording starts.
"""

from msprobe_cmp.recorder.config import RecordConfig, load_config
from msprobe_cmp.recorder.debugger import PrecisionDebugger

__all__ = ["PrecisionDebugger", "RecordConfig", "load_config"]
