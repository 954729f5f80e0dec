"""compare(A, B) → Comparison: pair units, match rows, compute metrics, apply rules.

Roles (msprobe's convention): **A is the target** ("NPU" in msprobe's columns) and **B the
baseline** ("Bench", golden); relative errors divide by B.

The comparison does no I/O of its own: the only reads are tensor files, through
:meth:`msprobe_cmp.dump.reader.RankDump.load_tensor` of the dumps passed in.  It prints nothing
and returns a frozen :class:`Comparison` that reports render as they are.

Units (one ``step<N>/rank<R>`` directory each) are paired by their (step, rank) ids, never by
directory order.  When each side holds exactly one unit the two are paired whatever their ids
(a note says so when the ids differ); a non-distributed ``rank`` directory (rank None) pairs with
``rank0`` when that is unambiguous, and units without a step directory pair by rank with the other side's units
of its one step.  Units left without a partner are listed in :attr:`Comparison.unpaired`.

Mode (docs/design.md §2, docs/design.md §3): ``tensor`` when every unit of both sides was dumped with
``task: tensor``; otherwise ``md5`` when both sides carry checksums; otherwise ``statistics``.
Within tensor mode a row whose tensor files are missing or unreadable on either side falls back to
its statistics (the row's reasons say why); within md5 mode a row whose checksum is missing or blank on either side
does the same.  The comparison adds no note counting them: the reports and the CLI count them
(``msprobe_cmp.reports.common.judged_by_statistics``).

This module pairs the units, picks the mode and sums the units up (verdict, matched share, notes); the work
below it is split, each module importing only those listed after it:
:mod:`~msprobe_cmp.comparator.parallel` (unit pairs compared in worker processes or on Dask),
:mod:`~msprobe_cmp.comparator.units` (one unit pair: :func:`compare_units`),
:mod:`~msprobe_cmp.comparator.outcomes` (one row's metrics and verdict),
:mod:`~msprobe_cmp.comparator.rollup` (the per-cell roll-up) and
:mod:`~msprobe_cmp.comparator.result` (the records and metric names).  Their public names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from msprobe_cmp.comparator.fused import fused_records
from msprobe_cmp.comparator.mapping import (
    INFERRED_LABEL,
    NameMapping,
    Namespace,
    is_structural_note,
)
from msprobe_cmp.comparator.matching import MATCH_CLASSES, MatchClass
from msprobe_cmp.comparator.metrics import STAT_NAMES
from msprobe_cmp.comparator.outcomes import (
    _compare_statistics,
    _relative_floor_of,
)
from msprobe_cmp.comparator.parallel import UnitTask, _compare_in_parallel, _registered_loaders, compare_unit_task
from msprobe_cmp.comparator.result import (
    LOWER_BOUND_NAME,
    STAT_METRIC_NAMES,
    TENSOR_METRIC_NAMES,
    VERDICTS,
    CellRollup,
    ComparedBy,
    Comparison,
    ComparisonRow,
    Jump,
    LikelyOrigin,
    Mode,
    OverallVerdict,
    RowRef,
    SideSummary,
    UnitComparison,
    UnitRef,
    _listed,
)
from msprobe_cmp.comparator.rollup import compute_cell_rollups
from msprobe_cmp.comparator.rowtable import ABSENT, RowTable
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.comparator.units import UNDEFINED_OUTPUTS, NoiseMap, UnitFacts, compare_units, unit_namespaces
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import Dump, RankDump, load_rank_dump, paused_gc
from msprobe_cmp.dump.schema import NOT_CAPTURED_STEP
from msprobe_cmp.errors import ConfigError

ModeOption = Literal["auto", "tensor", "statistics", "md5"]


@dataclass(frozen=True)
class CompareOptions:
    """Options of :func:`compare`.

    Attributes:
        rules: the thresholds in force (defaults: docs/design.md §2).
        mode: ``"auto"`` (module docstring), or force ``"tensor"``, ``"statistics"`` or ``"md5"``
            (rows lacking what the forced mode needs fall back to statistics; their reasons say why).
        noise: a rerun of B (same code, same data): its differences from B measure the run-to-run
            noise, and a row of A that fails the rules but stays within ``rules.noise_factor`` times
            that noise is a warning, not a failure ("noise-floor mode").
        progress: called as ``progress(done, total, label)`` before each (step, rank) unit is compared
            and once at the end (``done == total``); the comparator itself never prints.
        mapping: the user's cell / API mapping files; used, with the built-in tables, when the two
            sides are different frameworks (MindSpore against PyTorch or mindtorch; see
            :mod:`msprobe_cmp.comparator.mapping.canonical`).
        jobs: compare this many (step, rank) unit pairs at once, each in a worker process (``spawn``) that
            reads its own pair again from the unit directories and returns its :class:`UnitComparison`; the
            result is the serial one, in the same order.  1 (the default) compares in this process.  Only
            for dumps loaded from disk (a unit built in memory is not re-read).
        scheduler: the address of a Dask distributed scheduler (``tcp://host:8786``; needs the ``dask``
            extra): the unit pairs are compared on its workers instead (same function, same result),
            which must see the dump directories under the same paths.  Takes precedence over ``jobs``.
        spool: an existing directory of this machine where, when units are compared by workers (``jobs``,
            ``scheduler`` or scanned dumps: :func:`~msprobe_cmp.dump.reader.scan_dump`), each unit's rows are kept
            as it comes back (:mod:`msprobe_cmp.comparator.spool`; in a new subdirectory per comparison), so that this
            process holds a few units' rows at a time; the caller removes it once done with the comparison (its units
            read their rows from there).
            None (the default): the rows stay in memory.

    Raises:
        msprobe_cmp.errors.ConfigError: an unknown mode.
    """

    rules: Rules = field(default_factory=Rules)
    mode: ModeOption = "auto"
    noise: Dump | RankDump | None = None
    progress: Callable[[int, int, str], None] | None = field(default=None, compare=False)
    mapping: NameMapping = field(default_factory=NameMapping)
    jobs: int = field(default=1, compare=False)
    scheduler: str | None = field(default=None, compare=False)
    spool: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "tensor", "statistics", "md5"):
            raise ConfigError(f"mode: must be auto, tensor, statistics or md5, got {self.mode!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ConfigError(f"jobs: must be a whole number of at least 1, got {self.jobs!r}")


# --------------------------------------------------------------------------------------------------
# units and mode


def _gaps_text(rank_dump: RankDump) -> str:
    """A unit's ``not_captured`` items, grouped by reason: ``"<what>, <what> and K more: <reason>; ..."`` (at most 3
    names per reason and 3 reasons); items without a name are listed as written."""
    missing = rank_dump.meta.not_captured
    items = rank_dump.meta.not_captured_items
    if len(items) != len(missing):
        return _listed(missing, 5, "; ")
    by_reason: dict[str, list[str]] = {}
    for what, reason in items.items():
        by_reason.setdefault(reason, []).append(what)
    parts = [f"{_listed(whats, 3)}: {reason}" if reason else _listed(whats, 3) for reason, whats in by_reason.items()]
    return _listed(parts, 3, "; ")


def _units_of(x: Dump | RankDump) -> tuple[RankDump, ...]:
    return (x,) if isinstance(x, RankDump) else tuple(x.units)


def _path_of(x: Dump | RankDump) -> str:
    return str(x.directory) if isinstance(x, RankDump) else str(x.root)


def _unit_sort_key(u: RankDump) -> tuple[int, int]:
    return (-1 if u.step is None else u.step, -1 if u.rank is None else u.rank)


def pair_units(
    units_a: tuple[RankDump, ...], units_b: tuple[RankDump, ...]
) -> tuple[list[tuple[RankDump, RankDump]], list[RankDump], list[RankDump], list[str]]:
    """Pair units by (step, rank) id (module docstring); returns pairs, A leftovers, B leftovers, notes."""
    notes: list[str] = []
    if len(units_a) == 1 and len(units_b) == 1:
        only_a, only_b = units_a[0], units_b[0]
        if (only_a.step, only_a.rank) != (only_b.step, only_b.rank):
            notes.append(f"each side holds one unit: paired A {only_a.label} with B {only_b.label}")
        return [(only_a, only_b)], [], [], notes
    by_id_b: dict[tuple[int | None, int | None], RankDump] = {}
    dup_b: list[RankDump] = []
    for u in sorted(units_b, key=lambda u: (_unit_sort_key(u), str(u.directory))):
        if (u.step, u.rank) in by_id_b:
            dup_b.append(u)  # e.g. several msprobe 26.x proc<pid> directories in one step: ambiguous
        else:
            by_id_b[(u.step, u.rank)] = u
    seen_a: set[tuple[int | None, int | None]] = set()
    dup_a: list[RankDump] = []
    pairs: list[tuple[RankDump, RankDump]] = []
    left_a: list[RankDump] = []
    for ua in sorted(units_a, key=lambda u: (_unit_sort_key(u), str(u.directory))):
        if (ua.step, ua.rank) in seen_a:
            dup_a.append(ua)
            continue
        seen_a.add((ua.step, ua.rank))
        ub: RankDump | None = by_id_b.pop((ua.step, ua.rank)) if (ua.step, ua.rank) in by_id_b else None
        if ub is None:
            left_a.append(ua)
        else:
            pairs.append((ua, ub))
    # Second pass: a non-distributed "rank" directory (rank None) against "rank0" of the same step.
    still_a: list[RankDump] = []
    for ua in left_a:
        partner_id = (ua.step, 0) if ua.rank is None else (ua.step, None) if ua.rank == 0 else None
        ub2: RankDump | None = by_id_b.pop(partner_id) if partner_id is not None and partner_id in by_id_b else None
        if ub2 is None:
            still_a.append(ua)
        else:
            pairs.append((ua, ub2))
            notes.append(f"paired A {ua.label} with B {ub2.label} (non-distributed rank taken as rank 0)")
    # Third pass: units without a step directory (rank directories copied out of their step) against the other
    # side's units of its one step, by rank; only when that side holds a single step (otherwise ambiguous).
    still_a = _pair_stepless(still_a, by_id_b, pairs, notes)
    pairs.sort(key=lambda p: _unit_sort_key(p[0]))
    left_b = sorted([*by_id_b.values(), *dup_b], key=_unit_sort_key)
    for side, dups in (("A", dup_a), ("B", dup_b)):
        if dups:
            names = ", ".join(str(u.directory) for u in dups)
            notes.append(f"{side} holds several units with the same step and rank; not compared: {names}")
    return pairs, [*still_a, *dup_a], left_b, notes


def _pair_stepless(
    left_a: list[RankDump], by_id_b: dict[tuple[int | None, int | None], RankDump],
    pairs: list[tuple[RankDump, RankDump]], notes: list[str],
) -> list[RankDump]:
    """Pair A's and B's leftover units by rank when one side's have no step (step None) and the other side's leftovers
    all belong to one step; appends to ``pairs`` and ``notes``, removes B's paired units from ``by_id_b`` and returns
    A's units still unpaired."""
    steps_a = {u.step for u in left_a}
    steps_b = {step for step, _ in by_id_b}
    if not left_a or not by_id_b or len(steps_a) != 1 or len(steps_b) != 1 or (None in steps_a) == (None in steps_b):
        return left_a
    step_b = next(iter(steps_b))
    still: list[RankDump] = []
    paired: list[str] = []
    for ua in left_a:
        ub = by_id_b.pop((step_b, ua.rank), None)
        if ub is None:
            still.append(ua)
        else:
            pairs.append((ua, ub))
            paired.append(f"A {ua.label} with B {ub.label}")
    if paired:
        notes.append(f"one side's units have no step directory: paired by rank ({', '.join(paired)})")
    return still


