"""Conversion between dump.json's JSON values and the records of :mod:`msprobe_cmp.dump.schema`.

The one place that knows how a record is spelled in JSON (docs/design.md §4).  The reader parses a file
(:func:`~msprobe_cmp.dump.reader.read_dump_json` for dump.json, one ``data`` member at a time;
:func:`~msprobe_cmp.dump.reader.read_json` for the others) and hands the values to the ``*_from_json`` functions with
the file and the JSON path of the value, so that every error names both; the writer calls the ``*_to_json`` functions.
The tensor leaves of one call (a file's entries, or one node or leaf) are added to one
:class:`~msprobe_cmp.dump.schema.LeafColumns`; the nodes hold :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF` in their
place, and the entries their layout and first row.  ``x_from_json(x_to_json(r)) == r`` for every record but a tensor
leaf whose ``md5`` is empty or blank: that is no checksum and reads as None.

One builder reads every value, well formed or not, and keeps no path as it goes.  The walk (:func:`_node`) builds
the nodes and sets each tensor object aside; a batch of them (:data:`_BATCH` leaves: a few hundred entries of a
dump.json, held parsed) is then added to the columns field by field (:func:`_add_leaves`), each string, shape and
extra met before coded by a look-up and each new one checked once by its field's validator.  A malformed value
raises :class:`_Invalid` holding the path below the value that failed (``.Max``), each enclosing list, object and
entry puts its own step in front on the way out (``[0]``, ``.input_args``), and the public function turns it into a
:class:`~msprobe_cmp.errors.DumpFormatError` naming the file and the whole path (``data['X'].input_args[0].Max``).
A batch that holds a malformed leaf is checked leaf by leaf, in file order, by the same validators
(:func:`_leaf_error`), and the walk of that leaf's entry is run again to stop there (:func:`_walk_to_leaf`): the
error is the first malformed field in file order, as if each leaf had been checked as it was met (an error the walk
finds is raised only once the leaves before it are checked).  Well-formed values pay nothing for the paths.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Mapping
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from msprobe_cmp.dump.schema import (
    COLUMN_LEAF,
    FORMAT_VERSION,
    STAT_KEYS,
    TENSOR_TYPES,
    DumpMeta,
    Entry,
    EntryLayout,
    JsonObject,
    LeafColumns,
    Map,
    Node,
    Seq,
    TensorLeaf,
    ValueLeaf,
    _is_parameters_grad,
    compute_nonfinite_counts,
    fill_column_leaves,
    leaf_view,
)
from msprobe_cmp.errors import DumpFormatError

#: How deep a value may nest below an entry field (an explicit limit: the interpreter's recursion limit varies,
#: MindSpore raises it to 10,000 on import).
_MAX_DEPTH = 64
_LEAF_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "md5", "data_name")
_LEAF_KEY_SET = frozenset(_LEAF_KEYS)
_META_KEYS = ("task", "level", "framework", "dump_data_dir", "data")
_TOO_DEEP = f"nested deeper than {_MAX_DEPTH} levels"


class _Invalid(Exception):
    """A malformed value met while building a record: what is wrong (``problem``) and where (``field``: the JSON
    path of the bad field below the value the outermost builder was given, e.g. ``"[0].Max"``)."""

    def __init__(self, problem: str, field: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.field = field

    def under(self, step: str) -> _Invalid:
        """This error, seen from one level up: ``step`` (``"[2]"``, ``".output"``) put in front of the path."""
        self.field = step + self.field
        return self

    def error(self, file: str | Path, where: str) -> DumpFormatError:
        """The user's error: ``file``, and the path ``where`` of the value the builder was given followed by the
        path below it."""
        return DumpFormatError(file, where + self.field, self.problem)


#: Keys only a tensor leaf holds (as a scalar or null): the statistics, ``data_name`` and ``md5``.
_LEAF_ONLY_KEYS = ("Max", "Min", "Mean", "Norm", "data_name", "md5")
_JSON_SCALARS = (str, int, float, bool, type(None))


def _leaf_only_key(obj: dict[str, Any]) -> str | None:
    """The first of :data:`_LEAF_ONLY_KEYS` that ``obj`` holds with a scalar or null value, or None."""
    for key in _LEAF_ONLY_KEYS:
        if key in obj and isinstance(obj[key], _JSON_SCALARS):
            return key
    return None


def _holds_nodes(value: Any) -> bool:
    """True for a JSON object, or a list holding one: what a container's ``dtype``/``shape`` kwarg holds, and a tensor
    leaf's never does."""
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value))


def _is_leaf_like(obj: dict[str, Any]) -> bool:
    """True for a dict with no ``value`` that is unmistakably a tensor leaf: a string ``dtype`` and a list ``shape``,
    or a ``dtype`` and/or ``shape`` key (of any value) with a statistic, ``data_name`` or ``md5`` that is a scalar
    or null.  A kwargs container with keys ``dtype``/``shape`` holds nodes (``{"type": ..., "value": ...}``
    objects, lists of them) and is not one.  The caller has already taken the well-formed tensor objects, so for a
    dict left over this means a malformed leaf."""
    if "value" in obj or ("dtype" not in obj and "shape" not in obj):
        return False
    if _holds_nodes(obj.get("dtype")) or _holds_nodes(obj.get("shape")):
        return False  # a kwargs container: msprobe writes a None kwarg ("md5": null) beside nodes
    if isinstance(obj.get("dtype"), str) and isinstance(obj.get("shape"), list):
        return True
    return _leaf_only_key(obj) is not None


