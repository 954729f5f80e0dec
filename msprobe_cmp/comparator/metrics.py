"""Comparison metrics: pure numpy functions of two arrays, computed in float64.

Convention (msprobe's and docs/design.md §2): ``a`` is the target ("NPU" in msprobe's columns) and ``b``
the baseline ("Bench", golden); relative errors divide by ``b``.  Every function upcasts both
inputs to float64 first (bf16/fp16/ints/bools included, see :func:`to_float64`) and flattens them;
``a`` and ``b`` must have the same number of elements.

The per-metric functions (``compute_cosine`` ... ``compute_euc_dist``) expect **finite** inputs; a
NaN or Inf in them propagates by IEEE rules and is never zeroed.  :func:`compute_tensor_metrics`
is the entry point the comparator uses: it checks that non-finite values agree position by
position, strips them when they do, and records what it did in ``notes``.

Memory and summation order: the per-metric functions make whole-array float64 copies.
:func:`compute_tensor_metrics` does so only for arrays of at most :data:`CHUNK_ELEMENTS` elements
(where its results equal those functions' bit for bit); larger arrays (typically read-only
``np.memmap`` views of npy files) are streamed, chunk by chunk of :data:`CHUNK_ELEMENTS` elements,
through one fused kernel compiled by numba (:func:`_fused_chunk_rows`), so its memory is O(chunk)
beyond the inputs (plus 64 bytes per chunk).  Streamed maxima, counts and shares are exact; the sums
behind Cosine and EucDist are added in blocks, chunks and a vectorised order that differs from one
whole-array ``dot`` in the last bits (see the function).

Relative error (used by MaxRelativeErr and the two ratios) is ``|a - b| / max(|b|, floor)``.
msprobe adds machine epsilon (2.2e-16) to both sides where ``b == 0``, which turns a tiny absolute
difference against an exact zero into an error of ~1e13.  Here the denominator has a floor instead:
by default the machine epsilon of the coarser stated dtype (float32: 1.19e-7, float16: 9.8e-4,
bfloat16: 7.8e-3; see :func:`msprobe_cmp.comparator.dtypes.compute_relative_floor`).  Magnitudes
below one ulp at 1.0 are treated as that ulp, so ``a = 1e-12`` against ``b = 0`` in float32 gives a
relative error of ~8e-6 instead of infinity, while ``a = 1e-3`` against ``b = 0`` still gives ~8e3.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from msprobe_cmp.comparator.dtypes import DEFAULT_RELATIVE_FLOOR, FLOAT_EPS
from msprobe_cmp.comparator.notes import Note, note
from msprobe_cmp.jit import compile_kernel

F64 = NDArray[np.float64]
_T = TypeVar("_T")

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

    Source: msprobe's ``Cosine`` column (docs/design.md §3); docs/design.md §2.

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

    Source: msprobe's ``MaxAbsErr`` column (docs/design.md §3); docs/design.md §2.
    """
    fa, fb = _pair(a, b)
    if fa.size == 0:
        return None
    return float(np.max(np.abs(fa - fb)))


