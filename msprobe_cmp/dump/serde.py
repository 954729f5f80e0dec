"""Conversion between dump.json's JSON values and the records of :mod:`msprobe_cmp.dump.schema`.

The one place that knows how a record is spelled in JSON (docs/design.md §4).  Readers call the
``*_from_json`` functions with the file and the JSON path of the value so every error names both;
the writer calls the ``*_to_json`` functions.  ``x_from_json(x_to_json(r)) == r`` for every record but a
tensor leaf whose ``md5`` is empty or blank: that is no checksum and reads as None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msprobe_cmp.dump.schema import (
    FORMAT_VERSION,
    TENSOR_TYPES,
    DumpMeta,
    Entry,
    JsonObject,
    Map,
    Node,
    Seq,
    TensorLeaf,
    ValueLeaf,
    compute_nonfinite_counts,
)
from msprobe_cmp.errors import DumpFormatError

_MAX_DEPTH = 64
_LEAF_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad", "md5", "data_name")
_META_KEYS = ("task", "level", "framework", "dump_data_dir", "data")


def _is_tensor_object(obj: dict[str, Any]) -> bool:
    t = obj.get("type")
    if isinstance(t, str) and t in TENSOR_TYPES:
        return True
    # Unknown tensor-like types of other tool versions: a dtype plus a shape and no "value".
    return "dtype" in obj and "shape" in obj and "value" not in obj and isinstance(t, str)


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
    objects, lists of them) and is not one.  The caller has already taken the well-formed tensor objects
    (:func:`_is_tensor_object`), so for a dict left over this means a malformed leaf."""
    if "value" in obj or ("dtype" not in obj and "shape" not in obj):
        return False
    if _holds_nodes(obj.get("dtype")) or _holds_nodes(obj.get("shape")):
        return False  # a kwargs container: msprobe writes a None kwarg ("md5": null) beside nodes
    if isinstance(obj.get("dtype"), str) and isinstance(obj.get("shape"), list):
        return True
    return _leaf_only_key(obj) is not None


def _malformed_leaf_error(obj: dict[str, Any], file: str | Path, where: str) -> DumpFormatError:
    """The error of a dict for which :func:`_is_leaf_like` holds but :func:`_is_tensor_object` does not, naming
    the first field that is wrong of ``type`` (not a string), ``dtype`` (not a string) and ``shape`` (not a
    list), and, in parentheses, the keys that make it a tensor leaf."""
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
            return DumpFormatError(file, f"{where}.{key}", f"a tensor leaf ({why}) needs {wanted}, got {got}")
    raise AssertionError("_malformed_leaf_error called on a well-formed tensor object")  # pragma: no cover


