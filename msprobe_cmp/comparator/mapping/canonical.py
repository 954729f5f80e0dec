"""Map two frameworks' entries into one canonical namespace (PyTorch's), so the matcher can pair them.

A MindSpore dump and a PyTorch (or mindtorch) dump of the same model name their entries differently:
``Cell.fc1.Dense.forward.0`` is ``Module.fc1.Linear.forward.0``; ``Primitive.relu.ReLU.0.forward`` is
``Functional.relu.0.forward``; ``Primitive.matmul.MatMul.0.forward`` followed by
``Primitive.bias_add.BiasAdd.0.forward`` is one ``Functional.linear.0.forward``.  This module turns
each side's entries into :class:`EntryView` objects named in PyTorch's namespace, whose leaves carry
the canonical argument path *and* where they came from (original entry name and argument path), so
that the matcher (:mod:`msprobe_cmp.comparator.matching`) aligns views with its usual algorithm and
still reports every row under its real names.

Rules, in order (the first that applies wins):

* **Cells** (``Cell.<path>.<Class>``): the user cell mapping (``<path>.<Class>`` exact, then a bare
  ``<Class>`` key), else the built-in class table (``cell_classes.yaml``), else the class name kept;
  the prefix becomes ``Module``.  The class table's parameter renames (LayerNorm ``gamma`` → ``weight``)
  apply to ``parameters.<name>`` and ``parameters_grad`` rows.
* **APIs**: a user API-mapping record; else a built-in composite (``MatMul`` + ``BiasAdd`` ≙
  ``Functional.linear``, see below); else ``Mint.x`` → ``Torch.x``, ``MintFunctional.x`` →
  ``Functional.x``; else the built-in ``apis`` table; else, for ``Primitive.<attr>.<Class>``, the
  ``primitives`` table by class; else the name is kept (``Tensor.__add__`` is spelt the same in both).
  Before that, on both sides, the ``aliases`` table (``Tensor.__iadd__`` is compared as ``Tensor.__add__``).
* **Arguments** (``ms_to_pt_api.yaml``): a keyword argument of an API whose documented signature is in the
  table (``ms_signatures`` / ``pt_signatures``) is put in positional form (``kwargs.weight`` of
  ``cross_entropy`` → ``input.2``); then a MindSpore API's arguments move to their PyTorch positions by its
  ``arguments`` record (``BatchNorm(x, scale, bias, mean, variance)`` → ``batch_norm(input, running_mean,
  running_var, weight, bias, ...)``), else by parameter name through the two signatures.  An argument with no
  PyTorch position becomes ``unmapped.<path>`` and its row says it has no counterpart by construction
  (:data:`NO_COUNTERPART`), as do the rows of ``plumbing`` calls (``Primitive.Shape``): unpaired, such rows
  are kept but left out of the matched share (:func:`is_structural_note`).
* **Global average pools**: a mean over axes 2 and 3 of a 4-D tensor (mindcv's ``GlobalAvgPooling``) and an
  average pool with a 1x1 output (pytorchcv's ``AvgPool2d(7)``, ``adaptive_avg_pool2d(x, 1)``) are all
  compared as :data:`GLOBAL_POOL`: the pooled tensor, its input and their gradients pair (``[N, C]`` against
  ``[N, C, 1, 1]``: the same values); the other arguments (axes, kernel sizes) have no counterpart.
* **Across two units** (:func:`build_unit_views`): cells whose paths or classes differ are paired by inference
  (:mod:`msprobe_cmp.comparator.mapping.infer`) and API calls are paired before the row matcher sees them.
* **Backward outputs of APIs** (gradients w.r.t. the forward inputs) are put in *positional* form:
  canonical ``output.i`` is the gradient w.r.t. forward ``input.i``.  Dumps disagree here: msprobe-cmp's
  recorder writes them positionally with ``null`` for inputs without gradient; msprobe 1.2.2's MindSpore
  Primitive backward lists them in reverse order and drops the nulls; PyTorch's ``Functional.linear``
  backward (msprobe 1.2.2, from the ``addmm`` node) lists ``(bias, input, weight.T)``.  Each gradient is
  therefore assigned to the forward input it belongs to by shape: positional if every shape agrees,
  else the reverse order (msprobe 1.2.2 MindSpore Primitives try this first), else the first free
  input of the same shape, else (2-D) of the transposed shape — such a row is compared transposed.
  When no assignment fits, the backward keeps its own positions.
* **Composites**: Primitive calls listed in a composite (``MatMul`` then ``BiasAdd`` whose ``input.0``
  has ``MatMul``'s output shape, consecutive in dump.json) form one view named after the PyTorch API
  (``Functional.linear.<MatMul's index>.forward``) with ``input.0`` = MatMul ``input.0``, ``input.1`` =
  MatMul ``input.1`` (weight), ``input.2`` = BiasAdd ``input.1`` (bias), ``output.0`` = BiasAdd
  ``output.0``; the backward twin takes BiasAdd's backward ``input.0`` as the gradient w.r.t. the
  output and the gradients w.r.t. x and weight from MatMul's backward, w.r.t. bias from BiasAdd's.
  What remains (MatMul's output = BiasAdd's input, and their gradients) is an **intermediate** with no
  counterpart in PyTorch: such rows are reported as ``only_in_a`` (or ``only_in_b``) with a note saying
  so, never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from msprobe_cmp.comparator.mapping.files import ApiMappingRecord
from msprobe_cmp.comparator.mapping.infer import (
    INFERRED_LABEL,
    MAX_LCS_CELLS,
    InferredCells,
    infer_cell_pairs,
    lcs_pairs,
)
from msprobe_cmp.comparator.mapping.tables import BuiltinTables, Composite, load_builtin_tables
from msprobe_cmp.comparator.notes import STRUCTURAL, Note, code_of
from msprobe_cmp.comparator.notes import note as make_note
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, Leaf, Seq, TensorLeaf

Namespace = Literal["mindspore", "pytorch"]

#: Canonical-path prefix of composite intermediates and of arguments a mapping leaves out.
INTERMEDIATE = "intermediate"
UNMAPPED = "unmapped"

#: Every note of a leaf that has no counterpart in the other framework by construction (a Primitive's extra
#: output, framework plumbing, an argument the other API does not take) holds this phrase; such rows, when
#: unpaired, do not count against the matched share (:func:`is_structural_note`).
NO_COUNTERPART = "no counterpart by construction"

#: The API every global average pool is compared as (module docstring, "Global average pools").
GLOBAL_POOL = "Functional.adaptive_avg_pool2d"
#: Means that are a global average pool when they reduce axes 2 and 3 of a 4-D tensor, per name space.
_MEANS = {"mindspore": frozenset({"Functional.mean", "Functional.reduce_mean", "Tensor.mean", "Mint.mean",
                                  "Primitive.ReduceMean"}),
          "pytorch": frozenset({"Torch.mean", "Tensor.mean"})}
#: Average pools that are a global average pool when their output is 1x1, per name space.
_POOLS = {"mindspore": frozenset({"Functional.avg_pool2d", "Functional.adaptive_avg_pool2d", "Primitive.AvgPool",
                                  "Primitive.AdaptiveAvgPool2D", "MintFunctional.avg_pool2d",
                                  "MintFunctional.adaptive_avg_pool2d"}),
          "pytorch": frozenset({"Functional.avg_pool2d", GLOBAL_POOL})}

_MS_PREFIXES = frozenset({"Cell", "Primitive", "Mint", "MintFunctional", "Jit"})
_PT_PREFIXES = frozenset({"Module", "Torch", "NPU", "Aten", "VF"})


def framework_namespace(framework: str, entries: Sequence[Entry] = ()) -> Namespace | None:
    """The name space of a dump: ``"mindspore"``, ``"pytorch"`` (PyTorch and mindtorch), or None.

    Args:
        framework: dump.json's ``framework`` (``"mindspore"``, ``"pytorch"``, ``"mindtorch"``, any case).
        entries: the dump's entries; their name prefixes decide when they show one name space
            (:func:`names_namespace`), since they are what gets mapped; otherwise ``framework`` does.
    """
    by_names = names_namespace(entries)
    if by_names is not None:  # the names are what gets mapped: they win over a mislabelled header
        return by_names
    return _label_namespace(framework)


def _label_namespace(framework: str) -> Namespace | None:
    """The name space dump.json's ``framework`` label names (any case), or None for an unknown label."""
    f = framework.strip().lower()
    if f == "mindspore":
        return "mindspore"
    if f in ("pytorch", "torch", "mindtorch"):
        return "pytorch"
    return None


