"""msprobe-cmp: record two training runs (MindSpore, PyTorch, mindtorch) and find where they disagree numerically.

Public API:
    PrecisionDebugger   the recorder (needs mindspore; imported lazily)
    load_dump           read a dump written by msprobe-cmp or msprobe
    compare             compare two dumps into a Comparison
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msprobe_cmp.dump.reader import load_dump

__version__ = "0.1.0"

if TYPE_CHECKING:
    from msprobe_cmp.comparator.compare import compare
    from msprobe_cmp.recorder import PrecisionDebugger

__all__ = ["PrecisionDebugger", "__version__", "compare", "load_dump"]


def __getattr__(name: str) -> Any:
    # Lazy: the recorder and comparator load only when used.
    if name == "PrecisionDebugger":
        from msprobe_cmp.recorder import PrecisionDebugger

        return PrecisionDebugger
    if name == "compare":
        from msprobe_cmp.comparator.compare import compare

        return compare
    raise AttributeError(f"module 'msprobe_cmp' has no attribute {name!r}")
