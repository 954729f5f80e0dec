"""One call against several: a fused cell/module compared with the concatenation of separate ones.

A fused QKV projection (one ``Linear`` ``qkv_proj`` of ``H + 2·kv`` outputs) computes what three ``Linear``
modules ``q_proj``, ``k_proj``, ``v_proj`` compute, concatenated.  Without help both sides' rows go unpaired
(or, worse, the inner ``Functional.linear`` calls pair with the wrong partner and fail on their shapes).  A
``fused`` record of the user's API-mapping file (:class:`~msprobe_cmp.comparator.mapping.files.FusedRecord`,
docs/mapping.md "One call against several") declares the relation; :func:`match_with_fused` then, for one unit:

1. finds the *groups*: a call ``<fused>.forward.<n>`` found on one side only, whose parts ``<part>.forward.<n>``
   (same placeholder values, same call index) are all found on the other side only; a group holds the forward
   calls, their backward calls, the ``parameters_grad`` entries (with the group of the lowest call index) and,
   when the fused call and every part made the same API calls inside them (construct.json: one
   ``Functional.linear`` each), those API calls and their backward calls;
2. takes the groups' entries out of the ordinary pairing (the rest is paired as usual, so the other calls'
   indices realign) and builds the groups' rows itself, put back where the target's (A's) entry stood in
   execution order;
3. each row pairs the fused side's leaf with a *combined* leaf of the parts (:class:`CombinedLeaf`), by its
   role:

   * a forward input (``input.*``, ``kwargs.*``) whose shape is the same in every part is *shared*: the same
     tensor feeds every part, so the fused call's input is compared with each part's, one row per part;
   * outputs and the gradients w.r.t. outputs (a backward's ``input.*``) are the concatenation of the parts'
     along the record's ``dim``; parameters, buffers, parameter gradients and API inputs that differ in shape
     (``Functional.linear``'s weight) along ``parameters_dim``; the dimension must fit the shapes (all other sizes
     equal, the sizes along it summing to the fused one), the other declared dimension is tried when it does not;
   * the gradient w.r.t. a shared input (a backward's ``output.*`` of the shared shape) is the *sum* of the parts'
     gradients (autograd adds the contributions of every use of the input).

Statistics of a concatenation are combined exactly (:func:`combine_concatenated`): the max of the maxima, the
min of the minima, the element-count-weighted mean of the means, the square root of the sum of the squared
norms (sums by :func:`math.fsum`), NaN when any part's is NaN; the NaN/±Inf counts add up; the shape is the
concatenated shape.  Of a sum only the Mean is exact (the sum of the means, all parts having one shape); Max, Min
and Norm are left unknown (None), so statistics mode compares the Mean alone there (:func:`combine_summed`).
Checksums cannot be combined: md5 mode judges combined rows by their statistics.

In tensor mode a combined leaf's ``data_name`` lists the parts' files joined by ``" + "`` and its array is the
parts' arrays concatenated (or summed), each read through :meth:`RankDump.load_tensor
<msprobe_cmp.dump.reader.RankDump.load_tensor>` (:func:`load_combined`, which the comparator's tensor path calls
for a :class:`CombinedLeaf`).

Every combined row names both sides (the fused entry on one, the parts' entries joined by ``" + "`` on the
other), says ``fused call: ...`` in ``mapped_by`` and carries the note ``compared as the concatenation of ...
along dim ...`` (or ``the sum of ...``).  Only in one name space (PyTorch against PyTorch or mindtorch, MindSpore
against MindSpore); across frameworks the records are not applied (docs/mapping.md).

numpy only; no framework import.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from msprobe_cmp.comparator.mapping.files import PLACEHOLDER_RE, FusedRecord
from msprobe_cmp.comparator.matching import (
    MatchClass,
    RowPair,
    RowPairs,
    RowPairsBuilder,
    _backward_twin,
    classify_pair,
    execution_order,
)
from msprobe_cmp.comparator.notes import Note, note
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.reader import RankDump
from msprobe_cmp.dump.schema import (
    NONFINITE_COUNT_KEYS,
    Entry,
    Leaf,
    TensorLeaf,
    TensorLeafFields,
    dataclass_fields_of,
)
from msprobe_cmp.errors import DumpFormatError

__all__ = [
    "CombinedLeaf",
    "combine_concatenated",
    "combine_summed",
    "fit_concat_axis",
    "fused_records",
    "load_combined",
    "match_with_fused",
]



class CombinedLeaf(TensorLeaf):
    """A tensor leaf standing for several recorded tensors combined: their concatenation along ``axis``
    (``how == "concat"``) or their element-wise sum (``how == "sum"``).

    The statistics fields hold the combined statistics (:func:`combine_concatenated`, :func:`combine_summed`);
    ``data_name`` the parts' file names joined by ``" + "`` when every part has a file, else None.  Built as a
    :class:`TensorLeaf` (its fields, in order), then the three below; equality, hash and repr over all of them.

    Attributes:
        parts: the recorded leaves, in order.
        how: ``"concat"`` or ``"sum"``.
        axis: the concatenation axis, non-negative (0 for a sum).
    """

    __slots__ = ("_axis", "_how", "_parts")
    _parts: tuple[TensorLeaf, ...]
    _how: Literal["concat", "sum"]
    _axis: int

    def __init__(
        self, type: str, dtype: str, shape: tuple[int, ...], max: float | None = None,  # noqa: A002
        min: float | None = None, mean: float | None = None, norm: float | None = None,  # noqa: A002
        md5: str | None = None, data_name: str | None = None, requires_grad: bool | None = None,
        extra: tuple[tuple[str, object], ...] = (), parts: tuple[TensorLeaf, ...] = (),
        how: Literal["concat", "sum"] = "concat", axis: int = 0,
    ) -> None:
        super().__init__(type, dtype, shape, max, min, mean, norm, md5, data_name, requires_grad, extra)
        _SET_PARTS(self, tuple(parts))
        _SET_HOW(self, how)
        _SET_AXIS(self, axis)

    @property
    def parts(self) -> tuple[TensorLeaf, ...]:
        """The recorded leaves, in order."""
        return self._parts

    @property
    def how(self) -> Literal["concat", "sum"]:
        """``"concat"`` or ``"sum"``."""
        return self._how

    @property
    def axis(self) -> int:
        """The concatenation axis (0 for a sum)."""
        return self._axis

    def _key(self) -> tuple[object, ...]:
        return (*super()._key(), self._parts, self._how, self._axis)

    def _names(self) -> tuple[str, ...]:
        return _COMBINED_FIELDS


@dataclass(frozen=True)
class _CombinedLeafFields(TensorLeafFields):
    """The fields of :class:`CombinedLeaf` as a dataclass's (:func:`~msprobe_cmp.dump.schema.dataclass_fields_of`)."""

    parts: tuple[TensorLeaf, ...] = ()
    how: Literal["concat", "sum"] = "concat"
    axis: int = 0


