"""The demo's two recordings: the digits MLP trained in float32 (baseline) and with float16 hidden layers (target).

Used by ``msprobe-cmp demo``.  MindSpore is imported only inside
:mod:`msprobe_cmp.recorder.adapters.digits_demo`, when the recordings run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from msprobe_cmp.errors import ConfigError, MissingFrameworkError

BASELINE = "float32"
TARGET = "float16"


def run_demo_recordings(dumps_dir: Path, *, steps: int = 5, replace: bool = False) -> tuple[Path, Path, list[str]]:
    """Train and record the two demo runs under ``dumps_dir/float32`` and ``dumps_dir/float16``.

    Both runs start from the same weights and see the same batches; the target computes its hidden
    layers in float16.  Both are recorded at level ``mix`` with task ``tensor``.

    Args:
        dumps_dir: parent directory of the two dump roots.
        steps: training steps recorded in each run (≥ 1).
        replace: remove earlier demo dumps there first; otherwise existing ones are an error.

    Returns:
        ``(baseline_root, target_root, summary_lines)``; the lines give each run's losses.

    Raises:
        MissingFrameworkError: mindspore (or scikit-learn) is not installed.
        ConfigError: earlier demo dumps exist and ``replace`` is False.
    """
    try:
        from msprobe_cmp.recorder.adapters.digits_demo import run_digits_training
    except ImportError as exc:  # pragma: no cover - depends on the environment
        name = getattr(exc, "name", None) or "mindspore"
        raise MissingFrameworkError(name.split(".")[0], "mindspore") from None
    roots = {dtype: dumps_dir / dtype for dtype in (BASELINE, TARGET)}
    for root in roots.values():
        if root.exists():
            if not replace:
                raise ConfigError(f"{root}: an earlier demo dump is there; pass --force to replace it")
            shutil.rmtree(root)
    lines = []
    for dtype, root in roots.items():
        summary = run_digits_training(root, hidden_dtype=dtype, steps=steps, level="mix", task="tensor")
        losses = ", ".join(f"{x:.6f}" for x in summary.get("losses", []))
        lines.append(f"{dtype:8s} run: losses [{losses}] -> {root}")
    return roots[BASELINE], roots[TARGET], lines
