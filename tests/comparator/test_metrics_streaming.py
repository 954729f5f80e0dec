"""compute_tensor_metrics on arrays of more than one chunk, against independent whole-array references.

References: plain numpy float64 over the whole arrays for the maxima and counts (which must be equal bit for
bit: they do not depend on the order of operations), and ``math.fsum`` (exactly rounded sums) for the four
sums behind the cosine and EucDist.  The streamed sums are each chunk's sum in the order of the fused kernel's
vectorised loop (interleaved partial sums), the chunks' sums then added exactly; the error of a floating-point
sum of n terms is bounded by ~n·2⁻⁵³ times the sum of their magnitudes, and is ~sqrt(n)·2⁻⁵³ for these random
data, so for ≤ 10⁶ terms a relative tolerance
of 1e-12 on EucDist (a sum of non-negative terms) and an absolute one of 1e-12 on the cosine (whose error
is that of Σab relative to ‖a‖‖b‖) leave a margin of ~100x over what was observed while still catching any
lost, doubled or misplaced chunk (which changes the results in the 4th digit or more).
"""

from __future__ import annotations

import math
import tracemalloc
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from msprobe_cmp.comparator import metrics
from msprobe_cmp.comparator.dtypes import DEFAULT_RELATIVE_FLOOR
from msprobe_cmp.comparator.metrics import compute_tensor_metrics

COS_ABS = 1e-12
EUC_REL = 1e-12


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 1000 elements, so that small arrays span many chunks (and each chunk's vectorised loop has
    a remainder)."""
    monkeypatch.setattr(metrics, "CHUNK_ELEMENTS", 1000)
    return 1000


def _reference(a: np.ndarray, b: np.ndarray, floor: float = DEFAULT_RELATIVE_FLOOR) -> dict[str, float]:
    """The metrics of finite, equal-size arrays, whole-array, with exactly rounded sums (math.fsum)."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    d = np.abs(x - y)
    rel = d / np.maximum(np.abs(y), floor)
    dot = math.fsum((x * y).tolist())
    return {
        "cosine": dot / (math.sqrt(math.fsum((x * x).tolist())) * math.sqrt(math.fsum((y * y).tolist()))),
        "max_abs_err": float(d.max()),
        "max_relative_err": float(rel.max()),
        "one_thousandth_err_ratio": int((rel < 0.001).sum()) / x.size,
        "five_thousandths_err_ratio": int((rel < 0.005).sum()) / x.size,
        "euc_dist": math.sqrt(math.fsum((d * d).tolist())),
    }


def _assert_matches(m: metrics.TensorMetrics, ref: dict[str, float]) -> None:
    assert m.cosine is not None and m.euc_dist is not None
    assert m.cosine == pytest.approx(ref["cosine"], rel=0, abs=COS_ABS)
    assert m.euc_dist == pytest.approx(ref["euc_dist"], rel=EUC_REL)
    for key in ("max_abs_err", "max_relative_err", "one_thousandth_err_ratio", "five_thousandths_err_ratio"):
        assert getattr(m, key) == ref[key], key  # exact: no summation involved


