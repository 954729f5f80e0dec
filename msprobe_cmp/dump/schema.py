"""Typed records of the dump format (frozen, slotted dataclasses of plain values).

The on-disk layout is msprobe's (docs/design.md §1).  One ``dump.json`` holds a header
(:class:`DumpMeta`) and ``data``: a mapping of entry names to :class:`Entry` records.  An
entry's fields hold nested nodes: :class:`Seq` (a JSON list), :class:`Map` (a JSON object),
:class:`TensorLeaf` (a tensor's summary), :class:`ValueLeaf` (a non-tensor argument such as
``{"type": "int", "value": 3}``) or ``None`` (JSON ``null``: no data, e.g. the gradient of an
input that needs none).

Everything here is immutable and framework-free; conversion from and to JSON lives in
:mod:`msprobe_cmp.dump.serde`.  The records are built through their constructors and have ``__slots__`` (no
per-instance ``__dict__``): a 100k-entry dump holds 300k tensor leaves, ~230 bytes each with their statistics.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Union

#: Format version our writer stamps into dump.json as ``msprobe_cmp_format`` (msprobe ignores the key).
FORMAT_VERSION = 1

#: Leaf ``type`` strings that denote tensors (msprobe 1.x–26.x, MindSpore, PyTorch, mindtorch, numpy).
TENSOR_TYPES = frozenset(
    {
        "mindspore.Tensor",
        "mindspore.Parameter",
        "mindspore.common.tensor.Tensor",
        "mindspore._c_expression.Tensor",
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "numpy.ndarray",
    }
)

#: The four statistics msprobe writes for every tensor, in order, as they are spelled in dump.json.
STAT_KEYS = ("Max", "Min", "Mean", "Norm")

#: Extra leaf fields our recorder adds (msprobe's reader ignores them): counts of NaN, +Inf and -Inf.
NONFINITE_COUNT_KEYS = ("nan_count", "pos_inf_count", "neg_inf_count")

#: Extra dump.json header field our recorder adds: what could not be captured, as a list of
#: ``{"what": ..., "reason": ...}`` objects.
NOT_CAPTURED_KEY = "not_captured"

#: Extra dump.json header field our recorder adds: one id per recording (``PrecisionDebugger``) and process, the same
#: in every step it writes, so that steps of two recordings mixed in one ``dump_path`` can be told apart.
RECORDING_KEY = "recording"

#: A ``not_captured`` item with this ``what`` declares that no backward and no parameters_grad entry of the step
#: could be captured (e.g. mindtorch on CPU, whose ``Tensor.backward()`` computes nothing): the comparator then
#: classes the other side's backward rows ``not_captured`` instead of ``only_in_b``/``only_in_a``.
NOT_CAPTURED_BACKWARD = "backward"
#: A ``not_captured`` item with this ``what`` marks a step flushed while still being recorded (incomplete).
NOT_CAPTURED_STEP = "step"

#: Entry fields that describe the call, not its data: msprobe's PyTorch dumps mark each entry
#: ``"is_recompute": false/true`` (activation recomputation).  They are not rows of a comparison.
ENTRY_FLAG_FIELDS = frozenset({"is_recompute"})


def compute_nonfinite_counts(
    extra: tuple[tuple[str, object], ...], numel: int | float
) -> tuple[int, int, int] | None:
    """``(NaN, +Inf, -Inf)`` from a leaf's extra fields (:data:`NONFINITE_COUNT_KEYS`), or None when a count is
    absent or not a non-negative integer at most ``numel`` (an integral float such as ``1.0`` is accepted;
    ``numel`` is the tensor's element count, or ``math.inf`` for counts that hold for a tensor of any size).

    The rule of :attr:`TensorLeaf.nonfinite_counts`.  A key given twice counts with its last value.
    """
    if len(extra) == 3:  # what our recorder writes: the three counts, in order, as plain ints
        (k0, n), (k1, p), (k2, m) = extra
        if (
            (k0, k1, k2) == NONFINITE_COUNT_KEYS
            and type(n) is int and type(p) is int and type(m) is int
            and 0 <= n <= numel and 0 <= p <= numel and 0 <= m <= numel
        ):
            return (n, p, m)
    values = dict(extra)
    counts: list[int] = []
    for key in NONFINITE_COUNT_KEYS:
        value = values.get(key)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # another writer's 1.0
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= numel:
            return None
        counts.append(value)
    return (counts[0], counts[1], counts[2])


class _CountsCache:
    """Base of :class:`TensorLeaf` holding one slot, ``_counts``, that is not a dataclass field: the cache of
    :attr:`TensorLeaf.nonfinite_counts` (unset until first read; not part of equality, hash or repr)."""

    __slots__ = ("_counts",)
    _counts: tuple[int, int, int] | None


_set_counts = _CountsCache.__dict__["_counts"].__set__  # the slot's own setter (the record is frozen)


@dataclass(frozen=True, slots=True)
class TensorLeaf(_CountsCache):
    """Summary of one tensor argument, as one dump.json leaf.

    Attributes:
        type: the leaf's ``type`` string (``"mindspore.Tensor"``, ``"torch.Tensor"``, ``"numpy.ndarray"``).
        dtype: the framework's spelling of the dtype (``"Float32"``, ``"BFloat16"``, ``"torch.float32"``).
        shape: the tensor's shape; ``()`` for a 0-d tensor.
        max, min, mean, norm: the statistics (``Norm`` is the L2 norm over all elements), in the
            tensor's value units; None when not computed (empty tensor, structure task).  May be NaN/±Inf.
        md5: the checksum string of msprobe's md5 summary mode (a CRC32 in 8 hex digits), if any.
        data_name: file name of the saved tensor in ``dump_tensor_data/`` (tensor task), if any.
        requires_grad: PyTorch's ``requires_grad`` when recorded (MindSpore dumps have none).
        extra: any other keys of the leaf, kept for round-tripping, as ``(key, value)`` pairs.

    Frozen, with ``__slots__`` (about 120 bytes besides the values); equality, hash and repr over the fields above.
    """

    type: str
    dtype: str
    shape: tuple[int, ...]
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None
    md5: str | None = None
    data_name: str | None = None
    requires_grad: bool | None = None
    extra: tuple[tuple[str, object], ...] = ()

    @property
    def numel(self) -> int:
        """Number of elements (1 for a 0-d tensor, 0 for an empty one)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nonfinite_counts(self) -> tuple[int, int, int] | None:
        """``(NaN, +Inf, -Inf)`` counts when the recorder wrote them (:data:`NONFINITE_COUNT_KEYS`), else None.

        None too when a count is not a non-negative integer at most :attr:`numel` (an integral float is
        accepted): such counts are not trusted (:attr:`has_invalid_nonfinite_counts`).  Worked out on first read
        (:func:`compute_nonfinite_counts`) and kept.
        """
        try:
            return self._counts
        except AttributeError:
            counts = compute_nonfinite_counts(self.extra, self.numel) if self.extra else None
            _set_counts(self, counts)
            return counts

    @property
    def has_invalid_nonfinite_counts(self) -> bool:
        """True when the leaf carries count fields that :attr:`nonfinite_counts` cannot use
        (wrong type, negative, or more than the tensor's elements)."""
        if not self.extra or self.nonfinite_counts is not None:
            return False
        return any(k in NONFINITE_COUNT_KEYS for k, _ in self.extra)

    @property
    def stats(self) -> tuple[float | None, float | None, float | None, float | None]:
        """``(max, min, mean, norm)`` in :data:`STAT_KEYS` order."""
        return (self.max, self.min, self.mean, self.norm)


def _tensor_leaf_init() -> Callable[..., None]:
    """:class:`TensorLeaf`'s ``__init__``: the dataclass's (same parameters, same defaults, every field set), with
    each field set through its slot's own setter rather than ``object.__setattr__`` (about twice as fast; a dump's
    leaves are built by the hundred thousand).  Checked against the dataclass's fields when the module loads."""
    names = ("type", "dtype", "shape", "max", "min", "mean", "norm", "md5", "data_name", "requires_grad", "extra")
    if tuple(f.name for f in fields(TensorLeaf)) != names:  # pragma: no cover - a field was added or moved
        raise AssertionError("TensorLeaf's fields changed: update _tensor_leaf_init")
    (s_type, s_dtype, s_shape, s_max, s_min, s_mean, s_norm, s_md5, s_data_name, s_requires_grad,
     s_extra) = (getattr(TensorLeaf, name).__set__ for name in names)

    def __init__(
        self: TensorLeaf, type: str, dtype: str, shape: tuple[int, ...], max: float | None = None,  # noqa: A002
        min: float | None = None, mean: float | None = None, norm: float | None = None,  # noqa: A002
        md5: str | None = None, data_name: str | None = None, requires_grad: bool | None = None,
        extra: tuple[tuple[str, object], ...] = (),
    ) -> None:
        s_type(self, type)
        s_dtype(self, dtype)
        s_shape(self, shape)
        s_max(self, max)
        s_min(self, min)
        s_mean(self, mean)
        s_norm(self, norm)
        s_md5(self, md5)
        s_data_name(self, data_name)
        s_requires_grad(self, requires_grad)
        s_extra(self, extra)

    generated = inspect.signature(TensorLeaf.__init__).parameters.values()
    if [(p.name, p.default) for p in generated] != [
        (p.name, p.default) for p in inspect.signature(__init__).parameters.values()
    ]:  # pragma: no cover
        raise AssertionError("TensorLeaf's defaults changed: update _tensor_leaf_init")
    __init__.__qualname__ = "TensorLeaf.__init__"
    return __init__


TensorLeaf.__init__ = _tensor_leaf_init()  # type: ignore[method-assign]


@dataclass(frozen=True, slots=True)
class JsonObject:
    """An arbitrary JSON object kept inside a record (e.g. an unknown leaf field), as ordered pairs."""

    items: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, slots=True)
