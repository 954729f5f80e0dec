"""The per-cell roll-up: every row of a unit summed into each cell call that encloses it (construct.json)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from msprobe_cmp.comparator.result import LOWER_BOUND_NAME, CellRollup
from msprobe_cmp.comparator.rowtable import ABSENT, FAIL, RowTable
from msprobe_cmp.comparator.rules import Verdict
from msprobe_cmp.dump.naming import CELL_PREFIXES, parse_name

_MAX_CELL_DEPTH = 1000


class _CellAcc:
    """Running totals of one cell's subtree while the rows stream past."""

    def __init__(self) -> None:
        self.rows = self.failing = self.differing = 0
        self.min_cosine: float | None = None
        self.max_abs_err: float | None = None
        self.worst = SKIP_RANK
        self.first: int | None = None
        self.max_noise_ratio: float | None = None

    def add(self, i: int, rank: int, differs: bool, cos: float | None, mae: float | None, ratio: float | None) -> None:
        self.rows += 1
        self.failing += rank == FAIL_RANK
        if differs:
            self.differing += 1
            if self.first is None:
                self.first = i
        if rank > self.worst:
            self.worst = rank
        if cos is not None and (self.min_cosine is None or cos < self.min_cosine):
            self.min_cosine = cos
        if mae is not None and (self.max_abs_err is None or mae > self.max_abs_err):
            self.max_abs_err = mae
        if ratio is not None and (self.max_noise_ratio is None or ratio > self.max_noise_ratio):
            self.max_noise_ratio = ratio


#: Verdict codes (:data:`~msprobe_cmp.comparator.rowtable.VERDICTS` order) → severity: fail > warning > pass > skip.
_RANK_OF_CODE = np.array([3, 2, 1, 0], dtype=np.int8)
_VERDICT_OF_RANK: tuple[Verdict, ...] = ("skip", "pass", "warning", "fail")
FAIL_RANK, SKIP_RANK = 3, 0


def noise_ratios(table: RowTable) -> np.ndarray:
    """float64 [n]: each row's error relative to rounding noise, ``relative_error / noise_floor`` (dimensionless;
    at most 1: within the rounding a call may add, :mod:`~msprobe_cmp.comparator.localise`); NaN where the row is
    not measured, but +Inf for a failing row that is not (shapes or dtypes that differ, non-finite values that
    disagree where the statistics agree): its error has no bound, and a cell holding it is not within noise.  A floor
    that underflowed to 0 makes any error infinitely far above it, and no error 0."""
    e, floor = table.relative_error, table.noise_floor
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a huge error over a tiny floor is +Inf
        ratio = e / floor
    ratio = np.where((floor == 0.0) & (e == 0.0), 0.0, ratio)
    return np.where(np.isnan(ratio) & (table.verdict == FAIL), np.inf, ratio)


def _defined(table: RowTable, name: str) -> np.ndarray:
    """float64 [n]: metric ``name`` where it is a number other than NaN, else NaN."""
    values, defined = table.metric_column(name)
    return np.where(defined, values, np.nan)


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


def _is_cell_name(name: str) -> bool:
    """Whether ``name`` is a cell (module) call's entry name (``Cell.x.Dense.forward.0``, ``Module.x.Linear...``)."""
    return name.partition(".")[0] in CELL_PREFIXES and parse_name(name).kind == "cell"


def paired_cells(rows: RowTable) -> dict[str, str]:
    """B's cell calls paired with a cell call of A under another name, each with its partner: from the rows of A's
    cell entries that name B's (the cell mapping across frameworks); the first pairing of a B call wins.  A B name
    that is also one of A's entries is left out: within one framework, calls aligned by call order (A's
    ``Blk.forward.1`` with B's ``Blk.forward.0``) share names across the sides, and a row names its call by A's name
    (or by B's for a row of B alone), so such a name cannot say which side's call it is."""
    paired = (rows.entry_b >= 0) & (rows.entry_b != rows.entry)
    codes = set(zip(rows.entry[paired].tolist(), rows.entry_b[paired].tolist(), strict=True))
    if not codes:
        return {}
    names_a = set(np.unique(rows.entry[rows.side_kind[:, 0] != ABSENT]).tolist())
    a_of_b: dict[str, str] = {}
    for code_a, code_b in sorted(codes):
        if code_b in names_a:
            continue
        name_a, name_b = rows.strings[code_a], rows.strings[code_b]
        if _is_cell_name(name_a) and _is_cell_name(name_b):
            a_of_b.setdefault(name_b, name_a)
    return a_of_b