def names_namespace(entries: Sequence[Entry]) -> Namespace | None:
    """The name space the entry names show (``Cell``/``Primitive``/``Mint``... → MindSpore, ``Module``/``Torch``...
    → PyTorch; the first 2,000 entries), or None when they show neither or both."""
    prefixes = {e.name.split(".", 1)[0] for e in entries[:2000]}
    ms, pt = bool(prefixes & _MS_PREFIXES), bool(prefixes & _PT_PREFIXES)
    if ms != pt:
        return "mindspore" if ms else "pytorch"
    return None


def label_contradiction(framework: str, entries: Sequence[Entry]) -> str | None:
    """A sentence when dump.json's ``framework`` names another name space than the entry names show, else None."""
    by_names = names_namespace(entries)
    by_label = _label_namespace(framework)
    if by_names is None or by_label is None or by_names == by_label:
        return None
    return f"dump.json says framework {framework!r} but its entry names are {by_names}'s: matched as {by_names}"


@dataclass(frozen=True)
class NameMapping:
    """The user's mapping files (CLI ``--cell-mapping`` / ``--api-mapping``), parsed.

    Attributes:
        cells: ``{"<path>.<MindSpore class>" or "<class>": "<path>.<PyTorch class>" or "<class>"}``.
        apis: the user's API records; they take precedence over the built-in tables.
        cell_source, api_source: the files' names, for reports (None when not given).
    """

    cells: Mapping[str, str] = field(default_factory=dict)
    apis: tuple[ApiMappingRecord, ...] = ()
    cell_source: str | None = None
    api_source: str | None = None


@dataclass(frozen=True)
class ViewItem:
    """One leaf of an :class:`EntryView`.

    Attributes:
        path: the canonical argument path (what the other side's leaf must have to pair).
        leaf: the leaf as recorded.
        entry: the original entry name on this side.
        orig_path: the original argument path in that entry.
        transposed: the leaf holds the transpose of the canonical value (a 2-D weight gradient).
        note: why the leaf has no counterpart by construction (an intermediate), or None.
    """

    path: str
    leaf: Leaf
    entry: str
    orig_path: str
    transposed: bool = False
    note: Note | None = None


@dataclass(frozen=True)
class EntryView:
    """An entry as the matcher sees it across frameworks: a canonical name and canonical leaf paths.

    Attributes:
        name: the canonical (PyTorch-namespace) entry name.
        items: the leaves with their origins, in the entry's leaf order.
        mapped_by: which mapping renamed it (``"built-in cell table (Dense → Linear)"``), or None when
            the name was kept.
    """

    name: str
    items: tuple[ViewItem, ...]
    mapped_by: str | None = None

    def leaves(self) -> Iterator[tuple[str, Leaf]]:
        """``(canonical path, leaf)`` pairs, like :meth:`msprobe_cmp.dump.schema.Entry.leaves`."""
        return ((it.path, it.leaf) for it in self.items)

    @property
    def is_parameters_grad(self) -> bool:
        """True for a canonical ``...parameters_grad`` entry."""
        return parse_name(self.name).kind == "parameters_grad"