def _stat(value: Any, file: str | Path, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise DumpFormatError(file, where, "integer too large for a statistic") from None
    if isinstance(value, str):
        # Some writers stringify special values; accept the spellings float() understands.
        try:
            return float(value)
        except ValueError:
            pass
    raise DumpFormatError(file, where, f"expected a number or null, got {type(value).__name__} {value!r:.40}")


def _checksum_or_none(md5: str) -> str | None:
    """A tensor leaf's ``md5`` as read: None when it is empty or blank (no checksum, so that two of them never
    "agree" and the row counts as one without a checksum everywhere), else the string as written."""
    return md5 if md5.strip() else None


def tensor_leaf_from_json(obj: dict[str, Any], file: str | Path, where: str) -> TensorLeaf:
    """Build a :class:`TensorLeaf` from a dump.json tensor object (an empty or blank ``md5`` becomes None).

    Raises:
        DumpFormatError: when ``dtype`` is not a string, ``shape`` is not a list of non-negative
            ints, a statistic is not a number/null, or ``data_name``/``md5`` are not strings.
    """
    dtype = obj.get("dtype")
    if not isinstance(dtype, str):
        raise DumpFormatError(file, f"{where}.dtype", f"expected a string, got {dtype!r:.40}")
    shape_raw = obj.get("shape")
    if not isinstance(shape_raw, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape_raw
    ):
        raise DumpFormatError(file, f"{where}.shape", f"expected a list of non-negative ints, got {shape_raw!r:.60}")
    numel = 1
    for d in shape_raw:
        numel *= d
    if numel >= 2**63:
        raise DumpFormatError(file, f"{where}.shape", "more than 2**63 elements: too large")
    md5 = obj.get("md5")
    if md5 is not None:
        if not isinstance(md5, str):
            raise DumpFormatError(file, f"{where}.md5", "expected a string")
        md5 = _checksum_or_none(md5)
    data_name = obj.get("data_name")
    if data_name is not None and not isinstance(data_name, str):
        raise DumpFormatError(file, f"{where}.data_name", "expected a string")
    rg = obj.get("requires_grad")
    if rg is not None and not isinstance(rg, bool):
        raise DumpFormatError(file, f"{where}.requires_grad", "expected true or false")
    extra = tuple((k, _freeze(v, file, f"{where}.{k}")) for k, v in obj.items() if k not in _LEAF_KEYS)
    return TensorLeaf(
        type=str(obj.get("type")),
        dtype=dtype,
        shape=tuple(shape_raw),
        max=_stat(obj.get("Max"), file, f"{where}.Max"),
        min=_stat(obj.get("Min"), file, f"{where}.Min"),
        mean=_stat(obj.get("Mean"), file, f"{where}.Mean"),
        norm=_stat(obj.get("Norm"), file, f"{where}.Norm"),
        md5=md5,
        data_name=data_name,
        requires_grad=rg,
        extra=extra,
    )


def _freeze(value: Any, file: str | Path, where: str, depth: int = 0) -> object:
    """JSON value → hashable plain value (lists become tuples, objects become :class:`JsonObject`).

    Raises:
        DumpFormatError: on nesting deeper than 64 levels (an explicit limit: the interpreter's
            recursion limit varies, MindSpore raises it to 10,000 on import).
    """
    if depth > _MAX_DEPTH:
        raise DumpFormatError(file, where, f"nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, list):
        return tuple(_freeze(v, file, where, depth + 1) for v in value)
    if isinstance(value, dict):
        return JsonObject(tuple((str(k), _freeze(v, file, where, depth + 1)) for k, v in value.items()))
    return value


def _thaw(value: object) -> Any:
    """Inverse of :func:`_freeze`."""
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, JsonObject):
        return {k: _thaw(v) for k, v in value.items}
    return value


def node_from_json(obj: Any, file: str | Path, where: str, depth: int = 0) -> Node:
    """Build a node (leaf or container) from any JSON value of an entry field.

    Raises:
        DumpFormatError: on nesting deeper than 64 levels or a malformed tensor leaf, including an object that is
            unmistakably one (:func:`_is_leaf_like`: no ``value``, and a string ``dtype`` with a list ``shape``,
            or a ``dtype``/``shape`` key with a scalar or null statistic, ``data_name`` or ``md5``) but has no
            string ``type``, no string ``dtype`` or no list ``shape`` (the message names the first of these).
    """
    if depth > _MAX_DEPTH:
        raise DumpFormatError(file, where, f"nested deeper than {_MAX_DEPTH} levels")
    if obj is None:
        return None
    if isinstance(obj, list):
        return Seq(tuple(node_from_json(v, file, f"{where}[{i}]", depth + 1) for i, v in enumerate(obj)))
    if isinstance(obj, dict):
        if _is_tensor_object(obj):
            return tensor_leaf_from_json(obj, file, where)
        if _is_leaf_like(obj):
            raise _malformed_leaf_error(obj, file, where)
        if "type" in obj and "value" in obj and isinstance(obj["type"], str) and len(obj) == 2:
            return ValueLeaf(obj["type"], _freeze(obj["value"], file, f"{where}.value", depth))
        return Map(tuple((str(k), node_from_json(v, file, f"{where}.{k}", depth + 1)) for k, v in obj.items()))
    # A bare scalar where a node is expected: keep it as a value of its JSON type.
    if isinstance(obj, bool):
        return ValueLeaf("bool", obj)
    if isinstance(obj, int):
        return ValueLeaf("int", obj)
    if isinstance(obj, float):
        return ValueLeaf("float", obj)
    return ValueLeaf("str", str(obj))


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


def entry_from_json(name: str, obj: Any, file: str | Path) -> Entry:
    """Build an :class:`Entry` from ``data[name]`` of a dump.json.

    Raises:
        DumpFormatError: when the entry is not a JSON object, a known field has the wrong JSON type
            (``input_args``/``input``/``output`` not a list, ``input_kwargs``/``parameters`` not an object),
            or any of its leaves is malformed.
    """
    if type(obj) is dict:
        try:
            return _fast_entry(name, obj)
        except _Unusual:
            pass  # the general path below builds it again, or raises the error naming the field
    where = f"data[{name!r}]"
    if not isinstance(obj, dict):
        raise DumpFormatError(file, where, f"expected an object, got {type(obj).__name__}")
    for key, value in obj.items():
        expected = _FIELD_TYPES.get(key)
        if expected is not None and value is not None and not isinstance(value, expected[0]):
            raise DumpFormatError(file, f"{where}.{key}", f"expected {expected[1]}, got {_json_type(value)}")
    fields = tuple((str(k), node_from_json(v, file, f"{where}.{k}")) for k, v in obj.items())
    return Entry(name, fields)


def entries_from_json_fast(data: dict[str, Any]) -> tuple[Entry, ...] | None:
    """The entries of dump.json's ``data`` object when every one of them is well formed (the common case), built
    without the error-path bookkeeping; None as soon as one entry is not (the caller then parses the file the
    general way, which gives the same records or the error naming the field).

    Stricter than :func:`entry_from_json`'s own fast path in one respect: an integral float of magnitude
    ``>= 2**63`` where a value is kept as written (a non-tensor value, a leaf's extra field) gives None, since a
    parser that reads integer literals beyond 64 bits as floats (orjson) may have produced it.
    """
    try:
        return tuple([_fast_entry(name, obj) for name, obj in data.items()])
    except _Unusual:
        return None


class _Unusual(Exception):
    """Raised by the fast path of :func:`entry_from_json` on anything it does not handle itself: the entry
    is then built again by the general path, which gives the same record or the same error."""


_SCALARS = (str, int, float, bool, type(None))
_LEAF_KEY_SET = frozenset(_LEAF_KEYS)
_BIG = float(2**63)
_new = object.__new__


def _fast_entry(name: str, obj: Any) -> Entry:
    if type(obj) is not dict:
        raise _Unusual
    fields: list[tuple[str, Node]] = []
    for key, value in obj.items():
        expected = _FIELD_TYPES.get(key)
        if expected is not None and value is not None and not isinstance(value, expected[0]):
            raise _Unusual
        fields.append((key, _fast_node(value, 0)))
    entry = _new(Entry)
    entry.__dict__.update(name=name, fields=tuple(fields))
    return entry


def _kept_scalar(value: Any) -> Any:
    """``value`` when it is a JSON scalar kept as written; :class:`_Unusual` otherwise, and for an integral float
    of magnitude >= 2**63 (possibly an integer literal a 64-bit parser turned into a float)."""
    t = type(value)
    if t is float:
        if value.is_integer() and abs(value) >= _BIG:
            raise _Unusual
        return value
    if t not in _SCALARS:
        raise _Unusual
    return value


def _fast_stat(value: Any) -> float | None:
    t = type(value)
    if value is None or t is float:
        return value
    if t is int:
        try:
            return float(value)
        except OverflowError:
            raise _Unusual from None
    raise _Unusual


#: The keys, in order, of a statistics leaf as our recorder writes it (``node_to_json``): the common leaf.
_OUR_LEAF_KEYS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "nan_count", "pos_inf_count",
                  "neg_inf_count")


