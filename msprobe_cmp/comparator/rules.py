"""Verdict rules: thresholds (frozen, with per-pattern / per-dtype overrides) and the rule functions.

Every rule function returns a :class:`RuleOutcome`: a verdict (``"pass"``, ``"warning"``,
``"fail"``) and the reasons behind it, each a short sentence naming the metric, its value and the
threshold it crossed.  The functions only read metrics; they compute nothing from tensors.

Tensor mode (docs/design.md §2, msprobe's ``Accuracy Reached or Not``, docs/design.md §3): a row fails when
``Cosine < 0.99 and MaxAbsErr > 1e-3``, or ``Cosine < 0.9``, or ``MaxAbsErr > 1``, or its non-finite
values disagree.  An undefined cosine never fails by itself; the absolute error decides instead:
when exactly one side is all zero (and there are at least 2 elements) the row fails when
``MaxAbsErr > 1e-3`` (the cosine rules cannot clear it); for a single value (0-d or length 1) it gets
a warning when ``MaxAbsErr > 1e-3`` and fails when ``MaxAbsErr > 1``.

Statistics mode has no cosine.  ``max``, ``min`` and ``mean`` are 1-Lipschitz in the sup norm and
``|‖a‖−‖b‖| ≤ ‖a−b‖₂ ≤ sqrt(n)·max|a−b|``, so ``L = max(|ΔMax|, |ΔMin|, |ΔMean|, |ΔNorm|/sqrt(n))``
is a lower bound on MaxAbsErr.  A row fails when ``L`` exceeds the MaxAbsErr fail threshold (so it
would fail in tensor mode too), or when a non-finite statistic disagrees.  It gets a warning when
msprobe's statistics rule fires on any statistic, ``|diff| / (max(|a|, |b|) + 1e-10) > 0.5`` (the
PyTorch comparator's "any one" reading; msprobe's MindSpore comparator requires all four), with two
corrections: the denominator is ``max(|a|, |b|)``, not msprobe's ``|max(a, b)|`` (which flags
all-negative statistics, docs/design.md §3), and a statistic whose absolute change is at most
``max_abs_err_suspect_above`` (1e-3) never warns (a mean of 1e-10 moving by 1e-10 is noise).

md5 mode: equal checksums pass, different ones fail.

Non-tensor values (``{"type": ..., "value": ...}`` leaves): one dtype or one device in two spellings is the same
value (:func:`compare_values`).  A forward call's argument (``input.<i>``, ``kwargs.<k>``) whose two values differ is
an *argument difference*: a ``warning`` by default (``Rules.argument_differs``), whose reason starts with
:data:`ARGUMENT_DIFFERS` (``"argument differs: eps A 1e-05, B 1e-12"``).  It is a setting of the call (a port that
passes another ``eps``, ``approximate='tanh'``, another cast target), not a numerical error of it: its effect shows
in the call's outputs, which the tensor rules judge.  Float arguments equal to float32 rounding
(:data:`ARGUMENT_FLOAT_RTOL`) are equal.  ``inplace`` and the device a result is placed on say where a result
goes, not what it is: a difference there is a note.  Other value rows (an output that is a Python number or
string) keep their rules: a float is compared like a 0-d tensor, anything else must be equal.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, fields
from typing import Literal, NamedTuple, Protocol

from msprobe_cmp.comparator.dtypes import (
    FLOAT_EPS,
    as_dtype_value,
    is_device_type,
    is_dtype_type,
    normalize_device,
    normalize_dtype,
)
from msprobe_cmp.comparator.metrics import (
    StatDiff,
    TensorMetrics,
    compute_max_abs_err_lower_bound,
    is_float32_overflow,
)
from msprobe_cmp.comparator.notes import Note, code_of
from msprobe_cmp.comparator.notes import note as make_note
from msprobe_cmp.errors import ConfigError

Verdict = Literal["pass", "warning", "fail", "skip"]

#: msprobe's additive constant in the statistics warning rule's denominator.
STAT_WARNING_EPSILON = 1e-10


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the verdict rules (defaults: docs/design.md §2, msprobe's convention).

    Attributes:
        cosine_fail_below: fail when Cosine < this (0.9).
        cosine_suspect_below: fail when Cosine < this (0.99) *and* MaxAbsErr > ``max_abs_err_suspect_above``.
        max_abs_err_suspect_above: see above (1e-3, value units).
        max_abs_err_fail_above: fail when MaxAbsErr (or, in statistics mode, its lower bound) > this (1.0).
        stat_warning_ratio: statistics-mode warning when ``|diff| / (max(|a|, |b|) + 1e-10)`` > this (0.5)
            and ``|diff|`` > ``max_abs_err_suspect_above``.
        relative_floor: denominator floor for relative errors (value units); None = machine epsilon of
            the coarser stated dtype (:func:`msprobe_cmp.comparator.dtypes.compute_relative_floor`).

    Raises:
        msprobe_cmp.errors.ConfigError: ``relative_floor`` is not > 0.
    """

    cosine_fail_below: float = 0.9
    cosine_suspect_below: float = 0.99
    max_abs_err_suspect_above: float = 1e-3
    max_abs_err_fail_above: float = 1.0
    stat_warning_ratio: float = 0.5
    relative_floor: float | None = None

    def __post_init__(self) -> None:
        if self.relative_floor is not None and not self.relative_floor > 0.0:
            raise ConfigError(f"relative_floor: must be > 0, got {self.relative_floor!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and math.isnan(value):
                raise ConfigError(f"{f.name}: must be a number, got NaN (use inf to switch a rule off)")
            if value is not None and value < 0.0 and not f.name.startswith("cosine"):
                raise ConfigError(f"{f.name}: must be >= 0, got {value!r}")
        for name in ("cosine_fail_below", "cosine_suspect_below"):
            if not -1.0 <= getattr(self, name) <= 1.0 and not math.isinf(getattr(self, name)):
                raise ConfigError(f"{name}: a cosine threshold must be between -1 and 1, got {getattr(self, name)!r}")
        if self.cosine_fail_below > self.cosine_suspect_below:
            raise ConfigError(
                f"cosine_fail_below ({self.cosine_fail_below!r}) must not exceed cosine_suspect_below "
                f"({self.cosine_suspect_below!r})"
            )


@dataclass(frozen=True)
class ThresholdOverride:
    """Thresholds for the rows that match a row-name pattern and/or a dtype.

    Attributes:
        thresholds: the thresholds to use instead of the defaults.
        pattern: an ``fnmatch`` pattern over the row name ``<entry name>.<arg path>``
            (``"Cell.blocks.*.output.*"``); None matches every row.
        dtype: a dtype in any framework's spelling (``"BFloat16"``, ``"torch.bfloat16"``); matches a row
            when either side has that dtype; None matches every dtype.
    """

    thresholds: Thresholds
    pattern: str | None = None
    dtype: str | None = None

    def matches(self, row_name: str, dtypes: tuple[str | None, ...]) -> bool:
        """True when this override applies to a row of that name whose sides have those dtypes."""
        if self.pattern is not None and not fnmatch.fnmatchcase(row_name, self.pattern):
            return False
        if self.dtype is not None:
            wanted = normalize_dtype(self.dtype)
            return any(normalize_dtype(d) == wanted for d in dtypes)
        return True


#: Default ``jump_ratio``: an output's relative error must exceed this many times its inputs' (and the floor).
JUMP_RATIO = 10.0
#: Default ulps of rounding error one call may add where both runs use the same kernels (same framework, device and
#: dtype: usually zero; a few where a kernel is not deterministic).
SAME_KERNEL_NOISE_ULPS = 16.0
#: Default ulps of rounding error one call may add where the two runs use different kernels (MindSpore against
#: PyTorch, mindtorch against PyTorch): float32 1.2e-4.  A convolution summing 576 products in another order adds
#: ~3e-6 relative error; the largest seen on a correct port of the real-model corpus is given in docs/design.md.
CROSS_KERNEL_NOISE_ULPS = 1000.0
#: Default ``noise_magnitude_ulps``: a row smaller than this many ulps of its entry's largest tensor is rounding noise.
NOISE_MAGNITUDE_ULPS = 100.0

@dataclass(frozen=True)
class OriginRules:
    """Settings of the localisation (:mod:`msprobe_cmp.comparator.localise`); the rules file's ``localisation`` section.

    Attributes:
        jump_ratio: an output's relative error must exceed this many times the error its inputs carry (> 1).
        same_kernel_noise_ulps: the floor, in ulps of the coarser dtype, where both runs use the same kernels.
        cross_kernel_noise_ulps: the floor where they do not (two frameworks, or mindtorch against PyTorch).
        noise_magnitude_ulps: a row whose magnitude is below this many ulps of its entry's largest tensor
            (at most :data:`MAX_NOISE_MAGNITUDE`) is at rounding-noise magnitude.
        warn: a jumping row that passes the thresholds becomes a warning.
    """

    jump_ratio: float = JUMP_RATIO
    same_kernel_noise_ulps: float = SAME_KERNEL_NOISE_ULPS
    cross_kernel_noise_ulps: float = CROSS_KERNEL_NOISE_ULPS
    noise_magnitude_ulps: float = NOISE_MAGNITUDE_ULPS
    warn: bool = True

    def __post_init__(self) -> None:
        for name in ("jump_ratio", "same_kernel_noise_ulps", "cross_kernel_noise_ulps", "noise_magnitude_ulps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and value > 0):
                raise ConfigError(f"localisation.{name}: must be a finite number > 0, got {value!r}")
        if self.jump_ratio < 1:
            raise ConfigError(f"localisation.jump_ratio: must be at least 1, got {self.jump_ratio!r}")


#: Default floor on the share of rows matched (see :attr:`Rules.min_matched_share`).
DEFAULT_MIN_MATCHED_SHARE = 0.5
#: Noise-floor mode: a failing row is noise when its MaxAbsErr is at most this many times the rerun's
#: (and its 1 - Cosine at most this many times the rerun's).
DEFAULT_NOISE_FACTOR = 2.0

#: The verdict of a row whose call arguments differ (:attr:`Rules.argument_differs`).
ArgumentDiffersVerdict = Literal["warning", "fail"]
#: What :attr:`Rules.argument_differs` may be.
ARGUMENT_DIFFERS_VERDICTS: tuple[ArgumentDiffersVerdict, ...] = ("warning", "fail")
#: Default of :attr:`Rules.argument_differs`: an argument difference alone is a warning.
DEFAULT_ARGUMENT_DIFFERS: ArgumentDiffersVerdict = "warning"


@dataclass(frozen=True)
class Rules:
    """The thresholds in force: defaults plus overrides, the first matching override winning.

    Attributes:
        default: thresholds for rows no override matches.
        overrides: per entry-name pattern / per dtype thresholds, tried in order.
        min_matched_share: floor on ``matched rows / all rows of both sides`` (0..1). Below it a
            comparison without failures is "too_few_matched" (CLI exit 3), not a pass: a verdict
            over a small part of the run says little about the rest.
        noise_factor: noise-floor mode (``CompareOptions.noise``): a failing row whose MaxAbsErr is at
            most this many times the run-to-run MaxAbsErr of the same row (and whose ``1 - Cosine`` is at
            most this many times the run-to-run one) is a warning, not a failure.
        argument_differs: the verdict of a forward call's non-tensor argument whose two values differ
            (``"warning"``, the default, or ``"fail"``; rules file key ``argument_differs``).  Its reason starts
            with :data:`ARGUMENT_DIFFERS` either way.
        localisation: how the likely origin is found and which rows it warns of (:class:`OriginRules`).

    Raises:
        ConfigError: ``min_matched_share`` outside [0, 1]; ``argument_differs`` neither ``"warning"`` nor
            ``"fail"``.
    """

    default: Thresholds = field(default_factory=Thresholds)
    overrides: tuple[ThresholdOverride, ...] = ()
    min_matched_share: float = DEFAULT_MIN_MATCHED_SHARE
    noise_factor: float = DEFAULT_NOISE_FACTOR
    argument_differs: ArgumentDiffersVerdict = DEFAULT_ARGUMENT_DIFFERS
    localisation: OriginRules = field(default_factory=OriginRules)

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_matched_share <= 1.0:
            raise ConfigError(f"min_matched_share: must be between 0 and 1, got {self.min_matched_share!r}")
        if not (self.noise_factor >= 1.0 and math.isfinite(self.noise_factor)):
            raise ConfigError(f"noise_factor: must be a finite number >= 1, got {self.noise_factor!r}")
        if not (isinstance(self.argument_differs, str) and self.argument_differs in ARGUMENT_DIFFERS_VERDICTS):
            shown = repr(self.argument_differs[:40]) if isinstance(self.argument_differs, str) else \
                f"a {type(self.argument_differs).__name__}"
            raise ConfigError(f'argument_differs: must be "warning" or "fail", got {shown}')

    def thresholds_for(self, row_name: str, dtypes: tuple[str | None, ...] = ()) -> Thresholds:
        """The thresholds for one row (first matching override, else the defaults)."""
        for override in self.overrides:
            if override.matches(row_name, dtypes):
                return override.thresholds
        return self.default


@dataclass(frozen=True)
class RuleOutcome:
    """A verdict and its reasons (empty for a plain pass)."""

    verdict: Verdict
    reasons: tuple[str, ...] = ()


def _g(x: float) -> str:
    return f"{x:.6g}"


def compute_tensor_verdict(metrics: TensorMetrics, thresholds: Thresholds) -> RuleOutcome:
    """Verdict of a tensor-mode row from its metrics (rules in the module docstring)."""
    nf = metrics.nonfinite
    if nf.disagreeing:
        return RuleOutcome(
            "fail",
            (
                f"non-finite values disagree at {nf.disagreeing} of {metrics.numel} positions "
                f"(A has {nf.count_a} NaN/Inf, B has {nf.count_b})",
            ),
        )
    cos, mae = metrics.cosine, metrics.max_abs_err
    if mae is None:
        return RuleOutcome("pass")
    t = thresholds
    reasons: list[str] = []
    if cos is not None and cos < t.cosine_fail_below:
        reasons.append(make_note("cosine_below", f"Cosine {_g(cos)} < {_g(t.cosine_fail_below)}", cosine=cos,
                                 threshold=t.cosine_fail_below))
    if cos is not None and cos < t.cosine_suspect_below and mae > t.max_abs_err_suspect_above:
        reasons.append(make_note(
            "cosine_suspect", f"Cosine {_g(cos)} < {_g(t.cosine_suspect_below)} "
            f"and MaxAbsErr {_g(mae)} > {_g(t.max_abs_err_suspect_above)}", cosine=cos,
            threshold=t.cosine_suspect_below, max_abs_err=mae, max_abs_err_threshold=t.max_abs_err_suspect_above))
    if mae > t.max_abs_err_fail_above:
        reasons.append(f"MaxAbsErr {_g(mae)} > {_g(t.max_abs_err_fail_above)}")
    if cos is None and metrics.compared >= 2 and mae > t.max_abs_err_suspect_above:
        # Exactly one side is all zero: the cosine rules cannot clear the row, so the absolute error
        # decides alone (a gradient that vanished on one side is a classic port bug).
        reasons.append(
            f"one side is all zero (cosine undefined) and MaxAbsErr {_g(mae)} > {_g(t.max_abs_err_suspect_above)}"
        )
    if reasons:
        return RuleOutcome("fail", tuple(reasons))
    if cos is None and mae > t.max_abs_err_suspect_above:
        return RuleOutcome(
            "warning",
            (f"cosine undefined for a single value and MaxAbsErr {_g(mae)} > {_g(t.max_abs_err_suspect_above)}",),
        )
    return RuleOutcome("pass")


_STAT_LABEL = {"max": "Max", "min": "Min", "mean": "Mean", "norm": "Norm"}


def is_reduction_overflow(d: StatDiff, diffs: tuple[StatDiff, ...], numel: int) -> bool:
    """Whether a Mean or Norm that is ±Inf on one side and finite on the other is one recorder's float32 reduction
    overflowing (:func:`~msprobe_cmp.comparator.metrics.is_float32_overflow`), not a difference in the tensor: the
    infinite side has the finite side's sign, Max and Min are recorded and equal on both sides (so the elements are
    finite and agree at the extremes), and the finite value is large enough to overflow float32."""
    if d.nonfinite_agree is not False or d.stat not in ("mean", "norm") or d.a is None or d.b is None:
        return False
    inf, finite = (d.a, d.b) if math.isinf(d.a) else (d.b, d.a)
    if not math.isinf(inf) or not math.isfinite(finite) or (inf > 0) != (finite > 0):
        return False
    extremes = [x for x in diffs if x.stat in ("max", "min")]
    if len(extremes) != 2 or any(x.diff != 0.0 for x in extremes):
        return False
    return is_float32_overflow(d.stat, finite, numel)


def compute_statistics_verdict(diffs: tuple[StatDiff, ...], numel: int, thresholds: Thresholds) -> RuleOutcome:
    """Verdict of a statistics-mode row from its statistic diffs (rules in the module docstring).

    Args:
        diffs: the statistic diffs of the row (see :func:`msprobe_cmp.comparator.metrics.compute_stat_diffs`).
        numel: the number of elements of the tensor (for the Norm term of the MaxAbsErr bound).
        thresholds: the thresholds in force.
    """
    failing = [
        f"non-finite {_STAT_LABEL.get(d.stat, d.stat)} disagrees: A {d.a!r}, B {d.b!r}"
        for d in diffs
        if d.nonfinite_agree is False and not is_reduction_overflow(d, diffs, numel)
    ]
    if failing:
        return RuleOutcome("fail", tuple(failing))
    bound = compute_max_abs_err_lower_bound(diffs, numel)
    if bound is not None and bound > thresholds.max_abs_err_fail_above:
        return RuleOutcome(
            "fail",
            (
                f"MaxAbsErr >= {_g(bound)} (lower bound from the statistics) > {_g(thresholds.max_abs_err_fail_above)}",
            ),
        )
    warnings: list[str] = []
    for d in diffs:
        if d.diff is None or d.a is None or d.b is None:
            continue
        if abs(d.diff) <= thresholds.max_abs_err_suspect_above:
            continue  # a tiny absolute change of a statistic near zero is noise, whatever its ratio
        ratio = abs(d.diff) / (max(abs(d.a), abs(d.b)) + STAT_WARNING_EPSILON)
        if ratio > thresholds.stat_warning_ratio and math.isfinite(ratio):
            label = _STAT_LABEL.get(d.stat, d.stat)
            warnings.append(
                f"{label} diff {_g(d.diff)}: |diff|/max(|A|, |B|) = {_g(ratio)} > {_g(thresholds.stat_warning_ratio)}"
            )
    if warnings:
        return RuleOutcome("warning", tuple(warnings))
    return RuleOutcome("pass")


_PASS = RuleOutcome("pass")


def compute_md5_verdict(md5_a: str, md5_b: str) -> RuleOutcome:
    """md5 mode: pass when the checksums are equal (case-insensitive), fail otherwise."""
    if md5_a.strip().lower() == md5_b.strip().lower():
        return RuleOutcome("pass")
    return RuleOutcome("fail", (f"md5 differs: A {md5_a}, B {md5_b}",))


#: Arguments that say where a result is written, not what it is: a difference is noted, never a failure
#: (``nn.ReLU(inplace=True)`` and its out-of-place twin compute the same numbers).
PLACEMENT_ARGUMENTS = frozenset({"inplace"})


def is_placement_argument(name: str) -> bool:
    """True for a keyword argument (the last part of an argument path) in :data:`PLACEMENT_ARGUMENTS`: two values
    of it that differ are noted by the comparator, never a failure."""
    return name in PLACEMENT_ARGUMENTS


#: The start of the reason of every row whose call arguments differ (:func:`compute_argument_verdict`): what report
#: code looks for (with :func:`is_argument_row`) to list argument differences apart from numerical ones.
ARGUMENT_DIFFERS = "argument differs"

#: Two float arguments whose relative difference is at most this are equal: float32's machine epsilon, the
#: rounding of a value that passed through a float32 on one side (``1e-05`` read back from a float32 is
#: ``9.99999974738e-06``, a relative change of 2.5e-8) or was computed in another order in float64
#: (``1 - 0.9`` is ``0.09999999999999998``).  A real change of setting (``eps`` 1e-05 against 1e-12, a learning
#: rate) is many orders of magnitude larger.
ARGUMENT_FLOAT_RTOL = FLOAT_EPS["float32"]

ValueKind = Literal["dtype", "device", "number", "other"]


class ValueMatch(NamedTuple):
    """How two non-tensor values relate (:func:`compare_values`).

    Attributes:
        same: the two values mean the same (equal, one dtype or device in two spellings, floats equal to float32
            rounding).
        kind: what the values were compared as: ``"dtype"`` (canonical dtypes), ``"device"`` (canonical devices),
            ``"number"`` (ints and floats), ``"other"`` (``==`` on the recorded values).
        note: why two values that are not written alike were found the same; None when they are written alike or
            differ.
    """

    same: bool
    kind: ValueKind
    note: Note | None = None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _framework_dtype_spelling(value: object) -> bool:
    """A string that spells a dtype the way a framework writes it (``"torch.float32"``, ``"Float32"``), not a word
    that happens to name one (``"float"``)."""
    return isinstance(value, str) and as_dtype_value(value) is not None and ("." in value or value[:1].isupper())


def _floats_equal(x: float, y: float) -> bool:
    """Two floats within float32 rounding of each other (:data:`ARGUMENT_FLOAT_RTOL`); non-finite ones never."""
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return abs(x - y) <= ARGUMENT_FLOAT_RTOL * max(abs(x), abs(y))


def _spelt_twice(what: str, value_a: object, value_b: object) -> Note:
    return make_note("same_value_spelt_twice", f"one {what} in two spellings (A {value_a!r}, B {value_b!r})",
                     what=what, a=value_a, b=value_b)


def compare_values(type_a: str, value_a: object, type_b: str, value_b: object) -> ValueMatch:
    """Whether two non-tensor values (value leaves' ``type`` and ``value``) mean the same.

    - **dtypes** (a side's ``type`` is a dtype type such as ``"torch.dtype"`` / ``"mindspore.dtype"``, or both values
      are a framework's dtype spelling): equal when their canonical dtypes are
      (:func:`~msprobe_cmp.comparator.dtypes.as_dtype_value`: ``'Float32'``, ``'torch.float32'`` and
      ``'mindspore.float32'`` are one dtype, ``'Float16'`` and ``'torch.half'`` another);
    - **devices** (both values spell a device): equal when their canonical devices are
      (:func:`~msprobe_cmp.comparator.dtypes.normalize_device`: ``'device(type=cpu)'``, ``'cpu'`` and
      ``"device(type='cpu')"``; ``'cuda:0'`` and ``"device(type='cuda', index=0)"``);
    - **numbers** (ints and floats; a bool is not a number here): ints equal when ``==``; with a float, equal when
      ``==``, both NaN, or both finite with ``|a - b| <= ARGUMENT_FLOAT_RTOL * max(|a|, |b|)``
      (:data:`ARGUMENT_FLOAT_RTOL`: float32 rounding);
    - anything else (strings, bools, slices as tuples, None): ``==``.

    Returns:
        A :class:`ValueMatch`.  Never raises.
    """
    dtype_a, dtype_b = as_dtype_value(value_a), as_dtype_value(value_b)
    if dtype_a is not None and dtype_b is not None and (
        is_dtype_type(type_a) or is_dtype_type(type_b)
        or (_framework_dtype_spelling(value_a) and _framework_dtype_spelling(value_b))
    ):
        same = dtype_a == dtype_b
        note = _spelt_twice("dtype", value_a, value_b) if same and value_a != value_b else None
        return ValueMatch(same, "dtype", note)
    device_a, device_b = normalize_device(value_a), normalize_device(value_b)
    if device_a is not None and device_b is not None:
        same = device_a == device_b
        note = _spelt_twice("device", value_a, value_b) if same and value_a != value_b else None
        return ValueMatch(same, "device", note)
    if (is_device_type(type_a) or is_device_type(type_b)) and value_a == value_b:
        return ValueMatch(True, "device")
    if _is_number(value_a) and _is_number(value_b):
        if isinstance(value_a, int) and isinstance(value_b, int):
            return ValueMatch(value_a == value_b, "number")
        try:
            x, y = float(value_a), float(value_b)  # type: ignore[arg-type]
        except OverflowError:  # an int beyond float range against a float: they differ
            return ValueMatch(False, "number")
        if value_a == value_b or (math.isnan(x) and math.isnan(y)):
            return ValueMatch(True, "number")
        if _floats_equal(x, y):
            rounded = make_note("float32_rounding", f"equal to float32 rounding (A {value_a!r}, B {value_b!r})",
                                a=value_a, b=value_b)
            return ValueMatch(True, "number", rounded)
        return ValueMatch(False, "number")
    try:
        same = bool(value_a == value_b)
    except Exception:  # recorded values are plain JSON values; be safe all the same
        same = False
    return ValueMatch(same, "other")


def compute_argument_verdict(
    argument: str, value_a: object, value_b: object, verdict: ArgumentDiffersVerdict = DEFAULT_ARGUMENT_DIFFERS
) -> RuleOutcome:
    """The verdict of a call argument whose two values differ (:func:`compare_values` found them not the same).

    Args:
        argument: the argument's name as shown: a keyword argument's name (``"eps"``), else the argument path
            (``"input.4"``).
        value_a, value_b: the two recorded values (shown with ``repr``).
        verdict: :attr:`Rules.argument_differs` (``"warning"`` by default, or ``"fail"``).

    Returns:
        ``RuleOutcome(verdict, ("argument differs: eps A 1e-05, B 1e-12",))``: the reason starts with
        :data:`ARGUMENT_DIFFERS`.
    """
    return RuleOutcome(verdict, (make_note("argument_differs", f"{ARGUMENT_DIFFERS}: {argument} A {value_a!r}, B "
                                           f"{value_b!r}", argument=argument, a=value_a, b=value_b),))


class _RowLike(Protocol):
    """What :func:`is_argument_row` reads of a :class:`~msprobe_cmp.comparator.result.ComparisonRow`."""

    @property
    def compared_by(self) -> str:
        """How the row was compared."""
        ...

    @property
    def differs(self) -> bool | None:
        """Whether its sides differ."""
        ...

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why its verdict is not a plain pass."""
        ...


def is_argument_row(row: _RowLike) -> bool:
    """True for a compared row that is a call argument whose two sides differ: compared by value, its sides known to
    differ, and a reason of code ``argument_differs`` (:func:`compute_argument_verdict`), whatever its
    verdict (``warning`` by default, ``fail`` under ``argument_differs = "fail"``).

    False for an argument whose sides are the same (one dtype in two spellings, floats equal to float32 rounding), an
    ``inplace`` or device difference (a note-only pass), and a value output that differs (``"value differs"``).

    Args:
        row: a :class:`~msprobe_cmp.comparator.result.ComparisonRow` (anything with ``compared_by``, ``differs`` and
            ``reasons``).
    """
    if row.compared_by != "value" or row.differs is not True:
        return False
    return any(code_of(reason) == "argument_differs" for reason in row.reasons)


def compute_value_verdict(value_a: object, value_b: object) -> RuleOutcome:
    """A non-tensor value that is not a call argument (an output that is an int, a string, a slice, a dtype): equal
    or fail.  Equal means ``==``; the comparator first lets :func:`compare_values` clear one dtype or device in two
    spellings.

    Floating-point outputs are compared like 0-d tensors by the comparator, and call arguments by
    :func:`compute_argument_verdict`, not here.
    """
    if value_a == value_b:
        return RuleOutcome("pass")
    return RuleOutcome("fail", (f"value differs: A {value_a!r}, B {value_b!r}",))