dataclass_fields_of(CombinedLeaf, _CombinedLeafFields)
_SET_PARTS = CombinedLeaf.__dict__["_parts"].__set__
_SET_HOW = CombinedLeaf.__dict__["_how"].__set__
_SET_AXIS = CombinedLeaf.__dict__["_axis"].__set__
_COMBINED_FIELDS = tuple(f.name for f in dataclasses.fields(_CombinedLeafFields))


def _any_nan(values: Iterable[float]) -> bool:
    return any(v != v for v in values)


def _counts(parts: Sequence[TensorLeaf]) -> tuple[tuple[str, object], ...]:
    """The parts' NaN/+Inf/-Inf counts added up, as leaf extra fields; () unless every part has valid counts."""
    counts = [p.nonfinite_counts for p in parts]
    if any(c is None for c in counts):
        return ()
    totals = [sum(c[k] for c in counts if c is not None) for k in range(3)]
    return tuple(zip(NONFINITE_COUNT_KEYS, totals, strict=True))


def _data_name(parts: Sequence[TensorLeaf]) -> str | None:
    names = [p.data_name for p in parts]
    if any(n is None for n in names):
        return None
    return " + ".join(n for n in names if n is not None)


def fit_concat_axis(fused_shape: Sequence[int], part_shapes: Sequence[Sequence[int]],
                    axes: Sequence[int]) -> int | None:
    """The first of ``axes`` along which tensors of ``part_shapes`` concatenate to ``fused_shape``, or None.

    An axis fits when every shape has the fused shape's rank, all sizes but the one along the axis equal the
    fused ones, and the sizes along it add up to the fused size.  Negative axes count from the end.

    Args:
        fused_shape: the fused tensor's shape (``[2, 8, 64]``).
        part_shapes: the parts' shapes, in order (``[[2, 8, 32], [2, 8, 16], [2, 8, 16]]``).
        axes: the candidate axes, in order of preference (the record's ``dim`` / ``parameters_dim``).

    Returns:
        The axis, made non-negative (``2`` for ``-1`` above), or None when none fits (or a shape is 0-d).
    """
    ndim = len(fused_shape)
    if ndim == 0 or any(len(s) != ndim for s in part_shapes):
        return None
    for axis in axes:
        if not -ndim <= axis < ndim:
            continue
        ax = axis % ndim
        if sum(s[ax] for s in part_shapes) != fused_shape[ax]:
            continue
        if all(s[k] == fused_shape[k] for s in part_shapes for k in range(ndim) if k != ax):
            return ax
    return None


