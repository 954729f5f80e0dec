"""The per-cell roll-up: every row of a unit summed into each cell call that encloses it (construct.json)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from msprobe_cmp.comparator.result import LOWER_BOUND_NAME, CellRollup, ComparisonRow
from msprobe_cmp.comparator.rules import Verdict
from msprobe_cmp.dump.naming import CELL_PREFIXES, parse_name

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


def parent_chains(
    entries: Iterable[str], construct: Mapping[str, str | None]
) -> tuple[dict[str, tuple[str, ...]], bool]:
    """Every entry's enclosing cells, innermost first (construct.json: entry → parent cell, followed upwards).

    Args:
        entries: entry names (repeats are fine).
        construct: entry name → parent cell entry name (A's construct.json, completed from B's).

    Returns:
        ``(chains, truncated)``: entry name → its enclosing cells, and whether some chain was cut at 1,000 levels
        (a cycle is cut where it closes, silently: construct.json has no cycles).
    """
    chains: dict[str, tuple[str, ...]] = {}
    truncated = False
    for entry in entries:
        if entry in chains:
            continue
        out: list[str] = []
        seen = {entry}
        parent = construct.get(entry)
        while parent is not None and parent not in seen:
            if len(out) >= _MAX_CELL_DEPTH:
                truncated = True
                break
            out.append(parent)
            seen.add(parent)
            parent = construct.get(parent)
        chains[entry] = tuple(out)
    return chains, truncated


def compute_cell_rollups(
    rows: tuple[ComparisonRow, ...], construct: Mapping[str, str | None],
    chains: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[tuple[CellRollup, ...], dict[str, tuple[str, ...]], bool]:
    """Roll the rows up into every enclosing cell call (construct.json: entry → parent cell).

    Args:
        rows: the unit's rows in execution order.
        construct: entry name → parent cell entry name (A's construct.json, completed from B's).
        chains: the rows' :func:`parent_chains`, when already computed.

    Returns:
        ``(cells, chains, truncated)``: one :class:`CellRollup` per cell call, in the order its first
        row appears; per entry name, its enclosing cells innermost first; and whether some chain was
        cut at 1,000 levels (:func:`parent_chains`).
    """
    truncated = False
    if chains is None:
        chains, truncated = parent_chains((r.entry_name for r in rows), construct)
    known = dict(chains)

    def chain_of(entry: str) -> tuple[str, ...]:
        got = known.get(entry)
        if got is None:
            more, cut = parent_chains((entry,), construct)
            nonlocal truncated
            truncated = truncated or cut
            known.update(more)
            got = known[entry]
        return got

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
    return tuple(cells), known, truncated
