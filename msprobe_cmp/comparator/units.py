"""compare_units: one unit of A (target) against its partner in B (baseline): pair the rows, compute each row's
outcome, judge it against the declared capture gaps, the outputs a framework leaves undefined and the run-to-run
noise, and sum the unit up (counts, first divergent / failing row, cell roll-up).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from msprobe_cmp.comparator.fused import fused_records, match_with_fused
from msprobe_cmp.comparator.localise import localise
from msprobe_cmp.comparator.mapping import (
    NameMapping,
    Namespace,
    build_unit_views,
    framework_namespace,
    label_contradiction,
    unused_mapping_keys,
)
from msprobe_cmp.comparator.matching import MATCH_CLASSES, MatchClass, RowPair, RowPairs, match_entries, match_views
from msprobe_cmp.comparator.notes import note
from msprobe_cmp.comparator.outcomes import (
    Outcome,
    can_compare_as_columns,
    compare_row,
    compare_statistics_columns,
    judge_zero_gradient,
    statistics_outcome_of_failing,
    thresholds_and_floor,
)
from msprobe_cmp.comparator.result import (
    LOWER_BOUND_NAME,
    METRIC_NAMES,
    Mode,
    UnitComparison,
    UnitRef,
    unit_summary,
)
from msprobe_cmp.comparator.rollup import compute_cell_rollups, merged_construct, paired_cells, parent_chains
from msprobe_cmp.comparator.rowtable import (
    COMPARED_BY_CODE,
    MATCH_CLASS_CODE,
    METRIC_VALUE,
    PASS,
    STAT_DIFF_COLUMN,
    TENSOR,
    RowTable,
    RowTableBuilder,
)
from msprobe_cmp.comparator.rules import RuleOutcome, Rules
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import RankDump
from msprobe_cmp.dump.schema import NOT_CAPTURED_BACKWARD, Interned, TensorLeaf, tensor_leaf_rows

#: The metric names :func:`compare_statistics_columns` fills, in its column order.
_STAT_COLUMN_NAMES = METRIC_NAMES[STAT_DIFF_COLUMN:]


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


@dataclass(frozen=True)
class UnitFacts:
    """What summing up a comparison of many units needs to know of one unit beyond its header, worked out where
    the unit's entries are read: in the comparing process, or on the worker that compares the unit
    (:func:`~msprobe_cmp.comparator.parallel.compare_unit_task`), so that a parent handing units to workers never
    holds their entries.

    Attributes:
        entries: number of entries.
        leaves: number of leaves (the rows the unit gives when it has no partner).
        has_md5: whether some tensor leaf carries a checksum (md5 mode needs both sides to).
        namespace: the unit's name space (:func:`~msprobe_cmp.comparator.mapping.framework_namespace`).
        contradiction: the sentence of :func:`~msprobe_cmp.comparator.mapping.label_contradiction`, or None.
        unused_cells, unused_apis: for a MindSpore unit, the user's mapping keys that match none of its entries
            (:func:`~msprobe_cmp.comparator.mapping.unused_mapping_keys`); () for any other unit.
    """

    entries: int
    leaves: int
    has_md5: bool
    namespace: Namespace | None
    contradiction: str | None = None
    unused_cells: tuple[str, ...] = ()
    unused_apis: tuple[str, ...] = ()

    @classmethod
    def of(cls, unit: RankDump, mapping: NameMapping | None = None) -> UnitFacts:
        """The facts of the loaded ``unit`` (its entries read), with ``mapping``'s keys checked against it.

        Raises:
            ValueError: ``unit`` is a scanned unit (:func:`~msprobe_cmp.dump.reader.scan_dump`), without entries.
        """
        if unit.scanned:
            raise ValueError(f"{unit.label}: only the header was read; its facts come from the unit's entries")
        leaves = sum(len(e.paths()) for e in unit.entries)
        # has_checksum of each tensor leaf, read from the leaf columns: an md5 code of -1 is None
        has_md5 = any(bool((cols.code_array("md5_code")[rows] >= 0).any())
                      for cols, rows in tensor_leaf_rows(unit.entries))
        namespace = framework_namespace(unit.meta.framework, unit.entries)
        cells: list[str] = []
        apis: list[str] = []
        if namespace == "mindspore" and mapping is not None and (mapping.cells or mapping.apis):
            cells, apis = unused_mapping_keys(mapping, unit.entries)
        return cls(len(unit.entries), leaves, has_md5, namespace,
                   label_contradiction(unit.meta.framework, unit.entries), tuple(cells), tuple(apis))


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


def _match_unit(unit_a: RankDump, unit_b: RankDump, mapping: NameMapping | None) -> RowPairs:
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
    return RowPairs.of(match_views(views_a, views_b))


#: Outputs whose contents a framework leaves undefined, so that two identical runs can differ there: a failure on
#: such a row becomes a warning with the reason, and localisation leaves the row out (its error is no error the run
#: made): ``(name space, fnmatch pattern over the entry name, fnmatch pattern over the argument path, reason)``.
UNDEFINED_OUTPUTS: tuple[tuple[str, str, str, str], ...] = (
    (
        "mindspore",
        "Primitive.*.BatchNorm.*.forward",
        "output.[12]",
        "MindSpore's BatchNorm (training) leaves outputs 1 and 2 uninitialised on CPU (MindSpore 2.10: they differ "
        "between identical calls; outputs 3 and 4 hold the batch statistics): not judged",
    ),
)

#: The undefined outputs that apply to a unit pair: ``(entry pattern, argument-path pattern, reason)`` each.
_Undefined = list[tuple[str, str, str]]


def _undefined_output_patterns(unit_a: RankDump, unit_b: RankDump) -> _Undefined:
    namespaces = set(unit_namespaces(unit_a, unit_b))
    return [(entry, arg, reason) for ns, entry, arg, reason in UNDEFINED_OUTPUTS if ns in namespaces]


def _undefined_rows(table: RowTable, undefined: _Undefined) -> np.ndarray:
    """int [n]: for each row of ``table``, the index in ``undefined`` of the first pattern its A names (entry name,
    argument path) fall under, -1 for none (each distinct entry name and argument path matched once)."""
    n = len(table)
    which = np.full(n, -1, dtype=np.int64)
    if not undefined or not n:
        return which
    strings = table.strings
    entries, entry_of = np.unique(table.entry, return_inverse=True)
    args, arg_of = np.unique(table.arg_path, return_inverse=True)
    for k, (entry, arg, _) in enumerate(undefined):
        entry_ok = np.fromiter((c >= 0 and fnmatch.fnmatchcase(strings[c], entry) for c in entries.tolist()), bool,
                               len(entries))
        arg_ok = np.fromiter((c >= 0 and fnmatch.fnmatchcase(strings[c], arg) for c in args.tolist()), bool, len(args))
        which[(which < 0) & entry_ok[entry_of.reshape(-1)] & arg_ok[arg_of.reshape(-1)]] = k
    return which


def _undefined_why(undefined: _Undefined, which: np.ndarray, k: int) -> str | None:
    """The reason row ``k`` is an undefined output (:func:`_undefined_rows` gave ``which``), or None."""
    p = int(which[k]) if len(which) else -1
    return undefined[p][2] if p >= 0 else None


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


def _apply_declared_gaps(pairs: RowPairs, gaps_a: Mapping[str, str], gaps_b: Mapping[str, str]) -> RowPairs:
    """Rows found on one side only whose entry the *other* side's recorder declared it could not capture
    (dump.json ``not_captured``) are ``not_captured``, not ``only_in_*``: the gap is known, not a mispairing."""
    if not gaps_a and not gaps_b:
        return pairs
    only_a, only_b = MATCH_CLASSES.index("only_in_a"), MATCH_CLASSES.index("only_in_b")
    changes: dict[int, tuple[MatchClass, tuple[str, ...]]] = {}
    for i in np.flatnonzero((pairs.match_class == only_a) | (pairs.match_class == only_b)).tolist():
        missing_side, gaps = ("A", gaps_a) if pairs.match_class[i] == only_b else ("B", gaps_b)
        if gaps:
            names = tuple(n for n in (pairs.name_of("entry", i), pairs.name_of("entry_b", i)) if n)
            reason = _declared_gap(names, gaps)
            if reason is not None:
                text = f"{missing_side}'s recorder declared it could not capture this"
                text += f": {reason}" if reason else ""
                declared = note("not_captured", text, side=missing_side, reason=reason)
                changes[i] = ("not_captured", (declared, *pairs.note_texts[pairs.notes[i]]))
    return pairs.with_classes(changes)


#: The words a recorder's ``not_captured`` reason holds when it did not look at a slot at all (an input it did not
#: replace by a copy, so its gradient hook could not be placed), as opposed to a slot it watched that stayed empty
#: (no gradient reached it): docs/contracts.md.
NOT_OBSERVED = "not observed"


def _declared_unobserved(
    pair: RowPair, out: Outcome, gaps_a: Mapping[str, str], gaps_b: Mapping[str, str]
) -> Outcome:
    """A row null on one side, whose recorder declared that very row not observed (:data:`NOT_OBSERVED`): skipped
    with the declared reason instead of the warning that a gradient did not flow (the recorder did not look)."""
    side, gaps, name = ("A", gaps_a, pair.name) if pair.leaf_a is None else ("B", gaps_b, pair.name_b)
    reason = gaps.get(name)
    if reason is None or NOT_OBSERVED not in reason:
        return out
    return out._replace(rule=RuleOutcome("skip", (f"{side}'s recorder declared it did not observe this: {reason}",)),
                        differs=None)


def _judge_failing(pair: RowPair, out: Outcome, undefined: str | None, noise: NoiseMap | None,
                   rules: Rules) -> Outcome:
    """A failing row's outcome after the outputs a framework leaves undefined (:data:`UNDEFINED_OUTPUTS`) and the
    run-to-run noise: either makes it a warning with the reason (``undefined``: why the row is an undefined output,
    or None); beyond the noise, a note says by how much."""
    if undefined is not None and out.rule.verdict == "fail":
        out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, undefined)))
    if noise is not None and out.rule.verdict == "fail" and pair.name in noise:
        row_noise = RowNoise(*noise[pair.name])
        why = _within_noise(out.metrics, row_noise, rules.noise_factor)
        if why is not None:
            out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, why)))
        else:
            beyond = _noise_mae_text(row_noise.max_abs_err, row_noise.lower_bound)
            out = out._replace(notes=(*out.notes, note("beyond_noise", "beyond run-to-run noise (the rerun of B "
                                                        f"differs from B by {beyond})", noise=beyond)))
    return out


def _record_outcome(rows: RowTableBuilder, i: int, out: Outcome) -> None:
    rows.set_outcome(i, out.compared_by, out.metrics, out.rule.verdict, out.rule.reasons, out.notes, out.differs)


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

    Rows are paired (:mod:`msprobe_cmp.comparator.matching`), their names and sides written into a
    :class:`~msprobe_cmp.comparator.rowtable.RowTable`; in statistics mode the matched rows of two tensors with finite
    statistics are compared as columns (:func:`compare_statistics_columns`), every other row by
    :func:`compare_row`; then the rows whose error jumps are found (:func:`localise`) and the unit summed up.

    Args:
        noise: per row name, the run-to-run noise measured between a rerun of B and B; a row that
            fails the rules but stays within ``rules.noise_factor`` times that noise becomes a warning.
        mapping: the user's mapping files; when the units are different frameworks (MindSpore against
            PyTorch / mindtorch) their entries are paired through the built-in tables and these files
            (:mod:`msprobe_cmp.comparator.mapping`), otherwise by name.

    Raises:
        ValueError: a unit of :func:`~msprobe_cmp.dump.reader.scan_dump` (its entries were not read).
    """
    for unit in (unit_a, unit_b):
        if unit.scanned:
            raise ValueError(f"{unit.label}: only the header was read (scan_dump): load the unit to compare it")
    pairs = _apply_declared_gaps(
        _match_unit(unit_a, unit_b, mapping), unit_a.meta.not_captured_items, unit_b.meta.not_captured_items
    )
    n = len(pairs)
    builder = RowTableBuilder(n)
    undefined = _undefined_output_patterns(unit_a, unit_b)
    gaps_a, gaps_b = unit_a.meta.not_captured_items, unit_b.meta.not_captured_items
    cols = builder.cols
    if n:
        _set_names_and_sides(builder, pairs, unit_a, unit_b)
    which = _undefined_rows(builder.table, undefined)  # the outputs a framework leaves undefined, matched once

    def why(k: int) -> str | None:
        return _undefined_why(undefined, which, k)

    # Rows of two tensors go to the statistics columns when can_compare_as_columns says so; the others, one at a time
    # in row order, through compare_row (their reasons and notes are interned in that order, before the columns').
    candidate = ((cols["match_class"] == MATCH_CLASS_CODE["matched"]) & (cols["side_kind"] == TENSOR).all(axis=1)
                 if mode == "statistics" else np.zeros(n, dtype=bool))
    if n and candidate.any():
        gradients = np.fromiter(("parameters_grad" in name for name in pairs.names), bool, len(pairs.names))
        candidate &= ~gradients[pairs.entry]
    columnar = np.flatnonzero(candidate)
    columnar = columnar[can_compare_as_columns(pairs, columnar)]
    one_by_one = np.ones(n, dtype=bool)
    one_by_one[columnar] = False
    for i in np.flatnonzero(one_by_one).tolist():
        pair = pairs.row(i)
        la, lb = pair.leaf_a, pair.leaf_b
        entry_name = pair.entry_name
        cls = pair.match_class
        out = compare_row(pair, unit_a, unit_b, mode, rules)
        if cls == "matched":
            if "parameters_grad" in entry_name:
                out = judge_zero_gradient(pair, out)
        elif out.rule.verdict == "warning" and cls == "not_captured" and (la is None) != (lb is None):
            out = _declared_unobserved(pair, out, gaps_a, gaps_b)
        if out.rule.verdict == "fail":
            out = _judge_failing(pair, out, why(i), noise, rules)
        _record_outcome(builder, i, out)
    if len(columnar):
        _compare_columnar(builder, pairs, columnar, rules, why, noise, unit_a, unit_b, mode)
    del pairs, columnar  # every row is in the builder now: its pairs are not held from here on
    paired = paired_cells(builder.table)  # B's cell calls that are calls of A (across frameworks)
    construct = merged_construct(paired, unit_a.construct, unit_b.construct)
    entry_names = builder.table.entry_names()
    chains, truncated = parent_chains(entry_names, construct)
    jumps = localise(builder, chains, kernels_differ(unit_a, unit_b), rules.default, rules.localisation,
                     left_out=which >= 0)
    rows = builder.freeze()
    summary = unit_summary(rows)
    cells, chains, _ = compute_cell_rollups(rows, construct, chains, paired)
    if truncated:
        notes = (*notes, "construct.json nests cells more than 1,000 deep: the cell roll-up stops there")
    return UnitComparison(
        cells=cells,
        parent_chains=chains,
        unit_a=UnitRef.of("a", unit_a),
        unit_b=UnitRef.of("b", unit_b),
        rows=rows,
        **summary._asdict(),
        notes=notes,
        jumps=jumps,
    )