def combine_concatenated(parts: Sequence[TensorLeaf], axis: int) -> CombinedLeaf:
    """The leaf of the concatenation of ``parts`` along ``axis``, with its statistics computed exactly from theirs.

    Max is the largest Max, Min the smallest Min, Mean ``Σ nₖ·meanₖ / Σ nₖ`` (``nₖ`` the parts' element counts),
    Norm ``sqrt(Σ normₖ²)`` (the L2 norm of a concatenation), sums in float64 by :func:`math.fsum`; a statistic is
    NaN when any part's is NaN, None when any non-empty part lacks it; empty parts contribute nothing.  The
    NaN/±Inf counts add up (kept only when every part has valid ones).  No checksum (``md5`` None).

    Args:
        parts: two or more tensor leaves of one rank whose sizes agree except along ``axis``.
        axis: the concatenation axis (negative counts from the end).

    Returns:
        A :class:`CombinedLeaf` with ``how="concat"``, the concatenated shape, the first part's ``type``, dtype and
        ``requires_grad``.

    Raises:
        ValueError: fewer than two parts, or shapes that do not concatenate along ``axis``.
    """
    if len(parts) < 2:
        raise ValueError("a concatenation needs at least two parts")
    ndim = len(parts[0].shape)
    if ndim == 0 or not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for shape {list(parts[0].shape)}")
    ax = axis % ndim
    shape = list(parts[0].shape)
    shape[ax] = sum(p.shape[ax] if len(p.shape) == ndim else -1 for p in parts)
    if fit_concat_axis(shape, [p.shape for p in parts], [ax]) is None:
        raise ValueError(f"shapes {[list(p.shape) for p in parts]} do not concatenate along axis {axis}")
    full = [p for p in parts if p.numel > 0]
    maxes = [p.max for p in full]
    mins = [p.min for p in full]
    means = [p.mean for p in full]
    norms = [p.norm for p in full]
    max_ = min_ = mean = norm = None
    if full and all(v is not None for v in maxes):
        vals = [float(v) for v in maxes if v is not None]
        max_ = math.nan if _any_nan(vals) else max(vals)
    if full and all(v is not None for v in mins):
        vals = [float(v) for v in mins if v is not None]
        min_ = math.nan if _any_nan(vals) else min(vals)
    if full and all(v is not None for v in means):
        vals = [float(v) for v in means if v is not None]
        total = sum(p.numel for p in full)
        if _any_nan(vals):
            mean = math.nan
        elif any(math.isinf(v) for v in vals):
            mean = sum(vals)  # +Inf, -Inf, or NaN when both occur: what the mean of the whole is
        else:
            mean = math.fsum(v * p.numel for v, p in zip(vals, full, strict=True)) / total
    if full and all(v is not None for v in norms):
        vals = [float(v) for v in norms if v is not None]
        norm = math.nan if _any_nan(vals) else math.sqrt(math.fsum(v * v for v in vals))
    first = parts[0]
    return CombinedLeaf(
        type=first.type, dtype=first.dtype, shape=tuple(shape), max=max_, min=min_, mean=mean, norm=norm,
        md5=None, data_name=_data_name(parts), requires_grad=first.requires_grad, extra=_counts(parts),
        parts=tuple(parts), how="concat", axis=ax,
    )


