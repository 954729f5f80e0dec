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
``np.memmap`` views of npy files) are streamed in chunks of :data:`CHUNK_ELEMENTS` elements upcast
into preallocated float64 buffers, so its memory is O(chunk) beyond the inputs.  Streamed maxima,
counts and shares are exact; the sums behind Cosine and EucDist are added per block and chunk, in
a fixed order that differs from one whole-array ``dot`` in the last bits (see the function).

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
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from msprobe_cmp.comparator.dtypes import DEFAULT_RELATIVE_FLOOR, FLOAT_EPS

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


#: Elements per chunk of :func:`compute_tensor_metrics`.  2**16 measured fastest of 2**13..2**18 (float32,
#: bench/tensor_metrics_speed.py): smaller chunks pay the ~25 numpy calls per chunk more often (2**13: 2x
#: slower), larger ones spill the four float64 buffers out of the caches.
CHUNK_ELEMENTS = 1 << 16

#: Worker threads of :func:`compute_tensor_metrics` for arrays of at least 16 chunks (numpy releases the
#: GIL in its ufuncs and BLAS ``ddot``); results do not depend on it (see the function's docstring).
#: 1 by default: on the project's shared 2-core machine 2 threads measured no faster (the other core
#: was busy, and each chunk's ~25 numpy calls hand the GIL over as often); raise it where cores are idle.
CHUNK_WORKERS = 1

#: Fewest chunks per worker thread: starting a thread and its buffers costs about one chunk's work.
_CHUNKS_PER_WORKER = 8

_NOTHING: tuple[None, None, None, None, None, None] = (None, None, None, None, None, None)