class _Facts:
    """The :class:`~msprobe_cmp.comparator.units.UnitFacts` of the units of one comparison, by unit (identity):
    worked out here from a loaded unit, given by the worker that compared a unit, or, for a scanned unit
    (:func:`~msprobe_cmp.dump.reader.scan_dump`) no worker read, from the unit loaded here alone and dropped."""

    def __init__(self, mapping: NameMapping) -> None:
        self.mapping = mapping
        self.known: dict[int, tuple[RankDump, UnitFacts]] = {}  # id(unit) → (the unit, kept alive; its facts)

    def put(self, unit: RankDump, facts: UnitFacts) -> None:
        """Record ``facts`` as ``unit``'s."""
        self.known[id(unit)] = (unit, facts)

    def __call__(self, unit: RankDump) -> UnitFacts:
        """``unit``'s facts.

        Raises:
            DumpFormatError: a scanned unit's file became unreadable since it was scanned.
        """
        got = self.known.get(id(unit))
        if got is None:
            loaded = unit if not unit.scanned else load_rank_dump(
                unit.directory, unit.step, unit.rank, file=unit.directory / unit.json_name)
            got = self.known[id(unit)] = (unit, UnitFacts.of(loaded, self.mapping))
        return got[1]

    def has_md5(self, units: Iterable[RankDump]) -> bool:
        """True when some tensor leaf of ``units`` carries a checksum (a scanned unit whose bytes hold no ``"md5"``
        key is not loaded to find out)."""
        return any(self(u).has_md5 for u in units if u.mentions_md5 is not False)

    def namespaces(self, unit_a: RankDump, unit_b: RankDump) -> tuple[Namespace | None, Namespace | None]:
        """:func:`~msprobe_cmp.comparator.units.unit_namespaces` of two units, from their facts."""
        return self(unit_a).namespace, self(unit_b).namespace


