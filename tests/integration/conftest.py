"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def record_ports(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``record_ports(name, {directory: port}, **options)``: record the port demo's runs (``"pytorch"``,
    ``"mindspore"``, ``"bug"``: :func:`~msprobe_cmp.recorder.adapters.digits_port.run_port_training`, one step each,
    ``options`` passed on) under a new directory named after ``name``, one dump each; returns that directory.
    Skipped without MindSpore or scikit-learn, and without torch when a PyTorch run is asked for."""
    pytest.importorskip("mindspore")
    pytest.importorskip("sklearn")
    from msprobe_cmp.recorder.adapters.digits_port import run_port_training

    def record(name: str, runs: Mapping[str, str], **options: Any) -> Path:
        if "pytorch" in runs.values():
            pytest.importorskip("torch")
        root = tmp_path_factory.mktemp(name)
        for directory, port in runs.items():
            run_port_training(root / directory, port=port, steps=1, **options)
        return root

    return record
