"""A :class:`~msprobe_cmp.comparator.result.Comparison` saved to one file and loaded back, so its reports can be
rendered again without the dumps (``msprobe-cmp render``).

The file, :data:`SAVED_FILE` (``comparison-data.npz``), is a zip archive of ``.npy`` arrays that ``numpy.load``
reads with ``allow_pickle=False`` (nothing in it is pickled; members stored uncompressed, like ``numpy.savez``):

========================================  ==========================================================================
member                                    content
========================================  ==========================================================================
``header``                                uint8: UTF-8 JSON text, everything but the rows (below)
``u<i>.<column>``                         unit ``i``'s :class:`~msprobe_cmp.comparator.rowtable.RowTable` column, as
                                          held in memory (every name of ``RowTable.COLUMNS``)
``u<i>.strings.*``                        the table's string table (a *text list*, below)
``u<i>.tuples.*``, ``u<i>.stacks.*``      its reason/note tuples and call stacks (a *tuple list*, below)
``u<i>.shapes.dims``, ``.lengths``        its shapes: every dimension (int64) and the length of each shape (int64)
``u<i>.shapes.wide.at``, ``.values.*``    only when a dimension does not fit int64 (an empty ``[0, 2**64]``): its
                                          positions in ``dims`` (int64; 0 there) and its decimal text (a text list)
``u<i>.chains.keys.*``                    the unit's ``parent_chains`` keys (a text list) ...
``u<i>.chains.values.*``                  ... and their chains (a tuple list), in the mapping's order
========================================  ==========================================================================

A *text list* ``<p>`` is ``<p>.utf8`` (uint8: the strings' UTF-8 bytes one after the other; lone surrogates as
``surrogatepass`` writes them) and ``<p>.ends`` (int64: where each string's bytes end).  A *tuple list* ``<p>`` is
``<p>.texts.*`` (a text list of the distinct strings), ``<p>.codes`` (int32: every tuple's items as indices into
it, one tuple after the other) and ``<p>.lengths`` (int64: the number of items of each tuple).  A unit's
``u<i>.tuples`` also has ``.kinds`` and ``.params`` (text lists, one item per distinct text): the text's note code
and its parameters as JSON (:class:`~msprobe_cmp.comparator.notes.Note`), both empty for a plain text (a reason).

The JSON header holds ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), the inputs, mode, verdict,
notes, counts, matched share, the rules (every field), the unpaired units, the first divergent / failing rows, the
likely origin and, per unit, its references, counts, verdict, notes, cell roll-up, jumps and row count.  A float
that is NaN or ±Inf is written as the string ``"nan"``, ``"inf"`` or ``"-inf"``; other numbers as JSON numbers
(shortest round-trip form: exact).  An int beyond 64 bits (a step number ``2**64``) is written by the standard
library's ``json`` (orjson cannot), and the header is always read by the standard library's decoder, which keeps it
exact (orjson would read it as a float).  The archive's members carry a fixed time stamp, so saving the same
comparison twice gives the same bytes.

:func:`load_comparison` returns a Comparison equal field by field to the saved one (RowTable equality; a NaN loads
as a NaN).  It checks what it reads, so a loaded comparison renders like the original; anything wrong is a
one-line :class:`~msprobe_cmp.errors.DumpFormatError` naming the file and the field, never another exception:

* the archive: every member stored (not compressed, not encrypted), no name twice, declared sizes within the file;
  each ``.npy`` header parsed and its declared data size checked against the member's size before the data is read;
* the header: an int ``version`` (not ``true``), no key the writer does not write (top level and every record), no
  duplicate JSON key, no NaN / Infinity literal, numbers within the float range (ints within int64 but for steps
  and ranks), nesting the decoder can follow;
* the rows: column types and shapes, codes within their tables, indices within the units; ``relative_error`` and
  ``noise_floor`` NaN together or both >= 0 (the floor finite); a cell's ``max_noise_ratio`` null or >= 0;
* the header against the rows: each unit's verdict counts, class counts, first failing / divergent row and verdict
  as :func:`compare` derives them from its columns, the overall ones from the units, no ``[name, count]`` twice,
  no cell twice (a parent cycle is kept: a cyclic construct.json gives one, and the compare rendered it);
* the expansion: the texts the rows show (names, values, shapes, reasons, notes: each row's through its codes,
  summed) at most :data:`_EXPANSION_PER_BYTE` characters per byte of the file plus :data:`_EXPANSION_FLOOR` (a
  small forged file whose every row points at one huge tuple would otherwise write reports hundreds of times its
  size; a real row's texts are a few hundred characters).

No framework is imported here.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
import orjson

from msprobe_cmp.comparator.matching import MATCH_CLASSES
from msprobe_cmp.comparator.notes import NOTE_CODES, Note, code_of, restore
from msprobe_cmp.comparator.result import (
    CellRollup,
    Comparison,
    Jump,
    LikelyOrigin,
    RowRef,
    UnitComparison,
    UnitRef,
    unit_summary,
    unit_verdict,
)
from msprobe_cmp.comparator.rowtable import COMPARED_BY, SIDE_KINDS, VERDICTS, RowTable, table_from_columns
from msprobe_cmp.comparator.rules import OriginRules, Rules, ThresholdOverride, Thresholds
from msprobe_cmp.errors import DumpFormatError, MsprobeCmpError

__all__ = ["FORMAT", "SAVED_FILE", "VERSION", "load_comparison", "save_comparison", "saved_file", "saved_members",
           "write_saved"]

#: The saved comparison's file name in an output directory.
SAVED_FILE = "comparison-data.npz"
#: The header's ``format`` value.
FORMAT = "msprobe-cmp.saved-comparison"
#: The header's ``version``: what :func:`save_comparison` writes and the only one :func:`load_comparison` reads.
VERSION = 3

_MODES = ("tensor", "statistics", "md5")
_OVERALL = ("pass", "fail", "nothing_compared", "too_few_matched")
_JUMP_KINDS = ("computed", "entered")
#: The zip members' time stamp (zip's earliest): the same comparison always gives the same bytes.
_STAMP = (1980, 1, 1, 0, 0, 0)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FLOAT_MAX = int(sys.float_info.max)


# ------------------------------------------------------------------------------------------------------------ saving
def save_comparison(comparison: Comparison, directory: Path | str) -> Path:
    """Save ``comparison`` as ``directory / SAVED_FILE`` (module docstring), written atomically (a temporary file
    renamed over it); ``directory`` is created when missing.

    Args:
        comparison: the comparison to save.
        directory: the output directory.

    Returns:
        The path written.

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(directory) / SAVED_FILE
    from msprobe_cmp.dump.writer import write_atomic  # the project's one atomic writer (no framework import)

    write_atomic(path, lambda fh: write_saved(fh, comparison))
    return path


