"""The MindSpore recorder on MindSpore 2.7 (the mindtorch test environment) and 2.10 (this one): the same
example run records the same entries with the same statistics on both, and the two dumps compare clean.

This is what "tested on MindSpore 2.7 and 2.10" means for the MindSpore adapter: 2.7 lacks hook options 2.10
has (``register_forward_hook(always_call=...)``), which once cost every cell entry there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mindtorch_env import mindtorch_python

from msprobe_cmp.cli import main

pytestmark = pytest.mark.mindtorch

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "mindspore_twin_mlp.py"


def _record(python: str, dump: Path) -> None:
    res = subprocess.run([python, str(TWIN), "--dump", str(dump), "--steps", "2"], capture_output=True, text=True,
                         timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "GLOG_v": "3"})
    assert res.returncode == 0, res.stderr[-3000:]


def test_mindspore_27_and_210_record_the_same_run_identically(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("mindspore")
    old = mindtorch_python()  # MindSpore 2.7.0
    _record(old, tmp_path / "ms27")
    _record(sys.executable, tmp_path / "ms210")
    for step in (0, 1):
        docs = [json.loads((tmp_path / v / f"step{step}" / "rank" / "dump.json").read_text())
                for v in ("ms27", "ms210")]
        assert docs[0]["not_captured"] == [] and docs[1]["not_captured"] == []
        assert list(docs[0]["data"]) == list(docs[1]["data"])  # same entries, same order
        assert any(name.startswith("Cell.blocks.0.Dense.forward") for name in docs[0]["data"])
    assert main([str(tmp_path / "ms27"), str(tmp_path / "ms210"), "-o", str(tmp_path / "report")]) == 0
    doc = json.loads((tmp_path / "report" / "comparison.json").read_text())
    assert doc["verdict"] == "pass" and doc["matched_share"] == 1.0