def _identity_items(entry: Entry) -> list[ViewItem]:
    return [ViewItem(path, leaf, entry.name, path) for path, leaf in entry.leaves()]


def _top_index(path: str, kind: str) -> tuple[int, str] | None:
    """``("input.2.x", "input")`` → ``(2, ".x")``; None when the path is not ``<kind>.<i>...``."""
    head, _, rest = path.partition(".")
    if head != kind:
        return None
    idx, dot, tail = rest.partition(".")
    if not idx.isdigit():
        return None
    return int(idx), dot + tail


def forward_input_shapes(fwd: Entry) -> list[tuple[int, ...] | None]:
    """The shapes of a forward entry's ``input_args`` (None for a non-tensor argument or a nested one)."""
    node = fwd.field("input_args")
    n = len(node.items) if isinstance(node, Seq) else 0
    shapes: list[tuple[int, ...] | None] = [None] * n
    for path, leaf in fwd.leaves():
        top = _top_index(path, "input")
        if top is not None and top[1] == "" and top[0] < n and isinstance(leaf, TensorLeaf):
            shapes[top[0]] = tuple(leaf.shape)
    return shapes


def resolve_gradients(
    input_shapes: Sequence[tuple[int, ...] | None],
    grads: Sequence[tuple[int, ...] | None],
    reversed_first: bool = False,
) -> list[tuple[int, bool]] | None:
    """Assign each gradient of a backward ``output`` list to the forward input it belongs to.

    Args:
        input_shapes: shapes of the forward ``input_args`` (None for non-tensor arguments).
        grads: shapes of the backward ``output`` leaves in their order (None for a null leaf).
        reversed_first: try msprobe 1.2.2's MindSpore Primitive order (reversed, nulls dropped) first.

    Returns:
        ``[(input index, transposed), ...]`` per gradient (null leaves get the free positions left),
        or None when no strategy fits (module docstring, "Backward outputs").
    """
    n = len(input_shapes)

    def positional() -> list[tuple[int, bool]] | None:
        if len(grads) > n or any(g is not None and g != input_shapes[k] for k, g in enumerate(grads)):
            return None
        return [(k, False) for k in range(len(grads))]

    def reverse() -> list[tuple[int, bool]] | None:
        if any(g is None for g in grads):
            return None
        out: list[tuple[int, bool]] = []
        j = n - 1
        for g in grads:
            while j >= 0 and input_shapes[j] != g:
                j -= 1
            if j < 0:
                return None
            out.append((j, False))
            j -= 1
        return out

    def by_shape() -> list[tuple[int, bool]] | None:
        taken: set[int] = set()
        out: dict[int, tuple[int, bool]] = {}
        for transposed in (False, True):
            for k, g in enumerate(grads):
                if g is None or k in out:
                    continue
                want = tuple(reversed(g)) if transposed else g
                if transposed and len(g) != 2:
                    continue
                j = next((j for j in range(n) if j not in taken and input_shapes[j] == want), None)
                if j is not None:
                    taken.add(j)
                    out[k] = (j, transposed)
        if any(g is not None and k not in out for k, g in enumerate(grads)):
            return None
        free = iter(j for j in range(n) if j not in taken)
        for k, g in enumerate(grads):
            if g is None:
                j = next(free, None)
                if j is None:
                    return None
                out[k] = (j, False)
        return [out[k] for k in range(len(grads))]

    order = (reverse, positional, by_shape) if reversed_first else (positional, reverse, by_shape)
    for strategy in order:
        found = strategy()
        if found is not None:
            return found
    return None


#: PyTorch APIs whose backward, as msprobe records it, lists the gradients of the autograd node behind
#: them rather than of the API's own inputs: ``Functional.linear`` is ``addmm(bias, input, weight.T)``, so
#: its gradients come as (bias, input, weight.T).  When the shapes resolve to exactly this order the
#: weight gradient is the transpose even when the weight is square (where shapes cannot tell).
NODE_GRADIENT_ORDER = {"Functional.linear": ((2, False), (0, False), (1, True))}


def _backward_items(bwd: Entry, fwd: Entry | None, reversed_first: bool) -> tuple[list[ViewItem], bool]:
    """A backward API entry's leaves with ``output.k`` renamed to the positional ``output.<input index>``.

    Returns the items and whether the positions were resolved."""
    items = _identity_items(bwd)
    if fwd is None:
        return items, False
    outs = [(k, it) for k, it in enumerate(items) if _top_index(it.path, "output") is not None]
    if not outs or any(_top_index(it.path, "output")[1] != "" for _, it in outs):  # type: ignore[index]
        return items, False
    grads = [tuple(it.leaf.shape) if isinstance(it.leaf, TensorLeaf) else None for _, it in outs]
    found = resolve_gradients(forward_input_shapes(fwd), grads, reversed_first)
    if found is None:
        return items, False
    node_order = NODE_GRADIENT_ORDER.get(parse_name(bwd.name).stem)
    if node_order is not None and [j for j, _ in found] == [j for j, _ in node_order]:
        found = list(node_order)
    for (k, it), (j, transposed) in zip(outs, found, strict=True):
        items[k] = ViewItem(f"output.{j}", it.leaf, it.entry, it.orig_path, transposed)
    return items, True