def write_saved(fh: BinaryIO, comparison: Comparison) -> None:
    """Write ``comparison``'s archive (module docstring) into the binary file ``fh``, one unit's members at a time
    (:func:`saved_members`): a comparison of many units spooled on disk
    (:mod:`~msprobe_cmp.comparator.spool`) is never held whole.

    Raises:
        OSError: the file cannot be written.
        OverflowError, ValueError: a value the archive cannot hold (raised before the unit's members are written).
    """
    _write_npz(fh, saved_members(comparison))


def saved_members(comparison: Comparison) -> Iterator[tuple[str, np.ndarray]]:
    """The archive's members (module docstring) as ``(name, array)``, header first, in the order they are written;
    each unit's made when it is reached."""
    header = _header(comparison)
    yield "header", np.frombuffer(_json_bytes(header), dtype=np.uint8)
    for i, unit in enumerate(comparison.units):
        yield from _unit_members(f"u{i}.", unit)


def _unit_members(p: str, unit: UnitComparison) -> Iterator[tuple[str, np.ndarray]]:
    """The members of one unit (prefix ``p``), all made before the first is given."""
    arrays: dict[str, np.ndarray] = {}
    table = unit.rows
    for name, column in table.columns().items():
        arrays[p + name] = column
    _put_texts(arrays, p + "strings", table.strings)
    _put_tuples(arrays, p + "tuples", table.tuples, notes=True)
    _put_tuples(arrays, p + "stacks", table.stacks)
    dims = [int(d) for s in table.shapes for d in s]
    wide = [k for k, d in enumerate(dims) if not _INT64_MIN <= d <= _INT64_MAX]
    wide_values = [str(dims[k]) for k in wide]
    for k in wide:
        dims[k] = 0
    arrays[p + "shapes.dims"] = np.asarray(dims, dtype=np.int64).reshape(-1)
    if wide:  # only then: a file without such dimensions has no such members
        arrays[p + "shapes.wide.at"] = np.asarray(wide, dtype=np.int64)
        _put_texts(arrays, p + "shapes.wide.values", wide_values)
    arrays[p + "shapes.lengths"] = np.fromiter((len(s) for s in table.shapes), dtype=np.int64,
                                               count=len(table.shapes))
    _put_texts(arrays, p + "chains.keys", list(unit.parent_chains))
    _put_tuples(arrays, p + "chains.values", list(unit.parent_chains.values()))
    yield from arrays.items()


def _write_npz(fh: BinaryIO, arrays: Iterable[tuple[str, np.ndarray]]) -> None:
    # Stored, not deflated (what np.savez writes): zlib would add ~5 s to a 100k-entry pair for a file that is a
    # sixth of its reports' size anyway.
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays:
            info = zipfile.ZipInfo(name + ".npy", date_time=_STAMP)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _put_texts(arrays: dict[str, np.ndarray], prefix: str, texts: Sequence[str]) -> None:
    blob = _encoded("".join(texts))
    sizes: Any = map(len, texts)
    if len(blob) != sum(map(len, texts)):  # not all ASCII: each string's own byte count
        sizes = (len(_encoded(t)) for t in texts)
    arrays[prefix + ".utf8"] = np.frombuffer(blob, dtype=np.uint8)
    arrays[prefix + ".ends"] = np.cumsum(np.fromiter(sizes, dtype=np.int64, count=len(texts)), dtype=np.int64)


def _put_tuples(arrays: dict[str, np.ndarray], prefix: str, tuples: Sequence[Sequence[str]],
                notes: bool = False) -> None:
    table: dict[str, int] = {}
    codes = [table.setdefault(s, len(table)) for t in tuples for s in t]
    texts = list(table)
    _put_texts(arrays, prefix + ".texts", texts)
    if notes:  # each distinct text's note code and parameters ("" for a plain text: a reason)
        _put_texts(arrays, prefix + ".kinds", [code_of(t) or "" for t in texts])
        _put_texts(arrays, prefix + ".params", [t.params_json() if isinstance(t, Note) else "" for t in texts])
    arrays[prefix + ".codes"] = np.asarray(codes, dtype=np.int32)
    arrays[prefix + ".lengths"] = np.fromiter(map(len, tuples), dtype=np.int64, count=len(tuples))


