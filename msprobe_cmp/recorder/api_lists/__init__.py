"""Which APIs of each family the recorder wraps: data files, one API name per line.

Files: ``<framework>_<family>.txt``; ``#`` starts a comment.  Adapters intersect each list with
what the installed framework actually has.
"""

from __future__ import annotations

from importlib import resources


def load_api_names(file_name: str) -> tuple[str, ...]:
    """The API names listed in ``api_lists/<file_name>``, in file order, without duplicates.

    Raises:
        FileNotFoundError: when the list does not exist (a packaging bug, not a user error).
    """
    text = resources.files(__name__).joinpath(file_name).read_text(encoding="utf-8")
    names: dict[str, None] = {}
    for line in text.splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names[name] = None
    return tuple(names)
