"""Framework adapters: the only modules of msprobe-cmp that import a deep-learning framework.

Each adapter is imported lazily by :func:`create_adapter`, so ``import msprobe_cmp`` needs no framework.
"""

from __future__ import annotations

from typing import Any

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.config import RecordConfig


def create_adapter(framework: str, config: RecordConfig) -> Any:
    """Build the adapter of ``framework`` (``"mindspore"``, ``"pytorch"`` or ``"mindtorch"``) for ``config``.

    Raises:
        ConfigError: for an unknown framework.
        MissingFrameworkError: when the framework is not installed.
    """
    if framework == "mindspore":
        from msprobe_cmp.recorder.adapters.mindspore import MindSporeAdapter

        return MindSporeAdapter(config)
    if framework in ("pytorch", "mindtorch"):
        from msprobe_cmp.recorder.adapters.torch import TorchAdapter

        return TorchAdapter(config, framework=framework)
    raise ConfigError(f"arguments: framework: no recorder adapter for {framework!r}")
