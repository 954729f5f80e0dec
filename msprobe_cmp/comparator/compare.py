"""compare(A, B) → Comparison: pair units, match rows, compute metrics, apply rules.

Roles (msprobe's convention): **A is the target** ("NPU" in msprobe's columns) and **B the
baseline** ("Bench", golden); relative errors divide by B.

This module does no I/O of its own: the only reads are tensor files, through
:meth:`msprobe_cmp.dump.reader.RankDump.load_tensor` of the dumps passed in.  It prints nothing
and returns a frozen :class:`Comparison` that reports render as they are.

Units (one ``step<N>/rank<R>`` directory each) are paired by their (step, rank) ids, never by
directory order.  When each side holds exactly one unit the two are paired whatever their ids
(a note says so when the ids differ); a non-distributed ``rank`` directory (rank None) pairs with
``rank0`` when that is unambiguous.  Units left without a partner are listed in
:attr:`Comparison.unpaired`.

Mode (DESIGN.md §4, anatomy §3.1): ``tensor`` when every unit of both sides was dumped with
``task: tensor``; otherwise ``md5`` when both sides carry checksums; otherwise ``statistics``.
Within tensor mode a row whose tensor files are missing or unreadable on either side falls back to
its statistics (a note says why); within md5 mode a row without checksums does the same.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from msprobe_cmp.comparator.dtypes import compute_relative_floor, normalize_dtype
from msprobe_cmp.comparator.mapping import (
    NameMapping,
    Namespace,
    build_views,
    framework_namespace,
    label_contradiction,
    unused_mapping_keys,
)
from msprobe_cmp.comparator.matching import (
    MATCH_CLASSES,
    MatchClass,
    RowPair,
    count_classes,
    is_uncaptured,
    match_entries,
    match_views,
)
from msprobe_cmp.comparator.metrics import (
    STAT_NAMES,
    TENSOR_METRIC_KEYS,
    StatDiff,
    TensorMetrics,
    compute_max_abs_err_lower_bound,
    compute_stat_diffs,
    compute_tensor_metrics,
)
from msprobe_cmp.comparator.rules import (
    RuleOutcome,
    Rules,
    Thresholds,
    Verdict,
    compute_finite_statistics_verdict,
    compute_md5_verdict,
    compute_statistics_verdict,
    compute_tensor_verdict,
    compute_value_verdict,
)
from msprobe_cmp.dump.naming import CELL_PREFIXES, parse_name
from msprobe_cmp.dump.reader import (
    Dump,
    RankDump,
    TensorLoader,
    load_rank_dump,
    paused_gc,
    register_tensor_loader,
    tensor_loader_for,
)
from msprobe_cmp.dump.schema import (
    NOT_CAPTURED_BACKWARD,
    NOT_CAPTURED_STEP,
    Entry,
    Leaf,
    TensorLeaf,
    ValueLeaf,
    build_frozen,
)
from msprobe_cmp.errors import ConfigError, MsprobeCmpError

Mode = Literal["tensor", "statistics", "md5"]
ModeOption = Literal["auto", "tensor", "statistics", "md5"]
OverallVerdict = Literal["pass", "fail", "nothing_compared", "too_few_matched"]
ComparedBy = Literal["tensor", "statistics", "md5", "value", "none"]

#: Every row verdict, in report order.
VERDICTS: tuple[Verdict, ...] = ("fail", "warning", "pass", "skip")

#: Names of the tensor-mode metrics in rows, msprobe's column names (EucDist: msprobe 26.x), in
#: :data:`msprobe_cmp.comparator.metrics.TENSOR_METRIC_KEYS` order.
TENSOR_METRIC_NAMES = (
    "Cosine",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "EucDist",
)

#: Statistic labels as msprobe spells them in its "<S> diff" columns.
_STAT_LABELS = {"max": "Max", "min": "Min", "mean": "Mean", "norm": "L2norm"}

#: Names of the statistic-diff metrics in rows: msprobe's "<S> diff" columns (signed A - B, value units),
#: then the relative differences |A - B| / max(|B|, floor) as plain ratios.  msprobe names the latter
#: "MaxRelativeErr", ... (the name of another tensor-mode quantity) and writes them as "%" strings.
STAT_METRIC_NAMES = (
    "Max diff",
    "Min diff",
    "Mean diff",
    "L2norm diff",
    "Max relative diff",
    "Min relative diff",
    "Mean relative diff",
    "L2norm relative diff",
)

#: Name of the statistics-mode lower bound on MaxAbsErr (value units).
LOWER_BOUND_NAME = "MaxAbsErr lower bound"

_TENSOR_NAME_OF = dict(zip(TENSOR_METRIC_KEYS, TENSOR_METRIC_NAMES, strict=True))


@dataclass(frozen=True)
class CompareOptions:
    """Options of :func:`compare`.

    Attributes:
        rules: the thresholds in force (defaults: DESIGN.md §4).
        mode: ``"auto"`` (module docstring), or force ``"tensor"``, ``"statistics"`` or ``"md5"``
            (rows lacking what the forced mode needs fall back to statistics, with a note).
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

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "tensor", "statistics", "md5"):
            raise ConfigError(f"mode: must be auto, tensor, statistics or md5, got {self.mode!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ConfigError(f"jobs: must be a whole number of at least 1, got {self.jobs!r}")


@dataclass(frozen=True)
class SideSummary:
    """What one side recorded for a row (all from dump.json; numbers in the tensor's value units).

    Attributes:
        kind: ``"tensor"``, ``"value"`` (a non-tensor argument) or ``"null"`` (JSON null).
        dtype: the tensor dtype as written (``"Float32"``), or the value's type (``"int"``); None for null.
        shape: the tensor shape; None for values and null.
        max, min, mean, norm: the recorded statistics (None when not recorded; may be NaN/±Inf).
        md5: the recorded checksum, if any.
        data_name: the saved tensor file name, if any.
        value: the non-tensor value rendered as text (``repr``), None for tensors and null.
    """

    kind: Literal["tensor", "value", "null"]
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None
    md5: str | None = None
    data_name: str | None = None
    value: str | None = None

    @classmethod
    def of(cls, leaf: Leaf) -> SideSummary:
        """The summary of a dump leaf."""
        if leaf is None:
            return cls("null")
        if isinstance(leaf, ValueLeaf):
            return cls("value", dtype=leaf.type, value=repr(leaf.value))
        return build_frozen(cls, {
            "kind": "tensor", "dtype": leaf.dtype, "shape": tuple(leaf.shape), "max": leaf.max, "min": leaf.min,
            "mean": leaf.mean, "norm": leaf.norm, "md5": leaf.md5, "data_name": leaf.data_name, "value": None,
        })


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


@lru_cache(maxsize=1024)
def _relative_floor_of(dtype_a: str, dtype_b: str) -> float:
    """:func:`compute_relative_floor` of two stated dtypes (any spelling), computed once per pair of spellings."""
    return compute_relative_floor(normalize_dtype(dtype_a), normalize_dtype(dtype_b))


@dataclass(frozen=True)
class ComparisonRow:
    """One compared row: a leaf of an entry on both sides, its metrics and its verdict.

    Attributes:
        index: position of the row in its unit, in execution order (0-based).
        entry_name: the entry (``"Cell.blocks.0.Dense.forward.0"``).
        arg_path: the argument path (``"parameters.weight"``, ``"input.0"``, ``"output.0"``).
        match_class: the matching class (:data:`msprobe_cmp.comparator.matching.MATCH_CLASSES`).
        a, b: what each side recorded; None when the row is absent from that side.
        compared_by: how the values were compared: ``"tensor"`` (saved arrays), ``"statistics"``,
            ``"md5"``, ``"value"`` (non-tensor arguments), or ``"none"``.
        metrics: ``(key, value)`` pairs: tensor metrics (:data:`metrics.TENSOR_METRIC_KEYS`), statistic
            diffs (:data:`STAT_METRIC_NAMES`), and in statistics mode :data:`LOWER_BOUND_NAME`; the
            names are msprobe's column names where msprobe has the column (``"Cosine"``, ``"MaxAbsErr"``).
            None = undefined or not computable.  Absolute metrics are in value units; relative ones,
            ratios and Cosine are dimensionless.
        verdict: ``"pass"``, ``"warning"``, ``"fail"`` or ``"skip"`` (nothing to compare).
        reasons: why the verdict is not a plain pass (one sentence each).
        notes: informative remarks (dtype upcast, non-finite values left out, fallbacks).
        differs: True when the two sides' values are known to differ, False when known identical,
            None when they were not compared.
        parent_cell: the parent cell from construct.json (A's, else B's), or None.
        stack: the call stack of the entry from stack.json (A's, else B's); () when unknown.
        entry_name_b: B's entry name when the call alignment paired this row with a B entry of another
            name (a shifted call index, or a MindSpore ↔ PyTorch mapping), else None (see
            :func:`msprobe_cmp.comparator.matching.align_entries`).
        stack_b: B's own call stack of the entry from its stack.json; () when unknown.
        arg_path_b: B's argument path when a mapping moved the argument (``input.2`` for BiasAdd's
            ``input.1``), else None.
        mapped_by: which mapping paired the two names across frameworks (built-in table or user
            file, and the rule), else None.
    """

    index: int
    entry_name: str
    arg_path: str
    match_class: MatchClass
    a: SideSummary | None
    b: SideSummary | None
    compared_by: ComparedBy
    metrics: tuple[tuple[str, float | None], ...]
    verdict: Verdict
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    differs: bool | None = None
    parent_cell: str | None = None
    stack: tuple[str, ...] = ()
    entry_name_b: str | None = None
    stack_b: tuple[str, ...] = ()
    arg_path_b: str | None = None
    mapped_by: str | None = None

    @property
    def name(self) -> str:
        """The row name ``<entry name>.<arg path>``."""
        return f"{self.entry_name}.{self.arg_path}"

    @property
    def name_b(self) -> str:
        """B's row name: :attr:`name`, or B's own entry name / argument path where they differ."""
        return f"{self.entry_name_b or self.entry_name}.{self.arg_path_b or self.arg_path}"

    def metric(self, key: str) -> float | None:
        """The metric ``key``, or None when absent or undefined."""
        for k, v in self.metrics:
            if k == key:
                return v
        return None


@dataclass(frozen=True)
class UnitRef:
    """A (step, rank) unit of one side.

    Attributes:
        side: ``"a"`` or ``"b"``.
        step, rank: the unit's ids (None: no step directory / non-distributed ``rank`` directory).
        label: ``"step0/rank1"``-style label.
        directory: the unit's directory.
    """

    side: Literal["a", "b"]
    step: int | None
    rank: int | None
    label: str
    directory: str

    @classmethod
    def of(cls, side: Literal["a", "b"], unit: RankDump) -> UnitRef:
        """The reference of a loaded unit."""
        return cls(side, unit.step, unit.rank, unit.label, str(unit.directory))


@dataclass(frozen=True)
class CellRollup:
    """The rows inside one cell call — the cell's own rows and those of every API and cell below it in
    construct.json — summed up: the answer to "which part of the model disagrees, and how much".

    Attributes:
        cell: the cell entry name (``"Cell.blocks.0.Dense.forward.0"``).
        parent: the cell it runs inside, or None at the top.
        depth: 0 at the top, +1 per enclosing cell.
        rows: rows in the subtree; failing / differing: how many of them fail / differ.
        min_cosine: the lowest Cosine in the subtree (tensor mode), or None.
        max_abs_err: the largest MaxAbsErr (tensor mode) or its statistics lower bound, or None.
        worst_verdict: the worst row verdict (fail > warning > pass > skip).
        first_divergent: index of the first row in the subtree whose two sides differ, or None.
    """

    cell: str
    parent: str | None
    depth: int
    rows: int
    failing: int
    differing: int
    min_cosine: float | None
    max_abs_err: float | None
    worst_verdict: Verdict
    first_divergent: int | None


_VERDICT_RANK = {"fail": 3, "warning": 2, "pass": 1, "skip": 0}
_MAX_CELL_DEPTH = 1000


class _CellAcc:
    """Running totals of one cell's subtree while the rows stream past."""

    def __init__(self) -> None:
        self.rows = self.failing = self.differing = 0
        self.min_cosine: float | None = None
        self.max_abs_err: float | None = None
        self.worst: Verdict = "skip"
        self.first: int | None = None

    def add(self, r: ComparisonRow) -> None:
        self.rows += 1
        self.failing += r.verdict == "fail"
        if _row_differs(r):
            self.differing += 1
            if self.first is None:
                self.first = r.index
        if _VERDICT_RANK[r.verdict] > _VERDICT_RANK[self.worst]:
            self.worst = r.verdict
        cos = r.metric("Cosine")
        if cos is not None and not math.isnan(cos) and (self.min_cosine is None or cos < self.min_cosine):
            self.min_cosine = cos
        mae = r.metric("MaxAbsErr")
        if mae is None:
            mae = r.metric(LOWER_BOUND_NAME)
        if mae is not None and not math.isnan(mae) and (self.max_abs_err is None or mae > self.max_abs_err):
            self.max_abs_err = mae


def _row_differs(r: ComparisonRow) -> bool:
    return bool(
        (r.match_class == "matched" and r.differs)
        or r.match_class in ("shape_mismatch", "dtype_mismatch")
        or r.verdict == "fail"
        or (r.match_class == "not_captured" and r.verdict == "warning")  # null on one side, data on the other
    )


def compute_cell_rollups(
    rows: tuple[ComparisonRow, ...], construct: Mapping[str, str | None]
) -> tuple[tuple[CellRollup, ...], dict[str, tuple[str, ...]], bool]:
    """Roll the rows up into every enclosing cell call (construct.json: entry → parent cell).

    Args:
        rows: the unit's rows in execution order.
        construct: entry name → parent cell entry name (A's construct.json, completed from B's).

    Returns:
        ``(cells, chains, truncated)``: one :class:`CellRollup` per cell call, in the order its first
        row appears; per entry name, its enclosing cells innermost first; and whether some chain was
        cut at 1,000 levels (a cycle is cut where it closes, silently: construct.json has no cycles).
    """
    chains: dict[str, tuple[str, ...]] = {}
    truncated = False

    def chain_of(entry: str) -> tuple[str, ...]:
        if entry in chains:
            return chains[entry]
        out: list[str] = []
        seen = {entry}
        parent = construct.get(entry)
        while parent is not None and parent not in seen:
            if len(out) >= _MAX_CELL_DEPTH:
                nonlocal truncated
                truncated = True
                break
            out.append(parent)
            seen.add(parent)
            parent = construct.get(parent)
        chains[entry] = tuple(out)
        return chains[entry]

    order: list[str] = []
    acc: dict[str, _CellAcc] = {}
    is_cell: dict[str, bool] = {}
    for r in rows:
        cell_row = is_cell.get(r.entry_name)
        if cell_row is None:  # parse_name gives kind "cell" only to names with a cell prefix
            cell_row = is_cell[r.entry_name] = (
                r.entry_name.partition(".")[0] in CELL_PREFIXES and parse_name(r.entry_name).kind == "cell"
            )
        own = (r.entry_name,) if cell_row else ()
        for cell in (*own, *chain_of(r.entry_name)):
            if cell not in acc:
                acc[cell] = _CellAcc()
                order.append(cell)
            acc[cell].add(r)
    cells = []
    for cell in order:
        x = acc[cell]
        parents = chain_of(cell)
        cells.append(
            CellRollup(
                cell=cell,
                parent=parents[0] if parents else None,
                depth=len(parents),
                rows=x.rows,
                failing=x.failing,
                differing=x.differing,
                min_cosine=x.min_cosine,
                max_abs_err=x.max_abs_err,
                worst_verdict=x.worst,
                first_divergent=x.first,
            )
        )
    return tuple(cells), chains, truncated


@dataclass(frozen=True)
class UnitComparison:
    """The comparison of one unit of A with its partner in B.

    Attributes:
        unit_a, unit_b: the two units.
        rows: every row of both sides, in execution order (:mod:`msprobe_cmp.comparator.matching`).
        counts: ``(class, count)`` for every match class.
        verdict_counts: ``(verdict, count)`` for every row verdict (:data:`VERDICTS`).
        first_divergent: index of the first row whose two sides differ: a ``matched`` row whose values
            differ, a ``shape_mismatch`` / ``dtype_mismatch`` row, or any failing row (so it never comes
            after ``first_failing``); None when there is none.
        first_failing: index of the first row whose verdict is ``fail``, or None.
        verdict: ``"fail"`` when a row fails; else ``"nothing_compared"`` when no matched row was
            compared; else ``"pass"``.
        notes: remarks about the pairing.
        cells: the per-cell roll-up (:func:`compute_cell_rollups`), in execution order.
        parent_chains: entry name → its enclosing cells, innermost first.
    """

    unit_a: UnitRef
    unit_b: UnitRef
    rows: tuple[ComparisonRow, ...]
    counts: tuple[tuple[MatchClass, int], ...]
    verdict_counts: tuple[tuple[Verdict, int], ...]
    first_divergent: int | None
    first_failing: int | None
    verdict: OverallVerdict
    notes: tuple[str, ...] = ()
    cells: tuple[CellRollup, ...] = ()
    parent_chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def compared_count(self) -> int:
        """Number of matched rows whose values were compared (verdict other than skip)."""
        return sum(1 for r in self.rows if r.match_class == "matched" and r.verdict != "skip")


@dataclass(frozen=True)
class RowRef:
    """Where a row sits in a :class:`Comparison`.

    Attributes:
        unit: index of the unit in :attr:`Comparison.units`.
        row: index of the row in that unit's rows (its execution-order position).
        name: the row name ``<entry name>.<arg path>``.
        unit_label: the unit's label on the A side (``"step0/rank"``).
        parent_cell: the row's parent cell (construct.json), or None.
        parents: every enclosing cell, innermost first (construct.json followed upwards).
    """

    unit: int
    row: int
    name: str
    unit_label: str
    parent_cell: str | None = None
    parents: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``"<row name> (<unit label>[, in <parent cell> < <its parent> ...])"``, for one-line messages."""
        chain = self.parents or ((self.parent_cell,) if self.parent_cell else ())
        inside = f", in {' < '.join(chain)}" if chain else ""
        return f"{self.name} ({self.unit_label}{inside})"


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: a frozen value, rendered by :mod:`msprobe_cmp.reports`.

    Attributes:
        input_a, input_b: the paths the two dumps were loaded from (A = target, B = baseline).
        mode: ``"tensor"``, ``"statistics"`` or ``"md5"``.
        rules: the thresholds in force.
        units: one :class:`UnitComparison` per paired unit, sorted by (step, rank) of A.
        unpaired: the units of either side that found no partner.
        counts, verdict_counts: per-class / per-verdict row totals over all units (zeros included).
        first_divergent, first_failing: :class:`RowRef` of the first divergent / failing row, taking
            units in order (lowest step, then rank), or None.
        verdict: ``"fail"`` if any unit fails; else ``"nothing_compared"`` when no matched row was
            compared anywhere (a run with nothing compared never passes); else ``"too_few_matched"``
            when matched rows are a smaller share of all rows than ``rules.min_matched_share`` (when the
            two dumps come from different frameworks: of A's rows, since the baseline framework makes
            calls the target's never does, such as PyTorch's optimizer Tensor methods); else
            ``"pass"``.
        notes: remarks about the whole comparison (pairing, mode).
        matched_share: the share of rows matched, as the ``min_matched_share`` floor counts it (0..1; None when
            there are no rows): matched / rows, without ``not_captured`` rows, and across frameworks without
            B's unpaired rows of paired units.
        matched_share_of: which rows that share is of: ``"all rows"`` or ``"A's rows"``.
    """

    input_a: str
    input_b: str
    mode: Mode
    rules: Rules
    units: tuple[UnitComparison, ...]
    unpaired: tuple[UnitRef, ...]
    counts: tuple[tuple[MatchClass, int], ...]
    verdict_counts: tuple[tuple[Verdict, int], ...]
    first_divergent: RowRef | None
    first_failing: RowRef | None
    verdict: OverallVerdict
    notes: tuple[str, ...] = ()
    matched_share: float | None = None
    matched_share_of: str = "all rows"

    def row(self, ref: RowRef) -> ComparisonRow:
        """The row at ``ref``."""
        return self.units[ref.unit].rows[ref.row]

    @property
    def compared_count(self) -> int:
        """Number of matched rows whose values were compared, over all units."""
        return sum(u.compared_count for u in self.units)


# --------------------------------------------------------------------------------------------------
# units and mode


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
    pairs.sort(key=lambda p: _unit_sort_key(p[0]))
    left_b = sorted([*by_id_b.values(), *dup_b], key=_unit_sort_key)
    for side, dups in (("A", dup_a), ("B", dup_b)):
        if dups:
            names = ", ".join(str(u.directory) for u in dups)
            notes.append(f"{side} holds several units with the same step and rank; not compared: {names}")
    return pairs, [*still_a, *dup_a], left_b, notes


def _has_md5(units: Iterable[RankDump]) -> bool:
    """True when some tensor leaf of ``units`` carries a checksum."""
    for u in units:
        for e in u.entries:
            for _, leaf in e.leaf_tuple():
                if isinstance(leaf, TensorLeaf) and leaf.md5 is not None:
                    return True
    return False


def detect_mode(units_a: tuple[RankDump, ...], units_b: tuple[RankDump, ...]) -> Mode:
    """The comparison mode of two sides' units (module docstring)."""
    if units_a and units_b and all(u.meta.task == "tensor" for u in (*units_a, *units_b)):
        return "tensor"
    if _has_md5(units_a) and _has_md5(units_b):
        return "md5"
    return "statistics"


# --------------------------------------------------------------------------------------------------
# rows


class _Outcome(NamedTuple):
    """How one row was compared (internal; a tuple, cheaper to make than a frozen dataclass)."""

    compared_by: ComparedBy
    metrics: tuple[tuple[str, float | None], ...]
    rule: RuleOutcome
    notes: tuple[str, ...]
    differs: bool | None


def _stat_pairs(diffs: tuple[StatDiff, ...]) -> list[tuple[str, float | None]]:
    out: list[tuple[str, float | None]] = [(f"{_STAT_LABELS[d.stat]} diff", d.diff) for d in diffs]
    out += [(f"{_STAT_LABELS[d.stat]} relative diff", d.relative) for d in diffs]
    return out


def _stat_notes(diffs: tuple[StatDiff, ...]) -> list[str]:
    return [
        f"{d.stat} is {d.a!r} on both sides (not compared)" for d in diffs if d.nonfinite_agree is True
    ]


def _stat_differs(diffs: tuple[StatDiff, ...]) -> bool:
    return any((d.diff is not None and d.diff != 0.0) or d.nonfinite_agree is False for d in diffs)


def _compare_statistics(
    la: TensorLeaf, lb: TensorLeaf, diffs: tuple[StatDiff, ...], t: Thresholds, notes: list[str]
) -> _Outcome:
    if all(d.a is None and d.b is None for d in diffs):
        rule = RuleOutcome("skip", ("no statistics recorded on either side",))
        return _Outcome("none", tuple(_stat_pairs(diffs)), rule, tuple(notes), None)
    one_sided = [d.stat for d in diffs if (d.a is None) != (d.b is None)]
    if one_sided:
        notes.append(f"statistics recorded on one side only: {', '.join(one_sided)}")
    bound = compute_max_abs_err_lower_bound(diffs, la.numel)
    metrics = (*_stat_pairs(diffs), (LOWER_BOUND_NAME, bound))
    rule = compute_statistics_verdict(diffs, la.numel, t)
    counts_a, counts_b = la.nonfinite_counts, lb.nonfinite_counts
    for side, lf in (("A", la), ("B", lb)):
        if lf.has_invalid_nonfinite_counts:
            notes.append(f"{side}'s NaN/Inf counts are not valid counts (type or range): ignored")
    if counts_a is not None and counts_b is not None and counts_a != counts_b:
        # The recorder's NaN/Inf counts see what Max/Min/Mean/Norm can hide (one more NaN among many).
        labels = ("NaN", "+Inf", "-Inf")
        differ = ", ".join(f"{k} A {x} B {y}" for k, x, y in zip(labels, counts_a, counts_b, strict=True) if x != y)
        rule = RuleOutcome("fail", (*rule.reasons, f"non-finite counts differ: {differ}"))
        return _Outcome("statistics", metrics, rule, tuple(notes + _stat_notes(diffs)), True)
    return _Outcome("statistics", metrics, rule, tuple(notes + _stat_notes(diffs)), _stat_differs(diffs))


def _load_pair(
    unit_a: RankDump, unit_b: RankDump, la: TensorLeaf, lb: TensorLeaf
) -> tuple[np.ndarray, np.ndarray] | str:
    try:
        return unit_a.load_tensor(la), unit_b.load_tensor(lb)
    except MsprobeCmpError as exc:
        return str(exc)


def _file_dtype_notes(arrays: tuple[np.ndarray, np.ndarray], leaves: tuple[TensorLeaf, TensorLeaf]) -> list[str]:
    """Notes for tensor files whose dtype is not the one dump.json states (values are decoded as stored)."""
    notes = []
    for side, arr, leaf in (("A", arrays[0], leaves[0]), ("B", arrays[1], leaves[1])):
        stored, stated = normalize_dtype(str(arr.dtype)), normalize_dtype(leaf.dtype)
        if stored == stated:
            continue
        if stated == "bfloat16" and stored == "float32":
            notes.append(f"{side}'s bfloat16 tensor is stored as float32 (msprobe's convention)")
        else:
            notes.append(f"{side}'s tensor file holds {arr.dtype}, dump.json says {leaf.dtype}")
    return notes


def _finite_statistics_outcome(
    pair: RowPair, la: TensorLeaf, lb: TensorLeaf, t: Thresholds, floor: float
) -> _Outcome | None:
    """The statistics-mode outcome of the common row, computed without the per-statistic records: both sides
    non-empty with all four statistics finite floats and valid NaN/Inf counts that agree (or none).  The numbers,
    verdict, reasons and notes are those of :func:`_compare_statistics` (:func:`compute_stat_diffs`,
    :func:`compute_max_abs_err_lower_bound`, :func:`compute_statistics_verdict`: the same operations in the same
    order); None for any other row (the general path then decides).
    """
    a0, a1, a2, a3 = la.max, la.min, la.mean, la.norm
    b0, b1, b2, b3 = lb.max, lb.min, lb.mean, lb.norm
    if not (type(a0) is float and type(a1) is float and type(a2) is float and type(a3) is float
            and type(b0) is float and type(b1) is float and type(b2) is float and type(b3) is float):
        return None
    total = a0 + a1 + a2 + a3 + b0 + b1 + b2 + b3
    if total - total != 0.0:  # some statistic is NaN or ±Inf (or the sum overflowed: the general path decides)
        return None
    numel = la.numel
    if numel == 0:
        return None
    if la.extra or lb.extra:
        counts = la.nonfinite_counts
        if counts != lb.nonfinite_counts:
            return None
        # equal and not None: both valid; both None: either side may carry invalid counts (then a note)
        if counts is None and (la.has_invalid_nonfinite_counts or lb.has_invalid_nonfinite_counts):
            return None
    d0, d1, d2, d3 = a0 - b0, a1 - b1, a2 - b2, a3 - b3
    m0, m1, m2, m3 = abs(d0), abs(d1), abs(d2), abs(d3)
    bound = max(m0, m1, m2, m3 / math.sqrt(numel))
    # max(|b|, floor), spelt out: floor when floor > |b| (what max() returns; every value here is finite)
    r0, r1, r2, r3 = abs(b0), abs(b1), abs(b2), abs(b3)
    metrics = (
        ("Max diff", d0), ("Min diff", d1), ("Mean diff", d2), ("L2norm diff", d3),
        ("Max relative diff", m0 / (floor if floor > r0 else r0)),
        ("Min relative diff", m1 / (floor if floor > r1 else r1)),
        ("Mean relative diff", m2 / (floor if floor > r2 else r2)),
        ("L2norm relative diff", m3 / (floor if floor > r3 else r3)),
        (LOWER_BOUND_NAME, bound),
    )
    suspect = t.max_abs_err_suspect_above
    if bound <= t.max_abs_err_fail_above and m0 <= suspect and m1 <= suspect and m2 <= suspect and m3 <= suspect:
        rule = _PASS
    else:
        rule = compute_finite_statistics_verdict(
            (a0, a1, a2, a3), (b0, b1, b2, b3), (d0, d1, d2, d3), bound, t
        )
    differs = d0 != 0.0 or d1 != 0.0 or d2 != 0.0 or d3 != 0.0
    return _Outcome("statistics", metrics, rule, pair.notes, differs)


_PASS = RuleOutcome("pass")


def _compare_tensors(
    pair: RowPair, la: TensorLeaf, lb: TensorLeaf, unit_a: RankDump, unit_b: RankDump, mode: Mode, rules: Rules
) -> _Outcome:
    t = rules.thresholds_for(pair.name, (la.dtype, lb.dtype)) if rules.overrides else rules.default
    floor = t.relative_floor or _relative_floor_of(la.dtype, lb.dtype)
    if mode == "statistics":
        fast = _finite_statistics_outcome(pair, la, lb, t, floor)
        if fast is not None:
            return fast
    diffs = compute_stat_diffs(la.stats, lb.stats, floor)
    notes = list(pair.notes)
    if la.numel == 0:
        # Same shape on both sides (classify_pair), so both are empty: equal, whatever the dtype.
        notes.append("empty tensor (0 elements) on both sides: equal")
        return _Outcome("none", tuple(_stat_pairs(diffs)), RuleOutcome("pass"), tuple(notes), False)
    if mode == "tensor":
        if la.data_name is None or lb.data_name is None:
            missing = " and ".join(s for s, leaf in (("A", la), ("B", lb)) if leaf.data_name is None)
            return _fallback_to_statistics(la, lb, diffs, t, notes, f"no tensor file in {missing}")
        loaded = _load_pair(unit_a, unit_b, la, lb)
        if isinstance(loaded, str):
            return _fallback_to_statistics(la, lb, diffs, t, notes, f"tensor file unreadable ({loaded})")
        notes.extend(_file_dtype_notes(loaded, (la, lb)))
        arr_a, arr_b = loaded
        if pair.transpose_b and arr_b.ndim == 2:
            arr_b = arr_b.T
        return _tensor_outcome(arr_a, arr_b, floor, t, diffs, notes, (la, lb))
    if mode == "md5":
        if la.md5 is not None and lb.md5 is not None:
            rule = compute_md5_verdict(la.md5, lb.md5)
            return _Outcome("md5", tuple(_stat_pairs(diffs)), rule, tuple(notes), rule.verdict != "pass")
        return _fallback_to_statistics(la, lb, diffs, t, notes, "no checksum on one side")
    return _compare_statistics(la, lb, diffs, t, notes)


def _fallback_to_statistics(
    la: TensorLeaf, lb: TensorLeaf, diffs: tuple[StatDiff, ...], t: Thresholds, notes: list[str], why: str
) -> _Outcome:
    """A row the mode in force could not compare (``why``: no tensor file, an unreadable one, no checksum), judged by
    its statistics instead.  Statistics that agree are weaker evidence than the values or checksums the user asked
    for, so a row they would pass is a warning whose reason is ``why`` (msprobe leaves such rows unjudged, Accuracy
    None: anatomy §3.6); a failing or skipped row keeps its verdict and carries ``why`` as a note."""
    text = f"{why}: compared statistics instead"
    out = _compare_statistics(la, lb, diffs, t, [*notes, text])
    if out.rule.verdict != "pass":
        return out
    rule = RuleOutcome("warning", (f"{text} (they pass, but the values themselves were not compared)",))
    return out._replace(rule=rule, notes=tuple(n for n in out.notes if n != text))


def _tensor_outcome(
    arr_a: np.ndarray,
    arr_b: np.ndarray,
    floor: float,
    t: Thresholds,
    diffs: tuple[StatDiff, ...],
    notes: list[str],
    leaves: tuple[TensorLeaf, TensorLeaf],
) -> _Outcome:
    if arr_a.size != arr_b.size:
        rule = RuleOutcome("fail", (f"tensor files differ in size: A {arr_a.size}, B {arr_b.size}",))
        return _Outcome("tensor", tuple(_stat_pairs(diffs)), rule, tuple(notes), True)
    if np.iscomplexobj(arr_a) or np.iscomplexobj(arr_b):
        # Complex values: compare the real and imaginary parts as one real vector (the cosine is then
        # Re<a, b> / (|a| |b|), the absolute errors those of the parts).
        arr_a = np.concatenate([np.real(arr_a).ravel(), np.imag(arr_a).ravel()])
        arr_b = np.concatenate([np.real(arr_b).ravel(), np.imag(arr_b).ravel()])
        notes.append("complex values: real and imaginary parts compared as one real vector")
    try:
        tm: TensorMetrics = compute_tensor_metrics(arr_a, arr_b, floor)
    except TypeError as exc:
        return _fallback_to_statistics(
            leaves[0], leaves[1], diffs, t, notes, f"values not comparable as real numbers ({exc})"
        )
    rule = compute_tensor_verdict(tm, t)
    differs = tm.differs
    if arr_a.dtype.kind in "iub" and arr_b.dtype.kind in "iub" and not np.array_equal(arr_a, arr_b):
        differs = True
        if tm.max_abs_err == 0.0:  # integers beyond 2**53 that float64 cannot tell apart
            rule = RuleOutcome("fail", ("integer values differ beyond float64 precision (|values| > 2**53)",))
    named = tuple((_TENSOR_NAME_OF[k], v) for k, v in tm.as_pairs())
    return _Outcome("tensor", (*named, *_stat_pairs(diffs)), rule, tuple(notes) + tm.notes, differs)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _compare_values(pair: RowPair, va: ValueLeaf, vb: ValueLeaf, rules: Rules) -> _Outcome:
    notes = list(pair.notes)
    if va.type != vb.type:
        notes.append(f"value types differ: A {va.type}, B {vb.type}")
    x, y = va.value, vb.value
    if _is_number(x) and _is_number(y) and (isinstance(x, float) or isinstance(y, float)):
        # A float scalar is compared like a 0-d tensor (only the MaxAbsErr rules can apply).
        t = rules.thresholds_for(pair.name, (va.type, vb.type))
        floor = t.relative_floor or compute_relative_floor("float64")
        tm = compute_tensor_metrics(np.array([x], dtype=np.float64), np.array([y], dtype=np.float64), floor)
        rule = compute_tensor_verdict(tm, t)
        kept = ("max_abs_err", "max_relative_err")
        metrics = tuple((_TENSOR_NAME_OF[k], v) for k, v in tm.as_pairs() if k in kept)
        return _Outcome("value", metrics, rule, tuple(notes), tm.differs)
    rule = compute_value_verdict(x, y)
    return _Outcome("value", (), rule, tuple(notes), rule.verdict != "pass")


def _has_data(leaf: Leaf) -> bool:
    """A tensor leaf with elements and something recorded about them (statistics, checksum or a file)."""
    return isinstance(leaf, TensorLeaf) and leaf.numel > 0 and not is_uncaptured(leaf)


def _compare_pair(pair: RowPair, unit_a: RankDump, unit_b: RankDump, mode: Mode, rules: Rules) -> _Outcome:
    la, lb = pair.leaf_a, pair.leaf_b
    cls = pair.match_class
    if (cls == "not_captured" and pair.in_a and pair.in_b and (la is None) != (lb is None)
            and _has_data(la if lb is None else lb)):
        # One side recorded null where the other holds data: often a gradient that did not flow (a detached
        # tensor, a frozen layer), sometimes a capture gap. Flagged, and counted against the matched share.
        missing = "A" if la is None else "B"
        other = "B" if missing == "A" else "A"
        if parse_name(pair.entry_name).kind == "parameters_grad":
            # a parameter that got no gradient on one side does not train there: a divergence, not a gap
            why = f"the parameter got no gradient in {missing} but one in {other}: it does not train in {missing}"
            return _Outcome("none", (), RuleOutcome("fail", (why, *pair.notes)), (), True)
        why = f"{missing} recorded null where {other} has a tensor: a gradient that did not flow there, or a " \
              "value its recorder could not capture"
        return _Outcome("none", (), RuleOutcome("warning", (why, *pair.notes)), (), True)
    if cls in ("only_in_a", "only_in_b", "not_captured"):
        reason = {"only_in_a": "present in A only", "only_in_b": "present in B only"}.get(cls)
        reasons = (reason,) if reason else pair.notes
        # a one-sided row's notes say why it has no partner (a composite's intermediate, a mapping)
        return _Outcome("none", (), RuleOutcome("skip", reasons), pair.notes if reason else (), None)
    if cls in ("shape_mismatch", "dtype_mismatch"):
        metrics: tuple[tuple[str, float | None], ...] = ()
        if isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf):
            floor = compute_relative_floor(normalize_dtype(la.dtype), normalize_dtype(lb.dtype))
            metrics = tuple(_stat_pairs(compute_stat_diffs(la.stats, lb.stats, floor)))
        return _Outcome("none", metrics, RuleOutcome("fail", pair.notes), (), None)
    if la is None and lb is None:  # the reason first, how the row was paired after it
        null_first = sorted(pair.notes, key=lambda n: not n.startswith("null on both sides"))
        return _Outcome("none", (), RuleOutcome("skip", tuple(null_first)), (), False)
    if isinstance(la, ValueLeaf) and isinstance(lb, ValueLeaf):
        return _compare_values(pair, la, lb, rules)
    assert isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf)  # guaranteed by classify_pair
    return _compare_tensors(pair, la, lb, unit_a, unit_b, mode, rules)


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


