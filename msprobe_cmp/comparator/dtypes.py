"""Dtype spellings across frameworks: normalisation, compatibility and resolution.

Dumps spell dtypes the framework's way: MindSpore ``"Float32"`` / ``"BFloat16"``, PyTorch
``"torch.float32"``, numpy ``"float32"``.  The comparator compares the *canonical* spelling returned
by :func:`normalize_dtype` (numpy-style, lower case: ``"float32"``, ``"bfloat16"``, ``"int64"``,
``"bool"``).
"""

from __future__ import annotations

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
}

_PREFIXES = ("torch.", "mindspore.", "numpy.", "np.", "ms.")

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
