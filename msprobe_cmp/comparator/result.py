"""The comparison's result records: what :func:`msprobe_cmp.comparator.compare.compare` returns and reports render.

Frozen values only (no computation beyond small accessors): the summary of one side of a row, the compared row,
the unit references, the per-cell roll-up record, the comparison of one unit pair and of two whole dumps; and the
metric names and verdicts rows carry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from msprobe_cmp.comparator.matching import MatchClass
from msprobe_cmp.comparator.rowtable import (
    COMPARED_BY,
    FAIL,
    LOWER_BOUND_NAME,
    METRIC_NAMES,
    STAT_METRIC_NAMES,
    TENSOR_METRIC_NAMES,
    VERDICTS,
    ComparedBy,
    ComparisonRow,
    RowTable,
    SideSummary,
)
from msprobe_cmp.comparator.rules import Rules, Verdict
from msprobe_cmp.dump.reader import RankDump

__all__ = [
    "COMPARED_BY", "LOWER_BOUND_NAME", "METRIC_NAMES", "STAT_METRIC_NAMES", "TENSOR_METRIC_NAMES", "VERDICTS",
    "CellRollup", "ComparedBy", "Comparison", "ComparisonRow", "Jump", "LikelyOrigin", "Mode", "OverallVerdict",
    "RowRef", "RowTable", "SideSummary", "UnitComparison", "UnitRef",
]

Mode = Literal["tensor", "statistics", "md5"]
OverallVerdict = Literal["pass", "fail", "nothing_compared", "too_few_matched"]


def _listed(items: Sequence[str], shown: int, sep: str = ", ") -> str:
    """The first ``shown`` of ``items`` joined by ``sep``, followed by " and K more" when ``items`` holds K more: the
    one way the notes list names, steps and keys."""
    text = sep.join(items[:shown])
    return text + (f" and {len(items) - shown} more" if len(items) > shown else "")


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
        max_noise_ratio: the largest error relative to rounding noise in the subtree: a row's relative error over
            the rounding-noise floor it is judged against (the ``relative_error`` and ``noise_floor`` columns,
            :mod:`~msprobe_cmp.comparator.localise`; dimensionless: at most 1 is within rounding noise; +Inf for
            a failing row whose error cannot be measured: :func:`~msprobe_cmp.comparator.rollup.noise_ratios`), or
            None when no row of the subtree is measured.
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
    max_noise_ratio: float | None


@dataclass(frozen=True)
class UnitComparison:
    """The comparison of one unit of A with its partner in B.

    Attributes:
        unit_a, unit_b: the two units.
        rows: every row of both sides, in execution order (:mod:`msprobe_cmp.comparator.matching`), as columns
            (:class:`~msprobe_cmp.comparator.rowtable.RowTable`; indexing or iterating gives row views).
        counts: ``(class, count)`` for every match class.
        verdict_counts: ``(verdict, count)`` for every row verdict (:data:`VERDICTS`).
        first_divergent: index of the first row whose two sides differ: a ``matched`` row whose values
            differ, a ``shape_mismatch`` / ``dtype_mismatch`` row, or any failing row (so it never comes
            after ``first_failing``); None when there is none.
        first_failing: index of the first row whose verdict is ``fail``, or None.
        verdict: ``"fail"`` when a row fails; else ``"nothing_compared"`` when no matched row was
            compared; else ``"pass"``.
        notes: remarks about the pairing.
        cells: the per-cell roll-up (:func:`~msprobe_cmp.comparator.rollup.compute_cell_rollups`), in execution
            order.
        parent_chains: entry name → its enclosing cells, innermost first.
        jumps: the rows whose error jumps beyond what their inputs carry (:mod:`msprobe_cmp.comparator.localise`),
            in execution order.
    """

    unit_a: UnitRef
    unit_b: UnitRef
    rows: RowTable
    counts: tuple[tuple[MatchClass, int], ...]
    verdict_counts: tuple[tuple[Verdict, int], ...]
    first_divergent: int | None
    first_failing: int | None
    verdict: OverallVerdict
    notes: tuple[str, ...] = ()
    cells: tuple[CellRollup, ...] = ()
    parent_chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    jumps: tuple[Jump, ...] = ()

    @property
    def compared_count(self) -> int:
        """Number of matched rows whose values were compared (verdict other than skip)."""
        return self.rows.compared_count()


def unit_verdict(first_failing: int | None, compared: int) -> OverallVerdict:
    """A unit's verdict: ``"fail"`` when a row fails, else ``"pass"`` when some matched row was compared, else
    ``"nothing_compared"``."""
    return "fail" if first_failing is not None else ("pass" if compared else "nothing_compared")


class UnitSummary(NamedTuple):
    """What a :class:`UnitComparison` says of its rows besides the rows: the fields of the same names."""

    counts: tuple[tuple[MatchClass, int], ...]
    verdict_counts: tuple[tuple[Verdict, int], ...]
    first_divergent: int | None
    first_failing: int | None
    verdict: OverallVerdict


def unit_summary(rows: RowTable) -> UnitSummary:
    """The summary of a unit's ``rows``, derived from their columns: what :func:`~msprobe_cmp.comparator.compare`
    stores in each unit and what a loaded saved comparison is checked against."""
    first_failing = rows.first(rows.verdict == FAIL)
    return UnitSummary(rows.class_counts(), rows.verdict_counts(), rows.first(rows.differs_mask()), first_failing,
                       unit_verdict(first_failing, rows.compared_count()))


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
class Jump:
    """One row whose error jumps (:mod:`msprobe_cmp.comparator.localise`).

    Attributes:
        row: the row's index in its unit.
        kind: ``"computed"`` (an output with more error than its call's inputs) or ``"entered"`` (an input row with
            more error than anything recorded before it).
        error_in: the relative error carried in (dimensionless; 0.0 when the inputs are identical).
        error_out: the row's own relative error (dimensionless).
        floor: the rounding floor it was judged against (dimensionless).
    """

    row: int
    kind: str
    error_in: float
    error_out: float
    floor: float

    @property
    def ratio(self) -> float | None:
        """``error_out / error_in``, or None when nothing was carried in (``error_in`` 0) or the ratio is not finite."""
        if not self.error_in > 0.0:
            return None
        ratio = self.error_out / self.error_in
        return ratio if math.isfinite(ratio) else None


@dataclass(frozen=True)
class LikelyOrigin:
    """Where the two runs' difference most likely enters: the first :class:`Jump` of the comparison (units in order).

    Attributes:
        ref: the jumping row; its ``parents`` are the enclosing cells (the origin's cell chain).
        jump: the evidence: how the error jumps there (:class:`Jump`; also read through :attr:`kind`,
            :attr:`error_in`, :attr:`error_out`, :attr:`floor` and :attr:`ratio`).
        cell: the innermost cell call of the origin: the row's own entry when it is a cell, else its parent cell;
            None when construct.json places it in none.
        arguments: the non-tensor arguments that differ at that call or its cell, one text each
            (``"Functional.layer_norm.3.forward.input.4: A 1e-05, B 1e-12"``).
        unpaired: the calls inside that cell that found no partner, one text each (``"Module.x.NewGELU.forward.0
            (target only)"``): a layer implemented differently on the two sides.
    """

    ref: RowRef
    jump: Jump
    cell: str | None = None
    arguments: tuple[str, ...] = ()
    unpaired: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``"computed"`` (the call's output carries far more error than its inputs) or ``"entered"`` (an input
        differs more than anything recorded before it: a parameter, data, or an unhooked operation)."""
        return self.jump.kind

    @property
    def error_in(self) -> float:
        """The relative error carried in (dimensionless, :mod:`msprobe_cmp.comparator.localise`)."""
        return self.jump.error_in

    @property
    def error_out(self) -> float:
        """The origin row's own relative error (dimensionless)."""
        return self.jump.error_out

    @property
    def floor(self) -> float:
        """The rounding floor the row was judged against (dimensionless)."""
        return self.jump.floor

    @property
    def ratio(self) -> float | None:
        """``error_out / error_in``, or None when nothing was carried in."""
        return self.jump.ratio

    @property
    def where(self) -> str:
        """What the origin names: its innermost cell call, else the row itself."""
        return self.cell or self.ref.name

    @property
    def evidence(self) -> str:
        """``"relative error 0.89 at <row> (1.8e-07 carried in, x5e+06)"``: the jump, in a few words."""
        ratio = "" if self.ratio is None else f", x{self.ratio:.2g}"
        how = "enters at" if self.kind == "entered" else "at"
        return f"relative error {self.error_out:.2g} {how} {self.ref.name} ({self.error_in:.2g} carried in{ratio})"

    @property
    def chain(self) -> tuple[str, ...]:
        """The cells enclosing :attr:`where`, innermost first (construct.json followed upwards)."""
        return tuple(c for c in self.ref.parents if c != self.where)

    @property
    def text(self) -> str:
        """One line: where, the evidence, the arguments that differ there, then the enclosing cells."""
        line = f"{self.where} ({self.ref.unit_label}): {self.evidence}"
        if self.arguments:
            line += f"; arguments that differ: {_listed(self.arguments, 3, '; ')}"
        if self.unpaired:
            line += f"; calls inside it without a partner: {_listed(self.unpaired, 3)}"
        chain = self.chain
        if chain:
            line += f"; inside {' < '.join(chain[:3])}" + (" < ..." if len(chain) > 3 else "")
        return line


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`~msprobe_cmp.comparator.compare.compare`: a frozen value, rendered by
    :mod:`msprobe_cmp.reports`.

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
        input_noise: the path the rerun of B was loaded from in noise-floor mode (``CompareOptions.noise``), or
            None when no rerun was compared.
        likely_origin: where the difference most likely enters (:class:`LikelyOrigin`), or None when no row's
            error jumps (identical runs, a correct port).
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
    input_noise: str | None = None
    likely_origin: LikelyOrigin | None = None

    def row(self, ref: RowRef) -> ComparisonRow:
        """The row at ``ref``."""
        return self.units[ref.unit].rows[ref.row]

    @property
    def compared_count(self) -> int:
        """Number of matched rows whose values were compared, over all units."""
        return sum(u.compared_count for u in self.units)
