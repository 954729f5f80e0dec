"""Conversion between dump.json's JSON values and the records of :mod:`msprobe_cmp.dump.schema`.

The one place that knows how a record is spelled in JSON (docs/design.md §4).  The reader parses a file
(:func:`~msprobe_cmp.dump.reader.read_dump_json` for dump.json, one ``data`` member at a time;
:func:`~msprobe_cmp.dump.reader.read_json` for the others) and hands the values to the ``*_from_json`` functions with
the file and the JSON path of the value, so that every error names both; the writer calls the ``*_to_json`` functions.
The tensor leaves of one call (a file's entries, or one node or leaf) are added to one
:class:`~msprobe_cmp.dump.schema.LeafColumns` as they are read; the nodes hold
:data:`~msprobe_cmp.dump.schema.COLUMN_LEAF` in their place, and the entries their layout and first row.
``x_from_json(x_to_json(r)) == r`` for every record but a tensor leaf whose ``md5`` is empty or blank: that is no
checksum and reads as None.

One builder reads every value, well formed or not.  It checks each field while it builds the record and keeps
no path as it goes: a malformed field raises :class:`_Invalid` holding the path below the value that failed
(``.Max``), each enclosing list, object and entry puts its own step in front on the way out (``[0]``,
``.input_args``), and the public function turns it into a :class:`~msprobe_cmp.errors.DumpFormatError` naming
the file and the whole path (``data['X'].input_args[0].Max``).  Well-formed values pay nothing for the paths.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from msprobe_cmp.dump.schema import (
    COLUMN_LEAF,
    FORMAT_VERSION,
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


#: What :class:`_Memo` keeps of an ``extra`` of ints: its code, its NaN/Inf counts (or None) and the largest count.
_IntExtra = tuple[int, tuple[int, int, int] | None, int]


class _Memo:
    """What one file's reading builds and shares (one per file read).

    ``cols`` holds the file's tensor leaves (:class:`~msprobe_cmp.dump.schema.LeafColumns`: their ``type`` and
    ``dtype`` strings and their shapes held once).  ``int_extras`` maps an ``extra`` whose values are all ints (our
    recorder's NaN/Inf counts, mostly zeros) to its code in ``cols``, its counts and their largest: 300k leaves of a
    100k-entry dump hold a few distinct ones.  Only ints and strings are shared: for them equal means the same
    (``1``, ``1.0`` and ``True`` are equal but not the same).  ``extra_keys`` maps a tensor object's key tuple to its
    keys that are not :data:`_LEAF_KEYS` (a dump holds few distinct key tuples).  ``layouts`` maps an entry's
    fields (column leaves as :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`) to the one
    :class:`~msprobe_cmp.dump.schema.EntryLayout` of the entries that have them; ``values`` holds the ``repr`` of
    each value leaf's value built for the entry being read, which the look-up adds to the key: equal values are not
    always the same (``1``, ``1.0``, ``True``; ``0.0`` and ``-0.0``), their reprs are (msprobe's PyTorch dumps
    write ``"is_recompute": false`` in every entry, whose layouts are then shared too).
    """

    __slots__ = ("cols", "extra_keys", "int_extras", "layouts", "values")

    def __init__(self) -> None:
        self.cols = LeafColumns()
        self.extra_keys: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.int_extras: dict[tuple[tuple[str, ...], tuple[int, ...]], _IntExtra] = {}
        self.layouts: dict[tuple[object, ...], EntryLayout] = {}
        self.values: list[str] = []

    def add_keys(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        """Note and return the keys of ``keys`` (a tensor object's) that are not :data:`_LEAF_KEYS`, in order."""
        extra_keys = self.extra_keys[keys] = tuple([k for k in keys if k not in _LEAF_KEY_SET])
        return extra_keys

    def add_extra(
        self, keys: tuple[str, ...], values: tuple[int, ...]
    ) -> _IntExtra:
        """Note and return, for the ``extra`` of a tensor object with the extra keys ``keys`` whose values are the
        ints ``values``: its code in :attr:`cols`, the counts
        :func:`~msprobe_cmp.dump.schema.compute_nonfinite_counts` reads from it for a tensor of any size (or None),
        and the largest of them: they are the tensor's when it holds at least that many elements, else it has
        none."""
        extra = tuple(zip(keys, values, strict=True))
        counts = compute_nonfinite_counts(extra, math.inf)
        got = self.int_extras[(keys, values)] = (
            self.cols.extra_code_of(extra, True), counts, max(counts) if counts is not None else 0)
        return got

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


_INT = frozenset({int})


#: The fields :func:`_tensor_leaf` picks from a tensor object, in its order (an absent one is None).
_PICKED = ("dtype", "shape", "Max", "Min", "Mean", "Norm", "md5", "data_name", "requires_grad")


def _tensor_leaf(obj: dict[str, Any], type_: str, memo: _Memo) -> object:
    """Add the leaf of a tensor object to ``memo.cols`` and return :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`
    (:func:`tensor_leaf_from_json` without the file): raises :class:`_Invalid`."""
    dtype, shape, mx, mn, me, no, md5, data_name, rg = map(obj.get, _PICKED)
    if type(dtype) is not str:
        raise _Invalid(f"expected a string, got {dtype!r:.40}", ".dtype")
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
    if md5 is not None:
        if type(md5) is not str:
            raise _Invalid("expected a string", ".md5")
        md5 = md5 if md5.strip() else None  # empty or blank: no checksum (two of them never "agree")
    if data_name is not None and type(data_name) is not str:
        raise _Invalid("expected a string", ".data_name")
    if rg is not None and type(rg) is not bool:
        raise _Invalid("expected true or false", ".requires_grad")
    cols = memo.cols
    extra_code = 0
    counts: tuple[int, int, int] | None = None
    if not _LEAF_KEY_SET.issuperset(obj):  # keys other than msprobe's (our recorder's counts): kept as written
        keys = tuple(obj)
        extra_keys = memo.extra_keys.get(keys) or memo.add_keys(keys)
        values = tuple(map(obj.__getitem__, extra_keys))
        if _INT.issuperset(map(type, values)):  # only ints: shared with the leaves before (see _Memo)
            extra_code, counts, largest = memo.int_extras.get((extra_keys, values)) or memo.add_extra(
                extra_keys, values)
            if largest > numel:
                counts = None
        else:
            extra = _kept_extra(tuple(zip(extra_keys, values, strict=True)))
            extra_code = cols.extra_code_of(extra, False)
            counts = compute_nonfinite_counts(extra, numel)
    cols.append(
        type_,
        dtype,
        tuple(shape),
        mx if type(mx) is float else _stat(mx, ".Max"),
        mn if type(mn) is float else _stat(mn, ".Min"),
        me if type(me) is float else _stat(me, ".Mean"),
        no if type(no) is float else _stat(no, ".Norm"),
        md5,
        data_name,
        rg,
        extra_code,
        counts,
    )
    return COLUMN_LEAF


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
    try:
        _tensor_leaf(obj, str(obj.get("type")), memo)
    except _Invalid as exc:
        raise exc.error(file, where) from None
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
    """:func:`node_from_json` of a value at ``depth`` (at most :data:`_MAX_DEPTH`), a tensor leaf added to
    ``memo.cols`` and held as :data:`~msprobe_cmp.dump.schema.COLUMN_LEAF`: raises :class:`_Invalid`."""
    t = type(obj)
    if t is dict:
        return _object(obj, depth, memo)
    if t is list:
        if obj and depth >= _MAX_DEPTH:
            raise _Invalid(_TOO_DEEP, "[0]")
        items: list[Any] = []
        try:
            for v in obj:
                if type(v) is dict:
                    type_ = v.get("type")
                    if type(type_) is str and type_ in TENSOR_TYPES:  # the common item: a tensor leaf
                        items.append(_tensor_leaf(v, type_, memo))
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
            return _tensor_leaf(obj, type_, memo)
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
    try:
        if depth > _MAX_DEPTH:
            raise _Invalid(_TOO_DEEP)
        memo = _Memo()
        node = _node(obj, depth, memo)
    except _Invalid as exc:
        raise exc.error(file, where) from None
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
    layout = memo.layout
    in_columns = Entry.in_columns
    entries: list[Entry] = []
    name = ""
    try:
        for name, obj in data.items() if isinstance(data, Mapping) else data:
            start = len(cols)
            entries.append(in_columns(name, layout(build(obj, memo), name), cols, start))
    except _Invalid as exc:
        raise exc.error(file, f"data[{name!r}]") from None
    cols.finish()
    return tuple(entries)


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
