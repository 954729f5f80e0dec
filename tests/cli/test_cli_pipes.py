"""A reader that goes away (``msprobe-cmp A B | head -1``) does not change the exit code or add an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from small_dump import write_dump


def test_a_closed_stdout_keeps_the_verdicts_exit_code(tmp_path: Path) -> None:
    write_dump(tmp_path / "a")
    write_dump(tmp_path / "b")
    for run in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "msprobe_cmp.cli", str(tmp_path / "a"), str(tmp_path / "b"),
             "-o", str(tmp_path / f"out{run}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # nobody reads the summary
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert b"Broken pipe" not in err and b"Traceback" not in err, err
        assert (tmp_path / f"out{run}" / "report.html").is_file()


def test_a_named_pipe_nobody_writes_to_is_an_empty_mapping_file_not_a_hang(tmp_path: Path) -> None:
    import os

    write_dump(tmp_path / "a")
    write_dump(tmp_path / "b")
    fifo = tmp_path / "cells.yaml"
    os.mkfifo(fifo)
    for flag in ("--cell-mapping", "--api-mapping", "--rules"):
        out = tmp_path / f"out{flag}"
        res = subprocess.run(
            [sys.executable, "-m", "msprobe_cmp.cli", str(tmp_path / "a"), str(tmp_path / "b"),
             "-o", str(out), flag, str(fifo)],
            capture_output=True, text=True, timeout=60,
        )
        if flag == "--rules":  # an empty rules file keeps the defaults
            assert res.returncode == 0, res.stderr
            continue
        assert res.returncode == 2, (flag, res.stderr)
        assert res.stderr.count("\n") == 1 and str(fifo) in res.stderr, res.stderr
        assert not out.exists()
