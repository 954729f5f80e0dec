"""The CLI's atomic writing of several files (``cli._write_together``), some of them by a forked process
(``alongside``, on Linux): the files written where they should be, and every failure (a full disk, a bug, a killed
process, this process failing meanwhile) raised here, with no file replaced and no temporary file left."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from msprobe_cmp import cli
from msprobe_cmp.forked import can_fork

forks = pytest.mark.skipif(not can_fork(), reason="no forked writers here")


def _pid(fh):
    fh.write(str(os.getpid()).encode())


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def three(tmp_path):
    """Three files of an earlier run: a.txt, b.txt, c.txt."""
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(f"earlier {name}")
    return tmp_path


@forks
def test_the_files_alongside_are_written_by_another_process_and_replaced_here(three):
    paths = [three / f"{name}.txt" for name in "abcd"]
    replaced = []
    real_replace = os.replace

    def replace(src, dst):
        replaced.append((os.getpid(), Path(dst).name))
        real_replace(src, dst)

    cli.os.replace, saved = replace, cli.os.replace
    try:
        cli._write_together([(p, _pid) for p in paths], lambda: None, alongside=(paths[1], paths[2]))
    finally:
        cli.os.replace = saved
    pids = [int(p.read_text()) for p in paths]
    assert pids[0] == pids[3] == os.getpid()
    assert pids[1] == pids[2] != os.getpid()  # one other process wrote both
    assert replaced == [(os.getpid(), name) for name in ("d.txt", "c.txt", "b.txt", "a.txt")]  # last first
    assert sorted(os.listdir(three)) == ["a.txt", "b.txt", "c.txt", "d.txt"]


def test_without_files_alongside_every_file_is_written_here(three):
    paths = [three / f"{name}.txt" for name in "abc"]
    cli._write_together([(p, _pid) for p in paths], lambda: None)
    assert [int(p.read_text()) for p in paths] == [os.getpid()] * 3


def _full(fh):
    fh.write(b"half")
    raise OSError(28, "No space left on device")


class _Odd(Exception):
    def __init__(self, a, b):  # not rebuilt by pickle from its args
        super().__init__(f"{a}-{b}")


def _odd(fh):
    raise _Odd(1, 2)


def _bug(fh):
    raise ValueError("a bug in a writer")


@forks
@pytest.mark.parametrize("write, raised, says", [
    (_full, OSError, "No space left on device"),
    (_bug, ValueError, "a bug in a writer"),
    # an exception pickle cannot rebuild comes as a RuntimeError naming it; once tblib's pickling support is installed
    # (importing dask.distributed does), the exception itself
    (_odd, (RuntimeError, _Odd), "1-2"),
])
def test_a_failure_alongside_is_raised_here_and_nothing_is_replaced(three, write, raised, says):
    before = _listing(three)
    paths = [three / f"{name}.txt" for name in "abc"]
    files = [(paths[0], _pid), (paths[1], write), (paths[2], _pid)]
    with pytest.raises(raised, match=says) as caught:
        cli._write_together(files, lambda: None, alongside=(paths[1],))
    assert _listing(three) == before  # nothing replaced, no temporary file left
    if raised is OSError:
        assert caught.value.errno == 28 and caught.value.filename == str(paths[1])  # names the file, not its temp
    assert any("forked to write reports alongside" in note and "Traceback" in note
               for note in getattr(caught.value, "__notes__", []))


@forks
def test_a_process_killed_while_writing_alongside_leaves_no_temporary_file(three):
    def killed(fh):
        fh.write(b"half")
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    before = _listing(three)
    paths = [three / f"{name}.txt" for name in "abc"]
    with pytest.raises(ChildProcessError, match=f"signal {int(signal.SIGKILL)}"):
        cli._write_together([(paths[0], _pid), (paths[1], killed), (paths[2], _pid)], lambda: None,
                            alongside=(paths[1],))
    assert _listing(three) == before


@forks
def test_a_failure_here_stops_the_process_alongside(three):
    pid_file = three.parent / f"{three.name}.pid"

    def slow(fh):
        partial = pid_file.with_suffix(".partial")  # renamed when written: the pid file never exists empty
        partial.write_text(str(os.getpid()))
        partial.rename(pid_file)
        fh.write(b"started")
        time.sleep(60)

    def full_once_started(fh):
        while not pid_file.exists():
            time.sleep(0.01)
        raise OSError(28, "No space left on device")

    before = _listing(three)
    paths = [three / f"{name}.txt" for name in "abc"]
    start = time.monotonic()
    with pytest.raises(OSError, match="No space left on device"):
        cli._write_together([(paths[0], _pid), (paths[1], slow), (paths[2], full_once_started)], lambda: None,
                            alongside=(paths[1],))
    assert time.monotonic() - start < 30  # stopped, not waited for
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # reaped
    assert _listing(three) == before


@forks
def test_a_failing_then_replaces_nothing_written_alongside(three):
    def then():
        raise OSError(13, "Permission denied", "x")

    before = _listing(three)
    paths = [three / f"{name}.txt" for name in "abc"]
    with pytest.raises(OSError, match="Permission denied"):
        cli._write_together([(p, _pid) for p in paths], then, alongside=(paths[1], paths[2]))
    assert _listing(three) == before


def _processes_naming(text: str) -> list[int]:
    """The pids of the processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@forks
def test_sigterm_while_the_reports_are_written_stops_both_processes_and_leaves_nothing(tmp_path):
    """The command stopped (SIGTERM, as ``timeout`` sends it) while its forked process writes comparison.json:
    exit 130, no report, no temporary file, no process left."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "bench"))
    try:
        from compare_speed import make_statistics_pair
    finally:
        sys.path.remove(str(repo / "bench"))
    make_statistics_pair(tmp_path / "pair", 20_000)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "msprobe_cmp.cli", str(tmp_path / "pair" / "A"),
                             str(tmp_path / "pair" / "B"), "-o", str(out)], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and any(out.glob(".comparison.json.*.tmp"))):  # the forked process is writing
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert list(out.iterdir()) == []
    time.sleep(0.2)
    assert _processes_naming(str(out)) == []
