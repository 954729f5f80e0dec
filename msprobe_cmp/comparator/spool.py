"""Unit rows kept on disk while a comparison of many units is summed up and reported.

A comparison of many (step, rank) units through workers (``--jobs``, ``--scheduler``) would otherwise hold every
unit's :class:`~msprobe_cmp.comparator.rowtable.RowTable` in the parent at once: about 400 bytes a row, 0.8 GB for
64 ranks of 10k entries.  With :attr:`~msprobe_cmp.comparator.compare.CompareOptions.spool` set, the parent writes
each unit's table to a file of that directory as the unit comes back from its worker, and the unit keeps a
:class:`SpooledRows` in its place: the same reading interface, loaded from the file when read, with the last
:data:`CACHED_UNITS` tables loaded kept in memory.  The summing-up and the reports read the units one after the
other, so the parent's memory stays bounded by a few units, whatever their number.

The files are this process's own (written here, read here, removed with the directory by the caller) and hold the
table pickled, as it came from the worker.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from msprobe_cmp.comparator.rowtable import ComparisonRow, RowTable

#: How many loaded tables stay in memory (the ones read last): the summing-up and each report read one unit at a
#: time, sometimes going back to the previous one.
CACHED_UNITS = 2

#: (file, id of the rewrites) → (the rewrites, the table): the rewrites are held so that their id is not reused
_loaded: OrderedDict[tuple[str, int], tuple[tuple[Callable[[str], str], ...], RowTable]] = OrderedDict()


def spool_rows(table: RowTable, directory: Path, name: str) -> SpooledRows:
    """Write ``table`` to ``directory/name`` (atomically: a temporary file renamed) and return its stand-in.

    Raises:
        OSError: the file cannot be written (a full disk, a directory that is not writable).
    """
    path = directory / name
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(table, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return SpooledRows(path, len(table))


class SpooledRows(Sequence[ComparisonRow]):
    """A unit's :class:`~msprobe_cmp.comparator.rowtable.RowTable` in a file (:func:`spool_rows`): reads as the
    table does (every attribute and method of the table, indexing, iteration, ``len``, equality), loading it when
    read.

    Attributes:
        path: the file.
        size: the number of rows.
        rewrites: text rewrites to apply to the loaded table, in order (:meth:`with_texts`).
    """

    __slots__ = ("path", "rewrites", "size")

    def __init__(self, path: Path, size: int, rewrites: tuple[Callable[[str], str], ...] = ()) -> None:
        self.path = path
        self.size = size
        self.rewrites = rewrites

    def load(self) -> RowTable:
        """The table, from the cache of the last :data:`CACHED_UNITS` tables read, or from the file.

        Raises:
            OSError: the file is gone (its directory was removed while the comparison was still read).
        """
        key = (str(self.path), id(self.rewrites))
        cached = _loaded.get(key)
        if cached is not None:
            _loaded.move_to_end(key)
            return cached[1]
        with open(self.path, "rb") as fh:
            table = pickle.load(fh)  # this process's own file (module docstring)
        for rewrite in self.rewrites:
            table = table.with_texts(rewrite)
        _loaded[key] = (self.rewrites, table)
        while len(_loaded) > CACHED_UNITS:
            _loaded.popitem(last=False)
        return table

    def with_texts(self, rewrite: Callable[[str], str]) -> SpooledRows:
        """:meth:`RowTable.with_texts <msprobe_cmp.comparator.rowtable.RowTable.with_texts>`, applied when the
        table is loaded (the file is not rewritten)."""
        return SpooledRows(self.path, self.size, (*self.rewrites, rewrite))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # pickle, copy: not the table's
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: Any) -> Any:
        return self.load()[i]

    def __iter__(self) -> Iterator[ComparisonRow]:
        return iter(self.load())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpooledRows):
            other = other.load()
        if not isinstance(other, RowTable):
            return NotImplemented
        return self.load() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpooledRows({str(self.path)!r}, {self.size} rows)"
