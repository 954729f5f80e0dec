"""Recording configuration: msprobe's ``config.json`` keys, validated into a frozen :class:`RecordConfig`.

The file format is msprobe's (common keys, then one sub-dict per task)::

    {"task": "statistics", "dump_path": "./dump", "rank": [], "step": [0, "2-4"], "level": "mix",
     "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}

Keyword overrides (``PrecisionDebugger(dump_path=..., task=..., level=..., step=...)``) win over the
file.  Every problem raises :class:`~msprobe_cmp.errors.ConfigError` with one line naming the file
(or ``"arguments"``) and the field.  Pure Python: no framework import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import read_json
from msprobe_cmp.errors import ConfigError, DumpFormatError

#: Tasks the recorder implements.
SUPPORTED_TASKS = ("statistics", "tensor", "structure")
#: Tasks msprobe knows but this recorder does not implement (rejected with a clear message).
KNOWN_TASKS = ("statistics", "tensor", "overflow_check", "free_benchmark", "run_ut", "grad_probe", "structure")
#: Levels the recorder implements.
SUPPORTED_LEVELS = ("L0", "L1", "mix", "debug")
KNOWN_LEVELS = ("L0", "L1", "L2", "mix", "debug")
DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
#: The regex form of a ``list`` member (msprobe 26.x): ``name-regex(<Python regular expression>)``.
REGEX_PREFIX = "name-regex("
#: msprobe's bound on step and rank numbers.
MAX_STEP_OR_RANK = 1_000_000

_COMMON_KEYS = frozenset({"task", "dump_path", "rank", "step", "level", "enable_dataloader", "async_dump", "framework"})
_TASK_KEYS = frozenset({"scope", "list", "data_mode", "summary_mode", "file_format"})


@dataclass(frozen=True)
class RecordConfig:
    """What to record, where, and when.

    Attributes:
        dump_path: root directory of the dump; ``step<N>/rank[<R>]/`` directories are made below it.
        task: ``"statistics"`` (Max/Min/Mean/Norm per tensor) or ``"tensor"`` (statistics plus one
            ``.npy`` file per tensor).
        level: ``"L0"`` (cells), ``"L1"`` (APIs and, with a model, its Primitives) or ``"mix"`` (both).
        steps: the steps to record (sorted, unique); empty = every step.
        ranks: the ranks to record (sorted, unique); empty = every rank.
        scope: msprobe's ``scope``: two full entry names ``(start, end)`` (API or cell names, forward
            or backward spelling; both stand for the forward call).  Recording covers the forward
            calls from ``start``'s call to the end of ``end``'s call, in execution order, in each step,
            and the backward of exactly those calls.  Empty = no range.
        name_list: msprobe's ``list``.  A plain member matches an entry name when its dot-separated
            parts appear as consecutive whole parts of the name (``relu`` matches
            ``Functional.relu.0.forward`` but not ``Functional.leaky_relu.0.forward``;
            ``Cell.head`` matches ``Cell.head.Dense.forward.0``).  ``name-regex(<re>)`` matches when
            the Python regular expression is found anywhere in the name (``re.search``).  A member
            matching a cell name also selects everything recorded inside that cell.
        data_mode: subset of ``forward``/``backward``/``input``/``output``, or ``("all",)``.
        summary_mode: ``"statistics"``, or ``"md5"`` (adds msprobe's CRC32 checksum, in its ``md5`` field).
        async_dump: keep each tensor's summary on the device during the step and fetch them all at
            ``stop()`` / ``step()`` (no per-tensor device→host copy while the step runs).  With the
            tensor task the tensors themselves are held as device copies until then, so a non-empty
            ``list`` is required (msprobe's rule).
        source: where the values came from (a file path or ``"arguments"``), for messages.
    """

    dump_path: Path
    task: str = "statistics"
    level: str = "L1"
    steps: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()
    scope: tuple[str, ...] = ()
    name_list: tuple[str, ...] = ()
    data_mode: tuple[str, ...] = ("all",)
    summary_mode: str = "statistics"
    async_dump: bool = False
    source: str = "arguments"

    def records_step(self, step: int) -> bool:
        """True when ``step`` is selected (an empty step list selects every step)."""
        return not self.steps or step in self.steps

    def past_last_step(self, step: int) -> bool:
        """True when a step list is given and ``step`` is beyond its largest member."""
        return bool(self.steps) and step > self.steps[-1]

    def records_rank(self, rank: int | None) -> bool:
        """True when ``rank`` is selected (an empty list, or a non-distributed run, selects it)."""
        return not self.ranks or rank is None or rank in self.ranks

    def records_direction(self, direction: str) -> bool:
        """True when ``data_mode`` lets entries of ``direction`` (``"forward"``/``"backward"``) be recorded."""
        modes = set(self.data_mode)
        if "all" in modes or not modes & {"forward", "backward"}:
            return True
        return direction in modes

    def records_io(self, io: str) -> bool:
        """True when ``data_mode`` lets ``io`` (``"input"``/``"output"``) be recorded."""
        modes = set(self.data_mode)
        if "all" in modes or not modes & {"input", "output"}:
            return True
        return io in modes

    def records_name(self, name: str) -> bool:
        """True when the ``list`` filter is empty or one of its members matches ``name`` (see ``name_list``)."""
        if not self.name_list:
            return True
        parts = name.split(".")
        return any(list_member_matches(member, name, parts) for member in self.name_list)

    @property
    def scope_bounds(self) -> tuple[str, str] | None:
        """``scope`` as the two forward entry names ``(start, end)``, or None without a scope."""
        if not self.scope:
            return None
        first, last = (_forward_twin(n) for n in self.scope)
        return first, last

    @property
    def saves_tensors(self) -> bool:
        """True for the tensor task (one ``.npy`` per tensor)."""
        return self.task == "tensor"


def list_member_matches(member: str, name: str, parts: Sequence[str] | None = None) -> bool:
    """Whether one ``list`` member selects entry ``name`` (see :attr:`RecordConfig.name_list`).

    Args:
        member: a plain name fragment, or ``name-regex(<re>)``.
        name: a full entry name.
        parts: ``name.split(".")`` when the caller has it already.
    """
    if member.startswith(REGEX_PREFIX) and member.endswith(")"):
        return re.search(member[len(REGEX_PREFIX) : -1], name) is not None
    want = member.split(".")
    have = name.split(".") if parts is None else parts
    n = len(want)
    return any(list(have[i : i + n]) == want for i in range(len(have) - n + 1))


def _forward_twin(name: str) -> str:
    parsed = parse_name(name)
    if parsed.direction != "backward" or parsed.index is None:
        return name
    if parsed.kind == "cell":
        return f"{parsed.stem}.forward.{parsed.index}"
    return f"{parsed.stem}.{parsed.index}.forward"


def _fail(source: str, field: str, problem: str) -> ConfigError:
    return ConfigError(f"{source}: {field}: {problem}")


def _expect_int(value: Any, source: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, field, f"expected an integer, got {value!r}")
    if not 0 <= value <= MAX_STEP_OR_RANK:
        raise _fail(source, field, f"{value} is outside [0, {MAX_STEP_OR_RANK}]")
    return value


def parse_int_list(value: Any, source: str, field: str) -> tuple[int, ...]:
    """Parse msprobe's step/rank list: integers and ``"a-b"`` range strings (inclusive), or one integer.

    Returns the members sorted and de-duplicated.

    Raises:
        ConfigError: on anything else, a reversed range, or a number outside [0, 1e6].
    """
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (_expect_int(value, source, field),)
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise _fail(source, field, f"expected a list of integers or 'a-b' ranges, got {value!r}")
    out: set[int] = set()
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if isinstance(item, str):
            parts = [p.strip() for p in item.split("-")]
            # ASCII digits only ("²".isdigit() is True), and short enough for int() (steps are < 1e6).
            if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
                raise _fail(source, where, f"{item!r} is not an integer or an 'a-b' range")
            lo, hi = (_expect_int(int(p), source, where) for p in parts)
            if lo > hi:
                raise _fail(source, where, f"range {item!r} has start > end")
            out.update(range(lo, hi + 1))
        else:
            out.add(_expect_int(item, source, where))
    return tuple(sorted(out))


def _str_list(value: Any, source: str, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise _fail(source, field, f"expected a list of strings, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _fail(source, f"{field}[{i}]", f"expected a non-empty string, got {item!r}")
    return tuple(value)


def _choice(value: Any, choices: Sequence[str], source: str, field: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(source, field, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _parse_data_mode(value: Any, source: str, field: str) -> tuple[str, ...]:
    modes = _str_list(value, source, field) or ("all",)
    for i, mode in enumerate(modes):
        _choice(mode, DATA_MODES, source, f"{field}[{i}]")
    if "all" in modes and len(modes) > 1:
        raise _fail(source, field, "'all' must be the only member")
    if len(set(modes)) != len(modes):
        raise _fail(source, field, "duplicate members")
    return modes


def _parse_scope(value: Any, source: str, field: str) -> tuple[str, ...]:
    scope = _str_list(value, source, field)
    if not scope:
        return ()
    if len(scope) != 2:
        raise _fail(source, field, "expected exactly two entry names [start, end]")
    for i, name in enumerate(scope):
        parsed = parse_name(name)
        if parsed.kind not in ("api", "cell") or parsed.direction is None or parsed.index is None:
            raise _fail(
                source,
                f"{field}[{i}]",
                f"{name!r} is not a full API or cell entry name "
                "(e.g. 'Functional.relu.0.forward', 'Cell.fc1.Dense.forward.0')",
            )
    return scope


def _parse_list(value: Any, source: str, field: str) -> tuple[str, ...]:
    members = _str_list(value, source, field)
    for i, member in enumerate(members):
        if member.startswith(REGEX_PREFIX):
            if not member.endswith(")") or len(member) == len(REGEX_PREFIX) + 1:
                raise _fail(source, f"{field}[{i}]", f"expected 'name-regex(<pattern>)', got {member!r}")
            try:
                re.compile(member[len(REGEX_PREFIX) : -1])
            except re.error as exc:
                raise _fail(source, f"{field}[{i}]", f"invalid regular expression: {exc}") from None
    return members


def build_config(
    raw: Mapping[str, Any] | None = None,
    *,
    source: str = "arguments",
    dump_path: str | Path | None = None,
    task: str | None = None,
    level: str | None = None,
    step: Any = None,
    rank: Any = None,
) -> RecordConfig:
    """Validate msprobe config keys (``raw``) plus keyword overrides into a :class:`RecordConfig`.

    Args:
        raw: the parsed config.json object, or None for keyword arguments only.
        source: the file name used in error messages.
        dump_path, task, level, step, rank: overrides; None keeps the file's value.

    Raises:
        ConfigError: one line naming ``source`` and the field, for an unknown key, a wrong type, an
            unsupported task or level, a bad step/rank list, or a missing ``dump_path``.
    """
    raw = dict(raw or {})
    for key in raw:
        if key not in _COMMON_KEYS and key not in KNOWN_TASKS:
            raise _fail(source, key, "unknown key")
    # Overrides are checked against "arguments" so the message names where the bad value came from.
    task_src = source if task is None else "arguments"
    task_value = raw.get("task", "statistics") if task is None else task
    _choice(task_value, KNOWN_TASKS, task_src, "task")
    if task_value not in SUPPORTED_TASKS:
        raise _fail(
            task_src, "task", f"{task_value!r} is not supported by this recorder (use statistics, tensor or structure)"
        )

    level_src = source if level is None else "arguments"
    level_value = raw.get("level", "L1") if level is None else level
    _choice(level_value, KNOWN_LEVELS, level_src, "level")
    if level_value not in SUPPORTED_LEVELS:
        raise _fail(level_src, "level", f"{level_value!r} is not supported by this recorder (use L0, L1, mix or debug)")

    path_src = source if dump_path is None else "arguments"
    path_value = raw.get("dump_path") if dump_path is None else dump_path
    if path_value is None or (isinstance(path_value, str) and not path_value.strip()):
        raise _fail(path_src, "dump_path", "is required")
    if not isinstance(path_value, (str, Path)):
        raise _fail(path_src, "dump_path", f"expected a path string, got {path_value!r}")
    # the nearest part of the path that exists must be a directory: a file there fails every write of the run
    existing = Path(path_value).expanduser().absolute()
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if os.path.exists(existing) and not os.path.isdir(existing):
        raise _fail(path_src, "dump_path", f"{existing} is a file, not a directory")

    steps = (
        parse_int_list(raw.get("step"), source, "step") if step is None else parse_int_list(step, "arguments", "step")
    )
    ranks = (
        parse_int_list(raw.get("rank"), source, "rank") if rank is None else parse_int_list(rank, "arguments", "rank")
    )
    for key in ("enable_dataloader", "async_dump"):
        if key in raw and not isinstance(raw[key], bool):
            raise _fail(source, key, f"expected true or false, got {raw[key]!r}")

    sub = raw.get(task_value, {})
    if not isinstance(sub, Mapping):
        raise _fail(source, task_value, f"expected an object, got {sub!r}")
    for key in sub:
        if key not in _TASK_KEYS:
            raise _fail(source, f"{task_value}.{key}", "unknown key")
    scope = _parse_scope(sub.get("scope"), source, f"{task_value}.scope")
    name_list = _parse_list(sub.get("list"), source, f"{task_value}.list")
    data_mode = _parse_data_mode(sub.get("data_mode"), source, f"{task_value}.data_mode")
    summary_mode = _choice(sub.get("summary_mode", "statistics"), SUMMARY_MODES, source, f"{task_value}.summary_mode")
    if raw.get("async_dump") and task_value == "tensor" and not name_list:
        raise _fail(
            source,
            f"{task_value}.list",
            "async_dump with the tensor task needs a non-empty list (every tensor is held in device memory "
            "until stop()/step())",
        )
    if "file_format" in sub:
        _choice(sub["file_format"], ("npy", "bin"), source, f"{task_value}.file_format")
    if task_value == "structure" and level_value not in ("L0", "mix"):
        level_value = "mix"  # msprobe's rule: the structure task records at mix unless L0/mix is asked
    return RecordConfig(
        dump_path=Path(path_value).expanduser().absolute(),
        task=task_value,
        level=level_value,
        steps=steps,
        ranks=ranks,
        scope=scope,
        name_list=name_list,
        data_mode=data_mode,
        summary_mode=summary_mode,
        async_dump=bool(raw.get("async_dump", False)),
        source=source,
    )


def load_config(
    config_path: str | Path | None = None,
    *,
    dump_path: str | Path | None = None,
    task: str | None = None,
    level: str | None = None,
    step: Any = None,
    rank: Any = None,
) -> RecordConfig:
    """Read an msprobe ``config.json`` (optional) and apply keyword overrides.

    Raises:
        ConfigError: when the file cannot be read or is not a JSON object, or on any invalid field
            (see :func:`build_config`).
    """
    raw: Mapping[str, Any] | None = None
    source = "arguments"
    if config_path is not None:
        source = str(config_path)
        if not Path(config_path).is_file():
            raise ConfigError(f"{source}: not found or not a regular file")
        try:
            # The dump reader's JSON parser: one-line errors, duplicate keys refused, no recursion crash.
            loaded = read_json(Path(config_path))
        except DumpFormatError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: expected a JSON object at the top level")
        raw = loaded
    return build_config(raw, source=source, dump_path=dump_path, task=task, level=level, step=step, rank=rank)