def _noisy_pair(n: int, dtype: str | type = np.float32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    b = a + rng.standard_normal(n) * np.where(rng.random(n) < 0.5, 1e-4, 1e-2)
    return a.astype(dtype), b.astype(dtype)


# ---------------------------------------------------------------- plain data, real chunk size


def test_float32_over_several_real_chunks_matches_the_whole_array_reference():
    n = 3 * metrics.CHUNK_ELEMENTS + 12345  # a partial last chunk, and a partial last dot block
    a, b = _noisy_pair(n)
    b[n // 2:: 9999] = 0.0  # relative errors against the floor, in some chunks only
    a[n // 2:: 19998] = 0.0
    m = compute_tensor_metrics(a, b)
    _assert_matches(m, _reference(a, b))
    assert (m.numel, m.compared, m.notes) == (n, n, ())
    # the ratios are neither 0 nor 1, so the counts are really tested
    assert 0.3 < m.one_thousandth_err_ratio < m.five_thousandths_err_ratio < 0.9  # type: ignore[operator]


def test_one_chunk_is_computed_whole_and_one_more_element_is_streamed(monkeypatch: pytest.MonkeyPatch):
    n = metrics.CHUNK_ELEMENTS
    a, b = _noisy_pair(n + 1, seed=1)
    whole = compute_tensor_metrics(a[:n], b[:n])
    fa, fb = a[:n].astype(np.float64), b[:n].astype(np.float64)
    na, nb = fa / np.max(np.abs(fa)), fb / np.max(np.abs(fb))  # the whole-array formula: max-abs scaled
    assert whole.cosine == min(1.0, float(np.dot(na, nb) / (np.linalg.norm(na) * np.linalg.norm(nb))))
    assert whole.euc_dist == float(np.linalg.norm(np.abs(fa - fb)))
    streamed = compute_tensor_metrics(a, b)  # 2 chunks, the second of 1 element
    _assert_matches(streamed, _reference(a, b))


def test_streaming_is_independent_of_the_worker_count(monkeypatch: pytest.MonkeyPatch, small_chunks: int):
    a, b = _noisy_pair(25 * small_chunks + 7, seed=2)
    results = []
    for workers in (1, 2, 3):
        monkeypatch.setattr(metrics, "CHUNK_WORKERS", workers)
        results.append(compute_tensor_metrics(a, b))
    assert results[0] == results[1] == results[2]  # every float bit for bit, the notes too
    _assert_matches(results[0], _reference(a, b))


def test_non_contiguous_input_is_read_in_c_order(small_chunks: int):
    a, b = _noisy_pair(60 * 70, dtype=np.float32, seed=3)
    at = np.ascontiguousarray(a.reshape(60, 70).T).T  # F-ordered 60x70 holding a's values in C order
    assert not at.flags.c_contiguous
    assert compute_tensor_metrics(at, b.reshape(70, 60)) == compute_tensor_metrics(a, b)
    strided = np.repeat(a, 2)[::2]
    assert compute_tensor_metrics(strided, b) == compute_tensor_metrics(a, b)


def test_results_do_not_depend_on_the_arrays_address(small_chunks: int):
    """The fused kernel's summation order depends on the chunk length only: the same values one element
    further into memory give the same results bit for bit."""
    a, b = _noisy_pair(9 * small_chunks + 333, seed=20)
    room_a, room_b = np.empty(a.size + 3, np.float32), np.empty(b.size + 3, np.float32)
    for offset in (1, 2, 3):
        room_a[offset: offset + a.size], room_b[offset: offset + b.size] = a, b
        assert compute_tensor_metrics(room_a[offset: offset + a.size], room_b[offset: offset + b.size]) == (
            compute_tensor_metrics(a, b))


def test_relative_error_thresholds_and_floor_are_exact(small_chunks: int):
    """Elements whose relative error is exactly 0.001 or 0.005 (not counted: the shares count errors strictly
    below), and |b| at, just below and just above the floor, in a late chunk and a block's tail."""
    a, b = _noisy_pair(5 * small_chunks + 17, dtype=np.float64, seed=21)
    k = 4 * small_chunks + 3
    b[k: k + 4] = 1000.0
    a[k: k + 4] = [1001.0, 1005.0, np.nextafter(1001.0, 0.0), np.nextafter(1005.0, 0.0)]
    floor = 2.0**-10
    b[k + 4: k + 7] = [floor, np.nextafter(floor, 0.0), np.nextafter(floor, 1.0)]
    a[k + 4: k + 7] = b[k + 4: k + 7] + 2.0**-20
    a[-1], b[-1] = 9.0, floor / 4  # the largest relative error, the array's last element
    ref = _reference(a, b, floor)
    m = compute_tensor_metrics(a, b, floor)
    _assert_matches(m, ref)
    rel = np.abs(a - b) / np.maximum(np.abs(b), floor)
    assert rel[k] == 0.001 and rel[k + 1] == 0.005  # the exact thresholds are there, and not counted
    assert m.max_relative_err == rel[-1] == (9.0 - floor / 4) / floor


def test_float64_power_of_two_scaling_is_exact(small_chunks: int):
    """The float64 path scales by powers of two: the same values times 2**k give the same cosine bit for bit,
    and EucDist exactly times 2**k."""
    a, b = _noisy_pair(6 * small_chunks + 5, dtype=np.float64, seed=22)
    m = compute_tensor_metrics(a, b)
    for k in (-900, -100, 100, 900):
        s = 2.0**k
        mk = compute_tensor_metrics(a * s, b * s)
        assert mk.cosine == m.cosine
        assert mk.max_abs_err == m.max_abs_err * s
        assert mk.max_relative_err == m.max_relative_err or k < 0  # tiny values meet the floor
        if abs(k) <= 100:  # Σ(a-b)² itself is not scaled: within range only up to ~2**±500
            assert mk.euc_dist == m.euc_dist * s  # type: ignore[operator]


def test_float64_difference_overflow_is_not_a_nonfinite_value(small_chunks: int):
    a, b = _noisy_pair(3 * small_chunks, dtype=np.float64, seed=23)
    a[small_chunks + 5], b[small_chunks + 5] = 1.5e308, -1.5e308  # a - b overflows to inf
    m = compute_tensor_metrics(a, b)
    assert m.max_abs_err == math.inf and m.euc_dist == math.inf and m.compared == a.size
    assert (m.nonfinite.count_a, m.nonfinite.count_b, m.notes) == (0, 0, ())
    assert m.cosine == pytest.approx(-1.0, rel=0, abs=COS_ABS)  # the (1.5e308, -1.5e308) pair outweighs the rest


def test_mixed_dtypes_are_read_through_buffers(small_chunks: int):
    a, b = _noisy_pair(4 * small_chunks + 9, dtype=np.float64, seed=24)
    b32 = b.astype(np.float32)
    _assert_matches(compute_tensor_metrics(a, b32), _reference(a, b32))
    _assert_matches(compute_tensor_metrics(b32, a), _reference(b32, a))
    _assert_matches(compute_tensor_metrics(b32.astype(">f4"), a), _reference(b32, a))  # not the native order


# ---------------------------------------------------------------- dtypes


def test_bfloat16_streamed(small_chunks: int):
    a, b = _noisy_pair(7 * small_chunks + 3, dtype=ml_dtypes.bfloat16, seed=4)
    m = compute_tensor_metrics(a, b, floor=2.0**-7)
    _assert_matches(m, _reference(a, b, floor=2.0**-7))


def test_int64_and_bool_streamed(small_chunks: int):
    rng = np.random.default_rng(5)
    a = rng.integers(-(2**40), 2**40, 5 * small_chunks + 1, dtype=np.int64)
    b = a + rng.integers(-3, 4, a.size)
    _assert_matches(compute_tensor_metrics(a, b, floor=1.0), _reference(a, b, floor=1.0))
    # near 2**62: squares reach 2**124, sums stay far from float64's range
    big = np.full(3 * small_chunks, 2**62, dtype=np.int64)
    big[::2] = -(2**62)
    m = compute_tensor_metrics(big, big // 2, floor=1.0)
    assert m.cosine == pytest.approx(1.0, rel=0, abs=COS_ABS) and m.max_abs_err == 2.0**61
    bits = rng.random(4 * small_chunks) < 0.5
    flip = bits.copy()
    flip[::10] = ~flip[::10]
    _assert_matches(compute_tensor_metrics(bits, flip, floor=1.0), _reference(bits, flip, floor=1.0))


def test_float64_near_overflow_is_scaled(small_chunks: int):
    a, b = _noisy_pair(4 * small_chunks + 5, dtype=np.float64, seed=6)
    a, b = a * 1e300, b * 1e300  # a·a alone would overflow float64
    m = compute_tensor_metrics(a, b)
    s = 2.0**-1000  # exact power-of-two scaling for the reference
    ref = _reference(a * s, b * s)
    assert m.cosine == pytest.approx(ref["cosine"], rel=0, abs=COS_ABS)
    assert m.max_abs_err == float(np.max(np.abs(a - b)))
    assert m.max_relative_err == float(np.max(np.abs(a - b) / np.abs(b)))
    assert m.euc_dist == math.inf  # Σ(a-b)² overflows, as in the whole-array computation


def test_float64_tiny_values_are_scaled(small_chunks: int):
    a, b = _noisy_pair(4 * small_chunks + 5, dtype=np.float64, seed=7)
    a, b = a * 1e-300, b * 1e-300  # a·a alone would underflow to 0
    m = compute_tensor_metrics(a, b)
    ref = _reference(a * 2.0**1000, b * 2.0**1000)
    assert m.cosine == pytest.approx(ref["cosine"], rel=0, abs=COS_ABS)
    assert m.max_abs_err == float(np.max(np.abs(a - b)))
    assert m.max_relative_err == float(np.max(np.abs(a - b))) / DEFAULT_RELATIVE_FLOOR


def test_float64_identical_and_zero_sides(small_chunks: int):
    a, _ = _noisy_pair(3 * small_chunks, dtype=np.float64, seed=8)
    m = compute_tensor_metrics(a * 1e300, (a * 1e300).copy())
    assert (m.cosine, m.max_abs_err, m.max_relative_err, m.one_thousandth_err_ratio) == (1.0, 0.0, 0.0, 1.0)
    z = compute_tensor_metrics(np.zeros(a.size), a)
    assert z.cosine is None and z.notes == ("cosine undefined: the target (A) is all zero",)


# ---------------------------------------------------------------- zero, identical


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_zero_sides_and_identical_arrays(small_chunks: int, dtype: type):
    n = 3 * small_chunks + 1
    ones = np.ones(n, dtype=dtype)
    zeros = np.zeros(n, dtype=dtype)
    m = compute_tensor_metrics(zeros, ones)
    assert m.cosine is None and m.notes == ("cosine undefined: the target (A) is all zero",)
    assert m.max_abs_err == 1.0 and m.euc_dist == math.sqrt(n)
    m = compute_tensor_metrics(ones, zeros)
    assert m.cosine is None and m.notes == ("cosine undefined: the baseline (B) is all zero",)
    assert m.max_relative_err == 1.0 / DEFAULT_RELATIVE_FLOOR
    m = compute_tensor_metrics(zeros, -zeros)
    assert m.cosine == 1.0 and m.max_abs_err == 0.0 and m.euc_dist == 0.0 and not m.differs
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    m = compute_tensor_metrics(x, x.copy())
    assert m.cosine == 1.0 and m.max_abs_err == 0.0 and m.euc_dist == 0.0 and m.one_thousandth_err_ratio == 1.0


def test_one_nonzero_element_in_a_late_chunk_is_not_all_zero(small_chunks: int):
    a = np.zeros(5 * small_chunks, dtype=np.float32)
    b = np.zeros_like(a)
    a[-1] = 1e-45  # float32's smallest subnormal: its square, 2e-90, is still a normal float64
    b[-1] = 1e-45
    b[0] = 1e-45
    m = compute_tensor_metrics(a, b)
    assert m.cosine == pytest.approx(1 / math.sqrt(2), rel=1e-15)


# ---------------------------------------------------------------- non-finite values across chunks


def test_agreeing_nonfinite_across_chunk_boundaries_are_left_out(small_chunks: int):
    c = small_chunks
    a, b = _noisy_pair(6 * c + 11, dtype=np.float32, seed=10)
    nan_at = [0, c - 1, c, 2 * c + 1, 6 * c + 10]
    a[nan_at] = b[nan_at] = np.nan
    a[[c + 1, 5 * c]] = b[[c + 1, 5 * c]] = np.inf
    a[[3 * c - 1, 3 * c]] = b[[3 * c - 1, 3 * c]] = -np.inf
    a[4 * c: 5 * c] = b[4 * c: 5 * c] = np.nan  # a whole chunk left out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf on the way is not warned about
        m = compute_tensor_metrics(a, b)
    keep = np.isfinite(a)
    left_out = int((~keep).sum())
    assert left_out == c + 9
    assert (m.nonfinite.count_a, m.nonfinite.count_b, m.nonfinite.agreeing, m.nonfinite.disagreeing) == (
        left_out, left_out, left_out, 0)
    assert m.compared == a.size - left_out and m.numel == a.size
    assert m.notes == (
        f"{left_out} non-finite value(s) at the same positions with the same signs on both sides were left out; "
        f"the {a.size - left_out} finite value(s) were compared",
    )
    _assert_matches(m, _reference(a[keep], b[keep]))


@pytest.mark.parametrize("where", ["first", "boundary", "last"])
def test_disagreeing_nonfinite_in_any_chunk_gives_no_metrics(small_chunks: int, where: str):
    c = small_chunks
    a, b = _noisy_pair(4 * c + 3, dtype=np.float32, seed=11)
    a[[5, 2 * c]] = b[[5, 2 * c]] = np.nan  # agreeing ones too
    pos = {"first": 0, "boundary": c, "last": 4 * c + 2}[where]
    a[pos], b[pos] = np.inf, -np.inf
    a[3 * c] = np.nan  # against a finite value
    m = compute_tensor_metrics(a, b)
    assert m.as_pairs() == tuple((k, None) for k in metrics.TENSOR_METRIC_KEYS)
    assert (m.nonfinite.count_a, m.nonfinite.count_b, m.nonfinite.agreeing, m.nonfinite.disagreeing) == (4, 3, 2, 2)
    assert (m.compared, m.notes, m.differs) == (0, (), True)


def test_disagreeing_nonfinite_float64_gives_no_metrics(small_chunks: int):
    a, b = _noisy_pair(3 * small_chunks, dtype=np.float64, seed=12)
    a[2 * small_chunks + 7] = np.nan
    m = compute_tensor_metrics(a * 1e300, b * 1e300)
    assert m.max_abs_err is None and m.cosine is None and m.compared == 0
    assert (m.nonfinite.count_a, m.nonfinite.disagreeing) == (1, 1)


def test_all_but_one_nonfinite_agreeing(small_chunks: int):
    a = np.full(3 * small_chunks, np.nan, dtype=np.float32)
    b = a.copy()
    a[2 * small_chunks], b[2 * small_chunks] = 2.0, 1.5
    m = compute_tensor_metrics(a, b)
    assert (m.compared, m.max_abs_err, m.max_relative_err, m.euc_dist, m.cosine) == (1, 0.5, 0.5 / 1.5, 0.5, None)
    assert m.notes[-1] == "cosine undefined for fewer than 2 elements"
    m = compute_tensor_metrics(np.full(3 * small_chunks, -np.inf), np.full(3 * small_chunks, -np.inf))
    assert (m.compared, m.max_abs_err, m.differs) == (0, None, False)


# ---------------------------------------------------------------- errors


def test_errors(small_chunks: int):
    with pytest.raises(ValueError, match="differ in size"):
        compute_tensor_metrics(np.zeros(3 * small_chunks), np.zeros(3 * small_chunks + 1))
    with pytest.raises(ValueError, match="floor"):
        compute_tensor_metrics(np.zeros(3 * small_chunks), np.zeros(3 * small_chunks), floor=0.0)
    with pytest.raises(TypeError):
        compute_tensor_metrics(np.zeros(3 * small_chunks, complex), np.zeros(3 * small_chunks))


# ---------------------------------------------------------------- memory


def _memmap_pair(tmp_path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = _noisy_pair(n, dtype=np.float32, seed=13)
    a[[10, n // 2, n - 1]] = b[[10, n // 2, n - 1]] = np.nan  # the non-finite path too
    np.save(tmp_path / f"a{n}.npy", a)
    np.save(tmp_path / f"b{n}.npy", b)
    return np.load(tmp_path / f"a{n}.npy", mmap_mode="r"), np.load(tmp_path / f"b{n}.npy", mmap_mode="r")


@pytest.mark.parametrize("workers", [1, 2])
def test_memory_stays_bounded_by_the_chunk_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int):
    """tracemalloc sees numpy's data allocations; memmapped file pages are not allocations."""
    monkeypatch.setattr(metrics, "CHUNK_WORKERS", workers)
    # float32 memmaps are read in place; a chunk holding NaN is re-read into two float64 buffers, then its
    # masks (bool) and its finite parts (two float64 copies) are made: within four float64 chunks and one bool
    chunk_buffers = (4 * 8 + 1) * metrics.CHUNK_ELEMENTS
    bound = 2 * workers * chunk_buffers + 256 * 1024
    # numba's one-time import and the kernel's loading (float32, and float64 for the NaN chunk's finite parts)
    # are not the data's memory: done before tracing
    warm_a, warm_b = _noisy_pair(2 * metrics.CHUNK_ELEMENTS)
    warm_a[0] = warm_b[0] = np.nan
    assert compute_tensor_metrics(warm_a, warm_b).compared == warm_a.size - 1
    peaks = []
    for n in (3_000_000, 9_000_000):  # 12 and 36 MB per side
        a, b = _memmap_pair(tmp_path, n)
        tracemalloc.start()
        try:
            m = compute_tensor_metrics(a, b)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert m.compared == n - 3
    assert max(peaks) < bound, (peaks, bound)
    # Three times the data, the same peak up to one chunk's non-finite handling (masks and finite copies),
    # which with 2 threads may or may not overlap the other thread's in time.
    assert abs(peaks[1] - peaks[0]) < (workers - 1) * chunk_buffers + 256 * 1024, peaks
    assert bound < 3_000_000 * 4  # the bound is below one tensor's size