def _json_bytes(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except (orjson.JSONEncodeError, TypeError):  # a lone surrogate in a name: the standard library escapes it
        return json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _num(x: float | int | None) -> float | int | str | None:
    """A number for the header: ints stay ints, a non-finite float is a string."""
    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _int(x: int | None) -> int | None:
    return None if x is None else int(x)


def _pairs(items: Sequence[tuple[str, int]]) -> list[list[Any]]:
    return [[str(k), int(n)] for k, n in items]


def _dataclass_numbers(obj: Any) -> dict[str, Any]:
    return {f.name: _num(getattr(obj, f.name)) for f in fields(obj)}


def _rules(rules: Rules) -> dict[str, Any]:
    return {
        "default": _dataclass_numbers(rules.default),
        "overrides": [{"thresholds": _dataclass_numbers(o.thresholds), "pattern": o.pattern, "dtype": o.dtype}
                      for o in rules.overrides],
        "min_matched_share": _num(rules.min_matched_share),
        "noise_factor": _num(rules.noise_factor),
        "argument_differs": rules.argument_differs,
        "localisation": _dataclass_numbers(rules.localisation),
    }


def _unit_ref(ref: UnitRef) -> dict[str, Any]:
    return {"side": ref.side, "step": _int(ref.step), "rank": _int(ref.rank), "label": ref.label,
            "directory": ref.directory}


def _row_ref(ref: RowRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"unit": int(ref.unit), "row": int(ref.row), "name": ref.name, "unit_label": ref.unit_label,
            "parent_cell": ref.parent_cell, "parents": list(ref.parents)}


def _jump(jump: Jump) -> dict[str, Any]:
    return {"row": int(jump.row), "kind": jump.kind, "error_in": _num(jump.error_in),
            "error_out": _num(jump.error_out), "floor": _num(jump.floor)}


def _cell(c: CellRollup) -> dict[str, Any]:
    return {"cell": c.cell, "parent": c.parent, "depth": int(c.depth), "rows": int(c.rows), "failing": int(c.failing),
            "differing": int(c.differing), "min_cosine": _num(c.min_cosine), "max_abs_err": _num(c.max_abs_err),
            "worst_verdict": c.worst_verdict, "first_divergent": _int(c.first_divergent),
            "max_noise_ratio": _num(c.max_noise_ratio)}


def _unit(u: UnitComparison) -> dict[str, Any]:
    return {
        "unit_a": _unit_ref(u.unit_a), "unit_b": _unit_ref(u.unit_b), "rows": len(u.rows),
        "counts": _pairs(u.counts), "verdict_counts": _pairs(u.verdict_counts),
        "first_divergent": _int(u.first_divergent), "first_failing": _int(u.first_failing), "verdict": u.verdict,
        "notes": list(u.notes), "cells": [_cell(c) for c in u.cells], "jumps": [_jump(j) for j in u.jumps],
    }


def _origin(o: LikelyOrigin | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {"ref": _row_ref(o.ref), "jump": _jump(o.jump), "cell": o.cell, "arguments": list(o.arguments),
            "unpaired": list(o.unpaired)}


def _header(c: Comparison) -> dict[str, Any]:
    return {
        "format": FORMAT, "version": VERSION,
        "input_a": c.input_a, "input_b": c.input_b, "input_noise": c.input_noise, "mode": c.mode,
        "rules": _rules(c.rules),
        "units": [_unit(u) for u in c.units],
        "unpaired": [_unit_ref(r) for r in c.unpaired],
        "counts": _pairs(c.counts), "verdict_counts": _pairs(c.verdict_counts),
        "first_divergent": _row_ref(c.first_divergent), "first_failing": _row_ref(c.first_failing),
        "verdict": c.verdict, "notes": list(c.notes),
        "matched_share": _num(c.matched_share), "matched_share_of": c.matched_share_of,
        "likely_origin": _origin(c.likely_origin),
    }


# ----------------------------------------------------------------------------------------------------------- loading
class _Bad(Exception):
    """A problem at a field of the file (turned into a DumpFormatError naming the file)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(problem)
        self.where = where
        self.problem = problem


def load_comparison(path: Path | str) -> Comparison:
    """Load a comparison saved by :func:`save_comparison`.

    Args:
        path: the saved file (:data:`SAVED_FILE`), or the directory holding it.

    Returns:
        A :class:`Comparison` equal field by field to the one saved.

    Raises:
        DumpFormatError: the file is missing, unreadable, not a saved comparison, of another :data:`VERSION`, or a
            field of it is missing or malformed (the message names the file and the field).
    """
    path = saved_file(path)
    if not path.exists():
        raise DumpFormatError(path, None, "does not exist (a saved comparison is written by msprobe-cmp TARGET "
                                          "BASELINE into its output directory)")
    if not path.is_file():
        raise DumpFormatError(path, None, "not a regular file")
    try:
        with open(path, "rb") as fh:
            return _load(_Archive(fh, os.fstat(fh.fileno()).st_size))
    except OSError as exc:
        raise DumpFormatError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    except _Bad as bad:
        raise DumpFormatError(path, bad.where or None, bad.problem) from None
    except MsprobeCmpError as exc:  # the rules' own checks (a threshold out of range)
        raise DumpFormatError(path, "rules", str(exc)) from None


class _Archive:
    """The members of the archive, read on demand (each checked against its CRC).

    Before anything is read the zip directory is checked: every member stored (not compressed, not encrypted), its
    declared size within the file, no name twice.  Each ``.npy`` member's declared shape is checked against the
    member's size before its data is read, so a forged header cannot make the loader allocate more than the file
    holds.
    """

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.size = size
        try:
            self.zf = zipfile.ZipFile(fh)
            infos = self.zf.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError,
                OverflowError) as exc:
            raise _Bad("", f"not a readable saved comparison: truncated or not an npz archive ({exc})") from None
        total = 0
        seen: set[str] = set()
        for info in infos:
            name = info.filename
            if info.compress_type != zipfile.ZIP_STORED:
                raise _Bad(_member_field(name), f"compressed (method {info.compress_type}): a saved comparison "
                                                "stores its members uncompressed")
            if info.flag_bits & 0x1:
                raise _Bad(_member_field(name), "encrypted: a saved comparison is never encrypted")
            if name in seen:
                raise _Bad(_member_field(name), "twice in the archive")
            seen.add(name)
            total += info.file_size
            if info.file_size != info.compress_size or info.header_offset + info.file_size > size or total > size:
                raise _Bad(_member_field(name), f"declares {info.file_size} bytes, more than the file's {size}")
        self.names = seen

    def array(self, name: str) -> np.ndarray:
        member = name + ".npy"
        if member not in self.names:
            raise _Bad(name, "missing from the archive (the file is truncated or not a saved comparison)")
        try:
            with self.zf.open(member) as fh:
                arr = _read_npy(fh, self.zf.getinfo(member).file_size)
                if fh.read(1):  # also reaches the member's end, where its CRC is checked
                    raise ValueError("data after the array")
            return arr
        except _Bad as bad:
            raise _Bad(name, bad.problem) from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, NotImplementedError, RuntimeError,
                SyntaxError, TypeError, OverflowError, tokenize.TokenError) as exc:
            raise _Bad(name, f"unreadable ({type(exc).__name__}: {exc})") from None

    def texts(self, prefix: str) -> list[str]:
        blob = self.typed(prefix + ".utf8", np.uint8, 1).tobytes()
        end_array = self.typed(prefix + ".ends", np.int64, 1)
        if (np.diff(end_array, prepend=0) < 0).any() or (int(end_array[-1]) if end_array.size else 0) != len(blob):
            raise _Bad(prefix + ".ends", "offsets out of order or not covering the text")
        ends = end_array.tolist()
        starts = [0, *ends[:-1]] if ends else []
        try:
            whole = blob.decode("utf-8", "surrogatepass")
            if len(whole) == len(blob):  # ASCII: byte offsets are character offsets
                return [whole[start:end] for start, end in zip(starts, ends, strict=True)]
            return [blob[start:end].decode("utf-8", "surrogatepass") for start, end in zip(starts, ends, strict=True)]
        except UnicodeDecodeError as exc:
            raise _Bad(prefix + ".utf8", f"not UTF-8 ({exc.reason} at byte {exc.start})") from None

    def tuples(self, prefix: str, notes: bool = False) -> list[tuple[str, ...]]:
        texts: list[str] = self.texts(prefix + ".texts")
        if notes:
            texts = self._notes(prefix, texts)
        codes = self.typed(prefix + ".codes", np.int32, 1)
        lengths = self.typed(prefix + ".lengths", np.int64, 1)
        if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= len(texts)):
            raise _Bad(prefix + ".codes", "a code outside the text table")
        if (lengths < 0).any() or int(lengths.sum()) != len(codes):
            raise _Bad(prefix + ".lengths", "lengths do not add up to the codes")
        items = [texts[c] for c in codes.tolist()]
        out: list[tuple[str, ...]] = []
        start = 0
        for n in lengths.tolist():
            out.append(tuple(items[start:start + n]))
            start += n
        return out

    def _notes(self, prefix: str, texts: list[str]) -> list[str]:
        """``texts`` with each one the archive gives a note code made that :class:`Note` again."""
        kinds = self.texts(prefix + ".kinds")
        params = self.texts(prefix + ".params")
        for name, column in ((".kinds", kinds), (".params", params)):
            if len(column) != len(texts):
                raise _Bad(prefix + name, f"{len(column)} items for {len(texts)} texts")
        out: list[str] = []
        for k, (text, code, doc) in enumerate(zip(texts, kinds, params, strict=True)):
            if not code:
                if doc:
                    raise _Bad(prefix + ".params", f"item {k}: parameters without a note code")
                out.append(text)
                continue
            try:
                out.append(restore(text, code, doc))
            except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
                raise _Bad(prefix + ".kinds" if code not in NOTE_CODES else prefix + ".params",
                           f"item {k}: {_shown(str(exc))}") from None
        return out

    def typed(self, name: str, dtype: type, ndim: int) -> np.ndarray:
        arr = self.array(name)
        if arr.dtype != np.dtype(dtype) or arr.ndim != ndim:
            raise _Bad(name, f"expected a {ndim}-d {np.dtype(dtype)} array, got {arr.ndim}-d {arr.dtype}")
        return arr


def _member_field(member: str) -> str:
    return member[:-4] if member.endswith(".npy") else member


def _read_npy(fh: IO[bytes], member_size: int) -> np.ndarray:
    """One ``.npy`` member: its header read with numpy's own parser, its declared size checked against the member's
    before the data is read (a forged shape is an error, not an allocation)."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        raise ValueError(f".npy version {version} is not one a saved comparison uses")
    if dtype.hasobject:
        raise ValueError("an object array (a saved comparison holds no pickles)")
    count = math.prod(shape)
    header_size = fh.tell() if fh.seekable() else 0
    if count * dtype.itemsize > member_size - header_size:
        raise _Bad("", f"declares {count * dtype.itemsize} bytes of data (shape {shape}), more than the member's "
                       f"{member_size} bytes")
    data = fh.read(count * dtype.itemsize)
    if len(data) != count * dtype.itemsize:
        raise EOFError("the member ends before its data")
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order="F" if fortran else "C")


def _header_doc(raw: bytes) -> Any:
    """The header's JSON, read by the standard library's decoder (whatever wrote it, orjson or the fallback): it keeps
    integers beyond 64 bits exact, where orjson would read them as floats.  Duplicate keys, NaN / Infinity literals,
    numbers beyond the float range and nesting too deep for the decoder are errors."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(items)
        if len(d) != len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    raise _Bad("header", f"key {_shown(key)} twice in one object")
                seen.add(key)
        return d

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def real(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {_shown(text)} is beyond the float range")
        return value

    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant, parse_float=real)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Bad("header", f"not JSON ({exc})") from None
    except RecursionError:
        raise _Bad("header", "not JSON (nested too deeply)") from None


#: The header's top-level keys and a unit record's keys (:func:`_header`, :func:`_unit`): no other is accepted.
_HEADER_KEYS = ("format", "version", "input_a", "input_b", "input_noise", "mode", "rules", "units", "unpaired",
                "counts", "verdict_counts", "first_divergent", "first_failing", "verdict", "notes", "matched_share",
                "matched_share_of", "likely_origin")
_UNIT_KEYS = ("unit_a", "unit_b", "rows", "counts", "verdict_counts", "first_divergent", "first_failing", "verdict",
              "notes", "cells", "jumps")


def _load(archive: _Archive) -> Comparison:
    raw = archive.typed("header", np.uint8, 1).tobytes()
    h = _Obj(_header_doc(raw), "header")
    fmt = h.get("format")
    if fmt != FORMAT:
        raise _Bad("format", f"not a saved comparison (format {_shown(fmt)}, expected {FORMAT!r})")
    version = h.get("version")
    if not (type(version) is int and version == VERSION):
        raise _Bad("version", f"version {_shown(version)} is not supported (this msprobe-cmp reads version "
                                     f"{VERSION}); compare the dumps again to write it")
    h.keys_exactly(_HEADER_KEYS)
    units = [_load_unit(_Obj(u, f"units[{i}]"), i, archive) for i, u in enumerate(h.items("units"))]
    _check_expansion(units, archive.size)
    c = Comparison(
        input_a=h.text("input_a"), input_b=h.text("input_b"), mode=h.choice("mode", _MODES),
        rules=_load_rules(h.obj("rules")),
        units=tuple(units),
        unpaired=tuple(_load_unit_ref(h.item("unpaired", i)) for i in range(len(h.items("unpaired")))),
        counts=h.pairs("counts", MATCH_CLASSES), verdict_counts=h.pairs("verdict_counts", VERDICTS),
        first_divergent=_load_row_ref(h, "first_divergent", units),
        first_failing=_load_row_ref(h, "first_failing", units),
        verdict=h.choice("verdict", _OVERALL), notes=h.strs("notes"),
        matched_share=h.number("matched_share", optional=True), matched_share_of=h.text("matched_share_of"),
        input_noise=h.text("input_noise", optional=True),
        likely_origin=_load_origin(h, units),
    )
    _check_comparison(c)
    return c


def _check_comparison(c: Comparison) -> None:
    """The header's totals, first rows and verdict agree with the units (what :func:`compare` derives from them)."""
    for key, names, attr in (("counts", MATCH_CLASSES, "counts"), ("verdict_counts", VERDICTS, "verdict_counts")):
        totals = dict.fromkeys(names, 0)
        for u in c.units:
            for name, n in getattr(u, attr):
                totals[name] += n
        if getattr(c, attr) != tuple(totals.items()):
            raise _Bad(key, f"{_shown(_pairs(getattr(c, attr)))} is not the units' total "
                            f"{_shown(_pairs(tuple(totals.items())))}")
    for key in ("first_divergent", "first_failing"):
        first = next(((i, getattr(u, key)) for i, u in enumerate(c.units) if getattr(u, key) is not None), None)
        ref: RowRef | None = getattr(c, key)
        if (None if ref is None else (ref.unit, ref.row)) != first:
            raise _Bad(key, f"{'none' if ref is None else f'unit {ref.unit} row {ref.row}'} is not the units' first "
                            f"({'none' if first is None else f'unit {first[0]} row {first[1]}'})")
    failing = None if c.first_failing is None else c.first_failing.row
    verdict = unit_verdict(failing, sum(u.compared_count for u in c.units))  # before the matched share's floor
    expected = ("pass", "too_few_matched") if verdict == "pass" else (verdict,)
    if c.verdict not in expected:
        raise _Bad("verdict", f"{c.verdict} contradicts the rows (expected {' or '.join(expected)})")


def _check_unit(o: _Obj, u: UnitComparison) -> None:
    """A unit's counts, first rows and verdict agree with its row columns (as :func:`compare` derived them)."""
    derived = unit_summary(u.rows)
    verdicts = derived.verdict_counts
    if u.verdict_counts != verdicts:
        raise _Bad(o.at("verdict_counts"), f"{_shown(_pairs(u.verdict_counts))} contradicts the verdict column "
                                           f"({_shown(_pairs(verdicts))})")
    classes = derived.counts
    if u.counts != classes:
        raise _Bad(o.at("counts"), f"{_shown(_pairs(u.counts))} contradicts the match_class column "
                                   f"({_shown(_pairs(classes))})")
    for key in ("first_failing", "first_divergent"):
        first = getattr(derived, key)
        if getattr(u, key) != first:
            raise _Bad(o.at(key), f"{_shown(getattr(u, key))} contradicts the row columns (first: {_shown(first)})")
    expected = derived.verdict
    if u.verdict != expected:
        raise _Bad(o.at("verdict"), f"{u.verdict} contradicts the row columns ({expected})")
    # One roll-up per cell.  Their parents may form a cycle: a cyclic construct.json gives one (the compare cuts each
    # chain where it closes) and the compare rendered it, so a loaded one renders alike.
    names = [c.cell for c in u.cells]
    if len(set(names)) != len(names):
        raise _Bad(o.at("cells"), "a cell listed twice")


#: The text every row expands to in the reports (its names, values, shapes, reasons and notes, through the codes
#: of its columns) is at most this many characters per byte of the file (plus :data:`_EXPANSION_FLOOR`): a small
#: forged file whose rows all point at one huge reason tuple or name would otherwise write reports thousands of times
#: its size.  A real comparison stays far below (a row's texts are a few hundred characters, and the file holds each
#: row's own columns, ~300 bytes a row: the 100k-entry bench pair expands to 0.19 characters per byte).  Call stacks
#: are left out: the HTML report bounds them itself.
_EXPANSION_PER_BYTE = 32
_EXPANSION_FLOOR = 64 * 2**20
#: Columns of codes into the string table, the tuple table and the shape table whose texts every row shows.
_EXPANDED = {"strings": ("entry", "arg_path", "entry_b", "arg_path_b", "mapped_by", "parent_cell", "side_dtype",
                         "side_md5", "side_data_name", "side_value"),
             "tuples": ("reasons", "notes"), "shapes": ("side_shape",)}


def _check_expansion(units: Sequence[UnitComparison], file_size: int) -> None:
    limit = _EXPANSION_PER_BYTE * file_size + _EXPANSION_FLOOR
    total = 0
    for i, u in enumerate(units):
        rows = u.rows
        tables = {  # characters per code, and 0 for the code -1 (None) at the end
            "strings": np.fromiter(map(len, rows.strings), dtype=np.int64, count=len(rows.strings)),
            "tuples": np.fromiter((sum(map(len, t)) for t in rows.tuples), dtype=np.int64, count=len(rows.tuples)),
            "shapes": np.fromiter(map(len, map(str, rows.shapes)), dtype=np.int64, count=len(rows.shapes)),
        }
        for table, names in _EXPANDED.items():
            sizes = np.append(tables[table], 0)
            for name in names:
                total += int(sizes[getattr(rows, name)].sum())
        if total > limit:
            raise _Bad(f"u{i}", f"the rows' texts (names, values, shapes, reasons, notes) expand to more than {limit} "
                                f"characters ({_EXPANSION_PER_BYTE} per byte of the file, plus {_EXPANSION_FLOOR}): "
                                "not what a comparison writes")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Obj:
    """A JSON object of the header and where it sits (``units[0].cells[3]``), with checked accessors."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _Bad(where, f"expected an object, got {type(value).__name__}")
        self.d = value
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where != "header" else key

    def get(self, key: str) -> Any:
        if key not in self.d:
            raise _Bad(self.at(key), "missing")
        return self.d[key]

    def _typed(self, key: str, check: Callable[[Any], bool], what: str, optional: bool) -> Any:
        value = self.get(key)
        if value is None and optional:
            return None
        if not check(value):
            raise _Bad(self.at(key), f"expected {what}{' or null' if optional else ''}, got {_shown(value)}")
        return value

    def text(self, key: str, optional: bool = False) -> Any:
        return self._typed(key, lambda v: isinstance(v, str), "a string", optional)

    def integer(self, key: str, optional: bool = False, wide: bool = False) -> Any:
        """An int (not a bool), within int64 unless ``wide`` (a step or rank number: any int a dump names)."""
        return self._typed(key, lambda v: type(v) is int and (wide or _INT64_MIN <= v <= _INT64_MAX),
                           "an integer" if wide else "a 64-bit integer", optional)

    def flag(self, key: str) -> bool:
        return self._typed(key, lambda v: isinstance(v, bool), "true or false", False)

    def number(self, key: str, optional: bool = False) -> Any:
        # an int within int64 (the writer writes floats; an int beyond 64 bits no report encoder writes)
        value = self._typed(key, lambda v: type(v) is float or (type(v) is int and _INT64_MIN <= v <= _INT64_MAX)
                            or v in ("nan", "inf", "-inf"), "a number within the float range (an int within 64 bits)",
                            optional)
        return float(value) if isinstance(value, str) else value

    def ratio(self, key: str) -> float | None:
        """A non-negative number or null (``max_noise_ratio``: NaN and negative values are no ratio)."""
        value = self.number(key, optional=True)
        if value is not None and not value >= 0:
            raise _Bad(self.at(key), f"not a ratio (a number >= 0, or null): {_shown(value)}")
        return value

    def choice(self, key: str, allowed: Sequence[str]) -> Any:
        value = self.get(key)
        if value not in allowed:
            raise _Bad(self.at(key), f"expected one of {', '.join(allowed)}, got {_shown(value)}")
        return value

    def items(self, key: str) -> list[Any]:
        return self._typed(key, lambda v: isinstance(v, list), "a list", False)

    def obj(self, key: str, optional: bool = False) -> _Obj | None:
        value = self.get(key)
        if value is None and optional:
            return None
        return _Obj(value, self.at(key))

    def item(self, key: str, i: int) -> _Obj:
        return _Obj(self.items(key)[i], f"{self.at(key)}[{i}]")

    def strs(self, key: str) -> tuple[str, ...]:
        value = self.items(key)
        for i, s in enumerate(value):
            if not isinstance(s, str):
                raise _Bad(f"{self.at(key)}[{i}]", f"expected a string, got {_shown(s)}")
        return tuple(value)

    def pairs(self, key: str, allowed: Sequence[str]) -> tuple[tuple[Any, int], ...]:
        out: list[tuple[Any, int]] = []
        for i, pair in enumerate(self.items(key)):
            if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in allowed and type(pair[1]) is int
                    and 0 <= pair[1] <= _INT64_MAX):
                raise _Bad(f"{self.at(key)}[{i}]", f"expected [name, count], got {_shown(pair)}")
            if any(pair[0] == name for name, _ in out):
                raise _Bad(f"{self.at(key)}[{i}]", f"{_shown(pair[0])} counted twice")
            out.append((pair[0], pair[1]))
        return tuple(out)

    def keys_exactly(self, names: Sequence[str]) -> None:
        extra = sorted(set(self.d) - set(names))
        if extra:
            raise _Bad(self.at(extra[0]), "not a field of this record (written by another version?)")


def _load_dataclass_numbers(o: _Obj, cls: type) -> Any:
    names = [f.name for f in fields(cls)]
    o.keys_exactly(names)
    values = {}
    for f in fields(cls):
        if f.type in ("bool",):
            values[f.name] = o.flag(f.name)
        else:
            values[f.name] = o.number(f.name, optional="None" in str(f.type))
    return cls(**values)


def _load_rules(o: _Obj | None) -> Rules:
    assert o is not None
    o.keys_exactly(("default", "overrides", "min_matched_share", "noise_factor", "argument_differs", "localisation"))
    overrides = []
    for i in range(len(o.items("overrides"))):
        item = o.item("overrides", i)
        item.keys_exactly(("thresholds", "pattern", "dtype"))
        thresholds = item.obj("thresholds")
        assert thresholds is not None
        overrides.append(ThresholdOverride(_load_dataclass_numbers(thresholds, Thresholds),
                                           item.text("pattern", optional=True), item.text("dtype", optional=True)))
    default, localisation = o.obj("default"), o.obj("localisation")
    assert default is not None and localisation is not None
    return Rules(
        default=_load_dataclass_numbers(default, Thresholds),
        overrides=tuple(overrides),
        min_matched_share=o.number("min_matched_share"),
        noise_factor=o.number("noise_factor"),
        argument_differs=o.text("argument_differs"),
        localisation=_load_dataclass_numbers(localisation, OriginRules),
    )


def _load_unit_ref(o: _Obj) -> UnitRef:
    o.keys_exactly(("side", "step", "rank", "label", "directory"))
    return UnitRef(o.choice("side", ("a", "b")), o.integer("step", optional=True, wide=True),
                   o.integer("rank", optional=True, wide=True), o.text("label"), o.text("directory"))


def _index(o: _Obj, key: str, size: int, optional: bool = False) -> Any:
    value = o.integer(key, optional=optional)
    if value is not None and not 0 <= value < size:
        raise _Bad(o.at(key), f"{value} is out of range ({size})")
    return value


def _load_row_ref(parent: _Obj, key: str, units: Sequence[UnitComparison]) -> RowRef | None:
    o = parent.obj(key, optional=True)
    if o is None:
        return None
    o.keys_exactly(("unit", "row", "name", "unit_label", "parent_cell", "parents"))
    unit = _index(o, "unit", len(units))
    return RowRef(unit, _index(o, "row", len(units[unit].rows)), o.text("name"), o.text("unit_label"),
                  o.text("parent_cell", optional=True), o.strs("parents"))


def _load_jump(o: _Obj, rows: int) -> Jump:
    o.keys_exactly(("row", "kind", "error_in", "error_out", "floor"))
    return Jump(_index(o, "row", rows), o.choice("kind", _JUMP_KINDS), o.number("error_in"), o.number("error_out"),
                o.number("floor"))


def _load_origin(h: _Obj, units: Sequence[UnitComparison]) -> LikelyOrigin | None:
    o = h.obj("likely_origin", optional=True)
    if o is None:
        return None
    o.keys_exactly(("ref", "jump", "cell", "arguments", "unpaired"))
    ref = _load_row_ref(o, "ref", units)
    if ref is None:
        raise _Bad(o.at("ref"), "missing")
    jump = o.obj("jump")
    assert jump is not None
    return LikelyOrigin(ref, _load_jump(jump, len(units[ref.unit].rows)), o.text("cell", optional=True),
                        o.strs("arguments"), o.strs("unpaired"))


def _load_cell(o: _Obj, rows: int) -> CellRollup:
    o.keys_exactly(("cell", "parent", "depth", "rows", "failing", "differing", "min_cosine", "max_abs_err",
                    "worst_verdict", "first_divergent", "max_noise_ratio"))
    return CellRollup(o.text("cell"), o.text("parent", optional=True), o.integer("depth"), o.integer("rows"),
                      o.integer("failing"), o.integer("differing"), o.number("min_cosine", optional=True),
                      o.number("max_abs_err", optional=True), o.choice("worst_verdict", VERDICTS),
                      _index(o, "first_divergent", rows, optional=True), o.ratio("max_noise_ratio"))


#: Code columns of a RowTable and the table their codes point into (-1 allowed where the column may be None).
_CODES: dict[str, tuple[str, bool]] = {
    "entry": ("strings", False), "arg_path": ("strings", False), "entry_b": ("strings", True),
    "arg_path_b": ("strings", True), "mapped_by": ("strings", True), "parent_cell": ("strings", True),
    "side_dtype": ("strings", True), "side_md5": ("strings", True), "side_data_name": ("strings", True),
    "side_value": ("strings", True), "reasons": ("tuples", False), "notes": ("tuples", False),
    "stack": ("stacks", False), "stack_b": ("stacks", False), "side_shape": ("shapes", True),
}
#: Enumeration columns and their (lowest, highest) code.
_ENUMS: dict[str, tuple[int, int]] = {
    "match_class": (0, len(MATCH_CLASSES) - 1), "compared_by": (0, len(COMPARED_BY) - 1),
    "verdict": (0, len(VERDICTS) - 1), "differs": (-1, 1), "side_kind": (0, len(SIDE_KINDS) - 1),
    "metric_state": (0, 2),
}


def _load_table(archive: _Archive, p: str, rows: int) -> RowTable:
    strings = archive.texts(p + "strings")
    tuples = archive.tuples(p + "tuples", notes=True)
    stacks = archive.tuples(p + "stacks")
    dims = archive.typed(p + "shapes.dims", np.int64, 1)
    lengths = archive.typed(p + "shapes.lengths", np.int64, 1)
    if (lengths < 0).any() or int(lengths.sum()) != len(dims):
        raise _Bad(p + "shapes.lengths", "lengths do not add up to the dimensions")
    flat = dims.tolist()
    if p + "shapes.wide.at.npy" in archive.names:  # dimensions beyond int64, as decimal text
        at = archive.typed(p + "shapes.wide.at", np.int64, 1)
        values = archive.texts(p + "shapes.wide.values")
        if len(values) != len(at) or (np.diff(at) <= 0).any() or (at.size and (at[0] < 0 or at[-1] >= len(flat))):
            raise _Bad(p + "shapes.wide.at", "positions out of order, outside the dimensions or not one per value")
        for k, text in zip(at.tolist(), values, strict=True):
            try:  # int() refuses more digits than Python converts (sys.int_info.str_digits_check_threshold)
                if not (text.isascii() and text.removeprefix("-").isdigit()):
                    raise ValueError(text)
                value = int(text)
            except ValueError:
                raise _Bad(p + "shapes.wide.values", f"not a decimal integer: {_shown(text)}") from None
            if _INT64_MIN <= value <= _INT64_MAX:
                raise _Bad(p + "shapes.wide.values", f"{value} fits int64: it belongs in shapes.dims")
            flat[k] = value
    shapes, start = [], 0
    for n in lengths.tolist():
        shapes.append(tuple(flat[start:start + n]))
        start += n
    if not tuples or tuples[0] != ():
        raise _Bad(p + "tuples", "the first tuple must be empty")
    if not stacks or stacks[0] != ():
        raise _Bad(p + "stacks", "the first stack must be empty")
    columns = {name: archive.array(p + name) for name in RowTable.COLUMNS}
    for name, column in columns.items():
        if column.ndim == 0:
            raise _Bad(p + name, "a 0-d array, not a column")
    try:
        table = table_from_columns(strings, tuples, stacks, shapes, columns)
    except ValueError as exc:
        raise _Bad(p.rstrip("."), str(exc)) from None
    if len(table) != rows:
        raise _Bad(p + "verdict", f"{len(table)} rows, the header says {rows}")
    sizes = {"strings": len(strings), "tuples": len(tuples), "stacks": len(stacks), "shapes": len(shapes)}
    for name, (target, nullable) in _CODES.items():
        col = getattr(table, name)
        if col.size and (int(col.min()) < (-1 if nullable else 0) or int(col.max()) >= sizes[target]):
            raise _Bad(p + name, f"a code outside the {target} table")
    for name, (low, high) in _ENUMS.items():
        col = getattr(table, name)
        if col.size and (int(col.min()) < low or int(col.max()) > high):
            raise _Bad(p + name, f"a code outside {low}..{high}")
    error, floor = table.relative_error, table.noise_floor
    measured = ~np.isnan(error)
    if (measured != ~np.isnan(floor)).any():
        raise _Bad(p + "noise_floor", "NaN where relative_error is not, or a number where it is NaN")
    for name, column in (("relative_error", error), ("noise_floor", floor)):
        if (column[measured] < 0).any():
            raise _Bad(p + name, "a negative value (an error and a floor are >= 0)")
    if np.isinf(floor[measured]).any():
        raise _Bad(p + "noise_floor", "an infinite floor")
    return table


def _load_unit(o: _Obj, i: int, archive: _Archive) -> UnitComparison:
    p = f"u{i}."
    o.keys_exactly(_UNIT_KEYS)
    rows = o.integer("rows")
    table = _load_table(archive, p, rows)
    keys = archive.texts(p + "chains.keys")
    values = archive.tuples(p + "chains.values")
    if len(keys) != len(values):
        raise _Bad(p + "chains.values", f"{len(values)} chains for {len(keys)} entries")
    unit_a, unit_b = o.obj("unit_a"), o.obj("unit_b")
    assert unit_a is not None and unit_b is not None
    unit = UnitComparison(
        unit_a=_load_unit_ref(unit_a), unit_b=_load_unit_ref(unit_b), rows=table,
        counts=o.pairs("counts", MATCH_CLASSES), verdict_counts=o.pairs("verdict_counts", VERDICTS),
        first_divergent=_index(o, "first_divergent", rows, optional=True),
        first_failing=_index(o, "first_failing", rows, optional=True),
        verdict=o.choice("verdict", _OVERALL), notes=o.strs("notes"),
        cells=tuple(_load_cell(o.item("cells", k), rows) for k in range(len(o.items("cells")))),
        parent_chains=dict(zip(keys, values, strict=True)),
        jumps=tuple(_load_jump(o.item("jumps", k), rows) for k in range(len(o.items("jumps")))),
    )
    _check_unit(o, unit)
    return unit


def saved_file(path: Path | str) -> Path:
    """The saved comparison a ``msprobe-cmp render`` argument names: ``path`` itself, or ``path / SAVED_FILE`` when
    ``path`` is a directory (no check that it exists)."""
    path = Path(path)
    return path / SAVED_FILE if path.is_dir() else path

