"""``msprobe_cmp.forked.Forked``, the process the CLI forks to write reports alongside: what it tells comes back whole
(values and errors, a large value in place), and stopping it never waits on a full pipe."""

from __future__ import annotations

import os
import signal
import time

import pytest

from msprobe_cmp.forked import GRACE, Forked, can_fork

forks = pytest.mark.skipif(not can_fork(), reason="no forked processes here")


@forks
def test_forked_values_and_errors_come_back():
    def work(tell):
        tell(1, "one")
        tell(2, list(range(5)))

    assert Forked.start(work, "to test").finish() == {1: "one", 2: [0, 1, 2, 3, 4]}
    big = bytes(range(256)) * (1 << 16)  # 16 MiB: many pipe-fulls, taken in place once whole
    assert Forked.start(lambda tell: tell(7, big), "to test").finish() == {7: big}

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
