"""RecorderService.capture_stack: the caller's frames with their current line numbers, innermost first, cached
by code position (issue 18), without the recorder's own frames."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from msprobe_cmp.recorder.config import load_config
from msprobe_cmp.recorder.service import RecorderService


def _service(tmp_path: Path) -> RecorderService:
    return RecorderService(load_config(dump_path=str(tmp_path), level="mix"), framework="pytorch", rank=None,
                           convert=lambda value: None)


def _line_of(marker: str) -> int:
    lines, start = inspect.getsourcelines(sys.modules[__name__])
    return next(i for i, text in enumerate(lines, start=start or 1) if text.rstrip().endswith(marker))


def _two_calls(svc: RecorderService) -> list[tuple[str, ...]]:
    out = [svc.capture_stack()]  # first call
    out.append(svc.capture_stack())  # second call
    return out


def _same_line_twice(svc: RecorderService) -> tuple[Any, ...]:
    return (svc.capture_stack(), svc.capture_stack())  # both on this line


def test_lines_follow_the_caller_and_repeat_from_the_cache(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    runs = []
    for _ in range(2):
        runs.append(_two_calls(svc))  # the same call positions twice
    first, second = runs[0]
    me = Path(__file__).as_posix()
    assert first[0] == (f"File {me}, line {_line_of('# first call')}, in _two_calls, \n "
                        "out = [svc.capture_stack()]  # first call")
    assert second[0] == (f"File {me}, line {_line_of('# second call')}, in _two_calls, \n "
                         "out.append(svc.capture_stack())  # second call")
    # The outer frames (this test, pytest) are the same for both calls and name this function's call line.
    assert first[1:] == second[1:]
    assert first[1].startswith(f"File {me}, line ") and ", in test_lines_follow_the_caller" in first[1]
    assert first[1].endswith("runs.append(_two_calls(svc))  # the same call positions twice")
    # A repeated call position gives the same lines again (from the cache: the very same tuple).
    assert runs[1] == runs[0] and runs[1][0] is first
    # Two instruction offsets on one line: two cache keys, one text.
    a, b = _same_line_twice(svc)
    assert a == b and a[0].endswith("return (svc.capture_stack(), svc.capture_stack())  # both on this line")
    assert not [f for f in first if "msprobe_cmp/recorder" in f]
    # The whole stack, as the frames themselves give it.
    frames = []
    frame: Any = sys._getframe(0)
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_code.co_name))
        frame = frame.f_back
    assert [(f.split(", line ")[0][len("File "):], f.split(", in ")[1].split(", \n")[0]) for f in first[1:]] == frames
