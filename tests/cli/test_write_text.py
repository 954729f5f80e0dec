"""The CLI's text-report writer (``cli._write_text``): the bytes of the pieces in order, written by a thread of its
own while the next pieces are made; a write that fails and a piece that cannot be made are raised in the caller,
the thread ended either way."""

from __future__ import annotations

import io
import threading

import pytest

from msprobe_cmp import cli

WRITER = "msprobe-cmp report writer"


def _writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WRITER]


def test_the_pieces_are_written_in_order_as_utf8_with_lone_surrogates_escaped():
    pieces = [f"piece {k} é," for k in range(50)] + ["\ud800 end"]
    buf = io.BytesIO()
    cli._write_text(buf, iter(pieces))
    assert buf.getvalue() == "".join(pieces[:-1]).encode("utf-8") + b"\\ud800 end"
    assert _writers() == []


class _FullAfter(io.BytesIO):
    """A file that takes ``ok`` writes, then refuses every one as a full disk does."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok
        self.calls = 0

    def write(self, data):  # type: ignore[override]
        self.calls += 1
        if self.calls > self.ok:
            raise OSError(28, "No space left on device")
        return super().write(data)


def test_a_write_that_fails_is_raised_and_stops_the_pieces():
    made = []

    def pieces():
        for k in range(1000):
            made.append(k)
            yield f"{k},"

    fh = _FullAfter(3)
    with pytest.raises(OSError) as raised:
        cli._write_text(fh, pieces())
    assert raised.value.errno == 28
    assert fh.getvalue() == b"0,1,2,"
    assert fh.calls == 4  # nothing written after the failure
    assert len(made) < 1000  # no more pieces made once the failure is seen
    assert _writers() == []


def test_an_interrupt_while_making_the_pieces_is_raised_once_the_writer_ended():
    def pieces():
        yield "first,"
        yield "second,"
        raise KeyboardInterrupt

    buf = io.BytesIO()
    with pytest.raises(KeyboardInterrupt):
        cli._write_text(buf, pieces())
    assert buf.getvalue() == b"first,second,"  # what was made is written before the interrupt goes on
    assert _writers() == []