def _plain_numel(shape: list[Any]) -> int | None:
    """The element count of a shape list whose dims are all non-negative ``int`` (not bool) with a product below
    ``2**63``; None for any other shape (the caller then leaves the leaf to a slower path)."""
    numel = 1
    for d in shape:
        if type(d) is not int or d < 0:
            return None
        numel *= d
    return numel if numel < 2**63 else None


def _our_tensor_leaf(obj: dict[str, Any], type_: str) -> TensorLeaf | None:
    """:func:`_fast_tensor_leaf` of a leaf whose keys are :data:`_OUR_LEAF_KEYS` in that order, when its values
    are plain (string dtype, list of non-negative int dims, float statistics, int counts within the element
    count); None otherwise (the caller then takes the general fast path, which gives the same leaf or raises)."""
    _, dtype, shape, mx, mn, me, no, n, p, m = obj.values()
    if type(dtype) is not str or type(shape) is not list:
        return None
    if not (type(mx) is float and type(mn) is float and type(me) is float and type(no) is float):
        return None
    numel = _plain_numel(shape)
    if numel is None:
        return None
    if not (type(n) is int and type(p) is int and type(m) is int and 0 <= n <= numel and 0 <= p <= numel
            and 0 <= m <= numel):
        return None
    leaf = _new(TensorLeaf)
    leaf.__dict__.update({
        "type": type_, "dtype": dtype, "shape": tuple(shape), "max": mx, "min": mn, "mean": me, "norm": no,
        "md5": None, "data_name": None, "requires_grad": None,
        "extra": (("nan_count", n), ("pos_inf_count", p), ("neg_inf_count", m)), "nonfinite_counts": (n, p, m),
    })
    return leaf