def _malformed_leaf(obj: dict[str, Any]) -> _Invalid:
    """The error of a dict for which :func:`_is_leaf_like` holds but which is no tensor object, naming the first
    field that is wrong of ``type`` (not a string), ``dtype`` (not a string) and ``shape`` (not a list), and, in
    parentheses, the keys that make it a tensor leaf."""
    dtype, shape = obj.get("dtype"), obj.get("shape")
    if isinstance(dtype, str) and isinstance(shape, list):
        why = "dtype and shape"
    else:
        keys = [str(_leaf_only_key(obj)), *(k for k in ("dtype", "shape") if k in obj)]
        why = ", ".join(keys[:-1]) + " and " + keys[-1]
    for key, wanted, ok in (("type", "a string type", isinstance(obj.get("type"), str)),
                            ("dtype", "a string dtype", isinstance(dtype, str)),
                            ("shape", "a list shape", isinstance(shape, list))):
        if not ok:
            got = "none" if key not in obj else _json_type(obj[key])
            return _Invalid(f"a tensor leaf ({why}) needs {wanted}, got {got}", f".{key}")
    raise AssertionError("_malformed_leaf called on a well-formed tensor object")  # pragma: no cover


def _stat(value: Any, field: str) -> float | None:
    """A statistic as read (``field``: ``".Max"``...): None, or a float (an int, a bool, or a string ``float()``
    reads, such as another writer's ``"nan"``, converted)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise _Invalid("integer too large for a statistic", field) from None
    if isinstance(value, str):
        # Some writers stringify special values; accept the spellings float() understands.
        try:
            return float(value)
        except ValueError:
            pass
    raise _Invalid(f"expected a number or null, got {type(value).__name__} {value!r:.40}", field)


# -- the rules of a tensor object's fields: one validator a field, used by the batch (on each distinct new value)
# -- and, to name the first malformed leaf of a batch, leaf by leaf (_leaf_error)


def _dtype(value: Any) -> str:
    """A tensor object's ``dtype``: a string, else :class:`_Invalid`."""
    if type(value) is not str:
        raise _Invalid(f"expected a string, got {value!r:.40}", ".dtype")
    return value


def _numel(shape: Any) -> int:
    """The element count of a tensor object's ``shape``: a list of non-negative ints with fewer than 2**63
    elements, else :class:`_Invalid`."""
    numel = 1
    if type(shape) is list:
        for d in shape:
            if type(d) is not int or d < 0:
                numel = -1
                break
            numel *= d
    if numel < 0 or type(shape) is not list:
        raise _Invalid(f"expected a list of non-negative ints, got {shape!r:.60}", ".shape")
    if numel >= 2**63:
        raise _Invalid("more than 2**63 elements: too large", ".shape")
    return numel


def _md5(value: Any) -> str | None:
    """A tensor object's ``md5`` as kept: None for none, an empty or blank string (no checksum: two of them never
    "agree"), else the string; :class:`_Invalid` for what is no string."""
    if value is None:
        return None
    if type(value) is not str:
        raise _Invalid("expected a string", ".md5")
    return value if value.strip() else None


def _data_name(value: Any) -> str | None:
    """A tensor object's ``data_name``: None or a string, else :class:`_Invalid`."""
    if value is not None and type(value) is not str:
        raise _Invalid("expected a string", ".data_name")
    return value


def _requires_grad(value: Any) -> bool | None:
    """A tensor object's ``requires_grad``: None, true or false, else :class:`_Invalid`."""
    if value is not None and type(value) is not bool:
        raise _Invalid("expected true or false", ".requires_grad")
    return value


def _kept_extra(extra: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, object], ...]:
    """The extra fields ``extra`` of a tensor object (its keys that are not :data:`_LEAF_KEYS`), their values kept as
    written (:func:`_freeze`)."""
    out: list[tuple[str, object]] = []
    for key, value in extra:
        try:
            out.append((key, _freeze(value, 0)))
        except _Invalid as exc:
            raise exc.under(f".{key}") from None
    return tuple(out)


def _leaf_error(obj: dict[str, Any]) -> _Invalid | None:
    """The error of the first malformed field of the tensor object ``obj``, or None: the fields in the order a leaf
    is checked (``dtype``, ``shape``, ``md5``, ``data_name``, ``requires_grad``, the extra keys, ``Max``, ``Min``,
    ``Mean``, ``Norm``), each by its validator."""
    try:
        _dtype(obj.get("dtype"))
        _numel(obj.get("shape"))
        _md5(obj.get("md5"))
        _data_name(obj.get("data_name"))
        _requires_grad(obj.get("requires_grad"))
        if not _LEAF_KEY_SET.issuperset(obj):
            _kept_extra(tuple([(k, v) for k, v in obj.items() if k not in _LEAF_KEY_SET]))
        for key in STAT_KEYS:
            _stat(obj.get(key), f".{key}")
    except _Invalid as exc:
        return exc
    return None


def _first_malformed(objs: list[dict[str, Any]]) -> tuple[int, _Invalid] | None:
    """``(k, error)`` of the first malformed tensor object of ``objs`` (:func:`_leaf_error`), or None."""
    for k, obj in enumerate(objs):
        exc = _leaf_error(obj)
        if exc is not None:
            return k, exc
    return None


