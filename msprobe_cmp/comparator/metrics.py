"""Comparison metrics: pure numpy functions of two arrays, computed in float64.

Convention (msprobe's and DESIGN.md §4): ``a`` is the target ("NPU" in msprobe's columns) and ``b``
the baseline ("Bench", golden); relative errors divide by ``b``.  Every function upcasts both
inputs to float64 first (bf16/fp16/ints/bools included, see :func:`to_float64`) and flattens them;
``a`` and ``b`` must have the same number of elements.

The per-metric functions (``compute_cosine`` ... ``compute_euc_dist``) expect **finite** inputs; a
NaN or Inf in them propagates by IEEE rules and is never zeroed.  :func:`compute_tensor_metrics`
is the entry point the comparator uses: it checks that non-finite values agree position by
position, strips them when they do, and records what it did in ``notes``.

Relative error (used by MaxRelativeErr and the two ratios) is ``|a - b| / max(|b|, floor)``.
msprobe adds machine epsilon (2.2e-16) to both sides where ``b == 0``, which turns a tiny absolute
difference against an exact zero into an error of ~1e13.  Here the denominator has a floor instead:
by default the machine epsilon of the coarser stated dtype (float32: 1.19e-7, float16: 9.8e-4,
bfloat16: 7.8e-3; see :func:`msprobe_cmp.comparator.dtypes.compute_relative_floor`).  Magnitudes
below one ulp at 1.0 are treated as that ulp, so ``a = 1e-12`` against ``b = 0`` in float32 gives a
relative error of ~8e-6 instead of infinity, while ``a = 1e-3`` against ``b = 0`` still gives ~8e3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from msprobe_cmp.comparator.dtypes import DEFAULT_RELATIVE_FLOOR

F64 = NDArray[np.float64]

#: Keys of the tensor-mode metrics, in msprobe's column order (plus EucDist, as msprobe 26.x).
TENSOR_METRIC_KEYS = (
    "cosine",
    "max_abs_err",
    "max_relative_err",
    "one_thousandth_err_ratio",
    "five_thousandths_err_ratio",
    "euc_dist",
)


def to_float64(x: ArrayLike) -> F64:
    """``x`` as a flat float64 array.

    Accepts any real numeric array: float16/32/64, ml_dtypes bfloat16/fp8, ints, bools.

    Raises:
        TypeError: for complex, string or object arrays (no meaningful real-valued comparison).
    """
    arr = np.asarray(x)
    if arr.dtype.kind in "cOUSMm":
        raise TypeError(f"cannot compare values of dtype {arr.dtype} as real numbers")
    return np.asarray(arr, dtype=np.float64).reshape(-1)


def _pair(a: ArrayLike, b: ArrayLike) -> tuple[F64, F64]:
    fa, fb = to_float64(a), to_float64(b)
    if fa.size != fb.size:
        raise ValueError(f"arrays differ in size: {fa.size} vs {fb.size}")
    return fa, fb


def compute_cosine(a: ArrayLike, b: ArrayLike) -> float | None:
    """Cosine similarity ``a·b / (‖a‖₂ ‖b‖₂)`` of the flattened arrays, in [-1, 1].

    Source: msprobe's ``Cosine`` column (anatomy §3.5); DESIGN.md §4.

    Returns:
        1.0 when both arrays are all-zero, or when they are identical element for element;
        None (undefined, not a failure) when exactly one side is all-zero, or when the arrays have
        fewer than 2 elements (a 0-d or length-1 tensor has no direction).
    """
    fa, fb = _pair(a, b)
    if fa.size < 2:
        return None
    scale_a = float(np.max(np.abs(fa)))
    scale_b = float(np.max(np.abs(fb)))
    if scale_a == 0.0 and scale_b == 0.0:
        return 1.0
    if scale_a == 0.0 or scale_b == 0.0:
        return None
    if np.array_equal(fa, fb):
        return 1.0
    # Scale to max-abs 1 first so that the norms can neither overflow nor underflow.
    na, nb = fa / scale_a, fb / scale_b
    cos = float(np.dot(na, nb) / (np.linalg.norm(na) * np.linalg.norm(nb)))
    return min(1.0, max(-1.0, cos))


def compute_max_abs_err(a: ArrayLike, b: ArrayLike) -> float | None:
    """``max |a - b|`` over all elements, in the tensors' value units; None for empty arrays.

    Source: msprobe's ``MaxAbsErr`` column (anatomy §3.5); DESIGN.md §4.
    """
    fa, fb = _pair(a, b)
    if fa.size == 0:
        return None
    return float(np.max(np.abs(fa - fb)))


def compute_relative_errors(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> F64:
    """Element-wise relative error ``|a - b| / max(|b|, floor)`` as a flat float64 array.

    ``floor`` (> 0) is the smallest denominator, in value units (module docstring explains the
    default).  Source: msprobe's relative error (anatomy §3.5), with a floor in place of its epsilon.
    """
    if not floor > 0.0:
        raise ValueError(f"relative-error floor must be > 0, got {floor!r}")
    fa, fb = _pair(a, b)
    return np.abs(fa - fb) / np.maximum(np.abs(fb), floor)


def compute_max_relative_err(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> float | None:
    """``max(|a - b| / max(|b|, floor))``, dimensionless; None for empty arrays.

    Source: msprobe's ``MaxRelativeErr`` column (anatomy §3.5); DESIGN.md §4 ("with a documented
    floor for |b| near 0").  Never infinite for finite inputs.
    """
    rel = compute_relative_errors(a, b, floor)
    return float(np.max(rel)) if rel.size else None


def _share_below(rel: F64, limit: float) -> float | None:
    return float(np.count_nonzero(rel < limit) / rel.size) if rel.size else None


def compute_one_thousandth_err_ratio(
    a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR
) -> float | None:
    """Share (0..1) of elements whose relative error is below 0.001; None for empty arrays.

    Source: msprobe's ``One Thousandth Err Ratio`` column (anatomy §3.5); DESIGN.md §4.
    """
    return _share_below(compute_relative_errors(a, b, floor), 0.001)


def compute_five_thousandths_err_ratio(
    a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR
) -> float | None:
    """Share (0..1) of elements whose relative error is below 0.005; None for empty arrays.

    Source: msprobe's ``Five Thousandths Err Ratio`` column (anatomy §3.5); DESIGN.md §4.
    """
    return _share_below(compute_relative_errors(a, b, floor), 0.005)


def compute_euc_dist(a: ArrayLike, b: ArrayLike) -> float:
    """Euclidean distance ``‖a - b‖₂`` in value units (0.0 for empty arrays).

    Source: msprobe 26.x's ``EucDist`` column (anatomy §3.5); DESIGN.md §4.
    """
    fa, fb = _pair(a, b)
    return float(np.linalg.norm(fa - fb)) if fa.size else 0.0


@dataclass(frozen=True)
class NonFiniteAgreement:
    """How the non-finite values (NaN, +Inf, -Inf) of two same-size arrays line up.

    Attributes:
        count_a, count_b: number of non-finite elements in ``a`` / ``b``.
        agreeing: positions where both sides hold the same non-finite kind (NaN/NaN, +Inf/+Inf, -Inf/-Inf).
        disagreeing: positions where exactly one side is non-finite, or both are but of different kinds.
    """

    count_a: int
    count_b: int
    agreeing: int
    disagreeing: int


def compute_nonfinite_agreement(a: ArrayLike, b: ArrayLike) -> NonFiniteAgreement:
    """Count agreeing and disagreeing non-finite positions of two same-size arrays (DESIGN.md §4)."""
    fa, fb = _pair(a, b)
    nf_a, nf_b = ~np.isfinite(fa), ~np.isfinite(fb)
    both = nf_a & nf_b
    same_kind = both & ((np.isnan(fa) & np.isnan(fb)) | (fa == fb))
    agreeing = int(np.count_nonzero(same_kind))
    disagreeing = int(np.count_nonzero(nf_a | nf_b)) - agreeing
    return NonFiniteAgreement(int(np.count_nonzero(nf_a)), int(np.count_nonzero(nf_b)), agreeing, disagreeing)


@dataclass(frozen=True)
class TensorMetrics:
    """The tensor-mode metrics of one pair of arrays (DESIGN.md §4), all in float64.

    Attributes:
        cosine: see :func:`compute_cosine`; None when undefined.
        max_abs_err: see :func:`compute_max_abs_err` (value units); None when nothing finite was compared.
        max_relative_err: see :func:`compute_max_relative_err` (dimensionless).
        one_thousandth_err_ratio, five_thousandths_err_ratio: shares in [0, 1].
        euc_dist: see :func:`compute_euc_dist` (value units).
        numel: number of elements of each array.
        compared: number of elements the metrics cover (numel minus agreeing non-finite positions);
            0 when non-finite values disagree (no metric is computed then).
        nonfinite: the non-finite agreement of the two arrays.
        relative_floor: the floor used in relative errors (value units).
        notes: what was done beyond the plain formulas (non-finite positions excluded, undefined cosine).
    """

    cosine: float | None
    max_abs_err: float | None
    max_relative_err: float | None
    one_thousandth_err_ratio: float | None
    five_thousandths_err_ratio: float | None
    euc_dist: float | None
    numel: int
    compared: int
    nonfinite: NonFiniteAgreement
    relative_floor: float
    notes: tuple[str, ...] = ()

    def as_pairs(self) -> tuple[tuple[str, float | None], ...]:
        """The six metrics as ``(key, value)`` pairs in :data:`TENSOR_METRIC_KEYS` order."""
        return tuple((key, getattr(self, key)) for key in TENSOR_METRIC_KEYS)

    @property
    def differs(self) -> bool:
        """True when the arrays are not identical (non-zero difference or non-finite disagreement)."""
        return self.nonfinite.disagreeing > 0 or (self.max_abs_err is not None and self.max_abs_err != 0.0)


def compute_tensor_metrics(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> TensorMetrics:
    """All tensor-mode metrics of target ``a`` against baseline ``b`` (same number of elements).

    Non-finite policy (DESIGN.md §4; msprobe instead zeroes agreeing positions): when every NaN/±Inf
    of one side faces the same kind on the other, those positions are left out and the finite rest
    is compared (a note says how many were left out); otherwise no metric is computed, and the
    caller fails the row using ``nonfinite.disagreeing``.

    Raises:
        ValueError: the arrays differ in size, or ``floor`` is not > 0.
        TypeError: complex / non-numeric data (see :func:`to_float64`).
    """
    fa, fb = _pair(a, b)
    numel = int(fa.size)
    nonfinite = compute_nonfinite_agreement(fa, fb)
    notes: list[str] = []
    none6: tuple[None, None, None, None, None, None] = (None, None, None, None, None, None)
    if nonfinite.disagreeing:
        return TensorMetrics(*none6, numel, 0, nonfinite, floor, ())
    if nonfinite.agreeing:
        keep = np.isfinite(fa) & np.isfinite(fb)
        fa, fb = fa[keep], fb[keep]
        notes.append(
            f"{nonfinite.agreeing} non-finite value(s) at the same positions with the same signs on both sides "
            f"were left out; the {fa.size} finite value(s) were compared"
        )
    if fa.size == 0:
        return TensorMetrics(*none6, numel, 0, nonfinite, floor, tuple(notes))
    diff = np.abs(fa - fb)
    rel = diff / np.maximum(np.abs(fb), floor)
    cosine = compute_cosine(fa, fb)
    if cosine is None:
        if fa.size < 2:
            notes.append("cosine undefined for fewer than 2 elements")
        else:
            side = "target (A)" if not np.any(fa) else "baseline (B)"
            notes.append(f"cosine undefined: the {side} is all zero")
    return TensorMetrics(
        cosine=cosine,
        max_abs_err=float(np.max(diff)),
        max_relative_err=float(np.max(rel)),
        one_thousandth_err_ratio=_share_below(rel, 0.001),
        five_thousandths_err_ratio=_share_below(rel, 0.005),
        euc_dist=float(np.linalg.norm(diff)),
        numel=numel,
        compared=int(fa.size),
        nonfinite=nonfinite,
        relative_floor=floor,
        notes=tuple(notes),
    )


#: Keys of the statistics, in dump.json / msprobe order, and their msprobe column spellings.
STAT_NAMES = ("max", "min", "mean", "norm")


@dataclass(frozen=True)
class StatDiff:
    """Difference of one statistic (Max, Min, Mean or Norm) between target ``a`` and baseline ``b``.

    Attributes:
        stat: ``"max"``, ``"min"``, ``"mean"`` or ``"norm"``.
        a, b: the two recorded values (value units), None when not recorded.
        diff: ``a - b`` (signed, value units); None when either value is missing or non-finite.
        relative: ``|a - b| / max(|b|, floor)`` (dimensionless, a number, not msprobe's "%" string);
            None when ``diff`` is None.
        nonfinite_agree: True/False when at least one side is non-finite (same kind on both sides or
            not); None when both are finite or missing.
    """

    stat: str
    a: float | None
    b: float | None
    diff: float | None
    relative: float | None
    nonfinite_agree: bool | None


def compute_stat_diff(stat: str, a: float | None, b: float | None, floor: float = DEFAULT_RELATIVE_FLOOR) -> StatDiff:
    """Signed and relative difference of one statistic (msprobe's ``<S> diff`` / ``<S>RelativeErr``).

    Source: msprobe statistics mode (anatomy §3.5): diff = npu − bench; its relative error is
    ``|diff / bench| × 100`` as a "%" string and ``Nan`` when bench is 0.  Here it is a plain ratio
    with the same denominator floor as :func:`compute_relative_errors`.
    """
    if a is None or b is None:
        return StatDiff(stat, a, b, None, None, None)
    fa, fb = float(a), float(b)
    if not (math.isfinite(fa) and math.isfinite(fb)):
        agree = (math.isnan(fa) and math.isnan(fb)) or fa == fb
        return StatDiff(stat, fa, fb, None, None, agree)
    diff = fa - fb
    return StatDiff(stat, fa, fb, diff, abs(diff) / max(abs(fb), floor), None)


def compute_stat_diffs(
    a: tuple[float | None, ...], b: tuple[float | None, ...], floor: float = DEFAULT_RELATIVE_FLOOR
) -> tuple[StatDiff, ...]:
    """:func:`compute_stat_diff` for ``(max, min, mean, norm)`` of both sides, in that order."""
    return tuple(compute_stat_diff(name, x, y, floor) for name, x, y in zip(STAT_NAMES, a, b, strict=True))


def compute_max_abs_err_lower_bound(diffs: tuple[StatDiff, ...], numel: int) -> float | None:
    """A lower bound on ``max |a - b|`` from the statistics alone (value units), or None.

    ``max``, ``min`` and ``mean`` are 1-Lipschitz in the sup norm, so ``|Δmax|``, ``|Δmin|``,
    ``|Δmean|`` ≤ max|a−b|; and ``|‖a‖−‖b‖| ≤ ‖a−b‖₂ ≤ sqrt(numel)·max|a−b|``, so
    ``|Δnorm| / sqrt(numel)`` ≤ max|a−b|.  The bound is the largest of these over the available,
    finite diffs (statistics recorded in low precision make it approximate to that precision).
    """
    bounds: list[float] = []
    for d in diffs:
        if d.diff is None:
            continue
        if d.stat == "norm":
            if numel > 0:
                bounds.append(abs(d.diff) / math.sqrt(numel))
        else:
            bounds.append(abs(d.diff))
    return max(bounds) if bounds else None