def _fast_tensor_leaf(obj: dict[str, Any], type_: str) -> TensorLeaf:
    """:func:`tensor_leaf_from_json` for a well-formed leaf (plain statistics and scalar extra fields), without
    building the error-message paths; anything else raises :class:`_Unusual`.  The leaf's NaN/Inf counts
    (:attr:`TensorLeaf.nonfinite_counts`) are computed here, once."""
    if len(obj) == 10 and tuple(obj) == _OUR_LEAF_KEYS:
        leaf = _our_tensor_leaf(obj, type_)
        if leaf is not None:
            return leaf
    get = obj.get
    dtype = get("dtype")
    shape = get("shape")
    if type(dtype) is not str or type(shape) is not list:
        raise _Unusual
    numel = _plain_numel(shape)
    if numel is None:
        raise _Unusual
    md5 = get("md5")
    data_name = get("data_name")
    rg = get("requires_grad")
    if (md5 is not None and type(md5) is not str) or (data_name is not None and type(data_name) is not str) or (
        rg is not None and type(rg) is not bool
    ):
        raise _Unusual
    if md5 is not None:
        md5 = _checksum_or_none(md5)
    mx, mn, me, no = get("Max"), get("Min"), get("Mean"), get("Norm")
    if type(mx) is not float:
        mx = _fast_stat(mx)
    if type(mn) is not float:
        mn = _fast_stat(mn)
    if type(me) is not float:
        me = _fast_stat(me)
    if type(no) is not float:
        no = _fast_stat(no)
    leaf = _new(TensorLeaf)
    if obj.keys() <= _LEAF_KEY_SET:
        leaf.__dict__.update({
            "type": type_, "dtype": dtype, "shape": tuple(shape), "max": mx, "min": mn, "mean": me, "norm": no,
            "md5": md5, "data_name": data_name, "requires_grad": rg, "extra": (), "nonfinite_counts": None,
        })
        return leaf
    pairs = []
    for k, v in obj.items():
        if k not in _LEAF_KEY_SET:
            tv = type(v)
            if tv is float:
                if v.is_integer() and abs(v) >= _BIG:
                    raise _Unusual  # see _kept_scalar
            elif not (tv is int or tv is str or tv is bool or v is None):
                raise _Unusual
            pairs.append((k, v))
    extra = tuple(pairs)
    counts: tuple[int, int, int] | None = None
    if len(extra) == 3 and extra[0][0] == "nan_count" and extra[1][0] == "pos_inf_count" and (
        extra[2][0] == "neg_inf_count"
    ):  # our recorder's three counts, in its order: compute_nonfinite_counts' rule for plain ints
        n, p, m = extra[0][1], extra[1][1], extra[2][1]
        if type(n) is int and type(p) is int and type(m) is int and 0 <= n <= numel and 0 <= p <= numel and (
            0 <= m <= numel
        ):
            counts = (n, p, m)
        else:
            counts = compute_nonfinite_counts(extra, numel)
    else:
        counts = compute_nonfinite_counts(extra, numel)
    leaf.__dict__.update({
        "type": type_, "dtype": dtype, "shape": tuple(shape), "max": mx, "min": mn, "mean": me, "norm": no,
        "md5": md5, "data_name": data_name, "requires_grad": rg, "extra": extra, "nonfinite_counts": counts,
    })
    return leaf