def detect_mode(units_a: tuple[RankDump, ...], units_b: tuple[RankDump, ...], facts: _Facts | None = None) -> Mode:
    """The comparison mode of two sides' units (module docstring); ``facts`` (made here when not given) are the
    comparison's unit facts."""
    if units_a and units_b and all(u.meta.task == "tensor" for u in (*units_a, *units_b)):
        return "tensor"
    facts = facts or _Facts(NameMapping())
    if facts.has_md5(units_a) and facts.has_md5(units_b):
        return "md5"
    return "statistics"


def _noise_of(unit: UnitComparison) -> dict[str, tuple[float | None, float | None, bool]]:
    """Per row name of a rerun-of-B comparison, ``(Cosine, MaxAbsErr or its statistics lower bound, whether it is
    that bound)`` of its matched, compared rows (a :data:`~msprobe_cmp.comparator.units.NoiseMap`)."""
    rows = unit.rows
    index = np.flatnonzero(rows.class_mask("matched") & ~rows.verdict_mask("skip")).tolist()
    cos, cos_ok = rows.metric_column("Cosine")
    mae, mae_ok = rows.metric_column("MaxAbsErr")
    bound, bound_ok = rows.metric_column(LOWER_BOUND_NAME)
    entries, paths = rows.names("entry"), rows.names("arg_path")
    out: dict[str, tuple[float | None, float | None, bool]] = {}
    for i in index:
        cosine = float(cos[i]) if cos_ok[i] else None
        if mae_ok[i]:
            out[f"{entries[i]}.{paths[i]}"] = (cosine, float(mae[i]), False)
        else:
            out[f"{entries[i]}.{paths[i]}"] = (cosine, float(bound[i]) if bound_ok[i] else None, True)
    return out


def _stepless_hint(left_a: list[RankDump], left_b: list[RankDump]) -> str | None:
    """What to give instead when one side's unpaired units have no step directory (rank directories copied out of
    their step) and the other side's unpaired units belong to more than one step: such units cannot be paired by
    step, so nothing is compared.  None otherwise: with a single step they were paired by rank where the ranks
    agree (:func:`_pair_stepless`), and naming that step's directory would not help those left."""
    for side, mine, other, other_side in (("A", left_a, left_b, "B"), ("B", left_b, left_a, "A")):
        steps = sorted({u.step for u in other if u.step is not None})
        if mine and all(u.step is None for u in mine) and len(steps) > 1:
            shown = _listed([str(x) for x in steps], 5)
            example = next(u for u in other if u.step == steps[0]).directory.parent
            return (f"{side}'s unit(s) have no step directory while {other_side} has step(s) {shown}: give one of "
                    f"{other_side}'s step directories (e.g. {example}) to compare against them")
    return None


