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
from msprobe_cmp.comparator.mapping.tables import BuiltinTables, Composite, load_builtin_tables
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, Leaf, Seq, TensorLeaf

Namespace = Literal["mindspore", "pytorch"]

#: Canonical-path prefix of composite intermediates and of arguments a mapping leaves out.
INTERMEDIATE = "intermediate"
UNMAPPED = "unmapped"

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
    note: str | None = None


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


def _input_shapes(fwd: Entry) -> list[tuple[int, ...] | None]:
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
    found = resolve_gradients(_input_shapes(fwd), grads, reversed_first)
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
                 ours: bool, tables: BuiltinTables) -> None:
        self.entries = entries
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
        if op in self.user.cells:
            new_op = self.user.cells[op]
            mapped_by = f"user cell mapping {self.user.cell_source or ''}: {op} → {new_op}"
        elif cls in self.user.cells:
            new_cls = self.user.cells[cls]
            new_op = f"{path}.{new_cls}" if path else new_cls
            mapped_by = f"user cell mapping {self.user.cell_source or ''}: {cls} → {new_cls}"
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
            name = f"Module.{new_op}.{parsed.direction}.{parsed.index}"
        items = [ViewItem(_rename_params(it.path, renames, parameters_grad), it.leaf, it.entry, it.orig_path)
                 for it in _identity_items(entry)]
        return EntryView(name, tuple(items), mapped_by)

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
        target, rec, label = self.api_target(parsed.stem, parsed.prefix, parsed.op)
        name = f"{target}.{parsed.index}.{parsed.direction}"
        if parsed.direction == "backward":
            reversed_first = self.ms and not self.ours and parsed.prefix == "Primitive"
            items, _ = _backward_items(entry, self._fwd_of(entry), reversed_first)
        else:
            items = _identity_items(entry)
        if rec is not None:
            fwd = parsed.direction == "forward"
            args_kind, outs_kind = ("input", "output") if fwd else ("output", "input")
            out = []
            for it in items:
                p = _remap_index(it.path, args_kind, rec.args)
                if p == it.path:
                    p = _remap_index(it.path, outs_kind, rec.outputs)
                if p == it.path and rec.parameters:
                    p = _rename_params(it.path, dict(rec.parameters), False)
                out.append(ViewItem(p, it.leaf, it.entry, it.orig_path, it.transposed))
            items = out
        return EntryView(name, tuple(items), label)

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
        note = f"intermediate of {' + '.join(comp.primitives)} (≙ {comp.api}): no counterpart in PyTorch"
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
