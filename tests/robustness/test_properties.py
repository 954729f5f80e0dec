"""Issue 8: property-based tests (hypothesis) of the dump reader and the entry matcher.

Reader: whatever JSON (or bytes) sits in a dump's files, :func:`load_dump` either returns a dump or raises
:class:`DumpFormatError`; never another exception.  Matcher: for any two call sequences, every row of
each side ends in exactly one row of the result, a dump matched against itself is all ``matched``, and
rows keep each side's execution order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprobe_cmp.comparator.matching import match_entries
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf
from msprobe_cmp.errors import DumpFormatError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------------------------------------- reader

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
LEAF_KEYS = ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "md5", "data_name", "requires_grad",
             "nan_count", "value"]
leaf_like = st.dictionaries(st.sampled_from(LEAF_KEYS), json_values, max_size=8)
entry_like = st.dictionaries(
    st.sampled_from(["input_args", "input_kwargs", "output", "input", "parameters", "weight", "x"]),
    st.one_of(json_values, st.lists(leaf_like, max_size=3), leaf_like), max_size=4,
)
dump_like = st.fixed_dictionaries(
    {"task": st.one_of(st.sampled_from(["statistics", "tensor", "md5"]), json_values),
     "data": st.one_of(st.dictionaries(st.text(min_size=1, max_size=40), entry_like, max_size=4), json_values)},
    optional={"level": json_values, "framework": json_values, "dump_data_dir": json_values,
              "not_captured": json_values},
)


def _rank_dir(tmp: Path) -> Path:
    rank = tmp / "step0" / "rank"
    rank.mkdir(parents=True, exist_ok=True)
    return rank


def _load_or_format_error(root: Path) -> bool:
    """True when the dump loaded (and every leaf's tensor could be asked for), False on DumpFormatError."""
    try:
        dump = load_dump(root)
    except DumpFormatError as exc:
        assert "\n" not in str(exc)
        return False
    for unit in dump.units:
        for entry in unit.entries:
            for _path, leaf in entry.leaves():
                if isinstance(leaf, TensorLeaf) and leaf.data_name:
                    try:
                        unit.load_tensor(leaf)
                    except DumpFormatError:
                        pass
    return True


@SETTINGS
@given(doc=dump_like)
def test_any_json_document_loads_or_is_a_format_error(tmp_path_factory, doc) -> None:
    root = tmp_path_factory.mktemp("dump")
    (_rank_dir(root) / "dump.json").write_text(json.dumps(doc))
    _load_or_format_error(root)


@SETTINGS
@given(stack=json_values, construct=json_values)
def test_any_stack_and_construct_json_load_or_are_a_format_error(tmp_path_factory, stack, construct) -> None:
    root = tmp_path_factory.mktemp("dump")
    rank = _rank_dir(root)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "data": {}}))
    (rank / "stack.json").write_text(json.dumps(stack))
    (rank / "construct.json").write_text(json.dumps(construct))
    _load_or_format_error(root)


VALID = json.dumps({
    "task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": None,
    "data": {"Functional.relu.0.forward": {
        "input_args": [{"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 2], "Max": 1.0, "Min": -1.0,
                        "Mean": 0.0, "Norm": 2.0, "data_name": "Functional.relu.0.forward.input.0.npy"}],
        "input_kwargs": {},
        "output": [{"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 2], "Max": 1.0, "Min": 0.0,
                    "Mean": 0.5, "Norm": 1.4142135623730951}]}},
}).encode()


@SETTINGS
@given(edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.sampled_from(["flip", "drop", "insert"]),
                                st.binary(min_size=1, max_size=3)), min_size=1, max_size=4))
def test_corrupted_bytes_of_a_valid_dump_load_or_are_a_format_error(tmp_path_factory, edits) -> None:
    data = bytearray(VALID)
    for pos, op, blob in edits:
        pos = min(pos, len(data) - 1)
        if op == "flip":
            data[pos] ^= blob[0] or 1
        elif op == "drop":
            del data[pos]
        else:
            data[pos:pos] = blob
    root = tmp_path_factory.mktemp("dump")
    rank = _rank_dir(root)
    (rank / "dump.json").write_bytes(bytes(data))
    (rank / "dump_tensor_data").mkdir()
    np.save(rank / "dump_tensor_data" / "Functional.relu.0.forward.input.0.npy", np.eye(2, dtype=np.float32))
    _load_or_format_error(root)


