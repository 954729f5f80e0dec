"""Typed records of the dump format (immutable, slotted, of plain values) and the leaf columns that hold tensor leaves.

The on-disk layout is msprobe's (docs/design.md §1).  One ``dump.json`` holds a header
(:class:`DumpMeta`) and ``data``: a mapping of entry names to :class:`Entry` records.  An
entry's fields hold nested nodes: :class:`Seq` (a JSON list), :class:`Map` (a JSON object),
:class:`TensorLeaf` (a tensor's summary), :class:`ValueLeaf` (a non-tensor argument such as
``{"type": "int", "value": 3}``) or ``None`` (JSON ``null``: no data, e.g. the gradient of an
input that needs none).

Everything here is immutable and framework-free; conversion from and to JSON lives in
:mod:`msprobe_cmp.dump.serde`.  A 100k-entry dump holds 300k tensor leaves: they are not one object each but rows of
their file's :class:`LeafColumns` (statistics, codes into per-file tables, NaN/Inf counts; ~90 bytes a leaf), and a
:class:`TensorLeaf` is a view of one row, made when asked for.  An entry read from a file holds its name, its first
row and an :class:`EntryLayout` shared by the entries of one kind of call (docs/design.md §2, "leaf columns").  The
other records are frozen, slotted dataclasses built through their constructors.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import FrozenInstanceError, dataclass, field
from dataclasses import fields as dataclasses_fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

import numpy as np

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

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


K = TypeVar("K", bound=Hashable)


class Interned(Generic[K]):
    """A table of distinct hashable items, each given a code: its position in :attr:`items` (in the order the items
    were first met).  The reader's leaf columns and the comparator's row table code their strings, shapes and text
    tuples with it.

    Attributes:
        items: the distinct items, in code order.
        codes: item → code (emptied by :meth:`forget`).
    """

    __slots__ = ("codes", "items")

    def __init__(self, *first: K) -> None:
        self.items: list[K] = list(first)
        self.codes: dict[K, int] = dict(zip(first, range(len(first)), strict=True))

    def code(self, item: K) -> int:
        """The code of ``item``, added at the end when new."""
        c = self.codes.get(item)
        if c is None:
            c = self.codes[item] = len(self.items)
            self.items.append(item)
        return c

    def forget(self) -> None:
        """Drop the look-up dictionary once no item will be added (the items stay)."""
        self.codes = {}


#: The columns of :class:`LeafColumns` in the order :meth:`LeafColumns.add_rows` takes them.
_COLUMNS = ("type_code", "dtype_code", "shape_code", "md5_code", "data_name_code", "extra_code", "requires_grad",
            "stats", "defined", "counts", "counted")


class LeafColumns:
    """The tensor leaves of one file (or the one leaf built by :class:`TensorLeaf`'s constructor), column-wise: leaf
    ``i`` is row ``i`` of every column.  The one representation of a tensor leaf: a :class:`TensorLeaf` is a view
    ``(columns, i)`` of it.

    Attributes (one item per leaf unless said; ``array.array`` columns, read as numpy arrays through the ``*_array``
    methods once the file is read):
        stats: ``array('d')`` of ``4 * n`` float64: leaf ``i``'s ``(max, min, mean, norm)`` at ``[4 * i, 4 * i + 4)``,
            in the tensor's value units; NaN where not recorded (:attr:`defined` tells a recorded NaN from None).
        defined: ``bytearray``: bit ``k`` (1, 2, 4, 8) set when statistic ``k`` of :data:`STAT_KEYS` was recorded.
        type_code, dtype_code, md5_code, data_name_code: ``array('i')`` (int32) codes into :attr:`strings`; -1 for
            None (md5, data_name).
        shape_code: ``array('i')`` codes into :attr:`shapes`.
        extra_code: ``array('i')`` codes into :attr:`extras` (0 is ``()``).
        requires_grad: ``array('b')``: -1 None, 0 False, 1 True.
        counts: ``array('q')`` of ``3 * n`` int64: the NaN, +Inf and -Inf counts at ``[3 * i, 3 * i + 3)`` (0 where
            :attr:`counted` is not set).
        counted: ``bytearray``: 1 when the leaf's counts are valid (:attr:`TensorLeaf.nonfinite_counts` not None).
        strings, shapes, extras: the tables the codes index (a string, a shape or an ``extra`` held once a file).
    """

    __slots__ = ("_chunks", "_extra_table", "_rows", "_shape_table", "_string_table", "counted", "counts",
                 "data_name_code", "defined", "dtype_code", "extra_code", "extras", "md5_code", "requires_grad",
                 "shape_code", "shapes", "stats", "strings", "type_code")

    def __init__(self) -> None:
        self.stats = array("d")
        self.defined = bytearray()
        self.type_code = array("i")
        self.dtype_code = array("i")
        self.shape_code = array("i")
        self.md5_code = array("i")
        self.data_name_code = array("i")
        self.extra_code = array("i")
        self.requires_grad = array("b")
        self.counts = array("q")
        self.counted = bytearray()
        self._string_table: Interned[str] = Interned()
        self._shape_table: Interned[tuple[int, ...]] = Interned()
        self._extra_table: Interned[tuple[tuple[str, object], ...]] = Interned(())
        self.strings = self._string_table.items
        self.shapes = self._shape_table.items
        self.extras = self._extra_table.items
        self._chunks: tuple[list[ReadableBuffer], ...] = tuple([] for _ in _COLUMNS)  # rows not in the columns yet
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def string_code(self, text: str) -> int:
        """The code of ``text`` in :attr:`strings`, added when new."""
        return self._string_table.code(text)

    def shape_code_of(self, shape: tuple[int, ...]) -> int:
        """The code of ``shape`` in :attr:`shapes`, added when new."""
        return self._shape_table.code(shape)

    def extra_code_of(self, extra: tuple[tuple[str, object], ...], shared: bool) -> int:
        """The code of ``extra`` in :attr:`extras`: one code for equal ones when ``shared`` (its values are ints and
        strings only, for which equal means the same), else a new code."""
        if shared:
            return self._extra_table.code(extra)
        self.extras.append(extra)
        return len(self.extras) - 1

    @property
    def string_codes(self) -> dict[str, int]:
        """:attr:`strings`' look-up dictionary, string → code (empty once :meth:`finish` has run): the reader looks a
        batch of strings up in it at once and codes the new ones with :meth:`string_code`."""
        return self._string_table.codes

    @property
    def shape_codes(self) -> dict[tuple[int, ...], int]:
        """:attr:`shapes`' look-up dictionary, shape → code (empty once :meth:`finish` has run)."""
        return self._shape_table.codes

    def add_rows(
        self, type_code: ReadableBuffer, dtype_code: ReadableBuffer, shape_code: ReadableBuffer,
        md5_code: ReadableBuffer, data_name_code: ReadableBuffer, extra_code: ReadableBuffer,
        requires_grad: ReadableBuffer, stats: ReadableBuffer, defined: ReadableBuffer, counts: ReadableBuffer,
        counted: ReadableBuffer,
    ) -> None:
        """Add ``k`` leaves at the end, each column's rows as a buffer in C order (kept, not copied: not to be changed
        afterwards): the codes ``k`` int32 each (from :meth:`string_code`, :meth:`shape_code_of`,
        :meth:`extra_code_of`; -1 for a None md5 or data_name), ``requires_grad`` ``k`` int8, ``stats`` ``k * 4``
        float64 (NaN where not recorded), ``defined`` ``k`` bit masks, ``counts`` ``k * 3`` int64 (0 where not
        counted), ``counted`` ``k`` bytes 0/1.  The one way rows are added: the reader adds a batch of a file's
        leaves at a time, the :class:`TensorLeaf` constructor its one row.

        The rows count in ``len()`` at once but are in the columns once :meth:`finish` has run: each column is then
        made once (growing an ``array.array`` batch by batch re-copies it every few batches: 0.15-0.3 s for the
        300k leaves of a 100k-entry dump)."""
        rows = (type_code, dtype_code, shape_code, md5_code, data_name_code, extra_code, requires_grad, stats, defined,
                counts, counted)
        for chunks, buffer in zip(self._chunks, rows, strict=True):
            chunks.append(buffer)
        self._rows += len(_bytes_of(defined))

    def append_leaf(
        self, leaf_type: str, dtype: str, shape: tuple[int, ...],
        stats: tuple[float | None, float | None, float | None, float | None], md5: str | None,
        data_name: str | None, requires_grad: bool | None, extra: tuple[tuple[str, object], ...],
    ) -> int:
        """Add one leaf of these fields (:class:`TensorLeaf`'s, its ``type`` as ``leaf_type``, ``stats`` as ``(max,
        min, mean, norm)`` floats or None) at the end, straight into the columns, and return its row: what the
        :class:`TensorLeaf` constructor does with its own columns, and a recorder with the columns of a step's leaves
        (a view of the row, :func:`leaf_view`, reads it at once).  Its NaN/Inf counts are worked out from ``extra``
        (:func:`compute_nonfinite_counts`); an ``extra`` of ints and strings only is coded once per distinct value.

        Raises:
            RuntimeError: rows added by :meth:`add_rows` wait for :meth:`finish` (a leaf appended now would take
                their place).
        """
        if len(self.defined) != self._rows:
            raise RuntimeError("leaves added by add_rows are not in the columns yet: finish() first")
        numel = 1
        for d in shape:
            numel *= d
        counts = compute_nonfinite_counts(extra, numel) if extra else None
        code = self._string_table.code
        self.type_code.append(code(leaf_type))
        self.dtype_code.append(code(dtype))
        self.shape_code.append(self._shape_table.code(shape))
        self.md5_code.append(-1 if md5 is None else code(md5))
        self.data_name_code.append(-1 if data_name is None else code(data_name))
        self.extra_code.append(self.extra_code_of(extra, all(type(v) in (int, str) for _, v in extra))
                               if extra else 0)
        self.requires_grad.append(-1 if requires_grad is None else 1 if requires_grad else 0)
        self.stats.extend([_NAN if v is None else v for v in stats])
        self.defined.append(sum(bit for bit, v in zip(_STAT_BITS, stats, strict=True) if v is not None))
        self.counts.extend(_NO_COUNTS if counts is None else counts)
        self.counted.append(counts is not None)
        self._rows += 1
        return self._rows - 1

    def finish(self) -> None:
        """Put the rows added into the columns (each column made once, at its full length, and filled) and drop the
        tables' look-up dictionaries (no leaf is added afterwards)."""
        for name, chunks in zip(_COLUMNS, self._chunks, strict=True):
            if not chunks:
                continue
            old = getattr(self, name)
            start = len(_bytes_of(old))
            size = start + sum(len(_bytes_of(c)) for c in chunks)
            # the whole column made at once (zeros), then filled: growing it chunk by chunk would re-copy it
            column = (bytearray(size) if isinstance(old, bytearray)
                      else array(old.typecode, [0]) * (size // old.itemsize))
            with memoryview(column) as view, view.cast("B") as out:
                out[:start] = _bytes_of(old)
                chunks.reverse()
                while chunks:  # each chunk let go once copied: the column and its chunks are held at most once
                    rows = _bytes_of(chunks.pop())
                    out[start:start + len(rows)] = rows
                    start += len(rows)
            setattr(self, name, column)
        self._string_table.forget()
        self._shape_table.forget()
        self._extra_table.forget()

    # -- numpy views (of a finished file) -----------------------------------------------------------------------
    def stats_array(self) -> np.ndarray:
        """The statistics as a read-only float64 array ``[n, 4]`` (NaN where not recorded)."""
        return _frozen(np.frombuffer(self.stats, np.float64).reshape(len(self), 4))

    def defined_array(self) -> np.ndarray:
        """Which statistics were recorded, bool ``[n, 4]`` (False: None)."""
        bits = np.frombuffer(self.defined, np.uint8)
        return (bits[:, None] >> np.arange(4, dtype=np.uint8)) & 1 == 1

    def code_array(self, column: str) -> np.ndarray:
        """One code column (``"type_code"``, ``"dtype_code"``, ``"shape_code"``, ``"md5_code"``,
        ``"data_name_code"``, ``"extra_code"``) as a read-only int32 array ``[n]``."""
        return _frozen(np.frombuffer(getattr(self, column), np.int32))

    def counts_array(self) -> tuple[np.ndarray, np.ndarray]:
        """The NaN/+Inf/-Inf counts, int64 ``[n, 3]``, and whether they are valid, bool ``[n]``."""
        return (_frozen(np.frombuffer(self.counts, np.int64).reshape(len(self), 3)),
                np.frombuffer(self.counted, np.uint8) == 1)


def _bytes_of(rows: ReadableBuffer) -> memoryview:
    """The bytes of ``rows`` (a C-contiguous buffer of any item type, e.g. a numpy array's ``data``)."""
    return memoryview(rows).cast("B")


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


_NAN = math.nan
_NO_COUNTS = (0, 0, 0)
#: The bit of :attr:`LeafColumns.defined` of each statistic (max, min, mean, norm).
_STAT_BITS = (1, 2, 4, 8)
def _stat_property(k: int, doc: str) -> property:
    """The property of a :class:`TensorLeaf` view reading statistic ``k`` (0 Max, 1 Min, 2 Mean, 3 Norm) of its row:
    the float, or None where its "defined" bit is not set."""
    bit = 1 << k

    def get(self: TensorLeaf) -> float | None:
        c, i = self._c, self._i
        return c.stats[4 * i + k] if c.defined[i] & bit else None

    return property(get, doc=doc)


class TensorLeaf:
    """Summary of one tensor argument, as one dump.json leaf: a view of row ``i`` of a :class:`LeafColumns`.

    Attributes:
        type: the leaf's ``type`` string (``"mindspore.Tensor"``, ``"torch.Tensor"``, ``"numpy.ndarray"``).
        dtype: the framework's spelling of the dtype (``"Float32"``, ``"BFloat16"``, ``"torch.float32"``).
        shape: the tensor's shape; ``()`` for a 0-d tensor.
        max, min, mean, norm: the statistics (``Norm`` is the L2 norm over all elements), in the
            tensor's value units, as floats; None when not computed (empty tensor, structure task).  May be NaN/±Inf.
        md5: the checksum string of msprobe's md5 summary mode (a CRC32 in 8 hex digits), if any.
        data_name: file name of the saved tensor in ``dump_tensor_data/`` (tensor task), if any.
        requires_grad: PyTorch's ``requires_grad`` when recorded (MindSpore dumps have none).
        extra: any other keys of the leaf, kept for round-tripping, as ``(key, value)`` pairs.

    The constructor (the fields above, in that order, ``type``, ``dtype`` and ``shape`` required) makes a leaf of
    its own one-row columns; the reader's leaves are views of their file's columns
    (:meth:`Entry.flat`), made when asked for.  Immutable (assigning raises
    :class:`dataclasses.FrozenInstanceError`); equality, hash and repr over the fields above, as a dataclass's
    (two views of one row are equal even when a statistic is NaN); pickled as its fields.
    """

    __slots__ = ("_c", "_i")
    _c: LeafColumns
    _i: int

    def __init__(
        self, type: str, dtype: str, shape: tuple[int, ...], max: float | None = None,  # noqa: A002
        min: float | None = None, mean: float | None = None, norm: float | None = None,  # noqa: A002
        md5: str | None = None, data_name: str | None = None, requires_grad: bool | None = None,
        extra: tuple[tuple[str, object], ...] = (),
    ) -> None:
        cols = LeafColumns()
        stats = (_float(max), _float(min), _float(mean), _float(norm))
        _set_i(self, cols.append_leaf(type, dtype, tuple(shape), stats, md5, data_name, requires_grad, tuple(extra)))
        _set_c(self, cols)

    @property
    def type(self) -> str:
        """The leaf's ``type`` string."""
        c = self._c
        return c.strings[c.type_code[self._i]]

    @property
    def dtype(self) -> str:
        """The framework's dtype spelling."""
        c = self._c
        return c.strings[c.dtype_code[self._i]]

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        c = self._c
        return c.shapes[c.shape_code[self._i]]

    max = _stat_property(0, "The Max statistic, or None.")
    min = _stat_property(1, "The Min statistic, or None.")
    mean = _stat_property(2, "The Mean statistic, or None.")
    norm = _stat_property(3, "The Norm statistic (L2), or None.")

    @property
    def md5(self) -> str | None:
        """The checksum string, or None."""
        c = self._c
        code = c.md5_code[self._i]
        return None if code < 0 else c.strings[code]

    @property
    def data_name(self) -> str | None:
        """The saved tensor's file name, or None."""
        c = self._c
        code = c.data_name_code[self._i]
        return None if code < 0 else c.strings[code]

    @property
    def requires_grad(self) -> bool | None:
        """PyTorch's ``requires_grad``, or None."""
        flag = self._c.requires_grad[self._i]
        return None if flag < 0 else flag == 1

    @property
    def extra(self) -> tuple[tuple[str, object], ...]:
        """The leaf's other keys, as ``(key, value)`` pairs."""
        c = self._c
        return c.extras[c.extra_code[self._i]]

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
        accepted): such counts are not trusted (:attr:`has_invalid_nonfinite_counts`).  Worked out when the leaf
        was added to its columns (:func:`compute_nonfinite_counts`).
        """
        c, i = self._c, self._i
        if not c.counted[i]:
            return None
        counts = c.counts
        return (counts[3 * i], counts[3 * i + 1], counts[3 * i + 2])

    @property
    def has_invalid_nonfinite_counts(self) -> bool:
        """True when the leaf carries count fields that :attr:`nonfinite_counts` cannot use
        (wrong type, negative, or more than the tensor's elements)."""
        c, i = self._c, self._i
        if not c.extra_code[i] or c.counted[i]:
            return False
        return any(k in NONFINITE_COUNT_KEYS for k, _ in self.extra)

    @property
    def stats(self) -> tuple[float | None, float | None, float | None, float | None]:
        """``(max, min, mean, norm)`` in :data:`STAT_KEYS` order."""
        c, i = self._c, self._i
        bits = c.defined[i]
        s = c.stats
        return (s[4 * i] if bits & 1 else None, s[4 * i + 1] if bits & 2 else None,
                s[4 * i + 2] if bits & 4 else None, s[4 * i + 3] if bits & 8 else None)

    @property
    def columns(self) -> tuple[LeafColumns, int]:
        """``(columns, row)``: where the leaf is held."""
        return self._c, self._i

    def _key(self) -> tuple[object, ...]:
        """The values equality, hash, repr and pickling go by: the fields, in order (a subclass adds its own)."""
        return (self.type, self.dtype, self.shape, *self.stats, self.md5, self.data_name, self.requires_grad,
                self.extra)

    def _names(self) -> tuple[str, ...]:
        """The names of :meth:`_key`'s values (for repr)."""
        return _TENSOR_LEAF_FIELDS

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, TensorLeaf)
        if self._c is other._c and self._i == other._i and self._names() is _TENSOR_LEAF_FIELDS:
            return True  # one row: equal even with a NaN statistic (as a record is equal to itself)
        a, b = self._key(), other._key()
        # a NaN statistic equals a NaN (as the hash has it): each read of a stored NaN is another float object
        return a == b or (len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True)))

    def __hash__(self) -> int:
        # A NaN hashes by its object's identity: hashed as one constant, so that equal leaves hash alike
        return hash(tuple(_NAN_KEY if v != v else v for v in self._key()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self._names(), self._key(), strict=True))
        return f"{type(self).__qualname__}({inner})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (type(self), self._key())

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass(frozen=True)
class TensorLeafFields:
    """The fields of :class:`TensorLeaf` as a dataclass's (:func:`dataclass_fields_of`)."""

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


