"""The columnar row model: one unit's compared rows as numpy columns, read through light row views.

A unit of a large dump holds hundreds of thousands of rows.  Built as one frozen object per row (and one per side),
they cost ~1 KB each and a Python pass everywhere they are read.  Here a unit's rows are columns instead
(docs/design.md §2, "The columnar result model"):

========================  ====================  ==========================================================
column                    dtype, shape          meaning
========================  ====================  ==========================================================
``entry``, ``arg_path``   int32 [n]             codes into :attr:`RowTable.strings` (the row's A names)
``entry_b``, ``arg_path_b``, ``mapped_by``, ``parent_cell``  int32 [n]  codes, -1 = None
``match_class``           uint8 [n]             index into :data:`MATCH_CLASSES`
``compared_by``           uint8 [n]             index into :data:`COMPARED_BY`
``verdict``               uint8 [n]             index into :data:`VERDICTS` (fail, warning, pass, skip)
``differs``               int8 [n]              1 differ, 0 identical, -1 not compared (None)
``reasons``, ``notes``     int32 [n]             codes into :attr:`RowTable.tuples` (0 = ``()``)
``stack``, ``stack_b``     int32 [n]             codes into :attr:`RowTable.stacks` (0 = ``()``)
``side_kind``             uint8 [n, 2]          per side (A, B): :data:`SIDE_KINDS` (absent, null, value, tensor)
``side_dtype``, ``side_md5``, ``side_data_name``, ``side_value``  int32 [n, 2]  codes, -1 = None
``side_shape``            int32 [n, 2]          codes into :attr:`RowTable.shapes`, -1 = None
``side_stats``            float64 [n, 2, 4]     Max, Min, Mean, Norm per side (value units; NaN where undefined)
``side_stats_defined``    bool [n, 2, 4]        the statistic was recorded (so a recorded NaN stays a NaN)
``metrics``               float64 [n, K]        :data:`METRIC_NAMES` (K = 15); NaN where not a value
``metric_state``          int8 [n, K]           0 absent, 1 present but undefined (None), 2 a value
``relative_error``        float64 [n]           the localisation's relative error ``e`` (NaN: not measured)
``noise_floor``           float64 [n]           the rounding-noise floor ``e`` is judged against (NaN: not measured)
========================  ====================  ==========================================================

Names, texts and shapes repeat across rows (an entry's rows, the reasons of every passing row), so they are stored
once per table and rows hold codes.  :class:`ComparisonRow` is a read-only view of one row with the attributes the
row records always had, for tests, top-N lists and the rare exceptional row; code that touches every row reads the
columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, overload

import numpy as np

from msprobe_cmp.comparator.matching import MATCH_CLASSES, SIDE_KINDS, MatchClass, row_index
from msprobe_cmp.comparator.notes import rewrite_text
from msprobe_cmp.comparator.rules import Verdict
from msprobe_cmp.dump.schema import Interned, Leaf, LeafColumns, TensorLeaf, ValueLeaf, leaf_row_groups

ComparedBy = Literal["tensor", "statistics", "md5", "value", "none"]

#: Every row verdict, in report order (the ``verdict`` column's codes).
VERDICTS: tuple[Verdict, ...] = ("fail", "warning", "pass", "skip")
#: How a row's values were compared (the ``compared_by`` column's codes).
COMPARED_BY: tuple[ComparedBy, ...] = ("tensor", "statistics", "md5", "value", "none")

VERDICT_CODE = {v: k for k, v in enumerate(VERDICTS)}
COMPARED_BY_CODE = {v: k for k, v in enumerate(COMPARED_BY)}
MATCH_CLASS_CODE = {v: k for k, v in enumerate(MATCH_CLASSES)}
ABSENT, NULL, VALUE, TENSOR = range(4)
#: Stands for "this side has no such row" in :meth:`RowTableBuilder.set_sides` (None is JSON null).
ABSENT_LEAF = object()
FAIL, WARNING, PASS, SKIP = range(4)

#: Names of the tensor-mode metrics, msprobe's column names (EucDist: msprobe 26.x), in
#: :data:`msprobe_cmp.comparator.metrics.TENSOR_METRIC_KEYS` order.
TENSOR_METRIC_NAMES = (
    "Cosine",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "EucDist",
)

#: Names of the statistic-diff metrics: msprobe's "<S> diff" columns (signed A - B, value units), then the relative
#: differences |A - B| / max(|B|, floor) as plain ratios.  msprobe names the latter "MaxRelativeErr", ... (the name
#: of another tensor-mode quantity) and writes them as "%" strings.
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

#: The metric columns, in order: a row's metrics are always listed in this order.
METRIC_NAMES: tuple[str, ...] = (*TENSOR_METRIC_NAMES, *STAT_METRIC_NAMES, LOWER_BOUND_NAME)
METRIC_INDEX = {name: k for k, name in enumerate(METRIC_NAMES)}
#: ``metric_state`` codes.
METRIC_ABSENT, METRIC_NONE, METRIC_VALUE = 0, 1, 2
#: Column index of the first statistic diff ("Max diff") and of the lower bound.
STAT_DIFF_COLUMN = METRIC_INDEX["Max diff"]
LOWER_BOUND_COLUMN = METRIC_INDEX[LOWER_BOUND_NAME]


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
        """The summary of a dump leaf (None: JSON null)."""
        if leaf is None:
            return cls("null")
        if isinstance(leaf, ValueLeaf):
            return cls("value", dtype=leaf.type, value=repr(leaf.value))
        return cls("tensor", leaf.dtype, tuple(leaf.shape), leaf.max, leaf.min, leaf.mean, leaf.norm, leaf.md5,
                   leaf.data_name)


class SideColumns(NamedTuple):
    """One side's columns of a :class:`RowTable`, as its rows' :class:`SideSummary` records read them
    (:meth:`RowTable.side_columns`).

    Attributes:
        kind: uint8 [n], :data:`SIDE_KINDS` codes.
        dtype, shape, md5, data_name, value: int32 [n] codes (into ``strings``, ``shapes`` for ``shape``); -1 where
            the side's field is None.
        stats: float64 [n, 4], max, min, mean, norm.
        stats_defined: bool [n, 4]: the statistic is a number of the side (False where the field is None).
    """

    kind: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray
    md5: np.ndarray
    data_name: np.ndarray
    value: np.ndarray
    stats: np.ndarray
    stats_defined: np.ndarray


_TEXT_COLUMNS = ("reasons", "notes", "stack", "stack_b")
_NAME_COLUMNS = ("entry", "arg_path", "entry_b", "arg_path_b", "mapped_by", "parent_cell")


@dataclass(frozen=True, eq=False)
class RowTable(Sequence["ComparisonRow"]):
    """One unit's rows as columns (module docstring), in execution order; a read-only sequence of
    :class:`ComparisonRow` views.

    Attributes:
        strings: the string table name, dtype, md5, file name and value codes point into.
        tuples: the table of text tuples ``reasons`` and ``notes`` point into; ``tuples[0] == ()``.
        stacks: the table of call stacks ``stack`` and ``stack_b`` point into; ``stacks[0] == ()``.
        shapes: the table of tensor shapes ``side_shape`` points into.
        (the columns: module docstring)
    """

    strings: Sequence[str]
    tuples: Sequence[tuple[str, ...]]
    stacks: Sequence[tuple[str, ...]]
    shapes: Sequence[tuple[int, ...]]
    entry: np.ndarray
    arg_path: np.ndarray
    entry_b: np.ndarray
    arg_path_b: np.ndarray
    mapped_by: np.ndarray
    parent_cell: np.ndarray
    match_class: np.ndarray
    compared_by: np.ndarray
    verdict: np.ndarray
    differs: np.ndarray
    reasons: np.ndarray
    notes: np.ndarray
    stack: np.ndarray
    stack_b: np.ndarray
    side_kind: np.ndarray
    side_dtype: np.ndarray
    side_shape: np.ndarray
    side_md5: np.ndarray
    side_data_name: np.ndarray
    side_value: np.ndarray
    side_stats: np.ndarray
    side_stats_defined: np.ndarray
    metrics: np.ndarray
    metric_state: np.ndarray
    relative_error: np.ndarray
    noise_floor: np.ndarray

    #: The column names, in order (what :meth:`columns` returns and a saved table holds).
    COLUMNS = (
        "entry", "arg_path", "entry_b", "arg_path_b", "mapped_by", "parent_cell", "match_class", "compared_by",
        "verdict", "differs", "reasons", "notes", "stack", "stack_b", "side_kind", "side_dtype", "side_shape",
        "side_md5", "side_data_name", "side_value", "side_stats", "side_stats_defined", "metrics", "metric_state",
        "relative_error", "noise_floor",
    )

    def __len__(self) -> int:
        return len(self.verdict)

    @overload
    def __getitem__(self, i: int) -> ComparisonRow: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[ComparisonRow, ...]: ...

    def __getitem__(self, i: int | slice) -> ComparisonRow | tuple[ComparisonRow, ...]:
        if isinstance(i, slice):
            return tuple(ComparisonRow(self, k) for k in range(*i.indices(len(self))))
        return ComparisonRow(self, row_index(i, len(self)))

    def __iter__(self) -> Iterator[ComparisonRow]:
        return (ComparisonRow(self, k) for k in range(len(self)))

    def __eq__(self, other: object) -> bool:
        """Two tables are equal when they hold the same rows (:class:`ComparisonRow` equality, row by row)."""
        if not isinstance(other, RowTable):
            return NotImplemented
        if len(self) != len(other):
            return False
        if (self.strings == other.strings and self.tuples == other.tuples and self.stacks == other.stacks
                and self.shapes == other.shapes
                and all(np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
                        for x, y in zip(self.columns().values(), other.columns().values(), strict=True))):
            return True
        return all(x == y for x, y in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_rows(cls, rows: Sequence[ComparisonRow]) -> RowTable:
        """A table holding ``rows`` (views of any tables, e.g. made by :meth:`ComparisonRow.replaced`), re-indexed by
        their position: for tests and hand-made comparisons; the comparator fills columns directly."""
        b = RowTableBuilder(len(rows))
        c = b.cols
        for i, r in enumerate(rows):
            c["entry"][i], c["arg_path"][i] = b.code(r.entry_name), b.code(r.arg_path)
            c["entry_b"][i], c["arg_path_b"][i] = b.code(r.entry_name_b), b.code(r.arg_path_b)
            c["mapped_by"][i], c["parent_cell"][i] = b.code(r.mapped_by), b.code(r.parent_cell)
            c["stack"][i], c["stack_b"][i] = b.stack_code(r.stack), b.stack_code(r.stack_b)
            c["match_class"][i] = MATCH_CLASS_CODE[r.match_class]
            b.set_outcome(i, r.compared_by, r.metrics, r.verdict, r.reasons, r.notes, r.differs)
            for s, side in enumerate((r.a, r.b)):
                b.set_side_summary(i, s, side)
        return b.freeze()

    def columns(self) -> dict[str, np.ndarray]:
        """Every column by name (:attr:`COLUMNS` order)."""
        return {name: getattr(self, name) for name in self.COLUMNS}

    def window(self, start: int, stop: int) -> RowTable:
        """The rows ``start`` to ``stop`` (exclusive; clipped to the table, as a slice is) as a table of their own:
        its columns are views of this table's (nothing is copied) and it shares the string, tuple, stack and shape
        tables, so every code means what it means here.  Row ``k`` of the window is row ``start + k`` of this
        table.  For code that reads a large table a bounded chunk of rows at a time (the reports)."""
        return RowTable(self.strings, self.tuples, self.stacks, self.shapes,
                        **{name: column[start:stop] for name, column in self.columns().items()})

    def take(self, rows: np.ndarray) -> RowTable:
        """The rows ``rows`` (int [m]: row indexes, in the order given) as a table of their own: its columns are
        copies of theirs (``column[rows]``) and it shares the string, tuple, stack and shape tables.  Row ``k`` of the
        result is row ``rows[k]`` of this table.

        Raises:
            IndexError: an index out of range.
        """
        return RowTable(self.strings, self.tuples, self.stacks, self.shapes,
                        **{name: column[rows] for name, column in self.columns().items()})

    # -- decoding helpers -------------------------------------------------------------------------------------------
    def text(self, code: int) -> str | None:
        """The string of ``code`` (None for -1)."""
        return None if code < 0 else self.strings[code]

    def entry_names(self) -> list[str]:
        """The ``entry`` column decoded: every row's (A) entry name."""
        s = self.strings
        return [s[c] for c in self.entry.tolist()]

    def names(self, column: str) -> list[str | None]:
        """A name column decoded (``"entry"``, ``"parent_cell"``, ...): one str or None per row."""
        s = self.strings
        return [None if c < 0 else s[c] for c in getattr(self, column).tolist()]

    def texts(self, column: str) -> list[tuple[str, ...]]:
        """A tuple column decoded (``"reasons"``, ``"notes"``, ``"stack"``, ``"stack_b"``)."""
        t = self.stacks if column.startswith("stack") else self.tuples
        return [t[c] for c in getattr(self, column).tolist()]

    def side_columns(self, s: int) -> SideColumns:
        """Side ``s``'s columns (0 = A, 1 = B) as :attr:`ComparisonRow.a` / :attr:`ComparisonRow.b` read them: codes
        -1 and statistics undefined wherever the row's :class:`SideSummary` holds None for that field (a value's
        shape, md5 and file name, a tensor's value, everything of a null or absent side but its kind)."""
        kind = self.side_kind[:, s]
        tensor = kind == TENSOR
        value = kind == VALUE
        return SideColumns(
            kind=kind,
            dtype=np.where(tensor | value, self.side_dtype[:, s], -1),
            shape=np.where(tensor, self.side_shape[:, s], -1),
            md5=np.where(tensor, self.side_md5[:, s], -1),
            data_name=np.where(tensor, self.side_data_name[:, s], -1),
            value=np.where(value, self.side_value[:, s], -1),
            stats=self.side_stats[:, s],
            stats_defined=self.side_stats_defined[:, s] & tensor[:, None],
        )

    def verdict_mask(self, verdict: Verdict) -> np.ndarray:
        """bool [n]: the rows whose verdict is ``verdict``."""
        return self.verdict == VERDICT_CODE[verdict]

    def class_mask(self, match_class: MatchClass) -> np.ndarray:
        """bool [n]: the rows of ``match_class``."""
        return self.match_class == MATCH_CLASS_CODE[match_class]

    def entry_pairs(self, match_class: MatchClass) -> list[tuple[str, str | None]]:
        """``(entry name, B's entry name or None)`` of every row of ``match_class``, in row order."""
        mask = self.class_mask(match_class)
        s = self.strings
        return [(s[a], None if b < 0 else s[b])
                for a, b in zip(self.entry[mask].tolist(), self.entry_b[mask].tolist(), strict=True)]

    def metric_column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(values float64 [n], defined bool [n])`` of the metric ``name`` (:data:`METRIC_NAMES`)."""
        k = METRIC_INDEX[name]
        return self.metrics[:, k], self.metric_state[:, k] == METRIC_VALUE

    def metric_patterns(self) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The sets of metrics the rows have (present, defined or not): ``(patterns, which)``, each distinct set as
        the :data:`METRIC_NAMES` indexes it holds (in order), the sets in the order the rows first have them, and
        ``which`` int64 [n] the index of each row's set in ``patterns``."""
        present = self.metric_state != METRIC_ABSENT
        codes = (present * (np.int64(1) << np.arange(len(METRIC_NAMES), dtype=np.int64))).sum(axis=1)
        distinct, first, which = np.unique(codes, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        patterns = [tuple(k for k in range(len(METRIC_NAMES)) if code >> k & 1) for code in distinct[order].tolist()]
        return patterns, position[which.reshape(-1)]

    def differs_mask(self) -> np.ndarray:
        """bool [n]: rows whose two sides are known to differ, or that fail, or that are structural mismatches
        (a shape / dtype mismatch, a null on one side against data on the other): what "first divergent" and a
        cell's "differing" count."""
        cls, verdict = self.match_class, self.verdict
        return (((cls == MATCH_CLASS_CODE["matched"]) & (self.differs == 1))
                | (cls == MATCH_CLASS_CODE["shape_mismatch"]) | (cls == MATCH_CLASS_CODE["dtype_mismatch"])
                | (verdict == FAIL)
                | ((cls == MATCH_CLASS_CODE["not_captured"]) & (verdict == WARNING)))

    def verdict_counts(self) -> tuple[tuple[Verdict, int], ...]:
        """``(verdict, rows)`` for every verdict of :data:`VERDICTS`, zeros included, in that order."""
        return tuple(zip(VERDICTS, np.bincount(self.verdict, minlength=len(VERDICTS)).tolist(), strict=True))

    def class_counts(self) -> tuple[tuple[MatchClass, int], ...]:
        """``(match class, rows)`` for every class of :data:`MATCH_CLASSES`, zeros included, in that order."""
        counts = np.bincount(self.match_class, minlength=len(MATCH_CLASSES)).tolist()
        return tuple(zip(MATCH_CLASSES, counts, strict=True))

    def compared_count(self) -> int:
        """Matched rows whose values were compared (verdict other than skip)."""
        return int((self.class_mask("matched") & (self.verdict != SKIP)).sum())

    def first(self, mask: np.ndarray) -> int | None:
        """Index of the first row where ``mask`` (bool [n]) holds, or None."""
        hits = np.flatnonzero(mask)
        return int(hits[0]) if len(hits) else None

    def with_texts(self, rewrite: Callable[[str], str]) -> RowTable:
        """This table with every reason and note text passed through ``rewrite`` (the columns are shared; stacks are
        left as they are; a :class:`~msprobe_cmp.comparator.notes.Note` keeps its code, its text parameters
        rewritten too)."""
        return replace(self, tuples=tuple(tuple(rewrite_text(s, rewrite) for s in t) for t in self.tuples))


class ComparisonRow:
    """A read-only view of one row of a :class:`RowTable`: a leaf of an entry on both sides, its metrics and its
    verdict.

    Attributes:
        index: position of the row in its unit, in execution order (0-based).
        table, position: the table the row is read from and the row's place in it (``position`` is ``index``
            except in a :meth:`detached` copy, the one row of its own table).
        entry_name: the entry (``"Cell.blocks.0.Dense.forward.0"``).
        arg_path: the argument path (``"parameters.weight"``, ``"input.0"``, ``"output.0"``).
        match_class: the matching class (:data:`msprobe_cmp.comparator.matching.MATCH_CLASSES`).
        a, b: what each side recorded (:class:`SideSummary`); None when the row is absent from that side.
        compared_by: how the values were compared: ``"tensor"`` (saved arrays), ``"statistics"``, ``"md5"``,
            ``"value"`` (non-tensor arguments), or ``"none"``.
        metrics: ``(name, value)`` pairs of the metrics the row has, in :data:`METRIC_NAMES` order: tensor metrics,
            statistic diffs (:data:`STAT_METRIC_NAMES`) and in statistics mode :data:`LOWER_BOUND_NAME`; the names
            are msprobe's column names where msprobe has the column.  None = undefined or not computable.
            Absolute metrics are in value units; relative ones, ratios and Cosine are dimensionless.
        verdict: ``"pass"``, ``"warning"``, ``"fail"`` or ``"skip"`` (nothing to compare).
        reasons: why the verdict is not a plain pass (one sentence each).
        notes: informative remarks (dtype upcast, non-finite values left out, fallbacks).
        differs: True when the two sides' values are known to differ, False when known identical, None when they
            were not compared.
        parent_cell: the parent cell from construct.json (A's, else B's), or None.
        stack: the call stack of the entry from stack.json (A's, else B's); () when unknown.
        entry_name_b: B's entry name when the pairing gave this row a B entry of another name (a shifted call
            index, or a MindSpore ↔ PyTorch mapping), else None.
        stack_b: B's own call stack of the entry from its stack.json; () when unknown.
        arg_path_b: B's argument path when a mapping moved the argument (``input.2`` for BiasAdd's ``input.1``),
            else None.
        mapped_by: which mapping paired the two names across frameworks (built-in table or user file, and the
            rule), else None.
    """

    __slots__ = ("index", "position", "table")

    _FIELDS = ("index", "entry_name", "arg_path", "match_class", "a", "b", "compared_by", "metrics", "verdict",
               "reasons", "notes", "differs", "parent_cell", "stack", "entry_name_b", "stack_b", "arg_path_b",
               "mapped_by")

    def __init__(self, table: RowTable, index: int, position: int | None = None) -> None:
        self.table = table
        self.index = index
        #: where the row sits in ``table``: ``index`` itself, except in a :meth:`detached` copy (0)
        self.position = index if position is None else position

    def detached(self) -> ComparisonRow:
        """A copy of this row that holds no reference to its table: the one row of a table of its own (its string,
        tuple, stack and shape tables only what the row uses), keeping :attr:`index`.  For rows a report keeps
        while it reads other units (the largest disagreements, examples), so that a unit's table read from a spool
        file (:class:`~msprobe_cmp.comparator.spool.SpooledRows`) is not held in memory by them."""
        return ComparisonRow(RowTable.from_rows([self]), self.index, 0)

    def _name(self, column: str) -> str | None:
        return self.table.text(int(getattr(self.table, column)[self.position]))

    @property
    def entry_name(self) -> str:
        """The entry (``"Cell.blocks.0.Dense.forward.0"``)."""
        return self._name("entry")  # type: ignore[return-value]

    @property
    def arg_path(self) -> str:
        """The argument path (``"parameters.weight"``, ``"input.0"``, ``"output.0"``)."""
        return self._name("arg_path")  # type: ignore[return-value]

    @property
    def entry_name_b(self) -> str | None:
        """B's entry name where the pairing gave it another name, else None."""
        return self._name("entry_b")

    @property
    def arg_path_b(self) -> str | None:
        """B's argument path where a mapping moved the argument, else None."""
        return self._name("arg_path_b")

    @property
    def mapped_by(self) -> str | None:
        """Which mapping paired the two names across frameworks, else None."""
        return self._name("mapped_by")

    @property
    def parent_cell(self) -> str | None:
        """The parent cell from construct.json (A's, else B's), or None."""
        return self._name("parent_cell")

    @property
    def match_class(self) -> MatchClass:
        """The matching class (:data:`~msprobe_cmp.comparator.matching.MATCH_CLASSES`)."""
        return MATCH_CLASSES[int(self.table.match_class[self.position])]

    @property
    def compared_by(self) -> ComparedBy:
        """How the values were compared (:data:`COMPARED_BY`)."""
        return COMPARED_BY[int(self.table.compared_by[self.position])]

    @property
    def verdict(self) -> Verdict:
        """``"pass"``, ``"warning"``, ``"fail"`` or ``"skip"``."""
        return VERDICTS[int(self.table.verdict[self.position])]

    @property
    def differs(self) -> bool | None:
        """True when the sides are known to differ, False when known identical, None when not compared."""
        d = int(self.table.differs[self.position])
        return None if d < 0 else bool(d)

    def _tuple(self, column: str) -> tuple[str, ...]:
        t = self.table
        return (t.stacks if column.startswith("stack") else t.tuples)[int(getattr(t, column)[self.position])]

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the verdict is not a plain pass (one sentence each)."""
        return self._tuple("reasons")

    @property
    def notes(self) -> tuple[str, ...]:
        """Informative remarks (dtype upcast, non-finite values left out, fallbacks)."""
        return self._tuple("notes")

    @property
    def stack(self) -> tuple[str, ...]:
        """The entry's call stack from stack.json (A's, else B's); () when unknown."""
        return self._tuple("stack")

    @property
    def stack_b(self) -> tuple[str, ...]:
        """B's own call stack of the entry; () when unknown."""
        return self._tuple("stack_b")

    def _side(self, s: int) -> SideSummary | None:
        t, i = self.table, self.position
        kind = int(t.side_kind[i, s])
        if kind == ABSENT:
            return None
        if kind == NULL:
            return SideSummary("null")
        dtype = t.text(int(t.side_dtype[i, s]))
        if kind == VALUE:
            return SideSummary("value", dtype=dtype, value=t.text(int(t.side_value[i, s])))
        shape_code = int(t.side_shape[i, s])
        mx, mn, mean, norm = (float(v) if ok else None for v, ok in
                              zip(t.side_stats[i, s].tolist(), t.side_stats_defined[i, s].tolist(), strict=True))
        return SideSummary("tensor", dtype, None if shape_code < 0 else t.shapes[shape_code], mx, mn, mean, norm,
                           md5=t.text(int(t.side_md5[i, s])), data_name=t.text(int(t.side_data_name[i, s])))

    @property
    def a(self) -> SideSummary | None:
        """What A recorded (:class:`SideSummary`), or None when the row is not in A."""
        return self._side(0)

    @property
    def b(self) -> SideSummary | None:
        """What B recorded (:class:`SideSummary`), or None when the row is not in B."""
        return self._side(1)

    @property
    def metrics(self) -> tuple[tuple[str, float | None], ...]:
        """``(name, value)`` of the metrics the row has, in :data:`METRIC_NAMES` order (None: undefined)."""
        t, i = self.table, self.position
        states = t.metric_state[i].tolist()
        values = t.metrics[i].tolist()
        return tuple((METRIC_NAMES[k], values[k] if st == METRIC_VALUE else None)
                     for k, st in enumerate(states) if st != METRIC_ABSENT)

    def metric(self, key: str) -> float | None:
        """The metric ``key`` (:data:`METRIC_NAMES`), or None when absent or undefined."""
        k = METRIC_INDEX.get(key)
        if k is None or int(self.table.metric_state[self.position, k]) != METRIC_VALUE:
            return None
        return float(self.table.metrics[self.position, k])

    @property
    def name(self) -> str:
        """The row name ``<entry name>.<arg path>``."""
        return f"{self.entry_name}.{self.arg_path}"

    @property
    def name_b(self) -> str:
        """B's row name: :attr:`name`, or B's own entry name / argument path where they differ."""
        return f"{self.entry_name_b or self.entry_name}.{self.arg_path_b or self.arg_path}"

    @property
    def in_a_and_b(self) -> bool:
        """Both sides hold this row (recorded data or null): its entry found a partner."""
        kinds = self.table.side_kind[self.position]
        return bool(kinds[0] != ABSENT and kinds[1] != ABSENT)

    @property
    def value_difference(self) -> str | None:
        """``"<row name>: A <value>, B <value>"`` for a row compared by value (a non-tensor argument or output: eps, a
        dtype, a flag) whose two sides differ, else None: the text the reports list such rows by."""
        if self.compared_by != "value" or not self.differs:
            return None
        a, b = self.a, self.b
        if a is None or b is None:
            return None
        return f"{self.name}: A {a.value}, B {b.value}"

    def replaced(self, **changes: Any) -> ComparisonRow:
        """A copy of this row with the given attributes (:attr:`_FIELDS`) changed, as the one row of a new table:
        for tests and hand-made comparisons (:meth:`RowTable.from_rows` gathers such rows into a table).

        Raises:
            TypeError: an attribute that is not one of :attr:`_FIELDS`.
        """
        unknown = set(changes) - set(self._FIELDS)
        if unknown:
            raise TypeError(f"ComparisonRow has no field(s) {', '.join(sorted(unknown))}")
        return _RowValues({f: changes.get(f, getattr(self, f)) for f in self._FIELDS}).as_row()

    def as_tuple(self) -> tuple[Any, ...]:
        """Every attribute, in :attr:`_FIELDS` order (what equality compares)."""
        return tuple(getattr(self, f) for f in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        """The same row of the same table, or two rows whose every attribute is equal (a NaN equal to a NaN)."""
        if not isinstance(other, ComparisonRow):
            return NotImplemented
        if self.table is other.table and self.position == other.position and self.index == other.index:
            return True
        return _same(self.as_tuple(), other.as_tuple())

    def __hash__(self) -> int:
        return hash((self.entry_name, self.arg_path, self.verdict))

    def __repr__(self) -> str:
        return f"ComparisonRow({self.index}, {self.name!r}, {self.match_class}, {self.verdict})"


def _same(x: object, y: object) -> bool:
    """``x == y`` with NaN equal to NaN, through tuples and :class:`SideSummary` records."""
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (x != x and y != y)
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, SideSummary) and isinstance(y, SideSummary):
        return _same(tuple(vars(x).values()), tuple(vars(y).values()))
    return x == y


class _RowValues:
    """A row's attributes as plain values (what :meth:`ComparisonRow.replaced` turns into a one-row table)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def as_row(self) -> ComparisonRow:
        return RowTable.from_rows([self])[0]  # type: ignore[list-item]


#: A leaf's side kind by its type (:data:`ABSENT_LEAF` is an ``object``).
_KIND_OF_TYPE: dict[type, int] = {TensorLeaf: TENSOR, ValueLeaf: VALUE, type(None): NULL, object: ABSENT}
#: The side code columns of a tensor row, in the order their values are interned: ``(column, the leaf columns' code
#: column it is read from, whether it codes shapes)``.
_SIDE_CODE_COLUMNS = (("side_dtype", "dtype_code", False), ("side_shape", "shape_code", True),
                      ("side_md5", "md5_code", False), ("side_data_name", "data_name_code", False))


class RowTableBuilder:
    """Fills the columns of a :class:`RowTable` of ``n`` rows, row by row or column-wise, then :meth:`freeze`\\ s it.

    Rows start absent on both sides, with no metric, verdict skip, compared by ``"none"`` and ``differs`` None.
    :attr:`table` reads the columns as they are filled (the same arrays; the strings and tuples as interned so far).
    """

    def __init__(self, n: int) -> None:
        self._strings: Interned[str] = Interned()
        self._tuples: Interned[tuple[str, ...]] = Interned(())
        self._stacks: Interned[tuple[str, ...]] = Interned(())
        self._shapes: Interned[tuple[int, ...]] = Interned()
        self.n = n
        i32 = np.int32
        self.cols: dict[str, np.ndarray] = {
            "entry": np.zeros(n, i32), "arg_path": np.zeros(n, i32),
            "entry_b": np.full(n, -1, i32), "arg_path_b": np.full(n, -1, i32), "mapped_by": np.full(n, -1, i32),
            "parent_cell": np.full(n, -1, i32),
            "match_class": np.zeros(n, np.uint8), "compared_by": np.full(n, COMPARED_BY_CODE["none"], np.uint8),
            "verdict": np.full(n, SKIP, np.uint8), "differs": np.full(n, -1, np.int8),
            "reasons": np.zeros(n, i32), "notes": np.zeros(n, i32), "stack": np.zeros(n, i32),
            "stack_b": np.zeros(n, i32),
            "side_kind": np.zeros((n, 2), np.uint8), "side_dtype": np.full((n, 2), -1, i32),
            "side_shape": np.full((n, 2), -1, i32), "side_md5": np.full((n, 2), -1, i32),
            "side_data_name": np.full((n, 2), -1, i32), "side_value": np.full((n, 2), -1, i32),
            "side_stats": np.full((n, 2, 4), np.nan), "side_stats_defined": np.zeros((n, 2, 4), bool),
            "metrics": np.full((n, len(METRIC_NAMES)), np.nan),
            "metric_state": np.zeros((n, len(METRIC_NAMES)), np.int8),
            "relative_error": np.full(n, np.nan), "noise_floor": np.full(n, np.nan),
        }

    # -- interning ------------------------------------------------------------------------------------------------
    def code(self, text: str | None) -> int:
        """The string table code of ``text`` (-1 for None)."""
        if text is None:
            return -1
        c = self._strings.codes.get(text)
        return self._strings.code(text) if c is None else c

    def tuple_code(self, texts: tuple[str, ...] | list[str]) -> int:
        """The tuple table code of ``texts`` (0 for ``()``)."""
        return self._tuples.code(tuple(texts))

    def stack_code(self, stack: tuple[str, ...] | list[str]) -> int:
        """The stack table code of ``stack`` (0 for ``()``)."""
        return self._stacks.code(tuple(stack))

    def shape_code(self, shape: Sequence[int] | None) -> int:
        """The shape table code of ``shape`` (-1 for None)."""
        if shape is None:
            return -1
        return self._shapes.code(shape if type(shape) is tuple else tuple(shape))

    # -- row setters ------------------------------------------------------------------------------------------------
    def set_sides(self, s: int, leaves: Sequence[object]) -> None:
        """Side ``s`` (0 = A, 1 = B) of every row: ``leaves[i]`` is a tensor or value leaf, None (JSON null) or
        :data:`ABSENT_LEAF` (the row is not on that side); written by :meth:`set_side_columns`, a tensor leaf read
        from its :class:`~msprobe_cmp.dump.schema.LeafColumns` (its file's columns, or the one-row columns of a leaf
        built by a constructor: :func:`~msprobe_cmp.dump.schema.leaf_row_groups`).

        Raises:
            ValueError: ``leaves`` is not one item per row.
        """
        if len(leaves) != self.n:
            raise ValueError(f"{len(leaves)} leaves for {self.n} rows")
        # Each row's kind from its leaf's type (a subclass of a leaf class is looked at one row at a time).
        kind_list = list(map(_KIND_OF_TYPE.get, map(type, leaves)))
        for i in [i for i, kind in enumerate(kind_list) if kind is None]:
            leaf = leaves[i]
            kind_list[i] = (TENSOR if isinstance(leaf, TensorLeaf) else NULL if leaf is None
                            else ABSENT if leaf is ABSENT_LEAF else VALUE)
        kinds = np.asarray(kind_list, dtype=np.uint8).reshape(self.n)
        values = {i: leaves[i] for i in np.flatnonzero(kinds == VALUE).tolist()}
        self.set_side_columns(s, kinds, values,
                              leaf_row_groups([leaves[i] for i in np.flatnonzero(kinds == TENSOR).tolist()]))

    def set_side_columns(
        self, s: int, kinds: np.ndarray, values: Mapping[int, object],
        groups: Sequence[tuple[LeafColumns, np.ndarray, np.ndarray]],
    ) -> None:
        """Side ``s`` (0 = A, 1 = B) of every row, once per side on a new builder (a row not written keeps the
        builder's starting values: kind absent, codes -1, statistics NaN).

        Args:
            kinds: uint8 [n], each row's :data:`SIDE_KINDS` code.
            values: the value leaf (:class:`~msprobe_cmp.dump.schema.ValueLeaf`) of each row of kind value, by row
                (others may be there too); their type and value are interned first, in row order.
            groups: where the tensor leaves of the rows of kind tensor (``index``: those rows, in order) are held:
                ``(columns, positions, rows)`` per :class:`~msprobe_cmp.dump.schema.LeafColumns`, ``positions``
                indexes into ``index``, ``rows`` rows of the columns, every position in one group (as
                :func:`~msprobe_cmp.dump.schema.leaf_row_groups` gives it); the tensor code columns are interned
                after the values, one column after the other.

        Raises:
            ValueError: ``kinds`` is not one code per row.
        """
        if kinds.shape != (self.n,):
            raise ValueError(f"{kinds.shape} kinds for {self.n} rows")
        c = self.cols
        code = self.code
        c["side_kind"][:, s] = kinds
        for i in np.flatnonzero(kinds == VALUE).tolist():
            leaf = values[i]
            assert isinstance(leaf, ValueLeaf)
            c["side_dtype"][i, s] = code(leaf.type)
            c["side_value"][i, s] = code(repr(leaf.value))
        index = np.flatnonzero(kinds == TENSOR)
        if len(index):
            self._set_tensor_sides(s, index, groups)

    def _set_tensor_sides(
        self, s: int, index: np.ndarray, groups: Sequence[tuple[LeafColumns, np.ndarray, np.ndarray]]
    ) -> None:
        """Side ``s`` of the tensor rows ``index`` (int64 [m]) from their leaves' columns (``groups``: as
        :meth:`set_side_columns` takes them): the statistics and their mask row by row, and each code column's
        distinct values interned in the order of their first row (as row-by-row coding would), whichever columns
        object holds them."""
        m = len(index)
        stats = np.empty((m, 4), np.float64)
        defined = np.empty((m, 4), bool)
        # A row's key in a code column: its group and its code in the group's table, one int64 (code -1, None, kept)
        stride = max(max(len(cols.strings), len(cols.shapes)) for cols, _, _ in groups) + 1
        keys = {source: np.empty(m, np.int64) for _, source, _ in _SIDE_CODE_COLUMNS}
        for g, (cols, positions, rows) in enumerate(groups):
            stats[positions] = cols.stats_array()[rows]
            defined[positions] = cols.defined_array()[rows]
            for source, column_keys in keys.items():
                column_keys[positions] = cols.code_array(source)[rows].astype(np.int64) + (g * stride + 1)
        c = self.cols
        for column, source, shapes in _SIDE_CODE_COLUMNS:
            distinct, first, inverse = np.unique(keys.pop(source), return_index=True, return_inverse=True)
            codes = np.empty(len(distinct), np.int32)
            # each (group, code) once, in the order of its first row: a value is interned at the first row holding it
            for k in np.argsort(first).tolist():
                g, code = divmod(int(distinct[k]), stride)
                if code == 0:  # None
                    codes[k] = -1
                elif shapes:
                    codes[k] = self.shape_code(groups[g][0].shapes[code - 1])
                else:
                    codes[k] = self.code(groups[g][0].strings[code - 1])
            c[column][index, s] = codes[inverse.reshape(-1)]
        c["side_stats"][index, s] = stats
        c["side_stats_defined"][index, s] = defined

    def set_side_summary(self, i: int, s: int, side: SideSummary | None) -> None:
        """Side ``s`` (0 = A, 1 = B) of row ``i`` from its :class:`SideSummary` (None: the row is not on that side)."""
        c = self.cols
        if side is None:
            c["side_kind"][i, s] = ABSENT
            return
        c["side_kind"][i, s] = SIDE_KINDS.index(side.kind)
        c["side_dtype"][i, s] = self.code(side.dtype)
        c["side_shape"][i, s] = self.shape_code(side.shape)
        c["side_md5"][i, s] = self.code(side.md5)
        c["side_data_name"][i, s] = self.code(side.data_name)
        c["side_value"][i, s] = self.code(side.value)
        for k, v in enumerate((side.max, side.min, side.mean, side.norm)):
            c["side_stats_defined"][i, s, k] = v is not None
            c["side_stats"][i, s, k] = np.nan if v is None else v

    def set_outcome(
        self,
        i: int,
        compared_by: ComparedBy,
        metrics: Sequence[tuple[str, float | None]],
        verdict: Verdict,
        reasons: tuple[str, ...],
        notes: tuple[str, ...],
        differs: bool | None,
    ) -> None:
        """Row ``i``'s outcome: how it was compared, its metrics (``(name, value)``, names from :data:`METRIC_NAMES`;
        a repeated name keeps its first value), verdict, reasons, notes and whether its sides differ.

        Raises:
            KeyError: a metric name not in :data:`METRIC_NAMES`.
        """
        c = self.cols
        c["compared_by"][i] = COMPARED_BY_CODE[compared_by]
        state, values = c["metric_state"][i], c["metrics"][i]
        state[:] = METRIC_ABSENT
        values[:] = np.nan
        for name, v in metrics:
            k = METRIC_INDEX[name]
            if state[k] != METRIC_ABSENT:
                continue
            if v is None:
                state[k] = METRIC_NONE
            else:
                state[k] = METRIC_VALUE
                values[k] = v
        self.set_verdict(i, verdict, reasons, notes)
        c["differs"][i] = -1 if differs is None else int(bool(differs))

    def set_verdict(self, i: int, verdict: Verdict, reasons: tuple[str, ...], notes: tuple[str, ...]) -> None:
        """Row ``i``'s verdict, reasons and notes."""
        c = self.cols
        c["verdict"][i] = VERDICT_CODE[verdict]
        c["reasons"][i] = self.tuple_code(reasons)
        c["notes"][i] = self.tuple_code(notes)

    # -- the table ----------------------------------------------------------------------------------------------------
    @property
    def table(self) -> RowTable:
        """The rows as filled so far: columns and tables shared with the builder, so later writes show."""
        return RowTable(self._strings.items, self._tuples.items, self._stacks.items, self._shapes.items, **self.cols)

    def freeze(self) -> RowTable:
        """The finished table; its columns are made read-only (the builder must not be used afterwards)."""
        for arr in self.cols.values():
            arr.flags.writeable = False
        return RowTable(tuple(self._strings.items), tuple(self._tuples.items), tuple(self._stacks.items),
                        tuple(self._shapes.items), **self.cols)


