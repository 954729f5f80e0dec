"""Localisation: where an error enters, told apart from the error every later row carries in.

A port's two runs differ everywhere downstream of a bug, and across frameworks they differ *everywhere* by rounding
(another kernel sums in another order), so "the first row whose sides differ" says nothing across frameworks and
"the first failing row" is often far downstream of the cause, or a row whose values are rounding noise.  This module
looks at the error each call *adds*: for every row it takes the **relative error** ::

    e = MaxAbsErr / max(|A|max, |B|max)                      (tensor mode; |X|max = max(|Max|, |Min|))
    e = (MaxAbsErr lower bound from the statistics) / (same)  (statistics mode, docs/design.md §2)

and compares the error a call's outputs carry with the error its inputs carry in:

* the **error in** of a call is the largest ``e`` of its input rows (``input.*``, ``kwargs.*``, ``parameters.*``,
  ``buffers_before.*``), and for a backward call also of its forward call's rows (what the forward saved for the
  backward); a call with no compared input row (a ``parameters_grad`` entry, a Module called with non-tensors)
  takes the largest ``e`` of every row before it in the unit instead;
* an output row (``output.*``, ``buffers.*``: a buffer after the call, such as BatchNorm's running mean) **jumps**
  when ``e > jump_ratio × max(error in, floor)`` and ``e > floor``, where ``floor = noise_ulps × eps`` (machine
  epsilon of the coarser dtype of the two sides): rounding can add a few ulps per call where both runs use the same
  kernels, and up to :data:`CROSS_KERNEL_NOISE_ULPS` ulps where they do not (two frameworks, or mindtorch against
  PyTorch: other summation orders, other fused kernels, measured on the real-model corpus);
* an input row **jumps** when its ``e`` exceeds ``jump_ratio ×`` the largest ``e`` of every row before it and the
  floor: no recorded call produced that error, so it enters there (a parameter copied wrongly, other input data, or
  an operation the recorder does not hook);
* a cell's output row does not jump when a call inside the cell already did (construct.json): the error is the inner
  call's, and the cell is in the origin's chain.

The **likely origin** is the first jumping row in execution order (rows in the order of
:mod:`msprobe_cmp.comparator.matching`: a call's inputs before its outputs, a cell's rows after those of the calls
inside it).  Every jumping row that passes the thresholds becomes a **warning** ("error far above what its inputs
carry"): a subtle porting bug (a BatchNorm eps of 1e-3 against 1e-5 moves its output by 4e-3, far below the
MaxAbsErr thresholds) is then reported, not passed.

**Rounding-noise magnitude.**  Some tensors are mathematically zero and hold rounding noise only: BERT's attention
``key`` bias gradient is a sum that cancels exactly (softmax ignores a constant per query), so its values are
~1e-12 against ~1e-5 for the gradient it is summed from, and its Cosine between two runs is a random number.  A row
whose magnitude ``max(|A|max, |B|max)`` is below ``noise_magnitude_ulps × eps`` (at most 1e-2) times the largest
magnitude among the other rows of its entry is at rounding-noise magnitude: its Cosine decides nothing (a verdict
the Cosine rules alone gave becomes a pass with a note), and it never jumps.  Rows holding a mask sentinel (a
dtype's most negative finite value, ~-3.4e38 in float32, as attention masks do) are left out of the magnitudes.

No other project localises this way; msprobe's advisor applies a fixed list of heuristics to the first failing row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from msprobe_cmp.comparator.dtypes import FLOAT_EPS, compute_relative_floor, normalize_dtype
from msprobe_cmp.comparator.result import LOWER_BOUND_NAME, ComparisonRow, Jump, SideSummary
from msprobe_cmp.comparator.rules import OriginRules, Thresholds
from msprobe_cmp.dump.naming import parse_name

#: Largest floor, whatever the dtype (float16 / bfloat16 would otherwise reach 1 and more).
MAX_FLOOR = 0.05
#: Largest ratio of magnitudes called rounding noise, whatever the dtype.
MAX_NOISE_MAGNITUDE = 1e-2
#: Magnitudes at least this large are mask sentinels (a dtype's extreme finite value), not data.
_SENTINEL_FRACTION = 0.5
_FINITE_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38, "float32": 3.4028e38, "float64": 1.7977e308}

_INPUT_HEADS = frozenset({"input", "kwargs", "parameters", "buffers_before"})
_OUTPUT_HEADS = frozenset({"output", "buffers"})


def magnitude(side: SideSummary | None) -> float | None:
    """``max(|Max|, |Min|)`` of one side of a row (value units), or None when unknown or non-finite."""
    if side is None or side.kind != "tensor" or side.max is None or side.min is None:
        return None
    m = max(abs(side.max), abs(side.min))
    return m if math.isfinite(m) else None


def _is_sentinel(m: float, dtype: str | None) -> bool:
    limit = _FINITE_MAX.get(normalize_dtype(dtype) or "", _FINITE_MAX["float32"])
    return m >= _SENTINEL_FRACTION * limit


def _metric(row: ComparisonRow, key: str) -> float | None:
    for k, v in row.metrics:
        if k == key:
            return v
    return None


def relative_error(row: ComparisonRow) -> float | None:
    """The row's relative error ``e`` (module docstring; dimensionless), or None when the row has none: not a matched
    tensor row compared by tensor files or statistics, a magnitude unknown, or an error not finite."""
    if row.match_class != "matched" or row.compared_by not in ("tensor", "statistics"):
        return None
    err = _metric(row, "MaxAbsErr") if row.compared_by == "tensor" else _metric(row, LOWER_BOUND_NAME)
    ma, mb = magnitude(row.a), magnitude(row.b)
    if err is None or ma is None or mb is None or not math.isfinite(err):
        return None
    scale = max(ma, mb)
    if scale == 0.0:
        return 0.0 if err == 0.0 else None
    return err / scale


def _eps(row: ComparisonRow) -> float:
    dtypes = [normalize_dtype(s.dtype) for s in (row.a, row.b) if s is not None and s.kind == "tensor"]
    floats = [d for d in dtypes if d in FLOAT_EPS]
    return compute_relative_floor(*floats) if floats else FLOAT_EPS["float32"]


def _head(path: str) -> str:
    return path.split(".", 1)[0]


def _is_output(row: ComparisonRow) -> bool:
    """An output of its call: ``output.*``, ``buffers.*`` (on either side: MindSpore's BatchNorm ``moving_mean``
    parameter pairs with PyTorch's ``buffers.running_mean``), or a row of an entry without inputs (a
    ``parameters_grad`` entry's gradients)."""
    heads = {_head(row.arg_path), _head(row.arg_path_b or row.arg_path)}
    return bool(heads & _OUTPUT_HEADS) or not heads & _INPUT_HEADS


@dataclass
class _Row:
    """What the walk needs of one row."""

    index: int
    error: float | None
    scale: float | None
    eps: float
    output: bool
    noise: bool = False


def _entry_groups(rows: Sequence[ComparisonRow]) -> list[list[int]]:
    """Row indices grouped by consecutive entry (A's entry name, else B's)."""
    groups: list[list[int]] = []
    last: tuple[str, str | None] | None = None
    for k, r in enumerate(rows):
        key = (r.entry_name, r.entry_name_b)
        if key != last:
            groups.append([])
            last = key
        groups[-1].append(k)
    return groups


def _cosine_only_failure(row: ComparisonRow, t: Thresholds) -> bool:
    """True when the row's failing or warning verdict comes from the Cosine rules alone: its MaxAbsErr passes the
    absolute rules (and nothing non-finite disagrees)."""
    if row.verdict not in ("fail", "warning") or row.compared_by != "tensor":
        return False
    mae = _metric(row, "MaxAbsErr")
    if mae is None:
        return False
    if any(not reason.startswith("Cosine") for reason in row.reasons):
        return False
    return mae <= t.max_abs_err_suspect_above and mae <= t.max_abs_err_fail_above


@dataclass(frozen=True)
class Localisation:
    """What :func:`localise` found in one unit.

    Attributes:
        rows: the unit's rows with verdicts adjusted (rounding-noise rows passed, jumping rows warned).
        jumps: every jumping row, in execution order; the first is the likely origin.
        noise_rows: how many rows were found at rounding-noise magnitude.
    """

    rows: tuple[ComparisonRow, ...]
    jumps: tuple[Jump, ...]
    noise_rows: int


def localise(
    rows: Sequence[ComparisonRow],
    chains: Mapping[str, tuple[str, ...]],
    kernels_differ: bool,
    thresholds: Thresholds,
    settings: OriginRules | None = None,
) -> Localisation:
    """Find the rows whose error jumps, and judge rows at rounding-noise magnitude (module docstring).

    Args:
        rows: one unit's rows, in execution order (:func:`msprobe_cmp.comparator.units.compare_units`).
        chains: entry name → its enclosing cells, innermost first (construct.json).
        kernels_differ: the two runs use different kernels (two frameworks, or mindtorch against PyTorch): the
            rounding floor is then ``cross_kernel_noise_ulps``, else ``same_kernel_noise_ulps``.
        thresholds: the default thresholds (what "passes the thresholds" means for a warning).
        settings: the localisation settings (defaults: :class:`OriginRules`).

    Returns:
        A :class:`Localisation`: the rows (a new tuple; rows not changed are the same objects), the jumps and the
        number of rows at rounding-noise magnitude.
    """
    s = settings or OriginRules()
    ulps = s.cross_kernel_noise_ulps if kernels_differ else s.same_kernel_noise_ulps
    info: list[_Row] = []
    for k, r in enumerate(rows):
        scale = None
        ma, mb = magnitude(r.a), magnitude(r.b)
        if ma is not None and mb is not None:
            scale = max(ma, mb)
            dtype = r.a.dtype if r.a is not None else None
            if _is_sentinel(scale, dtype):
                scale = None
        info.append(_Row(k, relative_error(r) if scale is not None else None, scale, _eps(r), _is_output(r)))
    out = list(rows)
    noise_rows = 0
    # Rounding-noise magnitude, per entry: against the largest other tensor of the entry.
    for group in _entry_groups(rows):
        scales: list[tuple[int, float]] = [(k, m) for k in group if (m := info[k].scale) is not None]
        if len(scales) < 2:
            continue
        for k, sc in scales:
            ref = max((m for j, m in scales if j != k), default=0.0)
            limit = min(s.noise_magnitude_ulps * info[k].eps, MAX_NOISE_MAGNITUDE)
            if ref > 0.0 and sc < limit * ref:
                info[k].noise = True
                noise_rows += 1
                r = rows[k]
                note = (f"both sides at rounding-noise magnitude (|values| <= {sc:.3g}, against {ref:.3g} in the "
                        "same call): the Cosine decides nothing here")
                if _cosine_only_failure(r, thresholds):
                    out[k] = replace(r, verdict="pass", reasons=(), notes=(*r.notes, f"{note}; was: "
                                                                           f"{'; '.join(r.reasons)}"))
                else:
                    out[k] = replace(r, notes=(*r.notes, note))
    jumps: list[Jump] = []
    carried = 0.0  # the largest relative error of every row so far (rounding-noise rows left out)
    holds_jump: set[str] = set()  # cells a jump happened inside
    forward_error: dict[str, float] = {}  # forward entry → the largest error of its rows
    for group in _entry_groups(rows):
        entry = rows[group[0]].entry_name
        ins = [info[k] for k in group if not info[k].output and not info[k].noise and info[k].error is not None]
        outs = [info[k] for k in group if info[k].output and not info[k].noise and info[k].error is not None]
        for x in ins:
            assert x.error is not None
            floor = min(ulps * x.eps, MAX_FLOOR)
            if x.error > floor and x.error > s.jump_ratio * carried:
                jumps.append(Jump(x.index, "entered", carried, x.error, floor))
                holds_jump.update(chains.get(entry, ()))
        error_in = max((x.error for x in ins if x.error is not None), default=None)
        parsed = parse_name(entry)
        twin = parsed.twin("forward") if parsed.direction == "backward" else None
        if twin is not None and twin in forward_error:
            # A backward also reads what its forward saved (the forward's inputs and outputs), so the error those
            # carried is carried into the backward as well.
            error_in = max(error_in or 0.0, forward_error[twin])
        if error_in is None:
            error_in = carried
        is_cell = parsed.kind == "cell"
        inner_jump = is_cell and entry in holds_jump
        for x in outs:
            assert x.error is not None
            floor = min(ulps * x.eps, MAX_FLOOR)
            if not inner_jump and x.error > floor and x.error > s.jump_ratio * error_in:
                jumps.append(Jump(x.index, "computed", error_in, x.error, floor))
                holds_jump.update(chains.get(entry, ()))
                if is_cell:
                    holds_jump.add(entry)
        for x in (*ins, *outs):
            if x.error is not None and x.error > carried:
                carried = x.error
        if parsed.direction == "forward":
            forward_error[entry] = max((x.error for x in (*ins, *outs) if x.error is not None), default=0.0)
    if s.warn:
        for j in jumps:
            r = out[j.row]
            if r.verdict == "pass":
                out[j.row] = replace(r, verdict="warning", reasons=(describe_jump(j),))
    return Localisation(tuple(out), tuple(jumps), noise_rows)


def describe_jump(j: Jump) -> str:
    """One sentence on a jump: ``"error far above what its inputs carry: relative error 4.3e-03 out, 1.2e-06 in
    (x3.6e+03; rounding floor 1.2e-04)"``."""
    ratio = "" if j.ratio is None else f" (x{j.ratio:.2g})"
    if j.kind == "entered":
        return (f"error enters here: relative error {j.error_out:.2g}, above anything recorded before it "
                f"({j.error_in:.2g}){ratio}; a parameter, input data or an unhooked operation differs")
    return (f"error far above what its inputs carry: relative error {j.error_out:.2g} out, {j.error_in:.2g} in"
            f"{ratio}; rounding floor {j.floor:.2g}")