def combine_summed(parts: Sequence[TensorLeaf]) -> CombinedLeaf:
    """The leaf of the element-wise sum of ``parts`` (tensors of one shape): the gradient w.r.t. an input every part
    shares is the sum of the parts' gradients.

    Only the Mean is exact from the parts' statistics (the mean is linear: ``mean(Σ xₖ) = Σ mean(xₖ)``, by
    :func:`math.fsum`; NaN when any is NaN); Max, Min and Norm of a sum are not determined by the parts'
    (only bounded), so they are None.  No NaN/Inf counts, no checksum.

    Raises:
        ValueError: fewer than two parts, or parts of different shapes.
    """
    if len(parts) < 2:
        raise ValueError("a sum needs at least two parts")
    shape = tuple(parts[0].shape)
    if any(tuple(p.shape) != shape for p in parts):
        raise ValueError(f"shapes {[list(p.shape) for p in parts]} differ: they cannot be summed")
    means = [p.mean for p in parts]
    mean = None
    if parts[0].numel > 0 and all(v is not None for v in means):
        vals = [float(v) for v in means if v is not None]
        mean = math.nan if _any_nan(vals) else (sum(vals) if any(math.isinf(v) for v in vals) else math.fsum(vals))
    first = parts[0]
    return CombinedLeaf(
        type=first.type, dtype=first.dtype, shape=shape, mean=mean, md5=None, data_name=_data_name(parts),
        requires_grad=first.requires_grad, parts=tuple(parts), how="sum", axis=0,
    )


def load_combined(unit: RankDump, leaf: CombinedLeaf) -> np.ndarray:
    """The array of a combined leaf: its parts' arrays (read by :meth:`RankDump.load_tensor`) concatenated along
    ``leaf.axis``, or summed (in float64, then stored in the parts' dtype).

    Raises:
        DumpFormatError: a part's file cannot be read (the part's own error), or the result's shape is not the
            leaf's.
    """
    arrays = [RankDump.load_tensor(unit, part) for part in leaf.parts]
    if leaf.how == "sum":
        dtype = arrays[0].dtype
        total = np.zeros(arrays[0].shape, dtype=np.float64)
        for arr in arrays:
            total += np.asarray(arr, dtype=np.float64)
        out = total.astype(dtype)
    else:
        out = np.concatenate([np.asarray(a) for a in arrays], axis=leaf.axis)
    if tuple(out.shape) != tuple(leaf.shape):
        raise DumpFormatError(unit.directory / unit.json_name, leaf.data_name,
                              f"the parts combine to {list(out.shape)}, not {list(leaf.shape)}")
    return out


def fused_records(mapping: object) -> tuple[FusedRecord, ...]:
    """The fused records of a :class:`~msprobe_cmp.comparator.mapping.NameMapping` (its ``apis`` as read by
    :func:`~msprobe_cmp.comparator.mapping.load_api_mapping`), or () for None or a mapping without any."""
    apis = getattr(mapping, "apis", ())
    return tuple(getattr(apis, "fused", ()))


# --------------------------------------------------------------------------------------------------
# groups


def _stem_regex(template: str) -> re.Pattern[str]:
    """A regex over cell stems for a record name; each placeholder one name component (repeats must agree)."""
    out: list[str] = []
    seen: set[str] = set()
    for token in template.split("."):
        match = PLACEHOLDER_RE.fullmatch(token)
        if match is None:
            out.append(re.escape(token))
        elif match.group(1) in seen:
            out.append(f"(?P={match.group(1)})")
        else:
            seen.add(match.group(1))
            out.append(f"(?P<{match.group(1)}>[^.]+)")
    return re.compile(r"\.".join(out))


def _fill(template: str, binding: Mapping[str, str]) -> str:
    return PLACEHOLDER_RE.sub(lambda m: binding[m.group(1)], template)


@dataclass
class _Cells:
    """One side's cell entries by stem: forward and backward calls by index, parameters_grad entries, children."""

    forward: dict[str, dict[int, Entry]]
    backward: dict[str, dict[int, Entry]]
    grads: dict[str, list[Entry]]
    children: dict[str, list[Entry]]
    by_name: dict[str, Entry]


