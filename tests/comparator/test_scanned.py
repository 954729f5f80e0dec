"""A comparison of scanned dumps (headers only in this process, entries read by the worker that compares each unit
pair: ``--jobs`` / ``--scheduler``) equals the comparison of the loaded dumps, notes and all."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.mapping import NameMapping
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, load_dump, scan_dump

DATA = Path(__file__).resolve().parent.parent / "data"


def _unit(directory: Path, framework: str, names: list[str], scale: float, md5: str | None = None) -> None:
    w = DumpWriter(directory, DumpMeta(task="statistics", level="L1", framework=framework))
    for k, name in enumerate(names):
        v = (1.0 + k) * scale
        leaf = TensorLeaf("mindspore.Tensor", "Float32", (2, 3), v, -v, v / 2, 3 * v, md5=md5)
        w.put(Entry.forward(name, Seq((leaf,)), Map(), Seq((leaf,))))
    w.flush()


def _side(root: Path, scale: float, extra_rank: bool, md5: str | None = None) -> Path:
    names = ["Functional.relu.0.forward", "Tensor.add.0.forward", "Cell.net.Dense.forward.0"]
    for rank in range(3 if extra_rank else 2):
        _unit(root / "step0" / f"rank{rank}", "mindspore", names, scale, md5)
    _unit(root / "step1" / "rank0", "mindspore", [], scale)  # an empty unit: a note says so
    return root


@pytest.mark.parametrize("md5", [None, "00c0ffee"])
def test_scanned_units_give_the_loaded_comparison(tmp_path: Path, md5: str | None) -> None:
    a = _side(tmp_path / "A", 1.001, extra_rank=True, md5=md5)  # A's rank 2 has no partner: its rows count
    b = _side(tmp_path / "B", 1.0, extra_rank=False, md5=md5)
    loaded = compare(load_dump(a), load_dump(b))
    scanned = compare(scan_dump(a), scan_dump(b))
    assert scanned == loaded
    assert loaded.mode == ("md5" if md5 else "statistics")
    # 2 paired units x 3 entries x 2 rows matched; A's unpaired rank 2 holds 6 rows: share 12 / 18
    assert loaded.matched_share == pytest.approx(12 / 18)
    assert any("empty unit" in n for n in loaded.notes)
    assert any("rank2" in n and "one side only" in n for n in loaded.notes)
    assert all(u.scanned and not u.entries for u in scan_dump(a).units)


def test_scanned_cross_framework_with_a_mapping_file(tmp_path: Path) -> None:
    """msprobe 1.2.2's MindSpore dump of a network against its PyTorch dump of the same network, with a cell mapping whose one key matches no
    cell (the note naming it comes from the worker's facts)."""
    ms = DATA / "msprobe-1.2.2-mindspore" / "statistics_b"
    pt = DATA / "msprobe-1.2.2-mindspore" / "torch_statistics_a"
    mapping = NameMapping(cells={"no_such_cell.Dense": "no_such_module.Linear"}, cell_source="cells.yaml")
    loaded = compare(load_dump(ms), load_dump(pt), CompareOptions(mapping=mapping))
    scanned = compare(scan_dump(ms), scan_dump(pt), CompareOptions(mapping=mapping))
    assert scanned == loaded
    assert any("no_such_cell.Dense" in n and "misspelt" in n for n in loaded.notes)
    assert loaded.mode == "statistics" and dict(loaded.counts)["matched"] > 0


def test_spooled_rows_read_as_the_rows_in_memory(tmp_path: Path) -> None:
    """With a spool directory, each unit's rows and parent chains are kept in a file there and read back as they
    were: the comparison equals the one held in memory, and at most CACHED_UNITS tables are loaded at once."""
    from msprobe_cmp.comparator import spool as spool_module

    a = _side(tmp_path / "A", 1.001, extra_rank=True)
    b = _side(tmp_path / "B", 1.0, extra_rank=False)
    loaded = compare(load_dump(a), load_dump(b))
    (tmp_path / "spool").mkdir()
    spooled = compare(scan_dump(a), scan_dump(b), CompareOptions(spool=tmp_path / "spool"))
    assert all(isinstance(u.rows, spool_module.SpooledRows) for u in spooled.units)
    assert all(isinstance(u.parent_chains, spool_module.SpooledChains) for u in spooled.units)
    (own,) = (tmp_path / "spool").iterdir()  # the comparison's own directory
    assert sorted(p.name for p in own.iterdir()) == [f"unit{k:07d}.pkl" for k in range(3)]
    assert spooled == loaded
    again = compare(scan_dump(b), scan_dump(a), CompareOptions(spool=tmp_path / "spool"))  # B against A, same spool
    assert len(list((tmp_path / "spool").iterdir())) == 2
    assert spooled == loaded and again == compare(load_dump(b), load_dump(a))  # neither overwrote the other
    for u, v in zip(spooled.units, loaded.units, strict=True):
        assert len(u.rows) == len(v.rows) and list(u.rows) == list(v.rows)
        assert u.rows.verdict_counts() == v.rows.verdict_counts()
        assert dict(u.parent_chains) == dict(v.parent_chains) and len(u.parent_chains) == len(v.parent_chains)
        assert all(u.parent_chains.get(e) == c for e, c in v.parent_chains.items())
    assert sum(len(v.parent_chains) for v in loaded.units) > 0  # the chains compared are not all empty
    assert len(spool_module._loaded) <= spool_module.CACHED_UNITS and len(spool_module._chains) <= 2


def test_a_dump_file_of_another_name_is_the_one_the_worker_reads(tmp_path: Path) -> None:
    """A dump JSON given by its path (``other.json``) beside a dump.json of another recording: the worker that
    compares the scanned unit reads the file given, not the directory's dump.json."""
    import shutil

    from msprobe_cmp.cli import main

    for side, source in (("a", "statistics_a"), ("b", "statistics_b")):
        (tmp_path / side).mkdir()
        shutil.copy(DATA / "msprobe-1.2.2-mindspore" / source / "step0" / "rank" / "dump.json",
                    tmp_path / side / "other.json")
        _unit(tmp_path / side, "mindspore", ["Functional.relu.0.forward"], 1.0)  # a one-entry dump.json beside it
    args = [str(tmp_path / "a" / "other.json"), str(tmp_path / "b" / "other.json")]
    assert main([*args, "-o", str(tmp_path / "serial")]) == main([*args, "-o", str(tmp_path / "jobs"), "--jobs", "2"])
    serial = (tmp_path / "serial" / "comparison.csv").read_text()
    assert (tmp_path / "jobs" / "comparison.csv").read_text() == serial
    assert serial.count("\n") > 10  # the msprobe dump's rows, not the one-entry dump.json's
