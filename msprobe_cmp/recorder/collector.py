"""Turn host values into dump records: statistics, saved tensors, checksums, non-tensor leaves.

The framework adapter converts framework objects at the boundary (a tensor becomes a
:class:`HostTensor` holding a numpy copy and the framework's dtype spelling; a dtype object
becomes a :class:`~msprobe_cmp.dump.schema.ValueLeaf`); everything else here is numpy and plain
Python, with no framework import.

Statistics (:func:`compute_stats`) are reduced in float64 from the very array that the tensor
task saves, so a statistics recording and numpy's statistics of the saved ``.npy`` agree to
float64 rounding.

``async_dump``: the adapter may return a :class:`DeferredTensor` instead of a :class:`HostTensor`:
its summary (or, in the tensor task, a copy of its values) stays on the device.  The collector
then hands out a :class:`PendingTensorLeaf` placeholder and keeps the device value;
:meth:`Collector.resolve_pending` fetches every pending value with as few host transfers as the
adapter's :class:`DeviceFetcher` manages (one for all statistics vectors), and
:meth:`Collector.substitute` swaps placeholders for the finished leaves.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from msprobe_cmp.dump.naming import tensor_file_name
from msprobe_cmp.dump.schema import (
    NONFINITE_COUNT_KEYS,
    Entry,
    LeafColumns,
    Map,
    Node,
    Seq,
    TensorLeaf,
    TensorLeafFields,
    ValueLeaf,
    dataclass_fields_of,
    leaf_view,
)
from msprobe_cmp.dump.writer import DumpWriter
from msprobe_cmp.recorder.reduction import kernel_values, reduce_values

#: Containers nested deeper than this are written as null (msprobe stops at the same depth).
MAX_DEPTH = 10


@dataclass(frozen=True)
class HostTensor:
    """A framework tensor copied to host memory.

    Attributes:
        array: the values as a numpy array of the tensor's shape.  Its numpy dtype can hold every value
            exactly (bfloat16 arrives as float32, since the adapter upcasts on device first).
        dtype: the framework's spelling of the tensor's own dtype (``"Float32"``, ``"BFloat16"``).
        type: the leaf ``type`` string written to dump.json (``"mindspore.Tensor"``, ``"torch.Tensor"``).
        requires_grad: the tensor's ``requires_grad`` flag (PyTorch leaves carry it), or None (not written).
    """

    array: np.ndarray
    dtype: str
    type: str = "mindspore.Tensor"
    requires_grad: bool | None = None


#: The values of a device statistics vector (:attr:`DeferredTensor.stats`), in order, all float64:
#: max, min, sum, sum of squares, and the NaN / +Inf / -Inf element counts.
DEVICE_STAT_FIELDS = ("max", "min", "sum", "sum_sq", "nan_count", "pos_inf_count", "neg_inf_count")


@dataclass(frozen=True, eq=False)
class DeferredTensor:
    """A framework tensor whose summary stays on the device until the step is flushed (``async_dump``).

    Exactly one of ``stats`` and ``copy`` is set, except for an empty tensor (neither).

    Attributes:
        dtype: the framework's spelling of the tensor's dtype.
        shape: the tensor's shape.
        stats: an opaque device vector of :data:`DEVICE_STAT_FIELDS` (statistics task).
        copy: an opaque device copy of the values (tensor task), fetched and summarised like a
            :class:`HostTensor` at flush.
        type: the leaf ``type`` string.
        requires_grad: as :attr:`HostTensor.requires_grad`.
    """

    dtype: str
    shape: tuple[int, ...]
    stats: object | None = None
    copy: object | None = None
    type: str = "mindspore.Tensor"
    requires_grad: bool | None = None


class DeviceFetcher(Protocol):
    """How the adapter brings deferred device values to the host (at flush, never during a step)."""

    def fetch_stats(self, vectors: Sequence[object]) -> np.ndarray:
        """The statistics vectors as one float64 array ``[len(vectors), len(DEVICE_STAT_FIELDS)]``."""
        ...

    def fetch_copy(self, copy: object) -> np.ndarray:
        """The values of one device copy as a numpy array (bfloat16 decoded, as for a HostTensor)."""
        ...


class PendingTensorLeaf(TensorLeaf):
    """A tensor leaf whose numbers are still on the device (``async_dump``).

    Written as a leaf with null statistics if it is never resolved; :meth:`Collector.substitute`
    replaces it by the finished :class:`~msprobe_cmp.dump.schema.TensorLeaf`.  Built as a tensor leaf (its fields)
    and ``token``, keyword only.

    Attributes:
        token: identifies the deferred value within the collector.
    """

    __slots__ = ("token",)
    token: int

    def __init__(self, *args: Any, token: int = -1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "token", token)

    def _key(self) -> tuple[object, ...]:
        return (*super()._key(), self.token)

    def _names(self) -> tuple[str, ...]:
        return (*super()._names(), "token")

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (_pending_leaf, (super()._key(), self.token))


@dataclass(frozen=True)
class _PendingTensorLeafFields(TensorLeafFields):
    """The fields of :class:`PendingTensorLeaf` as a dataclass's (``dataclasses.replace`` keeps ``token``)."""

    token: int = -1