def _first_ref(units: tuple[UnitComparison, ...], attr: str) -> RowRef | None:
    for i, u in enumerate(units):
        index: int | None = getattr(u, attr)
        if index is not None:
            row = u.rows[index]
            return RowRef(i, index, row.name, u.unit_a.label, row.parent_cell, u.parent_chains.get(row.entry_name, ()))
    return None


def unit_comparison(comparison: Comparison, unit: int) -> Comparison:
    """Unit ``unit`` of ``comparison`` (index into ``comparison.units``) as a comparison of its own, what its page
    shows: the unit's rows, counts, verdict, first divergent / failing row and likely origin
    (:func:`likely_origin` of the unit); the comparison's inputs, mode and
    thresholds; no unpaired units and no notes (report.html lists them; the unit's own notes are in its row of the
    pairing table).

    Raises:
        IndexError: no such unit.
    """
    units = (comparison.units[unit],)
    u = units[0]
    return replace(comparison, units=units, unpaired=(), counts=u.counts, verdict_counts=u.verdict_counts,
                   first_divergent=_first_ref(units, "first_divergent"),
                   first_failing=_first_ref(units, "first_failing"), verdict=u.verdict, notes=(),
                   matched_share=None, likely_origin=likely_origin(units))


def _rows_of(rows: RowTable, entries: set[str]) -> list[int]:
    """Indices of the rows whose (A) entry is one of ``entries``."""
    codes = [k for k, s in enumerate(rows.strings) if s in entries]
    return np.flatnonzero(np.isin(rows.entry, codes)).tolist() if codes else []


def _differing_arguments(unit: UnitComparison, entries: set[str]) -> tuple[str, ...]:
    """``"<row name>: A <value>, B <value>"`` for each non-tensor argument of ``entries`` whose two sides differ."""
    rows = unit.rows
    return tuple(text for i in _rows_of(rows, entries) if (text := rows[i].value_difference) is not None)


def _structural_mask(rows: RowTable) -> np.ndarray:
    """bool [n]: the rows whose notes say they have no counterpart by construction (framework plumbing:
    :func:`~msprobe_cmp.comparator.mapping.is_structural_note`)."""
    plumbing = [k for k, texts in enumerate(rows.tuples) if any(is_structural_note(n) for n in texts)]
    return np.isin(rows.notes, plumbing) if plumbing else np.zeros(len(rows), dtype=bool)


def _batch_counter(entry: str, chain: tuple[str, ...], dtype: str | None) -> bool:
    """True for PyTorch BatchNorm's batch counter, ``num_batches_tracked.add_(1)``: a ``Tensor.add_`` of an integer
    tensor called directly inside a ``BatchNorm*`` module.  MindSpore's BatchNorm keeps no such counter, so across
    frameworks that call has no partner by construction (docs/mapping.md, "BatchNorm's running statistics")."""
    parsed = parse_name(entry)
    if parsed.prefix != "Tensor" or parsed.op != "add_" or not chain or dtype is None:
        return False
    module = parse_name(chain[0])
    return module.kind == "cell" and module.op.rsplit(".", 1)[-1].startswith("BatchNorm") and "int" in dtype.lower()


def _unpaired_inside(unit: UnitComparison, cell: str | None) -> tuple[str, ...]:
    """``"<entry> (target only)"`` / ``"<entry> (baseline only)"`` for each entry inside ``cell`` (construct.json)
    none of whose rows found a partner (an entry paired through a mapping keeps one-sided intermediates: it is
    paired): cells first, then APIs, each in row order.  PyTorch BatchNorm's batch counter is left out
    (:func:`_batch_counter`): it has no partner in MindSpore by construction."""
    if cell is None:
        return ()
    rows = unit.rows
    entries = rows.names("entry")
    kinds = rows.side_kind
    both = ((kinds[:, 0] != ABSENT) & (kinds[:, 1] != ABSENT)).tolist()
    names_b = rows.names("entry_b")
    # an entry of either side with a row paired (B's under its own name when a mapping paired it: a PyTorch module
    # paired with its MindSpore cell is no unpaired call inside that cell)
    paired = {name for i, ok in enumerate(both) if ok for name in (entries[i], names_b[i]) if name is not None}
    only_a = rows.class_mask("only_in_a")
    one_sided = np.flatnonzero(only_a | rows.class_mask("only_in_b")).tolist()
    chains = unit.parent_chains
    # framework plumbing (MindSpore's Shape, a composite's intermediates) has no partner by construction, nor has
    # PyTorch BatchNorm's batch counter (any row of the entry tells)
    structural = {entries[i] for i in np.flatnonzero(_structural_mask(rows)).tolist()}
    structural.update(entries[i] for i in one_sided if _batch_counter(
        entries[i], chains.get(entries[i], ()), rows.text(int(rows.side_dtype[i, 0 if only_a[i] else 1]))))
    cells: dict[str, None] = {}
    apis: dict[str, None] = {}
    for i in one_sided:
        entry = entries[i]
        if entry not in paired and entry not in structural and cell in chains.get(entry, ()):
            kind = cells if parse_name(entry).kind == "cell" else apis
            kind[f"{entry} ({'target' if only_a[i] else 'baseline'} only)"] = None
    return (*cells, *apis)


