"""The writer: msprobe layout, atomic files, order kept on replace, and read(write(x)) == x."""

from __future__ import annotations

import json

import numpy as np
import pytest

from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, ValueLeaf, load_dump

LEAF = TensorLeaf("mindspore.Tensor", "Float32", (2,), 2.0, 1.0, 1.5, 5**0.5)


def test_write_then_read_gives_the_same_records(tmp_path, msprobe_fixtures):
    src = load_dump(msprobe_fixtures / "tensor_a" / "step0" / "rank").units[0]
    w = DumpWriter(tmp_path / "step0" / "rank", src.meta)
    for e in src.entries:
        w.put(e)
        w.set_stack(e.name, src.stack.get(e.name, ()))
        if e.name in src.construct:
            w.set_parent(e.name, src.construct[e.name])
    w.flush()
    back = load_dump(tmp_path).units[0]
    assert back.entries == src.entries
    assert dict(back.construct) == dict(src.construct)
    assert {k: v for k, v in back.stack.items() if v} == {k: v for k, v in src.stack.items() if v}
    assert back.meta.task == "tensor" and back.meta.framework == "mindspore"


def test_put_replaces_in_place_keeping_order(tmp_path):
    w = DumpWriter(tmp_path / "rank", DumpMeta("statistics", "L0", "mindspore"))
    pg = "Cell.fc1.Dense.parameters_grad"
    w.put(Entry.forward("Cell.fc1.Dense.forward.0", Seq((LEAF,)), Map(), Seq((LEAF,))))
    w.put(Entry.parameters_grad(pg, [("weight", Seq((None,)))]))
    w.put(Entry.forward("Cell.fc2.Dense.forward.0", Seq((LEAF,)), Map(), Seq((LEAF,))))
    w.put(Entry.parameters_grad(pg, [("weight", Seq((LEAF,)))]))
    w.flush()
    data = json.loads((tmp_path / "rank" / "dump.json").read_text())["data"]
    assert list(data) == ["Cell.fc1.Dense.forward.0", pg, "Cell.fc2.Dense.forward.0"]
    assert data[pg]["weight"][0]["Max"] == 2.0


def test_layout_and_msprobe_spelling(tmp_path):
    rank_dir = tmp_path / "step3" / "rank1"
    w = DumpWriter(rank_dir, DumpMeta("tensor", "mix", "mindspore"))
    w.save_tensor("Functional.relu.0.forward.output.0.npy", np.array([1.0, 2.0], dtype=np.float32))
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (2,), 2.0, 1.0, 1.5, 5**0.5,
                      data_name="Functional.relu.0.forward.output.0.npy")
    w.put(Entry.forward("Functional.relu.0.forward", Seq((leaf, ValueLeaf("int", 3))), Map(), Seq((leaf,))))
    w.flush()
    assert sorted(p.name for p in rank_dir.iterdir()) == ["construct.json", "dump.json", "dump_tensor_data", "stack.json"]
    doc = json.loads((rank_dir / "dump.json").read_text())
    assert doc["dump_data_dir"] == str((rank_dir / "dump_tensor_data").resolve())
    assert doc["data"]["Functional.relu.0.forward"]["input_args"][1] == {"type": "int", "value": 3}
    assert list(doc["data"]["Functional.relu.0.forward"]["output"][0]) == [
        "type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "data_name"]
    unit = load_dump(tmp_path).units[0]
    assert (unit.step, unit.rank) == (3, 1)
    np.testing.assert_array_equal(unit.load_tensor(leaf), [1.0, 2.0])
    assert not [p for p in rank_dir.rglob(".*.tmp")]


def test_nan_statistics_written_as_msprobe_tokens(tmp_path):
    w = DumpWriter(tmp_path / "rank", DumpMeta("statistics", "L1", "mindspore"))
    bad = TensorLeaf("mindspore.Tensor", "Float32", (2,), float("inf"), float("-inf"), float("nan"), float("nan"))
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((bad,))))
    w.flush()
    text = (tmp_path / "rank" / "dump.json").read_text()
    assert "Infinity" in text and "-Infinity" in text and "NaN" in text