def _cells_of(unit: RankDump) -> _Cells:
    cells = _Cells({}, {}, {}, {}, {})
    for entry in unit.entries:
        cells.by_name[entry.name] = entry
        parsed = parse_name(entry.name)
        if parsed.kind == "cell" and parsed.index is not None:
            table = cells.forward if parsed.direction == "forward" else cells.backward
            table.setdefault(parsed.stem, {})[parsed.index] = entry
        elif parsed.kind == "parameters_grad":
            cells.grads.setdefault(parsed.stem, []).append(entry)
        elif parsed.kind == "api":
            parent = unit.construct.get(entry.name)
            if parent:
                cells.children.setdefault(parent, []).append(entry)
    return cells


@dataclass(frozen=True)
class _Member:
    """Entries compared together: the fused side's entry and each part's (None where absent)."""

    kind: Literal["forward", "backward", "parameters_grad"]
    fused: Entry | None
    parts: tuple[Entry | None, ...]


@dataclass(frozen=True)
class _Group:
    record: FusedRecord
    fused_on_a: bool
    members: tuple[_Member, ...]
    note: Note | None = None


def _api_op(entry: Entry) -> str:
    parsed = parse_name(entry.name)
    return f"{parsed.prefix}.{parsed.op}"


def _inner_members(fused: Entry, parts: Sequence[Entry], fused_cells: _Cells, part_cells: _Cells,
                   ) -> tuple[list[_Member], Note | None]:
    """The API calls made inside the fused call and inside each part, paired by position when every one of them
    made the same APIs in the same order (else none, and why)."""
    own = [e for e in fused_cells.children.get(fused.name, []) if e.name.endswith(".forward")]
    theirs = [[e for e in part_cells.children.get(p.name, []) if e.name.endswith(".forward")] for p in parts]
    if not own and not any(theirs):
        return [], None
    ops = [_api_op(e) for e in own]
    if any([_api_op(e) for e in calls] != ops for calls in theirs):
        inner = ", ".join(ops) or "none"
        parts_inner = "; ".join(", ".join(_api_op(e) for e in c) or "none" for c in theirs)
        return [], note("fused_members", "the API calls inside the fused call and its parts differ, so they are "
                        f"paired as usual: {inner} against {parts_inner}", fused=inner, parts=parts_inner)
    members: list[_Member] = []
    for k, entry in enumerate(own):
        members.append(_Member("forward", entry, tuple(calls[k] for calls in theirs)))
    for k, entry in enumerate(own):
        fb = fused_cells.by_name.get(_backward_twin(entry.name) or "")
        pb = tuple(part_cells.by_name.get(_backward_twin(calls[k].name) or "") for calls in theirs)
        if fb is not None or any(b is not None for b in pb):
            members.append(_Member("backward", fb, pb))
    return members, None


def _taken_by(groups: Iterable[_Group]) -> set[tuple[bool, str]]:
    """``(on A, entry name)`` of every entry the groups hold (names are per side: both may have a
    ``Functional.linear.2.forward``)."""
    out: set[tuple[bool, str]] = set()
    for group in groups:
        for member in group.members:
            if member.fused is not None:
                out.add((group.fused_on_a, member.fused.name))
            out.update((not group.fused_on_a, p.name) for p in member.parts if p is not None)
    return out


