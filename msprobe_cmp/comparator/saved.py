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
``u<i>.chains.keys.*``                    the unit's ``parent_chains`` keys (a text list) ...
``u<i>.chains.values.*``                  ... and their chains (a tuple list), in the mapping's order
========================================  ==========================================================================

A *text list* ``<p>`` is ``<p>.utf8`` (uint8: the strings' UTF-8 bytes one after the other; lone surrogates as
``surrogatepass`` writes them) and ``<p>.ends`` (int64: where each string's bytes end).  A *tuple list* ``<p>`` is
``<p>.texts.*`` (a text list of the distinct strings), ``<p>.codes`` (int32: every tuple's items as indices into
it, one tuple after the other) and ``<p>.lengths`` (int64: the number of items of each tuple).

The JSON header holds ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), the inputs, mode, verdict,
notes, counts, matched share, the rules (every field), the unpaired units, the first divergent / failing rows, the
likely origin and, per unit, its references, counts, verdict, notes, cell roll-up, jumps and row count.  A float
that is NaN or ±Inf is written as the string ``"nan"``, ``"inf"`` or ``"-inf"``; other numbers as JSON numbers
(shortest round-trip form: exact).  The archive's members carry a fixed time stamp, so saving the same comparison
twice gives the same bytes.

:func:`load_comparison` returns a Comparison equal field by field to the saved one (RowTable equality; a NaN loads
as a NaN).  It checks what it reads (types, codes within their tables, indices within the units), so a loaded
comparison renders like the original; anything wrong is a :class:`~msprobe_cmp.errors.DumpFormatError` naming the
file and the field.  No framework is imported here.
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from msprobe_cmp.comparator.matching import MATCH_CLASSES
from msprobe_cmp.comparator.result import (
    CellRollup,
    Comparison,
    Jump,
    LikelyOrigin,
    RowRef,
    UnitComparison,
    UnitRef,
)
from msprobe_cmp.comparator.rowtable import COMPARED_BY, SIDE_KINDS, VERDICTS, RowTable, table_from_columns
from msprobe_cmp.comparator.rules import OriginRules, Rules, ThresholdOverride, Thresholds
from msprobe_cmp.errors import DumpFormatError, MsprobeCmpError

__all__ = ["FORMAT", "SAVED_FILE", "VERSION", "load_comparison", "save_comparison", "saved_file"]

#: The saved comparison's file name in an output directory.
SAVED_FILE = "comparison-data.npz"
#: The header's ``format`` value.
FORMAT = "msprobe-cmp.saved-comparison"
#: The header's ``version``: what :func:`save_comparison` writes and the only one :func:`load_comparison` reads.
VERSION = 1

_MODES = ("tensor", "statistics", "md5")
_OVERALL = ("pass", "fail", "nothing_compared", "too_few_matched")
_JUMP_KINDS = ("computed", "entered")
#: The zip members' time stamp (zip's earliest): the same comparison always gives the same bytes.
_STAMP = (1980, 1, 1, 0, 0, 0)


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
    arrays = saved_arrays(comparison)
    from msprobe_cmp.dump.writer import write_atomic  # the project's one atomic writer (no framework import)

    write_atomic(path, lambda fh: _write_npz(fh, arrays))
    return path


def saved_arrays(comparison: Comparison) -> dict[str, np.ndarray]:
    """The archive's members (module docstring), header first, in the order they are written."""
    header = _header(comparison)
    arrays: dict[str, np.ndarray] = {"header": np.frombuffer(_json_bytes(header), dtype=np.uint8)}
    for i, unit in enumerate(comparison.units):
        p = f"u{i}."
        table = unit.rows
        for name, column in table.columns().items():
            arrays[p + name] = column
        _put_texts(arrays, p + "strings", table.strings)
        _put_tuples(arrays, p + "tuples", table.tuples)
        _put_tuples(arrays, p + "stacks", table.stacks)
        arrays[p + "shapes.dims"] = np.fromiter((d for s in table.shapes for d in s), dtype=np.int64)
        arrays[p + "shapes.lengths"] = np.fromiter((len(s) for s in table.shapes), dtype=np.int64,
                                                   count=len(table.shapes))
        _put_texts(arrays, p + "chains.keys", list(unit.parent_chains))
        _put_tuples(arrays, p + "chains.values", list(unit.parent_chains.values()))
    return arrays


