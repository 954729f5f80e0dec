"""Exact-name matching of two dumps' rows; every row of both sides ends in exactly one class.

A *row* is one leaf of one entry, keyed by ``(entry name, argument path)`` as produced by
:meth:`msprobe_cmp.dump.schema.Entry.leaves` (``("Cell.fc1.Dense.forward.0", "parameters.weight")``).
Rows are paired when both keys are equal (DESIGN.md §4, "Exact"), then classified:

``matched``
    both sides hold comparable data: two tensors of the same shape and the same dtype, or of a
    compatible float pair (fp16/bf16/fp32/fp64: a note says so); or two non-tensor values; or JSON
    ``null`` on both sides (both recorded the same absence, e.g. no gradient for an input that needs
    none; the comparator gives such a row the verdict ``skip``).
``only_in_a`` / ``only_in_b``
    the key exists on one side only.
``shape_mismatch``
    two tensors of different shapes (a dtype difference is mentioned in the note too).
``dtype_mismatch``
    two tensors of incompatible dtypes (e.g. ``int32`` vs ``int64``, ``float32`` vs ``bool``), or a
    tensor against a non-tensor value.
``not_captured``
    one side holds JSON ``null`` where the other has data, or a side holds a tensor leaf that carries
    neither statistics, nor a checksum, nor a saved file although it has elements.

Order is execution order, never lexicographic (:func:`execution_order`): A's rows in A's order; a
row present in B only is placed right after the row that precedes it in B and exists in A (rows
before any shared row go first).  msprobe 1.2.2 instead sorts rows by name and drops bench-only rows
(anatomy §6.3).

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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from msprobe_cmp.comparator.dtypes import are_compatible_dtypes, normalize_dtype
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, Leaf, TensorLeaf, ValueLeaf

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


@dataclass(frozen=True)
class RowPair:
    """One row of the comparison before any metric: the two leaves under one key, classified.

    Attributes:
        entry_name: the entry (``"Primitive.matmul.MatMul.0.forward"``).
        arg_path: the argument path inside the entry (``"input.0"``, ``"kwargs.dim"``, ``"parameters.weight"``).
        match_class: one of :data:`MATCH_CLASSES`.
        leaf_a, leaf_b: the leaves (None when absent from that side, or when the side holds JSON null).
        in_a, in_b: whether the key exists on that side (tells an absent row from a null leaf).
        notes: why the row got its class, or what to keep in mind when comparing it.
    """

    entry_name: str
    arg_path: str
    match_class: MatchClass
    leaf_a: Leaf
    leaf_b: Leaf
    in_a: bool
    in_b: bool
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The row name ``<entry name>.<arg path>`` (msprobe's row naming)."""
        return f"{self.entry_name}.{self.arg_path}"


def _is_uncaptured(leaf: TensorLeaf) -> bool:
    no_stats = all(s is None for s in leaf.stats)
    return no_stats and leaf.md5 is None and leaf.data_name is None and leaf.numel > 0


def _describe(leaf: Leaf) -> str:
    if leaf is None:
        return "null"
    if isinstance(leaf, TensorLeaf):
        return f"tensor {leaf.dtype} {list(leaf.shape)}"
    return f"{leaf.type} value"


def classify_pair(leaf_a: Leaf, leaf_b: Leaf) -> tuple[MatchClass, tuple[str, ...]]:
    """Class and notes of two leaves found under the same key (both sides present)."""
    if leaf_a is None and leaf_b is None:
        return "matched", ("null on both sides: nothing recorded",)
    if leaf_a is None or leaf_b is None:
        return "not_captured", (f"no data recorded in {'A' if leaf_a is None else 'B'} (null leaf)",)
    if isinstance(leaf_a, ValueLeaf) and isinstance(leaf_b, ValueLeaf):
        return "matched", ()
    if not (isinstance(leaf_a, TensorLeaf) and isinstance(leaf_b, TensorLeaf)):
        return "dtype_mismatch", (f"A is a {_describe(leaf_a)}, B is a {_describe(leaf_b)}",)
    da, db = normalize_dtype(leaf_a.dtype), normalize_dtype(leaf_b.dtype)
    if tuple(leaf_a.shape) != tuple(leaf_b.shape):
        notes = [f"shape differs: A {list(leaf_a.shape)}, B {list(leaf_b.shape)}"]
        if da != db:
            notes.append(f"dtype differs too: A {leaf_a.dtype}, B {leaf_b.dtype}")
        return "shape_mismatch", tuple(notes)
    notes = []
    if da != db:
        if not are_compatible_dtypes(da, db):
            return "dtype_mismatch", (f"dtype differs: A {leaf_a.dtype}, B {leaf_b.dtype}",)
        notes.append(f"dtypes differ but are compatible (A {leaf_a.dtype}, B {leaf_b.dtype}): compared in float64")
    missing = [side for side, leaf in (("A", leaf_a), ("B", leaf_b)) if _is_uncaptured(leaf)]
    if missing:
        return "not_captured", (f"tensor leaf without statistics, checksum or file in {' and '.join(missing)}",)
    return "matched", tuple(notes)


