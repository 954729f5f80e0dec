"""Turn host values into dump records: statistics, saved tensors, checksums, non-tensor leaves.

The framework adapter converts framework objects at the boundary (a tensor becomes a
:class:`HostTensor` holding a numpy copy and the framework's dtype spelling; a dtype object
becomes a :class:`~msprobe_cmp.dump.schema.ValueLeaf`); everything else here is numpy and plain
Python, with no framework import.

Statistics (:func:`compute_stats`) are reduced in float64 from the very array that the tensor
task saves, so a statistics recording and numpy's statistics of the saved ``.npy`` agree to
float64 rounding.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from msprobe_cmp.dump.naming import tensor_file_name
from msprobe_cmp.dump.schema import Map, Node, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.writer import DumpWriter

#: Containers nested deeper than this are written as null (msprobe stops at the same depth).
MAX_DEPTH = 10


@dataclass(frozen=True)
class HostTensor:
    """A framework tensor copied to host memory.

    Attributes:
        array: the values as a numpy array of the tensor's shape.  Its numpy dtype can hold every value
            exactly (bfloat16 arrives as float32, since the adapter upcasts on device first).
        dtype: the framework's spelling of the tensor's own dtype (``"Float32"``, ``"BFloat16"``).
        type: the leaf ``type`` string written to dump.json (``"mindspore.Tensor"``).
    """

    array: np.ndarray
    dtype: str
    type: str = "mindspore.Tensor"


#: Adapter callback: a framework object → HostTensor / ValueLeaf, or None when it is not recognised
#: (written as null).  Called only for objects that are not plain Python / numpy values.
LeafConverter = Callable[[object], "HostTensor | ValueLeaf | None"]


def compute_stats(array: np.ndarray) -> tuple[float | None, float | None, float | None, float | None]:
    """Max, Min, Mean and Norm (L2 norm over all elements) of ``array``, reduced in float64.

    * Empty array → ``(None, None, None, None)``.
    * Complex → statistics of ``abs(array)`` (msprobe's convention).
    * bool and integers are converted to float64 (True = 1.0), so Mean and Norm are defined.
    * NaN propagates into all four values; ±Inf into those it reaches (IEEE rules).

    Args:
        array: any numeric numpy array (float16/32/64, ml_dtypes bfloat16, ints, bool, complex).

    Returns:
        Python floats in the tensor's value units (Norm = sqrt(sum(x**2))).
    """
    if array.size == 0:
        return (None, None, None, None)
    values = np.abs(array) if np.iscomplexobj(array) else array
    flat = np.asarray(values, dtype=np.float64).ravel()
    with np.errstate(all="ignore"):
        return (
            float(flat.max()),
            float(flat.min()),
            float(flat.mean()),
            float(np.sqrt(np.dot(flat, flat))),
        )


#: Names of the non-finite counts each tensor leaf carries (extra leaf fields; msprobe ignores them).
NONFINITE_KEYS = ("nan_count", "pos_inf_count", "neg_inf_count")


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


class Collector:
    """Builds :mod:`~msprobe_cmp.dump.schema` nodes from host values, saving tensors when asked.

    Args:
        convert: the adapter's :data:`LeafConverter` for framework objects.
        save_tensors: tensor task: save every tensor to ``dump_tensor_data/`` and set ``data_name``.
        checksum: md5 summary mode: add msprobe's CRC32 ``md5`` field to every tensor leaf.

    Not thread-safe; one instance per recorder.
    """

    def __init__(self, convert: LeafConverter, *, save_tensors: bool = False, checksum: bool = False) -> None:
        self._convert = convert
        self.save_tensors = save_tensors
        self.checksum = checksum

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
        mx, mn, mean, norm = compute_stats(array)
        counts = compute_nonfinite_counts(array)
        data_name = None
        if self.save_tensors and writer is not None:
            data_name = tensor_file_name(entry_name, arg_path)
            writer.save_tensor(data_name, array)
        return TensorLeaf(
            type=tensor.type,
            dtype=tensor.dtype,
            shape=tuple(int(d) for d in array.shape),
            max=mx,
            min=mn,
            mean=mean,
            norm=norm,
            md5=compute_crc32(array) if self.checksum else None,
            data_name=data_name,
            extra=tuple(zip(NONFINITE_KEYS, counts, strict=True)),
        )

    def _node(self, value: object, writer: DumpWriter | None, entry: str, path: str, depth: int) -> Node:
        if value is None:
            return None
        if isinstance(value, (bool, int, float, str)):
            return ValueLeaf(type(value).__name__, value)
        if isinstance(value, HostTensor):
            return self.tensor_leaf(value, writer=writer, entry_name=entry, arg_path=path)
        if isinstance(value, ValueLeaf):
            return value
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