def _set_names_and_sides(builder: RowTableBuilder, pairs: RowPairs, unit_a: RankDump, unit_b: RankDump) -> None:
    """The name, parent cell, stack, class and side columns of every row of ``pairs`` (at least one), column-wise.

    Consecutive rows of one entry pair (the same names, on the same sides) share its parent cell (construct.json,
    A's, else B's) and call stacks (stack.json: A's, else B's; and B's own).  Strings are interned in the order a
    row-by-row pass would intern them (per row: entry, B's entry, parent cell, argument path, B's argument path,
    mapping), so the string table's codes do not depend on how the columns are filled."""
    n = len(pairs)
    names = pairs.names
    entry, entry_b, in_a, in_b = pairs.entry, pairs.entry_b, pairs.in_a, pairs.in_b
    # where a run of rows of one entry pair starts
    change = ((entry[1:] != entry[:-1]) | (entry_b[1:] != entry_b[:-1]) | (in_a[1:] != in_a[:-1])
              | (in_b[1:] != in_b[:-1]))
    starts = [0, *(np.flatnonzero(change) + 1).tolist()]
    construct_a, construct_b = unit_a.construct.get, unit_b.construct.get
    stack_a, stack_b = unit_a.stack.get, unit_b.stack.get
    runs_a, runs_b = in_a[starts].tolist(), in_b[starts].tolist()
    names_a = list(map(names.__getitem__, entry[starts].tolist()))
    names_b = [nm if c < 0 else names[c] for c, nm in zip(entry_b[starts].tolist(), names_a, strict=True)]
    parent_of = [construct_a(nm) if there else None for nm, there in zip(names_a, runs_a, strict=True)]
    for j in [j for j, (p, there) in enumerate(zip(parent_of, runs_b, strict=True)) if p is None and there]:
        parent_of[j] = construct_b(names_b[j])
    parent_names = Interned[str]()  # coded after pairs.names: code len(names) + k
    parents = [-1 if p is None else len(names) + parent_names.code(p) for p in parent_of]
    own_as = [stack_a(nm, ()) if there else () for nm, there in zip(names_a, runs_a, strict=True)]
    own_bs = [stack_b(nm, ()) if there else () for nm, there in zip(names_b, runs_b, strict=True)]
    # each stack object coded once (equal stacks are one object in a unit), in row order: A's (else B's), B's
    stack_code = builder.stack_code
    coded: dict[int, int] = {}
    stacks: list[int] = []
    stacks_b: list[int] = []
    for own_a, own_b in zip(own_as, own_bs, strict=True):
        for stack, out in ((own_a or own_b, stacks), (own_b, stacks_b)):
            c = coded.get(id(stack))
            if c is None:
                c = coded[id(stack)] = stack_code(tuple(stack))
            out.append(c)
    lengths = np.diff(np.asarray([*starts, n], dtype=np.int64))
    named = {"entry": entry, "entry_b": entry_b, "parent_cell": np.repeat(np.asarray(parents, np.int32), lengths),
             "arg_path": pairs.arg_path, "arg_path_b": pairs.arg_path_b, "mapped_by": pairs.mapped_by}
    # each text interned at its first place in row order (row by row, the columns above in that order)
    places, codes_met = [], []
    for k, codes in enumerate(named.values()):
        distinct, first = np.unique(codes, return_index=True)
        places.append(first * len(named) + k)
        codes_met.append(distinct)
    in_row_order = np.concatenate(codes_met)[np.argsort(np.concatenate(places), kind="stable")]
    texts = [*names, *parent_names.items]
    lookup = [-1] * (len(texts) + 1)  # code -1 (None) reads the last item
    code = builder.code
    for c in in_row_order.tolist():
        if c >= 0 and lookup[c] < 0:
            lookup[c] = code(texts[c])
    table = np.asarray(lookup, dtype=np.int32)
    cols = builder.cols
    for column, codes in named.items():
        cols[column][:] = table[codes]
    cols["stack"][:] = np.repeat(np.asarray(stacks, dtype=np.int32), lengths)
    cols["stack_b"][:] = np.repeat(np.asarray(stacks_b, dtype=np.int32), lengths)
    cols["match_class"][:] = pairs.match_class
    for side in (0, 1):
        kinds = pairs.side_kinds(side)
        builder.set_side_columns(side, kinds, pairs.objects[side],
                                 pairs.side_groups(side, np.flatnonzero(kinds == TENSOR)))