#: The bound (:class:`_Memo`) of an ``extra`` whose counts hold for no tensor (no counts, or one beyond any count of
#: elements: a shape holds fewer than 2**63).
_NEVER = 2**63
_NONE_TYPE = type(None)
_INT = frozenset({int})
_LIST = frozenset({list})
_FLOAT = frozenset({float})
_FLOAT_OR_NONE = frozenset({float, _NONE_TYPE})
_BOOL_OR_NONE = frozenset({bool, _NONE_TYPE})
#: ``requires_grad`` (None, false, true) → its int8 byte (-1, 0, 1).
_RG_BYTE = {None: 255, False: 0, True: 1}
#: How many tensor leaves :func:`entries_from_json` holds, parsed, before it adds them to the columns: a batch's
#: objects stay in the processor's cache (batches of 4096 leaves read the 100k-entry bench dump slower: ~25 % in a
#: noisy measurement on a shared 2-core machine).
_BATCH = 512


class _Refused(Exception):
    """A batch's column checks met a malformed value (:func:`_add_leaves`): which leaf, and what is wrong with it, is
    found leaf by leaf (:func:`_first_malformed`)."""


class _Table:
    """A growing list of rows (``items``) with a numpy copy (:meth:`array`) brought up to date when asked for, its
    capacity doubled as needed: the per-code tables of :class:`_Memo`, read at a batch's codes by fancy indexing."""

    __slots__ = ("_array", "_filled", "items")

    def __init__(self, dtype: type, row_shape: tuple[int, ...], items: list[Any]) -> None:
        self.items = items
        self._array: np.ndarray = np.zeros((16, *row_shape), dtype)
        self._filled = 0

    def array(self) -> np.ndarray:
        """The rows as a numpy array (a view of the copy: valid until the next call)."""
        n, filled = len(self.items), self._filled
        if filled < n:
            if n > len(self._array):
                grown = np.zeros((max(n, 2 * len(self._array)), *self._array.shape[1:]), self._array.dtype)
                grown[:filled] = self._array[:filled]
                self._array = grown
            self._array[filled:n] = self.items[filled:n]
            self._filled = n
        return self._array[:n]


#: What :class:`_Memo` keeps of a tensor object's key tuple: its keys that are not :data:`_LEAF_KEYS` (its extra
#: keys), in order, and a function picking their values from such an object, as a tuple.
_KeyTuple = tuple[tuple[str, ...], Callable[[dict[str, Any]], tuple[Any, ...]]]


def _no_extra(obj: dict[str, Any]) -> tuple[Any, ...]:
    """The values of no extra keys: ``()``."""
    return ()


class _Memo:
    """What one file's reading builds and shares (one per file read).

    ``cols`` holds the file's tensor leaves (:class:`~msprobe_cmp.dump.schema.LeafColumns`: their ``type`` and
    ``dtype`` strings and their shapes held once).  The walk (:func:`_node`) does not build a leaf: it puts the tensor
    object in ``pending``, and :func:`_add_leaves` adds the pending leaves to ``cols`` column by column, a batch at a
    time.  What the batches share:

    ``key_tuples`` maps a tensor object's key tuple to what :data:`_KeyTuple` says (a dump holds few distinct key
    tuples).  ``int_extras`` maps an ``extra`` whose values are all ints (our recorder's NaN/Inf counts, mostly
    zeros), as ``(extra keys, values)``, to its code in ``cols``: 300k leaves of a 100k-entry dump hold a few distinct
    ones.  Only ints and strings are shared: for them equal means the same (``1``, ``1.0`` and ``True`` are equal but
    not the same).  By extra code: ``extra_counts`` the NaN/Inf counts it gives (0s for none) and ``extra_bound`` the
    least element count of a tensor they hold for (:data:`_NEVER` for none).  ``shape_numel`` holds each shape's
    element count, by shape code; ``md5_codes`` and ``name_codes`` map each ``md5`` and ``data_name`` value met to its
    string code (-1: None, and an empty or blank md5).

    ``layouts`` maps an entry's fields (column leaves as :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`) to the one
    :class:`~msprobe_cmp.dump.schema.EntryLayout` of the entries that have them; ``values`` holds the ``repr`` of
    each value leaf's value built for the entry being read, which the look-up adds to the key: equal values are not
    always the same (``1``, ``1.0``, ``True``; ``0.0`` and ``-0.0``), their reprs are (msprobe's PyTorch dumps
    write ``"is_recompute": false`` in every entry, whose layouts are then shared too).
    """

    __slots__ = ("cols", "extra_bound", "extra_counts", "int_extras", "key_tuples", "layouts", "md5_codes",
                 "name_codes", "pending", "shape_numel", "values")

    def __init__(self) -> None:
        self.cols = LeafColumns()
        self.pending: list[dict[str, Any]] = []
        self.key_tuples: dict[tuple[str, ...], _KeyTuple] = {}
        self.int_extras: dict[tuple[tuple[str, ...], tuple[int, ...]], int] = {((), ()): 0}
        self.extra_counts = _Table(np.int64, (3,), [(0, 0, 0)])  # extra code 0: no extra
        self.extra_bound = _Table(np.uint64, (), [_NEVER])
        self.shape_numel = _Table(np.uint64, (), [])
        self.md5_codes: dict[Any, int] = {None: -1}
        self.name_codes: dict[Any, int] = {None: -1}
        self.layouts: dict[tuple[object, ...], EntryLayout] = {}
        self.values: list[str] = []

    def key_tuple(self, keys: tuple[str, ...]) -> _KeyTuple:
        """What :data:`_KeyTuple` says of ``keys`` (a tensor object's key tuple), noted the first time."""
        got = self.key_tuples.get(keys)
        if got is None:
            extra = tuple([k for k in keys if k not in _LEAF_KEY_SET])
            pick: Callable[[dict[str, Any]], tuple[Any, ...]] = (
                itemgetter(*extra) if len(extra) > 1 else (lambda obj: (obj[extra[0]],)) if extra else _no_extra)
            got = self.key_tuples[keys] = (extra, pick)
        return got

    def add_extra(self, extra: tuple[tuple[str, object], ...], shared: bool, numel: float) -> int:
        """Note and return the code in :attr:`cols` of ``extra`` (a tensor object's, values kept as written): shared
        (``shared``: its values are ints, the same code for an equal one, also in :attr:`int_extras`) or its own,
        with the counts :func:`~msprobe_cmp.dump.schema.compute_nonfinite_counts` reads from it for a tensor of
        ``numel`` elements (``math.inf`` for a shared one: they then hold for a tensor of at least their largest
        count of elements)."""
        code = self.cols.extra_code_of(extra, shared)
        if code == len(self.extra_counts.items):  # a new one
            counts = compute_nonfinite_counts(extra, numel)
            bound = _NEVER if counts is None else min(max(counts), _NEVER) if shared else 0
            self.extra_counts.items.append((0, 0, 0) if counts is None or bound == _NEVER else counts)
            self.extra_bound.items.append(bound)
        if shared:
            self.int_extras[(tuple([k for k, _ in extra]), tuple([v for _, v in extra]))] = code  # type: ignore[misc]
        return code

    def layout(self, fields: tuple[tuple[str, object], ...], name: str) -> EntryLayout:
        """The layout of an entry named ``name`` whose fields are ``fields``: one for the entries whose fields are the
        same, :attr:`values` included."""
        pg = _is_parameters_grad(name)
        key: tuple[object, ...] = (pg, fields)
        if self.values:
            key = (pg, fields, tuple(self.values))
            self.values.clear()
        got = self.layouts.get(key)
        if got is None:
            got = self.layouts[key] = EntryLayout(fields, pg)  # type: ignore[arg-type]
        return got


