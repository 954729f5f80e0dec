"""User-facing errors of msprobe-cmp.

Every error a user can cause (a malformed dump, a bad option, a missing framework)
is a :class:`MsprobeCmpError`.  Its message is one line that names the file and the
field at fault, so the CLI can print it as is and exit with code 2.  Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class MsprobeCmpError(Exception):
    """Base class of the errors a user can cause; ``str(err)`` is one line."""

    def __init__(self, message: str) -> None:
        # Keep the message on one line whatever the caller passed in.
        super().__init__(" ".join(str(message).split()))


class DumpFormatError(MsprobeCmpError):
    """A dump file (dump.json, stack.json, construct.json, a tensor file) is malformed.

    Args:
        path: the file at fault.
        field: the JSON path of the field at fault (``data["Cell.fc1.Dense.forward.0"].output[0].shape``),
            or ``None`` when the whole file is at fault.
        problem: what is wrong, in a few words.
    """

    def __init__(self, path: str | Path, field: str | None, problem: str) -> None:
        where = f"{path}" if field is None else f"{path}: {field}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.field = field
        self.problem = problem

    def __reduce__(self) -> tuple[type[DumpFormatError], tuple[str, str | None, str]]:
        # pickled as its arguments: a worker process (--jobs) sends the error back to the parent this way
        return (DumpFormatError, (self.path, self.field, self.problem))


class ConfigError(MsprobeCmpError):
    """A configuration file or option is invalid (names the file or option and the field)."""


class MissingFrameworkError(MsprobeCmpError):
    """A framework (mindspore, torch) that an operation needs is not installed."""

    def __init__(self, package: str, extra: str | None = None) -> None:
        hint = f"pip install 'msprobe-cmp[{extra or package}]'"
        super().__init__(f"{package} is not installed; install it with: {hint}")
        self.package = package
        self.extra = extra
