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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from msprobe_cmp.comparator.dtypes import COMPATIBLE_INTS, are_compatible_dtypes, normalize_dtype
from msprobe_cmp.comparator.mapping.canonical import INTERMEDIATE, UNMAPPED, EntryView, ViewItem
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


def classify_pair(leaf_a: Leaf, leaf_b: Leaf, transpose_b: bool = False) -> tuple[MatchClass, tuple[str, ...]]:
    """Class and notes of two leaves found under the same key (both sides present).

    ``transpose_b``: B's tensor is the transpose of A's, so B's shape is compared reversed."""
    if leaf_a is None and leaf_b is None:
        return "matched", ("null on both sides: nothing recorded",)
    if leaf_a is None or leaf_b is None:
        return "not_captured", (f"no data recorded in {'A' if leaf_a is None else 'B'} (null leaf)",)
    if isinstance(leaf_a, ValueLeaf) and isinstance(leaf_b, ValueLeaf):
        return "matched", ()
    if not (isinstance(leaf_a, TensorLeaf) and isinstance(leaf_b, TensorLeaf)):
        return "dtype_mismatch", (f"A is a {_describe(leaf_a)}, B is a {_describe(leaf_b)}",)
    da, db = normalize_dtype(leaf_a.dtype), normalize_dtype(leaf_b.dtype)
    shape_b = tuple(reversed(leaf_b.shape)) if transpose_b else tuple(leaf_b.shape)
    if tuple(leaf_a.shape) != shape_b:
        notes = [f"shape differs: A {list(leaf_a.shape)}, B {list(leaf_b.shape)}"]
        if da != db:
            notes.append(f"dtype differs too: A {leaf_a.dtype}, B {leaf_b.dtype}")
        return "shape_mismatch", tuple(notes)
    notes = []
    if da != db:
        if not are_compatible_dtypes(da, db):
            return "dtype_mismatch", (f"dtype differs: A {leaf_a.dtype}, B {leaf_b.dtype}",)
        how = "compared by value" if da in COMPATIBLE_INTS else "compared in float64"
        notes.append(f"dtypes differ but are compatible (A {leaf_a.dtype}, B {leaf_b.dtype}): {how}")
    missing = [side for side, leaf in (("A", leaf_a), ("B", leaf_b)) if is_uncaptured(leaf)]
    if missing:
        return "not_captured", (f"tensor leaf without statistics, checksum or file in {' and '.join(missing)}",)
    return "matched", tuple(notes)


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


def _align_block(a: Sequence[E], b: Sequence[E], strict: bool) -> list[_Pair[E]]:
    def key(e: E) -> object:
        return (_loose_key(e), _shape_signature(e)) if strict else _loose_key(e)

    keys_a, keys_b = [key(e) for e in a], [key(e) for e in b]
    # Common prefix and suffix first: an extra call in the middle leaves only a short stretch to align.
    lo = 0
    while lo < len(a) and lo < len(b) and keys_a[lo] == keys_b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and keys_a[hi_a - 1] == keys_b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    out: list[_Pair[E]] = list(zip(a[:lo], b[:lo], strict=True))
    mid_a, mid_b = a[lo:hi_a], b[lo:hi_b]
    mid_keys_a, mid_keys_b = keys_a[lo:hi_a], keys_b[lo:hi_b]
    opcodes: list[Opcode]
    if len(mid_a) * len(mid_b) > MAX_ALIGN_CELLS:
        opcodes = _resync_opcodes(mid_keys_a, mid_keys_b)
    else:
        matcher = difflib.SequenceMatcher(None, mid_keys_a, mid_keys_b, autojunk=False)
        opcodes = [(tag, *rest) for tag, *rest in matcher.get_opcodes()]  # type: ignore[misc]
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            out.extend(zip(mid_a[i1:i2], mid_b[j1:j2], strict=True))
        elif strict:
            # No exact block here: pair what is the same call up to its shapes (a shape mismatch to report).
            out.extend(_align_block(mid_a[i1:i2], mid_b[j1:j2], strict=False))
        else:
            out.extend((e, None) for e in mid_a[i1:i2])
            out.extend((None, e) for e in mid_b[j1:j2])
    out.extend(zip(a[hi_a:], b[hi_b:], strict=True))
    return out


def align_entries(entries_a: Sequence[E], entries_b: Sequence[E]) -> list[_Pair[E]]:
    """Pair the entries of two dumps as calls, in execution order (:func:`execution_order`).

    When both sides hold the same entry names in the same order (the usual case) entries pair by
    name.  Otherwise the two call sequences are aligned, so that a call made on one side only (a
    branch taken in one run) shows as unpaired instead of shifting the call index of every later
    call of that API: first on the key (kind, name without index, direction, argument shapes), then,
    inside the stretches that differ, on (kind, name without index, direction) alone, which pairs
    calls whose shapes differ (reported as ``shape_mismatch``).  The alignment is difflib's
    ``SequenceMatcher`` (Ratcliff/Obershelp matching blocks), which on call sequences that mostly
    agree gives their longest common subsequence.  The common prefix and suffix are paired first; a
    differing stretch larger than :data:`MAX_ALIGN_CELLS` (A entries × B entries) is aligned in linear
    time by :func:`_resync_opcodes`.

    Entries may be :class:`~msprobe_cmp.comparator.mapping.EntryView` objects (two frameworks' entries
    in one canonical namespace): the same alignment then runs on the canonical names.

    Returns:
        ``(entry of A or None, entry of B or None)`` pairs; every entry of each side appears once.
    """
    a, b = execution_order(entries_a), execution_order(entries_b)
    if [e.name for e in a] == [e.name for e in b]:
        return list(zip(a, b, strict=True))
    return _align_block(a, b, strict=True)


