"""The CLI loads the target in a forked process while it loads the baseline (``cli._load_together``, on Linux), and
``msprobe_cmp.forked.Forked``, which runs that process: the same dumps and the same errors, in the same order, as
loading one after the other; nothing left behind when either side fails or the process is killed."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from small_dump import ENTRIES, write_dump

from msprobe_cmp import cli
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.errors import DumpFormatError
from msprobe_cmp.forked import GRACE, Forked

forks = pytest.mark.skipif(not cli._can_fork(), reason="no forked processes here")
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"


def _stats_dump(root: Path) -> Path:
    """A small valid dump at ``root/step0/rank`` (tests/small_dump.py); returns ``root``."""
    write_dump(root)
    return root


def _broken(root: Path) -> Path:
    """A dump whose dump.json has a statistic that is no number (its first entry's first input's Max)."""
    write_dump(root)
    f = root / "step0" / "rank" / "dump.json"
    doc = json.loads(f.read_text())
    doc["data"][ENTRIES[0]]["input_args"][0]["Max"] = {}
    f.write_text(json.dumps(doc))
    return root


@forks
def test_the_target_is_loaded_by_another_process_and_equals_a_plain_load(monkeypatch):
    pids = []
    real = cli._load_input

    def recording(path, absolute, scan=False):
        pids.append((path.name, os.getpid()))
        return real(path, absolute, scan)

    monkeypatch.setattr(cli, "_load_input", recording)
    a, b = FIXTURES / "statistics_a", FIXTURES / "statistics_b"
    dump_a, dump_b = cli._load_together(a, b, False)
    assert pids == [("statistics_b", os.getpid())]  # the target's load ran in the forked process
    for got, path in ((dump_a, a), (dump_b, b)):
        want = load_dump(path)
        assert got.root == want.root and len(got.units) == len(want.units) == 2
        for u, v in zip(got.units, want.units, strict=True):
            assert (u.step, u.rank, u.directory, u.meta) == (v.step, v.rank, v.directory, v.meta)
            assert u.entries == v.entries and dict(u.stack) == dict(v.stack) and dict(u.construct) == dict(v.construct)


@forks
@pytest.mark.parametrize("bad", ["target", "baseline", "both"])
def test_errors_are_those_of_loading_one_after_the_other(tmp_path, bad):
    target = _broken(tmp_path / "t") if bad in ("target", "both") else _stats_dump(tmp_path / "t")
    baseline = _broken(tmp_path / "b") if bad in ("baseline", "both") else _stats_dump(tmp_path / "b")
    with pytest.raises(DumpFormatError) as caught:
        cli._load_together(target, baseline, False)
    named = target if bad in ("target", "both") else baseline
    assert str(caught.value).startswith(str(named / "step0" / "rank" / "dump.json"))
    assert "Max" in str(caught.value)


@forks
def test_the_command_with_both_dumps_broken_names_the_target(tmp_path, capsys):
    target, baseline = _broken(tmp_path / "t"), _broken(tmp_path / "b")
    code = cli.main([str(target), str(baseline), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"msprobe-cmp: error: {target / 'step0' / 'rank' / 'dump.json'}: ")
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


@forks
def test_a_killed_loader_is_a_child_process_error(tmp_path, monkeypatch):
    real = cli._load_input

    def killed_for_target(path, absolute, scan=False):
        if path.name == "t":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, absolute, scan)

    monkeypatch.setattr(cli, "_load_input", killed_for_target)
    with pytest.raises(ChildProcessError, match=f"forked to load the target.*signal {int(signal.SIGKILL)}"):
        cli._load_together(_stats_dump(tmp_path / "t"), _stats_dump(tmp_path / "b"), False)


@forks
def test_forked_values_and_errors_come_back():
    def work(tell):
        tell(1, "one")
        tell(2, list(range(5)))

    assert Forked.start(work, "to test").finish() == {1: "one", 2: [0, 1, 2, 3, 4]}

    def fails(tell):
        tell(1, "told first")
        raise ValueError("a bug")

    forked = Forked.start(fails, "to test")
    with pytest.raises(ValueError, match="a bug") as caught:
        forked.finish()
    assert forked.told == {1: "told first"}
    assert any("forked to test" in note and "Traceback" in note for note in caught.value.__notes__)


@forks
def test_stopping_a_process_blocked_on_a_large_value_does_not_wait_for_the_grace():
    """A forked process that told more than a pipe holds waits for this one to read: stop() reads meanwhile, so the
    process ends at SIGTERM, not at SIGKILL after the grace period."""
    started = time.monotonic()
    forked = Forked.start(lambda tell: tell(0, b"x" * (16 << 20)), "to test")
    time.sleep(0.2)  # it is now blocked writing
    told = forked.stop()
    assert time.monotonic() - started < GRACE
    assert os.WIFSIGNALED(forked.status) is False or os.WTERMSIG(forked.status) != signal.SIGKILL
    assert told in ({}, {0: b"x" * (16 << 20)})  # either cut short by SIGTERM or read whole
    with pytest.raises(ChildProcessError):
        os.waitpid(forked.pid, os.WNOHANG)  # reaped