dataclass_fields_of(PendingTensorLeaf, _PendingTensorLeafFields)


def _pending_leaf(fields: tuple[object, ...], token: int) -> PendingTensorLeaf:
    """An unpickled :class:`PendingTensorLeaf`."""
    return PendingTensorLeaf(*fields, token=token)


#: Adapter callback: a framework object → HostTensor / DeferredTensor / ValueLeaf, or None when it is not
#: recognised (written as null).  Called only for objects that are not plain Python / numpy values.
LeafConverter = Callable[[object], "HostTensor | DeferredTensor | ValueLeaf | None"]

#: Adapter callback: a framework tensor → its *stamp*, a hashable value that changes whenever the tensor's values,
#: dtype, shape, layout or ``requires_grad`` may have changed (PyTorch: its version counter, data pointer, shape,
#: strides, dtype and ``requires_grad``), or None when the adapter cannot tell (the tensor is then read every time).
TensorStamp = Callable[[object], "Hashable | None"]


def summarize(
    array: np.ndarray,
) -> tuple[tuple[float | None, float | None, float | None, float | None], tuple[int, int, int]]:
    """:func:`compute_stats` and :func:`compute_nonfinite_counts` of ``array`` in one pass over its values.

    Max, Min, the sum and the sum of squares come from one compiled loop over the values, read in place
    (:func:`~msprobe_cmp.recorder.reduction.reduce_values`; its numerics: exact extremes, float64 sums in blocks);
    Mean = sum / numel and Norm = sqrt(sum of squares).  The non-finite element counts are (0, 0, 0) without a
    scan when Max and Min are finite (a NaN or ±Inf element makes one of them non-finite); otherwise they are
    counted, and a NaN element makes all four statistics NaN (numpy's convention).  Complex values: statistics of
    their moduli.

    Returns:
        ``((max, min, mean, norm), (nan_count, pos_inf_count, neg_inf_count))``: Python floats in the tensor's
        value units (None for an empty array) and element counts.
    """
    if array.size == 0:
        return (None, None, None, None), (0, 0, 0)
    values = kernel_values(np.abs(array) if np.iscomplexobj(array) else array)
    mx, mn, total, squares = reduce_values(values)
    if math.isfinite(mx) and math.isfinite(mn):
        return (mx, mn, total / values.size, math.sqrt(squares)), (0, 0, 0)
    counts = compute_nonfinite_counts(array)
    if counts[0]:
        return (math.nan, math.nan, math.nan, math.nan), counts
    return (mx, mn, total / values.size, math.sqrt(squares)), counts