def merged_construct(
    paired: Mapping[str, str], construct_a: Mapping[str, str | None], construct_b: Mapping[str, str | None]
) -> dict[str, str | None]:
    """The two sides' construct.json as one cell tree: A's, completed from B's, where a cell call of B paired with a
    cell call of A (:func:`paired_cells`) is that call of A: B's entries inside it hang under A's cell, and B's call's
    own rows (a module's buffers) are in A's cell too (:func:`compute_cell_rollups` counts them there, not as a node
    of their own).  MindSpore's ``Cell.fc.Dense.forward.0`` and PyTorch's ``Module.fc.Linear.forward.0`` are one
    node, not two siblings.

    Args:
        paired: :func:`paired_cells` of the unit's rows (B's call → A's).
        construct_a, construct_b: each side's entry name → parent cell entry name.

    Returns:
        entry name → parent cell entry name; A's own entries as A's construct.json has them, a paired call of B
        → its partner in A.
    """
    merged = {entry: paired.get(entry) or (paired.get(parent, parent) if parent is not None else None)
              for entry, parent in construct_b.items()}
    merged.update(construct_a)
    return merged


def compute_cell_rollups(
    rows: RowTable, construct: Mapping[str, str | None],
    chains: Mapping[str, tuple[str, ...]] | None = None, paired: Mapping[str, str] | None = None,
) -> tuple[tuple[CellRollup, ...], dict[str, tuple[str, ...]], bool]:
    """Roll the rows up into every enclosing cell call (construct.json: entry → parent cell); a row of a call of B
    paired with a call of A (:func:`paired_cells`) rolls up into A's call.

    Args:
        rows: the unit's rows in execution order (columns).
        construct: entry name → parent cell entry name (A's construct.json, completed from B's).
        chains: the rows' :func:`parent_chains`, when already computed.
        paired: :func:`paired_cells` of the rows, the one given to :func:`merged_construct` (None: no call of B is
            one of A).

    Returns:
        ``(cells, chains, truncated)``: one :class:`CellRollup` per cell call, in the order its first
        row appears; per entry name, its enclosing cells innermost first; and whether some chain was
        cut at 1,000 levels (:func:`parent_chains`).
    """
    truncated = False
    entries = rows.entry_names()
    if chains is None:
        chains, truncated = parent_chains(entries, construct)
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

    alias = paired or {}  # a call of B paired with one of A is that call (merged_construct)
    ranks = _RANK_OF_CODE[rows.verdict].tolist()
    differs = rows.differs_mask().tolist()
    cosine = _defined(rows, "Cosine")
    mae = _defined(rows, "MaxAbsErr")
    mae = np.where(np.isnan(mae), _defined(rows, LOWER_BOUND_NAME), mae)
    cos_list = [None if c != c else c for c in cosine.tolist()]
    mae_list = [None if m != m else m for m in mae.tolist()]
    ratio_list = [None if r != r else r for r in noise_ratios(rows).tolist()]
    order: list[str] = []
    acc: dict[str, _CellAcc] = {}
    is_cell: dict[str, bool] = {}
    last: str | None = None
    targets: list[_CellAcc] = []
    for i, entry in enumerate(entries):
        if entry != last:  # consecutive rows of one entry roll up into the same cells
            last = entry
            cell_row = is_cell.get(entry)
            if cell_row is None:
                cell_row = is_cell[entry] = _is_cell_name(entry)
            if entry in alias:  # a paired call of B's own row: it counts in A's call and what encloses it
                enclosing: tuple[str, ...] = (alias[entry], *chain_of(alias[entry]))
            else:
                enclosing = ((entry,) if cell_row else ()) + chain_of(entry)
            targets = []
            for cell in enclosing:
                if cell not in acc:
                    acc[cell] = _CellAcc()
                    order.append(cell)
                targets.append(acc[cell])
        for target in targets:
            target.add(i, ranks[i], differs[i], cos_list[i], mae_list[i], ratio_list[i])
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
                worst_verdict=_VERDICT_OF_RANK[x.worst],
                first_divergent=x.first,
                max_noise_ratio=x.max_noise_ratio,
            )
        )
    return tuple(cells), known, truncated