def _add_leaves(memo: _Memo, types: list[Any] | None = None) -> tuple[int, _Invalid] | None:
    """Add the tensor objects of ``memo.pending`` to ``memo.cols`` (``types``: their ``type`` strings, by default
    their ``type`` fields) and empty it; or, when one is malformed, return its place in ``memo.pending`` and its
    error (the first malformed one, in file order), the columns then being of no use (the read fails)."""
    try:
        _fill_columns(memo, memo.pending, types)
    except (_Invalid, _Refused):
        found = _first_malformed(memo.pending)
        if found is None:  # pragma: no cover - the column checks refuse only what a field's validator refuses
            raise AssertionError("the leaf columns refused a batch of well-formed tensor objects") from None
        return found
    memo.pending.clear()
    return None


def _fill_columns(memo: _Memo, objs: list[dict[str, Any]], types: list[Any] | None) -> None:
    """:func:`_add_leaves` of the tensor objects ``objs``, column by column: each field gathered from the objects
    at once; the strings, shapes and int-only extras coded by dictionary look-ups, each value not met before
    checked by its field's validator; the statistics converted to float64 with the mask of the defined ones.
    Raises :class:`_Refused` or :class:`_Invalid` when a value is malformed (naming no leaf)."""
    n = len(objs)
    if not n:
        return
    cols = memo.cols
    get = dict.get
    field: dict[str, list[Any]] = {key: list(map(get, objs, repeat(key))) for key in _LEAF_KEYS}  # None: absent
    if types is not None:
        field["type"] = types
    tc, dc, mc, nc = _string_codes(memo, field)

    shapes = field["shape"]
    if not _LIST.issuperset(map(type, shapes)):
        raise _Refused
    shape_tuples: list[tuple[int, ...]] = list(map(tuple, shapes))
    if not _INT.issuperset(map(type, chain.from_iterable(shape_tuples))):  # (2, True) == (2, 1): no look-up sees it
        raise _Refused
    try:
        sc: list[int] = list(map(cols.shape_codes.__getitem__, shape_tuples))
    except KeyError:  # a shape not met before: checked (negative sizes, 2**63 elements) and coded, in order
        sc = []
        lookup = cols.shape_codes.get
        numels = memo.shape_numel.items
        for shape, listed in zip(shape_tuples, shapes, strict=True):
            code = lookup(shape)
            if code is None:
                numel = _numel(listed)
                code = cols.shape_code_of(shape)
                numels.append(numel)
            sc.append(code)

    rgs = field["requires_grad"]
    if not _BOOL_OR_NONE.issuperset(map(type, rgs)):
        raise _Refused
    requires_grad = bytes(map(_RG_BYTE.__getitem__, rgs))

    ec = _extra_codes(memo, objs, sc)

    stats = np.empty((n, 4), np.float64)
    defined = np.zeros(n, np.uint8)
    for k, key in enumerate(STAT_KEYS):
        col: list[Any] = field[key]
        if not _FLOAT.issuperset(map(type, col)):  # None, ints, bools, strings...: converted one by one
            where = f".{key}"
            col = [v if type(v) is float else _stat(v, where) for v in col]
        stats[:, k] = col  # None: NaN
        defined |= ((np.array(col, object) != None).view(np.uint8) << k  # noqa: E711 - elementwise
                    if None in col else 1 << k)

    tc_rows, dc_rows, sc_rows, mc_rows, nc_rows, ec_rows = map(_int32_rows, (tc, dc, sc, mc, nc, ec))
    ec_at = np.frombuffer(ec_rows, np.int32)
    counted = memo.extra_bound.array()[ec_at] <= memo.shape_numel.array()[np.frombuffer(sc_rows, np.int32)]
    counts = memo.extra_counts.array()[ec_at]
    counts[~counted] = 0
    cols.add_rows(tc_rows, dc_rows, sc_rows, mc_rows, nc_rows, ec_rows, requires_grad, stats.data, defined.data,
                  counts.data, counted.view(np.uint8).data)