def _write_npz(fh: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    # Stored, not deflated (what np.savez writes): zlib would add ~5 s to a 100k-entry pair for a file that is a
    # sixth of its reports' size anyway.
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
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


def _put_tuples(arrays: dict[str, np.ndarray], prefix: str, tuples: Sequence[Sequence[str]]) -> None:
    table: dict[str, int] = {}
    codes = [table.setdefault(s, len(table)) for t in tuples for s in t]
    _put_texts(arrays, prefix + ".texts", list(table))
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
            "worst_verdict": c.worst_verdict, "first_divergent": _int(c.first_divergent)}


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
            return _load(_Archive(fh))
    except OSError as exc:
        raise DumpFormatError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    except _Bad as bad:
        raise DumpFormatError(path, bad.where or None, bad.problem) from None
    except MsprobeCmpError as exc:  # the rules' own checks (a threshold out of range)
        raise DumpFormatError(path, "rules", str(exc)) from None


class _Archive:
    """The members of the archive, read on demand (each checked against its CRC)."""

    def __init__(self, fh: BinaryIO) -> None:
        try:
            self.zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise _Bad("", f"not a readable saved comparison: truncated or not an npz archive ({exc})") from None
        self.names = set(self.zf.namelist())

    def array(self, name: str) -> np.ndarray:
        member = name + ".npy"
        if member not in self.names:
            raise _Bad(name, "missing from the archive (the file is truncated or not a saved comparison)")
        try:
            with self.zf.open(member) as fh:
                arr = np.lib.format.read_array(fh, allow_pickle=False)
                if fh.read(1):  # also reaches the member's end, where its CRC is checked
                    raise ValueError("data after the array")
            return arr
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, NotImplementedError) as exc:
            raise _Bad(name, f"unreadable ({exc})") from None

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

    def tuples(self, prefix: str) -> list[tuple[str, ...]]:
        texts = self.texts(prefix + ".texts")
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

    def typed(self, name: str, dtype: type, ndim: int) -> np.ndarray:
        arr = self.array(name)
        if arr.dtype != np.dtype(dtype) or arr.ndim != ndim:
            raise _Bad(name, f"expected a {ndim}-d {np.dtype(dtype)} array, got {arr.ndim}-d {arr.dtype}")
        return arr


def _load(archive: _Archive) -> Comparison:
    raw = archive.typed("header", np.uint8, 1).tobytes()
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # a header the standard library wrote (lone surrogates escaped)
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Bad("header", f"not JSON ({exc})") from None
    h = _Obj(doc, "header")
    fmt = h.get("format")
    if fmt != FORMAT:
        raise _Bad("format", f"not a saved comparison (format {_shown(fmt)}, expected {FORMAT!r})")
    version = h.get("version")
    if version != VERSION:
        raise _Bad("version", f"version {_shown(version)} is not supported (this msprobe-cmp reads version "
                                     f"{VERSION}); compare the dumps again to write it")
    units = [_load_unit(_Obj(u, f"units[{i}]"), i, archive) for i, u in enumerate(h.items("units"))]
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
    return c


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

    def integer(self, key: str, optional: bool = False) -> Any:
        return self._typed(key, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer", optional)

    def flag(self, key: str) -> bool:
        return self._typed(key, lambda v: isinstance(v, bool), "true or false", False)

    def number(self, key: str, optional: bool = False) -> Any:
        value = self._typed(key, lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool))
                            or v in ("nan", "inf", "-inf"), "a number", optional)
        return float(value) if isinstance(value, str) else value

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
        out = []
        for i, pair in enumerate(self.items(key)):
            if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in allowed and isinstance(pair[1], int)
                    and not isinstance(pair[1], bool)):
                raise _Bad(f"{self.at(key)}[{i}]", f"expected [name, count], got {_shown(pair)}")
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
    overrides = []
    for i in range(len(o.items("overrides"))):
        item = o.item("overrides", i)
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
    return UnitRef(o.choice("side", ("a", "b")), o.integer("step", optional=True), o.integer("rank", optional=True),
                   o.text("label"), o.text("directory"))


def _index(o: _Obj, key: str, size: int, optional: bool = False) -> Any:
    value = o.integer(key, optional=optional)
    if value is not None and not 0 <= value < size:
        raise _Bad(o.at(key), f"{value} is out of range ({size})")
    return value