def _remap_index(path: str, kind: str, pairs: Sequence[tuple[int, int]] | None) -> str:
    """Apply an argument-index mapping to ``<kind>.<i>...``; an index left out becomes ``unmapped.<path>``."""
    if pairs is None:
        return path
    top = _top_index(path, kind)
    if top is None:
        return path
    table = dict(pairs)
    if top[0] not in table:
        return f"{UNMAPPED}.{path}"
    return f"{kind}.{table[top[0]]}{top[1]}"


def _positional(path: str, signature: Sequence[str]) -> str:
    """``kwargs.<name>...`` → ``input.<position of name in signature>...``; other paths unchanged."""
    head, _, rest = path.partition(".")
    if head != "kwargs":
        return path
    name, dot, tail = rest.partition(".")
    if name not in signature:
        return path
    return f"input.{signature.index(name)}{dot}{tail}"


def _reduced_axes(fwd: Entry) -> set[int] | None:
    """The axes a mean reduces, from its ``input.1`` / ``kwargs.axis`` / ``kwargs.dim`` integer values."""
    axes: set[int] = set()
    for path, leaf in fwd.leaves():
        head, _, rest = path.partition(".")
        arg = rest.partition(".")[0]
        if (head == "input" and arg == "1") or (head == "kwargs" and arg in ("axis", "dim")):
            value = getattr(leaf, "value", None)
            if isinstance(value, bool) or not isinstance(value, int):
                return None
            axes.add(value)
    return axes or None


def is_structural_note(note: str) -> bool:
    """True for the note of a row that has no counterpart by construction (its code in
    :data:`~msprobe_cmp.comparator.notes.STRUCTURAL`): framework plumbing, a Primitive's extra outputs, arguments the
    other API does not take, a composite's intermediate."""
    return code_of(note) in STRUCTURAL


def _rename_params(path: str, renames: Mapping[str, str], parameters_grad: bool) -> str:
    if not renames:
        return path
    if parameters_grad:
        head, dot, tail = path.partition(".")
        return renames.get(head, head) + dot + tail
    top, dot, rest = path.partition(".")
    if top != "parameters":
        return path
    name, dot2, tail = rest.partition(".")
    target = renames.get(name, name)
    if target.startswith("buffers."):  # a MindSpore parameter that PyTorch keeps as a buffer
        return f"{target}{dot2}{tail}"
    return f"parameters.{target}{dot2}{tail}"