#: Run-to-run noise of one row: (Cosine, MaxAbsErr or its statistics lower bound) of rerun vs baseline.
NoiseMap = Mapping[str, tuple[float | None, float | None]]


def _noise_of(unit: UnitComparison) -> dict[str, tuple[float | None, float | None]]:
    out: dict[str, tuple[float | None, float | None]] = {}
    for r in unit.rows:
        if r.match_class == "matched" and r.verdict != "skip":
            mae = r.metric("MaxAbsErr")
            out[r.name] = (r.metric("Cosine"), mae if mae is not None else r.metric(LOWER_BOUND_NAME))
    return out


def _within_noise(metrics: tuple[tuple[str, float | None], ...], noise: tuple[float | None, float | None],
                  factor: float) -> str | None:
    """Why a failing row is within ``factor`` × the run-to-run noise, or None when it is not."""
    values = dict(metrics)
    cos, mae = values.get("Cosine"), values.get("MaxAbsErr", values.get(LOWER_BOUND_NAME))
    noise_cos, noise_mae = noise
    if mae is None or noise_mae is None or noise_mae <= 0.0 or mae > factor * noise_mae:
        return None
    if cos is not None and noise_cos is not None and (1.0 - cos) > factor * (1.0 - noise_cos):
        return None
    cos_text = "" if noise_cos is None else f", Cosine {noise_cos:.6g}"
    return (f"within run-to-run noise: the rerun of B differs from B by MaxAbsErr {noise_mae:.6g}{cos_text} "
            f"(tolerance {factor:g}x)")