def test_failed_write_keeps_previous_file(tmp_path, monkeypatch):
    w = DumpWriter(tmp_path / "rank", DumpMeta("statistics", "L1", "mindspore"))
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((LEAF,))))
    w.flush()
    before = (tmp_path / "rank" / "dump.json").read_bytes()
    w.put(Entry.forward("Functional.x.1.forward", Seq(), Map(), Seq((LEAF,))))

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("msprobe_cmp.dump.writer.os.replace", boom)
    with pytest.raises(OSError):
        w.flush()
    assert (tmp_path / "rank" / "dump.json").read_bytes() == before
    assert not [p for p in (tmp_path / "rank").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("name", ["../x.npy", "a/b.npy", ".hidden.npy", "x.txt"])
def test_save_tensor_refuses_unsafe_names(tmp_path, name):
    w = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "L1", "mindspore"))
    with pytest.raises(ValueError):
        w.save_tensor(name, np.zeros(2))


def test_files_get_the_umask_mode_not_0600(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        w = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "L1", "mindspore"))
        w.save_tensor("t.npy", np.zeros(2, dtype=np.float32))
        w.flush()
    finally:
        os.umask(old)
    for p in [tmp_path / "rank" / "dump.json", tmp_path / "rank" / "dump_tensor_data" / "t.npy"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o644


def test_flush_makes_the_json_durable(tmp_path, monkeypatch):
    import os

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr("msprobe_cmp.dump.writer.os.fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    w = DumpWriter(tmp_path / "rank", DumpMeta("statistics", "L1", "mindspore"))
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((LEAF,))))
    w.flush()
    assert len(synced) == 6  # each of the 3 JSON files, and its directory after the rename


def test_stack_json_is_the_compact_encoding_and_each_stack_is_encoded_once(tmp_path):
    meta = DumpMeta("statistics", "mix", "pytorch")
    shared: dict[tuple[str, ...], str] = {}
    frames = ('File /m/x.py, line 3, in f, \n y = "quoted" \\ backslash', "File /m/é.py, line 9, in <module>, \n f()")
    first = DumpWriter(tmp_path / "step0" / "rank", meta, stack_texts=shared)
    first.set_stack("Functional.relu.0.forward", frames)
    first.set_stack("Functional.relu.1.forward", list(frames))  # a list is kept as the same stack
    first.set_stack("Torch.add.0.forward", ())
    first.flush(durable=False)
    want = {"Functional.relu.0.forward": list(frames), "Functional.relu.1.forward": list(frames),
            "Torch.add.0.forward": []}
    text = (tmp_path / "step0" / "rank" / "stack.json").read_bytes()
    assert text == json.dumps(want, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert set(shared) == {frames, ()}
    # the next step's writer takes the text kept by the first: a stack seen before is not encoded again
    shared[frames] = '["kept text"]'
    second = DumpWriter(tmp_path / "step1" / "rank", meta, stack_texts=shared)
    second.set_stack("Functional.relu.0.forward", frames)
    second.flush(durable=False)
    assert json.loads((tmp_path / "step1" / "rank" / "stack.json").read_text()) == {
        "Functional.relu.0.forward": ["kept text"]}


def test_temporary_names_skip_a_file_left_by_an_earlier_process(tmp_path, monkeypatch):
    import itertools
    import os

    from msprobe_cmp.dump import writer

    monkeypatch.setattr(writer, "_TEMP_NUMBERS", itertools.count(5))  # hex digits below 10 read alike
    left = tmp_path / f".x.npy.{os.getpid():x}.5.tmp"
    left.write_text("left by a process of the same pid")
    fd, name = writer.create_temp(tmp_path / "x.npy")
    os.close(fd)
    assert name == str(tmp_path / f".x.npy.{os.getpid():x}.6.tmp")
    assert left.read_text() == "left by a process of the same pid"


def test_temporary_names_stay_within_255_bytes_however_long_the_name_and_the_count(tmp_path, monkeypatch):
    import itertools
    import os

    from msprobe_cmp.dump import writer

    monkeypatch.setattr(writer, "_TEMP_NUMBERS", itertools.count(16**12))  # a 13-digit hex number
    for i, name in enumerate(("a" * 250 + ".npy", "é" * 125 + ".npy", "\U0001f600" * 62 + ".npy")):
        assert len(name.encode()) in (254, 255, 252)
        target = tmp_path / name
        writer.write_bytes_atomic(target, b"payload")
        assert target.read_bytes() == b"payload"
        fd, tmp = writer.create_temp(target)
        os.close(fd)
        base = os.path.basename(tmp)
        assert len(base.encode()) <= 255
        assert base.endswith(f".{os.getpid():x}.{16**12 + 2 * i + 1:x}.tmp")
        assert name.startswith(base[1:base.index(f".{os.getpid():x}.")])  # a prefix of whole characters
        base.encode("utf-8")  # valid UTF-8: whole characters only
        os.unlink(tmp)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ("a" * 250 + ".npy", "é" * 125 + ".npy", "\U0001f600" * 62 + ".npy"))
