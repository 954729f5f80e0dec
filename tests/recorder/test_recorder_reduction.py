"""The statistics' compiled pass (recorder/reduction.py) against independent computations: numpy's extremes,
math.fsum's exactly rounded sums, and the documented bound on the blocked float64 sums."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe_cmp.recorder.collector import summarize
from msprobe_cmp.recorder.reduction import SUM_BLOCK, kernel_values, reduce_values

ml_dtypes = pytest.importorskip("ml_dtypes")

SIZES = [1, 2, 7, 8, 9, 31, 255, 256, 257, 1000, 4099, 70_001]
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int32, np.int64, np.uint16, np.bool_]


def _bound(values: np.ndarray) -> float:
    """The module's error bound on a blocked float64 sum: (terms per partial sum + blocks) * 2**-53 of sum |x|."""
    n = values.size
    return (SUM_BLOCK + n / SUM_BLOCK + 2) * 2.0**-53 * math.fsum(np.abs(values.astype(np.float64)).tolist())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_extremes_exact_and_sums_within_the_bound(dtype: type, n: int) -> None:
    rng = np.random.default_rng(n)
    raw = rng.standard_normal(n) * 300
    a = (raw > 0) if dtype is np.bool_ else raw.astype(dtype)
    f = np.asarray(a, dtype=np.float64)
    mx, mn, total, squares = reduce_values(kernel_values(a))
    assert (mx, mn) == (float(f.max()), float(f.min()))
    exact_sum = math.fsum(f.tolist())
    exact_squares = math.fsum((f * f).tolist())  # a float32's square is exact in float64
    assert abs(total - exact_sum) <= _bound(f)
    assert abs(squares - exact_squares) <= _bound(f * f)


def test_summarize_is_mean_and_norm_of_the_sums() -> None:
    a = np.random.default_rng(1).standard_normal((3, 50, 7)).astype(np.float32)
    (mx, mn, mean, norm), counts = summarize(a)
    _mx, _mn, total, squares = reduce_values(kernel_values(a))
    assert (mean, norm, counts) == (total / a.size, math.sqrt(squares), (0, 0, 0))
    f = a.astype(np.float64)
    assert mean == pytest.approx(float(f.mean()), rel=1e-14, abs=1e-16)
    assert norm == pytest.approx(float(np.sqrt((f * f).sum())), rel=1e-14)


def test_same_values_same_bits_whatever_the_layout() -> None:
    a = np.random.default_rng(2).standard_normal((64, 33)).astype(np.float32)
    t = a.T  # non-contiguous: copied in C order, so the values come in the order of np.ascontiguousarray(t)
    assert summarize(t) == summarize(np.ascontiguousarray(t))
    assert summarize(a) == summarize(a.copy())


def test_zero_extremes_keep_their_sign_by_the_documented_order() -> None:
    assert summarize(np.array([-0.0, 0.0], np.float32))[0][:2] == (0.0, -0.0)
    mx, mn = summarize(np.array([-0.0, -0.0], np.float64))[0][:2]
    assert math.copysign(1.0, mx) == -1.0 and math.copysign(1.0, mn) == -1.0
    mx, mn = summarize(np.array([0.0, 2.0], np.float32))[0][:2]
    assert (mx, math.copysign(1.0, mn)) == (2.0, 1.0)


def test_nonfinite_values() -> None:
    stats, counts = summarize(np.array([1.0, np.nan, np.inf, -np.inf, np.nan], np.float32))
    assert all(math.isnan(v) for v in stats) and counts == (2, 1, 1)
    neg_nan = np.array([1.0, -np.nan], np.float64)
    assert math.copysign(1.0, neg_nan[1]) == -1.0
    stats, counts = summarize(neg_nan)
    assert all(math.isnan(v) for v in stats) and counts == (1, 0, 0)
    assert summarize(np.array([np.inf, -np.inf, 2.0], np.float32)) == ((np.inf, -np.inf, pytest.approx(np.nan,
                                                                         nan_ok=True), np.inf), (0, 1, 1))
    assert summarize(np.array([np.inf, 3.0], np.float16)) == ((np.inf, 3.0, np.inf, np.inf), (0, 1, 0))
    # finite values whose squares overflow float64: Norm is +Inf, as numpy's, and nothing is counted
    stats, counts = summarize(np.array([1e200, -1e200], np.float64))
    assert stats == (1e200, -1e200, 0.0, np.inf) and counts == (0, 0, 0)


def test_conversions_of_other_dtypes() -> None:
    assert kernel_values(np.array([True, False])).dtype == np.float32
    assert kernel_values(np.array([1, 2], np.int16)).dtype == np.float32
    assert kernel_values(np.array([1, 2], np.int32)).dtype == np.float64
    assert kernel_values(np.array([1.5], ml_dtypes.bfloat16)).dtype == np.float32
    # integers beyond 2**53: the extremes are the rounded ones (float64 rounding is monotonic)
    big = np.array([2**62 + 1, -(2**62) - 3, 5], np.int64)
    mx, mn = summarize(big)[0][:2]
    assert (mx, mn) == (float(2**62 + 1), float(-(2**62) - 3))
    # complex: statistics of the moduli
    stats = summarize(np.array([3 + 4j, 1j], np.complex64))[0]
    assert stats == (5.0, 1.0, 3.0, math.sqrt(26.0))
    assert summarize(np.array(-2.5, np.float32)) == ((-2.5, -2.5, -2.5, 2.5), (0, 0, 0))  # 0-d


def test_reduce_values_refuses_what_it_cannot_read() -> None:
    for bad in (np.zeros(0, np.float32), np.zeros((2, 2), np.float32), np.zeros(3, np.int32)):
        with pytest.raises(ValueError, match="non-empty 1-D float32 or float64"):
            reduce_values(bad)


def test_the_kernel_compiles_without_a_cache_where_numba_cannot_write_one(monkeypatch: pytest.MonkeyPatch) -> None:
    numba = pytest.importorskip("numba")
    from msprobe_cmp.recorder import reduction

    real_njit = numba.njit
    asked: list[bool] = []

    def njit(*args: object, **kwargs: object) -> object:
        asked.append(bool(kwargs.get("cache")))
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function '_reduce_kernel': no locator available for file")
        return real_njit(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", njit)
    reduction._kernel.cache_clear()
    try:
        a = np.array([3.0, -1.0, 0.5], np.float32)
        assert reduce_values(kernel_values(a)) == (3.0, -1.0, 2.5, 10.25)
        assert asked[:2] == [True, False]  # (numba calls njit itself while compiling)
    finally:
        reduction._kernel.cache_clear()  # the next test compiles (or loads) the cached kernel again