def table_from_columns(
    strings: Sequence[str], tuples: Sequence[Sequence[str]], stacks: Sequence[Sequence[str]],
    shapes: Sequence[Sequence[int]], columns: dict[str, np.ndarray],
) -> RowTable:
    """A read-only :class:`RowTable` from its tables and columns (a saved comparison read back).

    Raises:
        ValueError: a column missing or of the wrong length / dtype kind.
    """
    missing = [name for name in RowTable.COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"columns missing: {', '.join(missing)}")
    n = len(columns["verdict"])
    reference = RowTableBuilder(0).cols
    out = {}
    for name in RowTable.COLUMNS:
        arr = np.asarray(columns[name])
        want = reference[name]
        if arr.shape[:1] != (n,) or arr.shape[1:] != want.shape[1:] or arr.dtype != want.dtype:
            raise ValueError(f"column {name}: shape {arr.shape} dtype {arr.dtype}, expected "
                             f"({n}, {', '.join(map(str, want.shape[1:]))}) {want.dtype}")
        arr = arr.copy()
        arr.flags.writeable = False
        out[name] = arr
    return RowTable(tuple(strings), tuple(tuple(t) for t in tuples), tuple(tuple(t) for t in stacks),
                    tuple(tuple(int(d) for d in s) for s in shapes), **out)