def _find_groups(records: Sequence[FusedRecord], unit_a: RankDump, unit_b: RankDump) -> list[_Group]:
    """The groups of every record in one unit pair (module docstring, step 1); an entry joins one group at most."""
    cells = (_cells_of(unit_a), _cells_of(unit_b))
    groups: list[_Group] = []
    used: set[tuple[bool, str]] = set()
    for record in records:
        regex = _stem_regex(record.fused)
        for fused_on_a in (True, False):
            own, other = (cells[0], cells[1]) if fused_on_a else (cells[1], cells[0])
            grads_done: set[str] = set()
            for stem in sorted(own.forward):
                match = regex.fullmatch(stem)
                if match is None or stem in other.forward:
                    continue
                part_stems = [_fill(p, match.groupdict()) for p in record.parts]
                if any(p not in other.forward or p in own.forward for p in part_stems):
                    continue
                for n in sorted(own.forward[stem]):
                    fused_fwd = own.forward[stem][n]
                    parts_fwd = [other.forward[p].get(n) for p in part_stems]
                    if any(p is None for p in parts_fwd):
                        continue
                    part_entries = [p for p in parts_fwd if p is not None]
                    members = [_Member("forward", fused_fwd, tuple(part_entries))]
                    inner, inner_note = _inner_members(fused_fwd, part_entries, own, other)
                    fused_bwd = own.backward.get(stem, {}).get(n)
                    parts_bwd = tuple(other.backward.get(p, {}).get(n) for p in part_stems)
                    if fused_bwd is not None or any(b is not None for b in parts_bwd):
                        members.append(_Member("backward", fused_bwd, parts_bwd))
                    if stem not in grads_done:
                        grads_done.add(stem)
                        fused_grads = own.grads.get(stem, [])
                        part_grads = [other.grads.get(p, []) for p in part_stems]
                        for k in range(max(len(fused_grads), *(len(g) for g in part_grads))):
                            members.append(_Member(
                                "parameters_grad", fused_grads[k] if k < len(fused_grads) else None,
                                tuple(g[k] if k < len(g) else None for g in part_grads)))
                    members.extend(inner)
                    names = _taken_by([_Group(record, fused_on_a, tuple(members))])
                    if names & used:
                        continue
                    used |= names
                    groups.append(_Group(record, fused_on_a, tuple(members), inner_note))
    return groups


# --------------------------------------------------------------------------------------------------
# rows


def _keyed(entry: Entry | None, kind: str) -> list[tuple[tuple[str, int], Leaf]]:
    """The entry's leaves keyed by (path, occurrence), inputs before outputs (parameters_grad: file order)."""
    if entry is None:
        return []
    leaves = list(entry.leaves())
    if kind != "parameters_grad":
        leaves = [x for x in leaves if not x[0].startswith("output")] + [x for x in leaves if x[0].startswith("output")]
    seen: dict[str, int] = {}
    out = []
    for path, leaf in leaves:
        n = seen.get(path, 0)
        seen[path] = n + 1
        out.append(((path, n), leaf))
    return out


def _short_names(names: Sequence[str]) -> list[str]:
    """The names without their common leading and trailing dotted components (``q_proj``, ``k_proj``, ...)."""
    tokens = [n.split(".") for n in names]
    lo = 0
    while all(len(t) > lo + 1 for t in tokens) and len({t[lo] for t in tokens}) == 1:
        lo += 1
    hi = 0
    while all(len(t) - hi - 1 > lo for t in tokens) and len({t[len(t) - hi - 1] for t in tokens}) == 1:
        hi += 1
    return [".".join(t[lo: len(t) - hi]) for t in tokens]


_MISSING = object()