def unit_namespaces(unit_a: RankDump, unit_b: RankDump) -> tuple[Namespace | None, Namespace | None]:
    """The name spaces (``"mindspore"`` / ``"pytorch"``) of two units; mapping applies when they differ."""
    return (framework_namespace(unit_a.meta.framework, unit_a.entries),
            framework_namespace(unit_b.meta.framework, unit_b.entries))


def _match_unit(unit_a: RankDump, unit_b: RankDump, mapping: NameMapping | None) -> tuple[RowPair, ...]:
    ns_a, ns_b = unit_namespaces(unit_a, unit_b)
    if ns_a is None or ns_b is None or ns_a == ns_b:
        return match_entries(unit_a.entries, unit_b.entries)
    user = mapping or NameMapping()
    views_a = build_views(unit_a.entries, ns_a, user, ours="msprobe_cmp_format" in dict(unit_a.meta.extra))
    views_b = build_views(unit_b.entries, ns_b, user, ours="msprobe_cmp_format" in dict(unit_b.meta.extra))
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
        if undefined and out.rule.verdict == "fail":
            why = next((reason for pattern, reason in undefined if fnmatch.fnmatchcase(pair.name, pattern)), None)
            if why is not None:
                out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, why)))
        if noise is not None and out.rule.verdict == "fail" and pair.name in noise:
            why = _within_noise(out.metrics, noise[pair.name], rules.noise_factor)
            if why is not None:
                out = out._replace(rule=RuleOutcome("warning", (*out.rule.reasons, why)))
            else:
                noise_mae = noise[pair.name][1]
                out = out._replace(notes=(*out.notes, f"beyond run-to-run noise (the rerun of B differs from B by "
                                                       f"MaxAbsErr {noise_mae if noise_mae is not None else '-'})"))
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
    frozen_rows = tuple(rows)
    first_failing = _first(frozen_rows, "failing")
    compared = sum(1 for r in frozen_rows if r.match_class == "matched" and r.verdict != "skip")
    verdict: OverallVerdict = "fail" if first_failing is not None else ("pass" if compared else "nothing_compared")
    construct = {**dict(unit_b.construct), **dict(unit_a.construct)}
    cells, chains, truncated = compute_cell_rollups(frozen_rows, construct)
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
    )