def compute_tensor_metrics(a: ArrayLike, b: ArrayLike, floor: float = DEFAULT_RELATIVE_FLOOR) -> TensorMetrics:
    """All tensor-mode metrics of target ``a`` against baseline ``b`` (same number of elements).

    ``a`` and ``b`` may have any shape (they are read flattened, in C order) and any real dtype
    (float16/32/64, ml_dtypes bfloat16/fp8, ints, bools); read-only ``np.memmap`` inputs are read once
    (float64 inputs of more than one chunk twice), chunk by chunk, and never copied whole.

    Non-finite policy (docs/design.md §2; msprobe instead zeroes agreeing positions): when every NaN/±Inf
    of one side faces the same kind on the other, those positions are left out and the finite rest
    is compared (a note says how many were left out); otherwise no metric is computed, and the
    caller fails the row using ``nonfinite.disagreeing``.

    Arrays of at most :data:`CHUNK_ELEMENTS` elements are computed whole, with the per-metric
    formulas of this module (float64 copies of both, cosine of the max-abs-scaled copies, numpy's
    ``dot`` and ``linalg.norm``).  Larger arrays are streamed: each chunk of
    :data:`CHUNK_ELEMENTS` elements is upcast to float64 into preallocated buffers, its non-finite
    positions counted (and, when they agree, left out of that chunk), and it contributes its max
    ``|a - b|``, max relative error, the two below-threshold counts, and the sums ``Σ(a-b)²``,
    ``Σab``, ``Σa²``, ``Σb²`` (one single-threaded BLAS ``ddot`` per block of 8192 elements, see
    :func:`_blocked_dot`).  The maxima and counts are exact, so equal to the whole-array computation
    bit for bit; the four sums are added block by block and chunk by chunk in chunk order, so the
    cosine and EucDist can differ from a whole-array ``dot`` in the last bits (relative error of a
    sum of n non-negative terms ≤ ~n·2⁻⁵³ either way, ~sqrt(n)·2⁻⁵³ in practice).  Chunks run on up to
    :data:`CHUNK_WORKERS` threads; the per-chunk results are combined in chunk order, so the result
    is the same for any number of threads.

    Cosine without overflow or underflow: a float64 (or wider) input of more than one chunk is read
    twice, first for the max-abs of each side's compared values, then divided by it chunk by chunk
    before the dot products, as the whole-array path does.  Other dtypes skip the scaling: their
    magnitudes lie in [2⁻¹⁴⁹, 2⁶⁴] (float32's smallest subnormal to uint64's maximum), so a
    product of two lies in [2⁻²⁹⁸, 2¹²⁸], normal in float64, and a sum of fewer than 2⁶³ of them
    stays below 2¹⁹¹.

    Memory: O(:data:`CHUNK_ELEMENTS`) beyond the inputs, i.e. per worker five buffers (four float64
    and one bool) plus, for chunks holding non-finite values, their masks and finite parts; a
    non-C-contiguous input is read through ``ndarray.flat`` one chunk at a time.

    Raises:
        ValueError: the arrays differ in size, or ``floor`` is not > 0.
        TypeError: complex / non-numeric data (see :func:`to_float64`).
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


def _left_out_note(agreeing: int, compared: int) -> str:
    return (
        f"{agreeing} non-finite value(s) at the same positions with the same signs on both sides "
        f"were left out; the {compared} finite value(s) were compared"
    )


def _cosine_note(compared: int, a_is_zero: bool) -> str:
    if compared < 2:
        return "cosine undefined for fewer than 2 elements"
    side = "target (A)" if a_is_zero else "baseline (B)"
    return f"cosine undefined: the {side} is all zero"


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


@dataclass
class _Partial:
    """What one chunk contributes (all zero / -inf for a chunk with nothing compared)."""

    count_a: int = 0
    count_b: int = 0
    agreeing: int = 0
    disagreeing: int = 0
    compared: int = 0
    max_abs: float = -math.inf
    max_rel: float = -math.inf
    below_1e3: int = 0
    below_5e3: int = 0
    ss_diff: float = 0.0
    dot_ab: float = 0.0
    ss_a: float = 0.0
    ss_b: float = 0.0
    scale_a: float = 0.0
    scale_b: float = 0.0


class _ChunkReader:
    """Chunk ``k`` of two equal-size arrays as float64 (views into per-thread buffers).

    Buffers are per thread (``threading.local``), created on a thread's first chunk.
    """

    def __init__(self, arr_a: np.ndarray, arr_b: np.ndarray) -> None:
        self.sources = (arr_a, arr_b)
        self.flats = tuple(x.reshape(-1) if x.flags.c_contiguous else None for x in (arr_a, arr_b))
        self.numel = int(arr_a.size)
        self.count = -(-self.numel // CHUNK_ELEMENTS)
        self.local = threading.local()

    def buffers(self) -> tuple[F64, F64, F64, F64, NDArray[np.bool_]]:
        bufs = getattr(self.local, "bufs", None)
        if bufs is None:
            bufs = (*(np.empty(CHUNK_ELEMENTS, np.float64) for _ in range(4)), np.empty(CHUNK_ELEMENTS, np.bool_))
            self.local.bufs = bufs
        return bufs

    def read(self, k: int) -> tuple[F64, F64, F64, F64, NDArray[np.bool_]]:
        """Chunk ``k`` of ``a`` and ``b`` as float64, and two float64 and one bool scratch buffers."""
        start = k * CHUNK_ELEMENTS
        stop = min(start + CHUNK_ELEMENTS, self.numel)
        n = stop - start
        buf_a, buf_b, buf_d, buf_r, buf_m = self.buffers()
        for flat, src, buf in zip(self.flats, self.sources, (buf_a, buf_b), strict=True):
            np.copyto(buf[:n], flat[start:stop] if flat is not None else src.flat[start:stop], casting="unsafe")
        return buf_a[:n], buf_b[:n], buf_d[:n], buf_r[:n], buf_m[:n]


def _finite_part(ca: F64, cb: F64, part: _Partial) -> tuple[F64, F64] | None:
    """Count the non-finite positions of a chunk into ``part``; the chunk's positions finite on both
    sides (copies), or None when non-finite values disagree."""
    nf = compute_nonfinite_agreement(ca, cb)
    part.count_a, part.count_b, part.agreeing, part.disagreeing = (
        nf.count_a, nf.count_b, nf.agreeing, nf.disagreeing)
    if nf.disagreeing:
        return None
    if nf.agreeing:
        keep = np.isfinite(ca) & np.isfinite(cb)
        return ca[keep], cb[keep]
    return ca, cb


def _chunk_scales(reader: _ChunkReader, k: int) -> _Partial:
    """First pass of the scaled path: non-finite counts and max-abs of each side's compared values."""
    ca, cb, _, _, _ = reader.read(k)
    part = _Partial()
    scale_a = max(float(ca.max()), -float(ca.min()))
    scale_b = max(float(cb.max()), -float(cb.min()))
    if not (math.isfinite(scale_a) and math.isfinite(scale_b)):
        pair = _finite_part(ca, cb, part)
        if pair is None or pair[0].size == 0:
            return part
        ca, cb = pair
        scale_a = max(float(ca.max()), -float(ca.min()))
        scale_b = max(float(cb.max()), -float(cb.min()))
    part.scale_a, part.scale_b = scale_a, scale_b
    return part


#: Block length of :func:`_blocked_dot`: below OpenBLAS's threading threshold for ``ddot`` (10,000 elements).
_DOT_BLOCK = 8192


def _blocked_dot(x: F64, y: F64) -> float:
    """``Σ x·y`` of two contiguous float64 vectors: one BLAS ``ddot`` per block of :data:`_DOT_BLOCK`
    elements (one batched ``matmul`` call), the block sums added by ``np.sum``, then the remainder's ``ddot``.

    The blocks keep each ``ddot`` single-threaded, so the summation order does not depend on
    OpenBLAS's thread count, and worker threads do not contend for OpenBLAS's threads.
    """
    n = x.size
    full = n - n % _DOT_BLOCK
    total = 0.0
    if full:
        blocks = np.matmul(x[:full].reshape(-1, 1, _DOT_BLOCK), y[:full].reshape(-1, _DOT_BLOCK, 1))
        total = float(blocks.sum())
    if full < n:
        total += float(np.dot(x[full:], y[full:]))
    return total