def match_entries(entries_a: Sequence[Entry], entries_b: Sequence[Entry]) -> tuple[RowPair, ...]:
    """Pair and classify the rows of two entry sequences.

    Entries are paired as calls by :func:`align_entries`; inside a pair of entries, rows pair by
    argument path.  A row whose entry was aligned with a B entry of another name (its call index
    shifted) carries that name in :attr:`RowPair.entry_name_b` and a note.

    Args:
        entries_a: the target's entries, in file order.
        entries_b: the baseline's entries, in file order.

    Returns:
        One :class:`RowPair` per row of either side, in execution order (module docstring).
    """
    out: list[RowPair] = []
    append = out.append
    for ea, eb in align_entries(entries_a, entries_b):
        if ea is not None and eb is not None and ea.name == eb.name:
            same = _same_paths(ea, eb)
            if same is not None:
                # Both entries hold the same argument paths, once each, in the same order: row k of A pairs with
                # row k of B, which is what the keyed pairing below gives (and no B row is left over).
                name = ea.name
                for (path, leaf_a), (_, leaf_b) in zip(same[0], same[1], strict=True):
                    cls, notes = _classify_same(leaf_a, leaf_b)
                    row = _new(RowPair)
                    row.__dict__.update({
                        "entry_name": name, "arg_path": path, "match_class": cls, "leaf_a": leaf_a, "leaf_b": leaf_b,
                        "in_a": True, "in_b": True, "notes": notes, "entry_name_b": None, "arg_path_b": None,
                        "mapped_by": None, "transpose_b": False,
                    })
                    append(row)
                continue
        leaves_a = _keyed_leaves(ea)
        leaves_b = dict(_keyed_leaves(eb))
        name = ea.name if ea is not None else eb.name  # type: ignore[union-attr]
        name_b = eb.name if ea is not None and eb is not None and eb.name != ea.name else None
        aligned = (f"aligned by call order with B's {name_b} (the two runs' call counts differ)",) if name_b else ()
        seen: set[tuple[str, int]] = set()
        for key, leaf_a in leaves_a:
            seen.add(key)
            path = key[0]
            if key in leaves_b:
                cls, notes = classify_pair(leaf_a, leaves_b[key])
                out.append(RowPair(name, path, cls, leaf_a, leaves_b[key], True, True, aligned + notes, name_b))
            else:
                out.append(RowPair(name, path, "only_in_a", leaf_a, None, True, False, aligned, name_b))
        for key, leaf_b in _keyed_leaves(eb):
            if key not in seen:
                out.append(RowPair(name, key[0], "only_in_b", None, leaf_b, False, True, aligned, name_b))
    return tuple(out)


_new = object.__new__
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


def _same_paths(
    ea: Entry, eb: Entry
) -> tuple[list[tuple[str, Leaf]], list[tuple[str, Leaf]]] | None:
    """Both entries' leaves in causal order (:func:`_causal_leaves`) when their argument paths are the same,
    in the same order, each path once; else None."""
    ta, tb = ea.leaf_tuple(), eb.leaf_tuple()
    if len(ta) != len(tb):
        return None
    paths = [p for p, _ in ta]
    if paths != [p for p, _ in tb] or len(set(paths)) != len(paths):
        return None
    if ea.is_parameters_grad:
        return list(ta), list(tb)
    outputs = [p.startswith("output") for p in paths]
    if True not in outputs or all(outputs[outputs.index(True):]):
        return list(ta), list(tb)  # outputs already last: the causal order is the file order
    order = [k for k, o in enumerate(outputs) if not o] + [k for k, o in enumerate(outputs) if o]
    return [ta[k] for k in order], [tb[k] for k in order]


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
        mapped = (f"names mapped across frameworks by {mapped_by}",) if mapped_by and va and vb else ()
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
            extra = (f"B's tensor is the transpose of A's ({'A' if ia.transposed else 'B'} recorded the gradient "
                     "of weight.T): compared transposed",) if transpose else ()
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


def count_classes(rows: Iterable[RowPair]) -> tuple[tuple[MatchClass, int], ...]:
    """``(class, count)`` for every class of :data:`MATCH_CLASSES` (zeros included), in that order."""
    counts = dict.fromkeys(MATCH_CLASSES, 0)
    for row in rows:
        counts[row.match_class] += 1
    return tuple(counts.items())