def _first_ref(units: tuple[UnitComparison, ...], attr: str) -> RowRef | None:
    for i, u in enumerate(units):
        index: int | None = getattr(u, attr)
        if index is not None:
            row = u.rows[index]
            return RowRef(i, index, row.name, u.unit_a.label, row.parent_cell, u.parent_chains.get(row.entry_name, ()))
    return None


def _mapping_file_notes(
    mapping: NameMapping, paired_a: tuple[RankDump, ...], paired_b: tuple[RankDump, ...],
    units: Iterable[UnitComparison],
) -> list[str]:
    """Across frameworks: user mapping keys that match no MindSpore entry (a typo is otherwise silent), and a
    hint toward ``--cell-mapping`` when cells of both sides found no partner."""
    ms_entries: list[Entry] = []
    for x, y in zip(paired_a, paired_b, strict=True):
        namespaces = unit_namespaces(x, y)
        if set(namespaces) == {"mindspore", "pytorch"}:  # a cross-framework pair: take its MindSpore side
            ms_entries.extend((x if namespaces[0] == "mindspore" else y).entries)
    if not ms_entries:
        return []
    notes = []
    cells, apis = unused_mapping_keys(mapping, ms_entries)
    for keys, what, source in ((cells, "cell", mapping.cell_source), (apis, "API", mapping.api_source)):
        if keys:
            shown = ", ".join(keys[:10]) + (f" (and {len(keys) - 10} more)" if len(keys) > 10 else "")
            count = f"{len(keys)} entr{'y' if len(keys) == 1 else 'ies'}"
            notes.append(f"warning: user {what} mapping {source or ''}: {count} match no MindSpore {what} of the "
                         f"dump (misspelt?): {shown}")
    one_sided = {
        side: {r.entry_name if side == "A" else (r.entry_name_b or r.entry_name) for u in units for r in u.rows
               if r.match_class == cls and parse_name(r.entry_name_b or r.entry_name).kind == "cell"}
        for side, cls in (("A", "only_in_a"), ("B", "only_in_b"))
    }
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
    mapping_sources: str = "built-in tables",
) -> tuple[list[str], str | None]:
    """What the reader of a comparison must know about its inputs: what the recorder could not
    capture, tasks or frameworks that differ, empty units; and, separately, a world-size mismatch
    (said first)."""
    notes: list[str] = []
    for side, side_units in (("A", units_a), ("B", units_b)):
        for rank_dump in side_units:
            missing = rank_dump.meta.not_captured
            if missing:
                shown = "; ".join(missing[:5]) + (f"; and {len(missing) - 5} more" if len(missing) > 5 else "")
                notes.append(
                    f"{side} {rank_dump.label}: the recorder could not capture {len(missing)} thing(s): {shown}"
                )
    tasks_a = sorted({u.meta.task for u in paired_a})
    tasks_b = sorted({u.meta.task for u in paired_b})
    if tasks_a != tasks_b:
        notes.append(
            f"A was recorded with task {'/'.join(tasks_a) or '-'}, B with {'/'.join(tasks_b) or '-'}: "
            f"compared in {mode} mode, on what both sides have"
        )
    for side, side_units in (("A", units_a), ("B", units_b)):
        empty = [u.label for u in side_units if not u.entries]
        if empty:
            notes.append(f"warning: {side} has {len(empty)} empty unit(s) (no entries): {', '.join(empty)}")
    for side, side_units in (("A", paired_a), ("B", paired_b)):
        contradictions = {c for u in side_units if (c := label_contradiction(u.meta.framework, u.entries))}
        notes.extend(f"{side}: {c}" for c in sorted(contradictions))
    frameworks_a = sorted({u.meta.framework for u in paired_a})
    frameworks_b = sorted({u.meta.framework for u in paired_b})
    namespaces = [unit_namespaces(x, y) for x, y in zip(paired_a, paired_b, strict=True)]
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