def _chunk_metrics(reader: _ChunkReader, k: int, floor: float, scales: tuple[float, float] | None) -> _Partial:
    """Everything chunk ``k`` contributes; ``scales`` divide each side before the dot products."""
    ca, cb, buf_d, buf_r, buf_m = reader.read(k)
    part = _Partial()
    d = np.subtract(ca, cb, out=buf_d)  # inf - inf gives NaN (no warning: see _map_chunks); rechecked below
    np.abs(d, out=d)
    max_abs = float(d.max())
    if not math.isfinite(max_abs):  # a non-finite value on either side (or a float64 difference overflowed)
        pair = _finite_part(ca, cb, part)
        if pair is None or pair[0].size == 0:
            return part
        ca, cb = pair
        d = np.subtract(ca, cb, out=buf_d[: ca.size])
        np.abs(d, out=d)
        max_abs = float(d.max())
        buf_r, buf_m = buf_r[: ca.size], buf_m[: ca.size]
    part.compared = int(ca.size)
    part.max_abs = max_abs
    part.ss_diff = _blocked_dot(d, d)
    rel = np.abs(cb, out=buf_r)
    if float(rel.min()) < floor:  # most chunks have no |b| below the floor: skip the slower np.maximum
        np.maximum(rel, floor, out=rel)
    np.divide(d, rel, out=rel)
    part.max_rel = float(rel.max())
    part.below_1e3 = int(np.count_nonzero(np.less(rel, 0.001, out=buf_m)))
    part.below_5e3 = int(np.count_nonzero(np.less(rel, 0.005, out=buf_m)))
    if scales is not None:
        ca = np.divide(ca, scales[0], out=ca) if scales[0] > 0.0 else ca
        cb = np.divide(cb, scales[1], out=cb) if scales[1] > 0.0 else cb
    part.dot_ab = _blocked_dot(ca, cb)
    part.ss_a = _blocked_dot(ca, ca)
    part.ss_b = _blocked_dot(cb, cb)
    return part


def _map_chunks(reader: _ChunkReader, fn: Callable[[int], _Partial]) -> list[_Partial]:
    """``fn`` of every chunk index, in chunk order (on up to :data:`CHUNK_WORKERS` threads)."""
    count = reader.count
    workers = max(1, min(CHUNK_WORKERS, count // _CHUNKS_PER_WORKER))

    def stride(first: int) -> list[_Partial]:  # chunks first, first + workers, ...
        # NumPy's floating-point error state is per thread.  Overflow (float64 differences or sums beyond
        # 1.8e308) and invalid operations (inf - inf in a chunk holding non-finite values, which is then
        # rechecked) show in the results as inf / NaN, so they are not also warned about.
        with np.errstate(over="ignore", invalid="ignore"):
            return [fn(k) for k in range(first, count, workers)]

    if workers == 1:
        return stride(0)

    with ThreadPoolExecutor(max_workers=workers - 1) as pool:  # this thread takes the first stride
        others = [pool.submit(stride, first) for first in range(1, workers)]
        strides = [stride(0), *(f.result() for f in others)]
    return [strides[k % workers][k // workers] for k in range(count)]


def _tensor_metrics_streamed(arr_a: np.ndarray, arr_b: np.ndarray, floor: float) -> TensorMetrics:
    """The chunked computation (see :func:`compute_tensor_metrics`)."""
    reader = _ChunkReader(arr_a, arr_b)
    numel = reader.numel
    scales: tuple[float, float] | None = None
    if _needs_scaling(arr_a.dtype) or _needs_scaling(arr_b.dtype):
        first = _map_chunks(reader, lambda k: _chunk_scales(reader, k))
        if any(p.disagreeing for p in first):
            return TensorMetrics(*_NOTHING, numel, 0, _sum_nonfinite(first), floor, ())
        scales = (max(p.scale_a for p in first), max(p.scale_b for p in first))
    parts = _map_chunks(reader, lambda k: _chunk_metrics(reader, k, floor, scales))
    nonfinite = _sum_nonfinite(parts)
    if nonfinite.disagreeing:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, ())
    compared = sum(p.compared for p in parts)
    notes: list[str] = []
    if nonfinite.agreeing:
        notes.append(_left_out_note(nonfinite.agreeing, compared))
    if compared == 0:
        return TensorMetrics(*_NOTHING, numel, 0, nonfinite, floor, tuple(notes))
    ss_diff = dot_ab = ss_a = ss_b = 0.0
    for p in parts:  # in chunk order
        ss_diff += p.ss_diff
        dot_ab += p.dot_ab
        ss_a += p.ss_a
        ss_b += p.ss_b
    max_abs = max(p.max_abs for p in parts)
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
        max_relative_err=max(p.max_rel for p in parts),
        one_thousandth_err_ratio=sum(p.below_1e3 for p in parts) / compared,
        five_thousandths_err_ratio=sum(p.below_5e3 for p in parts) / compared,
        euc_dist=math.sqrt(ss_diff),
        numel=numel,
        compared=compared,
        nonfinite=nonfinite,
        relative_floor=floor,
        notes=tuple(notes),
    )


def _sum_nonfinite(parts: list[_Partial]) -> NonFiniteAgreement:
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