def _compare_columnar(
    builder: RowTableBuilder, pairs: RowPairs, index: np.ndarray, rules: Rules,
    why: Callable[[int], str | None], noise: NoiseMap | None, unit_a: RankDump, unit_b: RankDump, mode: Mode,
) -> None:
    """Statistics-mode rows of two tensors (``index``), compared as columns (:func:`compare_statistics_columns`) where
    both sides hold elements and eight finite statistics; the other rows go through :func:`compare_row`, as do the
    verdicts and reasons of rows the columns do not pass."""
    cols = builder.cols
    table = builder.table
    idx = np.asarray(index, dtype=np.int64)
    stats = cols["side_stats"][idx]  # [m, 2, 4]
    numel_of_shape = [math.prod(shape) for shape in table.shapes]
    numel_list = [numel_of_shape[c] for c in cols["side_shape"][idx, 0].tolist()]
    sized = np.array([0 < k < _LARGEST_NUMEL for k in numel_list], dtype=bool)
    usable = sized & cols["side_stats_defined"][idx].all(axis=(1, 2)) & np.isfinite(stats).all(axis=(1, 2))
    for k in idx[~usable].tolist():
        pair = pairs.row(k)
        _record_outcome(builder, k, _judge_failing(pair, compare_row(pair, unit_a, unit_b, mode, rules), why(k),
                                                   noise, rules))
    idx = idx[usable]
    if not len(idx):
        return
    stats = stats[usable]
    numel = np.asarray(numel_list, dtype=np.int64)[usable] if len(numel_list) else np.zeros(0, np.int64)
    m = len(idx)
    # A row's thresholds depend on its two dtypes, and on its name only when the rules have overrides: they are
    # worked out once per distinct key (the dtype codes, or the row itself).
    dtypes = cols["side_dtype"][idx].astype(np.int64)
    key = np.arange(m) if rules.overrides else (dtypes[:, 0] << 32) | (dtypes[:, 1] & 0xFFFFFFFF)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    found = []
    for k in idx[first].tolist():
        pair = pairs.row(k)
        found.append(thresholds_and_floor(pair, pair.leaf_a, pair.leaf_b, rules))  # type: ignore[arg-type]
    floor = np.array([f for _, f in found], dtype=np.float64)[inverse]
    fail_above = np.array([t.max_abs_err_fail_above for t, _ in found], dtype=np.float64)[inverse]
    suspect = np.array([t.max_abs_err_suspect_above for t, _ in found], dtype=np.float64)[inverse]
    warning_ratio = np.array([t.stat_warning_ratio for t, _ in found], dtype=np.float64)[inverse]
    got = compare_statistics_columns(stats[:, 0], stats[:, 1], numel, floor, fail_above, suspect, warning_ratio)
    metrics = cols["metrics"]
    state = cols["metric_state"]
    metrics[idx, STAT_DIFF_COLUMN:] = got.metrics
    state[idx, STAT_DIFF_COLUMN:] = METRIC_VALUE
    cols["compared_by"][idx] = COMPARED_BY_CODE["statistics"]
    cols["differs"][idx] = got.differs
    cols["verdict"][idx] = PASS
    notes, first_note, note_of = np.unique(pairs.notes[idx], return_index=True, return_inverse=True)
    codes = np.empty(len(notes), np.int32)
    for k in np.argsort(first_note).tolist():  # interned in row order
        codes[k] = builder.tuple_code(pairs.note_texts[notes[k]])
    cols["notes"][idx] = codes[note_of.reshape(-1)]
    for j in np.flatnonzero(~got.passing).tolist():
        k = int(idx[j])
        pair = pairs.row(k)
        t, f = found[inverse[j]]
        named = tuple(zip(_STAT_COLUMN_NAMES, got.metrics[j].tolist(), strict=True))
        la, lb = pair.leaf_a, pair.leaf_b
        assert isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf)  # can_compare_as_columns
        out = statistics_outcome_of_failing(pair, la, lb, named, bool(got.differs[j]), t, f)
        if out.rule.verdict == "fail":
            out = _judge_failing(pair, out, why(k), noise, rules)
        _record_outcome(builder, k, out)


#: Tensors with more elements go through :func:`compare_row` (their count does not fit the int64 column).
_LARGEST_NUMEL = 2**62