def _fast_node(obj: Any, depth: int) -> Node:
    """:func:`node_from_json` for the common, well-formed case; raises :class:`_Unusual` otherwise."""
    if depth > _MAX_DEPTH:
        raise _Unusual
    if obj is None:
        return None
    t = type(obj)
    if t is list:
        if depth >= _MAX_DEPTH:
            raise _Unusual  # its elements would be too deep (the general path says so, or builds it)
        items: list[Node] = []
        for v in obj:
            if type(v) is dict:
                type_ = v.get("type")
                if type(type_) is str and type_ in TENSOR_TYPES:  # the common element: a tensor leaf
                    items.append(_fast_tensor_leaf(v, type_))
                    continue
            items.append(_fast_node(v, depth + 1))
        seq = _new(Seq)
        seq.__dict__["items"] = tuple(items)
        return seq
    if t is dict:
        type_ = obj.get("type")
        if type(type_) is str:
            if type_ in TENSOR_TYPES:
                return _fast_tensor_leaf(obj, type_)
            if "dtype" in obj and "shape" in obj and "value" not in obj:
                raise _Unusual
            if len(obj) == 2 and "value" in obj:
                return ValueLeaf(type_, _kept_scalar(obj["value"]))
        if ("dtype" in obj or "shape" in obj) and "value" not in obj and _is_leaf_like(obj):
            raise _Unusual  # a malformed tensor leaf: the general path names the field
        map_ = _new(Map)
        map_.__dict__["items"] = tuple([(k, _fast_node(v, depth + 1)) for k, v in obj.items()])
        return map_
    if t is bool:
        return ValueLeaf("bool", obj)
    if t is int:
        return ValueLeaf("int", obj)
    if t is float:
        return ValueLeaf("float", _kept_scalar(obj))
    if t is str:
        return ValueLeaf("str", obj)
    raise _Unusual


#: Field under which a debug.json entry's value sits (msprobe names its files ``<name>.<n>.tensor.<path>.npy``).
DEBUG_FIELD = "tensor"


def debug_entry_from_json(name: str, obj: Any, file: str | Path) -> Entry:
    """Build the :class:`Entry` of ``data[name]`` in a debug.json (the debug level's ``save()``).

    Its value is the saved variable itself (a tensor leaf, a scalar, a nested list/dict or null), held
    as the single field :data:`DEBUG_FIELD`: rows are ``<name>.tensor`` and ``<name>.tensor.<path>``.

    Raises:
        DumpFormatError: a malformed leaf.
    """
    return Entry(name, ((DEBUG_FIELD, node_from_json(obj, file, f"data[{name!r}]")),))


def meta_from_json(obj: dict[str, Any], file: str | Path) -> DumpMeta:
    """Build the :class:`DumpMeta` header of a dump.json.

    Raises:
        DumpFormatError: when ``task`` is missing or not a string, or ``level``/``framework``/
            ``dump_data_dir`` have the wrong type.
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
    extra = tuple((k, _freeze(v, file, k)) for k, v in obj.items() if k not in _META_KEYS)
    return DumpMeta(task=task, level=level, framework=framework, dump_data_dir=ddd, extra=extra)


def meta_from_json_fast(obj: dict[str, Any]) -> DumpMeta | None:
    """:func:`meta_from_json` of a header that is well formed, or None (the caller then reads the file the
    general way).  None too when an extra header field holds an integral float of magnitude ``>= 2**63``
    (see :func:`entries_from_json_fast`) or is nested deeper than 64 levels."""
    try:
        for k, v in obj.items():
            if k not in _META_KEYS:
                _check_kept(v, 0)
        return meta_from_json(obj, "-")
    except (_Unusual, DumpFormatError):
        return None


def _check_kept(value: Any, depth: int) -> None:
    """Raise :class:`_Unusual` when ``value`` holds an integral float >= 2**63 in magnitude or nests deeper
    than :data:`_MAX_DEPTH`."""
    if depth > _MAX_DEPTH:
        raise _Unusual
    if type(value) is list:
        for v in value:
            _check_kept(v, depth + 1)
    elif type(value) is dict:
        for v in value.values():
            _check_kept(v, depth + 1)
    elif type(value) is float:
        _kept_scalar(value)


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