class ValueLeaf:
    """A non-tensor argument: ``{"type": "int", "value": 3}``, a slice, a dtype, a string...

    Attributes:
        type: the value's type name as written (``"int"``, ``"float"``, ``"slice"``, ``"mindspore.dtype"``).
        value: the JSON value; lists are stored as tuples and objects as :class:`JsonObject`, so the
            record stays hashable.
    """

    type: str
    value: object


@dataclass(frozen=True, slots=True)
class Seq:
    """A JSON list of nodes (positional arguments, outputs, a nested tuple)."""

    items: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class Map:
    """A JSON object of nodes (keyword arguments, parameters), in file order."""

    items: tuple[tuple[str, Node], ...] = ()

    def get(self, key: str) -> Node:
        """The node under ``key``, or None when absent."""
        for k, v in self.items:
            if k == key:
                return v
        return None

    def keys(self) -> tuple[str, ...]:
        """The keys, in order."""
        return tuple(k for k, _ in self.items)


Node = Union[TensorLeaf, ValueLeaf, Seq, Map, None]
Leaf = Union[TensorLeaf, ValueLeaf, None]

# How an entry field is spelled in an argument path (docs/design.md §2: ".input.0", ".kwargs.dim", ...).
_FIELD_PATH = {
    "input_args": "input",
    "input_kwargs": "kwargs",
    "output": "output",
    "parameters": "parameters",
    "input": "input",
}


