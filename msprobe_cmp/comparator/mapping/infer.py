"""Infer which MindSpore Cell is which PyTorch Module when their paths or classes differ (a real port).

A port keeps the computation and renames the layers: mindcv's ``layer2.0.down_sample.0`` is pytorchcv's
``features.stage2.unit1.identity_conv.conv``, ``classifier`` is ``output``.  Paths cannot pair them; what
they compute can.  The inference reads only the two dumps' cell forward entries (no framework import):

1. **Leaf calls.**  A cell call is a *leaf* when no other recorded cell's path lies under its path.  Each side's
   leaf calls, in dump order (a forward entry is written when the call returns), get a key: (canonical class,
   parameter shapes, output shapes).  The canonical class is the PyTorch class (``Dense`` → ``Linear`` through
   ``cell_classes.yaml`` or the user's bare-class mapping); parameter shapes are the cell's own parameters
   (``parameters.*``, renamed through the class table; a MindSpore parameter PyTorch keeps as a buffer,
   BatchNorm's ``moving_mean``, is left out), sorted.
2. **Alignment.**  The two key sequences are aligned by an exact longest common subsequence (:func:`lcs_pairs`;
   difflib's longest-block-first matching shifts repeated blocks when a shortcut runs before the body on one side
   and after it on the other).  Between two pairs, what is left is aligned the same way on a looser
   key (parameter shapes and output sizes, no class): mindcv's ``GlobalAvgPooling``
   (output ``[N, C]``) pairs pytorchcv's ``AvgPool2d`` (``[N, C, 1, 1]``).  Calls still alone whose strict key is
   unique among the leftovers of both sides then pair: a block that calls its shortcut before its body on one
   side and after it on the other.
3. **Containers.**  A cell that holds other cells pairs with the module whose paired leaf calls are exactly the
   partners of its own (both sets non-empty); among several such modules the same canonical class wins, then
   the same number of calls, then the outermost.  Their calls pair in order when both made as many.

Cells the user's cell mapping names (by path or class) and the modules it maps them to take no part: the
user's file overrides inferred pairs.  :func:`render_cell_mapping` writes the pairs as a cell-mapping file
(``--write-mapping``), which ``--cell-mapping`` reads back.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from msprobe_cmp.comparator.mapping.tables import BuiltinTables, load_builtin_tables
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, TensorLeaf

#: The start of the ``mapped_by`` label of a cell pair found by inference (the comparison's note counts them).
INFERRED_LABEL = "inferred cell pair"

Shape = tuple[int, ...]


@dataclass(frozen=True)
class CellCall:
    """One cell (or module) forward call, as the inference sees it.

    Attributes:
        op: ``"<path>.<Class>"`` as in the entry name (``"layer1.0.conv1.Conv2d"``).
        path: the cell path (``"layer1.0.conv1"``; ``""`` for a root cell).
        index: the call index (``forward.<index>``).
        canonical_class: the PyTorch class it is compared as.
        parameter_shapes: the shapes of its own parameters (renamed, buffers left out), sorted.
        output_shapes: the shapes of its tensor outputs, in order (None for a non-tensor output).
    """

    op: str
    path: str
    index: int
    canonical_class: str
    parameter_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape | None, ...]

    @property
    def key(self) -> tuple[object, ...]:
        """The strict alignment key: canonical class, parameter shapes, output shapes."""
        return (self.canonical_class, self.parameter_shapes, self.output_shapes)

    @property
    def loose_key(self) -> tuple[object, ...]:
        """The loose key: parameter shapes and output sizes (elements), no class."""
        sizes = tuple(None if s is None else _numel(s) for s in self.output_shapes)
        return (self.parameter_shapes, sizes)


@dataclass(frozen=True)
class InferredCells:
    """Cell ↔ Module pairs inferred from two dumps (module docstring).

    Attributes:
        calls: ``(MindSpore op, call index)`` → ``(PyTorch op, call index)``.
        ops: MindSpore op → PyTorch op, for the ops whose calls all pair with one module (parameters_grad
            entries, which carry no call index, follow these).
        how: MindSpore op → how it was paired (``"leaf calls aligned"``, ``"same paired descendants"``).
    """

    calls: Mapping[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    ops: Mapping[str, str] = field(default_factory=dict)
    how: Mapping[str, str] = field(default_factory=dict)

    def file_pairs(self) -> dict[str, str]:
        """The pairs a cell-mapping file can hold: ``{"<path>.<MindSpore class>": "<path>.<PyTorch class>"}`` for
        each op whose every call pairs with the same-numbered call of one module (a cell used at several places,
        mindcv's shared ``ReLU``, cannot be written as one path pair and is inferred again)."""
        out: dict[str, str] = {}
        by_op: dict[str, list[tuple[int, str, int]]] = {}
        for (op, index), (pt_op, pt_index) in self.calls.items():
            by_op.setdefault(op, []).append((index, pt_op, pt_index))
        for op, calls in by_op.items():
            targets = {pt_op for _, pt_op, _ in calls}
            if len(targets) == 1 and all(index == pt_index for index, _, pt_index in calls):
                out[op] = targets.pop()
        return out


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _op_of(entry: Entry) -> tuple[str, str, str, int] | None:
    """``(op, path, class, index)`` of a cell forward entry, else None."""
    parsed = parse_name(entry.name)
    if parsed.kind != "cell" or parsed.direction != "forward" or parsed.index is None:
        return None
    return parsed.op, parsed.cell_path or "", parsed.cell_class or "", parsed.index


def cell_calls(entries: Iterable[Entry], mindspore: bool, user_cells: Mapping[str, str] | None = None,
               tables: BuiltinTables | None = None) -> list[CellCall]:
    """The cell forward calls of one side's entries, in dump order (module docstring, step 1).

    Args:
        entries: one dump unit's entries.
        mindspore: the entries are MindSpore's (classes and parameter names are mapped to PyTorch's).
        user_cells: the user's cell mapping (a bare-class key gives the canonical class).
        tables: the built-in tables (default: :func:`load_builtin_tables`).
    """
    tables = tables or load_builtin_tables()
    user_cells = user_cells or {}
    out = []
    for entry in entries:
        found = _op_of(entry)
        if found is None:
            continue
        op, path, cls, index = found
        canonical, renames = cls, {}
        if mindspore:
            builtin = tables.cells.get(cls)
            if builtin is not None:
                canonical, renames = builtin.module, dict(builtin.parameters)
            if cls in user_cells:
                canonical = user_cells[cls].rpartition(".")[2]
        params: list[Shape] = []
        outputs: list[Shape | None] = []
        for arg_path, leaf in entry.leaves():
            head, _, rest = arg_path.partition(".")
            if head == "parameters" and isinstance(leaf, TensorLeaf):
                name = rest.partition(".")[0]
                if not renames.get(name, name).startswith("buffers."):
                    params.append(tuple(leaf.shape))
            elif head == "output" and rest.isdigit():
                outputs.append(tuple(leaf.shape) if isinstance(leaf, TensorLeaf) else None)
        out.append(CellCall(op, path, index, canonical, tuple(sorted(params)), tuple(outputs)))
    return out


def _under(path: str, container: str) -> bool:
    return container == "" or path.startswith(container + ".")


def _leaves(calls: Sequence[CellCall]) -> list[CellCall]:
    """The calls of cells no other recorded cell lies under (the root cell, path ``""``, is never a leaf)."""
    containers: set[str] = set()
    for c in calls:
        parts = c.path.split(".")
        containers.update(".".join(parts[:k]) for k in range(1, len(parts)))
    return [c for c in calls if c.path and c.path not in containers]


#: Above this many (A × B) key pairs, :func:`lcs_pairs` aligns with difflib's matcher instead of the exact
#: longest common subsequence (quadratic time and memory).
MAX_LCS_CELLS = 4_000_000


def lcs_pairs(keys_a: Sequence[object], keys_b: Sequence[object]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` of a longest common subsequence of two key sequences (``keys_a[i] == keys_b[j]``).

    An exact LCS, not difflib's longest-block-first matching: on repetitive layer sequences whose order differs a
    little (a shortcut convolution called before a block's body on one side, after it on the other), difflib takes
    the longest run of equal keys first, which can be the blocks shifted by one.  Above :data:`MAX_LCS_CELLS`
    key pairs difflib's matcher is used.
    """
    n, m = len(keys_a), len(keys_b)
    if n * m > MAX_LCS_CELLS:
        matcher = difflib.SequenceMatcher(None, list(keys_a), list(keys_b), autojunk=False)
        return [(i + k, j + k) for i, j, size in matcher.get_matching_blocks() for k in range(size)]
    ids: dict[object, int] = {}
    a = [ids.setdefault(k, len(ids)) for k in keys_a]
    b = [ids.get(k, -1) for k in keys_b]
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below, ai = table[i], table[i + 1], a[i]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if ai == b[j] else max(below[j], row[j + 1])
    out = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _align(a: Sequence[CellCall], b: Sequence[CellCall]) -> list[tuple[CellCall, CellCall]]:
    """Strict keys by LCS; between two consecutive strict pairs, the loose keys of what is left, by LCS."""
    pairs: list[tuple[CellCall, CellCall]] = []
    prev_i = prev_j = -1
    for i, j in [*lcs_pairs([c.key for c in a], [c.key for c in b]), (len(a), len(b))]:
        gap_a, gap_b = a[prev_i + 1:i], b[prev_j + 1:j]
        if gap_a and gap_b:
            loose = lcs_pairs([c.loose_key for c in gap_a], [c.loose_key for c in gap_b])
            pairs.extend((gap_a[x], gap_b[y]) for x, y in loose)
        if i < len(a):
            pairs.append((a[i], b[j]))
        prev_i, prev_j = i, j
    return pairs


def _pair_unique_leftovers(a: Sequence[CellCall], b: Sequence[CellCall],
                           paired: list[tuple[CellCall, CellCall]]) -> list[tuple[CellCall, CellCall]]:
    done_a = {id(x) for x, _ in paired}
    done_b = {id(y) for _, y in paired}
    left_a: dict[object, list[CellCall]] = {}
    left_b: dict[object, list[CellCall]] = {}
    for c in a:
        if id(c) not in done_a:
            left_a.setdefault(c.key, []).append(c)
    for c in b:
        if id(c) not in done_b:
            left_b.setdefault(c.key, []).append(c)
    extra = [(xs[0], left_b[k][0]) for k, xs in left_a.items() if len(xs) == 1 and len(left_b.get(k, ())) == 1]
    return paired + extra


def infer_cell_pairs(
    ms_entries: Sequence[Entry],
    pt_entries: Sequence[Entry],
    user_cells: Mapping[str, str] | None = None,
    tables: BuiltinTables | None = None,
) -> InferredCells:
    """Pair a MindSpore dump unit's cells with a PyTorch unit's modules (module docstring).

    Args:
        ms_entries: the MindSpore unit's entries (``Cell.*`` names), in dump order.
        pt_entries: the PyTorch (or mindtorch) unit's entries (``Module.*`` names), in dump order.
        user_cells: the user's cell mapping (``{"<path>.<Class>" or "<Class>": ...}``): the cells it names and the
            modules it names as targets are left out.
        tables: the built-in tables (default: :func:`load_builtin_tables`).

    Returns:
        The pairs; empty when either side has no cell calls.
    """
    user_cells = user_cells or {}
    tables = tables or load_builtin_tables()
    targets = set(user_cells.values())
    ms_calls = [c for c in cell_calls(ms_entries, True, user_cells, tables)
                if c.op not in user_cells and c.op.rpartition(".")[2] not in user_cells]
    pt_calls = [c for c in cell_calls(pt_entries, False) if c.op not in targets]
    if not ms_calls or not pt_calls:
        return InferredCells()
    ms_leaves, pt_leaves = _leaves(ms_calls), _leaves(pt_calls)
    pairs = _pair_unique_leftovers(ms_leaves, pt_leaves, _align(ms_leaves, pt_leaves))
    calls: dict[tuple[str, int], tuple[str, int]] = {}
    how: dict[str, str] = {}
    for x, y in pairs:
        calls[(x.op, x.index)] = (y.op, y.index)
        how[x.op] = "leaf calls aligned by class, parameter shapes, output shapes and call order"
    partner = {(x.op, x.index): (y.op, y.index) for x, y in pairs}
    paired_pt = set(partner.values())
    leaf_ops = {c.op for c in ms_leaves} | {c.op for c in pt_leaves}

    def groups(all_calls: list[CellCall]) -> dict[str, list[CellCall]]:
        out: dict[str, list[CellCall]] = {}
        for c in all_calls:
            if c.op not in leaf_ops:
                out.setdefault(c.op, []).append(c)
        return out

    ms_containers, pt_containers = groups(ms_calls), groups(pt_calls)
    pt_sets: dict[str, frozenset[tuple[str, int]]] = {}
    for op, cs in pt_containers.items():
        path = cs[0].path
        pt_sets[op] = frozenset((c.op, c.index) for c in pt_leaves
                                if _under(c.path, path) and (c.op, c.index) in paired_pt)
    used: set[str] = set()
    for op, cs in ms_containers.items():
        path = cs[0].path
        wanted = frozenset(partner[(c.op, c.index)] for c in ms_leaves
                           if _under(c.path, path) and (c.op, c.index) in partner)
        if not wanted:
            continue
        candidates = [pt_op for pt_op, s in pt_sets.items() if s == wanted and pt_op not in used]
        if not candidates:
            continue
        cls = cs[0].canonical_class
        candidates.sort(key=lambda pt_op: (pt_containers[pt_op][0].canonical_class != cls,
                                           len(pt_containers[pt_op]) != len(cs),
                                           pt_op.count("."), pt_op))
        best = candidates[0]
        if len(pt_containers[best]) != len(cs):
            continue
        used.add(best)
        for c, d in zip(sorted(cs, key=lambda c: c.index), sorted(pt_containers[best], key=lambda c: c.index),
                        strict=True):
            calls[(c.op, c.index)] = (d.op, d.index)
        how[op] = "same paired descendants"
    ops: dict[str, str] = {}
    by_op: dict[str, set[str]] = {}
    for (op, _), (pt_op, _) in calls.items():
        by_op.setdefault(op, set()).add(pt_op)
    for op, pt_ops in by_op.items():
        if len(pt_ops) == 1:
            ops[op] = next(iter(pt_ops))
    return InferredCells(calls, ops, how)


def render_cell_mapping(pairs: Mapping[str, str], header: Sequence[str] = ()) -> str:
    """A cell-mapping file (msprobe's ``-cm`` format, docs/mapping.md) holding ``pairs``, one per line, sorted.

    Args:
        pairs: ``{"<path>.<MindSpore class>": "<path>.<PyTorch class>"}``.
        header: comment lines written first (without the ``#``).

    Returns:
        YAML text that :func:`msprobe_cmp.comparator.mapping.load_cell_mapping` reads back to ``pairs``.
    """
    lines = [f"# {line}".rstrip() for line in header]
    for key in sorted(pairs):
        lines.append(yaml.safe_dump({key: pairs[key]}, default_flow_style=False, width=10_000).rstrip("\n"))
    return "\n".join(lines) + "\n"


def mapping_file_pairs(
    unit_pairs: Iterable[tuple[Sequence[Entry], Sequence[Entry]]],
    user_cells: Mapping[str, str] | None = None,
    tables: BuiltinTables | None = None,
) -> tuple[dict[str, str], int]:
    """The cell-mapping file ``--write-mapping`` writes: the user's pairs, then the pairs inferred in each unit pair.

    Args:
        unit_pairs: ``(MindSpore entries, PyTorch entries)`` of each compared unit pair (steps, ranks).
        user_cells: the user's cell mapping; its pairs are written as given and win over inferred ones.
        tables: the built-in tables (default: :func:`load_builtin_tables`).

    Returns:
        ``(pairs, left out)``: ``{"<path>.<MindSpore class>": "<path>.<PyTorch class>"}`` (an op inferred with
        different partners in different units keeps the first unit's), and how many inferred ops a file cannot hold
        (a cell used at several places whose calls pair with different modules: they are inferred again).
    """
    out = dict(user_cells or {})
    left_out: set[str] = set()
    for ms_entries, pt_entries in unit_pairs:
        inferred = infer_cell_pairs(ms_entries, pt_entries, user_cells, tables)
        writable = inferred.file_pairs()
        for op, pt_op in writable.items():
            out.setdefault(op, pt_op)
        left_out.update(op for op, _ in inferred.calls if op not in writable)
    return out, len(left_out - set(out))