class _Mapper:
    """Builds the :class:`EntryView` list of one side (module docstring)."""

    def __init__(self, entries: Sequence[Entry], namespace: Namespace, user: NameMapping,
                 ours: bool, tables: BuiltinTables, inferred: InferredCells | None = None) -> None:
        self.entries = entries
        self.inferred = inferred or InferredCells()
        self.ms = namespace == "mindspore"
        self.user = user
        self.ours = ours
        self.tables = tables
        self.by_name = {e.name: e for e in entries}
        self.user_apis = {r.ms_api: r for r in user.apis}

    # ---- cells ------------------------------------------------------------------------------------
    def cell_view(self, entry: Entry) -> EntryView:
        parsed = parse_name(entry.name)
        parameters_grad = parsed.kind == "parameters_grad"
        if not self.ms:
            return EntryView(entry.name, tuple(_identity_items(entry)))
        cls = parsed.cell_class or ""
        path = parsed.cell_path or ""
        op = parsed.op
        mapped_by: str
        renames: dict[str, str] = {}
        builtin = self.tables.cells.get(cls)
        if builtin is not None:
            renames = dict(builtin.parameters)
        inferred: tuple[str, int | None] | None = None
        if op in self.user.cells:
            new_op = self.user.cells[op]
            mapped_by = f"user cell mapping {self.user.cell_source or ''}: {op} → {new_op}"
        elif cls in self.user.cells:
            new_cls = self.user.cells[cls]
            new_op = f"{path}.{new_cls}" if path else new_cls
            mapped_by = f"user cell mapping {self.user.cell_source or ''}: {cls} → {new_cls}"
        elif (inferred := self._inferred(op, parsed.index, parameters_grad)) is not None:
            new_op, index = inferred
            default_op = op if builtin is None else f"{path}.{builtin.module}" if path else builtin.module
            if new_op != default_op or index != parsed.index:
                mapped_by = f"{INFERRED_LABEL}: {op} → {new_op} ({self.inferred.how.get(op, 'inferred')})"
            elif builtin is not None:
                mapped_by = f"built-in cell table: {cls} → {builtin.module}"
            else:
                mapped_by = f"Cell → Module (class {cls} kept)"
        elif builtin is not None:
            new_op = f"{path}.{builtin.module}" if path else builtin.module
            mapped_by = f"built-in cell table: {cls} → {builtin.module}"
        else:
            new_op = op
            mapped_by = f"Cell → Module (class {cls} kept)"
        if parameters_grad:
            tail = entry.name[len(parsed.stem):]
            name = f"Module.{new_op}{tail}"
        else:
            name = f"Module.{new_op}.{parsed.direction}.{parsed.index if inferred is None else inferred[1]}"
        items = [ViewItem(_rename_params(it.path, renames, parameters_grad), it.leaf, it.entry, it.orig_path)
                 for it in _identity_items(entry)]
        return EntryView(name, tuple(items), mapped_by)

    def _inferred(self, op: str, index: int | None, parameters_grad: bool) -> tuple[str, int | None] | None:
        """The inferred PyTorch op and call index of a cell call (a parameters_grad entry: of the op), or None."""
        if parameters_grad:
            target = self.inferred.ops.get(op)
            return None if target is None else (target, index)
        if index is None:
            return None
        return self.inferred.calls.get((op, index))

    # ---- APIs -------------------------------------------------------------------------------------
    def api_target(self, stem: str, prefix: str, op: str) -> tuple[str, ApiMappingRecord | None, str | None]:
        """Canonical API stem, the user record applied (if any) and the mapping label."""
        if not self.ms:
            return stem, None, None
        if prefix == "Primitive":
            cls = op.rpartition(".")[2]
            for key in (stem, f"Primitive.{cls}"):
                rec = self.user_apis.get(key)
                if rec is not None:
                    return rec.pt_api, rec, f"{rec.source}: {key} → {rec.pt_api}"
            target = self.tables.primitives.get(cls)
            if target is not None:
                return target, None, f"built-in API table: Primitive {cls} → {target}"
            return stem, None, None
        rec = self.user_apis.get(stem)
        if rec is not None:
            return rec.pt_api, rec, f"{rec.source}: {stem} → {rec.pt_api}"
        if prefix == "Mint":
            return f"Torch.{op}", None, f"built-in rule: Mint.x → Torch.x ({stem})"
        if prefix == "MintFunctional":
            return f"Functional.{op}", None, f"built-in rule: MintFunctional.x → Functional.x ({stem})"
        target = self.tables.apis.get(stem)
        if target is not None:
            return target, None, f"built-in API table: {stem} → {target}"
        return stem, None, None

    def _fwd_of(self, entry: Entry) -> Entry | None:
        parsed = parse_name(entry.name)
        return self.by_name.get(f"{parsed.stem}.{parsed.index}.forward")

    def api_view(self, entry: Entry) -> EntryView:
        parsed = parse_name(entry.name)
        pooled = self.global_pool_view(entry)
        if pooled is not None:
            return pooled
        stem, prefix, op = parsed.stem, parsed.prefix, parsed.op
        alias = self.tables.aliases.get(stem)
        if alias is not None:
            stem, prefix, op = alias, alias.partition(".")[0], alias.partition(".")[2]
        target, rec, label = self.api_target(stem, prefix, op)
        if alias is not None and label is None:
            label = f"built-in alias: {parsed.stem} → {alias}"
        name = f"{target}.{parsed.index}.{parsed.direction}"
        fwd = parsed.direction == "forward"
        if not fwd:
            reversed_first = self.ms and not self.ours and parsed.prefix == "Primitive"
            items, _ = _backward_items(entry, self._fwd_of(entry), reversed_first)
        else:
            items = _identity_items(entry)
            signature = self.own_signature(stem, prefix, target)
            if signature:
                items = [ViewItem(_positional(it.path, signature), it.leaf, it.entry, it.orig_path) for it in items]
        args, outputs, params, source = None, None, None, label
        if rec is not None:
            args, outputs, params = rec.args, rec.outputs, rec.parameters
        elif self.ms:
            args, outputs, source = self.builtin_arguments(stem, prefix, op, target, label)
        if args is not None or outputs is not None or params:
            args_kind, outs_kind = ("input", "output") if fwd else ("output", "input")
            note = make_note("argument_not_taken", f"an argument {target} does not take ({source}): {NO_COUNTERPART}",
                             target=target, source=source)
            out = []
            for it in items:
                p = _remap_index(it.path, args_kind, args)
                if p == it.path:
                    p = _remap_index(it.path, outs_kind, outputs)
                if p == it.path and params:
                    p = _rename_params(it.path, dict(params), False)
                out.append(ViewItem(p, it.leaf, it.entry, it.orig_path, it.transposed,
                                    note if p.startswith(UNMAPPED) else None))
            items = out
        reason = self.tables.plumbing_reason(parsed.stem)
        if reason is not None:
            note = make_note("framework_plumbing", f"framework plumbing ({reason}): {NO_COUNTERPART}", reason=reason)
            items = [ViewItem(it.path, it.leaf, it.entry, it.orig_path, it.transposed, it.note or note) for it in items]
        return EntryView(name, tuple(items), label)

    def own_signature(self, stem: str, prefix: str, target: str) -> tuple[str, ...] | None:
        """This side's documented parameter names of the API (MindSpore's for ``mindspore.ops``; PyTorch's for
        PyTorch entries and for ``mint``, which mirrors it), or None."""
        if not self.ms or prefix in ("Mint", "MintFunctional"):
            return self.tables.pt_signatures.get(target)
        return self.tables.ms_signatures.get(stem)

    def builtin_arguments(self, stem: str, prefix: str, op: str, target: str, label: str | None) -> tuple[
            tuple[tuple[int, int], ...] | None, tuple[tuple[int, int], ...] | None, str | None]:
        """``(input pairs, output pairs, source)`` of a MindSpore API's built-in argument permutation: the
        ``arguments`` table (a Primitive by class), else the two documented signatures paired by parameter name
        (the first parameters, the tensor operated on, pair whatever their names), else ``(None, None, label)``."""
        key = f"Primitive.{op.rpartition('.')[2]}" if prefix == "Primitive" else stem
        argmap = self.tables.arguments.get(key)
        if argmap is not None:
            return argmap.inputs, argmap.outputs, f"built-in argument table: {key} → {target}"
        if prefix in ("Mint", "MintFunctional"):
            return None, None, label
        ms_sig, pt_sig = self.tables.ms_signatures.get(stem), self.tables.pt_signatures.get(target)
        if ms_sig is None or pt_sig is None or ms_sig == pt_sig:
            return None, None, label
        pairs = [(0, 0)] + [(i, pt_sig.index(n)) for i, n in enumerate(ms_sig) if i and n in pt_sig[1:]]
        return tuple(pairs), None, f"built-in signatures of {stem} and {target}, paired by parameter name"

    def global_pool_view(self, entry: Entry) -> EntryView | None:
        """The view of a global average pool (module docstring), or None when ``entry`` is not one."""
        parsed = parse_name(entry.name)
        fwd = entry if parsed.direction == "forward" else self._fwd_of(entry)
        if fwd is None:
            return None
        stem = parsed.stem
        if parsed.prefix == "Primitive":
            stem = f"Primitive.{parsed.op.rpartition('.')[2]}"
        in_shape = _input0_shape(fwd)
        out_shape = _output_shape(fwd)
        if in_shape is None or len(in_shape) != 4 or out_shape is None:
            return None
        space = "mindspore" if self.ms else "pytorch"
        is_mean = stem in _MEANS[space] and _reduced_axes(fwd) in ({2, 3}, {-2, -1})
        is_pool = stem in _POOLS[space] and len(out_shape) == 4 and tuple(out_shape[2:]) == (1, 1)
        if not (is_mean or is_pool):
            return None
        what = f"{parsed.stem} over the spatial dimensions of a 4-D tensor ≙ {GLOBAL_POOL}(x, 1)"
        extra = make_note("argument_not_taken", f"an argument of {parsed.stem} the other framework's global pool "
                          f"does not take: {NO_COUNTERPART}", target="the other framework's global pool",
                          source=parsed.stem)
        direction = parsed.direction or "forward"
        if direction == "forward":
            source = _identity_items(entry)
        else:
            source, _ = _backward_items(entry, fwd, self.ms and not self.ours and parsed.prefix == "Primitive")
        items = []
        for it in source:  # the pooled tensor, its input and their gradients pair; the pool's other arguments do not
            head, _, rest = it.path.partition(".")
            if head in ("input", "output") and rest.partition(".")[0] == "0":
                items.append(it)
            else:
                items.append(ViewItem(f"{UNMAPPED}.{it.path}", it.leaf, it.entry, it.orig_path, it.transposed, extra))
        return EntryView(f"{GLOBAL_POOL}.{parsed.index}.{parsed.direction}", tuple(items),
                         f"built-in rule: {what}")

    # ---- composites -------------------------------------------------------------------------------
    def find_composites(self) -> dict[str, tuple[Composite, tuple[str, ...]]]:
        """Forward entry name → (composite, the member forward entry names), for every member."""
        if not self.ms or not self.tables.composites:
            return {}
        found: dict[str, tuple[Composite, tuple[str, ...]]] = {}
        n = len(self.entries)
        for i, entry in enumerate(self.entries):
            parsed = parse_name(entry.name)
            if parsed.prefix != "Primitive" or parsed.direction != "forward" or entry.name in found:
                continue
            cls = parsed.op.rpartition(".")[2]
            if parsed.stem in self.user_apis or f"Primitive.{cls}" in self.user_apis:
                continue
            for comp in self.tables.composites:
                if comp.primitives[0] != cls or i + len(comp.primitives) > n:
                    continue
                members = [entry]
                for k, want in enumerate(comp.primitives[1:], start=1):
                    nxt = self.entries[i + k]
                    p = parse_name(nxt.name)
                    if p.prefix != "Primitive" or p.direction != "forward" or p.op.rpartition(".")[2] != want:
                        break
                    if _output_shape(members[-1]) is None or _output_shape(members[-1]) != _input0_shape(nxt):
                        break
                    members.append(nxt)
                if len(members) == len(comp.primitives):
                    names = tuple(m.name for m in members)
                    for m in names:
                        found[m] = (comp, names)
                    break
        return found

    def composite_views(self, comp: Composite, members: tuple[str, ...]) -> tuple[EntryView, EntryView | None]:
        fwds = [self.by_name[m] for m in members]
        index = parse_name(members[0]).index
        label = f"built-in composite: {' + '.join(comp.primitives)} → {comp.api}"
        note = make_note("intermediate", f"intermediate of {' + '.join(comp.primitives)} (≙ {comp.api}): no "
                         "counterpart in PyTorch", primitives=list(comp.primitives), api=comp.api)
        # forward
        wanted = {(ref.call, f"{ref.kind}.{ref.index}"): f"input.{i}" for i, ref in enumerate(comp.inputs)}
        wanted[(comp.output.call, f"{comp.output.kind}.{comp.output.index}")] = "output.0"
        items: list[ViewItem] = []
        for call, fwd in enumerate(fwds):
            for path, leaf in fwd.leaves():
                target = wanted.get((call, path))
                if target is not None:
                    items.append(ViewItem(target, leaf, fwd.name, path))
                else:
                    items.append(ViewItem(f"{INTERMEDIATE}.{call}.{path}", leaf, fwd.name, path, note=note))
        fwd_view = EntryView(f"{comp.api}.{index}.forward", tuple(items), label)
        # backward: members' backward twins, gradients put in positional form first
        bwds = [self.by_name.get(f"{parse_name(m).stem}.{parse_name(m).index}.backward") for m in members]
        if all(b is None for b in bwds):
            return fwd_view, None
        grad_of = {(ref.call, ref.index): f"output.{i}" for i, ref in enumerate(comp.inputs) if ref.kind == "input"}
        grad_of_output = (comp.output.call, f"input.{comp.output.index}")
        items = []
        for call, (bwd, fwd) in enumerate(zip(bwds, fwds, strict=True)):
            if bwd is None:
                continue
            resolved, _ = _backward_items(bwd, fwd, not self.ours)
            for it in resolved:
                top = _top_index(it.path, "output")
                target = None
                if top is not None and top[1] == "":
                    target = grad_of.get((call, top[0]))
                elif (call, it.path) == grad_of_output:
                    target = "input.0"
                if target is not None:
                    items.append(ViewItem(target, it.leaf, it.entry, it.orig_path, it.transposed))
                else:
                    items.append(ViewItem(f"{INTERMEDIATE}.{call}.{it.orig_path}", it.leaf, it.entry, it.orig_path,
                                          note=note))
        return fwd_view, EntryView(f"{comp.api}.{index}.backward", tuple(items), label)

    # ---- all --------------------------------------------------------------------------------------
    def views(self) -> list[EntryView]:
        composites = self.find_composites()
        backward_member: dict[str, tuple[Composite, tuple[str, ...]]] = {}
        for fwd_name, value in composites.items():
            p = parse_name(fwd_name)
            backward_member[f"{p.stem}.{p.index}.backward"] = value
        done: set[tuple[str, ...]] = set()
        built: dict[tuple[str, ...], tuple[EntryView, EntryView | None]] = {}
        out: list[EntryView] = []
        for entry in self.entries:
            parsed = parse_name(entry.name)
            member = composites.get(entry.name) or backward_member.get(entry.name)
            if member is not None:
                comp, names = member
                if names not in built:
                    built[names] = self.composite_views(comp, names)
                fwd_view, bwd_view = built[names]
                key = (*names, parsed.direction or "")
                if key in done:
                    continue
                done.add(key)
                view = fwd_view if parsed.direction == "forward" else bwd_view
                if view is not None:
                    out.append(view)
                continue
            if parsed.kind in ("cell", "parameters_grad"):
                out.append(self.cell_view(entry))
            elif parsed.kind == "api":
                out.append(self.api_view(entry))
            else:
                out.append(EntryView(entry.name, tuple(_identity_items(entry))))
        return out