def iter_leaves(node: Node, path: str) -> Iterator[tuple[str, Leaf]]:
    """Flatten ``node`` depth-first into ``(arg path, leaf)`` pairs; containers add ``.<index>`` / ``.<key>``."""
    if isinstance(node, Seq):
        for i, item in enumerate(node.items):
            yield from iter_leaves(item, f"{path}.{i}")
    elif isinstance(node, Map):
        for key, item in node.items:
            yield from iter_leaves(item, f"{path}.{key}")
    else:
        yield path, node


class _LeavesCache:
    """Base of :class:`Entry` holding one slot, ``_flat``, that is not a dataclass field: the entry's flattened
    leaves (:meth:`Entry.flat`), unset until first asked for; not part of equality, hash or repr."""

    __slots__ = ("_flat",)
    _flat: tuple[tuple[str, ...], tuple[Leaf, ...]]


_set_flat = _LeavesCache.__dict__["_flat"].__set__  # the slot's own setter (the record is frozen)
@dataclass(frozen=True, slots=True)
class Entry(_LeavesCache):
    """One record of ``dump.json``'s ``data``: an API, cell or parameters_grad entry.

    Attributes:
        name: the entry name (see :mod:`msprobe_cmp.dump.naming`).
        fields: the entry's fields in file order, as ``(key, node)`` pairs:
            forward: ``input_args`` (Seq), ``input_kwargs`` (Map), ``output`` (Seq) and, for cells,
            ``parameters`` (Map) and, for PyTorch modules with buffers, ``buffers_before`` / ``buffers`` (Map);
            backward: ``input`` (gradients w.r.t. the forward outputs) and ``output``
            (gradients w.r.t. the forward inputs); parameters_grad: one ``(param name, Seq of leaves)`` each.
    """

    name: str
    fields: tuple[tuple[str, Node], ...] = ()

    @classmethod
    def forward(
        cls,
        name: str,
        input_args: Seq,
        input_kwargs: Map,
        output: Seq,
        parameters: Map | None = None,
        buffers: Map | None = None,
        buffers_before: Map | None = None,
    ) -> Entry:
        """A forward entry (API or cell); ``parameters`` only for cells.

        ``buffers`` / ``buffers_before`` (PyTorch modules only, an msprobe-cmp extension that msprobe's compare,
        which reads the four fields above, ignores): the module's own buffers after the call (BatchNorm's
        ``running_mean`` as the forward updated it, the counterpart of MindSpore's ``moving_mean`` parameter),
        and, for the buffers the call changed, their values before it.  Empty maps are left out."""
        fields: list[tuple[str, Node]] = [
            ("input_args", input_args),
            ("input_kwargs", input_kwargs),
            ("output", output),
        ]
        if parameters is not None:
            fields.append(("parameters", parameters))
        if buffers_before is not None and buffers_before.items:
            fields.append(("buffers_before", buffers_before))
        if buffers is not None and buffers.items:
            fields.append(("buffers", buffers))
        return cls(name, tuple(fields))

    @classmethod
    def backward(cls, name: str, input: Seq, output: Seq) -> Entry:  # noqa: A002 - msprobe's field names
        """A backward entry: ``input`` = grads w.r.t. forward outputs, ``output`` = grads w.r.t. forward inputs."""
        return cls(name, (("input", input), ("output", output)))

    @classmethod
    def parameters_grad(cls, name: str, grads: Sequence[tuple[str, Seq]]) -> Entry:
        """A ``<cell>.parameters_grad`` entry: ``[(param name, Seq of gradient leaves), ...]``."""
        return cls(name, tuple((p, g) for p, g in grads))

    @property
    def is_parameters_grad(self) -> bool:
        """True for ``...parameters_grad`` (and 26.x ``...parameters_grad.<k>``) entries."""
        if "parameters_grad" not in self.name:
            return False
        tokens = self.name.split(".")
        return tokens[-1] == "parameters_grad" or (len(tokens) > 1 and tokens[-2] == "parameters_grad")

    def field(self, key: str) -> Node:
        """The node of field ``key`` (``"input_args"``, ``"output"``, ...), or None when absent."""
        for k, v in self.fields:
            if k == key:
                return v
        return None

    def leaves(self) -> Iterator[tuple[str, Leaf]]:
        """All leaves with their argument paths, in file order.

        Paths: ``input.<i>`` (positional inputs, and a backward entry's ``input``), ``kwargs.<key>``,
        ``output.<i>``, ``parameters.<name>``; nested containers append ``.<index>`` or ``.<key>``.
        In a parameters_grad entry a parameter with one gradient leaf has path ``<name>``, with several
        ``<name>.<k>``.  Flags about the call rather than its data (:data:`ENTRY_FLAG_FIELDS`, e.g.
        msprobe's ``is_recompute``) are kept in :attr:`fields` but are not leaves.
        """
        paths, leaves = self.flat()
        return zip(paths, leaves, strict=True)

    def flat(self) -> tuple[tuple[str, ...], tuple[Leaf, ...]]:
        """:meth:`leaves` as two tuples of one length: the argument paths and the leaves, in file order.

        Worked out once per entry and kept (the comparator walks an entry's leaves several times; the cache is a
        slot, not a field, so equality, hashing and repr are unchanged).  The paths tuple is shared by every entry
        whose paths are the same (:func:`shared_paths`), so ``flat()[0] is other.flat()[0]`` tells two entries'
        paths equal at once; do not rely on it being so (the shared tuples are dropped past a limit).
        """
        try:
            return self._flat
        except AttributeError:
            paths: list[str] = []
            leaves: list[Leaf] = []
            if self.is_parameters_grad:
                for key, node in self.fields:
                    if isinstance(node, Seq) and len(node.items) == 1:
                        _flatten_into(paths, leaves, node.items[0], key)
                    else:
                        _flatten_into(paths, leaves, node, key)
            else:
                for key, node in self.fields:
                    if key not in ENTRY_FLAG_FIELDS:
                        _flatten_into(paths, leaves, node, _FIELD_PATH.get(key, key))
            flat = (shared_paths(tuple(paths)), tuple(leaves))
            _set_flat(self, flat)
            return flat


