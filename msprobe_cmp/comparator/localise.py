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
  when ``e > jump_ratio × max(error in, floor)``, ``e > floor`` and its absolute error (MaxAbsErr, or its statistics
  lower bound) is more than twice the largest of its inputs' (a call that only shrinks the values, ``x - 100`` for
  ``x`` near 100, amplifies the relative error without adding any), where ``floor = noise_ulps × eps`` (machine
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
whose magnitude ``max(|A|max, |B|max)`` is below ``noise_magnitude_ulps × eps`` (at most 1e-4) times the largest
magnitude among the other rows of its entry (of the same entry pair, wherever the matching placed them: a fused
group, MatMul + BiasAdd against one ``linear``, puts MatMul's rows between BiasAdd's input and its bias gradient) is at
rounding-noise magnitude: its Cosine decides nothing (a verdict
the Cosine rules alone gave becomes a pass with a note), and it never jumps.  Rows holding a mask sentinel (a
dtype's most negative finite value, ~-3.4e38 in float32, as attention masks do) are left out of the magnitudes.

A row whose statistics hold a NaN or ±Inf on one side only has an infinite error: the first such row is where the
non-finite value appears.

No other project localises this way; msprobe's advisor applies a fixed list of heuristics to the first failing row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from msprobe_cmp.comparator.dtypes import FLOAT_EPS, compute_relative_floor, normalize_dtype
from msprobe_cmp.comparator.notes import code_of, note
from msprobe_cmp.comparator.result import LOWER_BOUND_NAME, ComparisonRow, Jump
from msprobe_cmp.comparator.rowtable import (
    ABSENT,
    COMPARED_BY_CODE,
    MATCH_CLASS_CODE,
    PASS,
    RowTable,
    RowTableBuilder,
)
from msprobe_cmp.comparator.rules import OriginRules, Thresholds
from msprobe_cmp.dump.naming import CELL_PREFIXES, parse_name

#: Largest floor, whatever the dtype (float16 / bfloat16 would otherwise reach 1 and more).
MAX_FLOOR = 0.05
#: Largest ratio of magnitudes called rounding noise, whatever the dtype.
MAX_NOISE_MAGNITUDE = 1e-4
#: Magnitudes at least this large are mask sentinels (a dtype's extreme finite value), not data.
_SENTINEL_FRACTION = 0.5
_FINITE_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38, "float32": 3.4028e38, "float64": 1.7977e308}

_INPUT_HEADS = frozenset({"input", "kwargs", "parameters", "buffers_before"})
_OUTPUT_HEADS = frozenset({"output", "buffers"})


@lru_cache(maxsize=256)
def rounding_floor(ulps: float, eps: float) -> float:
    """The rounding floor a row's relative error is judged against: ``ulps`` ulps of machine epsilon ``eps`` (the
    coarser dtype of its two sides), at most :data:`MAX_FLOOR` (module docstring; dimensionless)."""
    return min(ulps * eps, MAX_FLOOR)


def _sentinel_limit(dtype: str | None) -> float:
    """Magnitudes at least this large are a mask sentinel in ``dtype`` (half its largest finite value)."""
    return _SENTINEL_FRACTION * _FINITE_MAX.get(normalize_dtype(dtype) or "", _FINITE_MAX["float32"])


def measure(rows: RowTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every row's magnitude ``max(|A|max, |B|max)``, relative error ``e`` and absolute error (module docstring),
    vectorised over the unit.

    Returns:
        ``(measured, magnitude, e, absolute)``: bool [n], the rows with a tensor error (matched rows compared by
        tensor files or statistics, Max and Min recorded on both sides, not a mask sentinel); and float64 [n] each,
        NaN where unknown (value units for the magnitude and the absolute error, dimensionless ``e``).  A row whose
        Max or Min is a NaN or ±Inf on one side only (its elements are), or whose non-finite Max or Min differ (+Inf
        against -Inf, NaN against Inf), is measured with both errors infinite and no magnitude: that is where the
        non-finite value appears.
    """
    n = len(rows)
    stats, defined = rows.side_stats, rows.side_stats_defined
    by = rows.compared_by
    tensor = by == COMPARED_BY_CODE["tensor"]
    compared = ((rows.match_class == MATCH_CLASS_CODE["matched"]) & (tensor | (by == COMPARED_BY_CODE["statistics"]))
                & (rows.side_kind[:, 0] != ABSENT) & (rows.side_kind[:, 1] != ABSENT)
                & defined[:, :, :2].all(axis=(1, 2)))
    extremes = stats[:, :, :2].reshape(n, 4)
    finite_a = np.isfinite(extremes[:, :2]).all(axis=1)
    finite_b = np.isfinite(extremes[:, 2:]).all(axis=1)
    a, b = extremes[:, :2], extremes[:, 2:]
    nonfinite = ~np.isfinite(a) | ~np.isfinite(b)  # of Max, Min: where either side's is non-finite
    differing = compared & ~finite_a & ~finite_b & (nonfinite & ~((a == b) | (np.isnan(a) & np.isnan(b)))).any(axis=1)
    one_sided = compared & ((finite_a != finite_b) | differing)
    both = compared & finite_a & finite_b
    scale = np.abs(np.where(both[:, None], extremes, 0.0)).max(axis=1) if n else np.zeros(0)
    limit = np.full(n, np.inf)
    codes = rows.side_dtype[:, 0]
    for code in np.unique(codes[both]).tolist():
        limit[codes == code] = _sentinel_limit(rows.text(int(code)))
    both &= scale < limit
    mae, mae_ok = rows.metric_column("MaxAbsErr")
    bound, bound_ok = rows.metric_column(LOWER_BOUND_NAME)
    err = np.where(tensor, mae, bound)
    err_ok = np.where(tensor, mae_ok, bound_ok) & np.isfinite(err)
    magnitude = np.where(both, scale, np.nan)
    e = np.full(n, np.nan)
    absolute = np.full(n, np.nan)
    known = both & err_ok & (scale > 0.0)
    with np.errstate(over="ignore"):  # a huge error over a tiny magnitude is +Inf, as in Python's float maths
        e[known] = err[known] / scale[known]
    absolute[known] = err[known]
    zero = both & err_ok & (scale == 0.0) & (err == 0.0)
    e[zero] = 0.0
    absolute[zero] = 0.0
    magnitude[zero] = 0.0
    e[one_sided] = np.inf
    absolute[one_sided] = np.inf
    return both | one_sided, magnitude, e, absolute


@lru_cache(maxsize=1024)
def _eps_of(dtype_a: str | None, dtype_b: str | None) -> float:
    """Machine epsilon of the coarser floating dtype of two sides (float32's when neither is a float)."""
    return compute_relative_floor(*(d for d in (normalize_dtype(dtype_a), normalize_dtype(dtype_b)) if d in FLOAT_EPS))


def _head(path: str) -> str:
    return path.split(".", 1)[0]


@lru_cache(maxsize=4096)
def _is_output(arg_path: str, arg_path_b: str | None) -> bool:
    """An output of its call: ``output.*``, ``buffers.*`` (on either side: MindSpore's BatchNorm ``moving_mean``
    parameter pairs with PyTorch's ``buffers.running_mean``), or a row of an entry without inputs (a
    ``parameters_grad`` entry's gradients)."""
    heads = {_head(arg_path), _head(arg_path_b or arg_path)}
    return bool(heads & _OUTPUT_HEADS) or not heads & _INPUT_HEADS


def _cosine_only_failure(row: ComparisonRow, t: Thresholds) -> bool:
    """True when the row's failing or warning verdict comes from the Cosine rules alone: its MaxAbsErr passes the
    absolute rules (and nothing non-finite disagrees)."""
    if row.verdict not in ("fail", "warning") or row.compared_by != "tensor":
        return False
    mae = row.metric("MaxAbsErr")
    if mae is None:
        return False
    if any(code_of(reason) not in ("cosine_below", "cosine_suspect") for reason in row.reasons):
        return False
    return mae <= t.max_abs_err_suspect_above and mae <= t.max_abs_err_fail_above


def _judge_noise_row(rows: RowTableBuilder, k: int, sc: float, ref: float, thresholds: Thresholds) -> None:
    """A row at rounding-noise magnitude: a note, and a pass where the Cosine rules alone gave its verdict."""
    text = (f"both sides at rounding-noise magnitude (|values| <= {sc:.3g}, against {ref:.3g} in the same call): "
            "the Cosine decides nothing here")
    r = ComparisonRow(rows.table, k)
    if _cosine_only_failure(r, thresholds):
        was = "; ".join(r.reasons)
        rows.set_verdict(k, "pass", (), (*r.notes, note("rounding_noise", f"{text}; was: {was}", magnitude=sc,
                                                        reference=ref, was=list(r.reasons))))
    else:
        rows.set_verdict(k, r.verdict, r.reasons, (*r.notes, note("rounding_noise", text, magnitude=sc,
                                                                  reference=ref, was=None)))


def localise(
    rows: RowTableBuilder,
    chains: Mapping[str, tuple[str, ...]],
    kernels_differ: bool,
    thresholds: Thresholds,
    settings: OriginRules | None = None,
    left_out: np.ndarray | None = None,
) -> tuple[Jump, ...]:
    """Find the rows whose error jumps, and judge rows at rounding-noise magnitude (module docstring).

    Args:
        rows: one unit's rows, in execution order, every outcome filled in
            (:func:`msprobe_cmp.comparator.units.compare_units`); verdicts, reasons and notes are adjusted in place,
            and the ``relative_error`` and ``noise_floor`` columns filled (the ``e`` of each measured row not at
            rounding-noise magnitude, and its floor; what the report colours the cell tree and draws the noise band
            by).
        chains: entry name → its enclosing cells, innermost first (construct.json).
        kernels_differ: the two runs use different kernels (two frameworks, or mindtorch against PyTorch): the
            rounding floor is then ``cross_kernel_noise_ulps``, else ``same_kernel_noise_ulps``.
        thresholds: the default thresholds (what "passes the thresholds" means for a warning).
        settings: the localisation settings (defaults: :class:`OriginRules`).
        left_out: bool [n], rows not measured at all (outputs a framework leaves undefined: their error is no
            error of the run); None: none.

    Returns:
        Every jumping row, in execution order; the first is the likely origin.
    """
    s = settings or OriginRules()
    ulps = s.cross_kernel_noise_ulps if kernels_differ else s.same_kernel_noise_ulps
    jumps: list[Jump] = []
    carried = 0.0  # the largest relative error of every row so far (rounding-noise rows left out)
    holds_jump: set[str] = set()  # cells a jump happened inside
    forward_error: dict[str, float] = {}  # forward entry → the largest error of its rows

    def judge(entry: str, measured: list[tuple[int, float | None, float, bool, float | None, float | None, float,
                                                bool]]) -> None:
        """One call's rows (index, magnitude, the magnitude it is held against, at rounding-noise magnitude, e,
        absolute error, eps, is output): the rounding-noise rows (:func:`_calls` found them), then jumps."""
        nonlocal carried
        kept = []
        for m in measured:
            if m[3]:
                _judge_noise_row(rows, m[0], m[1] or 0.0, m[2], thresholds)
            else:
                kept.append(m)
        # (index, e, absolute error, eps) of the inputs and of the outputs whose error is known
        ins: list[tuple[int, float, float | None, float]] = []
        outs: list[tuple[int, float, float | None, float]] = []
        for k, _, _, _, e_known, absolute, eps, output in kept:
            if e_known is not None:
                (outs if output else ins).append((k, e_known, absolute, eps))
        for k, e, _, eps in ins:
            floor = rounding_floor(ulps, eps)
            if e > floor and e > s.jump_ratio * carried:
                jumps.append(Jump(k, "entered", carried, e, floor))
                holds_jump.update(chains.get(entry, ()))
        error_in = max((m[1] for m in ins), default=None)
        absolute_in = max((m[2] for m in ins if m[2] is not None), default=None)
        backward = ".backward" in entry
        if backward:
            parsed = parse_name(entry)
            twin = parsed.twin("forward") if parsed.direction == "backward" else None
            if twin is not None and twin in forward_error:
                # A backward also reads what its forward saved (the forward's inputs and outputs), so the error
                # those carried is carried into the backward as well.
                error_in = max(error_in or 0.0, forward_error[twin])
                absolute_in = None  # the saved tensors' values are not the gradients': no absolute comparison
        if error_in is None:
            error_in = carried
        for k, e, absolute, eps in outs:
            floor = rounding_floor(ulps, eps)
            # An error that only looks larger because the values shrank (x - 100 for x near 100: cancellation
            # amplifies the relative error without adding any) is not added: the absolute error must grow too.
            adds = absolute_in is None or absolute is None or absolute > 2.0 * absolute_in
            if adds and e > floor and e > s.jump_ratio * error_in:
                is_cell = entry.partition(".")[0] in CELL_PREFIXES and parse_name(entry).kind == "cell"
                if is_cell and entry in holds_jump:
                    continue  # a call inside the cell jumped: the error is that call's
                jumps.append(Jump(k, "computed", error_in, e, floor))
                holds_jump.update(chains.get(entry, ()))
                if is_cell:
                    holds_jump.add(entry)
        largest = max((m[1] for m in (*ins, *outs)), default=0.0)
        if largest > carried:
            carried = largest
        if not backward and ".forward" in entry:
            forward_error[entry] = largest

    # The calls (consecutive rows of one entry pair) judged one at a time are those where something can happen: a
    # row at rounding-noise magnitude, or one whose error exceeds its floor and the jump ratio times a lower bound of
    # what its inputs carry; every other call only raises ``carried`` (and records a forward's error), which the
    # columns give (_calls).
    table = rows.table
    calls = _calls(table, s, ulps, left_out)
    rows.cols["relative_error"][:] = calls.relative_error
    rows.cols["noise_floor"][:] = calls.noise_floor
    forwards = iter(calls.forwards)
    forward = next(forwards, None)
    for g in calls.judged:
        while forward is not None and forward < g:  # the errors of the forward calls before this one
            forward_error[calls.names[forward] or ""] = calls.largest[forward]
            forward = next(forwards, None)
        carried = calls.carried[g]
        lo, hi = calls.bounds[g], calls.bounds[g + 1]
        judge(calls.names[g] or "",
              list(zip(calls.rows[lo:hi], calls.magnitude[lo:hi], calls.reference[lo:hi], calls.noise[lo:hi],
                       calls.e[lo:hi], calls.absolute[lo:hi], calls.eps[lo:hi], calls.output[lo:hi], strict=True)))
    if s.warn:
        verdicts = rows.cols["verdict"]
        for jump in jumps:
            if verdicts[jump.row] == PASS:
                rows.set_verdict(jump.row, "warning", (describe_jump(jump),), table.tuples[int(table.notes[jump.row])])
    return tuple(jumps)


class _Calls(NamedTuple):
    """The measured rows of a unit grouped by call, in columns (:func:`_calls`).

    Row lists (one item per measured row, in row order; NaN given as None): ``rows`` (row index), ``magnitude``,
    ``reference`` (the magnitude the row is held against: the largest of the other rows of its entry pair),
    ``noise`` (at rounding-noise magnitude), ``e``, ``absolute``, ``eps`` (:func:`_eps_of` of the row's dtypes),
    ``output`` (:func:`_is_output`).  Per call:
    ``bounds`` (its rows are ``bounds[g]:bounds[g + 1]`` of the row lists), ``names`` (its entry name, None for no
    name), ``largest`` (the largest error of its rows that are not at rounding-noise magnitude, 0.0 when none),
    ``carried`` (the largest of ``largest`` over the calls before it, 0.0 for the first).  ``judged``: the calls to
    judge one at a time; ``forwards``: the forward calls (their ``largest`` is what a backward call reads of its
    forward), both ascending.  Per row of the table (float64 [n]): ``relative_error``, the ``e`` of each measured
    row not at rounding-noise magnitude, and ``noise_floor``, the floor it is judged against; NaN elsewhere (the
    table's columns of the same names).
    """

    rows: list[int]
    magnitude: list[float | None]
    reference: list[float]
    noise: list[bool]
    e: list[float | None]
    absolute: list[float | None]
    eps: list[float]
    output: list[bool]
    bounds: list[int]
    names: list[str | None]
    largest: list[float]
    carried: list[float]
    judged: list[int]
    forwards: list[int]
    relative_error: np.ndarray
    noise_floor: np.ndarray


def _pair_key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int64 [n]: each pair of int32 codes ``(a[i], b[i])`` packed into one number (equal pairs, equal numbers)."""
    return (a.astype(np.int64) << 32) | (b.astype(np.int64) & 0xFFFFFFFF)


def _per_code_pair(a: np.ndarray, b: np.ndarray, of: Callable[[int, int], Any]) -> list[Any]:
    """``[of(a[i], b[i]) for i]`` for int32 code columns ``a``, ``b``, calling ``of`` once per distinct pair."""
    if not len(a):
        return []
    key = _pair_key(a, b)
    distinct, inverse = np.unique(key, return_inverse=True)
    values = [of(k >> 32, (k & 0xFFFFFFFF) - ((k & 0x80000000) << 1)) for k in distinct.tolist()]
    return [values[i] for i in inverse.reshape(-1).tolist()]


def _calls(table: RowTable, s: OriginRules, ulps: float, left_out: np.ndarray | None = None) -> _Calls:
    """The measured rows of ``table`` grouped by call (:class:`_Calls`), with the calls :func:`localise` must judge.

    A call is judged when a row of it is at rounding-noise magnitude (the rule of ``judge``, on the same numbers), or
    when a row's error ``e`` exceeds its floor and ``jump_ratio`` times a lower bound of what it is compared with:
    for an input, ``carried``; for an output, the largest input error of its call, else (no input) ``carried`` for a
    forward call and 0 for a backward one (which may read its forward's error instead).  A call not judged has no
    jump and no noise row: ``judge`` would only have raised ``carried`` to its ``largest``."""
    measured_mask, magnitude, e, absolute = measure(table)
    if left_out is not None:
        measured_mask = measured_mask & ~left_out
    entry_codes, entry_b_codes = table.entry, table.entry_b
    n = len(table)
    starts = np.ones(n, dtype=bool)
    if n:
        starts[1:] = (entry_codes[1:] != entry_codes[:-1]) | (entry_b_codes[1:] != entry_b_codes[:-1])
    index = np.flatnonzero(measured_mask)
    m = len(index)
    group = np.cumsum(starts)[index]
    first = np.ones(m, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    bounds = np.append(np.flatnonzero(first), m)
    calls = len(bounds) - 1
    call_of = np.cumsum(first) - 1
    text = table.text
    eps_list = _per_code_pair(table.side_dtype[index, 0], table.side_dtype[index, 1],
                              lambda a, b: _eps_of(text(a), text(b)))
    output_list = _per_code_pair(table.arg_path[index], table.arg_path_b[index],
                                 lambda a, b: _is_output(text(a) or "", text(b)))
    eps = np.asarray(eps_list, dtype=np.float64)
    output = np.asarray(output_list, dtype=bool)
    sc, ek, ab = magnitude[index], e[index], absolute[index]
    # Rounding-noise magnitude: each row against the largest magnitude among the other rows of its entry pair,
    # wherever they are (a fused group, MatMul + BiasAdd against linear, interleaves two entries' rows: the bias
    # gradient, BiasAdd's output.1, sits apart from BiasAdd's input.0)
    pair = _pair_key(entry_codes[index], entry_b_codes[index])
    pair_of = np.unique(pair, return_inverse=True)[1].reshape(-1) if m else np.zeros(0, np.int64)
    pairs = int(pair_of.max()) + 1 if m else 0
    has = ~np.isnan(sc)
    count = np.bincount(pair_of[has], minlength=pairs)
    order = np.lexsort((sc[has], pair_of[has]))
    sorted_pair, sorted_sc = pair_of[has][order], sc[has][order]
    last = np.flatnonzero(np.append(sorted_pair[1:] != sorted_pair[:-1], True)) if len(order) else np.zeros(0, int)
    top = np.full(pairs, np.nan)
    second = np.full(pairs, np.nan)
    top[sorted_pair[last]] = sorted_sc[last]
    several = last[count[sorted_pair[last]] >= 2]
    second[sorted_pair[several]] = sorted_sc[several - 1]
    row_top, row_second = top[pair_of], second[pair_of]
    ref = np.where(sc == row_top, row_second, row_top)
    noise = (has & (count[pair_of] >= 2) & (sc != 0.0) & (ref > 0.0)
             & (sc < np.minimum(s.noise_magnitude_ulps * eps, MAX_NOISE_MAGNITUDE) * ref))
    known = ~noise & ~np.isnan(ek)
    inputs, outputs = known & ~output, known & output

    def call_max(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per call, the largest ``e`` of its rows in ``mask`` (0.0 when none) and whether it has one."""
        if not m:
            return np.zeros(0), np.zeros(0, bool)
        most = np.maximum.reduceat(np.where(mask, ek, -np.inf), bounds[:-1])
        some = np.bincount(call_of[mask], minlength=calls) > 0
        return np.where(some, most, 0.0), some

    largest, _ = call_max(known)
    largest_in, has_in = call_max(inputs)
    carried = np.maximum.accumulate(np.concatenate([[0.0], largest[:-1]])) if calls else np.zeros(0)
    firsts = index[bounds[:-1]]
    call_entry = entry_codes[firsts].tolist()
    strings = table.strings
    names = [strings[c] if c >= 0 else None for c in call_entry]
    backward = np.fromiter((name is not None and ".backward" in name for name in names), bool, calls)
    below_out = np.where(has_in, largest_in, np.where(backward, 0.0, carried))
    floor = np.minimum(ulps * eps, MAX_FLOOR)  # rounding_floor of every row
    over = ek > floor
    relative_error, noise_floor = np.full(n, np.nan), np.full(n, np.nan)
    relative_error[index[known]] = ek[known]
    noise_floor[index[known]] = floor[known]
    with np.errstate(over="ignore"):  # jump_ratio times a huge carried error is +Inf: nothing jumps above it
        candidate = noise | (inputs & over & (ek > s.jump_ratio * carried[call_of])) | (
            outputs & over & (ek > s.jump_ratio * below_out[call_of]))
    return _Calls(
        rows=index.tolist(), magnitude=[None if v != v else v for v in sc.tolist()],
        reference=np.where(noise, ref, 0.0).tolist(), noise=noise.tolist(),
        e=[None if v != v else v for v in ek.tolist()], absolute=[None if v != v else v for v in ab.tolist()],
        eps=eps_list, output=output_list, bounds=bounds.tolist(), names=names, largest=largest.tolist(),
        carried=carried.tolist(),
        judged=np.flatnonzero(np.bincount(call_of[candidate], minlength=calls) > 0).tolist(),
        forwards=[g for g, name in enumerate(names) if name is not None and not backward[g] and ".forward" in name],
        relative_error=relative_error, noise_floor=noise_floor,
    )


def describe_jump(j: Jump) -> str:
    """One sentence on a jump: ``"error far above what its inputs carry: relative error 4.3e-03 out, 1.2e-06 in
    (x3.6e+03; rounding floor 1.2e-04)"``."""
    ratio = "" if j.ratio is None else f" (x{j.ratio:.2g})"
    if j.kind == "entered":
        return (f"error enters here: relative error {j.error_out:.2g}, above anything recorded before it "
                f"({j.error_in:.2g}){ratio}; a parameter, input data or an unhooked operation differs")
    return (f"error far above what its inputs carry: relative error {j.error_out:.2g} out, {j.error_in:.2g} in"
            f"{ratio}; rounding floor {j.floor:.2g}")