def _output_shape(entry: Entry) -> tuple[int, ...] | None:
    for path, leaf in entry.leaves():
        if path == "output.0" and isinstance(leaf, TensorLeaf):
            return tuple(leaf.shape)
    return None


def _input0_shape(entry: Entry) -> tuple[int, ...] | None:
    for path, leaf in entry.leaves():
        if path == "input.0" and isinstance(leaf, TensorLeaf):
            return tuple(leaf.shape)
    return None


def build_views(
    entries: Sequence[Entry],
    namespace: Namespace,
    user: NameMapping | None = None,
    *,
    ours: bool = False,
    tables: BuiltinTables | None = None,
) -> list[EntryView]:
    """One side's entries as canonical views (module docstring), in dump.json order.

    Args:
        entries: the side's entries, in file order.
        namespace: the side's name space; ``"pytorch"`` entries keep their names (only API backward
            outputs are put in positional form), ``"mindspore"`` entries are mapped.
        user: the user's mapping files, if any.
        ours: the dump was written by msprobe-cmp's recorder (positional backward outputs with nulls);
            otherwise msprobe's conventions are assumed (MindSpore Primitive backward reversed).
        tables: the built-in tables (default: :func:`load_builtin_tables`).

    Returns:
        One view per entry, except that the members of a composite give one forward and one backward view.
    """
    mapper = _Mapper(entries, namespace, user or NameMapping(), ours, tables or load_builtin_tables())
    return mapper.views()