def likely_origin(units: tuple[UnitComparison, ...]) -> LikelyOrigin | None:
    """Where the difference most likely enters: the first jump of a unit (in execution order, its error's cause
    comes first), with its cell and the arguments that differ at its call and its cell
    (:mod:`msprobe_cmp.comparator.localise`); None when no row's error jumps.

    Across units (ranks run at once, so unit order says nothing of cause) the unit chosen is the first, in unit
    order, of those whose verdict is worst: a failing unit before the others, then the unit whose first jump's row
    has the worst verdict (fail, warning, pass): a rank that fails is not hidden behind a rank with a harmless
    drift that comes first."""
    candidates = [(u.verdict != "fail", int(u.rows.verdict[u.jumps[0].row]), i)
                  for i, u in enumerate(units) if u.jumps]
    if not candidates:
        return None
    i = min(candidates)[2]
    u = units[i]
    j = u.jumps[0]
    row = u.rows[j.row]
    parents = u.parent_chains.get(row.entry_name, ())
    ref = RowRef(i, j.row, row.name, u.unit_a.label, row.parent_cell, parents)
    is_cell = parse_name(row.entry_name).kind == "cell"
    cell = row.entry_name if is_cell else (parents[0] if parents else None)
    arguments = _differing_arguments(u, {row.entry_name} | ({cell} if cell else set()))
    return LikelyOrigin(ref, j, cell, arguments, _unpaired_inside(u, cell))


def _mapping_file_notes(
    mapping: NameMapping, paired_a: tuple[RankDump, ...], paired_b: tuple[RankDump, ...],
    units: Iterable[UnitComparison], facts: _Facts,
) -> list[str]:
    """Across frameworks: user mapping keys that match no MindSpore entry (a typo is otherwise silent), and a
    hint toward ``--cell-mapping`` when cells of both sides found no partner."""
    ms_units: list[UnitFacts] = []
    for x, y in zip(paired_a, paired_b, strict=True):
        namespaces = facts.namespaces(x, y)
        if set(namespaces) == {"mindspore", "pytorch"}:  # a cross-framework pair: take its MindSpore side
            ms_units.append(facts(x if namespaces[0] == "mindspore" else y))
    if not ms_units:
        return []
    notes = []
    # a key is unused when no MindSpore unit's entry matches it: unused by every unit, in the files' order
    cells = [k for k in ms_units[0].unused_cells if all(k in f.unused_cells for f in ms_units[1:])]
    apis = [k for k in ms_units[0].unused_apis if all(k in f.unused_apis for f in ms_units[1:])]
    for keys, what, source in ((cells, "cell", mapping.cell_source), (apis, "API", mapping.api_source)):
        if keys:
            shown = _listed(keys, 10)
            count = f"{len(keys)} entr{'y' if len(keys) == 1 else 'ies'}"
            notes.append(f"warning: user {what} mapping {source or ''}: {count} match no MindSpore {what} of the "
                         f"dump (misspelt?): {shown}")
    one_sided: dict[str, set[str]] = {"A": set(), "B": set()}
    for u in units:
        sides: tuple[tuple[str, MatchClass], ...] = (("A", "only_in_a"), ("B", "only_in_b"))
        for side, cls in sides:
            for own_a, own_b in u.rows.entry_pairs(cls):
                name_b = own_b or own_a
                if parse_name(name_b).kind == "cell":
                    one_sided[side].add(own_a if side == "A" else name_b)
    if one_sided["A"] and one_sided["B"]:
        notes.append(
            f"{len(one_sided['A'])} cell call(s) of A and {len(one_sided['B'])} of B found no partner: if they are "
            "the same layers under other names or classes, pair them with a --cell-mapping file (docs/mapping.md)"
        )
    return notes


