"""Verdict rules: docs/design.md §2 thresholds at their boundaries, statistics and md5 rules, overrides."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msprobe_cmp.comparator.metrics import NonFiniteAgreement, TensorMetrics, compute_stat_diffs, compute_tensor_metrics
from msprobe_cmp.comparator.rules import (
    Rules,
    ThresholdOverride,
    Thresholds,
    compute_md5_verdict,
    compute_statistics_verdict,
    compute_tensor_verdict,
    compute_value_verdict,
)
from msprobe_cmp.errors import ConfigError

T = Thresholds()


def _m(cos, mae, disagreeing=0, numel=1):
    nf = NonFiniteAgreement(disagreeing, 0, 0, disagreeing)
    return TensorMetrics(cos, mae, 0.0, 1.0, 1.0, mae, numel, numel if not disagreeing else 0, nf, 1e-7)


@pytest.mark.parametrize(
    ("cos", "mae", "verdict"),
    [
        (1.0, 0.0, "pass"),
        (0.989, 1e-3, "pass"),  # cosine low but MaxAbsErr not above 1e-3
        (0.989, 1.1e-3, "fail"),  # both conditions
        (0.99, 0.5, "pass"),  # cosine not below 0.99
        (0.899, 1e-6, "fail"),  # cosine < 0.9 alone
        (0.9999, 1.0, "pass"),
        (0.9999, 1.0001, "fail"),  # MaxAbsErr > 1 alone
        (None, 0.5, "warning"),  # cosine undefined for a single value: the cosine rules could not run
        (None, 1e-4, "pass"),
        (None, 2.0, "fail"),
    ],
)
def test_tensor_rule_boundaries(cos, mae, verdict):
    out = compute_tensor_verdict(_m(cos, mae), T)
    assert out.verdict == verdict
    assert (out.reasons == ()) == (verdict == "pass")


def test_one_side_all_zero_falls_back_to_the_absolute_error():
    # 1000 zeros against 1000 values of 0.95: cosine undefined, MaxAbsErr 0.95 > 1e-3 -> fail, not pass/warning.
    a, b = np.zeros(1000), np.full(1000, 0.95)
    out = compute_tensor_verdict(compute_tensor_metrics(a, b), T)
    assert out.verdict == "fail" and "all zero" in out.reasons[0]
    assert compute_tensor_verdict(compute_tensor_metrics(np.zeros(10), np.full(10, 1e-4)), T).verdict == "pass"


def test_tensor_rule_nonfinite_disagreement_fails_with_count():
    m = compute_tensor_metrics([np.nan, 1.0, np.inf], [1.0, 1.0, -np.inf])
    out = compute_tensor_verdict(m, T)
    assert out.verdict == "fail"
    assert "2 of 3 positions" in out.reasons[0]


def test_thresholds_are_configurable_and_validated():
    assert compute_tensor_verdict(_m(0.95, 0.5), Thresholds(cosine_fail_below=0.96)).verdict == "fail"
    with pytest.raises(ConfigError):
        Thresholds(relative_floor=0.0)


def test_overrides_first_match_wins_by_pattern_and_dtype():
    loose = Thresholds(max_abs_err_fail_above=10.0)
    bf16 = Thresholds(cosine_fail_below=0.5)
    rules = Rules(
        overrides=(ThresholdOverride(loose, pattern="Cell.head.*"), ThresholdOverride(bf16, dtype="BFloat16"))
    )
    assert rules.thresholds_for("Cell.head.Dense.forward.0.output.0", ("Float32",)) is loose
    assert rules.thresholds_for("Functional.relu.0.forward.input.0", ("torch.bfloat16",)) is bf16
    assert rules.thresholds_for("Functional.relu.0.forward.input.0", ("Float32",)) is rules.default


def _stats(mx, mn, mean, norm):
    return (mx, mn, mean, norm)


def test_statistics_rule_lower_bound_fails():
    diffs = compute_stat_diffs(_stats(5.0, -1.0, 0.0, 10.0), _stats(3.5, -1.0, 0.0, 10.0))
    out = compute_statistics_verdict(diffs, 100, T)
    assert out.verdict == "fail" and "lower bound" in out.reasons[0]


def test_statistics_rule_norm_term_scaled_by_sqrt_numel():
    # |dNorm| = 8 over 100 elements: bound 0.8, not a failure
    diffs = compute_stat_diffs(_stats(5.0, -5.0, 0.0, 18.0), _stats(5.0, -5.0, 0.0, 10.0))
    assert compute_statistics_verdict(diffs, 100, T).verdict in ("pass", "warning")
    # the same over 4 elements: bound 4 > 1
    assert compute_statistics_verdict(diffs, 4, T).verdict == "fail"


def test_statistics_rule_msprobe_warning_on_any_statistic():
    # Mean 0.1 vs 0.3: |diff| / |max| = 0.2/0.3 > 0.5; the others equal
    diffs = compute_stat_diffs(_stats(1.0, -1.0, 0.1, 5.0), _stats(1.0, -1.0, 0.3, 5.0))
    out = compute_statistics_verdict(diffs, 100, T)
    assert out.verdict == "warning" and out.reasons[0].startswith("Mean")


def test_statistics_warning_ignores_tiny_absolute_changes_near_zero():
    # Mean 1e-10 vs -5.6e-11: ratio 1.56 > 0.5, but |diff| 1.6e-10 <= 1e-3 -> no warning
    diffs = compute_stat_diffs(_stats(1.0, -1.0, 1e-10, 5.0), _stats(1.0, -1.0, -5.6e-11, 5.0))
    assert compute_statistics_verdict(diffs, 100, T).verdict == "pass"


def test_statistics_warning_uses_the_larger_magnitude_for_negative_statistics():
    # Min -0.010 vs -0.006: |diff| 0.004 / max(0.010, 0.006) = 0.4 -> pass (msprobe's |max(a, b)| = 0.006 gives 0.67).
    ok = compute_stat_diffs(_stats(1.0, -0.010, 0.0, 50.0), _stats(1.0, -0.006, 0.0, 50.0))
    assert compute_statistics_verdict(ok, 10_000, T).verdict == "pass"
    # Min -0.010 vs -0.004: 0.006 / 0.010 = 0.6 > 0.5 -> warning.
    warn = compute_statistics_verdict(
        compute_stat_diffs(_stats(1.0, -0.010, 0.0, 50.0), _stats(1.0, -0.004, 0.0, 50.0)), 10_000, T
    )
    assert warn.verdict == "warning" and "= 0.6 >" in warn.reasons[0]


def test_statistics_rule_nonfinite():
    ok = compute_stat_diffs(_stats(math.inf, 0.0, math.nan, 1.0), _stats(math.inf, 0.0, math.nan, 1.0))
    assert compute_statistics_verdict(ok, 10, T).verdict == "pass"
    bad = compute_stat_diffs(_stats(math.inf, 0.0, 0.5, 1.0), _stats(2.0, 0.0, 0.5, 1.0))
    out = compute_statistics_verdict(bad, 10, T)
    assert out.verdict == "fail" and "non-finite Max" in out.reasons[0]


def test_md5_and_value_rules():
    assert compute_md5_verdict("ae5b450d", "AE5B450D").verdict == "pass"
    assert compute_md5_verdict("ae5b450d", "00000000").verdict == "fail"
    assert compute_value_verdict(3, 3).verdict == "pass"
    assert compute_value_verdict(3, 4).verdict == "fail"
    assert compute_value_verdict("Float16", "Float32").verdict == "fail"


def test_is_argument_row_needs_a_value_row_that_differs_with_the_argument_reason():
    from types import SimpleNamespace

    from msprobe_cmp.comparator.rules import ARGUMENT_DIFFERS, compute_argument_verdict, is_argument_row

    reason = compute_argument_verdict("eps", 1e-05, 1e-12).reasons
    assert reason == (f"{ARGUMENT_DIFFERS}: eps A 1e-05, B 1e-12",) and ARGUMENT_DIFFERS == "argument differs"
    assert not is_argument_row(SimpleNamespace(compared_by="value", differs=True, reasons=(str(reason[0]),)))  # words

    def row(compared_by="value", differs=True, reasons=reason):
        return SimpleNamespace(compared_by=compared_by, differs=differs, reasons=reasons)

    assert is_argument_row(row()) and is_argument_row(row(reasons=("other", *reason)))
    assert not is_argument_row(row(compared_by="tensor"))
    assert not is_argument_row(row(differs=False)) and not is_argument_row(row(differs=None))
    assert not is_argument_row(row(reasons=("value differs: A 3, B 4",))) and not is_argument_row(row(reasons=()))


def test_value_verdict_is_for_outputs_and_compares_as_written():
    # compute_value_verdict judges value outputs; one dtype in two spellings is cleared before it
    # (rules.compare_values), so here two spellings still differ.
    assert compute_value_verdict("Float32", "torch.float32").reasons == ("value differs: A 'Float32', B 'torch.float32'",)