def _int32_rows(codes: list[int]) -> array[int]:
    """``codes`` as an int32 ``array``."""
    return array("i", codes)


def _string_codes(memo: _Memo, field: dict[str, list[Any]]) -> tuple[list[int], list[int], list[int], list[int]]:
    """The string codes of the ``type``, ``dtype``, ``md5`` and ``data_name`` values ``field`` (a column each) of a
    batch, -1 for None (and for an empty or blank md5).  The strings not met before are checked by their field's
    validator and coded in the order they come in the leaves (a leaf's type, dtype, md5 and data_name, then the next
    leaf's).  Raises :class:`_Refused` or :class:`_Invalid`."""
    string_codes = memo.cols.string_codes
    tables = (string_codes, string_codes, memo.md5_codes, memo.name_codes)
    columns = (field["type"], field["dtype"], field["md5"], field["data_name"])
    codes: list[list[int] | None] = []
    try:  # a string field holding a list or an object is unhashable: malformed
        for column, table in zip(columns, tables, strict=True):
            try:
                codes.append(list(map(table.__getitem__, column)))
            except KeyError:
                codes.append(None)  # a string not met before (or a malformed value)
        if None in codes:
            _code_new_strings(memo, columns, codes)
    except TypeError:
        raise _Refused from None
    return codes[0], codes[1], codes[2], codes[3]  # type: ignore[return-value]


def _code_new_strings(memo: _Memo, columns: tuple[list[Any], ...], codes: list[list[int] | None]) -> None:
    """Fill the columns of ``codes`` that are None (a column holding a string not met before: :func:`_string_codes`)
    with the codes of the values ``columns``, the new strings checked and coded leaf by leaf."""
    string_code = memo.cols.string_code
    string_codes = memo.cols.string_codes
    md5_codes, name_codes = memo.md5_codes, memo.name_codes

    def coded(j: int, value: Any) -> int:
        if j < 2:  # type (a string), dtype
            got = string_codes.get(value)
            return string_code(value if j == 0 else _dtype(value)) if got is None else got
        table = md5_codes if j == 2 else name_codes
        got = table.get(value)
        if got is None:
            kept = _md5(value) if j == 2 else _data_name(value)
            got = table[value] = -1 if kept is None else string_code(kept)
        return got

    new = [j for j, c in enumerate(codes) if c is None]
    rows = [[coded(j, columns[j][i]) for j in new] for i in range(len(columns[0]))]
    for j, column in zip(new, zip(*rows, strict=True), strict=True):
        codes[j] = list(column)


def _extra_codes(memo: _Memo, objs: list[dict[str, Any]], sc: list[int]) -> list[int]:
    """The codes in ``memo.cols`` of the extras (the keys that are not :data:`_LEAF_KEYS`, kept as written) of the
    tensor objects ``objs`` (``sc``: their shape codes), in order: an int-only extra met before by a look-up
    (:attr:`_Memo.int_extras`), the others one by one: an int-only one shared with the equal ones after it, any other
    its own.  Raises :class:`_Invalid` (a value nested too deeply)."""
    keys = list(map(tuple, objs))
    try:
        found = list(map(memo.key_tuples.__getitem__, keys))
    except KeyError:
        found = list(map(memo.key_tuple, keys))
    values = [pick(obj) for (_, pick), obj in zip(found, objs, strict=True)]
    exact = list(map(_INT.issuperset, map(map, repeat(type), values)))  # ints only: shared (equal means the same)
    lookup = memo.int_extras.get
    ec: list[Any] = [lookup((extra_keys, v)) if ok else None
                     for (extra_keys, _), v, ok in zip(found, values, exact, strict=True)]
    if None in ec:
        numels = memo.shape_numel.items
        for i, code in enumerate(ec):
            if code is None:
                extra_keys, v = found[i][0], values[i]
                if exact[i]:
                    ec[i] = _int_extra_code(memo, extra_keys, v)
                else:
                    ec[i] = memo.add_extra(_kept_extra(tuple(zip(extra_keys, v, strict=True))), False, numels[sc[i]])
    return ec


def _int_extra_code(memo: _Memo, extra_keys: tuple[str, ...], values: tuple[int, ...]) -> int:
    """The code of an int-only extra (``extra_keys`` with ``values``), added when new."""
    got = memo.int_extras.get((extra_keys, values))
    return memo.add_extra(tuple(zip(extra_keys, values, strict=True)), True, math.inf) if got is None else got