def dataclass_fields_of(cls: type, fields_of: type) -> None:
    """Give ``cls`` the field table of the dataclass ``fields_of`` (the same fields, as its constructor takes them),
    so that :func:`dataclasses.fields`, :func:`dataclasses.replace` and :func:`dataclasses.asdict` work on its
    instances as on the frozen dataclass records they were (the records themselves are not dataclasses)."""
    cls.__dataclass_fields__ = fields_of.__dataclass_fields__  # type: ignore[attr-defined]
    cls.__dataclass_params__ = fields_of.__dataclass_params__  # type: ignore[attr-defined]


dataclass_fields_of(TensorLeaf, TensorLeafFields)
#: The names of :meth:`TensorLeaf._key`'s values: its fields, in order.
_TENSOR_LEAF_FIELDS = tuple(f.name for f in dataclasses_fields(TensorLeafFields))
_set_c = TensorLeaf.__dict__["_c"].__set__  # the slots' own setters (the leaf is frozen)
_set_i = TensorLeaf.__dict__["_i"].__set__
_new_object = object.__new__
_NAN_KEY = ("NaN",)


_LEAF_COLUMNS = attrgetter("_c")  # a leaf's columns and row, read at C speed (the slots of every TensorLeaf)
_LEAF_ROW = attrgetter("_i")


