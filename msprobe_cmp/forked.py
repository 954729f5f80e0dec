"""Work done by a forked process while this one goes on: the second core of a small machine for the CLI.

The command forks (Linux only, :func:`can_fork`) to write comparison.json and comparison.csv while it writes the
pages (``cli._write_together``), through :class:`Forked`: the forked process runs a function that tells this one
values (pickled through a pipe, as soon as each is known), ends with ``os._exit`` (never returning into the caller's
stack), and its error reaches this process as the same exception with the forked process's traceback as a note.
Ctrl-C and SIGTERM are held while forking, so that an interrupt never finds a forked process this one does not
know; then :meth:`Forked.stop` ends it (SIGTERM, SIGKILL after :data:`GRACE` seconds) and reaps it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

#: How long a forked process is given to stop after SIGTERM (:meth:`Forked.stop`) before it is killed, in seconds.
GRACE = 5.0

#: The bytes of a message's length, before its pickle (:meth:`Forked._take`).
_FRAME = 8

#: What the forked process's function is given: ``tell(key, value)`` sends ``value`` (picklable) to this process.
Tell = Callable[[int, object], None]


def can_fork() -> bool:
    """Whether work can go to a forked process: on Linux.  Windows has no fork, and macOS's system libraries are not
    safe to use in a forked child that does not exec."""
    return sys.platform == "linux" and hasattr(os, "fork")


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the block runs (a fork; the few ``os.replace`` calls that put the reports in
    place): a signal that came meanwhile is delivered when the block ends.  Outside the main thread, or without
    ``pthread_sigmask``, nothing is held."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def raise_interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: Ctrl-C's exception (KeyboardInterrupt), raised where the process is."""
    raise KeyboardInterrupt


class Forked:
    """A forked process running ``work(tell)`` (:meth:`start`) and what it told this one so far.

    Its messages are pickled ``(key, value, None)`` for ``tell(key, value)``, or ``(None, None, (exception,
    traceback text))`` when ``work`` raised, each after its length; they are read when this process waits for it
    (:meth:`finish`) or stops it (:meth:`stop`), each taken as soon as it is whole.  What was told is kept
    (:attr:`told`), so that a value naming something to clean up (a temporary file) is not lost when this process is
    interrupted while waiting, nor when the forked one is killed.

    Attributes:
        pid: the forked process; what: what it does, for messages (``"to write reports alongside"``).
        told: key → the last value told under it.
        status: ``os.waitpid``'s status once reaped, else None.
    """

    def __init__(self, pid: int, fd: int, what: str) -> None:
        self.pid = pid
        self.what = what
        self.told: dict[int, object] = {}
        self.status: int | None = None
        self._fd: int | None = fd
        self._received = bytearray()
        self._errors: list[BaseException] = []

    @classmethod
    def start(cls, work: Callable[[Tell], object], what: str) -> Forked:
        """Fork a process running ``work(tell)``; this process goes on at once.  Ctrl-C and SIGTERM are held while
        forking (the forked process lets them through: there they raise KeyboardInterrupt).

        Raises:
            OSError: no process can be forked.
        """
        read_end, write_end = os.pipe()
        with interrupts_held():
            try:
                pid = os.fork()
            except BaseException:
                os.close(read_end)
                os.close(write_end)
                raise
            if pid == 0:  # the forked process: it runs the work and ends, whatever happens
                os.close(read_end)
                _child_main(work, write_end)
            os.close(write_end)
            return cls(pid, read_end, what)

    def _receive(self) -> None:
        """Read what the pipe holds, taking each message as soon as it is whole (:meth:`_take`): until the pipe's end,
        or (once :meth:`stop` made the pipe non-blocking) what is there now."""
        fd = self._fd
        while fd is not None:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                return
            if not chunk:  # the process ended (or closed the pipe)
                os.close(fd)
                self._fd = fd = None
                break
            self._received += chunk
            self._take()

    def _take(self) -> None:
        """The whole messages at the start of the received bytes, in order, into :attr:`told` and the errors.  A
        message is its length (8 bytes, little-endian) and its pickle, unpickled in place (no copy of a large value's
        bytes is made); one cut short stays until more comes, or for good (a killed process, one stopped
        mid-message)."""
        buf = self._received
        at = 0
        with memoryview(buf) as view:
            while len(buf) - at >= _FRAME:
                size = int.from_bytes(view[at:at + _FRAME], "little")
                if len(buf) - at - _FRAME < size:
                    break
                key, value, error = pickle.loads(view[at + _FRAME:at + _FRAME + size])
                at += _FRAME + size
                if error is not None:
                    exc, text = error
                    exc.add_note(f"(raised in the process forked {self.what})\n{text}")
                    self._errors.append(exc)
                else:
                    self.told[key] = value
        del buf[:at]

    def finish(self) -> dict[int, object]:
        """Wait for the process to end: :attr:`told`, all of it.

        Raises:
            BaseException: the error ``work`` raised there (the same exception; its traceback as a note).
            ChildProcessError: the process ended without telling why (a signal: killed, out of memory).
        """
        self._receive()
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]
        if self._errors:
            raise self._errors[0]
        if self.status:
            signum = os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None
            raise ChildProcessError(f"the process forked {self.what} ended with status {self.status:#x}"
                                    + (f" (signal {signum})" if signum is not None else ""))
        return self.told

    def stop(self) -> dict[int, object]:
        """Stop the process when it still runs (SIGTERM: there it raises KeyboardInterrupt; SIGKILL when it has not
        ended within :data:`GRACE` seconds), reading what it tells meanwhile (so that it never waits on a full pipe),
        and reap it: :attr:`told` (for the caller to clean up after).  Its error, if any, is dropped."""
        if self._fd is not None:
            os.set_blocking(self._fd, False)
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                deadline = time.monotonic() + GRACE
                while (reaped := os.waitpid(self.pid, os.WNOHANG))[0] == 0:
                    self._receive()
                    if time.monotonic() > deadline:
                        os.kill(self.pid, signal.SIGKILL)
                        reaped = os.waitpid(self.pid, 0)
                        break
                    time.sleep(0.01)
                self.status = reaped[1]
            except (ChildProcessError, ProcessLookupError):  # reaped already (an interrupt in finish)
                self.status = -1
        self._receive()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return self.told


def _child_main(work: Callable[[Tell], object], fd: int) -> NoReturn:
    """The forked process of :class:`Forked`: run ``work(tell)``, telling the parent through the pipe ``fd``; end
    with ``os._exit`` (status 0 when ``work`` returned), never returning into the caller's stack nor running its exit
    handlers.  SIGTERM and Ctrl-C raise KeyboardInterrupt here (the parent held both while forking: they are let
    through here), so that ``work`` cleans up as it does on an error."""
    status = 1
    try:
        signal.signal(signal.SIGTERM, raise_interrupt)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        with os.fdopen(fd, "wb") as report:

            def send(message: tuple[object, object, object]) -> None:
                data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
                report.write(len(data).to_bytes(_FRAME, "little"))
                report.write(data)
                report.flush()

            def tell(key: int, value: object) -> None:
                send((key, value, None))

            try:
                work(tell)
                status = 0
            except BaseException as exc:
                send((None, None, (picklable(exc), traceback.format_exc())))
    finally:
        os._exit(status)


def picklable(exc: BaseException) -> BaseException:
    """``exc`` when it survives pickling (an OSError naming its file, KeyboardInterrupt), else a RuntimeError naming
    its type and message."""
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return back if isinstance(back, BaseException) else RuntimeError(f"{type(exc).__name__}: {exc}")
