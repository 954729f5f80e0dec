"""Steps of two recordings mixed in one dump_path: each dump.json carries its recording's id (header key
``recording``), and the comparator says when a rank's steps come from more than one recording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msprobe_cmp import PrecisionDebugger
from msprobe_cmp.comparator import compare
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, load_dump
from msprobe_cmp.dump.schema import RECORDING_KEY


def _unit(rank_dir: Path, recording: str | None) -> None:
    extra = () if recording is None else ((RECORDING_KEY, recording),)
    w = DumpWriter(rank_dir, DumpMeta("statistics", "L1", "pytorch", extra=extra))
    leaf = TensorLeaf("torch.Tensor", "torch.float32", (2,), 1.0, 0.0, 0.5, 1.0)
    w.put(Entry.forward("Functional.relu.0.forward", Seq((leaf,)), Map(), Seq((leaf,))))
    w.flush()


def test_a_rank_whose_steps_come_from_two_recordings_is_noted(tmp_path: Path) -> None:
    for step, rec in ((0, "run-2"), (1, "run-2"), (2, "run-1"), (3, "run-1")):
        _unit(tmp_path / "a" / f"step{step}" / "rank0", rec)
        _unit(tmp_path / "b" / f"step{step}" / "rank0", "run-b")
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    mixed = [n for n in c.notes if "recordings" in n]
    assert mixed == [
        "A's rank0 holds steps of 2 recordings (run-1: step 2, 3; run-2: step 0, 1): a dump_path reused without "
        "emptying it keeps the steps the later run did not record, so some steps may be stale"
    ]


@pytest.mark.parametrize("recordings", [("same", "same"), (None, None)])
def test_one_recording_or_none_recorded_gives_no_note(tmp_path: Path, recordings: tuple[Any, Any]) -> None:
    for step, rec in enumerate(recordings):  # msprobe's dumps carry no recording id
        _unit(tmp_path / "a" / f"step{step}" / "rank0", rec)
        _unit(tmp_path / "b" / f"step{step}" / "rank0", rec)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert not [n for n in c.notes if "recordings" in n]


@pytest.mark.torch
def test_recording_twice_into_one_dump_path_is_noted(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    x = torch.randn(2, 4)

    def record(steps: int) -> None:
        with PrecisionDebugger(dump_path=tmp_path / "dump", task="statistics", level="L1",
                               framework="pytorch") as dbg:
            for _ in range(steps):
                dbg.start(net)
                net(x).sum().backward()
                dbg.stop()
                dbg.step()

    record(3)
    first = {json.loads((tmp_path / "dump" / f"step{k}" / "rank" / "dump.json").read_text())[RECORDING_KEY]
             for k in range(3)}
    record(1)  # the later run records step0 only: steps 1 and 2 are the earlier run's
    ids = [json.loads((tmp_path / "dump" / f"step{k}" / "rank" / "dump.json").read_text())[RECORDING_KEY]
           for k in range(3)]
    assert len(first) == 1 and ids[1] == ids[2] == first.pop() and ids[0] != ids[1]
    dump = load_dump(tmp_path / "dump")
    c = compare(dump, dump)
    parts = "; ".join(f"{rid}: step {steps}" for rid, steps in sorted({ids[0]: "0", ids[1]: "1, 2"}.items()))
    expected = (f"holds steps of 2 recordings ({parts}): a dump_path reused without emptying it keeps the steps the "
                "later run did not record, so some steps may be stale")
    assert [n for n in c.notes if "recordings" in n] == [f"A's rank {expected}", f"B's rank {expected}"]


def test_a_rank_directory_holding_dump_json_and_debug_json_says_which_was_read(tmp_path: Path) -> None:
    # Found by the breaker: a debug-level recording into a dump_path of an earlier mix-level one leaves both files
    # in each rank directory, and only the stale dump.json was read, silently.
    for side in ("a", "b"):
        _unit(tmp_path / side / "step0" / "rank", "run-1")
    debug = tmp_path / "a" / "step0" / "rank" / "debug.json"
    debug.write_text(json.dumps({"task": "statistics", "level": "debug", "framework": "pytorch", "data": {}}))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert ("A step0/rank: the rank directory also holds debug.json, which was not read (dump.json was): files of two "
            "recordings; give debug.json itself to compare it") in c.notes
    assert not [n for n in c.notes if n.startswith("B ")]


def test_errors_about_a_debug_json_name_it(tmp_path: Path) -> None:
    # Found by the breaker: a bad data_name in a debug.json was reported against a dump.json that does not exist.
    from msprobe_cmp.errors import DumpFormatError

    rank = tmp_path / "d" / "step0" / "rank"
    rank.mkdir(parents=True)
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0, "data_name": "../x.npy"}
    (rank / "debug.json").write_text(json.dumps(
        {"task": "tensor", "level": "debug", "framework": "pytorch", "data": {"loss.0": leaf}}))
    unit = load_dump(tmp_path / "d").units[0]
    assert unit.json_name == "debug.json" and unit.unread_json is None
    (name, tensor), = [(n, lf) for e in unit.entries for n, lf in e.leaves() if isinstance(lf, TensorLeaf)]
    with pytest.raises(DumpFormatError) as info:
        unit.load_tensor(tensor)
    assert str(info.value).startswith(f"{rank / 'debug.json'}: data_name '../x.npy'")


def test_a_noise_rerun_whose_steps_come_from_two_recordings_is_noted(tmp_path: Path) -> None:
    # Found by the breaker: the rerun's stale steps were not noted, although the noise is measured on them.
    from msprobe_cmp.comparator import CompareOptions

    for step, rec in ((0, "rerun-2"), (1, "rerun-1")):
        _unit(tmp_path / "rerun" / f"step{step}" / "rank0", rec)
        for side in ("a", "b"):
            _unit(tmp_path / side / f"step{step}" / "rank0", f"run-{side}")
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(noise=load_dump(tmp_path / "rerun")))
    assert [n for n in c.notes if "recordings" in n] == [
        "the rerun's rank0 holds steps of 2 recordings (rerun-1: step 1; rerun-2: step 0): a dump_path reused without "
        "emptying it keeps the steps the later run did not record, so some steps may be stale"
    ]