def build_unit_views(
    entries_a: Sequence[Entry],
    namespace_a: Namespace,
    entries_b: Sequence[Entry],
    namespace_b: Namespace,
    user: NameMapping | None = None,
    *,
    ours_a: bool = False,
    ours_b: bool = False,
    tables: BuiltinTables | None = None,
) -> tuple[list[EntryView], list[EntryView], InferredCells]:
    """Both sides' views of one unit pair across frameworks: :func:`build_views` of each side, plus what needs both.

    With a MindSpore side and a PyTorch side, the cells are first paired by inference
    (:func:`msprobe_cmp.comparator.mapping.infer.infer_cell_pairs`; the user's cell mapping wins over it), and a
    MindSpore cell call is named after its inferred PyTorch partner, so the matcher pairs them.  Then the API calls
    are paired (:func:`_pair_api_calls`) and each pair gets a name of its own.

    Args:
        entries_a, entries_b: the two units' entries, in file order.
        namespace_a, namespace_b: their name spaces (when equal, or one is None, each side is :func:`build_views`'d
            alone and nothing is inferred).
        user: the user's mapping files, if any.
        ours_a, ours_b: the side was written by msprobe-cmp's recorder (see :func:`build_views`).
        tables: the built-in tables (default: :func:`load_builtin_tables`).

    Returns:
        ``(A's views, B's views, the inferred cell pairs)``.
    """
    user = user or NameMapping()
    tables = tables or load_builtin_tables()
    if {namespace_a, namespace_b} != {"mindspore", "pytorch"}:
        return (build_views(entries_a, namespace_a, user, ours=ours_a, tables=tables),
                build_views(entries_b, namespace_b, user, ours=ours_b, tables=tables), InferredCells())
    ms_is_a = namespace_a == "mindspore"
    ms_entries, pt_entries = (entries_a, entries_b) if ms_is_a else (entries_b, entries_a)
    inferred = infer_cell_pairs(ms_entries, pt_entries, user.cells, tables)
    views_a = _Mapper(entries_a, namespace_a, user, ours_a, tables, inferred if ms_is_a else None).views()
    views_b = _Mapper(entries_b, namespace_b, user, ours_b, tables, None if ms_is_a else inferred).views()
    views_a, views_b = _pair_api_calls(views_a, views_b)
    return views_a, views_b, inferred


def _api_key(view: EntryView) -> tuple[object, ...]:
    """What two frameworks' calls of one API must share to be the same call: the canonical API and the shapes of
    the tensors both can have (mapped arguments; a composite's intermediates and unmapped arguments left out), without
    their size-1 dimensions (a pooled ``[N, C]`` against ``[N, C, 1, 1]`` holds the same values)."""
    tensors = tuple(sorted((it.path, tuple(d for d in it.leaf.shape if d != 1)) for it in view.items
                           if isinstance(it.leaf, TensorLeaf) and not it.path.startswith((INTERMEDIATE, UNMAPPED))))
    return (parse_name(view.name).stem, tensors)