def _load_row_ref(parent: _Obj, key: str, units: Sequence[UnitComparison]) -> RowRef | None:
    o = parent.obj(key, optional=True)
    if o is None:
        return None
    unit = _index(o, "unit", len(units))
    return RowRef(unit, _index(o, "row", len(units[unit].rows)), o.text("name"), o.text("unit_label"),
                  o.text("parent_cell", optional=True), o.strs("parents"))


def _load_jump(o: _Obj, rows: int) -> Jump:
    return Jump(_index(o, "row", rows), o.choice("kind", _JUMP_KINDS), o.number("error_in"), o.number("error_out"),
                o.number("floor"))


def _load_origin(h: _Obj, units: Sequence[UnitComparison]) -> LikelyOrigin | None:
    o = h.obj("likely_origin", optional=True)
    if o is None:
        return None
    ref = _load_row_ref(o, "ref", units)
    if ref is None:
        raise _Bad(o.at("ref"), "missing")
    jump = o.obj("jump")
    assert jump is not None
    return LikelyOrigin(ref, _load_jump(jump, len(units[ref.unit].rows)), o.text("cell", optional=True),
                        o.strs("arguments"), o.strs("unpaired"))


def _load_cell(o: _Obj, rows: int) -> CellRollup:
    return CellRollup(o.text("cell"), o.text("parent", optional=True), o.integer("depth"), o.integer("rows"),
                      o.integer("failing"), o.integer("differing"), o.number("min_cosine", optional=True),
                      o.number("max_abs_err", optional=True), o.choice("worst_verdict", VERDICTS),
                      _index(o, "first_divergent", rows, optional=True))


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
    tuples = archive.tuples(p + "tuples")
    stacks = archive.tuples(p + "stacks")
    dims = archive.typed(p + "shapes.dims", np.int64, 1)
    lengths = archive.typed(p + "shapes.lengths", np.int64, 1)
    if (lengths < 0).any() or int(lengths.sum()) != len(dims):
        raise _Bad(p + "shapes.lengths", "lengths do not add up to the dimensions")
    flat = dims.tolist()
    shapes, start = [], 0
    for n in lengths.tolist():
        shapes.append(tuple(flat[start:start + n]))
        start += n
    if not tuples or tuples[0] != ():
        raise _Bad(p + "tuples", "the first tuple must be empty")
    if not stacks or stacks[0] != ():
        raise _Bad(p + "stacks", "the first stack must be empty")
    columns = {name: archive.array(p + name) for name in RowTable.COLUMNS}
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
    return table


def _load_unit(o: _Obj, i: int, archive: _Archive) -> UnitComparison:
    p = f"u{i}."
    rows = o.integer("rows")
    table = _load_table(archive, p, rows)
    keys = archive.texts(p + "chains.keys")
    values = archive.tuples(p + "chains.values")
    if len(keys) != len(values):
        raise _Bad(p + "chains.values", f"{len(values)} chains for {len(keys)} entries")
    unit_a, unit_b = o.obj("unit_a"), o.obj("unit_b")
    assert unit_a is not None and unit_b is not None
    return UnitComparison(
        unit_a=_load_unit_ref(unit_a), unit_b=_load_unit_ref(unit_b), rows=table,
        counts=o.pairs("counts", MATCH_CLASSES), verdict_counts=o.pairs("verdict_counts", VERDICTS),
        first_divergent=_index(o, "first_divergent", rows, optional=True),
        first_failing=_index(o, "first_failing", rows, optional=True),
        verdict=o.choice("verdict", _OVERALL), notes=o.strs("notes"),
        cells=tuple(_load_cell(o.item("cells", k), rows) for k in range(len(o.items("cells")))),
        parent_chains=dict(zip(keys, values, strict=True)),
        jumps=tuple(_load_jump(o.item("jumps", k), rows) for k in range(len(o.items("jumps")))),
    )


def saved_file(path: Path | str) -> Path:
    """The saved comparison a ``msprobe-cmp render`` argument names: ``path`` itself, or ``path / SAVED_FILE`` when
    ``path`` is a directory (no check that it exists)."""
    path = Path(path)
    return path / SAVED_FILE if path.is_dir() else path