def _walk_to_leaf(walk: Callable[[_Memo], object], k: int, exc: _Invalid) -> _Invalid:
    """``exc`` (the error of the ``k``-th tensor object ``walk`` meets), with the path to it: ``walk`` walks a value
    again (:func:`_node`, :func:`_entry_fields`...) and the walk stops at that leaf, putting each enclosing step in
    front of the path on its way out."""
    memo = _Memo()
    memo.pending = _LeafFinder(k, exc)
    try:
        walk(memo)
    except _Invalid as found:
        return found
    raise AssertionError(f"walked past leaf {k} without meeting it")  # pragma: no cover


class _LeafFinder(list[dict[str, Any]]):
    """The ``pending`` list of a walk that stops at its ``k``-th tensor object (:func:`_walk_to_leaf`), raising
    ``exc``."""

    def __init__(self, k: int, exc: _Invalid) -> None:
        super().__init__()
        self.k = k
        self.exc = exc

    def append(self, obj: Any) -> None:
        if len(self) == self.k:
            raise self.exc
        super().append(obj)


def tensor_leaf_from_json(obj: dict[str, Any], file: str | Path, where: str) -> TensorLeaf:
    """Build a :class:`TensorLeaf` from a dump.json tensor object (an empty or blank ``md5`` becomes None; keys
    other than msprobe's are kept in :attr:`TensorLeaf.extra`, as written).

    Args:
        obj: the parsed tensor object; file: the file it was read from; where: its JSON path, for messages.

    Raises:
        DumpFormatError: when ``dtype`` is not a string, ``shape`` is not a list of non-negative
            ints, a statistic is not a number/null, or ``data_name``/``md5`` are not strings.
    """
    memo = _Memo()
    memo.pending.append(obj)
    bad = _add_leaves(memo, [str(obj.get("type"))])
    if bad is not None:
        raise bad[1].error(file, where)
    memo.cols.finish()
    return leaf_view(memo.cols, 0)


def _freeze(value: Any, depth: int) -> object:
    """JSON value → hashable plain value (lists become tuples, objects become :class:`JsonObject`); raises
    :class:`_Invalid` (with no path: the caller names the value) on nesting deeper than 64 levels."""
    if depth > _MAX_DEPTH:
        raise _Invalid(_TOO_DEEP)
    if type(value) is list:
        return tuple([_freeze(v, depth + 1) for v in value])
    if type(value) is dict:
        return JsonObject(tuple([(k, _freeze(v, depth + 1)) for k, v in value.items()]))
    return value


def _thaw(value: object) -> Any:
    """Inverse of :func:`_freeze`."""
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, JsonObject):
        return {k: _thaw(v) for k, v in value.items}
    return value


def _node(obj: Any, depth: int, memo: _Memo) -> Any:
    """:func:`node_from_json` of a value at ``depth`` (at most :data:`_MAX_DEPTH`), a tensor leaf held as
    :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`, its tensor object put in ``memo.pending`` (checked and added to
    ``memo.cols`` later, by :func:`_add_leaves`): raises :class:`_Invalid`."""
    t = type(obj)
    if t is dict:
        return _object(obj, depth, memo)
    if t is list:
        if obj and depth >= _MAX_DEPTH:
            raise _Invalid(_TOO_DEEP, "[0]")
        items: list[Any] = []
        pending = memo.pending
        try:
            for v in obj:
                if type(v) is dict:
                    type_ = v.get("type")
                    if type(type_) is str and type_ in TENSOR_TYPES:  # the common item: a tensor leaf
                        pending.append(v)
                        items.append(COLUMN_LEAF)
                    else:
                        items.append(_object(v, depth + 1, memo))
                elif v is None:
                    items.append(None)
                else:
                    items.append(_node(v, depth + 1, memo))
        except _Invalid as exc:
            raise exc.under(f"[{len(items)}]") from None
        return Seq(tuple(items))
    if obj is None:
        return None
    # A bare scalar where a node is expected: keep it as a value of its JSON type.
    memo.values.append(repr(obj))
    if t is bool:
        return ValueLeaf("bool", obj)
    if t is int:
        return ValueLeaf("int", obj)
    if t is float:
        return ValueLeaf("float", obj)
    return ValueLeaf("str", str(obj))


#: The map of an empty JSON object (records are immutable: every empty object is this one).
_EMPTY_MAP = Map(())


def _object(obj: dict[str, Any], depth: int, memo: _Memo) -> Any:
    """:func:`_node` of a JSON object: a tensor leaf (:data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`), a value leaf
    (``{"type": ..., "value": ...}``) or a map (an empty one is :data:`_EMPTY_MAP`, held once: most entries'
    ``input_kwargs``)."""
    if not obj:
        return _EMPTY_MAP
    type_ = obj.get("type")
    if type(type_) is str:
        if type_ in TENSOR_TYPES or ("dtype" in obj and "shape" in obj and "value" not in obj):
            # msprobe's tensor types, and the tensor-like types of other tool versions: a dtype and a shape
            memo.pending.append(obj)
            return COLUMN_LEAF
        if len(obj) == 2 and "value" in obj:
            try:
                value = _freeze(obj["value"], depth)
            except _Invalid as exc:
                raise exc.under(".value") from None
            memo.values.append(repr(value))
            return ValueLeaf(type_, value)
    if ("dtype" in obj or "shape" in obj) and _is_leaf_like(obj):
        raise _malformed_leaf(obj)
    if obj and depth >= _MAX_DEPTH:
        raise _Invalid(_TOO_DEEP, f".{next(iter(obj))}")
    items: list[tuple[str, Any]] = []
    key = ""
    try:
        for key, v in obj.items():
            items.append((key, _node(v, depth + 1, memo)))
    except _Invalid as exc:
        raise exc.under(f".{key}") from None
    return Map(tuple(items))


