"""Issue 8: faults while recording real MindSpore training, each in its own process (tests/robustness/fault_training.py).

Four training runs of 4 steps run side by side in subprocesses (``subprocess`` starts a fresh interpreter:
no fork after MindSpore ran) and the files they leave behind are checked:

* SIGKILL in the middle of step 2: steps 0 and 1 are complete and readable, nothing of step 2 poses as a step;
* KeyboardInterrupt in the middle of step 2: the same, and a step-2 dump written at exit says it is incomplete;
* no space left on the device from step 2 on: one clear error, recording stops, training finishes with the
  same losses as a run without the recorder, steps 0 and 1 are intact, no temporary files are left;
* an exception inside the recording hooks of one API at step 1: training identical, the failure is listed in
  the dump header's ``not_captured``, everything else of the step is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("mindspore")

from msprobe_cmp.dump.reader import load_dump

pytestmark = pytest.mark.mindspore

SCRIPT = Path(__file__).with_name("fault_training.py")
MODES = ("plain", "kill", "interrupt", "enospc", "hook_error")


@dataclass
class Run:
    mode: str
    returncode: int
    losses: list[float]
    stderr: str
    dump: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    base = tmp_path_factory.mktemp("faults")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GLOG_v": "3"}
    procs = {}
    for mode in MODES:
        procs[mode] = subprocess.Popen(
            [sys.executable, str(SCRIPT), mode, str(base / mode)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
    out = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        losses = [json.loads(line)["loss"] for line in stdout.splitlines() if line.startswith("{")]
        out[mode] = Run(mode, proc.returncode, losses, stderr, base / mode)
    assert out["plain"].returncode == 0 and len(out["plain"].losses) == 4, out["plain"].stderr[-2000:]
    return out


def _units(root: Path) -> dict[int, dict]:
    """step → the rank's dump.json document, for every step directory holding a dump.json."""
    docs = {}
    for unit in load_dump(root).units:
        docs[unit.step] = json.loads((root / f"step{unit.step}" / "rank" / "dump.json").read_text())
    return docs


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def _assert_steps_0_and_1_complete(run: Run, reference: Run) -> None:
    """Steps 0 and 1 hold exactly the data of the reference run's (recorded before any fault there)."""
    got, ref = _units(run.dump), _units(reference.dump)
    for step in (0, 1):
        assert step in got, f"{run.mode}: step {step} missing"
        assert got[step]["data"] == ref[step]["data"], f"{run.mode}: step {step} differs from the reference"
        assert got[step]["not_captured"] == []
    assert not _temp_files(run.dump), _temp_files(run.dump)


def test_sigkill_mid_step_leaves_the_completed_steps_readable(runs: dict[str, Run]) -> None:
    run = runs["kill"]
    assert run.returncode == -9
    assert run.losses == runs["plain"].losses[:2]
    _assert_steps_0_and_1_complete(run, runs["enospc"])
    assert set(_units(run.dump)) == {0, 1}  # nothing of the killed step poses as a step


def test_keyboard_interrupt_mid_step_leaves_the_completed_steps_readable(runs: dict[str, Run]) -> None:
    run = runs["interrupt"]
    assert run.returncode not in (0, -9)
    assert "KeyboardInterrupt" in run.stderr
    assert run.losses == runs["plain"].losses[:2]
    _assert_steps_0_and_1_complete(run, runs["enospc"])
    units = _units(run.dump)
    if 2 in units:  # flushed at exit: it must say that the step is incomplete
        reasons = " ".join(item["reason"] for item in units[2]["not_captured"])
        assert "incomplete" in reasons, units[2]["not_captured"]


def test_a_full_disk_stops_recording_with_one_clear_error_and_training_goes_on(runs: dict[str, Run]) -> None:
    run = runs["enospc"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.losses == runs["plain"].losses  # bit-identical training
    errors = [line for line in run.stderr.splitlines() if line.startswith("msprobe-cmp:") and "No space" in line]
    assert len(errors) == 1, errors
    assert "recording stopped" in errors[0]
    units = _units(run.dump)
    assert set(units) == {0, 1}
    assert not _temp_files(run.dump)


def test_an_exception_in_a_hook_is_recorded_and_training_is_identical(runs: dict[str, Run]) -> None:
    run = runs["hook_error"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.losses == runs["plain"].losses
    units = _units(run.dump)
    assert set(units) == {0, 1, 2, 3}
    failures = {item["what"]: item["reason"] for item in units[1]["not_captured"]}
    assert "injected fault in a recording hook" in failures.get("Functional.relu", ""), failures
    names_1 = set(units[1]["data"])
    assert "Functional.relu.0.forward" not in names_1
    # everything else of the step is recorded: the step-0 names minus relu's
    assert names_1 == {n for n in units[0]["data"] if not n.startswith("Functional.relu.")}