def _float(value: object) -> float | None:
    """A statistic as kept: None, or the value as a float (an int converted; a value that is no number raises)."""
    return None if value is None else float(value)  # type: ignore[arg-type]


def leaf_view(cols: LeafColumns, i: int) -> TensorLeaf:
    """The :class:`TensorLeaf` of row ``i`` of ``cols`` (a view: nothing is copied)."""
    leaf = _new_object(TensorLeaf)
    _set_c(leaf, cols)
    _set_i(leaf, i)
    return leaf


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


class _ColumnLeaf:
    """The type of :data:`COLUMN_LEAF`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "COLUMN_LEAF"

    def __reduce__(self) -> str:
        return "COLUMN_LEAF"


#: Where an entry's layout (:class:`EntryLayout`) holds a tensor leaf of the entry's columns: the k-th of them in file
#: order (depth first, over every field) is row ``start + k`` of the columns (``start``: the entry's first row).
COLUMN_LEAF = _ColumnLeaf()


class EntryLayout:
    """What an entry holds besides its tensor leaves' values: its fields with :data:`COLUMN_LEAF` where a leaf of its
    columns goes, and (worked out on first use) its argument paths and its leaves in file order.

    Entries of one kind of call have equal layouts; the reader holds one layout for all of them
    (:mod:`msprobe_cmp.dump.serde`).  Not part of the public records: :class:`Entry` reads it.

    Attributes:
        fields: the entry's ``(key, node)`` pairs, a column leaf as :data:`COLUMN_LEAF`.
        parameters_grad: whether the entry is a parameters_grad one (its paths are spelled otherwise).
    """

    __slots__ = ("_flat", "fields", "parameters_grad")
    _flat: tuple[tuple[str, ...], tuple[Leaf | int, ...], tuple[int, ...], bool]

    def __init__(self, fields: tuple[tuple[str, Node | _ColumnLeaf], ...], parameters_grad: bool) -> None:
        self.fields = fields
        self.parameters_grad = parameters_grad

    def flat(self) -> tuple[tuple[str, ...], tuple[Leaf | int, ...], tuple[int, ...], bool]:
        """``(paths, slots, offsets, all_columns)``: the argument paths (:func:`shared_paths`); in each slot the
        leaf, or for a column leaf its offset (an int) from the entry's first row; the offsets of the column leaves
        that are leaves, in file order (a flag field's, :data:`ENTRY_FLAG_FIELDS`, are rows but not leaves); and
        whether every slot is a column leaf, at offsets ``0, 1, ...``.  Worked out once and kept."""
        try:
            return self._flat
        except AttributeError:
            pass
        paths: list[str] = []
        slots: list[Leaf | int] = []
        offsets_in_order = itertools.count()  # a column leaf's offset: its place among them, flag fields included
        for key, node in self.fields:
            numbered: Any = fill_column_leaves(node, offsets_in_order)
            if self.parameters_grad:
                if isinstance(numbered, Seq) and len(numbered.items) == 1:
                    _flatten_into(paths, slots, numbered.items[0], key)
                else:
                    _flatten_into(paths, slots, numbered, key)
            elif key not in ENTRY_FLAG_FIELDS:
                _flatten_into(paths, slots, numbered, _FIELD_PATH.get(key, key))
        offsets = tuple([s for s in slots if type(s) is int])
        all_columns = offsets == tuple(range(len(slots)))
        self._flat = flat = (shared_paths(tuple(paths)), tuple(slots), offsets, all_columns)
        return flat

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # the fields only: the flat form is worked out again where it is unpickled (its paths then shared there)
        return (EntryLayout, (self.fields, self.parameters_grad))


def fill_column_leaves(node: object, rows: Iterator[Any]) -> object:
    """``node`` (a node, or a tuple of ``(key, node)`` fields) with each :data:`COLUMN_LEAF` replaced by the next of
    ``rows``, in file order (depth first); the containers that hold none are returned as they are."""
    if node is COLUMN_LEAF:
        return next(rows)
    if isinstance(node, Seq):
        items = tuple([fill_column_leaves(v, rows) for v in node.items])
        return node if all(map(_is, items, node.items)) else Seq(items)  # type: ignore[arg-type]
    if isinstance(node, Map):
        pairs = tuple([(k, fill_column_leaves(v, rows)) for k, v in node.items])
        return node if all(a[1] is b[1] for a, b in zip(pairs, node.items, strict=True)) else Map(pairs)  # type: ignore[arg-type]
    if isinstance(node, tuple):
        return tuple([(k, fill_column_leaves(v, rows)) for k, v in node])
    return node


def _is(a: object, b: object) -> bool:
    return a is b


class Entry:
    """One record of ``dump.json``'s ``data``: an API, cell or parameters_grad entry.

    Attributes:
        name: the entry name (see :mod:`msprobe_cmp.dump.naming`).
        fields: the entry's fields in file order, as ``(key, node)`` pairs:
            forward: ``input_args`` (Seq), ``input_kwargs`` (Map), ``output`` (Seq) and, for cells,
            ``parameters`` (Map) and, for PyTorch modules with buffers, ``buffers_before`` / ``buffers`` (Map);
            backward: ``input`` (gradients w.r.t. the forward outputs) and ``output``
            (gradients w.r.t. the forward inputs); parameters_grad: one ``(param name, Seq of leaves)`` each.

    An entry read from a file holds its tensor leaves as rows ``[start, start + count)`` of the file's
    :class:`LeafColumns` and its fields as an :class:`EntryLayout` shared with the entries of the same kind of call;
    :attr:`fields` and :meth:`flat` make the nodes and the :class:`TensorLeaf` views when asked for.  An entry built
    through the constructor holds the given nodes.  Immutable; equality, hash and repr over ``(name, fields)``.
    """

    __slots__ = ("_cols", "_layout", "_start", "name")
    name: str
    _layout: EntryLayout
    _cols: LeafColumns | None
    _start: int

    def __init__(self, name: str, fields: tuple[tuple[str, Node], ...] = ()) -> None:
        fields = tuple(fields)
        _set_entry_name(self, name)
        _set_layout(self, EntryLayout(fields, _is_parameters_grad(name)))
        _set_cols(self, None)
        _set_start(self, 0)

    @classmethod
    def in_columns(cls, name: str, layout: EntryLayout, cols: LeafColumns, start: int) -> Entry:
        """An entry whose column leaves (:data:`COLUMN_LEAF` in ``layout``) are rows ``start, start + 1, ...`` of
        ``cols`` (the reader's entries)."""
        entry = _new_object(cls)
        _set_entry_name(entry, name)
        _set_layout(entry, layout)
        _set_cols(entry, cols)
        _set_start(entry, start)
        return entry

    @property
    def fields(self) -> tuple[tuple[str, Node], ...]:
        """The fields, as ``(key, node)`` pairs (the nodes holding column leaves made on each call)."""
        fields = self._layout.fields
        if self._cols is None:
            return fields  # type: ignore[return-value]
        return fill_column_leaves(fields, self._rows())  # type: ignore[return-value]

    def _rows(self) -> Iterator[TensorLeaf]:
        """The views of the entry's rows, from its first on (in file order)."""
        cols = self._cols
        assert cols is not None
        return (leaf_view(cols, i) for i in range(self._start, len(cols)))

    def leaf_rows(self) -> tuple[LeafColumns | None, int, tuple[int, ...]]:
        """``(columns, start, offsets)``: the k-th :class:`TensorLeaf` of :meth:`flat` that is held in ``columns`` is
        row ``start + offsets[k]`` (the reader's entries; in file order); ``(None, 0, ())`` for an entry built
        through the constructor, whose leaves are its own objects."""
        cols = self._cols
        if cols is None:
            return None, 0, ()
        return cols, self._start, self._layout.flat()[2]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Entry)
        if self.name != other.name:
            return False
        if self._layout is other._layout and self._cols is other._cols and self._start == other._start:
            return True
        return self.fields == other.fields

    def __hash__(self) -> int:
        return hash((self.name, self.fields))

    def __repr__(self) -> str:
        return f"Entry(name={self.name!r}, fields={self.fields!r})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # its own leaves, not the file's columns they are rows of (an entry pickled alone stays small)
        return (Entry, (self.name, self.fields))

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

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
        return self._layout.parameters_grad

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

    def paths(self) -> tuple[str, ...]:
        """The argument paths of :meth:`flat`, without making its leaves."""
        return self._layout.flat()[0]

    def flat(self) -> tuple[tuple[str, ...], tuple[Leaf, ...]]:
        """:meth:`leaves` as two tuples of one length: the argument paths and the leaves, in file order.

        The paths are worked out once per layout and kept; the paths tuple is shared by every entry whose paths
        are the same (:func:`shared_paths`), so ``flat()[0] is other.flat()[0]`` tells two entries' paths equal at
        once; do not rely on it being so (the shared tuples are dropped past a limit).  The leaves of the entry's
        columns are :class:`TensorLeaf` views made on each call (equal from call to call, not the same objects).
        """
        paths, slots, offsets, all_columns = self._layout.flat()
        cols = self._cols
        if not offsets or cols is None:
            return paths, slots  # type: ignore[return-value]
        start = self._start
        if all_columns:  # every leaf a column leaf: the common entry
            return paths, tuple([leaf_view(cols, i) for i in range(start, start + len(slots))])
        return paths, tuple([leaf_view(cols, start + s) if type(s) is int else s for s in slots])  # type: ignore


def pack_entries(entries: Sequence[Entry]) -> tuple[object, ...]:
    """``entries`` in a form that pickles compactly (:func:`unpack_entries` gives them back, equal): an entry read
    from a file as ``(name, layout, columns, start)``, which pickle holds once each for the layouts and the file's
    :class:`LeafColumns` the entries share (one entry pickled alone pickles as its own leaves instead); an entry built
    through the constructor as itself.  For a whole unit sent to another process (a loaded ``RankDump`` did not pickle
    at all before: its look-up tables are mappingproxies): the 100k entries of a 300k-leaf file pickle to ~30 MB in
    ~0.2 s, against one :class:`TensorLeaf` each."""
    return tuple([e if e._cols is None else (e.name, e._layout, e._cols, e._start) for e in entries])


def unpack_entries(packed: Sequence[object]) -> tuple[Entry, ...]:
    """The entries of :func:`pack_entries`'s ``packed``, in order."""
    in_columns = Entry.in_columns
    return tuple([in_columns(*item) if type(item) is tuple else item for item in packed])  # type: ignore[misc]


def tensor_leaf_rows(entries: Iterable[Entry]) -> list[tuple[LeafColumns, np.ndarray]]:
    """Where the tensor leaves of ``entries`` are held: for each :class:`LeafColumns` (in the order first met), the
    rows of it that are their leaves, int64 ``[k]``, in entry order and, within an entry, file order.  What reads
    many leaves' values reads these columns at these rows (no :class:`TensorLeaf` is made for a reader's entry)."""
    found: dict[int, tuple[LeafColumns, list[int]]] = {}
    for entry in entries:
        cols = entry._cols
        if cols is not None:
            got = found.get(id(cols))
            if got is None:
                got = found[id(cols)] = (cols, [])
            got[1].extend(map(entry._start.__add__, entry._layout.flat()[2]))
        else:  # an entry built through the constructor: each tensor leaf is a row of its own columns
            for leaf in entry.flat()[1]:
                if isinstance(leaf, TensorLeaf):
                    got = found.get(id(leaf._c))
                    if got is None:
                        got = found[id(leaf._c)] = (leaf._c, [])
                    got[1].append(leaf._i)
    return [(cols, np.fromiter(rows, np.int64, len(rows))) for cols, rows in found.values()]


def leaf_row_groups(leaves: Sequence[TensorLeaf]) -> list[tuple[LeafColumns, np.ndarray, np.ndarray]]:
    """Where ``leaves`` (tensor leaves: a file's views, leaves built with their own one-row columns, subclasses) are
    held, grouped by their :class:`LeafColumns`: one ``(columns, positions, rows)`` per distinct columns object, in the
    order of its first leaf, where ``positions`` (int64 ``[k]``, increasing) are the positions in ``leaves`` of the
    leaves it holds and ``rows`` (int64 ``[k]``) their rows in it.  Every leaf is in exactly one group; ``[]`` for no
    leaves.  What reads many leaves' values reads each group's columns at its rows (one step a leaf: its
    ``(columns, row)``), e.g. :meth:`~msprobe_cmp.comparator.rowtable.RowTableBuilder.set_sides`.

    Raises:
        AttributeError: an item that is not a :class:`TensorLeaf`.
    """
    m = len(leaves)
    if not m:
        return []
    holders = list(map(_LEAF_COLUMNS, leaves))
    rows = np.fromiter(map(_LEAF_ROW, leaves), np.int64, m)
    ids = np.fromiter(map(id, holders), np.uint64, m)
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    by_first = np.argsort(first)  # the groups in the order of their first leaf
    rank = np.empty(len(first), np.int64)
    rank[by_first] = np.arange(len(first))
    label = rank[inverse.reshape(-1)]
    order = np.argsort(label, kind="stable")  # positions, group by group, increasing within a group
    bounds = np.cumsum(np.bincount(label, minlength=len(first))).tolist()
    groups = []
    for g, stop in enumerate(bounds):
        positions = order[bounds[g - 1] if g else 0:stop]
        groups.append((holders[int(first[by_first[g]])], positions, rows[positions]))
    return groups


def _is_parameters_grad(name: str) -> bool:
    """:attr:`Entry.is_parameters_grad` of an entry named ``name``."""
    if "parameters_grad" not in name:
        return False
    tokens = name.split(".")
    return tokens[-1] == "parameters_grad" or (len(tokens) > 1 and tokens[-2] == "parameters_grad")


@dataclass(frozen=True)
class _EntryFields:
    """The fields of :class:`Entry` as a dataclass's (:func:`dataclass_fields_of`)."""

    name: str
    fields: tuple[tuple[str, Node], ...] = ()


dataclass_fields_of(Entry, _EntryFields)
_set_entry_name = Entry.__dict__["name"].__set__
_set_layout = Entry.__dict__["_layout"].__set__
_set_cols = Entry.__dict__["_cols"].__set__
_set_start = Entry.__dict__["_start"].__set__


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


def _flatten_into(paths_out: list[str], leaves_out: list[Leaf | int], node: Any, path: str) -> None:
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
