"""Unit rows kept on disk while a comparison of many units is summed up and reported.

A comparison of many (step, rank) units through workers (``--jobs``, ``--scheduler``) would otherwise hold every
unit's :class:`~msprobe_cmp.comparator.rowtable.RowTable` in the parent at once: about 400 bytes a row, 0.8 GB for
64 ranks of 10k entries.  With :attr:`~msprobe_cmp.comparator.compare.CompareOptions.spool` set, the parent writes
each unit's table and its ``parent_chains`` (entry name -> enclosing cells, ~1 MB for 10k entries) to a file of that
directory as the unit comes back from its worker (:func:`spool_unit`), and the unit keeps stand-ins in their place
(:class:`SpooledRows`, :class:`SpooledChains`): the same reading interface, loaded from the file when read, with the
last :data:`CACHED_UNITS` files read kept in memory.  The summing-up and the reports read the units one after the
other, so the parent's memory stays bounded by a few units, whatever their number.

The files are this process's own (written here, read here, removed with the directory by the caller) and hold the
table and the chains pickled, as they came from the worker.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from msprobe_cmp.comparator.result import UnitComparison
from msprobe_cmp.comparator.rowtable import ComparisonRow, RowTable

#: How many spooled files stay loaded in memory (the ones read last): the summing-up and each report read one unit
#: at a time, sometimes going back to the previous one.
CACHED_UNITS = 2

#: (file, id of the rewrites) → (the rewrites, the table): the rewrites are held so that their id is not reused
_loaded: OrderedDict[tuple[str, int], tuple[tuple[Callable[[str], str], ...], RowTable]] = OrderedDict()
#: file → the unit's parent chains, for the last :data:`CACHED_UNITS` files read
_chains: OrderedDict[str, Mapping[str, tuple[str, ...]]] = OrderedDict()


def _keep(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    while len(cache) > CACHED_UNITS:
        cache.popitem(last=False)


def _read(path: Path) -> tuple[RowTable, Mapping[str, tuple[str, ...]]]:
    """The table and parent chains of a spooled file; the chains are kept in :data:`_chains`.

    Raises:
        OSError: the file is gone (its directory was removed while the comparison was still read).
    """
    with open(path, "rb") as fh:
        table, chains = pickle.load(fh)  # this process's own file (module docstring)
    _keep(_chains, str(path), chains)
    return table, chains


def spool_unit(unit: UnitComparison, directory: Path, name: str) -> UnitComparison:
    """Write ``unit``'s rows and parent chains to ``directory/name`` (atomically: a temporary file renamed) and
    return the unit with their stand-ins (:class:`SpooledRows`, :class:`SpooledChains`) in their place.

    Raises:
        OSError: the file cannot be written (a full disk, a directory that is not writable); a failed write names
            ``directory``.
    """
    path = directory / name
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump((unit.rows, dict(unit.parent_chains)), fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or exc.filename == tmp:  # a full disk: name the directory (the user's $TMPDIR)
            raise OSError(exc.errno, f"{exc.strerror or exc} (keeping the compared units' rows there until the "
                          "reports are written)", str(directory)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return replace(unit, rows=SpooledRows(path, len(unit.rows)),  # type: ignore[arg-type]
                   parent_chains=SpooledChains(path, len(unit.parent_chains)))


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
        table, _ = _read(self.path)
        for rewrite in self.rewrites:
            table = table.with_texts(rewrite)
        _keep(_loaded, key, (self.rewrites, table))
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


class SpooledChains(Mapping[str, tuple[str, ...]]):
    """A unit's ``parent_chains`` (entry name → its enclosing cells, innermost first) in a file (:func:`spool_unit`):
    a read-only mapping loaded when read.

    Attributes:
        path: the file.
        size: the number of entries.
    """

    __slots__ = ("path", "size")

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def load(self) -> Mapping[str, tuple[str, ...]]:
        """The chains, from the cache of the last :data:`CACHED_UNITS` files read, or from the file.

        Raises:
            OSError: the file is gone.
        """
        key = str(self.path)
        cached = _chains.get(key)
        if cached is not None:
            _chains.move_to_end(key)
            return cached
        return _read(self.path)[1]

    def __getitem__(self, entry: str) -> tuple[str, ...]:
        return self.load()[entry]

    def get(self, entry: str, default: Any = None) -> Any:
        """``entry``'s enclosing cells, innermost first, or ``default`` when the unit has no such entry (one dict
        lookup on the loaded chains, not :class:`~collections.abc.Mapping`'s ``__getitem__`` and ``KeyError``)."""
        return self.load().get(entry, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.load())

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"SpooledChains({str(self.path)!r}, {self.size} entries)"