def compute_relative_errors(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> F64:
    """Element-wise relative error ``|a - b| / max(|b|, floor)`` as a flat float64 array.

    ``floor`` (> 0) is the smallest denominator, in value units (module docstring explains the
    default).  Source: msprobe's relative error (docs/design.md §3), with a floor in place of its epsilon.
    """
    if not floor > 0.0:
        raise ValueError(f"relative-error floor must be > 0, got {floor!r}")
    fa, fb = _pair(a, b)
    return np.abs(fa - fb) / np.maximum(np.abs(fb), floor)


def compute_max_relative_err(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> float | None:
    """``max(|a - b| / max(|b|, floor))``, dimensionless; None for empty arrays.

    Source: msprobe's ``MaxRelativeErr`` column (docs/design.md §3); docs/design.md §2 ("with a documented
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

    Source: msprobe's ``One Thousandth Err Ratio`` column (docs/design.md §3); docs/design.md §2.
    """
    return _share_below(compute_relative_errors(a, b, floor), 0.001)


def compute_five_thousandths_err_ratio(
    a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR
) -> float | None:
    """Share (0..1) of elements whose relative error is below 0.005; None for empty arrays.

    Source: msprobe's ``Five Thousandths Err Ratio`` column (docs/design.md §3); docs/design.md §2.
    """
    return _share_below(compute_relative_errors(a, b, floor), 0.005)


def compute_euc_dist(a: ArrayLike, b: ArrayLike) -> float:
    """Euclidean distance ``‖a - b‖₂`` in value units (0.0 for empty arrays).

    Source: msprobe 26.x's ``EucDist`` column (docs/design.md §3); docs/design.md §2.
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
    """Count agreeing and disagreeing non-finite positions of two same-size arrays (docs/design.md §2)."""
    fa, fb = _pair(a, b)
    nf_a, nf_b = ~np.isfinite(fa), ~np.isfinite(fb)
    both = nf_a & nf_b
    same_kind = both & ((np.isnan(fa) & np.isnan(fb)) | (fa == fb))
    agreeing = int(np.count_nonzero(same_kind))
    disagreeing = int(np.count_nonzero(nf_a | nf_b)) - agreeing
    return NonFiniteAgreement(int(np.count_nonzero(nf_a)), int(np.count_nonzero(nf_b)), agreeing, disagreeing)


@dataclass(frozen=True)
class TensorMetrics:
    """The tensor-mode metrics of one pair of arrays (docs/design.md §2), all in float64.

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


#: Elements per chunk of :func:`compute_tensor_metrics`: arrays of at most this many elements are computed whole,
#: larger ones chunk by chunk (the unit of the non-finite check, of the per-chunk sums and of the float64 buffers
#: of dtypes the kernel does not read directly).  2**16 since issue 7 (fastest of 2**13..2**18 for the numpy
#: passes then; with the fused kernel 2**14..2**18 measured within noise of each other, bench/RESULTS.md, issue 16).
CHUNK_ELEMENTS = 1 << 16

#: Worker threads of :func:`compute_tensor_metrics` for arrays of at least 16 chunks (the fused kernel releases
#: the GIL); results do not depend on it (see the function's docstring).  1 by default: the project's 2-core
#: machine is shared with other work; raise it where cores are idle.
CHUNK_WORKERS = 1

#: Fewest chunks per worker thread: starting a thread (and its buffers) costs about one chunk's work.
_CHUNKS_PER_WORKER = 8

_NOTHING: tuple[None, None, None, None, None, None] = (None, None, None, None, None, None)


def compute_tensor_metrics(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> TensorMetrics:
    """All tensor-mode metrics of target ``a`` against baseline ``b`` (same number of elements).

    ``a`` and ``b`` may have any shape (they are read flattened, in C order) and any real dtype
    (float16/32/64, ml_dtypes bfloat16/fp8, ints, bools); read-only ``np.memmap`` inputs are read once
    (float64 inputs of more than one chunk twice), chunk by chunk, and never copied whole.  The formulas
    are those of the per-metric functions above (msprobe's columns, docs/design.md §2-§3); every value is
    upcast to float64 first; results in value units (max_abs_err, euc_dist) or dimensionless.

    Non-finite policy (docs/design.md §2; msprobe instead zeroes agreeing positions): when every NaN/±Inf
    of one side faces the same kind on the other, those positions are left out and the finite rest
    is compared (a note says how many were left out); otherwise no metric is computed, and the
    caller fails the row using ``nonfinite.disagreeing``.

    Arrays of at most :data:`CHUNK_ELEMENTS` elements are computed whole, with the per-metric
    formulas of this module (float64 copies of both, cosine of the max-abs-scaled copies, numpy's
    ``dot`` and ``linalg.norm``), so equal to those functions bit for bit.  Larger arrays are streamed
    through one fused kernel (:func:`_fused_chunk_rows`, compiled by numba on first use and cached on
    disk, see :func:`_fused_kernel`): one pass over both arrays that gives, per chunk of
    :data:`CHUNK_ELEMENTS` elements, max ``|a - b|``, the max relative error, the two below-threshold
    counts, and the sums ``Σ(a-b)²``, ``Σab``, ``Σa²``, ``Σb²``.  float32 and float64 arrays (C-contiguous,
    both of the same dtype) are read by the kernel in place; other dtypes and non-contiguous arrays are
    upcast chunk by chunk into two float64 buffers first.  A chunk whose max ``|a - b|`` is not finite
    holds a NaN or ±Inf (or a float64 difference overflowed): its non-finite positions are counted with
    :func:`compute_nonfinite_agreement` and, when they agree, the kernel is run again on the chunk's
    finite positions alone.

    Numerics of the streamed path: the maxima and counts are exact (each element's ``|a - b|`` and
    relative error are the same float64 operations as numpy's, compared as numpy does), so equal to the
    whole-array computation bit for bit.  The sums are not added in index order: each block of
    :data:`_SUM_BLOCK` elements is summed by a loop the compiler vectorises (numba ``fastmath`` flag
    ``reassoc`` only: no FMA contraction, no NaN/Inf assumptions, no reciprocal division), i.e. into
    several interleaved partial sums then added together; a chunk's block sums are added in order, and
    the chunks' sums exactly (``math.fsum``).  The order depends on the chunk and block lengths and the
    CPU's vector width, not on the data's address, the number of threads or the run, so on one machine
    the results are the same every time; they differ from a whole-array ``dot`` (and from another CPU's)
    in the last bits: a relative error of ~(terms per partial sum + blocks per chunk)·2⁻⁵³ at most,
    ~1-3e-16 measured (a whole-array ``dot``: up to ~n·2⁻⁵³).  Chunks run on up to :data:`CHUNK_WORKERS`
    threads, each on a contiguous range of whole chunks, so the result is the same for any number of
    threads.

    Cosine without overflow or underflow: a float64 (or wider) input of more than one chunk is read
    twice, first for the max-abs of each side's compared values, then, before the dot products,
    multiplied by the power of two that brings that max-abs into [0.5, 1) (exact, unlike the whole-array
    path's division by the max-abs; the cosine of the scaled values equals that of the unscaled ones
    unless these would overflow or underflow).  Other dtypes are multiplied by 1.0: their magnitudes lie
    in [2⁻¹⁴⁹, 2⁶⁴] (float32's smallest subnormal to uint64's maximum), so a product of two lies in
    [2⁻²⁹⁸, 2¹²⁸], normal in float64, and a sum of fewer than 2⁶³ of them stays below 2¹⁹¹.

    Memory: beyond the inputs, 64 bytes per chunk for the per-chunk results, plus, per worker, two
    float64 chunk buffers (for dtypes read through buffers, and to re-read a chunk holding non-finite
    values, with its masks and finite parts); a non-C-contiguous input is read through ``ndarray.flat``
    one chunk at a time.  The first array of more than one chunk in a process imports numba and loads
    the kernel: ~0.4-0.7 s and ~100 MB of resident memory once (numba, llvmlite, and scipy when
    installed, which numba imports); see :func:`_fused_kernel`.

    Raises:
        ValueError: the arrays differ in size, or ``floor`` is not > 0.
        TypeError: complex / non-numeric data (see :func:`to_float64`).
        ImportError: numba (a dependency of msprobe-cmp) is not installed, for arrays of more than one chunk.
    """
    if not floor > 0.0:
        raise ValueError(f"relative-error floor must be > 0, got {floor!r}")
    arr_a, arr_b = _real_array(a), _real_array(b)
    if arr_a.size != arr_b.size:
        raise ValueError(f"arrays differ in size: {arr_a.size} vs {arr_b.size}")
    if arr_a.size <= CHUNK_ELEMENTS:
        return _tensor_metrics_whole(to_float64(arr_a), to_float64(arr_b), floor)
    return _tensor_metrics_streamed(arr_a, arr_b, floor)


def _real_array(x: ArrayLike) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind in "cOUSMm":
        raise TypeError(f"cannot compare values of dtype {arr.dtype} as real numbers")
    return arr


def _left_out_note(agreeing: int, compared: int) -> Note:
    return note("nonfinite_left_out", f"{agreeing} non-finite value(s) at the same positions with the same signs on "
                f"both sides were left out; the {compared} finite value(s) were compared", agreeing=agreeing,
                compared=compared)


def _cosine_note(compared: int, a_is_zero: bool) -> Note:
    if compared < 2:
        return note("cosine_undefined", "cosine undefined for fewer than 2 elements", compared=compared,
                    all_zero=None)
    side = "target (A)" if a_is_zero else "baseline (B)"
    return note("cosine_undefined", f"cosine undefined: the {side} is all zero", compared=compared,
                all_zero="A" if a_is_zero else "B")


def _tensor_metrics_whole(fa: F64, fb: F64, floor: float) -> TensorMetrics:
    """The whole-array computation (flat float64 inputs of equal size)."""
    numel = int(fa.size)
    nonfinite = compute_nonfinite_agreement(fa, fb)
    notes: list[str] = []
    if nonfinite.disagreeing:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, ())
    if nonfinite.agreeing:
        keep = np.isfinite(fa) & np.isfinite(fb)
        fa, fb = fa[keep], fb[keep]
        notes.append(_left_out_note(nonfinite.agreeing, int(fa.size)))
    if fa.size == 0:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, tuple(notes))
    with np.errstate(over="ignore"):  # 1.7e308 - -1e308 is +Inf, MaxAbsErr's value: no warning for the user
        diff = np.abs(fa - fb)
        rel = diff / np.maximum(np.abs(fb), floor)
    cosine = compute_cosine(fa, fb)
    if cosine is None:
        notes.append(_cosine_note(int(fa.size), not np.any(fa)))
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


def _needs_scaling(dtype: np.dtype) -> bool:
    """True when float64 sums of squares of ``dtype`` values could overflow or underflow (see the bound
    in :func:`compute_tensor_metrics`): floats wider than 4 bytes and anything unusual."""
    if dtype.kind in "biu":
        return dtype.itemsize > 8
    return dtype.itemsize > 4


#: Elements per block of the fused kernel's sums (:func:`_fused_chunk_rows`): each block is summed on its own
#: (by the vectorised loop), the block sums added in order.  256 keeps each partial sum short (the sums came
#: within 1-3e-16 of exactly rounded ones on 16M float32 pairs; whole 2**16-element chunks: 3e-15) at no
#: measurable cost (0.62-0.65 ns per element pair for blocks of 256 to 65536).
_SUM_BLOCK = 256

#: Columns of the fused kernel's per-chunk rows (:func:`_fused_chunk_rows`).
_ROW_COLUMNS = ("max_abs", "max_rel", "below_1e3", "below_5e3", "ss_diff", "dot_ab", "ss_a", "ss_b")
_MAX_ABS, _MAX_REL, _BELOW_1E3, _BELOW_5E3, _SS_DIFF, _DOT_AB, _SS_A, _SS_B = range(len(_ROW_COLUMNS))


def _fused_chunk_rows(
    a: np.ndarray, b: np.ndarray, chunk: int, floor: float, mul_a: float, mul_b: float, rows: F64
) -> None:  # pragma: no cover - run compiled by numba (see _fused_kernel); its results are tested
    """One pass over ``a`` and ``b``: row ``k`` of ``rows`` receives what chunk ``k`` contributes.

    The fused kernel of :func:`compute_tensor_metrics` (source of each formula: the per-metric functions
    of this module; docs/design.md §2-§3), compiled by numba (:func:`_fused_kernel`).

    Args:
        a, b: 1-D C-contiguous arrays of equal size, float32 or float64 (target and baseline).
        chunk: elements per chunk (> 0); chunk ``k`` is ``[k·chunk, min((k+1)·chunk, a.size))``.
        floor: the relative-error floor (> 0, value units): relative error ``|a - b| / max(|b|, floor)``.
        mul_a, mul_b: powers of two that scale ``a`` and ``b`` in the three dot products (1.0: none).
        rows: float64, shape ``(ceil(a.size / chunk), len(_ROW_COLUMNS))``, written in
            :data:`_ROW_COLUMNS` order: max ``|a - b|`` (value units), max relative error, the counts of
            relative errors below 0.001 and below 0.005 (exact as float64), ``Σ(a-b)²``,
            ``Σ(a·mul_a)(b·mul_b)``, ``Σ(a·mul_a)²``, ``Σ(b·mul_b)²``.  A chunk without elements gives zeros.

    Every element is upcast to float64 (exactly) before any arithmetic; the relative error is one
    correctly rounded division, as numpy's.  Both maxima are taken over the int64 bit patterns of
    non-negative float64 values (``|a - b|`` and the relative error), which are ordered as the values,
    with a NaN (its sign bit cleared by ``abs``) above +Inf: the maximum is exact and, as ``np.max``'s,
    NaN when any value is NaN; an integer maximum also lets the loop be vectorised without assuming
    anything about NaN.  With non-finite inputs only the max ``|a - b|`` is meaningful (NaN or +Inf):
    the caller redoes such chunks.  The sums are taken per block of :data:`_SUM_BLOCK` elements, which the
    compiler may reassociate (see :func:`compute_tensor_metrics`), and the block sums added in order.  Chunks
    and blocks are sliced first so that the inner loop's index starts at 0 (a non-negative index needs no
    wrap-around: the loop reads consecutive memory and is vectorised).
    """
    for k in range(rows.shape[0]):
        ca = a[k * chunk: (k + 1) * chunk]
        cb = b[k * chunk: (k + 1) * chunk]
        max_abs_bits = 0
        max_rel_bits = 0
        below_1e3 = 0
        below_5e3 = 0
        ss_diff = 0.0
        dot_ab = 0.0
        ss_a = 0.0
        ss_b = 0.0
        for start in range(0, ca.size, _SUM_BLOCK):
            ba = ca[start: start + _SUM_BLOCK]
            bb = cb[start: start + _SUM_BLOCK]
            block_diff = 0.0
            block_ab = 0.0
            block_a = 0.0
            block_b = 0.0
            for i in range(ba.size):
                x = float(np.float64(ba[i]))  # exact upcast (numba's float() alone keeps a float32 a float32)
                y = float(np.float64(bb[i]))
                d = abs(x - y)
                den = abs(y)
                rel = d / (den if den > floor else floor)
                max_abs_bits = max(max_abs_bits, int(np.float64(d).view(np.int64)))
                max_rel_bits = max(max_rel_bits, int(np.float64(rel).view(np.int64)))
                below_1e3 += rel < 0.001
                below_5e3 += rel < 0.005
                block_diff += d * d
                xs = x * mul_a
                ys = y * mul_b
                block_ab += xs * ys
                block_a += xs * xs
                block_b += ys * ys
            ss_diff += block_diff
            dot_ab += block_ab
            ss_a += block_a
            ss_b += block_b
        rows[k, 0] = np.int64(max_abs_bits).view(np.float64)
        rows[k, 1] = np.int64(max_rel_bits).view(np.float64)
        rows[k, 2] = below_1e3
        rows[k, 3] = below_5e3
        rows[k, 4] = ss_diff
        rows[k, 5] = dot_ab
        rows[k, 6] = ss_a
        rows[k, 7] = ss_b


_FusedKernel = Callable[[np.ndarray, np.ndarray, int, float, float, float, F64], None]


@functools.cache
def _fused_kernel() -> _FusedKernel:
    """:func:`_fused_chunk_rows` compiled (imported here, on the first array of more than one chunk) by
    :func:`msprobe_cmp.jit.compile_kernel`: ``nogil`` (worker threads run it in parallel), ``error_model="numpy"``
    (a division by zero gives Inf/NaN instead of raising, so the loop has no branch; the divisors are never zero),
    ``fastmath`` ``reassoc`` only (lets the loop be vectorised; see :func:`compute_tensor_metrics`), and its
    on-disk cache: the machine code for each argument type (read-only float32 and float64 arrays; ~0.3-0.8 s to
    compile each) is written beside this file (``__pycache__/metrics._fused_chunk_rows-<line>.py311.nbi`` and
    ``.nbc``; in ``NUMBA_CACHE_DIR`` when that is set, in numba's user-wide cache directory when ``__pycache__``
    is not writable) and loaded from there by later processes, until this file changes.
    """
    return compile_kernel(_fused_chunk_rows)


def _kernel_input(x: np.ndarray) -> np.ndarray:
    """``x`` as the kernel takes it: a read-only ndarray view (memmaps and buffers alike, so that numba
    compiles one version per dtype and not one per subclass or writability)."""
    view = np.asarray(x).view(np.ndarray)
    view.flags.writeable = False
    return view


#: dtypes the fused kernel reads in place (others are upcast into float64 buffers chunk by chunk).
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class _ChunkReader:
    """Chunks of two equal-size arrays for the fused kernel.

    ``direct``: both are C-contiguous float32 (or both float64) and the kernel reads them in place
    (:meth:`flat_range`); otherwise :meth:`read` upcasts chunk ``k`` of each into a float64 buffer of
    the calling thread (``threading.local``, made on a thread's first chunk).
    """

    def __init__(self, arr_a: np.ndarray, arr_b: np.ndarray) -> None:
        self.sources = (arr_a, arr_b)
        self.flats = tuple(x.reshape(-1) if x.flags.c_contiguous else None for x in (arr_a, arr_b))
        self.numel = int(arr_a.size)
        self.count = -(-self.numel // CHUNK_ELEMENTS)
        self.direct = (
            self.flats[0] is not None and self.flats[1] is not None
            and arr_a.dtype == arr_b.dtype and arr_a.dtype in _KERNEL_DTYPES
        )
        self.local = threading.local()

    def flat_range(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunks ``first`` to ``stop - 1`` of both arrays, in place (``direct`` only)."""
        fa, fb = self.flats
        assert fa is not None and fb is not None
        lo, hi = first * CHUNK_ELEMENTS, min(stop * CHUNK_ELEMENTS, self.numel)
        return _kernel_input(fa[lo:hi]), _kernel_input(fb[lo:hi])

    def read(self, k: int) -> tuple[F64, F64]:
        """Chunk ``k`` of ``a`` and ``b`` as float64 (views into this thread's two buffers)."""
        bufs = getattr(self.local, "bufs", None)
        if bufs is None:
            bufs = self.local.bufs = (np.empty(CHUNK_ELEMENTS, np.float64), np.empty(CHUNK_ELEMENTS, np.float64))
        start = k * CHUNK_ELEMENTS
        stop = min(start + CHUNK_ELEMENTS, self.numel)
        n = stop - start
        for flat, src, buf in zip(self.flats, self.sources, bufs, strict=True):
            np.copyto(buf[:n], flat[start:stop] if flat is not None else src.flat[start:stop], casting="unsafe")
        return bufs[0][:n], bufs[1][:n]


def _finite_part(ca: F64, cb: F64) -> tuple[NonFiniteAgreement, tuple[F64, F64] | None]:
    """The non-finite agreement of a chunk, and its positions finite on both sides (copies, or the
    chunk itself when all are finite), or None when non-finite values disagree."""
    nf = compute_nonfinite_agreement(ca, cb)
    if nf.disagreeing:
        return nf, None
    if nf.agreeing:
        keep = np.isfinite(ca) & np.isfinite(cb)
        return nf, (ca[keep], cb[keep])
    return nf, (ca, cb)


def _max_abs(x: F64) -> float:
    return max(float(x.max()), -float(x.min())) if x.size else 0.0


def _chunk_scales(reader: _ChunkReader, k: int) -> tuple[NonFiniteAgreement | None, float, float]:
    """First pass of the scaled path: chunk ``k``'s non-finite agreement (None when all finite) and the
    max-abs of each side's compared values."""
    ca, cb = reader.read(k)
    scale_a, scale_b = _max_abs(ca), _max_abs(cb)
    if math.isfinite(scale_a) and math.isfinite(scale_b):
        return None, scale_a, scale_b
    nf, pair = _finite_part(ca, cb)
    if pair is None:
        return nf, 0.0, 0.0
    return nf, _max_abs(pair[0]), _max_abs(pair[1])


def _power_of_two_scale(max_abs: float) -> float:
    """``2**-e`` with ``2**(e-1) <= max_abs < 2**e`` (multiplying by it is exact and brings ``max_abs`` into
    [0.5, 1)), at most ``2**1023``; 1.0 for 0."""
    if max_abs == 0.0:
        return 1.0
    return math.ldexp(1.0, min(-math.frexp(max_abs)[1], 1023))


def _map_chunk_ranges(count: int, fn: Callable[[int, int], list[_T]]) -> list[_T]:
    """``fn(first, stop)`` over contiguous ranges of the ``count`` chunks, concatenated in chunk order
    (on up to :data:`CHUNK_WORKERS` threads, one range each)."""
    workers = max(1, min(CHUNK_WORKERS, count // _CHUNKS_PER_WORKER))
    bounds = [count * w // workers for w in range(workers + 1)]

    def run(w: int) -> list[_T]:
        # NumPy's floating-point error state is per thread: overflow (float64 differences, sums or upcasts
        # beyond 1.8e308) and invalid operations show in the results as inf / NaN and are rechecked, so they
        # are not also warned about.
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(bounds[w], bounds[w + 1])

    if workers == 1:
        return run(0)
    with ThreadPoolExecutor(max_workers=workers - 1) as pool:  # this thread takes the first range
        others = [pool.submit(run, w) for w in range(1, workers)]
        parts = run(0)
        for f in others:
            parts.extend(f.result())
    return parts


def _tensor_metrics_streamed(arr_a: np.ndarray, arr_b: np.ndarray, floor: float) -> TensorMetrics:
    """The chunked computation (see :func:`compute_tensor_metrics`)."""
    reader = _ChunkReader(arr_a, arr_b)
    numel, count = reader.numel, reader.count
    scales: tuple[float, float] | None = None
    if _needs_scaling(arr_a.dtype) or _needs_scaling(arr_b.dtype):
        first = _map_chunk_ranges(count, lambda lo, hi: [_chunk_scales(reader, k) for k in range(lo, hi)])
        counted = [nf for nf, _, _ in first if nf is not None]
        if any(nf.disagreeing for nf in counted):
            return TensorMetrics(*_NOTHING, numel, 0, _sum_nonfinite(counted), floor, ())
        scales = (max(s for _, s, _ in first), max(s for _, _, s in first))
    mul_a, mul_b = (1.0, 1.0) if scales is None else (_power_of_two_scale(scales[0]), _power_of_two_scale(scales[1]))
    kernel = _fused_kernel()
    rows = np.empty((count, len(_ROW_COLUMNS)), np.float64)

    def fill(lo: int, hi: int) -> list[None]:
        if reader.direct:
            kernel(*reader.flat_range(lo, hi), CHUNK_ELEMENTS, floor, mul_a, mul_b, rows[lo:hi])
        else:
            for k in range(lo, hi):
                ca, cb = reader.read(k)
                kernel(_kernel_input(ca), _kernel_input(cb), CHUNK_ELEMENTS, floor, mul_a, mul_b, rows[k: k + 1])
        return []

    _map_chunk_ranges(count, fill)
    counted = []
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf while counting: see _map_chunk_ranges
        for k in np.flatnonzero(~np.isfinite(rows[:, _MAX_ABS])).tolist():
            # a NaN or ±Inf in the chunk (or an overflowed float64 difference: then nothing is non-finite)
            nf, pair = _finite_part(*reader.read(k))
            counted.append(nf)
            if pair is not None and nf.agreeing:
                kernel(_kernel_input(pair[0]), _kernel_input(pair[1]), CHUNK_ELEMENTS, floor, mul_a, mul_b,
                       rows[k: k + 1])
    nonfinite = _sum_nonfinite(counted)
    if nonfinite.disagreeing:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, ())
    compared = numel - nonfinite.agreeing
    notes: list[str] = []
    if nonfinite.agreeing:
        notes.append(_left_out_note(nonfinite.agreeing, compared))
    if compared == 0:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, tuple(notes))
    ss_diff, dot_ab, ss_a, ss_b = (math.fsum(rows[:, j].tolist()) for j in (_SS_DIFF, _DOT_AB, _SS_A, _SS_B))
    max_abs = float(rows[:, _MAX_ABS].max())
    a_zero, b_zero = (ss_a == 0.0, ss_b == 0.0) if scales is None else (scales[0] == 0.0, scales[1] == 0.0)
    cosine: float | None
    if compared < 2 or a_zero != b_zero:
        cosine = None
        notes.append(_cosine_note(compared, a_zero))
    elif a_zero or max_abs == 0.0:  # both all zero, or identical
        cosine = 1.0
    else:
        cosine = min(1.0, max(-1.0, dot_ab / (math.sqrt(ss_a) * math.sqrt(ss_b))))
    return TensorMetrics(
        cosine=cosine,
        max_abs_err=max_abs,
        max_relative_err=float(rows[:, _MAX_REL].max()),
        one_thousandth_err_ratio=int(rows[:, _BELOW_1E3].sum()) / compared,
        five_thousandths_err_ratio=int(rows[:, _BELOW_5E3].sum()) / compared,
        euc_dist=math.sqrt(ss_diff),
        numel=numel,
        compared=compared,
        nonfinite=nonfinite,
        relative_floor=floor,
        notes=tuple(notes),
    )


def _sum_nonfinite(parts: list[NonFiniteAgreement]) -> NonFiniteAgreement:
    return NonFiniteAgreement(
        sum(p.count_a for p in parts), sum(p.count_b for p in parts),
        sum(p.agreeing for p in parts), sum(p.disagreeing for p in parts),
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

    Source: msprobe statistics mode (docs/design.md §3): diff = npu − bench; its relative error is
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


#: float32's machine epsilon: the precision recorders reduce Mean and Norm in (msprobe 1.2.2's PyTorch recorder).
_FLOAT32_EPS = FLOAT_EPS["float32"]
#: The largest finite float32.
FLOAT32_MAX = 3.4028234663852886e38


def reduction_slack(numel: int) -> float:
    """Relative slack of a Mean or Norm that one recorder reduced in float32 and the other in float64 (dimensionless).

    A float32 pairwise sum of ``n`` terms errs by at most about ``log2(n)`` units of float32's epsilon relative to
    the sum of the magnitudes (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2); 2 more
    cover the division (Mean) or the square root (Norm).  msprobe 1.2.2's PyTorch recorder reduces in float32, ours
    in float64, so the same tensor gets Means and Norms that differ within this slack.
    """
    return (math.log2(max(numel, 1)) + 2.0) * _FLOAT32_EPS


def statistics_differ(a: tuple[float, float, float, float], b: tuple[float, float, float, float], numel: int) -> bool:
    """Whether two tensors' finite ``(max, min, mean, norm)`` show that the tensors differ.

    Max and Min are elements of the tensor, exact in any recorder: any difference counts.  Mean and Norm are
    reductions whose rounding depends on the recorder (:func:`reduction_slack`): a Mean differs when
    ``|ΔMean| > slack × max(|Max|, |Min|)`` of either side (every element, so the mean's terms, is bounded by that),
    a Norm when ``|ΔNorm| > slack × max(Norm)``.
    """
    if a[0] != b[0] or a[1] != b[1]:
        return True
    slack = reduction_slack(numel)
    scale = max(abs(a[0]), abs(a[1]), abs(b[0]), abs(b[1]))
    return abs(a[2] - b[2]) > slack * scale or abs(a[3] - b[3]) > slack * max(abs(a[3]), abs(b[3]))


def is_float32_overflow(stat: str, finite: float, numel: int) -> bool:
    """Whether a finite Mean or Norm of ``numel`` elements could overflow float32 on the way (value units in, True
    when a float32 reduction of the same tensor may give ±Inf): a Mean whose sum ``|mean| × numel`` exceeds float32's
    largest value, or a Norm whose square does (an attention mask of -3.4e38 entries, reduced in float32 by msprobe
    1.2.2's PyTorch recorder, has Mean -Inf and Norm Inf)."""
    if stat == "mean":
        return abs(finite) * max(numel, 1) > FLOAT32_MAX
    if stat == "norm":
        return abs(finite) > math.sqrt(FLOAT32_MAX)
    return False


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