#: Each distinct tuple of argument paths met by :meth:`Entry.flat`, mapped to itself: entries of one kind of call
#: share one tuple (and its strings).  Cleared when it holds :data:`_SHARED_PATHS_LIMIT` tuples.
_SHARED_PATHS: dict[tuple[str, ...], tuple[str, ...]] = {}
_SHARED_PATHS_LIMIT = 65536


def shared_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The tuple equal to ``paths`` (argument paths) that :meth:`Entry.flat` shares between entries: the first one
    met since the table was last cleared, or ``paths`` itself."""
    got = _SHARED_PATHS.get(paths)
    if got is None:
        if len(_SHARED_PATHS) >= _SHARED_PATHS_LIMIT:
            _SHARED_PATHS.clear()
        got = _SHARED_PATHS[paths] = paths
    return got


#: ``(path, n) → (f"{path}.0", ..., f"{path}.{n - 1}")``, the argument paths of a list's items: they repeat from
#: entry to entry (``input.0``, ``output.0``...), so each tuple is built once and its strings shared by every leaf that
#: has them.  Lists of more than :data:`_ITEM_PATHS_LONGEST` items are not kept; cleared when it holds
#: :data:`_ITEM_PATHS_LIMIT` tuples (at most ~64M strings, in practice a few hundred short tuples).
_ITEM_PATHS: dict[tuple[str, int], tuple[str, ...]] = {}
_ITEM_PATHS_LIMIT = 65536
_ITEM_PATHS_LONGEST = 1024


def _item_paths(path: str, count: int) -> tuple[str, ...]:
    """``(f"{path}.0", ..., f"{path}.{count - 1}")``, shared through :data:`_ITEM_PATHS`."""
    paths = _ITEM_PATHS.get((path, count))
    if paths is None:
        paths = tuple(f"{path}.{i}" for i in range(count))
        if count <= _ITEM_PATHS_LONGEST:
            if len(_ITEM_PATHS) >= _ITEM_PATHS_LIMIT:
                _ITEM_PATHS.clear()
            _ITEM_PATHS[(path, count)] = paths
    return paths


def _flatten_into(paths_out: list[str], leaves_out: list[Leaf], node: Node, path: str) -> None:
    """Append the paths and the leaves of :func:`iter_leaves` of ``node`` to ``paths_out`` and ``leaves_out`` (the
    same pairs, without nested generators)."""
    if isinstance(node, Seq):
        items = node.items
        paths = _ITEM_PATHS.get((path, len(items))) or _item_paths(path, len(items))
        for i, item in enumerate(items):
            if isinstance(item, (Seq, Map)):
                _flatten_into(paths_out, leaves_out, item, paths[i])
            else:
                paths_out.append(paths[i])
                leaves_out.append(item)
    elif isinstance(node, Map):
        for key, value in node.items:
            _flatten_into(paths_out, leaves_out, value, f"{path}.{key}")
    else:
        paths_out.append(path)
        leaves_out.append(node)


@dataclass(frozen=True)
class DumpMeta:
    """Header of a dump.json.

    Attributes:
        task: ``"statistics"``, ``"tensor"``, ``"structure"``, ... as written.
        level: ``"L0"``, ``"L1"``, ``"mix"``, ``"debug"``, or None when absent.
        framework: ``"mindspore"``, ``"pytorch"``, ``"mindtorch"``, or ``"unknown"`` when absent.
        dump_data_dir: the tensor directory as the writing machine saw it (informative only; never
            used to locate files), or None.
        extra: other header keys, kept for round-tripping.
    """

    task: str
    level: str | None
    framework: str
    dump_data_dir: str | None = None
    extra: tuple[tuple[str, object], ...] = field(default=())

    @property
    def recording(self) -> str | None:
        """The id of the recording that wrote this unit (:data:`RECORDING_KEY`), or None (msprobe's, older dumps)."""
        value = dict(self.extra).get(RECORDING_KEY)
        return value if isinstance(value, str) else None

    def _not_captured_pairs(self) -> Iterator[tuple[object, object, object]]:
        """``(what, reason, item)`` of each :data:`NOT_CAPTURED_KEY` item (None where a field is absent)."""
        value = dict(self.extra).get(NOT_CAPTURED_KEY)
        if not isinstance(value, tuple):
            return
        for item in value:
            fields_ = dict(item.items) if isinstance(item, JsonObject) else {}
            yield fields_.get("what"), fields_.get("reason"), item

    @property
    def not_captured_items(self) -> dict[str, str]:
        """``what → reason`` of every :data:`NOT_CAPTURED_KEY` item that names a ``what`` (the reason may be "")."""
        return {
            what: reason if isinstance(reason, str) else ""
            for what, reason, _ in self._not_captured_pairs()
            if isinstance(what, str)
        }

    @property
    def not_captured(self) -> tuple[str, ...]:
        """What the recorder could not capture (:data:`NOT_CAPTURED_KEY`), one ``"what: reason"`` text each."""
        return tuple(
            f"{what}: {reason}" if reason is not None else str(what if what is not None else item)
            for what, reason, item in self._not_captured_pairs()
        )