def _unmapped_notes(units: tuple[UnitComparison, ...], input_notes: list[str]) -> list[str]:
    """Across frameworks with nothing matched: the entry names each side kept unpaired (10 each)."""
    if not any("name mapping" in n for n in input_notes):
        return []
    if any(cls == "matched" and n for u in units for cls, n in u.counts):
        return []
    out = []
    for side, cls in (("A", "only_in_a"), ("B", "only_in_b")):
        names = list(dict.fromkeys(r.entry_name for u in units for r in u.rows if r.match_class == cls))
        if names:
            more = f" and {len(names) - 10} more (all in the report)" if len(names) > 10 else ""
            out.append(f"nothing paired across frameworks; entries only in {side}: {', '.join(names[:10])}{more}")
    return out


@dataclass(frozen=True)
class UnitTask:
    """One (step, rank) unit pair to compare, by path: what a worker process or a Dask worker needs to read the
    pair itself and compare it (everything picklable).

    Attributes:
        dir_a, step_a, rank_a, dir_b, step_b, rank_b: the two unit directories and their ids.
        mode, rules, noise, mapping: as :func:`compare_units` takes them.
        loaders: tensor-file loaders registered in the parent (``(".pt", loader)``), registered in the worker
            too where that suffix has none, so that the worker reads the same files the same way.
    """

    dir_a: str
    step_a: int | None
    rank_a: int | None
    dir_b: str
    step_b: int | None
    rank_b: int | None
    mode: Mode
    rules: Rules
    noise: NoiseMap | None
    mapping: NameMapping
    loaders: tuple[tuple[str, TensorLoader], ...] = ()


