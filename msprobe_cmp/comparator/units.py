"""compare_units: one unit of A (target) against its partner in B (baseline): pair the rows, compute each row's
outcome, judge it against the declared capture gaps, the outputs a framework leaves undefined and the run-to-run
noise, and sum the unit up (counts, first divergent / failing row, cell roll-up).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

from msprobe_cmp.comparator.fused import fused_records, match_with_fused
from msprobe_cmp.comparator.localise import localise
from msprobe_cmp.comparator.mapping import NameMapping, Namespace, build_unit_views, framework_namespace
from msprobe_cmp.comparator.matching import RowPair, count_classes, match_entries, match_views
from msprobe_cmp.comparator.outcomes import (
    _compare_pair,
    _finite_statistics_outcome,
    _Outcome,
    _relative_floor_of,
    judge_zero_gradient,
)
from msprobe_cmp.comparator.result import (
    LOWER_BOUND_NAME,
    VERDICTS,
    ComparisonRow,
    Mode,
    OverallVerdict,
    SideSummary,
    UnitComparison,
    UnitRef,
)
from msprobe_cmp.comparator.rollup import _row_differs, compute_cell_rollups, parent_chains
from msprobe_cmp.comparator.rules import RuleOutcome, Rules, Verdict
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import RankDump
from msprobe_cmp.dump.schema import NOT_CAPTURED_BACKWARD, Leaf, TensorLeaf

_new = object.__new__


def _summary_of(leaf: Leaf) -> SideSummary:
    """:meth:`SideSummary.of`, built without the frozen ``__init__`` for tensor leaves."""
    if type(leaf) is not TensorLeaf:
        return SideSummary.of(leaf)
    summary = _new(SideSummary)
    shape = leaf.shape
    summary.__dict__.update({
        "kind": "tensor", "dtype": leaf.dtype, "shape": shape if type(shape) is tuple else tuple(shape),
        "max": leaf.max, "min": leaf.min, "mean": leaf.mean, "norm": leaf.norm, "md5": leaf.md5,
        "data_name": leaf.data_name, "value": None,
    })
    return summary


def _first(rows: tuple[ComparisonRow, ...], want: str) -> int | None:
    for r in rows:
        if want == "divergent" and _row_differs(r):
            return r.index
        if want == "failing" and r.verdict == "fail":
            return r.index
    return None


def _count_verdicts(verdicts: Iterable[Verdict]) -> tuple[tuple[Verdict, int], ...]:
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        counts[v] += 1
    return tuple(counts.items())


class RowNoise(NamedTuple):
    """Run-to-run noise of one row: how a rerun of B differs from B there.

    Attributes:
        cosine: the rerun's Cosine, or None when not known (a row judged by its statistics).
        max_abs_err: its MaxAbsErr, or the statistics lower bound of it, or None when neither is known.
        lower_bound: whether ``max_abs_err`` is only that lower bound.
    """

    cosine: float | None
    max_abs_err: float | None
    lower_bound: bool


#: Run-to-run noise per row name: a :class:`RowNoise`, or a plain tuple in its order (what
#: :func:`~msprobe_cmp.comparator.compare._noise_of` builds).
NoiseMap = Mapping[str, tuple[float | None, float | None, bool]]


def _noise_mae_text(noise_mae: float | None, lower_bound: bool) -> str:
    """``MaxAbsErr 0.25``, or ``MaxAbsErr >= 0.25 (a lower bound from the statistics)`` when the rerun's row was
    judged by its statistics, or ``MaxAbsErr -`` when unknown."""
    if noise_mae is None:
        return "MaxAbsErr -"
    if lower_bound:
        return f"MaxAbsErr >= {noise_mae:.6g} (a lower bound from the statistics)"
    return f"MaxAbsErr {noise_mae:.6g}"


def _within_noise(metrics: tuple[tuple[str, float | None], ...], noise: RowNoise, factor: float) -> str | None:
    """Why a failing row is within ``factor`` × the run-to-run noise, or None when it is not.  A noise MaxAbsErr
    that is only a lower bound still decides soundly: the real noise is at least that large."""
    values = dict(metrics)
    cos, mae = values.get("Cosine"), values.get("MaxAbsErr", values.get(LOWER_BOUND_NAME))
    noise_mae = noise.max_abs_err
    if mae is None or noise_mae is None or noise_mae <= 0.0 or mae > factor * noise_mae:
        return None
    if cos is not None and noise.cosine is not None and (1.0 - cos) > factor * (1.0 - noise.cosine):
        return None
    cos_text = "" if noise.cosine is None else f", Cosine {noise.cosine:.6g}"
    return (f"within run-to-run noise: the rerun of B differs from B by "
            f"{_noise_mae_text(noise_mae, noise.lower_bound)}{cos_text} (tolerance {factor:g}x)")


def unit_namespaces(unit_a: RankDump, unit_b: RankDump) -> tuple[Namespace | None, Namespace | None]:
    """The name spaces (``"mindspore"`` / ``"pytorch"``) of two units; mapping applies when they differ."""
    return (framework_namespace(unit_a.meta.framework, unit_a.entries),
            framework_namespace(unit_b.meta.framework, unit_b.entries))


def kernels_differ(unit_a: RankDump, unit_b: RankDump) -> bool:
    """Whether the two units were computed by different kernels: two name spaces (MindSpore against PyTorch), or two
    frameworks of one name space (mindtorch against PyTorch).  Their rounding then differs at every call, which
    :func:`~msprobe_cmp.comparator.localise.localise` allows for."""
    ns_a, ns_b = unit_namespaces(unit_a, unit_b)
    if ns_a != ns_b:
        return True
    return unit_a.meta.framework.strip().lower() != unit_b.meta.framework.strip().lower()


def _match_unit(unit_a: RankDump, unit_b: RankDump, mapping: NameMapping | None) -> tuple[RowPair, ...]:
    ns_a, ns_b = unit_namespaces(unit_a, unit_b)
    if ns_a is None or ns_b is None or ns_a == ns_b:
        fused = fused_records(mapping)
        if fused:  # one call against several (the API-mapping file's fused records): docs/mapping.md
            return match_with_fused(unit_a, unit_b, fused, match_entries)
        return match_entries(unit_a.entries, unit_b.entries)
    views_a, views_b, _ = build_unit_views(
        unit_a.entries, ns_a, unit_b.entries, ns_b, mapping or NameMapping(),
        ours_a="msprobe_cmp_format" in dict(unit_a.meta.extra),
        ours_b="msprobe_cmp_format" in dict(unit_b.meta.extra))
    return match_views(views_a, views_b)


#: Outputs whose contents a framework leaves undefined, so that two identical runs can differ there: a failure on
#: such a row becomes a warning with the reason (``(name space, fnmatch pattern over the row name, reason)``).
UNDEFINED_OUTPUTS: tuple[tuple[str, str, str], ...] = (
    (
        "mindspore",
        "Primitive.*.BatchNorm.*.forward.output.[12]",
        "MindSpore's BatchNorm (training) leaves outputs 1 and 2 uninitialised on CPU (MindSpore 2.10: they differ "
        "between identical calls; outputs 3 and 4 hold the batch statistics): not judged",
    ),
)


def _undefined_output_patterns(unit_a: RankDump, unit_b: RankDump) -> list[tuple[str, str]]:
    namespaces = set(unit_namespaces(unit_a, unit_b))
    return [(pattern, reason) for ns, pattern, reason in UNDEFINED_OUTPUTS if ns in namespaces]


def _declared_gap(names: tuple[str, ...], gaps: Mapping[str, str]) -> str | None:
    """The reason a side's header gives for not capturing an entry named ``names`` (A's and B's spelling), or None.

    Only the framework-level declaration :data:`~msprobe_cmp.dump.schema.NOT_CAPTURED_BACKWARD` (this recorder
    cannot capture any backward: mindtorch on CPU) covers rows, namely the backward and parameters_grad ones.
    Per-entry items (a hook that failed, a module whose backward never fired) stay notes: a backward that never
    came can be the regression itself (a detached tensor, a frozen layer), and must not be hidden.
    """
    if NOT_CAPTURED_BACKWARD in gaps:
        parsed = parse_name(names[0])
        if parsed.kind == "parameters_grad" or parsed.direction == "backward":
            return gaps[NOT_CAPTURED_BACKWARD]
    return None


def _apply_declared_gaps(
    pairs: tuple[RowPair, ...], gaps_a: Mapping[str, str], gaps_b: Mapping[str, str]
) -> tuple[RowPair, ...]:
    """Rows found on one side only whose entry the *other* side's recorder declared it could not capture
    (dump.json ``not_captured``) are ``not_captured``, not ``only_in_*``: the gap is known, not a mispairing."""
    if not gaps_a and not gaps_b:
        return pairs
    out = []
    for pair in pairs:
        missing_side, gaps = ("A", gaps_a) if pair.match_class == "only_in_b" else ("B", gaps_b)
        if pair.match_class in ("only_in_a", "only_in_b") and gaps:
            names = tuple(n for n in (pair.entry_name, pair.entry_name_b) if n)
            reason = _declared_gap(names, gaps)
            if reason is not None:
                note = f"{missing_side}'s recorder declared it could not capture this"
                note += f": {reason}" if reason else ""
                pair = replace(pair, match_class="not_captured", notes=(note, *pair.notes))
        out.append(pair)
    return tuple(out)


#: The words a recorder's ``not_captured`` reason holds when it did not look at a slot at all (an input it did not
#: replace by a copy, so its gradient hook could not be placed), as opposed to a slot it watched that stayed empty
#: (no gradient reached it): docs/contracts.md.
NOT_OBSERVED = "not observed"


def _declared_unobserved(
    pair: RowPair, out: _Outcome, gaps_a: Mapping[str, str], gaps_b: Mapping[str, str]
) -> _Outcome:
    """A row null on one side, whose recorder declared that very row not observed (:data:`NOT_OBSERVED`): skipped
    with the declared reason instead of the warning that a gradient did not flow (the recorder did not look)."""
    side, gaps, name = ("A", gaps_a, pair.name) if pair.leaf_a is None else ("B", gaps_b, pair.name_b)
    reason = gaps.get(name)
    if reason is None or NOT_OBSERVED not in reason:
        return out
    return out._replace(rule=RuleOutcome("skip", (f"{side}'s recorder declared it did not observe this: {reason}",)),
                        differs=None)


def compare_units(
    unit_a: RankDump,
    unit_b: RankDump,
    mode: Mode,
    rules: Rules,
    notes: tuple[str, ...] = (),
    noise: NoiseMap | None = None,
    mapping: NameMapping | None = None,
) -> UnitComparison:
    """Compare one unit of A (target) with one unit of B (baseline) in the given mode.

    Args:
        noise: per row name, the run-to-run noise measured between a rerun of B and B; a row that
            fails the rules but stays within ``rules.noise_factor`` times that noise becomes a warning.
        mapping: the user's mapping files; when the units are different frameworks (MindSpore against
            PyTorch / mindtorch) their entries are paired through the built-in tables and these files
            (:mod:`msprobe_cmp.comparator.mapping`), otherwise by name.
    """
    pairs = _apply_declared_gaps(
        _match_unit(unit_a, unit_b, mapping), unit_a.meta.not_captured_items, unit_b.meta.not_captured_items
    )
    rows: list[ComparisonRow] = []
    undefined = _undefined_output_patterns(unit_a, unit_b)
    # Statistics rows of two tensors with the default thresholds go straight to the finite-statistics outcome,
    # as _compare_pair -> _compare_tensors would send them (None: the general path decides).
    fast_t = rules.default if mode == "statistics" and not rules.overrides else None
    construct_a, construct_b = unit_a.construct.get, unit_b.construct.get
    stack_a, stack_b_get = unit_a.stack.get, unit_b.stack.get
    summary_of = _summary_of
    append = rows.append
    last_key: tuple[str, str | None, bool, bool] | None = None
    parent: str | None = None
    stack: tuple[str, ...] = ()
    stack_b: tuple[str, ...] = ()
    for i, pair in enumerate(pairs):
        la, lb = pair.leaf_a, pair.leaf_b
        out = None
        if fast_t is not None and pair.match_class == "matched" and type(la) is TensorLeaf and type(lb) is TensorLeaf:
            floor = fast_t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)
            out = _finite_statistics_outcome(pair, la, lb, fast_t, floor)
        if out is None:
            out = _compare_pair(pair, unit_a, unit_b, mode, rules)
        if pair.match_class == "matched":
            if "parameters_grad" in pair.entry_name:
                out = judge_zero_gradient(pair, out)
        elif out.rule.verdict == "warning" and pair.match_class == "not_captured" and (la is None) != (lb is None):
            out = _declared_unobserved(pair, out, unit_a.meta.not_captured_items, unit_b.meta.not_captured_items)
        if undefined and out.rule.verdict == "fail":
            why = next((reason for pattern, reason in undefined if fnmatch.fnmatchcase(pair.name, pattern)), None)
            if why is not None:
                out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, why)))
        if noise is not None and out.rule.verdict == "fail" and pair.name in noise:
            row_noise = RowNoise(*noise[pair.name])
            why = _within_noise(out.metrics, row_noise, rules.noise_factor)
            if why is not None:
                out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, why)))
            else:
                beyond = _noise_mae_text(row_noise.max_abs_err, row_noise.lower_bound)
                out = out._replace(notes=(*out.notes, f"beyond run-to-run noise (the rerun of B differs from B by "
                                                       f"{beyond})"))
        entry_name = pair.entry_name
        entry_name_b = pair.entry_name_b
        in_a, in_b = pair.in_a, pair.in_b
        key = (entry_name, entry_name_b, in_a, in_b)
        if key != last_key:  # consecutive rows of one entry share its parent cell and stacks
            last_key = key
            name_b = entry_name_b or entry_name
            parent = construct_a(entry_name) if in_a else None
            if parent is None and in_b:
                parent = construct_b(name_b)
            stack_b = tuple(stack_b_get(name_b, ())) if in_b else ()
            stack = stack_a(entry_name, ()) if in_a else ()
            if not stack:
                stack = stack_b
            stack = tuple(stack)
        row = _new(ComparisonRow)
        row.__dict__.update({
            "index": i,
            "entry_name": entry_name,
            "arg_path": pair.arg_path,
            "match_class": pair.match_class,
            "a": summary_of(la) if in_a else None,
            "b": summary_of(lb) if in_b else None,
            "compared_by": out.compared_by,
            "metrics": out.metrics,
            "verdict": out.rule.verdict,
            "reasons": out.rule.reasons,
            "notes": out.notes,
            "differs": out.differs,
            "parent_cell": parent,
            "stack": stack,
            "entry_name_b": entry_name_b,
            "stack_b": stack_b,
            "arg_path_b": pair.arg_path_b,
            "mapped_by": pair.mapped_by,
        })
        append(row)
    construct = {**dict(unit_b.construct), **dict(unit_a.construct)}
    chains, truncated = parent_chains((r.entry_name for r in rows), construct)
    found = localise(rows, chains, kernels_differ(unit_a, unit_b), rules.default, rules.localisation)
    frozen_rows = found.rows
    first_failing = _first(frozen_rows, "failing")
    compared = sum(1 for r in frozen_rows if r.match_class == "matched" and r.verdict != "skip")
    verdict: OverallVerdict = "fail" if first_failing is not None else ("pass" if compared else "nothing_compared")
    cells, chains, _ = compute_cell_rollups(frozen_rows, construct, chains)
    if truncated:
        notes = (*notes, "construct.json nests cells more than 1,000 deep: the cell roll-up stops there")
    return UnitComparison(
        cells=cells,
        parent_chains=chains,
        unit_a=UnitRef.of("a", unit_a),
        unit_b=UnitRef.of("b", unit_b),
        rows=frozen_rows,
        counts=count_classes(pairs),
        verdict_counts=_count_verdicts(r.verdict for r in frozen_rows),
        first_divergent=_first(frozen_rows, "divergent"),
        first_failing=first_failing,
        verdict=verdict,
        notes=notes,
        jumps=found.jumps,
    )
