"""Metrics against hand-computed values and independent numpy formulas, edge cases pinned."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from msprobe_cmp.comparator.dtypes import (
    DEFAULT_RELATIVE_FLOOR,
    are_compatible_dtypes,
    compute_relative_floor,
    normalize_dtype,
)
from msprobe_cmp.comparator.metrics import (
    compute_cosine,
    compute_euc_dist,
    compute_five_thousandths_err_ratio,
    compute_max_abs_err,
    compute_max_abs_err_lower_bound,
    compute_max_relative_err,
    compute_nonfinite_agreement,
    compute_one_thousandth_err_ratio,
    compute_stat_diff,
    compute_stat_diffs,
    compute_tensor_metrics,
    to_float64,
)

EPS32 = 2.0**-23


# ---------------------------------------------------------------- cosine


def test_cosine_hand_values():
    assert compute_cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert compute_cosine([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(-1.0, abs=1e-15)
    assert compute_cosine([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0, abs=1e-15)
    # 45 degrees: (1,0)·(1,1) / (1·sqrt 2)
    assert compute_cosine([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / math.sqrt(2), rel=1e-15)


def test_cosine_identical_is_exactly_one_and_clamped():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    assert compute_cosine(x, x) == 1.0
    c = compute_cosine(x, x * np.float32(1.0000001))
    assert c is not None and -1.0 <= c <= 1.0


def test_cosine_matches_independent_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = a + rng.standard_normal((4, 8)).astype(np.float32) * 0.1
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    expected = a64 @ b64 / (np.sqrt(a64 @ a64) * np.sqrt(b64 @ b64))
    assert compute_cosine(a, b) == pytest.approx(expected, rel=1e-14)


def test_cosine_zero_cases():
    assert compute_cosine(np.zeros(5), np.zeros(5)) == 1.0  # both all-zero
    assert compute_cosine(np.zeros(5), np.ones(5)) is None  # one side all-zero: undefined
    assert compute_cosine(np.ones(5), np.zeros(5)) is None


def test_cosine_undefined_for_0d_and_length_1():
    assert compute_cosine(np.float32(2.0), np.float32(2.0)) is None
    assert compute_cosine(np.array(3.0), np.array(1.0)) is None
    assert compute_cosine([3.0], [1.0]) is None


def test_cosine_no_overflow_for_huge_values():
    a = np.array([1e300, 2e300])
    assert compute_cosine(a, a * 0.5) == pytest.approx(1.0)


# ---------------------------------------------------------------- abs / rel / ratios / euc


def test_max_abs_err_and_euc_dist_hand_values():
    assert compute_max_abs_err([1.0, 2.0, 3.0], [1.5, 2.0, 0.0]) == 3.0
    assert compute_euc_dist([3.0, 4.0], [0.0, 0.0]) == 5.0
    assert compute_max_abs_err([], []) is None
    assert compute_euc_dist([], []) == 0.0


def test_relative_err_divides_by_b():
    # A is the target, B the baseline: |a-b|/|b|
    assert compute_max_relative_err([1.1], [1.0]) == pytest.approx(0.1)
    assert compute_max_relative_err([1.0], [1.1]) == pytest.approx(0.1 / 1.1)


def test_relative_err_floor_near_zero_is_finite():
    tiny = compute_max_relative_err([1e-12], [0.0])
    assert tiny == pytest.approx(1e-12 / DEFAULT_RELATIVE_FLOOR)
    assert math.isfinite(tiny) and tiny < 1e-4
    assert compute_max_relative_err([0.0], [0.0]) == 0.0
    assert compute_max_relative_err([1e-3], [0.0], floor=1e-3) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        compute_max_relative_err([1.0], [1.0], floor=0.0)


def test_err_ratios_hand_values():
    b = np.ones(4)
    a = np.array([1.0005, 1.002, 1.01, 1.0])  # rel: 5e-4, 2e-3, 1e-2, 0
    assert compute_one_thousandth_err_ratio(a, b) == 0.5
    assert compute_five_thousandths_err_ratio(a, b) == 0.75
    assert compute_one_thousandth_err_ratio([], []) is None


def test_size_mismatch_raises():
    with pytest.raises(ValueError):
        compute_max_abs_err([1.0, 2.0], [1.0])


def test_upcast_before_computing():
    # float16 1/3 vs float32 1/3: compared in float64, the difference is the fp16 rounding error
    a = np.array([1 / 3], dtype=np.float16)
    b = np.array([1 / 3], dtype=np.float32)
    assert compute_max_abs_err(a, b) == pytest.approx(abs(float(a[0]) - float(b[0])), rel=1e-12)
    bf = np.array([1.0, 2.0, 3.0], dtype=ml_dtypes.bfloat16)
    assert to_float64(bf).dtype == np.float64
    assert compute_max_abs_err(bf, [1.0, 2.0, 3.0]) == 0.0
    with pytest.raises(TypeError):
        to_float64(np.array([1 + 2j]))


# ---------------------------------------------------------------- non-finite


def test_nan_at_same_positions_compares_the_finite_rest():
    a = np.array([1.0, np.nan, 3.0, np.inf])
    b = np.array([1.0, np.nan, 3.5, np.inf])
    m = compute_tensor_metrics(a, b)
    assert m.nonfinite.agreeing == 2 and m.nonfinite.disagreeing == 0
    assert m.compared == 2 and m.numel == 4
    assert m.max_abs_err == 0.5
    assert any("left out" in n for n in m.notes)


def test_plus_inf_against_minus_inf_disagrees():
    nf = compute_nonfinite_agreement([np.inf, 1.0], [-np.inf, 1.0])
    assert (nf.agreeing, nf.disagreeing) == (0, 1)
    m = compute_tensor_metrics([np.inf, 1.0], [-np.inf, 1.0])
    assert m.max_abs_err is None and m.cosine is None and m.differs


def test_nan_against_finite_disagrees_and_is_never_zeroed():
    m = compute_tensor_metrics([np.nan, 1.0, 2.0], [0.0, 1.0, 2.0])
    assert m.nonfinite.disagreeing == 1
    assert m.max_abs_err is None  # not 0: the NaN was not zeroed away


def test_all_nonfinite_agreeing():
    m = compute_tensor_metrics([np.nan, -np.inf], [np.nan, -np.inf])
    assert m.compared == 0 and m.max_abs_err is None and not m.differs


def test_0d_tensor_metrics():
    m = compute_tensor_metrics(np.array(2.5), np.array(2.0))
    assert m.cosine is None
    assert m.max_abs_err == 0.5
    assert m.max_relative_err == pytest.approx(0.25)
    assert m.one_thousandth_err_ratio == 0.0
    assert m.euc_dist == 0.5


def test_tensor_metrics_refuses_a_floor_not_above_zero():
    for floor in (0.0, -1e-7, math.nan):
        with pytest.raises(ValueError, match="floor"):
            compute_tensor_metrics([1.0, 2.0], [1.0, 2.5], floor=floor)


def test_tensor_metrics_one_side_zero_notes_it():
    m = compute_tensor_metrics(np.zeros(3), np.ones(3))
    assert m.cosine is None and any("all zero" in n for n in m.notes)


# ---------------------------------------------------------------- statistics


def test_stat_diff_signed_and_relative_number():
    d = compute_stat_diff("max", 2.5, 2.0)
    assert d.diff == 0.5 and d.relative == pytest.approx(0.25)
    d = compute_stat_diff("min", 1.0, 2.0)
    assert d.diff == -1.0 and d.relative == pytest.approx(0.5)
    d = compute_stat_diff("mean", 1e-9, 0.0)  # b == 0: floor, not inf / "Nan"
    assert d.relative == pytest.approx(1e-9 / DEFAULT_RELATIVE_FLOOR)


def test_stat_diff_nonfinite_and_missing():
    assert compute_stat_diff("max", math.nan, math.nan).nonfinite_agree is True
    assert compute_stat_diff("max", math.inf, math.inf).nonfinite_agree is True
    assert compute_stat_diff("max", math.inf, -math.inf).nonfinite_agree is False
    d = compute_stat_diff("max", math.inf, 3.0)
    assert d.nonfinite_agree is False and d.diff is None
    assert compute_stat_diff("max", None, 3.0).diff is None


def test_max_abs_err_lower_bound_is_a_bound():
    rng = np.random.default_rng(2)
    a = rng.standard_normal(100)
    b = a + rng.standard_normal(100) * 0.01

    def stats(x):
        return (x.max(), x.min(), x.mean(), np.linalg.norm(x))

    bound = compute_max_abs_err_lower_bound(compute_stat_diffs(stats(a), stats(b)), a.size)
    assert bound is not None and 0 < bound <= np.max(np.abs(a - b))


# ---------------------------------------------------------------- dtypes


def test_dtype_spellings():
    assert normalize_dtype("Float32") == normalize_dtype("torch.float32") == normalize_dtype("float32") == "float32"
    assert normalize_dtype("BFloat16") == normalize_dtype("torch.bfloat16") == "bfloat16"
    assert normalize_dtype("torch.half") == "float16"
    assert are_compatible_dtypes("float16", "float32") and are_compatible_dtypes("int32", "int64")
    assert not are_compatible_dtypes("int32", "float32") and not are_compatible_dtypes("bool", "int8")
    assert not are_compatible_dtypes("int64", "int64")
    assert compute_relative_floor("float32", "float16") == 2.0**-10
    assert compute_relative_floor("float32") == EPS32
    assert compute_relative_floor("int64") == 1.0
    assert compute_relative_floor(None) == DEFAULT_RELATIVE_FLOOR


# ---------------------------------------------------------------- properties

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(2, 40), elements=finite), st.data())
def test_metric_properties(a, data):
    b = data.draw(hnp.arrays(np.float32, a.shape, elements=finite))
    m = compute_tensor_metrics(a, b)
    assert m.max_abs_err is not None and m.max_abs_err >= 0
    assert m.cosine is None or -1.0 <= m.cosine <= 1.0
    assert m.euc_dist is not None
    assert m.max_abs_err <= m.euc_dist * (1 + 1e-12) + 1e-300
    assert m.euc_dist <= math.sqrt(a.size) * m.max_abs_err * (1 + 1e-12) + 1e-300
    assert math.isfinite(m.max_relative_err or 0.0)
    assert 0.0 <= (m.one_thousandth_err_ratio or 0.0) <= (m.five_thousandths_err_ratio or 0.0) <= 1.0