def compute_stats(array: np.ndarray) -> tuple[float | None, float | None, float | None, float | None]:
    """Max, Min, Mean and Norm (L2 norm over all elements) of ``array``, reduced in float64.

    * Empty array → ``(None, None, None, None)``.
    * Complex → statistics of ``abs(array)`` (msprobe's convention).
    * bool and integers are converted to float (True = 1.0), so Mean and Norm are defined.
    * A NaN element makes all four NaN; ±Inf propagates into those it reaches (IEEE rules: +Inf and -Inf
      together give a NaN Mean).

    Mean is the float64 sum over the element count and Norm = sqrt(sum(x**2)), the sums taken in float64 blocks
    (:mod:`~msprobe_cmp.recorder.reduction`: ~1e-16 relative of numpy's pairwise float64 sums).

    Args:
        array: any numeric numpy array (float16/32/64, ml_dtypes bfloat16, ints, bool, complex).

    Returns:
        Python floats in the tensor's value units.
    """
    return summarize(array)[0]


#: Names of the non-finite counts each tensor leaf carries (the dump contract's NONFINITE_COUNT_KEYS).
NONFINITE_KEYS = NONFINITE_COUNT_KEYS


def compute_nonfinite_counts(array: np.ndarray) -> tuple[int, int, int]:
    """Counts of NaN, +Inf and -Inf elements of ``array`` (element counts, not fractions).

    Integer and bool arrays hold no non-finite values (``(0, 0, 0)`` without a scan); a complex
    element counts as NaN when either part is NaN, and as +Inf when its modulus is infinite
    (the same ``abs()`` convention as :func:`compute_stats`).
    """
    if array.size == 0 or array.dtype.kind in "biu":
        return (0, 0, 0)
    values = np.abs(array) if np.iscomplexobj(array) else np.asarray(array, dtype=np.float64)
    nan = int(np.count_nonzero(np.isnan(values)))
    pos = int(np.count_nonzero(np.isposinf(values)))
    neg = int(np.count_nonzero(np.isneginf(values)))
    return (nan, pos, neg)


def compute_crc32(array: np.ndarray) -> str:
    """msprobe's ``md5`` summary: a CRC32 of the array's C-order bytes, as 8 lowercase hex digits."""
    data = np.ascontiguousarray(array).tobytes()
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


def _json_scalar(value: object) -> object:
    # Plain JSON scalars pass; anything else is spelled as a string so dump.json stays valid.
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    return str(value)