def _input_notes(
    units_a: tuple[RankDump, ...],
    units_b: tuple[RankDump, ...],
    paired_a: tuple[RankDump, ...],
    paired_b: tuple[RankDump, ...],
    mode: Mode,
    facts: _Facts,
    mapping_sources: str = "built-in tables",
) -> tuple[list[str], str | None]:
    """What the reader of a comparison must know about its inputs: what the recorder could not
    capture, tasks or frameworks that differ, empty units; and, separately, a world-size mismatch
    (said first)."""
    notes: list[str] = []
    for side, side_units in (("A", units_a), ("B", units_b)):
        # Units whose recorder declared the same gaps (every step of a run, as a rule) share one note.
        grouped: dict[tuple[int, str], list[str]] = {}
        for rank_dump in side_units:
            missing = rank_dump.meta.not_captured
            if missing:
                key = (len(missing), _gaps_text(rank_dump))
                grouped.setdefault(key, []).append(rank_dump.label)
        for (count, text), labels in grouped.items():
            notes.append(f"{side} {_listed(labels, 3)}: the recorder could not capture {count} thing(s): {text}")
    tasks_a = sorted({u.meta.task for u in paired_a})
    tasks_b = sorted({u.meta.task for u in paired_b})
    if tasks_a != tasks_b:
        notes.append(
            f"A was recorded with task {'/'.join(tasks_a) or '-'}, B with {'/'.join(tasks_b) or '-'}: "
            f"compared in {mode} mode, on what both sides have"
        )
    for side, side_units in (("A", units_a), ("B", units_b)):
        empty = [u.label for u in side_units if not facts(u).entries]
        if empty:
            notes.append(f"warning: {side} has {len(empty)} empty unit(s) (no entries): {', '.join(empty)}")
    for side, side_units in (("A", paired_a), ("B", paired_b)):
        contradictions = {c for u in side_units if (c := facts(u).contradiction)}
        notes.extend(f"{side}: {c}" for c in sorted(contradictions))
    frameworks_a = sorted({u.meta.framework for u in paired_a})
    frameworks_b = sorted({u.meta.framework for u in paired_b})
    namespaces = [facts.namespaces(x, y) for x, y in zip(paired_a, paired_b, strict=True)]
    crossed = any(None not in ns and ns[0] != ns[1] for ns in namespaces)
    if crossed:
        notes.append(
            f"A was recorded with {'/'.join(frameworks_a) or '-'}, B with {'/'.join(frameworks_b) or '-'}: entries "
            f"were paired through the MindSpore → PyTorch name mapping ({mapping_sources})"
        )
    elif frameworks_a != frameworks_b:
        notes.append(
            f"A was recorded with {'/'.join(frameworks_a) or '-'}, B with {'/'.join(frameworks_b) or '-'}: "
            "the same name space, entries matched by name"
        )

    def world_size(units: tuple[RankDump, ...]) -> int:
        return max((sum(1 for u in units if u.step == step) for step in {u.step for u in units}), default=0)

    world_a, world_b = world_size(units_a), world_size(units_b)
    world_note = None
    if world_a and world_b and world_a != world_b:
        world_note = f"world sizes differ: A has {world_a} rank(s) per step, B has {world_b}"
    return notes, world_note


def _steps_text(steps: list[int | None]) -> str:
    """``"step 0, 2, 5 and 3 more"``: steps in order, a step-less unit (None) as ``-`` first."""
    shown = sorted(-1 if s is None else s for s in steps)
    return "step " + _listed(["-" if s < 0 else str(s) for s in shown], 6)


