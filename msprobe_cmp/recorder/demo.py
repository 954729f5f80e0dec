"""The demo's three recordings: a digits classifier in PyTorch, its correct MindSpore port, and a buggy port.

Used by ``msprobe-cmp demo``, which compares each port against the PyTorch run.  The model, the data and the bug
are in :mod:`msprobe_cmp.recorder.adapters.digits_port` (the only module here that imports torch and mindspore,
when the recordings run).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from msprobe_cmp.errors import ConfigError, MissingFrameworkError

#: The runs and their dump directories under the demo's dumps directory, baseline first.
RUNS = ("pytorch", "mindspore", "bug")
#: The demo's recording task: across frameworks only the tensors' cosine similarity tells the bug from rounding.
TASK = "tensor"


class DemoRecordings(NamedTuple):
    """The three dump roots and one line per run (its losses and where it was recorded).

    ``pytorch`` is the baseline, ``mindspore`` the correct port, ``bug`` the port with one porting bug
    (:func:`bug_description`).
    """

    pytorch: Path
    mindspore: Path
    bug: Path
    lines: tuple[str, ...]


def bug_description() -> str:
    """One sentence: the buggy port's change (which cell, what it holds, what it should hold).

    Raises:
        MissingFrameworkError: the demo's module cannot be imported.
    """
    return str(_adapter().BUG_DESCRIPTION)


def run_demo_recordings(dumps_dir: Path, *, steps: int = 3, replace: bool = False) -> DemoRecordings:
    """Train and record the three demo runs under ``dumps_dir/pytorch``, ``dumps_dir/mindspore`` and
    ``dumps_dir/bug``.

    All three start from the same weights and see the same batches of 64 digits; each is recorded at level
    ``mix`` with task :data:`TASK` (every tensor as ``.npy``).  torch, mindspore and scikit-learn are checked
    before anything is recorded.

    Args:
        dumps_dir: parent directory of the three dump roots.
        steps: training steps recorded in each run (≥ 1).
        replace: remove earlier demo dumps there first; otherwise existing ones are an error.

    Returns:
        The three roots and three lines, one per run.

    Raises:
        MissingFrameworkError: torch, mindspore or scikit-learn is not installed (the message names the extra).
        ConfigError: earlier demo dumps exist and ``replace`` is False, or ``steps`` < 1.
    """
    adapter = _adapter()
    adapter.require_frameworks()
    roots = {run: dumps_dir / run for run in RUNS}
    for root in roots.values():
        if root.exists():
            if not replace:
                raise ConfigError(f"{root}: an earlier demo dump is there; pass --force to replace it")
            shutil.rmtree(root)
    what = {"pytorch": "PyTorch original", "mindspore": "MindSpore port", "bug": "port with the bug"}
    lines = []
    for run, root in roots.items():
        summary = adapter.run_port_training(root, port=run, steps=steps, level="mix", task=TASK)
        losses = ", ".join(f"{x:.6f}" for x in summary["losses"])
        lines.append(f"{what[run]:18s} losses [{losses}] -> {root}")
    return DemoRecordings(roots["pytorch"], roots["mindspore"], roots["bug"], tuple(lines))


def _adapter() -> ModuleType:
    """The demo's adapter module, imported on first use (it needs the recorder's framework adapters)."""
    try:
        from msprobe_cmp.recorder.adapters import digits_port
    except ImportError as exc:  # pragma: no cover - depends on the environment
        name = getattr(exc, "name", None) or "mindspore"
        raise MissingFrameworkError(name.split(".")[0], "mindspore") from None
    return digits_port