def _slice_member(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def leaf_from_stat_row(deferred: DeferredTensor, row: Sequence[float]) -> TensorLeaf:
    """The finished leaf of a deferred tensor from its fetched :data:`DEVICE_STAT_FIELDS` row.

    Follows :func:`compute_stats` / :func:`compute_nonfinite_counts` exactly: Mean = sum / numel,
    Norm = sqrt(sum of squares), and any NaN element makes all four statistics NaN (a device max/min
    may skip NaN; numpy's does not).  No ``md5``: the values never reach the host.
    """
    mx, mn, total, sum_sq, nan, pos, neg = (float(v) for v in row)
    numel = math.prod(deferred.shape)
    counts = (int(nan), int(pos), int(neg))
    if numel == 0:
        stats: tuple[float | None, ...] = (None, None, None, None)
    elif counts[0] > 0:
        stats = (math.nan,) * 4
    else:
        stats = (mx, mn, total / numel, math.sqrt(sum_sq) if sum_sq >= 0 else math.nan)
    return TensorLeaf(
        type=deferred.type,
        dtype=deferred.dtype,
        shape=deferred.shape,
        max=stats[0],
        min=stats[1],
        mean=stats[2],
        norm=stats[3],
        requires_grad=deferred.requires_grad,
        extra=tuple(zip(NONFINITE_KEYS, counts, strict=True)),
    )


@dataclass(frozen=True)
class _Pending:
    leaf: PendingTensorLeaf
    deferred: DeferredTensor
    writer: DumpWriter | None
    entry_name: str
    arg_path: str


class Collector:
    """Builds :mod:`~msprobe_cmp.dump.schema` nodes from host values, saving tensors when asked.

    Args:
        convert: the adapter's :data:`LeafConverter` for framework objects.
        save_tensors: tensor task: save every tensor to ``dump_tensor_data/`` and set ``data_name``.
        checksum: md5 summary mode: add msprobe's CRC32 ``md5`` field to every tensor leaf (not to
            deferred statistics, whose values never reach the host).
        fetcher: brings :class:`DeferredTensor` values to the host (needed when the converter returns them).
        tensor_types: the framework's tensor classes: their instances go to ``convert`` at once (most collected
            values are tensors; the other types are tested first otherwise).
        stamp: the adapter's :data:`TensorStamp`.  With it, a tensor collected again while the same stamp holds
            (the same object, between two :meth:`forget_reads`) gets the leaf of its first read: an API's output
            is often its module's output, the next API's input and, in the backward, a gradient of several hooks
            (BERT tiny: 649 tensor leaves a step, 226 distinct tensors).  Never in the tensor task, where each
            entry saves a file of its own.

    Not thread-safe; one instance per recorder.
    """

    def __init__(
        self,
        convert: LeafConverter,
        *,
        save_tensors: bool = False,
        checksum: bool = False,
        fetcher: DeviceFetcher | None = None,
        tensor_types: tuple[type, ...] = (),
        stamp: TensorStamp | None = None,
    ) -> None:
        self._convert = convert
        self._tensor_types = tensor_types
        self._stamp = None if save_tensors else stamp
        # id(tensor) → (weak reference to it, its stamp, its leaf): the reads since the last forget_reads()
        self._reads: dict[int, tuple[weakref.ref[Any], Hashable, TensorLeaf]] = {}
        self.save_tensors = save_tensors
        self.checksum = checksum
        self._fetcher = fetcher
        self._pending: list[_Pending] = []
        self._resolved: dict[int, TensorLeaf] = {}
        self._next_token = 0
        self._pending_elements = 0
        self._leaves = LeafColumns()

    def start_step(self) -> None:
        """Give the next step's tensor leaves columns of their own (:meth:`tensor_leaf`), so that a step's leaves
        are freed with its entries; forget the reads (:meth:`forget_reads`)."""
        self._leaves = LeafColumns()
        self.forget_reads()

    def forget_reads(self) -> None:
        """Read every tensor anew from now on (the recorder calls it at ``stop()`` and at each step: outside a
        recording window the user may change a tensor in ways its stamp does not show)."""
        self._reads.clear()

    # ----------------------------------------------------------------- deferred (async_dump) leaves

    @property
    def pending_count(self) -> int:
        """Number of deferred values not yet fetched."""
        return len(self._pending)

    @property
    def pending_copy_elements(self) -> int:
        """Elements held by deferred device copies not yet fetched (what they cost in device memory)."""
        return self._pending_elements

    @property
    def deferred_in_step(self) -> bool:
        """True once a placeholder was handed out since :meth:`reset_deferred` (entries may hold some)."""
        return bool(self._pending or self._resolved)

    def deferred_leaf(
        self, deferred: DeferredTensor, *, writer: DumpWriter | None, entry_name: str, arg_path: str
    ) -> TensorLeaf:
        """A placeholder for ``deferred`` (or the finished leaf of an empty tensor, which needs no fetch)."""
        if deferred.stats is None and deferred.copy is None:
            return TensorLeaf(
                type=deferred.type,
                dtype=deferred.dtype,
                shape=deferred.shape,
                requires_grad=deferred.requires_grad,
                extra=tuple((k, 0) for k in NONFINITE_KEYS),
            )
        token = self._next_token
        self._next_token += 1
        leaf = PendingTensorLeaf(
            type=deferred.type,
            dtype=deferred.dtype,
            shape=deferred.shape,
            requires_grad=deferred.requires_grad,
            token=token,
        )
        self._pending.append(_Pending(leaf, deferred, writer, entry_name, arg_path))
        if deferred.copy is not None:
            self._pending_elements += math.prod(deferred.shape)
        return leaf

    def resolve_pending(self) -> int:
        """Fetch every pending value (all statistics vectors in one batch, then the tensor task's copies).

        The device references are dropped whatever happens; a placeholder whose value could not be
        fetched stays unresolved and :meth:`substitute` writes it with null statistics.

        Returns:
            The number of placeholders resolved.

        Raises:
            Exception: whatever the fetcher raised (the caller decides how to report it).
        """
        pending, self._pending = self._pending, []
        self._pending_elements = 0
        if not pending:
            return 0
        if self._fetcher is None:
            raise RuntimeError("deferred tensors were collected but no device fetcher was given")
        stat_items = [p for p in pending if p.deferred.copy is None]
        done = 0
        if stat_items:
            table = np.asarray(self._fetcher.fetch_stats([p.deferred.stats for p in stat_items]), dtype=np.float64)
            if table.shape != (len(stat_items), len(DEVICE_STAT_FIELDS)):
                raise RuntimeError(f"device statistics came back with shape {table.shape}")
            for item, row in zip(stat_items, table, strict=True):
                self._resolved[item.leaf.token] = leaf_from_stat_row(item.deferred, row)
                done += 1
        for item in pending:
            if item.deferred.copy is None:
                continue
            array = self._fetcher.fetch_copy(item.deferred.copy)
            host = HostTensor(array, item.deferred.dtype, item.deferred.type, item.deferred.requires_grad)
            self._resolved[item.leaf.token] = self.tensor_leaf(
                host, writer=item.writer, entry_name=item.entry_name, arg_path=item.arg_path
            )
            done += 1
        return done

    def substitute(self, node: Node) -> Node:
        """``node`` with every placeholder replaced by its finished leaf (null statistics if unresolved)."""
        if isinstance(node, PendingTensorLeaf):
            done = self._resolved.get(node.token)
            if done is not None:
                return done
            return TensorLeaf(type=node.type, dtype=node.dtype, shape=node.shape, requires_grad=node.requires_grad)
        if isinstance(node, Seq):
            return Seq(tuple(self.substitute(n) for n in node.items))
        if isinstance(node, Map):
            return Map(tuple((k, self.substitute(v)) for k, v in node.items))
        return node

    def substitute_entry(self, entry: Entry) -> Entry:
        """``entry`` with every placeholder replaced (see :meth:`substitute`)."""
        return Entry(entry.name, tuple((k, self.substitute(v)) for k, v in entry.fields))

    def reset_deferred(self) -> None:
        """Forget the step's placeholders and finished leaves (at the end of a step)."""
        self._pending.clear()
        self._resolved.clear()
        self._pending_elements = 0

    def collect(self, value: object, *, writer: DumpWriter | None, entry_name: str, arg_path: str) -> Node:
        """The node for ``value`` (an argument, an output, a gradient, a parameter).

        Args:
            value: a framework tensor, dtype or other object (through the adapter's converter),
                a numpy array or scalar, a Python scalar, str, slice, Ellipsis, None, or nested
                lists/tuples/dicts/namedtuples/dataclasses of those.
            writer: where tensors are saved (tensor task); None = never save.
            entry_name: the entry the value belongs to (for the tensor file name).
            arg_path: the value's argument path (``"input.0"``, ``"output.1.0"``, ``"parameters.weight"``).
        """
        return self._node(value, writer, entry_name, arg_path, 0)

    def tensor_leaf(
        self, tensor: HostTensor, *, writer: DumpWriter | None, entry_name: str, arg_path: str
    ) -> TensorLeaf:
        """The leaf of one host tensor; in the tensor task also saves ``<entry>.<arg_path>.npy``."""
        array = tensor.array
        (mx, mn, mean, norm), counts = summarize(array)
        data_name = None
        if self.save_tensors and writer is not None:
            data_name = tensor_file_name(entry_name, arg_path)
            writer.save_tensor(data_name, array)
        # a row of the step's leaf columns, and a view of it: a few microseconds, where a leaf of its own columns
        # (the TensorLeaf constructor) allocates some twenty objects that the garbage collector then scans
        cols = self._leaves
        row = cols.append_leaf(
            tensor.type, tensor.dtype, tuple(int(d) for d in array.shape), (mx, mn, mean, norm),
            compute_crc32(array) if self.checksum else None, data_name, tensor.requires_grad,
            tuple(zip(NONFINITE_KEYS, counts, strict=True)),
        )
        return leaf_view(cols, row)

    def _read_once(self, value: object, writer: DumpWriter | None, entry: str, path: str, depth: int) -> Node:
        """The node of framework tensor ``value``: the leaf of its last read while its stamp is unchanged (read every
        time without a :data:`TensorStamp`)."""
        stamp = None if self._stamp is None else self._stamp(value)
        if stamp is not None:
            seen = self._reads.get(id(value))
            # the weak reference tells the same object from a new one at a reused id
            if seen is not None and seen[1] == stamp and seen[0]() is value:
                return seen[2]
        converted = self._convert(value)
        if converted is None:
            return None
        node = self._node(converted, writer, entry, path, depth)
        if stamp is not None and isinstance(node, TensorLeaf):
            try:
                self._reads[id(value)] = (weakref.ref(value), stamp, node)
            except TypeError:  # a tensor class without weak references: read every time
                pass
        return node

    def _node(self, value: object, writer: DumpWriter | None, entry: str, path: str, depth: int) -> Node:
        if isinstance(value, self._tensor_types) and depth < MAX_DEPTH:  # deeper: null, as any framework object
            return self._read_once(value, writer, entry, path, depth)
        if value is None:
            return None
        if isinstance(value, (bool, int, float, str)):
            return ValueLeaf(type(value).__name__, value)
        if isinstance(value, HostTensor):
            return self.tensor_leaf(value, writer=writer, entry_name=entry, arg_path=path)
        if isinstance(value, DeferredTensor):
            return self.deferred_leaf(value, writer=writer, entry_name=entry, arg_path=path)
        if isinstance(value, (ValueLeaf, TensorLeaf, Seq, Map)):
            return value  # already collected (an adapter may collect gradients as they arrive)
        if isinstance(value, np.ndarray):
            host = HostTensor(value, str(value.dtype), "numpy.ndarray")
            return self.tensor_leaf(host, writer=writer, entry_name=entry, arg_path=path)
        if isinstance(value, np.generic):
            item = value.item()
            if isinstance(item, float) and not math.isfinite(item):
                return ValueLeaf(type(value).__name__, item)
            return ValueLeaf(type(value).__name__, _json_scalar(item))
        if isinstance(value, slice):
            return ValueLeaf(
                "slice", (_slice_member(value.start), _slice_member(value.stop), _slice_member(value.step))
            )
        if value is Ellipsis:
            return ValueLeaf("ellipsis", "...")
        if isinstance(value, complex):
            return ValueLeaf("complex", str(value))
        if depth >= MAX_DEPTH:
            return None
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return Map(
                tuple(
                    (str(k), self._node(v, writer, entry, f"{path}.{k}", depth + 1))
                    for k, v in zip(value._fields, value, strict=True)
                )
            )
        if isinstance(value, (list, tuple)):
            return Seq(tuple(self._node(v, writer, entry, f"{path}.{i}", depth + 1) for i, v in enumerate(value)))
        if isinstance(value, Mapping):
            return Map(
                tuple((str(k), self._node(v, writer, entry, f"{path}.{k}", depth + 1)) for k, v in value.items())
            )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return Map(
                tuple(
                    (f.name, self._node(getattr(value, f.name), writer, entry, f"{path}.{f.name}", depth + 1))
                    for f in dataclasses.fields(value)
                )
            )
        converted = self._convert(value)
        if converted is None:
            return None
        return self._node(converted, writer, entry, path, depth)
