"""Dtype and device spellings across frameworks: normalisation, compatibility and resolution.

Dumps spell dtypes the framework's way: MindSpore ``"Float32"`` / ``"BFloat16"``, PyTorch
``"torch.float32"``, numpy ``"float32"``.  The comparator compares the *canonical* spelling returned
by :func:`normalize_dtype` (numpy-style, lower case: ``"float32"``, ``"bfloat16"``, ``"int64"``,
``"bool"``).

Non-tensor arguments holding a dtype or a device (a cast target, ``.to(device)``) are recorded as value leaves whose
spelling depends on the framework and the recorder: ``{"type": "mindspore.dtype", "value": "Float32"}`` (MindSpore's
``str()``), ``{"type": "torch.dtype", "value": "torch.float32"}`` (torch's, and ours under mindtorch), a device as
``"cpu"`` / ``"cuda:0"`` (torch's ``str()``), ``"device(type='cuda', index=0)"`` (its ``repr()``) or
``"device(type=cpu)"`` (mindtorch's ``str()``).  :func:`as_dtype_value` and :func:`normalize_device` give their
canonical forms, so that one dtype or one device in two spellings compares equal.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: Aliases mapped to the canonical spelling (after lower-casing and stripping the framework prefix).
_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "bool_": "bool",
    "boolean": "bool",
    "chalf": "complex32",
    "complex_": "complex128",
    "float_": "float64",
    "int_": "int64",
}

_PREFIXES = ("torch.", "mindspore.", "numpy.", "np.", "ms.", "mstype.")

#: Floating dtypes whose values may be compared with each other after upcasting (docs/design.md §2:
#: "compatible pairs such as fp16/bf16/fp32 are matched with a note"; msprobe 1.2.2 allows
#: fp16<->fp32 and fp16<->bf16, msprobe 26.x also bf16<->fp32 and fp64).
COMPATIBLE_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
#: Integer dtypes of any width pair with each other, compared by value: a port often changes only the width
#: (MindSpore's losses want int32 labels where PyTorch uses int64); an overflow shows as a value difference.
COMPATIBLE_INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

#: Machine epsilon (spacing of representable values at 1.0) of each floating dtype, in value units.
FLOAT_EPS = {
    "float8_e5m2": 2.0**-2,
    "float8_e4m3fn": 2.0**-3,
    "float8_e4m3": 2.0**-3,
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
}

#: Relative-error floor used when the dtype is unknown: float32's epsilon (most dumps are fp32).
DEFAULT_RELATIVE_FLOOR = FLOAT_EPS["float32"]


@lru_cache(maxsize=4096)
def normalize_dtype(dtype: str | None) -> str | None:
    """Canonical (numpy-style, lower-case) spelling of a dtype string from any framework.

    ``"Float32"``, ``"torch.float32"``, ``"float32"`` and ``"torch.float"`` all give ``"float32"``;
    ``"BFloat16"`` gives ``"bfloat16"``.  Unknown spellings are returned lower-cased and without a
    framework prefix, so that two equal unknown spellings still compare equal.  None stays None.
    """
    if dtype is None:
        return None
    text = dtype.strip()
    lowered = text.lower()
    for prefix in _PREFIXES:
        if lowered.startswith(prefix):
            lowered = lowered[len(prefix) :]
            break
    return _ALIASES.get(lowered, lowered)


def is_float_dtype(canonical: str | None) -> bool:
    """True for a canonical floating dtype (``float16``, ``bfloat16``, ``float32``, ``float64``, fp8)."""
    return canonical is not None and canonical in FLOAT_EPS


def are_compatible_dtypes(a: str | None, b: str | None) -> bool:
    """True when two canonical dtypes differ but are both in :data:`COMPATIBLE_FLOATS` (msprobe pairs these
    too) or both in :data:`COMPATIBLE_INTS` (our decision: integer widths differ across ports, values decide)."""
    if a == b:
        return False
    return (a in COMPATIBLE_FLOATS and b in COMPATIBLE_FLOATS) or (a in COMPATIBLE_INTS and b in COMPATIBLE_INTS)


def compute_relative_floor(*canonical_dtypes: str | None) -> float:
    """The denominator floor for relative errors given the stated dtypes of both sides.

    Rule: the largest machine epsilon among the stated floating dtypes (the coarser side sets the
    resolution below which a magnitude is not meaningful); ``1.0`` when every stated dtype is an
    integer or bool (the smallest non-zero magnitude of integer data); :data:`DEFAULT_RELATIVE_FLOOR`
    (float32 eps, 1.19e-7) when no dtype is known.
    """
    eps = [FLOAT_EPS[d] for d in canonical_dtypes if d is not None and d in FLOAT_EPS]
    if eps:
        return max(eps)
    known = [d for d in canonical_dtypes if d is not None]
    if known and all(d == "bool" or d.startswith(("int", "uint")) for d in known):
        return 1.0
    return DEFAULT_RELATIVE_FLOOR


#: Every canonical dtype :func:`as_dtype_value` recognises (a value spelled otherwise is not taken for a dtype).
KNOWN_DTYPES = frozenset(FLOAT_EPS) | COMPATIBLE_INTS | frozenset({"bool", "complex32", "complex64", "complex128"})


def is_dtype_type(value_type: str | None) -> bool:
    """True for a value leaf ``type`` that says the value is a dtype: ``"torch.dtype"``, ``"mindspore.dtype"``,
    ``"numpy.dtype"``, ``"numpy.dtype[float32]"`` (any case)."""
    if not isinstance(value_type, str):
        return False
    lowered = value_type.strip().lower()
    return lowered == "dtype" or lowered.endswith(".dtype") or "dtype[" in lowered


def as_dtype_value(value: object) -> str | None:
    """The canonical dtype (:func:`normalize_dtype`) a value leaf's ``value`` spells, or None when it spells none.

    ``"Float32"``, ``"torch.float32"``, ``"mindspore.float32"``, ``"torch.float"`` give ``"float32"``;
    ``"Float16"`` / ``"torch.half"`` give ``"float16"``; ``"BFloat16"`` / ``"torch.bfloat16"`` give ``"bfloat16"``.
    Only spellings of :data:`KNOWN_DTYPES` count (``"mean"`` or ``"tanh"`` give None); a value that is not a string
    gives None.
    """
    if not isinstance(value, str) or len(value) > 64:
        return None
    canonical = normalize_dtype(value)
    return canonical if canonical in KNOWN_DTYPES else None


#: Device types a bare string may name (``"cpu"``, ``"cuda:0"``, MindSpore's ``"Ascend"``); inside ``device(...)``
#: any type counts.
KNOWN_DEVICE_TYPES = frozenset({
    "cpu", "cuda", "gpu", "npu", "ascend", "mps", "xpu", "xla", "hpu", "ipu", "meta", "mlu", "privateuseone",
})

_DEVICE_CALL = re.compile(r"device\((?P<body>[^()]*)\)")
_DEVICE_FIELD = re.compile(r"\s*(?:(?P<key>type|index)\s*=\s*)?(?P<q>['\"]?)(?P<val>[A-Za-z0-9_]*)(?P=q)\s*")
_BARE_DEVICE = re.compile(r"(?P<type>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<index>\d+))?")


def is_device_type(value_type: str | None) -> bool:
    """True for a value leaf ``type`` that says the value is a device (``"torch.device"``, ``"mindspore.device"``)."""
    if not isinstance(value_type, str):
        return False
    lowered = value_type.strip().lower()
    return lowered == "device" or lowered.endswith(".device")


def normalize_device(value: object) -> str | None:
    """Canonical ``"<type>"`` or ``"<type>:<index>"`` (lower case) of a device spelling, or None when ``value`` is none.

    ``"cpu"``, ``"CPU"``, ``"device(type=cpu)"`` (mindtorch's ``str()``) and ``"device(type='cpu')"`` (torch's
    ``repr()``) give ``"cpu"``; ``"cuda:0"``, ``"device(type='cuda', index=0)"`` and ``"device(type=cuda, index=0)"``
    give ``"cuda:0"``.  A bare string counts only when its type is in :data:`KNOWN_DEVICE_TYPES` (``"mean"`` gives
    None).  ``"cuda"`` (the current device) and ``"cuda:0"`` stay different: which device ``"cuda"`` was is not
    recorded.
    """
    if not isinstance(value, str) or len(value) > 100:
        return None
    text = value.strip()
    call = _DEVICE_CALL.fullmatch(text)
    if call is not None:
        fields: dict[str, str] = {}
        for position, part in enumerate(call.group("body").split(",")):
            field = _DEVICE_FIELD.fullmatch(part)
            if field is None or not field.group("val"):
                return None
            key = field.group("key") or ("type" if position == 0 else "index")
            if key in fields:
                return None
            fields[key] = field.group("val")
        device_type, index = fields.get("type"), fields.get("index")
        if index == "None":  # device(type=cpu, index=None): no index
            index = None
        if device_type is None or (index is not None and not index.isdigit()):
            return None
        return device_type.lower() if index is None else f"{device_type.lower()}:{int(index)}"
    bare = _BARE_DEVICE.fullmatch(text)
    if bare is None or bare.group("type").lower() not in KNOWN_DEVICE_TYPES:
        return None
    index = bare.group("index")
    return bare.group("type").lower() if index is None else f"{bare.group('type').lower()}:{int(index)}"