class _RowMaker:
    """Builds the rows of one group's members in the group's orientation."""

    def __init__(self, group: _Group, source: str) -> None:
        self.group = group
        self.record = group.record
        self.mapped_by = f"fused call: {source}"

    def _pair(self, fused_name: str, parts_name: str, path: str, fused_leaf: Leaf, parts_leaf: Leaf,
              cls_notes: tuple[MatchClass, tuple[str, ...]] | None, notes: tuple[str, ...]) -> RowPair:
        """A row with the fused side's leaf and the parts' (combined) leaf, in A/B order."""
        if self.group.fused_on_a:
            la, lb = fused_leaf, parts_leaf
            a_name, b_name = fused_name, parts_name
        else:
            la, lb = parts_leaf, fused_leaf
            a_name, b_name = parts_name, fused_name
        cls, extra = cls_notes if cls_notes is not None else classify_pair(la, lb)
        return RowPair(a_name, path, cls, la, lb, True, True, notes + extra, b_name, None, self.mapped_by)

    def _one_sided(self, name: str, path: str, leaf: Leaf, fused_side: bool, why: str) -> RowPair:
        on_a = fused_side == self.group.fused_on_a
        if on_a:
            return RowPair(name, path, "only_in_a", leaf, None, True, False, (why,), None, None, self.mapped_by)
        return RowPair(name, path, "only_in_b", None, leaf, False, True, (why,), None, None, self.mapped_by)

    def member_rows(self, member: _Member) -> list[RowPair]:
        """Every row of one member (module docstring, step 3)."""
        rows: list[RowPair] = []
        present = [p for p in member.parts if p is not None]
        fused_name = member.fused.name if member.fused is not None else None
        if member.fused is None or len(present) < len(member.parts):
            missing = "the fused call" if member.fused is None else "some of its parts"
            why = note("fused_not_combined", f"not recorded by {missing}: not combined ({self.record.source})",
                       missing=missing, source=self.record.source)
            for key, leaf in _keyed(member.fused, member.kind):
                rows.append(self._one_sided(member.fused.name, key[0], leaf, True, why))  # type: ignore[union-attr]
            for part in present:
                for key, leaf in _keyed(part, member.kind):
                    rows.append(self._one_sided(part.name, key[0], leaf, False, why))
            return rows
        assert fused_name is not None
        parts = [p for p in member.parts if p is not None]
        part_names = [p.name for p in parts]
        joined = " + ".join(part_names)
        label = " + ".join(_short_names(part_names))
        fused_leaves = _keyed(member.fused, member.kind)
        part_leaves = [dict(_keyed(p, member.kind)) for p in parts]
        keys = [k for k, _ in fused_leaves]
        for table in part_leaves:
            keys += [k for k in table if k not in keys]
        fused_table = dict(fused_leaves)
        for key in keys:
            path = key[0]
            fl = fused_table.get(key, _MISSING)
            pls = [t.get(key, _MISSING) for t in part_leaves]
            if fl is _MISSING or any(pl is _MISSING for pl in pls):
                why = note("fused_slot_not_combined", f"{path} is not recorded by the fused call and every part "
                           f"({label}): not combined ({self.record.source})", path=path, label=label,
                           source=self.record.source)
                if fl is not _MISSING:
                    rows.append(self._one_sided(fused_name, path, fl, True, why))  # type: ignore[arg-type]
                for part, pl in zip(parts, pls, strict=True):
                    if pl is not _MISSING:
                        rows.append(self._one_sided(part.name, path, pl, False, why))  # type: ignore[arg-type]
                continue
            rows.extend(self._leaf_rows(member.kind, fused_name, parts, joined, label, path, fl, pls))  # type: ignore[arg-type]
        return rows

    def _role(self, kind: str, path: str) -> str:
        head = path.split(".", 1)[0]
        if kind == "parameters_grad":
            return "param"
        if kind == "forward":
            return {"input": "input", "kwargs": "input", "output": "output"}.get(head, "param")
        return "output" if head == "input" else "input_grad"

    def _leaf_rows(self, kind: str, fused_name: str, parts: Sequence[Entry], joined: str, label: str, path: str,
                   fl: Leaf, pls: Sequence[Leaf]) -> list[RowPair]:
        rec = self.record
        role = self._role(kind, path)
        tensors = isinstance(fl, TensorLeaf) and all(isinstance(p, TensorLeaf) for p in pls)
        if fl is None and all(p is None for p in pls):
            return [self._pair(fused_name, joined, path, None, None, None,
                               (note("fused_compared_with", f"compared with {label}", label=label),))]
        same = tensors and all(tuple(p.shape) == tuple(fl.shape) for p in pls)  # type: ignore[union-attr]
        if not tensors or (role == "input" and same):
            # shared: the same input feeds every part (or a non-tensor value): compared with each part's
            what = "the same input feeds every part" if tensors else "not a tensor"
            out = []
            shorts = _short_names([p.name for p in parts])
            for short, pl in zip(shorts, pls, strict=True):
                shared = note("fused_shared_input", f"shared input ({what}): compared with {short}'s", what=what,
                              part=short)
                out.append(self._pair(fused_name, joined, path, fl, pl, None, (shared,)))
            return out
        assert isinstance(fl, TensorLeaf)
        part_leaves = [p for p in pls if isinstance(p, TensorLeaf)]
        if role == "input_grad" and same:
            combined = combine_summed(part_leaves)
            summed = note("fused_sum", f"compared as the sum of {label}'s {path} (the gradient w.r.t. an input every "
                          "part shares); of a sum only the Mean follows from the parts' statistics", label=label,
                          path=path)
            return [self._pair(fused_name, joined, path, fl, combined, None, (summed,))]
        axes = [rec.dim, rec.parameters_dim] if role == "output" else [rec.parameters_dim, rec.dim]
        axis = fit_concat_axis(fl.shape, [p.shape for p in part_leaves], axes)
        if axis is None:
            shapes = ", ".join(str(list(p.shape)) for p in part_leaves)
            why = note("fused_not_concatenation", f"the fused {list(fl.shape)} is not the concatenation of {label}'s "
                       f"{shapes} along dim {axes[0]} or {axes[1]} ({rec.source})", shape=list(fl.shape), label=label,
                       shapes=[list(p.shape) for p in part_leaves], dims=[axes[0], axes[1]], source=rec.source)
            return [self._pair(fused_name, joined, path, fl, part_leaves[0], ("shape_mismatch", (why,)), ())]
        combined = combine_concatenated(part_leaves, axis)
        declared = axes[0] if fit_concat_axis(fl.shape, [p.shape for p in part_leaves], [axes[0]]) == axis else axes[1]
        joined_note = note("fused_concatenation", f"compared as the concatenation of {label}'s {path} along dim "
                           f"{declared}", label=label, path=path, dim=declared)
        return [self._pair(fused_name, joined, path, fl, combined, None, (joined_note,))]