def _registered_loaders() -> tuple[tuple[str, TensorLoader], ...]:
    return tuple((suffix, loader) for suffix in (".pt",) if (loader := tensor_loader_for(suffix)) is not None)


def compare_unit_task(task: UnitTask) -> UnitComparison:
    """Read the unit pair of ``task`` from disk and compare it (:func:`compare_units`): the function a worker
    runs for ``--jobs`` / ``--scheduler``.  Deterministic: the same pair gives the same result in any process.

    Raises:
        msprobe_cmp.errors.DumpFormatError: a unit's files became unreadable since the parent read them.
    """
    for suffix, loader in task.loaders:
        if tensor_loader_for(suffix) is None:
            register_tensor_loader(suffix, loader)
    with paused_gc():
        unit_a = load_rank_dump(Path(task.dir_a), task.step_a, task.rank_a)
        unit_b = load_rank_dump(Path(task.dir_b), task.step_b, task.rank_b)
        return compare_units(unit_a, unit_b, task.mode, task.rules, noise=task.noise, mapping=task.mapping)


def _compare_in_parallel(tasks: list[UnitTask], opts: CompareOptions, labels: list[str]) -> tuple[UnitComparison, ...]:
    """:func:`compare_unit_task` of every task on ``opts.scheduler`` (Dask) or a ``spawn`` pool of ``opts.jobs``
    processes (fork can hang once MindSpore or torch ran in the parent), results in task order."""
    total = len(tasks)
    if opts.progress is not None:
        opts.progress(0, total, labels[0])
    results: list[UnitComparison] = []
    if opts.scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs Dask: pip install 'msprobe-cmp[dask]'") from None
        with Client(opts.scheduler) as client:
            futures = client.map(compare_unit_task, tasks, pure=False)
            for k, future in enumerate(futures):
                results.append(future.result())
                if opts.progress is not None and k + 1 < total:
                    opts.progress(k + 1, total, labels[k + 1])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        workers = min(opts.jobs, total)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for k, unit in enumerate(pool.map(compare_unit_task, tasks)):
                results.append(unit)
                if opts.progress is not None and k + 1 < total:
                    opts.progress(k + 1, total, labels[k + 1])
    if opts.progress is not None:
        opts.progress(total, total, "")
    return tuple(results)


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
            back to statistics with a note).
    """
    with paused_gc():
        return _compare(a, b, options or CompareOptions())


def _compare(a: Dump | RankDump, b: Dump | RankDump, opts: CompareOptions) -> Comparison:
    units_a, units_b = _units_of(a), _units_of(b)
    pairs, left_a, left_b, notes = pair_units(units_a, units_b)
    paired_a = tuple(p[0] for p in pairs)
    paired_b = tuple(p[1] for p in pairs)
    mode: Mode = detect_mode(paired_a, paired_b) if opts.mode == "auto" else opts.mode
    noise_by_unit: dict[tuple[int | None, int | None], NoiseMap] = {}
    if opts.noise is not None:
        noise_opts = replace(opts, noise=None, progress=None, rules=replace(opts.rules, min_matched_share=0.0))
        noise_cmp = compare(opts.noise, b, noise_opts)
        for nu in noise_cmp.units:
            noise_by_unit[(nu.unit_b.step, nu.unit_b.rank)] = _noise_of(nu)
        without = [ub.label for _, ub in pairs if (ub.step, ub.rank) not in noise_by_unit]
        if without:
            notes.append(f"the rerun has no unit for B {', '.join(without)}: no noise tolerance there")
        notes.extend(f"rerun vs B: {n}" for n in noise_cmp.notes if "paired" in n)
        notes.append(
            f"noise-floor mode: run-to-run noise measured on {_path_of(opts.noise)} against B; failures within "
            f"{opts.rules.noise_factor:g}x that noise are warnings"
        )
    tasks = [
        UnitTask(str(ua.directory), ua.step, ua.rank, str(ub.directory), ub.step, ub.rank, mode, opts.rules,
                 noise_by_unit.get((ub.step, ub.rank)) if opts.noise else None, opts.mapping, _registered_loaders())
        for ua, ub in pairs
    ]
    if len(pairs) > 1 and (opts.scheduler is not None or opts.jobs > 1):
        units = _compare_in_parallel(tasks, opts, [ua.label for ua, _ in pairs])
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
    input_notes, world_note = _input_notes(units_a, units_b, paired_a, paired_b, mode, sources)
    notes.extend(input_notes)
    notes.extend(_unmapped_notes(units, input_notes))
    notes.extend(_mapping_file_notes(opts.mapping, paired_a, paired_b, units))
    if world_note:
        notes.insert(0, world_note)
    if mode == "tensor":
        fell_back = sum(
            1 for u in units for r in u.rows if r.match_class == "matched" and r.compared_by == "statistics"
        )
        if fell_back:
            notes.append(
                f"{fell_back} tensor row(s) were compared by their statistics only: their tensor files could not "
                "be read (see each row's notes)"
            )
    first_divergent = _first_ref(units, "first_divergent")
    first_failing = _first_ref(units, "first_failing")
    compared = sum(u.compared_count for u in units)
    # Rows of units found on one side only count too: a verdict on step 0 says nothing about steps 1-9.
    cross_framework = any(
        ns_a is not None and ns_b is not None and ns_a != ns_b
        for ns_a, ns_b in (unit_namespaces(x, y) for x, y in zip(paired_a, paired_b, strict=True))
    )
    # Rows paired but without data (not_captured: null leaves, gaps a recorder declared) are not evidence of a
    # mispairing: the floor leaves them out.
    unpaired_leaf_rows = sum(1 for u in (*left_a, *left_b) for e in u.entries for _ in e.leaves())
    no_data = sum(1 for u in units for r in u.rows if r.match_class == "not_captured" and r.verdict == "skip")
    total_rows = sum(class_totals.values()) - no_data + unpaired_leaf_rows
    share_of = "all rows"
    if cross_framework:
        # Across frameworks the baseline holds calls the target's framework never makes (PyTorch's optimizer
        # Tensor methods, autograd helpers): B's unpaired rows of paired units do not count.
        total_rows -= class_totals["only_in_b"]
        share_of = "A's rows"
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
    )


__all__ = [
    "LOWER_BOUND_NAME",
    "STAT_METRIC_NAMES",
    "TENSOR_METRIC_NAMES",
    "STAT_NAMES",
    "VERDICTS",
    "CompareOptions",
    "Comparison",
    "ComparisonRow",
    "Mode",
    "OverallVerdict",
    "RowRef",
    "SideSummary",
    "UnitComparison",
    "UnitRef",
    "compare",
    "UnitTask",
    "compare_unit_task",
    "compare_units",
    "detect_mode",
    "pair_units",
    "unit_namespaces",
]
