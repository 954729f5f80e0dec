"""Exact-name matching of two dumps' rows; every row of both sides ends in exactly one class.

A *row* is one leaf of one entry, keyed by ``(entry name, argument path)`` as produced by
:meth:`msprobe_cmp.dump.schema.Entry.leaves` (``("Cell.fc1.Dense.forward.0", "parameters.weight")``).
Rows are paired when both keys are equal (docs/design.md §2, "Exact"), then classified:

``matched``
    both sides hold comparable data: two tensors of the same shape and the same dtype, or of a
    compatible pair (fp16/bf16/fp32/fp64, or integers of any width: a note says so); or two non-tensor values; or JSON
    ``null`` on both sides (both recorded the same absence, e.g. no gradient for an input that needs
    none; the comparator gives such a row the verdict ``skip``).
``only_in_a`` / ``only_in_b``
    the key exists on one side only.
``shape_mismatch``
    two tensors of different shapes (a dtype difference is mentioned in the note too).
``dtype_mismatch``
    two tensors of incompatible dtypes (e.g. ``int32`` vs ``float32``, ``float32`` vs ``bool``), or a
    tensor against a non-tensor value.
``not_captured``
    one side holds JSON ``null`` where the other has data, or a side holds a tensor leaf that carries
    neither statistics, nor a checksum, nor a saved file although it has elements.

Order is execution order, never lexicographic (:func:`execution_order`): A's rows in A's order; a
row present in B only is placed right after the row that precedes it in B and exists in A (rows
before any shared row go first).  msprobe 1.2.2 instead sorts rows by name and drops bench-only rows
(docs/design.md §3).

dump.json's own order is *almost* execution order; two things are put right, so that "the first
divergent row" is the first difference that happened:

* a ``<cell>.parameters_grad`` entry is written as a placeholder right after the cell's first forward
  call (msprobe and our recorder both do this) but filled during backward: its rows are moved to just
  before the cell's first backward entry (parameter hooks fire before the cell's backward hook), or to
  the end when the cell has no backward entry;
* within an entry, inputs, keyword arguments and parameters come before outputs (an output is computed
  from them; dump.json writes a cell's ``parameters`` after its ``output``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Literal, NamedTuple, Protocol, TypeVar

import numpy as np

from msprobe_cmp.comparator.dtypes import COMPATIBLE_INTS, are_compatible_dtypes, normalize_dtype
from msprobe_cmp.comparator.mapping.canonical import (
    INTERMEDIATE,
    NODE_GRADIENT_ORDER,
    UNMAPPED,
    EntryView,
    ViewItem,
    forward_input_shapes,
    resolve_gradients,
)
from msprobe_cmp.comparator.notes import Note, note
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, Interned, Leaf, LeafColumns, TensorLeaf, ValueLeaf, leaf_view

MatchClass = Literal["matched", "only_in_a", "only_in_b", "shape_mismatch", "dtype_mismatch", "not_captured"]

#: Every match class, in report order.
MATCH_CLASSES: tuple[MatchClass, ...] = (
    "matched",
    "only_in_a",
    "only_in_b",
    "shape_mismatch",
    "dtype_mismatch",
    "not_captured",
)

#: A row's key: (entry name, argument path, occurrence) - occurrence > 0 only for a repeated key.
RowKey = tuple[str, str, int]


class RowPair(NamedTuple):
    """One row of the comparison before any metric: the two leaves under one key, classified (a named tuple; a
    pairing holds its rows column-wise, :class:`RowPairs`, and makes a row's tuple when the row is read).

    Attributes:
        entry_name: the entry (``"Primitive.matmul.MatMul.0.forward"``).
        arg_path: the argument path inside the entry (``"input.0"``, ``"kwargs.dim"``, ``"parameters.weight"``).
        match_class: one of :data:`MATCH_CLASSES`.
        leaf_a, leaf_b: the leaves (None when absent from that side, or when the side holds JSON null).
        in_a, in_b: whether the key exists on that side (tells an absent row from a null leaf).
        notes: why the row got its class, or what to keep in mind when comparing it.
        entry_name_b: B's entry name when the call alignment paired ``entry_name`` with a B entry of
            another name (a shifted call index, or a MindSpore ↔ PyTorch mapping); None when B's name
            is the same (or B has no entry).
        arg_path_b: B's argument path when it differs from ``arg_path`` (a mapping moved the argument:
            BiasAdd ``input.1`` ↔ linear ``input.2``), else None.
        mapped_by: which mapping paired the two sides' names across frameworks (``"built-in cell table:
            Dense → Linear"``, ``"user cell mapping map.yaml: ..."``), else None.
        transpose_b: B's tensor is the transpose of A's (msprobe's PyTorch ``Functional.linear``
            backward records the gradient of ``weight.T``): shapes are compared reversed and, in tensor
            mode, B's array is transposed before the metrics.
    """

    entry_name: str
    arg_path: str
    match_class: MatchClass
    leaf_a: Leaf
    leaf_b: Leaf
    in_a: bool
    in_b: bool
    notes: tuple[str, ...] = ()
    entry_name_b: str | None = None
    arg_path_b: str | None = None
    mapped_by: str | None = None
    transpose_b: bool = False

    @property
    def name(self) -> str:
        """The row name ``<entry name>.<arg path>`` (msprobe's row naming)."""
        return f"{self.entry_name}.{self.arg_path}"

    @property
    def name_b(self) -> str:
        """B's row name (``entry_name_b`` / ``arg_path_b`` where they differ from A's)."""
        return f"{self.entry_name_b or self.entry_name}.{self.arg_path_b or self.arg_path}"


def is_uncaptured(leaf: TensorLeaf) -> bool:
    """A tensor leaf with elements but no statistics, checksum or saved file (a placeholder never filled)."""
    no_stats = all(s is None for s in leaf.stats)
    return no_stats and leaf.md5 is None and leaf.data_name is None and leaf.numel > 0


def _describe(leaf: Leaf) -> str:
    if leaf is None:
        return "null"
    if isinstance(leaf, TensorLeaf):
        return f"tensor {leaf.dtype} {list(leaf.shape)}"
    return f"{leaf.type} value"


def squeezed_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` without its size-1 dimensions (``[2, 512, 1, 1]`` → ``(2, 512)``; ``[1]`` and ``[]`` → ``()``)."""
    return tuple(d for d in shape if d != 1)


def are_shape_equivalent(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """True when two different shapes hold the same values in the same (C) order: the same shape once size-1
    dimensions are dropped (:func:`squeezed_shape`), hence the same number of elements.

    ``[2, 512]`` and ``[2, 512, 1, 1]`` (a pooled feature map one framework flattens and the other does not), ``[]``
    and ``[1]`` (a 0-d loss against a one-element tensor) are equivalent; ``[2, 6]`` and ``[3, 4]`` (another layout of
    12 elements: a reshape or another tensor, which the shapes cannot tell apart), ``[0, 3]`` and ``[0, 5]``, and
    equal shapes are not.  Dropping size-1 dimensions never moves an element, so the two flattened arrays pair element
    by element.
    """
    return tuple(shape_a) != tuple(shape_b) and squeezed_shape(shape_a) == squeezed_shape(shape_b)


def _transposed_note(recorded_by: str) -> Note:
    """The note of a gradient compared transposed: ``recorded_by`` ("A" or "B") recorded the gradient of weight.T."""
    return note("transposed", f"B's tensor is the transpose of A's ({recorded_by} recorded the gradient of weight.T): "
                "compared transposed", recorded_by=recorded_by)


def _aligned_notes(name_b: str | None) -> tuple[Note, ...]:
    """The note of a call aligned by call order with B's ``name_b`` (none when None)."""
    if not name_b:
        return ()
    return (note("aligned_by_order", f"aligned by call order with B's {name_b} (the two runs' call counts differ)",
                 name_b=name_b),)


def classify_pair(leaf_a: Leaf, leaf_b: Leaf, transpose_b: bool = False) -> tuple[MatchClass, tuple[str, ...]]:
    """Class and notes of two leaves found under the same key (both sides present).

    ``transpose_b``: B's tensor is the transpose of A's, so B's shape is compared reversed.

    Two tensors whose shapes differ only in size-1 dimensions (:func:`are_shape_equivalent`: ``[2, 512]`` against
    ``[2, 512, 1, 1]``, a 0-d scalar against ``[1]``) hold the same values in the same order: they are ``matched``
    (compared by value, flattened) with the note ``"shapes differ only in size-1 dimensions (A [2, 512], B [2, 512,
    1, 1]): compared by value"``; any other shape difference is a ``shape_mismatch``."""
    if leaf_a is None and leaf_b is None:
        return "matched", (note("null_both", "null on both sides: nothing recorded"),)
    if leaf_a is None or leaf_b is None:
        side = "A" if leaf_a is None else "B"
        return "not_captured", (note("null_one_side", f"no data recorded in {side} (null leaf)", side=side),)
    if isinstance(leaf_a, ValueLeaf) and isinstance(leaf_b, ValueLeaf):
        return "matched", ()
    if not (isinstance(leaf_a, TensorLeaf) and isinstance(leaf_b, TensorLeaf)):
        kinds = _describe(leaf_a), _describe(leaf_b)
        return "dtype_mismatch", (note("kinds_differ", f"A is a {kinds[0]}, B is a {kinds[1]}", a=kinds[0],
                                       b=kinds[1]),)
    da, db = normalize_dtype(leaf_a.dtype), normalize_dtype(leaf_b.dtype)
    shape_b = tuple(reversed(leaf_b.shape)) if transpose_b else tuple(leaf_b.shape)
    notes: list[Note] = []
    sa, sb, ta, tb = list(leaf_a.shape), list(leaf_b.shape), leaf_a.dtype, leaf_b.dtype
    if tuple(leaf_a.shape) != shape_b:
        if not are_shape_equivalent(leaf_a.shape, shape_b):
            notes = [note("shape_differs", f"shape differs: A {sa}, B {sb}", a=sa, b=sb)]
            if da != db:
                notes.append(note("dtype_differs_too", f"dtype differs too: A {ta}, B {tb}", a=ta, b=tb))
            return "shape_mismatch", tuple(notes)
        notes.append(note("size1_dims", f"shapes differ only in size-1 dimensions (A {sa}, B {sb}): compared by value",
                          a=sa, b=sb))
    if da != db:
        if not are_compatible_dtypes(da, db):
            return "dtype_mismatch", (note("dtype_differs", f"dtype differs: A {ta}, B {tb}", a=ta, b=tb),)
        how = "compared by value" if da in COMPATIBLE_INTS else "compared in float64"
        notes.append(note("compatible_dtypes", f"dtypes differ but are compatible (A {ta}, B {tb}): {how}", a=ta,
                          b=tb, how=how))
    missing = [side for side, leaf in (("A", leaf_a), ("B", leaf_b)) if is_uncaptured(leaf)]
    if missing:
        return "not_captured", (note("uncaptured_leaf", "tensor leaf without statistics, checksum or file in "
                                     f"{' and '.join(missing)}", sides=missing),)
    return "matched", tuple(notes)


#: What one side of a row holds (:meth:`RowPairs.side_kinds`' codes, the row table's ``side_kind`` codes): the row is
#: absent from that side, JSON null, a non-tensor value or a tensor.
SIDE_KINDS: tuple[str, ...] = ("absent", "null", "value", "tensor")
_ABSENT, _NULL, _VALUE, _TENSOR = range(4)
_CLASS_CODE = {c: k for k, c in enumerate(MATCH_CLASSES)}
#: The class code of a column row not classified yet (:class:`RowPairsBuilder` only).
_PENDING = 255



def row_index(i: int, n: int) -> int:
    """The row ``i`` of ``n`` rows as a non-negative index (``-1`` is the last), as a sequence reads it.

    Raises:
        IndexError: ``i`` is not in ``[-n, n)``.
    """
    k = int(i)
    if k < 0:
        k += n
    if not 0 <= k < n:
        raise IndexError(f"row {i} out of range ({n} rows)")
    return k

class RowPairs(Sequence[RowPair]):
    """The rows of a pairing (:func:`match_entries`, :func:`match_views`,
    :func:`~msprobe_cmp.comparator.fused.match_with_fused`), column-wise: row ``i`` is read as a :class:`RowPair` by
    :meth:`row` (or ``pairs[i]``), made when asked for.  Built by :class:`RowPairsBuilder` (the constructor takes the
    attributes below, the arrays by name); read-only.

    The rows :meth:`RowPairsBuilder.add_column_rows` adds (two same-named entries read from files, with the same
    argument paths) are not objects: each side's tensor leaf is a row of its file's
    :class:`~msprobe_cmp.dump.schema.LeafColumns`, given as ``(columns, row)`` by :attr:`holder` and :attr:`leaf_row`.

    Attributes (``n`` rows):
        names: the string table the name columns' codes point into.
        entry, arg_path: int32 [n], codes into :attr:`names` (:attr:`RowPair.entry_name`, :attr:`RowPair.arg_path`).
        entry_b, arg_path_b, mapped_by: int32 [n], codes into :attr:`names`, -1 for None.
        match_class: uint8 [n], indexes into :data:`MATCH_CLASSES`.
        notes: int32 [n], codes into :attr:`note_texts` (``note_texts[0] == ()``).
        in_a, in_b, transpose_b: bool [n].
        columns: the :class:`~msprobe_cmp.dump.schema.LeafColumns` objects the tensor leaves are held in.
        holder: int32 [n, 2], per side (A, B): the index in :attr:`columns` of the columns holding the side's tensor
            leaf, -1 when the side holds no tensor leaf (absent, null, a value).
        leaf_row: int64 [n, 2], per side: the tensor leaf's row in those columns (0 where ``holder`` is -1).
        objects: per side, ``{row index: leaf}`` for the rows given as :class:`RowPair` objects (the leaf as given,
            a tensor leaf too); the other rows' tensor leaves are made as views of ``(columns, row)`` when read.
    """

    __slots__ = ("arg_path", "arg_path_b", "columns", "entry", "entry_b", "holder", "in_a", "in_b", "leaf_row",
                 "mapped_by", "match_class", "names", "note_texts", "notes", "objects", "transpose_b")
    entry: np.ndarray
    arg_path: np.ndarray
    entry_b: np.ndarray
    arg_path_b: np.ndarray
    mapped_by: np.ndarray
    match_class: np.ndarray
    notes: np.ndarray
    in_a: np.ndarray
    in_b: np.ndarray
    transpose_b: np.ndarray
    holder: np.ndarray
    leaf_row: np.ndarray

    def __init__(
        self, names: Sequence[str], note_texts: Sequence[tuple[str, ...]], columns: Sequence[LeafColumns],
        objects: tuple[dict[int, Leaf], dict[int, Leaf]], **arrays: np.ndarray,
    ) -> None:
        self.names = names
        self.note_texts = note_texts
        self.columns = columns
        self.objects = objects
        for name in _ROW_PAIRS_ARRAYS:
            setattr(self, name, arrays[name])

    def __len__(self) -> int:
        return len(self.match_class)

    def leaf(self, s: int, i: int) -> Leaf:
        """Side ``s``'s (0 = A, 1 = B) leaf of row ``i`` (None where absent or null)."""
        objects = self.objects[s]
        if i in objects:
            return objects[i]
        h = int(self.holder[i, s])
        return None if h < 0 else leaf_view(self.columns[h], int(self.leaf_row[i, s]))

    def row(self, i: int) -> RowPair:
        """Row ``i`` (``0 <= i < n``) as a :class:`RowPair`."""
        names = self.names

        def name(code: int) -> str | None:
            return None if code < 0 else names[code]

        return RowPair(names[self.entry[i]], names[self.arg_path[i]], MATCH_CLASSES[self.match_class[i]],
                       self.leaf(0, i), self.leaf(1, i), bool(self.in_a[i]), bool(self.in_b[i]),
                       self.note_texts[self.notes[i]], name(int(self.entry_b[i])), name(int(self.arg_path_b[i])),
                       name(int(self.mapped_by[i])), bool(self.transpose_b[i]))

    def __getitem__(self, i: int | slice) -> RowPair | tuple[RowPair, ...]:  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self.row(k) for k in range(*i.indices(len(self))))
        return self.row(row_index(i, len(self)))

    def __iter__(self) -> Iterator[RowPair]:
        return (self.row(k) for k in range(len(self)))

    def __repr__(self) -> str:
        return f"RowPairs({len(self)} rows)"

    def name_of(self, column: str, i: int) -> str | None:
        """The text of name column ``column`` (``"entry"``, ``"entry_b"``, ...) at row ``i`` (None for -1)."""
        code = int(getattr(self, column)[i])
        return None if code < 0 else self.names[code]

    def side_kinds(self, s: int) -> np.ndarray:
        """uint8 [n]: what side ``s`` (0 = A, 1 = B) of each row holds, as :data:`SIDE_KINDS` codes (a leaf that is
        neither a tensor leaf nor None counts as a value)."""
        present = self.in_a if s == 0 else self.in_b
        kinds = np.where(self.holder[:, s] >= 0, _TENSOR, _ABSENT).astype(np.uint8)
        objects = self.objects[s]
        if objects:
            index = np.fromiter(objects, np.int64, len(objects))
            kinds[index] = np.fromiter((_NULL if leaf is None else _TENSOR if isinstance(leaf, TensorLeaf)
                                        else _VALUE for leaf in objects.values()), np.uint8, len(objects))
        kinds[~present] = _ABSENT
        return kinds

    def side_groups(self, s: int, index: np.ndarray) -> list[tuple[LeafColumns, np.ndarray, np.ndarray]]:
        """Where side ``s``'s tensor leaves of the rows ``index`` (int [m], rows whose side ``s`` is a tensor) are
        held, as :func:`~msprobe_cmp.dump.schema.leaf_row_groups` gives it: ``(columns, positions, rows)`` per
        distinct columns object, in the order of its first row, ``positions`` (int64, increasing) the positions in
        ``index`` of the rows it holds, ``rows`` their rows in it.

        Raises:
            ValueError: a row of ``index`` whose side ``s`` holds no tensor leaf.
        """
        holders = self.holder[index, s]
        if len(holders) and int(holders.min()) < 0:
            raise ValueError(f"side {s} of a row of the index holds no tensor leaf")
        rows = self.leaf_row[index, s]
        return _groups(holders, rows, self.columns)

    def with_classes(self, changes: Mapping[int, tuple[MatchClass, tuple[str, ...]]]) -> RowPairs:
        """These rows with the class and notes of the rows ``changes`` names (row index → (class, notes)) replaced
        (the other columns shared)."""
        if not changes:
            return self
        texts = Interned(*self.note_texts)
        match_class, notes = self.match_class.copy(), self.notes.copy()
        for i, (cls, row_notes) in changes.items():
            match_class[i] = _CLASS_CODE[cls]
            notes[i] = texts.code(tuple(row_notes))
        arrays = {name: getattr(self, name) for name in _ROW_PAIRS_ARRAYS}
        arrays.update(match_class=match_class, notes=notes)
        return RowPairs(self.names, texts.items, self.columns, self.objects, **arrays)

    @classmethod
    def of(cls, rows: Iterable[RowPair]) -> RowPairs:
        """The pairs of ``rows``, in order."""
        builder = RowPairsBuilder()
        builder.extend(rows)
        return builder.finish()


_ROW_PAIRS_ARRAYS = ("entry", "arg_path", "entry_b", "arg_path_b", "mapped_by", "match_class", "notes", "in_a", "in_b",
                     "transpose_b", "holder", "leaf_row")


def _groups(
    holders: np.ndarray, rows: np.ndarray, columns: Sequence[LeafColumns]
) -> list[tuple[LeafColumns, np.ndarray, np.ndarray]]:
    """``(columns[h], positions, rows[positions])`` for each distinct holder ``h`` of ``holders`` (int [m], >= 0), in
    the order of its first position; ``positions`` int64, increasing."""
    if not len(holders):
        return []
    distinct, first, inverse = np.unique(holders, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(distinct) == 1:
        return [(columns[int(distinct[0])], np.arange(len(holders), dtype=np.int64), rows.astype(np.int64))]
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(distinct))).tolist()
    groups = []
    for g in np.argsort(first).tolist():
        positions = order[bounds[g - 1] if g else 0:bounds[g]].astype(np.int64)
        groups.append((columns[int(distinct[g])], positions, rows[positions].astype(np.int64)))
    return groups


class RowPairsBuilder:
    """Gathers the rows of a pairing in order, as :class:`RowPair` objects (:meth:`append`) or as the rows of two
    entries read from files (:meth:`add_column_rows`), then makes the :class:`RowPairs` (:meth:`finish`)."""

    def __init__(self) -> None:
        self._n = 0
        self._names: Interned[str] = Interned()
        self._notes: Interned[tuple[str, ...]] = Interned(())
        self._columns: list[LeafColumns] = []
        self._holder_of: dict[int, int] = {}
        # the rows given as objects: their places, and their dense columns (entry, arg_path, class, A's holder and
        # row, B's holder and row) in that order
        self._at: list[int] = []
        self._dense: tuple[list[int], ...] = ([], [], [], [], [], [], [])
        # what only rows given as objects have (row index → value)
        self._sparse: dict[str, dict[int, int]] = {"entry_b": {}, "arg_path_b": {}, "mapped_by": {}, "notes": {}}
        self._transposed: list[int] = []
        self._absent: tuple[list[int], list[int]] = ([], [])
        self._objects: tuple[dict[int, Leaf], dict[int, Leaf]] = ({}, {})
        # the rows of add_column_rows, one block a call
        self._blocks: list[tuple[int, str, tuple[str, ...], tuple[int, ...] | None, LeafColumns, int, tuple[int, ...],
                                 LeafColumns, int, tuple[int, ...]]] = []

    def __len__(self) -> int:
        return self._n

    def _holder_code(self, cols: LeafColumns) -> int:
        h = self._holder_of.get(id(cols))
        if h is None:
            h = self._holder_of[id(cols)] = len(self._columns)
            self._columns.append(cols)
        return h

    def append(self, pair: RowPair) -> None:
        """Add one row."""
        i = self._n
        self._n += 1
        code = self._names.code
        self._at.append(i)
        entry, arg_path, classes, holder_a, row_a, holder_b, row_b = self._dense
        entry.append(code(pair.entry_name))
        arg_path.append(code(pair.arg_path))
        classes.append(_CLASS_CODE[pair.match_class])
        sparse = self._sparse
        for column, text in (("entry_b", pair.entry_name_b), ("arg_path_b", pair.arg_path_b),
                             ("mapped_by", pair.mapped_by)):
            if text is not None:
                sparse[column][i] = code(text)
        if pair.notes:
            sparse["notes"][i] = self._notes.code(tuple(pair.notes))
        if pair.transpose_b:
            self._transposed.append(i)
        for s, leaf, there, holder, row in ((0, pair.leaf_a, pair.in_a, holder_a, row_a),
                                            (1, pair.leaf_b, pair.in_b, holder_b, row_b)):
            if there or leaf is not None:
                self._objects[s][i] = leaf
            if there and isinstance(leaf, TensorLeaf):
                cols, r = leaf.columns
                holder.append(self._holder_code(cols))
                row.append(r)
            else:
                holder.append(-1)
                row.append(0)
            if not there:
                self._absent[s].append(i)

    def extend(self, pairs: Iterable[RowPair]) -> None:
        """Add rows, in order."""
        for pair in pairs:
            self.append(pair)

    def add_column_rows(
        self, name: str, paths: tuple[str, ...], order: tuple[int, ...] | None, cols_a: LeafColumns, start_a: int,
        offsets_a: tuple[int, ...], cols_b: LeafColumns, start_b: int, offsets_b: tuple[int, ...],
    ) -> None:
        """Add the rows of two entries named ``name`` whose leaves are tensor leaves of files, one row a path of
        ``paths``, in that order: the k-th row's A leaf is row ``start_a + offsets_a[order[k]]`` of ``cols_a`` (``k``
        for ``order[k]`` when ``order`` is None), its B leaf row ``start_b + offsets_b[order[k]]`` of ``cols_b``.
        Present on both sides; classified by :meth:`finish` (:func:`classify_pair`'s class and notes).  The offsets
        (as many as ``paths``) are checked by :meth:`finish`."""
        self._blocks.append((self._n, name, paths, order, cols_a, start_a, offsets_a, cols_b, start_b, offsets_b))
        self._n += len(paths)

    def extend_rows(self, pairs: RowPairs, start: int, stop: int) -> None:
        """Add rows ``start`` to ``stop`` (exclusive) of ``pairs``, in order, as objects' rows are added (their
        tensor leaves stay ``(columns, row)`` pairs)."""
        if start >= stop:
            return
        at = self._n
        self._n += stop - start
        code = self._names.code
        lookup = np.asarray([*map(code, pairs.names), -1], dtype=np.int32)  # code -1 (None) reads the last item
        window = slice(start, stop)
        self._at.extend(range(at, self._n))
        entry, arg_path, classes, holder_a, row_a, holder_b, row_b = self._dense
        entry.extend(lookup[pairs.entry[window]].tolist())
        arg_path.extend(lookup[pairs.arg_path[window]].tolist())
        classes.extend(pairs.match_class[window].tolist())
        sparse = self._sparse
        for column in ("entry_b", "arg_path_b", "mapped_by"):
            values = lookup[getattr(pairs, column)[window]]
            for k in np.flatnonzero(values >= 0).tolist():
                sparse[column][at + k] = int(values[k])
        notes = pairs.notes[window]
        for k in np.flatnonzero(notes).tolist():
            sparse["notes"][at + k] = self._notes.code(pairs.note_texts[notes[k]])
        self._transposed.extend((np.flatnonzero(pairs.transpose_b[window]) + at).tolist())
        holders = np.asarray([*map(self._holder_code, pairs.columns), -1], np.int32)
        for s, present, holder, row in ((0, pairs.in_a, holder_a, row_a), (1, pairs.in_b, holder_b, row_b)):
            holder.extend(holders[pairs.holder[window, s]].tolist())
            row.extend(pairs.leaf_row[window, s].tolist())
            self._absent[s].extend((np.flatnonzero(~present[window]) + at).tolist())
            for i, leaf in pairs.objects[s].items():
                if start <= i < stop:
                    self._objects[s][at + i - start] = leaf

    def finish(self) -> RowPairs:
        """The rows added, in order, the rows of :meth:`add_column_rows` classified (the builder is not used
        afterwards).

        Raises:
            ValueError: an :meth:`add_column_rows` call whose offsets are not one per path.
        """
        n = self._n
        i32 = np.int32
        entry, arg_path, classes = np.empty(n, i32), np.empty(n, i32), np.empty(n, np.uint8)
        holder, leaf_row = np.empty((n, 2), i32), np.empty((n, 2), np.int64)
        if self._at:
            at = np.asarray(self._at, dtype=np.int64)
            dense = self._dense
            entry[at], arg_path[at], classes[at] = dense[0], dense[1], dense[2]
            holder[at, 0], leaf_row[at, 0], holder[at, 1], leaf_row[at, 1] = dense[3], dense[4], dense[5], dense[6]
        if self._blocks:
            self._fill_blocks(entry, arg_path, classes, holder, leaf_row)
        arrays: dict[str, np.ndarray] = {"entry": entry, "arg_path": arg_path, "match_class": classes,
                                         "holder": holder, "leaf_row": leaf_row}
        for column, values in self._sparse.items():
            arr = np.full(n, 0 if column == "notes" else -1, i32)
            if values:
                arr[np.fromiter(values, np.int64, len(values))] = np.fromiter(values.values(), i32, len(values))
            arrays[column] = arr
        for column, rows in (("transpose_b", self._transposed), ("in_a", self._absent[0]), ("in_b", self._absent[1])):
            arr = np.zeros(n, bool) if column == "transpose_b" else np.ones(n, bool)
            arr[np.asarray(rows, dtype=np.int64)] = column == "transpose_b"
            arrays[column] = arr
        pairs = RowPairs(self._names.items, self._notes.items, self._columns, self._objects, **arrays)
        pending = np.flatnonzero(pairs.match_class == _PENDING)
        if len(pending):
            _classify_column_rows(pairs, pending, self._notes)
        return pairs

    def _fill_blocks(self, entry: np.ndarray, arg_path: np.ndarray, classes: np.ndarray, holder: np.ndarray,
                     leaf_row: np.ndarray) -> None:
        """Write the rows of the :meth:`add_column_rows` calls into the columns (their class pending)."""
        blocks = self._blocks
        b = len(blocks)
        name_code, holder_code = self._names.code, self._holder_code
        path_codes: dict[tuple[str, ...], tuple[int, ...]] = {}
        reordered: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}

        def codes_of(paths: tuple[str, ...]) -> tuple[int, ...]:
            got = path_codes.get(paths)
            if got is None:
                got = path_codes[paths] = tuple(map(name_code, paths))
            return got

        def in_order(offsets: tuple[int, ...], order: tuple[int, ...] | None, k: int) -> tuple[int, ...]:
            if len(offsets) != k:
                raise ValueError(f"{len(offsets)} leaf offsets for {k} paths")
            if order is None:
                return offsets
            got = reordered.get((offsets, order))
            if got is None:
                got = reordered[(offsets, order)] = tuple(map(offsets.__getitem__, order))
            return got

        ats = np.fromiter((blk[0] for blk in blocks), np.int64, b)
        ks = np.fromiter((len(blk[2]) for blk in blocks), np.int64, b)
        total = int(ks.sum())
        # block j's rows are ats[j] + 0, 1, ..., ks[j] - 1
        positions = np.repeat(ats - (np.cumsum(ks) - ks), ks) + np.arange(total, dtype=np.int64)
        entry[positions] = np.repeat(np.fromiter((name_code(blk[1]) for blk in blocks), np.int64, b), ks)
        arg_path[positions] = np.fromiter(chain.from_iterable([codes_of(blk[2]) for blk in blocks]), np.int64, total)
        classes[positions] = _PENDING
        sides = (([blk[4] for blk in blocks], [blk[5] for blk in blocks], [blk[6] for blk in blocks]),
                 ([blk[7] for blk in blocks], [blk[8] for blk in blocks], [blk[9] for blk in blocks]))
        for s, (held, starts, offsets) in enumerate(sides):
            holder[positions, s] = np.repeat(np.fromiter(map(holder_code, held), np.int64, b), ks)
            ordered = chain.from_iterable([in_order(o, blk[3], len(blk[2]))
                                           for o, blk in zip(offsets, blocks, strict=True)])
            leaf_row[positions, s] = (np.repeat(np.asarray(starts, dtype=np.int64), ks)
                                      + np.fromiter(ordered, np.int64, total))


def _classify_column_rows(pairs: RowPairs, index: np.ndarray, notes: Interned[tuple[str, ...]]) -> None:
    """Class and notes of the rows ``index`` (int64 [m], two tensor leaves of files), written into ``pairs``' columns
    (its ``note_texts`` is ``notes.items``): two captured tensors of one dtype and one shape (their texts through
    each file's tables) are ``matched`` without notes, read column-wise; any other row is classified by
    :func:`classify_pair` (no transpose) on its two leaves."""
    m = len(index)
    dtypes: Interned[str] = Interned()
    shapes: Interned[tuple[int, ...]] = Interned()
    facts = []
    for s in (0, 1):
        dtype = np.empty(m, np.int64)
        shape = np.empty(m, np.int64)
        captured = np.empty(m, bool)
        for cols, positions, rows in pairs.side_groups(s, index):
            codes, inverse = np.unique(cols.code_array("dtype_code")[rows], return_inverse=True)
            shared = np.fromiter((dtypes.code(cols.strings[c]) for c in codes.tolist()), np.int64, len(codes))
            dtype[positions] = shared[inverse.reshape(-1)]
            codes, inverse = np.unique(cols.code_array("shape_code")[rows], return_inverse=True)
            inverse = inverse.reshape(-1)
            shared = np.fromiter((shapes.code(cols.shapes[c]) for c in codes.tolist()), np.int64, len(codes))
            empty = np.fromiter((0 in cols.shapes[c] for c in codes.tolist()), bool, len(codes))
            shape[positions] = shared[inverse]
            # is_uncaptured: elements, but no statistic, checksum or file
            captured[positions] = (empty[inverse] | cols.defined_array()[rows].any(axis=1)
                                   | (cols.code_array("md5_code")[rows] >= 0)
                                   | (cols.code_array("data_name_code")[rows] >= 0))
        facts.append((dtype, shape, captured))
    (dtype_a, shape_a, captured_a), (dtype_b, shape_b, captured_b) = facts
    plain = (dtype_a == dtype_b) & (shape_a == shape_b) & captured_a & captured_b
    pairs.match_class[index[plain]] = _CLASS_CODE["matched"]
    pairs.notes[index[plain]] = 0
    for i in index[~plain].tolist():
        cls, row_notes = classify_pair(pairs.leaf(0, i), pairs.leaf(1, i))
        pairs.match_class[i] = _CLASS_CODE[cls]
        pairs.notes[i] = notes.code(row_notes)


class EntryLike(Protocol):
    """What the alignment needs of an entry: an :class:`~msprobe_cmp.dump.schema.Entry` or an
    :class:`~msprobe_cmp.comparator.mapping.EntryView`."""

    @property
    def name(self) -> str:
        """The entry name."""
        ...

    def leaves(self) -> Iterator[tuple[str, Leaf]]:
        """``(argument path, leaf)`` pairs."""
        ...

    @property
    def is_parameters_grad(self) -> bool:
        """True for a parameters_grad entry."""
        ...


E = TypeVar("E", bound=EntryLike)


def execution_order(entries: Sequence[E]) -> list[E]:
    """``entries`` with each ``parameters_grad`` entry moved to where its gradients were computed.

    Args:
        entries: the entries of one dump.json, in file order.

    Returns:
        The same entries; a ``<stem>.parameters_grad`` entry now stands right before the first
        ``<stem>.backward.<n>`` entry, or last when there is none (module docstring).
    """
    if not any("parameters_grad" in entry.name for entry in entries):
        return list(entries)  # no parameters_grad entry (parse_name gives that kind only to such names)
    backward_at: dict[str, int] = {}
    names = [parse_name(entry.name) for entry in entries]
    for i, parsed in enumerate(names):
        if parsed.kind == "cell" and parsed.direction == "backward":
            backward_at.setdefault(parsed.stem, i)
    if not any(parsed.kind == "parameters_grad" for parsed in names):
        return list(entries)  # nothing moves: the sort below would keep file order
    keyed: list[tuple[float, int, E]] = []
    for i, entry in enumerate(entries):
        rank: float = i
        parsed = names[i]
        if parsed.kind == "parameters_grad":
            rank = backward_at.get(parsed.stem, len(entries)) - 0.5
        keyed.append((rank, i, entry))
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [e for _, _, e in keyed]


def _causal_leaves(entry: EntryLike) -> list[tuple[str, Leaf]]:
    """An entry's leaves with outputs last (inputs, kwargs and parameters first), else in file order."""
    leaves = list(entry.leaves())
    if entry.is_parameters_grad:
        return leaves
    return [x for x in leaves if not x[0].startswith("output")] + [x for x in leaves if x[0].startswith("output")]


def _shape_signature(entry: EntryLike) -> tuple[object, ...]:
    """The entry's leaves as ``(path, shape or value type)``: what tells two calls of one API apart."""
    sig: list[object] = []
    for path, leaf in entry.leaves():
        if path.startswith((INTERMEDIATE, UNMAPPED)):
            continue  # a mapping's leftovers: what the other framework never has
        if isinstance(leaf, TensorLeaf):
            sig.append((path, leaf.shape))
        elif isinstance(leaf, ValueLeaf):
            sig.append((path, leaf.type))
        else:
            sig.append((path, None))
    return tuple(sig)


def _loose_key(entry: EntryLike) -> tuple[str, str, str | None]:
    """What must be equal for two entries to be the same call up to its index: kind, stem, direction."""
    parsed = parse_name(entry.name)
    if parsed.kind == "other":
        return ("other", entry.name, None)
    return (parsed.kind, parsed.stem, parsed.direction)


EntryPair = tuple[Entry | None, Entry | None]
_Pair = tuple[E | None, E | None]


#: Above this many (A × B) entry pairs in a stretch that differs, the stretch is aligned by
#: :func:`_resync_opcodes` (linear) instead of difflib's matcher (quadratic on the repetitive keys of
#: training dumps).
MAX_ALIGN_CELLS = 4_000_000
#: :func:`_resync_opcodes`: how far ahead (calls, on each side) to look for the point where the two
#: sequences agree again, and how many calls must agree there.
RESYNC_WINDOW = 64
RESYNC_CONTEXT = 4

Opcode = tuple[str, int, int, int, int]


def _agree(keys_a: Sequence[object], keys_b: Sequence[object], i: int, j: int, context: int) -> bool:
    for k in range(context):
        if i + k >= len(keys_a) or j + k >= len(keys_b):
            return k > 0 or (i + k >= len(keys_a) and j + k >= len(keys_b))
        if keys_a[i + k] != keys_b[j + k]:
            return False
    return True


def _resync_opcodes(keys_a: Sequence[object], keys_b: Sequence[object]) -> list[Opcode]:
    """Align two long key sequences in linear time: walk both while they agree; where they differ,
    find the nearest point ``(i + p, j + q)`` (smallest ``p + q``, both below :data:`RESYNC_WINDOW`)
    where :data:`RESYNC_CONTEXT` keys agree again, and call what was skipped a differing stretch.

    Returns difflib-style opcodes: ``("equal" | "differ", i1, i2, j1, j2)``.
    """
    n, m = len(keys_a), len(keys_b)
    i = j = 0
    ops: list[Opcode] = []
    while i < n and j < m:
        if keys_a[i] == keys_b[j]:
            i0, j0 = i, j
            while i < n and j < m and keys_a[i] == keys_b[j]:
                i, j = i + 1, j + 1
            ops.append(("equal", i0, i, j0, j))
            continue
        found: tuple[int, int] | None = None
        for total in range(1, 2 * RESYNC_WINDOW - 1):
            for p in range(max(0, total - RESYNC_WINDOW + 1), min(total, RESYNC_WINDOW - 1) + 1):
                q = total - p
                if i + p < n and j + q < m and _agree(keys_a, keys_b, i + p, j + q, RESYNC_CONTEXT):
                    found = (p, q)
                    break
            if found:
                break
        p, q = found if found else (min(RESYNC_WINDOW, n - i), min(RESYNC_WINDOW, m - j))
        ops.append(("differ", i, i + p, j, j + q))
        i, j = i + p, j + q
    if i < n or j < m:
        ops.append(("differ", i, n, j, m))
    return ops


#: One stretch of an alignment, over indices into the two sequences: ``("pairs", [(i, j), ...])`` (aligned
#: calls) or ``("gap", [i, ...], [j, ...])`` (calls of A and of B the alignment has not paired yet).
_Segment = list


def _segments(
    ia: Sequence[int], ib: Sequence[int], keys_a: Sequence[object], keys_b: Sequence[object]
) -> list[_Segment]:
    """Align the calls ``ia`` of A with the calls ``ib`` of B (indices into ``keys_a`` / ``keys_b``) on their keys:
    common prefix and suffix first, then difflib's matcher, or :func:`_resync_opcodes` on a stretch larger than
    :data:`MAX_ALIGN_CELLS`.  Returns the aligned stretches and the gaps between them, in order."""
    ka, kb = [keys_a[i] for i in ia], [keys_b[j] for j in ib]
    lo = 0
    while lo < len(ka) and lo < len(kb) and ka[lo] == kb[lo]:
        lo += 1
    hi_a, hi_b = len(ka), len(kb)
    while hi_a > lo and hi_b > lo and ka[hi_a - 1] == kb[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    out: list[_Segment] = []
    if lo:
        out.append(["pairs", list(zip(ia[:lo], ib[:lo], strict=True))])
    mid_a, mid_b = ka[lo:hi_a], kb[lo:hi_b]
    opcodes: list[Opcode]
    if not mid_a or not mid_b:
        opcodes = [("differ", 0, len(mid_a), 0, len(mid_b))] if mid_a or mid_b else []
    elif len(mid_a) * len(mid_b) > MAX_ALIGN_CELLS:
        opcodes = _resync_opcodes(mid_a, mid_b)
    else:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        opcodes = [(tag, *rest) for tag, *rest in matcher.get_opcodes()]  # type: ignore[misc]
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            out.append(["pairs", list(zip(ia[lo + i1:lo + i2], ib[lo + j1:lo + j2], strict=True))])
        else:
            out.append(["gap", list(ia[lo + i1:lo + i2]), list(ib[lo + j1:lo + j2])])
    if hi_a < len(ka):
        out.append(["pairs", list(zip(ia[hi_a:], ib[hi_b:], strict=True))])
    return out


def _pair_gaps_by_name(
    gaps: Sequence[_Segment], a: Sequence[EntryLike], b: Sequence[EntryLike], named: dict[int, int],
    keys: tuple[Sequence[object], Sequence[object]] | None,
) -> None:
    """Pair calls left in ``gaps`` (of any gap, so across the alignment's order) whose entry names are equal and
    unique among them, and, when ``keys`` is given, whose keys are equal too; record them in ``named`` (A index →
    B index) and take them out of the gaps."""
    lone_a: dict[str, list[int]] = {}
    lone_b: dict[str, list[int]] = {}
    for _, ga, gb in gaps:
        for i in ga:
            lone_a.setdefault(a[i].name, []).append(i)
        for j in gb:
            lone_b.setdefault(b[j].name, []).append(j)
    found: dict[int, int] = {}
    for name, ia in lone_a.items():
        jb = lone_b.get(name)
        if len(ia) == 1 and jb is not None and len(jb) == 1 and (keys is None or keys[0][ia[0]] == keys[1][jb[0]]):
            found[ia[0]] = jb[0]
    if not found:
        return
    named.update(found)
    taken_b = set(found.values())
    for gap in gaps:
        gap[1] = [i for i in gap[1] if i not in found]
        gap[2] = [j for j in gap[2] if j not in taken_b]


def _repair_crossed_names(
    segments: list[_Segment], a: Sequence[EntryLike], b: Sequence[EntryLike], named: dict[int, int],
    keys_a: Sequence[object], keys_b: Sequence[object],
) -> None:
    """Undo what the order-keeping alignment does to calls of one key written in another order: it pairs A's
    ``x.4`` with B's ``x.5`` and leaves A's ``x.5`` and B's ``x.4`` alone (or pairs them with each other).  A pair
    whose names differ is re-paired by name when A's call has its namesake in B and B's call its namesake in A,
    with equal keys crosswise, and those two namesakes are both unpaired or paired with each other; the new pairs
    go to ``named`` and leave ``segments``.  A shifted call index (one side made an extra call) never forms such
    a cross, so it stays aligned by order."""
    pairs = [(i, j) for seg in segments if seg[0] == "pairs" for i, j in seg[1] if a[i].name != b[j].name]
    if not pairs:
        return
    index_a = {e.name: i for i, e in enumerate(a)}
    index_b = {e.name: j for j, e in enumerate(b)}
    partner_a: dict[int, int] = {}
    partner_b: dict[int, int] = {}
    for seg in segments:
        if seg[0] == "pairs":
            for i, j in seg[1]:
                partner_a[i], partner_b[j] = j, i
    found: dict[int, int] = {}
    taken_b: set[int] = set()
    for i, j in pairs:
        j2, i2 = index_b.get(a[i].name), index_a.get(b[j].name)
        if j2 is None or i2 is None or keys_a[i] != keys_b[j2] or keys_a[i2] != keys_b[j]:
            continue
        if {i, i2} & found.keys() or {j, j2} & taken_b:
            continue
        if (j2 not in partner_b and i2 not in partner_a) or partner_a.get(i2) == j2:
            found[i], found[i2] = j2, j
            taken_b.update((j, j2))
    if not found:
        return
    named.update(found)
    for seg in segments:
        if seg[0] == "pairs":
            seg[1] = [(i, j) for i, j in seg[1] if i not in found and j not in taken_b]
        else:
            seg[1] = [i for i in seg[1] if i not in found]
            seg[2] = [j for j in seg[2] if j not in taken_b]


def _align_block(
    a: Sequence[E], b: Sequence[E], strict: bool,
    signatures: tuple[Callable[[E], object], Callable[[E], object]] | None = None,
) -> list[_Pair[E]]:
    """Align two call sequences (see :func:`align_entries`); ``strict=False`` aligns on (kind, stem, direction)
    alone.  ``signatures``: each side's function giving an entry's argument shapes (default
    :func:`_shape_signature`)."""
    loose_a, loose_b = [_loose_key(e) for e in a], [_loose_key(e) for e in b]
    if not strict:
        return _as_entries(a, b, _loose_pairs(range(len(a)), range(len(b)), loose_a, loose_b))
    sig_a, sig_b = signatures or (_shape_signature, _shape_signature)
    keys_a = [(k, sig_a(e)) for k, e in zip(loose_a, a, strict=True)]
    keys_b = [(k, sig_b(e)) for k, e in zip(loose_b, b, strict=True)]
    segments = _segments(range(len(a)), range(len(b)), keys_a, keys_b)
    named: dict[int, int] = {}
    # 0. Calls of one key the order-keeping alignment paired across their names although each has its namesake
    #    free (or the two pairs cross): paired by name instead.
    _repair_crossed_names(segments, a, b, named, keys_a, keys_b)
    # 1. The same call (same name and shapes) the two runs made in another order (autograd visiting nodes in
    #    another order): paired by name wherever it stands.
    _pair_gaps_by_name([s for s in segments if s[0] == "gap"], a, b, named, (keys_a, keys_b))
    # 2. Inside each gap, calls whose shapes agree (a long gap cut by the linear resynchronisation may hold some).
    refined: list[_Segment] = []
    for seg in segments:
        if seg[0] == "gap" and seg[1] and seg[2] and len(seg[1]) * len(seg[2]) <= MAX_ALIGN_CELLS:
            refined.extend(_segments(seg[1], seg[2], keys_a, keys_b))
        else:
            refined.append(seg)
    # 3. The same name whose shapes differ (a shape mismatch to report), wherever it stands.
    _pair_gaps_by_name([s for s in refined if s[0] == "gap"], a, b, named, None)
    # 4. Only then, inside each gap, the same call up to its shapes by position (a shape mismatch to report).
    pairs: list[tuple[int | None, int | None]] = []
    for seg in refined:
        if seg[0] == "pairs":
            pairs.extend(seg[1])
        else:
            pairs.extend(_loose_pairs(seg[1], seg[2], loose_a, loose_b))
    if named:  # a pair taken out of order stands at A's position
        pending = sorted(named.items())
        k = 0
        merged: list[tuple[int | None, int | None]] = []
        for i, j in pairs:
            if i is not None:
                while k < len(pending) and pending[k][0] < i:
                    merged.append(pending[k])
                    k += 1
            merged.append((i, j))
        merged.extend(pending[k:])
        pairs = merged
    return _as_entries(a, b, _follow_forward_pairs(pairs, a, b))


def _backward_twin(name: str) -> str | None:
    """The backward entry name of a forward call (``X.3.forward`` → ``X.3.backward``, ``Module.m.C.forward.0`` →
    ``Module.m.C.backward.0``), or None when ``name`` is no forward call."""
    if name.endswith(".forward"):
        return name[: -len("forward")] + "backward"
    head, sep, tail = name.rpartition(".forward.")
    if sep and tail.isdigit():
        return f"{head}.backward.{tail}"
    return None


def _follow_forward_pairs(
    pairs: list[tuple[int | None, int | None]], a: Sequence[EntryLike], b: Sequence[EntryLike]
) -> list[tuple[int | None, int | None]]:
    """A backward entry carries its forward call's index: when the alignment paired A's forward call with a B call
    of another name (a call index shifted by a call one run made and the other did not), A's backward entry pairs
    with that B call's backward entry, not with its namesake (another call).  Partners this takes away stay
    unpaired; the pair stands at A's position."""
    want: dict[int, int] = {}
    index_a: dict[str, int] | None = None
    index_b: dict[str, int] = {}
    for i, j in pairs:
        if i is None or j is None or a[i].name == b[j].name:
            continue
        twin_a, twin_b = _backward_twin(a[i].name), _backward_twin(b[j].name)
        if twin_a is None or twin_b is None:
            continue
        if index_a is None:
            index_a = {e.name: k for k, e in enumerate(a)}
            index_b = {e.name: k for k, e in enumerate(b)}
        ia, jb = index_a.get(twin_a), index_b.get(twin_b)
        if ia is not None and jb is not None:
            want[ia] = jb
    if not want:
        return pairs
    taken_b = set(want.values())
    out: list[tuple[int | None, int | None]] = []
    for i, j in pairs:
        if i is not None and i in want:
            out.append((i, want[i]))
            if j is not None and j not in taken_b:
                out.append((None, j))
        elif j is not None and j in taken_b:
            if i is not None:
                out.append((i, None))
        else:
            out.append((i, j))
    return out


def _loose_pairs(
    ia: Sequence[int], ib: Sequence[int], loose_a: Sequence[object], loose_b: Sequence[object]
) -> list[tuple[int | None, int | None]]:
    """Align calls ``ia`` of A with ``ib`` of B on (kind, stem, direction) alone; what stays apart is unpaired."""
    out: list[tuple[int | None, int | None]] = []
    for seg in _segments(ia, ib, loose_a, loose_b):
        if seg[0] == "pairs":
            out.extend(seg[1])
        else:
            out.extend((i, None) for i in seg[1])
            out.extend((None, j) for j in seg[2])
    return out


def _as_entries(a: Sequence[E], b: Sequence[E], pairs: Iterable[tuple[int | None, int | None]]) -> list[_Pair[E]]:
    return [(None if i is None else a[i], None if j is None else b[j]) for i, j in pairs]


def align_entries(
    entries_a: Sequence[E], entries_b: Sequence[E], *,
    signatures: tuple[Callable[[E], object], Callable[[E], object]] | None = None,
) -> list[_Pair[E]]:
    """Pair the entries of two dumps as calls, in execution order (:func:`execution_order`).

    When both sides hold the same entry names in the same order (the usual case) entries pair by
    name.  Otherwise the two call sequences are aligned, so that a call made on one side only (a
    branch taken in one run) shows as unpaired instead of shifting the call index of every later
    call of that API.  In this order:

    1. on the key (kind, name without index, direction, argument shapes), in order: difflib's
       ``SequenceMatcher`` (Ratcliff/Obershelp matching blocks), which on call sequences that mostly
       agree gives their longest common subsequence; the common prefix and suffix are paired first, and a
       differing stretch larger than :data:`MAX_ALIGN_CELLS` (A entries × B entries) is aligned in linear
       time by :func:`_resync_opcodes`;
    2. calls left over on both sides with the same entry name and the same key, wherever they stand (two runs
       whose autograd visits nodes in another order write the same backward entries in another order);
    3. inside each stretch that differs, calls with the same key (what a long stretch cut by the linear
       resynchronisation may still hold);
    4. calls left over with the same entry name, wherever they stand (their shapes differ:
       ``shape_mismatch``);
    5. inside each stretch that differs, calls with the same (kind, name without index, direction), by
       position: calls whose shapes differ (``shape_mismatch``), only where nothing above paired them.

    A pair taken out of order (2, 4) stands at A's position.

    Entries may be :class:`~msprobe_cmp.comparator.mapping.EntryView` objects (two frameworks' entries
    in one canonical namespace): the same alignment then runs on the canonical names.

    Args:
        entries_a, entries_b: the two sides' entries, in file order.
        signatures: A's and B's function giving an entry's argument shapes for the key (default
            :func:`_shape_signature`); :func:`match_entries` passes shapes with backward outputs put in
            positional form.

    Returns:
        ``(entry of A or None, entry of B or None)`` pairs; every entry of each side appears once.
    """
    a, b = execution_order(entries_a), execution_order(entries_b)
    if [e.name for e in a] == [e.name for e in b]:
        return list(zip(a, b, strict=True))
    return _align_block(a, b, strict=True, signatures=signatures)


def _forward_name(backward_name: str) -> str | None:
    """``Functional.linear.3.backward`` → ``Functional.linear.3.forward``; None for any other kind of name."""
    if backward_name.endswith(".backward"):
        return backward_name[: -len("backward")] + "forward"
    return None


#: Where each ``output.<k>`` leaf of an API backward entry belongs: ``{path: ("output.<input index>", transposed)}``.
_Positions = dict[str, tuple[str, bool]]


def _gradient_positions(bwd: Entry, fwd: Entry | None) -> _Positions | None:
    """Assign each gradient of an API backward entry's ``output`` list to the forward input it belongs to, by shape
    (:func:`~msprobe_cmp.comparator.mapping.canonical.resolve_gradients`: positional when every shape agrees, else
    the reverse order, else by shape, a 2-D gradient possibly transposed; ``Functional.linear``'s node order
    (bias, input, weight.T) as msprobe 1.2.2's PyTorch dumps list it).

    Returns:
        ``{"output.<k>": ("output.<forward input index>", transposed)}``, or None when the forward entry is
        unknown, the outputs are nested, or a gradient fits none of the forward inputs.
    """
    if fwd is None:
        return None
    outs = [(p, leaf) for p, leaf in bwd.leaves() if p.startswith("output")]
    if not outs or any(not (p.startswith("output.") and p[7:].isdigit()) for p, _ in outs):
        return None
    grads = [tuple(leaf.shape) if isinstance(leaf, TensorLeaf) else None for _, leaf in outs]
    shapes = forward_input_shapes(fwd)
    if len(grads) <= len(shapes) and all(g is None or g == shapes[k] for k, g in enumerate(grads)):
        return {p: (p, False) for p, _ in outs}  # positional (what resolve_gradients tries first), the usual case
    found = resolve_gradients(shapes, grads)
    if found is None:
        return None
    node_order = NODE_GRADIENT_ORDER.get(bwd.name.rsplit(".", 2)[0])  # "<stem>.<n>.backward"
    if node_order is not None and [j for j, _ in found] == [j for j, _ in node_order]:
        found = list(node_order)
    return {p: (f"output.{j}", transposed) for (p, _), (j, transposed) in zip(outs, found, strict=True)}


def _is_positional(positions: _Positions) -> bool:
    return all(path == canonical and not transposed for path, (canonical, transposed) in positions.items())


def _entry_signature(forward: Mapping[str, Entry]) -> Callable[[Entry], object]:
    """The alignment key's shapes for one side's entries (``forward``: that side's entries by name): tensor shapes
    and value types by argument path, null leaves left out (one recorder writes a null where the other writes
    nothing), an API backward's gradients under the forward input they belong to (:func:`_gradient_positions`)."""

    def signature(entry: Entry) -> object:
        forward_name = _forward_name(entry.name)
        positions = _gradient_positions(entry, forward.get(forward_name)) if forward_name else None
        sig: list[tuple[str, object]] = []
        for path, leaf in entry.leaves():
            if leaf is None:
                continue
            transposed = False
            if positions is not None and path in positions:
                path, transposed = positions[path]
            if isinstance(leaf, TensorLeaf):
                sig.append((path, tuple(reversed(leaf.shape)) if transposed else tuple(leaf.shape)))
            else:
                sig.append((path, leaf.type))
        sig.sort(key=lambda item: item[0])
        return tuple(sig)

    return signature


def _outputs_agree(ea: Entry, eb: Entry) -> bool:
    """Both entries' ``output`` leaves have the same paths, in the same order, each pair both null, both values, or
    two tensors of one shape (so pairing them by position is what pairing them by forward input gives)."""
    return _output_kinds(ea) == _output_kinds(eb)


def _output_kinds(entry: Entry) -> list[tuple[str, type, tuple[int, ...] | None]]:
    """``(path, the leaf's type, its shape or None when it is no tensor leaf)`` of each ``output`` leaf of ``entry``,
    in file order.  The shapes of an entry whose leaves are all tensor leaves of its file are read from the file's
    columns (:meth:`~msprobe_cmp.dump.schema.Entry.leaf_rows`: no leaf made)."""
    paths = entry.paths()
    cols, start, offsets = entry.leaf_rows()
    if cols is not None and len(offsets) == len(paths):
        shapes, codes = cols.shapes, cols.shape_code
        return [(p, TensorLeaf, shapes[codes[start + o]]) for p, o in zip(paths, offsets, strict=True)
                if p.startswith("output")]
    return [(p, type(leaf), tuple(leaf.shape) if isinstance(leaf, TensorLeaf) else None)
            for p, leaf in entry.leaves() if p.startswith("output")]


def _backward_rows(
    ea: Entry, eb: Entry, fa: Entry | None, fb: Entry | None, name_b: str | None, aligned: tuple[Note, ...]
) -> list[RowPair] | None:
    """The rows of two API backward entries whose gradients (``output``) are listed differently, paired by the
    forward input each belongs to (:func:`_gradient_positions`), or None when pairing by position is right.

    msprobe 1.2.2's PyTorch backward drops the null gradients and lists ``Functional.linear``'s as (bias, input,
    weight.T); msprobe-cmp's recorder lists one per forward input.  When one side's gradients fit none of its
    forward inputs (msprobe 1.2.2 records the gradients of an API's last autograd node, e.g. a ``[16, 64]`` view of
    a 3-D ``linear``'s output gradient) and pairing by position would pair tensors of different shapes, those
    gradients and the other side's are reported unpaired, each with the reason, never as a shape mismatch."""
    if _outputs_agree(ea, eb):
        return None
    pa, pb = _gradient_positions(ea, fa), _gradient_positions(eb, fb)
    if pa is not None and pb is not None and _is_positional(pa) and _is_positional(pb):
        return None
    outs_a = [(p, leaf) for p, leaf in ea.leaves() if p.startswith("output")]
    outs_b = [(p, leaf) for p, leaf in eb.leaves() if p.startswith("output")]
    if pa is None or pb is None:
        if (pa is None and pb is None) or (fa if pa is None else fb) is None:
            return None  # neither resolves, or the side that does not has no forward entry to tell why
        at_b = dict(outs_b)
        if not any(isinstance(la, TensorLeaf) and isinstance(lb, TensorLeaf) and tuple(la.shape) != tuple(lb.shape)
                   for p, la in outs_a for lb in [at_b.get(p)]):
            return None  # by position every shape agrees: keep it
    name = ea.name
    rows: list[RowPair] = []
    leaves_b = [(key, leaf) for key, leaf in _keyed_leaves(eb) if not key[0].startswith("output")]
    by_key_b = dict(leaves_b)
    seen: set[tuple[str, int]] = set()
    for key, leaf_a in _keyed_leaves(ea):
        if key[0].startswith("output"):
            continue
        seen.add(key)
        if key in by_key_b:
            cls, notes = classify_pair(leaf_a, by_key_b[key])
            rows.append(RowPair(name, key[0], cls, leaf_a, by_key_b[key], True, True, aligned + notes, name_b))
        else:
            rows.append(RowPair(name, key[0], "only_in_a", leaf_a, None, True, False, aligned, name_b))
    taken_b: set[str] = set()
    if pa is not None and pb is not None:
        canonical_b = {pb[p][0]: (p, leaf, pb[p][1]) for p, leaf in outs_b}
        for path_a, leaf_a in outs_a:
            canonical, transposed_a = pa[path_a]
            hit = canonical_b.get(canonical)
            if hit is None:
                rows.append(RowPair(name, path_a, "only_in_a", leaf_a, None, True, False, aligned, name_b))
                continue
            path_b, leaf_b, transposed_b = hit
            taken_b.add(path_b)
            transpose = transposed_a != transposed_b
            cls, notes = classify_pair(leaf_a, leaf_b, transpose)
            extra: tuple[str, ...] = ()
            if path_a != path_b or path_a != canonical:
                extra += (note("grad_by_forward_input", "backward outputs paired by the forward input they are the "
                               f"gradient of ({canonical}: A's {path_a}, B's {path_b})", canonical=canonical,
                               path_a=path_a, path_b=path_b),)
            if transpose:
                extra += (_transposed_note("A" if transposed_a else "B"),)
            rows.append(RowPair(name, path_a, cls, leaf_a, leaf_b, True, True, aligned + extra + notes, name_b,
                                path_b if path_b != path_a else None, None, transpose))
    else:
        forward = _forward_name(name)
        unresolved = fa if pa is None else fb
        assert unresolved is not None  # checked above
        shapes = [list(s) if s is not None else None for s in forward_input_shapes(unresolved)]
        side = "A" if pa is None else "B"
        why = note("grads_fit_no_input", f"{side}'s backward gradients fit none of {forward}'s inputs (shapes "
                   f"{shapes}): they are not gradients w.r.t. its inputs (msprobe 1.2.2's PyTorch dumps record the "
                   "gradients of the last autograd node of an API made of several), so no gradient pairs",
                   side=side, forward=forward, shapes=shapes)
        for path_a, leaf_a in outs_a:
            rows.append(RowPair(name, path_a, "only_in_a", leaf_a, None, True, False, (*aligned, why), name_b))
        for path_b, leaf_b in outs_b:
            taken_b.add(path_b)
            rows.append(RowPair(name, path_b, "only_in_b", None, leaf_b, False, True, (*aligned, why), name_b))
    for key, leaf_b in leaves_b:
        if key not in seen:
            rows.append(RowPair(name, key[0], "only_in_b", None, leaf_b, False, True, aligned, name_b))
    for path_b, leaf_b in outs_b:
        if path_b not in taken_b:
            rows.append(RowPair(name, path_b, "only_in_b", None, leaf_b, False, True, aligned, name_b))
    return rows


def match_entries(entries_a: Sequence[Entry], entries_b: Sequence[Entry]) -> RowPairs:
    """Pair and classify the rows of two entry sequences.

    Entries are paired as calls by :func:`align_entries` (its key's shapes leave out null leaves and put an API
    backward's gradients under the forward input they belong to, so that msprobe's and msprobe-cmp's backward
    entries of one call have one key); inside a pair of entries, rows pair by argument path, except the
    gradients (``output``) of two API backward entries listed differently (msprobe 1.2.2's PyTorch order, nulls
    dropped), which pair by the forward input they belong to (:func:`_backward_rows`: ``arg_path_b`` names B's
    path, ``transpose_b`` a gradient of ``weight.T``).  A row whose entry was aligned with a B entry of another
    name (its call index shifted) carries that name in :attr:`RowPair.entry_name_b` and a note.

    Two entries of one name whose argument paths are the same (:func:`_same_paths`) and whose leaves are all tensor
    leaves of files (:meth:`~msprobe_cmp.dump.schema.Entry.leaf_rows`) give their rows as ``(columns, row)`` pairs,
    classified column-wise (:class:`RowPairsBuilder`); every other row is made as a :class:`RowPair`.

    Args:
        entries_a: the target's entries, in file order.
        entries_b: the baseline's entries, in file order.

    Returns:
        One row per row of either side, in execution order (module docstring).
    """
    out = RowPairsBuilder()
    append = out.append
    forward_a = {e.name: e for e in entries_a}
    forward_b = {e.name: e for e in entries_b}
    signatures = (_entry_signature(forward_a), _entry_signature(forward_b))
    for ea, eb in align_entries(entries_a, entries_b, signatures=signatures):
        if (ea is not None and eb is not None and ea.name.endswith(".backward") and eb.name.endswith(".backward")
                and not _outputs_agree(ea, eb)):
            name_b = eb.name if eb.name != ea.name else None
            aligned = _aligned_notes(name_b)
            rows = _backward_rows(ea, eb, forward_a.get(_forward_name(ea.name) or ""),
                                  forward_b.get(_forward_name(eb.name) or ""), name_b, aligned)
            if rows is not None:
                out.extend(rows)
                continue
        if ea is not None and eb is not None and ea.name == eb.name:
            same = _same_paths(ea, eb)
            if same is not None:
                # Both entries hold the same argument paths, once each, in the same order: row k of A pairs with
                # row k of B, which is what the keyed pairing below gives (and no B row is left over).
                paths, order = same
                name = ea.name
                cols_a, start_a, offsets_a = ea.leaf_rows()
                cols_b, start_b, offsets_b = eb.leaf_rows()
                if (cols_a is not None and cols_b is not None and len(offsets_a) == len(paths)
                        and len(offsets_b) == len(paths)):  # every leaf a tensor leaf of the files
                    out.add_column_rows(name, paths, order, cols_a, start_a, offsets_a, cols_b, start_b, offsets_b)
                    continue
                flat_a, flat_b = ea.flat()[1], eb.flat()[1]
                if order is not None:
                    flat_a = tuple(map(flat_a.__getitem__, order))
                    flat_b = tuple(map(flat_b.__getitem__, order))
                for path, leaf_a, leaf_b in zip(paths, flat_a, flat_b, strict=True):
                    cls, notes = _classify_same(leaf_a, leaf_b)
                    append(RowPair(name, path, cls, leaf_a, leaf_b, True, True, notes))
                continue
        leaves_a = _keyed_leaves(ea)
        leaves_b = dict(_keyed_leaves(eb))
        name = ea.name if ea is not None else eb.name  # type: ignore[union-attr]
        name_b = eb.name if ea is not None and eb is not None and eb.name != ea.name else None
        aligned = _aligned_notes(name_b)
        seen: set[tuple[str, int]] = set()
        for key, leaf_a in leaves_a:
            seen.add(key)
            path = key[0]
            if key in leaves_b:
                cls, notes = classify_pair(leaf_a, leaves_b[key])
                append(RowPair(name, path, cls, leaf_a, leaves_b[key], True, True, aligned + notes, name_b))
            else:
                append(RowPair(name, path, "only_in_a", leaf_a, None, True, False, aligned, name_b))
        for key, leaf_b in _keyed_leaves(eb):
            if key not in seen:
                append(RowPair(name, key[0], "only_in_b", None, leaf_b, False, True, aligned, name_b))
    return out.finish()


_MATCHED: tuple[MatchClass, tuple[str, ...]] = ("matched", ())


def _classify_same(leaf_a: Leaf, leaf_b: Leaf) -> tuple[MatchClass, tuple[str, ...]]:
    """:func:`classify_pair` (no transpose), with a shortcut for two captured tensors of one dtype and shape."""
    if (
        type(leaf_a) is TensorLeaf
        and type(leaf_b) is TensorLeaf
        and leaf_a.dtype == leaf_b.dtype
        and leaf_a.shape == leaf_b.shape
        and (leaf_a.max is not None or not is_uncaptured(leaf_a))
        and (leaf_b.max is not None or not is_uncaptured(leaf_b))
    ):
        return _MATCHED
    return classify_pair(leaf_a, leaf_b)


def _same_paths(ea: Entry, eb: Entry) -> tuple[tuple[str, ...], tuple[int, ...] | None] | None:
    """``(paths, order)`` when both entries' argument paths are the same, in the same order, each path once: the paths
    in causal order (:func:`_causal_leaves`) and the positions (in file order) they come from, None when that is the
    file order; else None."""
    paths = ea.paths()
    paths_b = eb.paths()
    if paths is not paths_b and paths != paths_b:
        return None
    key = (paths, ea.is_parameters_grad)
    got = _CAUSAL_ORDERS.get(key)
    if got is None:
        order = _causal_order(*key)
        got = (order, tuple(map(paths.__getitem__, order)) if isinstance(order, tuple) else paths)
        if len(_CAUSAL_ORDERS) >= _CAUSAL_ORDERS_LIMIT:
            _CAUSAL_ORDERS.clear()
        _CAUSAL_ORDERS[key] = got
    order, causal = got
    if order is _REPEATED_PATH:
        return None
    return causal, order  # type: ignore[return-value]


#: :func:`_causal_order` of a tuple of argument paths and whether its entry is a parameters_grad one, with the paths in
#: that order, worked out once per distinct pair (the paths tuples are shared between entries: :meth:`Entry.flat`);
#: cleared past a limit.
_CAUSAL_ORDERS: dict[tuple[tuple[str, ...], bool], tuple[tuple[int, ...] | object | None, tuple[str, ...]]] = {}
_CAUSAL_ORDERS_LIMIT = 65536
#: :func:`_causal_order`'s answer for paths that hold a path twice.
_REPEATED_PATH = object()


def _causal_order(paths: tuple[str, ...], is_parameters_grad: bool) -> tuple[int, ...] | object | None:
    """The positions of ``paths`` in causal order (:func:`_causal_leaves`: outputs last, else file order), None when
    that is the file order, or :data:`_REPEATED_PATH` when a path is there twice."""
    if len(set(paths)) != len(paths):
        return _REPEATED_PATH
    if is_parameters_grad:
        return None
    outputs = [p.startswith("output") for p in paths]
    if True not in outputs or all(outputs[outputs.index(True):]):
        return None  # outputs already last
    return tuple([k for k, o in enumerate(outputs) if not o] + [k for k, o in enumerate(outputs) if o])


def _keyed_items(view: EntryView | None) -> list[tuple[tuple[str, int], ViewItem]]:
    """A view's items keyed by (canonical path, occurrence), outputs last (see :func:`_keyed_leaves`)."""
    if view is None:
        return []
    items = [it for it in view.items if not it.path.startswith("output")]
    items += [it for it in view.items if it.path.startswith("output")]
    if view.is_parameters_grad:
        items = list(view.items)
    seen: dict[str, int] = {}
    out = []
    for it in items:
        n = seen.get(it.path, 0)
        seen[it.path] = n + 1
        out.append(((it.path, n), it))
    return out


def _one_sided(item: ViewItem, side: Literal["a", "b"], mapped: tuple[str, ...]) -> RowPair:
    notes = (*mapped, item.note) if item.note else mapped
    if side == "a":
        return RowPair(item.entry, item.orig_path, "only_in_a", item.leaf, None, True, False, notes)
    return RowPair(item.entry, item.orig_path, "only_in_b", None, item.leaf, False, True, notes)


def _pair_leftovers_by_name(pairs: list[_Pair[EntryView]]) -> list[_Pair[EntryView]]:
    """Pair views the alignment left alone on both sides when their canonical names are equal and unique
    among the leftovers.  Two frameworks order some calls differently (PyTorch writes ``Functional.linear``'s
    backward after its module's backward, MindSpore the Primitives' before the cell's), which an
    order-preserving alignment cannot cross; the pair takes A's position."""
    lone_a: dict[str, list[int]] = {}
    lone_b: dict[str, list[int]] = {}
    for k, (va, vb) in enumerate(pairs):
        if va is not None and vb is None:
            lone_a.setdefault(va.name, []).append(k)
        elif va is None and vb is not None:
            lone_b.setdefault(vb.name, []).append(k)
    moves = {lone_a[n][0]: lone_b[n][0] for n in lone_a if len(lone_a[n]) == 1 and len(lone_b.get(n, ())) == 1}
    if not moves:
        return pairs
    taken = set(moves.values())
    return [(va, pairs[moves[k]][1]) if k in moves else (va, vb)
            for k, (va, vb) in enumerate(pairs) if k not in taken]


def match_views(views_a: Sequence[EntryView], views_b: Sequence[EntryView]) -> tuple[RowPair, ...]:
    """Pair and classify the rows of two frameworks' entries, mapped into one namespace.

    Like :func:`match_entries`, on :class:`~msprobe_cmp.comparator.mapping.EntryView` objects
    (:func:`msprobe_cmp.comparator.mapping.build_views`): views are aligned as calls by their canonical
    names, leaves pair by canonical argument path, and every row is reported under its *original*
    names: ``entry_name`` / ``arg_path`` are A's, ``entry_name_b`` / ``arg_path_b`` B's where they differ,
    ``mapped_by`` says which mapping paired them (also in the notes).  A row present on one side only
    is named by that side's own entry and path; a composite's intermediate says so in its notes.

    Returns:
        One :class:`RowPair` per leaf of either side, in execution order.
    """
    out: list[RowPair] = []
    for va, vb in _pair_leftovers_by_name(align_entries(views_a, views_b)):
        labels = [m for m in dict.fromkeys((va.mapped_by if va else None, vb.mapped_by if vb else None)) if m]
        mapped_by = "; ".join(labels) or None
        mapped = ((note("names_mapped", f"names mapped across frameworks by {mapped_by}", mapped_by=mapped_by),)
                  if mapped_by and va and vb else ())
        items_b = dict(_keyed_items(vb))
        seen: set[tuple[str, int]] = set()
        for key, ia in _keyed_items(va):
            seen.add(key)
            ib = items_b.get(key)
            if ib is None:
                out.append(_one_sided(ia, "a", mapped))
                continue
            transpose = ia.transposed != ib.transposed
            cls, notes = classify_pair(ia.leaf, ib.leaf, transpose)
            extra = (_transposed_note("A" if ia.transposed else "B"),) if transpose else ()
            out.append(RowPair(
                ia.entry, ia.orig_path, cls, ia.leaf, ib.leaf, True, True, mapped + extra + notes,
                ib.entry if ib.entry != ia.entry else None,
                ib.orig_path if ib.orig_path != ia.orig_path else None,
                mapped_by, transpose,
            ))
        for key, ib in _keyed_items(vb):
            if key not in seen:
                out.append(_one_sided(ib, "b", mapped))
    return tuple(out)


def _keyed_leaves(entry: Entry | None) -> list[tuple[tuple[str, int], Leaf]]:
    """The entry's leaves keyed by (path, occurrence): two leaves can share a path (a keyword argument
    named ``"a.b"`` and a nested ``{"a": {"b": ...}}``); the n-th of them pairs with the n-th."""
    if entry is None:
        return []
    seen: dict[str, int] = {}
    out = []
    for path, leaf in _causal_leaves(entry):
        n = seen.get(path, 0)
        seen[path] = n + 1
        out.append(((path, n), leaf))
    return out
