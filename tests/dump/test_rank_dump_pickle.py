"""A loaded unit pickles compactly and comes back equal (``RankDump.__reduce__``, ``schema.pack_entries``): how the
CLI's forked process sends the target it loaded."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import MappingProxyType

from msprobe_cmp.dump.reader import RankDump, load_dump
from msprobe_cmp.dump.schema import DumpMeta, Entry, Map, Seq, TensorLeaf, pack_entries, unpack_entries

ROOT = Path(__file__).resolve().parents[1] / "data"


def _same_unit(a: RankDump, b: RankDump) -> None:
    assert a.entries == b.entries
    assert [e.flat() for e in a.entries] == [e.flat() for e in b.entries]
    assert [e.fields for e in a.entries] == [e.fields for e in b.entries]
    assert dict(a.stack) == dict(b.stack) and dict(a.construct) == dict(b.construct)
    assert isinstance(b.stack, MappingProxyType) and isinstance(b.construct, MappingProxyType)
    assert (a.directory, a.step, a.rank, a.meta, a.json_name, a.unread_json, a.scanned, a.mentions_md5) == (
        b.directory, b.step, b.rank, b.meta, b.json_name, b.unread_json, b.scanned, b.mentions_md5)


def test_real_msprobe_dumps_round_trip_unit_by_unit():
    for name in ("msprobe-1.2.2-mindspore/statistics_a", "msprobe-1.2.2-mindspore/tensor_a", "msprobe-1.2.2-pytorch"):
        dump = load_dump(ROOT / name)
        back = pickle.loads(pickle.dumps(dump))
        assert back.root == dump.root and len(back.units) == len(dump.units) > 0
        for a, b in zip(dump.units, back.units, strict=True):
            assert a.entries and a.stack  # real units: entries and call stacks to carry
            _same_unit(a, b)


def test_the_file_columns_are_pickled_once_not_a_leaf_each():
    unit = load_dump(ROOT / "msprobe-1.2.2-pytorch").units[0]
    leaves = sum(isinstance(leaf, TensorLeaf) for e in unit.entries for leaf in e.flat()[1])
    assert leaves > 100
    packed = pack_entries(unit.entries)
    assert all(type(item) is tuple and item[2] is packed[0][2] for item in packed)  # one columns object for all
    back = unpack_entries(pickle.loads(pickle.dumps(packed)))
    assert back == unit.entries
    shared = {id(e.leaf_rows()[0]) for e in back}
    assert len(shared) == 1  # the unpickled entries share one columns object again
    assert [e.leaf_rows()[1] for e in back] == [e.leaf_rows()[1] for e in unit.entries]  # at the same rows


def test_entries_built_through_the_constructor_round_trip_as_themselves():
    leaf = TensorLeaf("torch.Tensor", "torch.float32", (2, 3), 1.0, -1.0, 0.0, 2.0, md5="ab")
    built = Entry.forward("Functional.relu.0.forward", Seq((leaf,)), Map(()), Seq((leaf,)))
    read = load_dump(ROOT / "msprobe-1.2.2-pytorch").units[0].entries[0]
    packed = pack_entries((built, read))
    assert packed[0] is built and type(packed[1]) is tuple
    assert unpack_entries(pickle.loads(pickle.dumps(packed))) == (built, read)
    unit = RankDump(Path("x"), 0, 1, DumpMeta("statistics", "L1", "pytorch"), (built,))
    _same_unit(unit, pickle.loads(pickle.dumps(unit)))