def _rows_of(group: _Group) -> list[tuple[Entry | None, list[RowPair]]]:
    """Each member's A-side anchor entry and its rows."""
    maker = _RowMaker(group, group.record.source)
    out = []
    for member in group.members:
        rows = maker.member_rows(member)
        if group.note and member is group.members[0]:
            rows = [r._replace(notes=(*r.notes, group.note)) for r in rows]
        anchor = member.fused if group.fused_on_a else next((p for p in member.parts if p is not None), None)
        out.append((anchor, rows))
    return out


def match_with_fused(
    unit_a: RankDump, unit_b: RankDump, records: Sequence[FusedRecord],
    match: Callable[[Sequence[Entry], Sequence[Entry]], RowPairs],
) -> RowPairs:
    """Pair the rows of two units of one name space, a fused call against the concatenation of its parts where
    ``records`` say so (module docstring).

    Args:
        unit_a, unit_b: the target's and the baseline's unit.
        records: the fused records (:func:`fused_records`).
        match: the ordinary pairing of two entry sequences
            (:func:`~msprobe_cmp.comparator.matching.match_entries`), applied to the entries no group holds.

    Returns:
        Every row of either side exactly once, in execution order: the groups' rows (combined where a fused call
        meets its parts) placed where A's entry stood.  With no group found, ``match(unit_a.entries,
        unit_b.entries)`` unchanged.  A combined leaf's array is read by :func:`load_combined`
        (:mod:`msprobe_cmp.comparator.outcomes` calls it for a :class:`CombinedLeaf`).
    """
    groups = _find_groups(records, unit_a, unit_b) if records else []
    if not groups:
        return match(unit_a.entries, unit_b.entries)
    taken = _taken_by(groups)
    base = match([e for e in unit_a.entries if (True, e.name) not in taken],
                 [e for e in unit_b.entries if (False, e.name) not in taken])
    position = {e.name: i for i, e in enumerate(execution_order(list(unit_a.entries)))}
    pending: list[tuple[float, int, list[RowPair]]] = []
    seq = 0
    for group in groups:
        last = -1.0
        for anchor, rows in _rows_of(group):
            at = float(position[anchor.name]) if anchor is not None and anchor.name in position else last
            last = at
            pending.append((at, seq, rows))
            seq += 1
    pending.sort(key=lambda t: (t[0], t[1]))
    out = RowPairsBuilder()
    k = 0
    copied = 0  # base's rows before this one are in out
    for i, (in_a, entry) in enumerate(zip(base.in_a.tolist(), base.entry.tolist(), strict=True)):
        if in_a:
            here = position.get(base.names[entry])
            if here is not None and k < len(pending) and pending[k][0] < here:
                out.extend_rows(base, copied, i)
                copied = i
            while here is not None and k < len(pending) and pending[k][0] < here:
                out.extend(pending[k][2])
                k += 1
    out.extend_rows(base, copied, len(base))
    for _, _, rows in pending[k:]:
        out.extend(rows)
    return out.finish()