@SETTINGS
@given(blob=st.binary(max_size=300))
def test_any_bytes_as_a_tensor_file_are_a_value_or_a_format_error(tmp_path_factory, blob) -> None:
    root = tmp_path_factory.mktemp("dump")
    rank = _rank_dir(root)
    (rank / "dump.json").write_bytes(VALID)
    (rank / "dump_tensor_data").mkdir()
    (rank / "dump_tensor_data" / "Functional.relu.0.forward.input.0.npy").write_bytes(blob)
    unit = load_dump(root).units[0]
    leaf = next(iter(unit.entries[0].leaves()))[1]
    assert isinstance(leaf, TensorLeaf)
    try:
        arr = unit.load_tensor(leaf)
    except DumpFormatError:
        return
    assert tuple(arr.shape) == (2, 2)  # anything returned agrees with dump.json


# ------------------------------------------------------------------------------------------------ matcher

APIS = ["Functional.relu", "Functional.add", "Tensor.__mul__", "Mint.matmul"]
CELLS = ["Cell.fc1.Dense", "Cell.act.ReLU"]


def _leaf(shape: tuple[int, ...], value: float) -> TensorLeaf:
    return TensorLeaf("mindspore.Tensor", "Float32", shape, value, value, value, abs(value))


@st.composite
def call_sequences(draw) -> list[Entry]:
    """A step's entries: API and cell calls, named with per-name call counters like a recorder does."""
    calls = draw(st.lists(st.tuples(st.sampled_from(APIS + CELLS), st.sampled_from([(2,), (2, 3), ()]),
                                    st.booleans()), max_size=25))
    counts: dict[str, int] = {}
    entries: list[Entry] = []
    for stem, shape, with_kwarg in calls:
        n = counts.get(stem, 0)
        counts[stem] = n + 1
        name = f"{stem}.forward.{n}" if stem.startswith("Cell.") else f"{stem}.{n}.forward"
        kwargs = Map((("alpha", _leaf(shape, 0.5)),)) if with_kwarg else Map()
        entries.append(Entry.forward(name, Seq((_leaf(shape, float(n)),)), kwargs, Seq((_leaf(shape, n + 1.0),))))
    return entries


def _rows_of(entries: list[Entry]) -> list[tuple[str, str]]:
    return [(e.name, p) for e in entries for p, _ in e.leaves()]


@SETTINGS
@given(a=call_sequences(), b=call_sequences())
def test_every_row_of_each_side_is_classified_exactly_once(a, b) -> None:
    rows = match_entries(a, b)
    seen_a = sorted((r.entry_name, r.arg_path) for r in rows if r.in_a)
    seen_b = sorted((r.entry_name_b or r.entry_name, r.arg_path) for r in rows if r.in_b)
    assert seen_a == sorted(_rows_of(a))
    assert seen_b == sorted(_rows_of(b))
    for r in rows:
        assert (r.match_class == "only_in_a") == (r.in_a and not r.in_b)
        assert (r.match_class == "only_in_b") == (r.in_b and not r.in_a)


@SETTINGS
@given(a=call_sequences())
def test_a_dump_matched_with_itself_is_all_matched_in_order(a) -> None:
    rows = match_entries(a, a)
    assert all(r.match_class == "matched" and r.entry_name_b is None for r in rows)
    assert len(rows) == len(_rows_of(a))
    # execution order: the entries appear in A's order (inputs before outputs within an entry)
    order = [e.name for e in a]
    positions = [order.index(r.entry_name) for r in rows]
    assert positions == sorted(positions)


@SETTINGS
@given(a=call_sequences(), drop=st.sets(st.integers(0, 24), max_size=6))
def test_calls_missing_from_b_do_not_unpair_the_others(a, drop) -> None:
    # B is A without some calls, renamed with B's own call counters (as a recorder of B would name them).
    kept = [e for i, e in enumerate(a) if i not in drop]
    counts: dict[str, int] = {}
    b: list[Entry] = []
    for e in kept:
        stem = e.name.rsplit(".forward", 1)[0].rsplit(".", 1)[0] if not e.name.startswith("Cell.") else \
            e.name.rsplit(".forward.", 1)[0]
        n = counts.get(stem, 0)
        counts[stem] = n + 1
        name = f"{stem}.forward.{n}" if stem.startswith("Cell.") else f"{stem}.{n}.forward"
        b.append(Entry(name, e.fields))
    rows = match_entries(a, b)
    matched_b = [r for r in rows if r.in_a and r.in_b]
    # every B row found a partner: B's calls are a subsequence of A's
    assert len([r for r in rows if r.in_b and not r.in_a]) == 0
    assert len(matched_b) == len(_rows_of(b))