def node_from_json(obj: Any, file: str | Path, where: str, depth: int = 0) -> Node:
    """Build a node (leaf or container) from any JSON value of an entry field.

    Args:
        obj: the parsed value; file: the file it was read from; where: its JSON path, for messages;
        depth: how deep it sits below the entry field (0: the field's value itself).

    Returns:
        None for null, :class:`Seq` for a list, :class:`TensorLeaf` for a tensor object, :class:`ValueLeaf` for
        ``{"type": ..., "value": ...}`` or a bare scalar, else :class:`Map`.

    Raises:
        DumpFormatError: on nesting deeper than 64 levels or a malformed tensor leaf, including an object that is
            unmistakably one (:func:`_is_leaf_like`: no ``value``, and a string ``dtype`` with a list ``shape``,
            or a ``dtype``/``shape`` key with a scalar or null statistic, ``data_name`` or ``md5``) but has no
            string ``type``, no string ``dtype`` or no list ``shape`` (the message names the first of these).
    """
    memo = _Memo()
    try:
        if depth > _MAX_DEPTH:
            raise _Invalid(_TOO_DEEP)
        node = _node(obj, depth, memo)
    except _Invalid as walk_error:
        exc = walk_error
        bad = _first_malformed(memo.pending)  # a malformed leaf met before the error is the first error
        if bad is not None:
            exc = _walk_to_leaf(lambda m: _node(obj, depth, m), *bad)
        raise exc.error(file, where) from None
    bad = _add_leaves(memo)
    if bad is not None:
        raise _walk_to_leaf(lambda m: _node(obj, depth, m), *bad).error(file, where)
    cols = memo.cols
    cols.finish()
    return fill_column_leaves(node, (leaf_view(cols, i) for i in range(len(cols))))  # type: ignore[return-value]


#: JSON types of an entry's known fields (msprobe 1.x-26.x always writes these shapes); null is allowed too.
_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "input_args": (list, "a list"),
    "input": (list, "a list"),
    "output": (list, "a list"),
    "input_kwargs": (dict, "an object"),
    "parameters": (dict, "an object"),
    "buffers": (dict, "an object"),
    "buffers_before": (dict, "an object"),
}


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``"object"``, ``"array"``, ``"string"``, ``"number"``...)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def _entry_fields(obj: Any, memo: _Memo) -> tuple[tuple[str, Node], ...]:
    """The fields of a dump.json entry ``obj``: raises :class:`_Invalid`.  A known field of the wrong JSON type is
    named before a malformed value of any field."""
    if type(obj) is not dict:
        raise _Invalid(f"expected an object, got {type(obj).__name__}")
    wrong = _wrong_field_type(obj)
    if wrong is not None:
        raise wrong
    fields: list[tuple[str, Node]] = []
    key = ""
    try:
        for key, value in obj.items():
            fields.append((key, _node(value, 0, memo)))
    except _Invalid as exc:
        raise exc.under(f".{key}") from None
    return tuple(fields)


def _wrong_field_type(obj: dict[str, Any]) -> _Invalid | None:
    """The error of the first known field of ``obj`` whose JSON type is wrong, or None."""
    for key, value in obj.items():
        expected = _FIELD_TYPES.get(key)
        if expected is not None and value is not None and not isinstance(value, expected[0]):
            return _Invalid(f"expected {expected[1]}, got {_json_type(value)}", f".{key}")
    return None


#: Field under which a debug.json entry's value sits (msprobe names its files ``<name>.<n>.tensor.<path>.npy``).
DEBUG_FIELD = "tensor"


def _debug_fields(obj: Any, memo: _Memo) -> tuple[tuple[str, Node], ...]:
    """The one field (:data:`DEBUG_FIELD`) of a debug.json entry ``obj``: raises :class:`_Invalid`."""
    return ((DEBUG_FIELD, _node(obj, 0, memo)),)


def entries_from_json(
    data: Mapping[str, Any] | Iterable[tuple[str, Any]], file: str | Path, *, debug: bool = False
) -> tuple[Entry, ...]:
    """Build the entries of a dump.json's ``data`` object (or, with ``debug``, a debug.json's), in file order.

    Args:
        data: the parsed ``data`` object (entry name → parsed entry), or its ``(name, parsed entry)`` pairs as an
            iterable (:func:`msprobe_cmp.dump.reader.read_dump_json` parses one entry at a time: each is built and
            dropped before the next is parsed); file: the file, for messages.
        debug: build debug.json entries (:func:`debug_entry_from_json`) instead of :func:`entry_from_json`'s.

    Raises:
        DumpFormatError: naming the file and the path of the first malformed field, as :func:`entry_from_json`
            and :func:`debug_entry_from_json` do (and whatever the iterable raises).
    """
    build = _debug_fields if debug else _entry_fields
    memo = _Memo()
    cols = memo.cols
    pending = memo.pending
    layout = memo.layout
    in_columns = Entry.in_columns
    entries: list[Entry] = []
    held: list[tuple[str, Any, int]] = []  # the entries of the pending leaves: name, parsed entry, its first leaf
    name = ""
    try:
        for name, obj in data.items() if isinstance(data, Mapping) else data:
            first = len(pending)
            held.append((name, obj, first))
            entries.append(in_columns(name, layout(build(obj, memo), name), cols, len(cols) + first))
            if len(pending) >= _BATCH:
                _add_held(memo, held, build, file)
    except _Invalid as exc:
        # a malformed leaf of this entry before the error, or of an entry before it, is the first error
        _add_held(memo, held, build, file, only_check=True)
        raise exc.error(file, f"data[{name!r}]") from None
    _add_held(memo, held, build, file)
    cols.finish()
    return tuple(entries)