def _pair_api_calls(views_a: list[EntryView], views_b: list[EntryView]) -> tuple[list[EntryView], list[EntryView]]:
    """Pair the two sides' API calls here, where both are known, and give each pair a name of its own.

    A forward call's key is its :func:`_api_key` and its context: the canonical name of the first cell call written
    after it (a cell's forward entry is written when the cell returns, so for a call inside a leaf cell that is its
    cell, already named after its PyTorch partner).  Forward calls pair by an exact longest common subsequence of
    these keys; between two pairs, what is left pairs by a longest common subsequence of the keys without context;
    then calls still alone whose key without context is unique among both sides' leftovers pair (the same layers
    called in another order: a shortcut before or after a block's body).  A backward pairs with its forward's
    partner.  Each pair's views are then named ``<API>.n<B's index>.<B's index>.<direction>`` on both sides, so
    that the row matcher, which aligns by API and argument shapes only, pairs exactly these.  Calls left unpaired
    keep their names.  With more than :data:`~msprobe_cmp.comparator.mapping.infer.MAX_LCS_CELLS` (A × B) forward
    calls nothing is paired here.
    """
    def forwards(views: list[EntryView]) -> tuple[list[int], list[object], list[object]]:
        at: list[int] = []
        plain: list[object] = []
        context: list[str | None] = []
        pending: list[int] = []
        for k, v in enumerate(views):
            p = parse_name(v.name)
            if p.kind == "api" and p.direction == "forward":
                at.append(k)
                plain.append(_api_key(v))
                pending.append(len(context))
                context.append(None)
            elif p.kind == "cell" and p.direction == "forward":
                for slot in pending:
                    context[slot] = v.name
                pending = []
        return at, plain, [(key, ctx) for key, ctx in zip(plain, context, strict=True)]

    fa, plain_a, keys_a = forwards(views_a)
    fb, plain_b, keys_b = forwards(views_b)
    if len(fa) * len(fb) > MAX_LCS_CELLS:  # too long for an exact alignment here: the row matcher aligns them
        return views_a, views_b
    pairs: list[tuple[int, int]] = []
    prev_i = prev_j = -1
    for i, j in [*lcs_pairs(keys_a, keys_b), (len(fa), len(fb))]:
        gap_a, gap_b = list(range(prev_i + 1, i)), list(range(prev_j + 1, j))
        if gap_a and gap_b:
            found = lcs_pairs([plain_a[x] for x in gap_a], [plain_b[y] for y in gap_b])
            pairs.extend((gap_a[x], gap_b[y]) for x, y in found)
        if i < len(fa):
            pairs.append((i, j))
        prev_i, prev_j = i, j
    done_a, done_b = {i for i, _ in pairs}, {j for _, j in pairs}
    left_a: dict[object, list[int]] = {}
    left_b: dict[object, list[int]] = {}
    for i, key in enumerate(plain_a):
        if i not in done_a:
            left_a.setdefault(key, []).append(i)
    for j, key in enumerate(plain_b):
        if j not in done_b:
            left_b.setdefault(key, []).append(j)
    pairs += [(ids[0], left_b[key][0]) for key, ids in left_a.items()
              if len(ids) == 1 and len(left_b.get(key, ())) == 1]
    rename_a: dict[tuple[str, int | None], str] = {}
    rename_b: dict[tuple[str, int | None], str] = {}
    for i, j in pairs:
        pa, pb = parse_name(views_a[fa[i]].name), parse_name(views_b[fb[j]].name)
        tag = f"{pb.stem}.n{pb.index}"
        rename_a[(pa.stem, pa.index)] = tag
        rename_b[(pb.stem, pb.index)] = tag

    def renamed(views: list[EntryView], table: dict[tuple[str, int | None], str]) -> list[EntryView]:
        out = []
        for v in views:
            p = parse_name(v.name)
            tag = table.get((p.stem, p.index)) if p.kind == "api" else None
            if tag is None:
                out.append(v)
                continue
            index = tag.rpartition(".n")[2]
            out.append(EntryView(f"{tag}.{index}.{p.direction}", v.items, v.mapped_by))
        return out

    return renamed(views_a, rename_a), renamed(views_b, rename_b)


def unused_mapping_keys(user: NameMapping, entries: Iterable[Entry]) -> tuple[list[str], list[str]]:
    """The user's cell-mapping keys and API-mapping ``ms_api`` names that match no entry of a MindSpore dump.

    A cell key matches a cell's ``<path>.<Class>`` or, alone, its class; an API name matches an entry's
    ``<Family>.<name>`` (a Primitive's ``Primitive.<attr>.<Class>`` or ``Primitive.<Class>``).  A key matching
    nothing is almost always a typo (``densein.Dense`` for ``dense_in.Dense``) that would otherwise be silent.

    Returns:
        ``(cell keys, API names)``, each in the files' order.
    """
    ops: set[str] = set()
    stems: set[str] = set()
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed.kind in ("cell", "parameters_grad"):
            ops.add(parsed.op)
            if parsed.cell_class:
                ops.add(parsed.cell_class)
        elif parsed.kind == "api":
            stems.add(parsed.stem)
            if parsed.prefix == "Primitive":
                stems.add(f"Primitive.{parsed.op.rpartition('.')[2]}")
    cells = [key for key in user.cells if key not in ops]
    apis = [rec.ms_api for rec in user.apis if rec.ms_api not in stems]
    return cells, apis