def _mixed_recording_notes(subject: str, units: tuple[RankDump, ...]) -> list[str]:
    """One note per rank of ``units`` whose steps were written by more than one recording (dump.json's
    :data:`~msprobe_cmp.dump.schema.RECORDING_KEY`, stamped by our recorder): a ``dump_path`` reused without being
    emptied keeps the steps the new run did not record, so some steps compared may be stale.  ``subject`` names the
    side in the notes: ``"A's"``, ``"B's"`` or ``"the rerun's"``."""
    by_rank: dict[int | None, dict[str, list[int | None]]] = {}
    for u in units:
        if u.meta.recording is not None:
            by_rank.setdefault(u.rank, {}).setdefault(u.meta.recording, []).append(u.step)
    notes = []
    for rank, recordings in sorted(by_rank.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if len(recordings) < 2:
            continue
        parts = "; ".join(f"{rec}: {_steps_text(steps)}" for rec, steps in sorted(recordings.items()))
        where = "rank" if rank is None else f"rank{rank}"
        notes.append(f"{subject} {where} holds steps of {len(recordings)} recordings ({parts}): a dump_path reused "
                     "without emptying it keeps the steps the later run did not record, so some steps may be stale")
    return notes


def _unmapped_notes(units: tuple[UnitComparison, ...], cross_framework: bool) -> list[str]:
    """Across frameworks with nothing matched: the entry names each side kept unpaired (10 each)."""
    if not cross_framework:
        return []
    if any(cls == "matched" and n for u in units for cls, n in u.counts):
        return []
    out = []
    sides: tuple[tuple[str, MatchClass], ...] = (("A", "only_in_a"), ("B", "only_in_b"))
    for side, cls in sides:
        names = list(dict.fromkeys(own_a for u in units for own_a, _ in u.rows.entry_pairs(cls)))
        if names:
            more = " (all in the report)" if len(names) > 10 else ""
            out.append(f"nothing paired across frameworks; entries only in {side}: {_listed(names, 10)}{more}")
    return out


def compare(a: Dump | RankDump, b: Dump | RankDump, options: CompareOptions | None = None) -> Comparison:
    """Compare dump ``a`` (target, msprobe's "NPU") against dump ``b`` (baseline, "Bench").

    Args:
        a: the target: a whole dump (every step/rank) or one unit.
        b: the baseline, likewise.
        options: rules and mode; defaults to :class:`CompareOptions` ().

    Returns:
        A frozen :class:`Comparison` (verdicts and every number; nothing is printed or written).

    Raises:
        msprobe_cmp.errors.MsprobeCmpError: only from the dump layer, for malformed input that the
            comparator cannot route around (unreadable tensor files are not errors: those rows fall
            back to statistics, and their reasons say why).
    """
    with paused_gc():
        return _compare(a, b, options or CompareOptions())


def _compare(a: Dump | RankDump, b: Dump | RankDump, opts: CompareOptions) -> Comparison:
    units_a, units_b = _units_of(a), _units_of(b)
    pairs, left_a, left_b, notes = pair_units(units_a, units_b)
    paired_a = tuple(p[0] for p in pairs)
    paired_b = tuple(p[1] for p in pairs)
    # with nothing paired, the mode of all units (the verdict line names it: "statistics" for two tensor dumps misled)
    facts = _Facts(opts.mapping)
    mode: Mode = detect_mode(paired_a or units_a, paired_b or units_b, facts) if opts.mode == "auto" else opts.mode
    noise_by_unit: dict[tuple[int | None, int | None], NoiseMap] = {}
    if opts.noise is not None:
        noise_opts = replace(opts, noise=None, progress=None, rules=replace(opts.rules, min_matched_share=0.0))
        noise_cmp = compare(opts.noise, b, noise_opts)
        for nu in noise_cmp.units:
            noise_by_unit[(nu.unit_b.step, nu.unit_b.rank)] = _noise_of(nu)
        without = [ub.label for _, ub in pairs if (ub.step, ub.rank) not in noise_by_unit]
        if without:
            notes.append(f"the rerun has no unit for B {', '.join(without)}: no noise tolerance there")
        notes.extend(f"rerun vs B: {n}" for n in pair_units(_units_of(opts.noise), _units_of(b))[3])
        # the rerun's own mixed recordings (B's are noted below): the noise may be measured on stale steps
        notes.extend(_mixed_recording_notes("the rerun's", _units_of(opts.noise)))
        notes.append(
            f"noise-floor mode: run-to-run noise measured on {_path_of(opts.noise)} against B; failures within "
            f"{opts.rules.noise_factor:g}x that noise are warnings"
        )
    tasks = [
        UnitTask(str(ua.directory), ua.step, ua.rank, str(ub.directory), ub.step, ub.rank, mode, opts.rules,
                 noise_by_unit.get((ub.step, ub.rank)) if opts.noise else None, opts.mapping, _registered_loaders(),
                 str(ua.directory / ua.json_name), str(ub.directory / ub.json_name))
        for ua, ub in pairs
    ]
    scanned = any(u.scanned for pair in pairs for u in pair)
    if scanned or (len(pairs) > 1 and (opts.scheduler is not None or opts.jobs > 1)):
        # a scanned unit's entries were never read here: a worker reads them (this process, with jobs 1 and no
        # scheduler)
        results = _compare_in_parallel(
            tasks, [ua.label for ua, _ in pairs], opts.jobs, opts.scheduler, opts.progress, opts.spool
        )
        for (ua, ub), (_, facts_a, facts_b) in zip(pairs, results, strict=True):
            facts.put(ua, facts_a)
            facts.put(ub, facts_b)
        units = tuple(unit for unit, _, _ in results)
    else:
        done: list[UnitComparison] = []
        for k, ((ua, ub), task) in enumerate(zip(pairs, tasks, strict=True)):
            if opts.progress is not None:
                opts.progress(k, len(pairs), ua.label)
            done.append(compare_units(ua, ub, mode, opts.rules, noise=task.noise, mapping=opts.mapping))
        if opts.progress is not None:
            opts.progress(len(pairs), len(pairs), "")
        units = tuple(done)
    unpaired = tuple([UnitRef.of("a", u) for u in left_a] + [UnitRef.of("b", u) for u in left_b])
    if unpaired:
        listed = ", ".join(f"{u.side.upper()} {u.label}" for u in unpaired)
        notes.append(f"{len(unpaired)} unit(s) found on one side only: {listed}")
        hint = _stepless_hint(left_a, left_b)
        if hint:
            notes.append(hint)
    class_totals = dict.fromkeys(MATCH_CLASSES, 0)
    verdict_totals = dict.fromkeys(VERDICTS, 0)
    for u in units:
        for cls, n in u.counts:
            class_totals[cls] += n
        for v, n in u.verdict_counts:
            verdict_totals[v] += n
    unpaired_rows = class_totals["only_in_a"] + class_totals["only_in_b"]
    if unpaired_rows and class_totals["matched"]:
        notes.append(
            f"{unpaired_rows} row(s) have no partner (only_in_a {class_totals['only_in_a']}, only_in_b "
            f"{class_totals['only_in_b']}): the verdict covers the {class_totals['matched']} matched row(s) only"
        )
    sources = ", ".join(["built-in tables"] + [f"user {what} mapping {src}" for what, src in (
        ("cell", opts.mapping.cell_source), ("API", opts.mapping.api_source)) if src])
    input_notes, world_note = _input_notes(units_a, units_b, paired_a, paired_b, mode, facts, sources)
    notes.extend(input_notes)
    notes.extend(_mixed_recording_notes("A's", units_a) + _mixed_recording_notes("B's", units_b))
    for side, side_units in (("A", units_a), ("B", units_b)):
        notes.extend(
            f"{side} {u.label}: the rank directory also holds {u.unread_json}, which was not read ({u.json_name} "
            f"was): files of two recordings; give {u.unread_json} itself to compare it"
            for u in side_units if u.unread_json is not None
        )
    # a pair of units of two name spaces (MindSpore against PyTorch): paired through the name mapping
    cross_framework = any(
        ns_a is not None and ns_b is not None and ns_a != ns_b
        for ns_a, ns_b in (facts.namespaces(x, y) for x, y in zip(paired_a, paired_b, strict=True))
    )
    notes.extend(_unmapped_notes(units, cross_framework))
    if fused_records(opts.mapping) and cross_framework:
        notes.append("the API mapping file's fused records apply within one name space (PyTorch against PyTorch or "
                     "mindtorch, MindSpore against MindSpore): not used between MindSpore and PyTorch")
    notes.extend(_mapping_file_notes(opts.mapping, paired_a, paired_b, units, facts))
    if world_note:
        notes.insert(0, world_note)
    first_divergent = _first_ref(units, "first_divergent")
    first_failing = _first_ref(units, "first_failing")
    origin = likely_origin(units)
    compared = sum(u.compared_count for u in units)
    # Rows of units found on one side only count too: a verdict on step 0 says nothing about steps 1-9.
    # Rows paired but without data (not_captured: null leaves, gaps a recorder declared) are not evidence of a
    # mispairing: the floor leaves them out.
    unpaired_leaf_rows = sum(facts(u).leaves for u in (*left_a, *left_b))
    no_data = sum(int((u.rows.class_mask("not_captured") & u.rows.verdict_mask("skip")).sum()) for u in units)
    total_rows = sum(class_totals.values()) - no_data + unpaired_leaf_rows
    share_of = "all rows"
    if cross_framework:
        # Across frameworks the baseline holds calls the target's framework never makes (PyTorch's optimizer
        # Tensor methods, autograd helpers): B's unpaired rows of paired units do not count.
        total_rows -= class_totals["only_in_b"]
        share_of = "A's rows"
        # A's rows that have no counterpart by construction (framework plumbing such as MindSpore's Primitive.Shape,
        # a Primitive's extra outputs, arguments the other API does not take: docs/mapping.md) are kept as rows but
        # do not count against the share either.

        structural: dict[str, int] = {}
        for u in units:
            rows = u.rows
            for code in rows.entry[rows.class_mask("only_in_a") & _structural_mask(rows)].tolist():
                api = parse_name(rows.strings[code]).stem
                structural[api] = structural.get(api, 0) + 1
        if structural:
            total_rows -= sum(structural.values())
            worst = sorted(structural.items(), key=lambda kv: (-kv[1], kv[0]))
            notes.append(
                f"{sum(structural.values())} row(s) of A with no counterpart in B by construction were left out of "
                f"the matched share (framework plumbing, extra outputs, arguments the other API does not take): "
                f"{_listed([f'{api} ×{n}' for api, n in worst], 5)}"
            )
        inferred = {label for u in units for label in u.rows.names("mapped_by") if label and INFERRED_LABEL in label}
        if inferred:
            notes.append(
                f"{len(inferred)} cell pair(s) inferred from classes, parameter shapes and call order (their paths or "
                "classes differ); write them with --write-mapping FILE, edit, and pass them back with --cell-mapping"
            )
    matched_share = class_totals["matched"] / total_rows if total_rows else 0.0
    incomplete = [  # paired or not: a partial recording anywhere means no verdict
        f"{side} {u.label}" for side, side_units in (("A", units_a), ("B", units_b)) for u in side_units
        if NOT_CAPTURED_STEP in u.meta.not_captured_items
    ]
    verdict: OverallVerdict
    if first_failing is not None:
        verdict = "fail"
    elif not compared:
        verdict = "nothing_compared"
    elif matched_share < opts.rules.min_matched_share:
        verdict = "too_few_matched"
        notes.append(
            f"only {matched_share:.1%} of {share_of} were matched, below the floor of "
            f"{opts.rules.min_matched_share:.1%} (min_matched_share): no verdict on the rest"
        )
    elif incomplete:
        verdict = "too_few_matched"
        notes.append(
            f"{', '.join(incomplete)}: recorded incompletely (the run stopped during the step, before stop()): "
            "no verdict on a partial recording"
        )
    else:
        verdict = "pass"
    return Comparison(
        input_a=_path_of(a),
        input_b=_path_of(b),
        input_noise=None if opts.noise is None else _path_of(opts.noise),
        mode=mode,
        rules=opts.rules,
        units=units,
        unpaired=unpaired,
        counts=tuple(class_totals.items()),
        verdict_counts=tuple(verdict_totals.items()),
        first_divergent=first_divergent,
        first_failing=first_failing,
        verdict=verdict,
        notes=tuple(notes),
        matched_share=matched_share if total_rows else None,
        matched_share_of=share_of,
        likely_origin=origin,
    )


#: Everything importable from here, defined here or re-exported from the modules the comparator is split into
#: (reports, the CLI, benchmarks and tests import these names from this module).
__all__ = [
    "LOWER_BOUND_NAME",
    "STAT_METRIC_NAMES",
    "STAT_NAMES",
    "TENSOR_METRIC_NAMES",
    "UNDEFINED_OUTPUTS",
    "VERDICTS",
    "CellRollup",
    "CompareOptions",
    "ComparedBy",
    "Jump",
    "LikelyOrigin",
    "Comparison",
    "ComparisonRow",
    "Mode",
    "ModeOption",
    "NoiseMap",
    "OverallVerdict",
    "RowRef",
    "SideSummary",
    "UnitComparison",
    "UnitRef",
    "UnitTask",
    "_compare_statistics",
    "_relative_floor_of",
    "compare",
    "compare_unit_task",
    "compare_units",
    "compute_cell_rollups",
    "detect_mode",
    "likely_origin",
    "unit_comparison",
    "pair_units",
    "unit_namespaces",
]