def _add_held(
    memo: _Memo, held: list[tuple[str, Any, int]], build: Callable[[Any, _Memo], object], file: str | Path,
    only_check: bool = False,
) -> None:
    """Add the pending leaves of ``memo`` (those of the entries ``held``: ``(name, parsed entry, its first leaf in
    memo.pending)``, in file order, whose fields ``build`` walks) to its columns (with ``only_check``, only check
    them) and forget ``held``; raises the error of the first malformed one, naming its entry and path."""
    bad = _first_malformed(memo.pending) if only_check else _add_leaves(memo)
    if bad is not None:
        k, exc = bad
        name, obj, first = next(h for h in reversed(held) if h[2] <= k)
        raise _walk_to_leaf(lambda m: build(obj, m), k - first, exc).error(file, f"data[{name!r}]")
    held.clear()


def entry_from_json(name: str, obj: Any, file: str | Path) -> Entry:
    """Build an :class:`Entry` from ``data[name]`` of a dump.json.

    Raises:
        DumpFormatError: when the entry is not a JSON object, a known field has the wrong JSON type
            (``input_args``/``input``/``output`` not a list, ``input_kwargs``/``parameters`` not an object),
            or any of its leaves is malformed.
    """
    return entries_from_json({name: obj}, file)[0]


def debug_entry_from_json(name: str, obj: Any, file: str | Path) -> Entry:
    """Build the :class:`Entry` of ``data[name]`` in a debug.json (the debug level's ``save()``).

    Its value is the saved variable itself (a tensor leaf, a scalar, a nested list/dict or null), held
    as the single field :data:`DEBUG_FIELD`: rows are ``<name>.tensor`` and ``<name>.tensor.<path>``.

    Raises:
        DumpFormatError: a malformed leaf.
    """
    return entries_from_json({name: obj}, file, debug=True)[0]


def meta_from_json(obj: dict[str, Any], file: str | Path) -> DumpMeta:
    """Build the :class:`DumpMeta` header of a dump.json (header keys other than msprobe's kept, as written, in
    :attr:`DumpMeta.extra`).

    Raises:
        DumpFormatError: when ``task`` is missing or not a string, ``level``/``framework``/``dump_data_dir`` have
            the wrong type, or another header field nests deeper than 64 levels.
    """
    task = obj.get("task")
    if not isinstance(task, str):
        raise DumpFormatError(file, "task", "missing or not a string")
    level = obj.get("level")
    if level is not None and not isinstance(level, str):
        raise DumpFormatError(file, "level", "expected a string")
    framework = obj.get("framework", "unknown")
    if not isinstance(framework, str):
        raise DumpFormatError(file, "framework", "expected a string")
    ddd = obj.get("dump_data_dir")
    if ddd is not None and not isinstance(ddd, str):
        raise DumpFormatError(file, "dump_data_dir", "expected a string or null")
    extra: list[tuple[str, object]] = []
    for k, v in obj.items():
        if k not in _META_KEYS:
            try:
                extra.append((k, _freeze(v, 0)))
            except _Invalid as exc:
                raise exc.error(file, k) from None
    return DumpMeta(task=task, level=level, framework=framework, dump_data_dir=ddd, extra=tuple(extra))


def node_to_json(node: Node) -> Any:
    """The JSON value of a node (tensor leaves in msprobe's key order)."""
    if node is None:
        return None
    if isinstance(node, Seq):
        return [node_to_json(n) for n in node.items]
    if isinstance(node, Map):
        return {k: node_to_json(v) for k, v in node.items}
    if isinstance(node, ValueLeaf):
        return {"type": node.type, "value": _thaw(node.value)}
    out: dict[str, Any] = {
        "type": node.type,
        "dtype": node.dtype,
        "shape": list(node.shape),
        "Max": (node.max),
        "Min": (node.min),
        "Mean": (node.mean),
        "Norm": (node.norm),
    }
    if node.requires_grad is not None:
        out["requires_grad"] = node.requires_grad
    if node.md5 is not None:
        out["md5"] = node.md5
    if node.data_name is not None:
        out["data_name"] = node.data_name
    for k, v in node.extra:
        out[k] = _thaw(v)
    return out


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """The JSON object of ``data[entry.name]``."""
    return {k: node_to_json(v) for k, v in entry.fields}


def meta_to_json(meta: DumpMeta) -> dict[str, Any]:
    """The header keys of a dump.json, with our format version added (msprobe ignores unknown keys)."""
    out: dict[str, Any] = {
        "task": meta.task,
        "level": meta.level,
        "framework": meta.framework,
        "dump_data_dir": meta.dump_data_dir,
    }
    for k, v in meta.extra:
        out[k] = _thaw(v)
    out.setdefault("msprobe_cmp_format", FORMAT_VERSION)
    return out