def execution_order(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` with each ``parameters_grad`` entry moved to where its gradients were computed.

    Args:
        entries: the entries of one dump.json, in file order.

    Returns:
        The same entries; a ``<stem>.parameters_grad`` entry now stands right before the first
        ``<stem>.backward.<n>`` entry, or last when there is none (module docstring).
    """
    backward_at: dict[str, int] = {}
    for i, entry in enumerate(entries):
        parsed = parse_name(entry.name)
        if parsed.kind == "cell" and parsed.direction == "backward":
            backward_at.setdefault(parsed.stem, i)
    keyed: list[tuple[float, int, Entry]] = []
    for i, entry in enumerate(entries):
        rank: float = i
        parsed = parse_name(entry.name)
        if parsed.kind == "parameters_grad":
            rank = backward_at.get(parsed.stem, len(entries)) - 0.5
        keyed.append((rank, i, entry))
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [e for _, _, e in keyed]


def _causal_leaves(entry: Entry) -> list[tuple[str, Leaf]]:
    """An entry's leaves with outputs last (inputs, kwargs and parameters first), else in file order."""
    leaves = list(entry.leaves())
    if entry.is_parameters_grad:
        return leaves
    return [x for x in leaves if not x[0].startswith("output")] + [x for x in leaves if x[0].startswith("output")]


def iter_rows(entries: Sequence[Entry]) -> Iterator[tuple[RowKey, Leaf]]:
    """Flatten entries into ``(key, leaf)`` rows in execution order (module docstring).

    A repeated (name, path) gets occurrence 1, 2, ...
    """
    seen: dict[tuple[str, str], int] = {}
    for entry in execution_order(entries):
        for path, leaf in _causal_leaves(entry):
            n = seen.get((entry.name, path), 0)
            seen[(entry.name, path)] = n + 1
            yield (entry.name, path, n), leaf


def match_entries(entries_a: Sequence[Entry], entries_b: Sequence[Entry]) -> tuple[RowPair, ...]:
    """Pair and classify the rows of two entry sequences by exact (entry name, argument path).

    Args:
        entries_a: the target's entries, in execution order (sets the output order).
        entries_b: the baseline's entries, in execution order.

    Returns:
        One :class:`RowPair` per distinct key of either side, in execution order (module docstring).
    """
    rows_a = list(iter_rows(entries_a))
    rows_b = list(iter_rows(entries_b))
    leaves_b = dict(rows_b)
    keys_a = {key for key, _ in rows_a}

    # B-only rows, grouped under the last shared key that precedes them in B (None: before any).
    attached: dict[RowKey | None, list[tuple[RowKey, Leaf]]] = {}
    anchor: RowKey | None = None
    for key, leaf in rows_b:
        if key in keys_a:
            anchor = key
        else:
            attached.setdefault(anchor, []).append((key, leaf))

    def only_b(group: list[tuple[RowKey, Leaf]]) -> list[RowPair]:
        return [RowPair(k[0], k[1], "only_in_b", None, leaf, False, True) for k, leaf in group]

    out: list[RowPair] = only_b(attached.pop(None, []))
    for key, leaf_a in rows_a:
        if key in leaves_b:
            leaf_b = leaves_b[key]
            cls, notes = classify_pair(leaf_a, leaf_b)
            out.append(RowPair(key[0], key[1], cls, leaf_a, leaf_b, True, True, notes))
        else:
            out.append(RowPair(key[0], key[1], "only_in_a", leaf_a, None, True, False))
        out.extend(only_b(attached.pop(key, [])))
    return tuple(out)


def count_classes(rows: Iterable[RowPair]) -> tuple[tuple[MatchClass, int], ...]:
    """``(class, count)`` for every class of :data:`MATCH_CLASSES` (zeros included), in that order."""
    counts = dict.fromkeys(MATCH_CLASSES, 0)
    for row in rows:
        counts[row.match_class] += 1
    return tuple(counts.items())
