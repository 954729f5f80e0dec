"""The reader on every real msprobe dump in tests/data, on each accepted layout, and on malformed input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from small_dump import rank_with

from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, load_dump
from msprobe_cmp.errors import DumpFormatError

RUNS = ["statistics_a", "statistics_b", "tensor_a", "tensor_b", "torch_statistics_a"]


@pytest.mark.parametrize("run", RUNS)
def test_every_fixture_dump_loads_completely(msprobe_fixtures, run):
    dump = load_dump(msprobe_fixtures / run)
    assert [(u.step, u.rank) for u in dump.units] == [(0, None), (1, None)]
    for unit in dump.units:
        raw = json.loads((unit.directory / "dump.json").read_text())
        # Every entry, in file order, and every leaf of it.
        assert [e.name for e in unit.entries] == list(raw["data"])
        n_raw_tensors = json.dumps(raw["data"]).count('"dtype"') - json.dumps(raw["data"]).count('"mindspore.dtype"')
        n_leaves = sum(isinstance(leaf, TensorLeaf) for e in unit.entries for _, leaf in e.leaves())
        assert n_leaves == n_raw_tensors
        assert unit.meta.task == raw["task"] and unit.meta.framework == raw["framework"]
        assert set(unit.construct) == set(json.loads((unit.directory / "construct.json").read_text()))


def test_fixture_leaf_values_are_the_json_values(msprobe_fixtures):
    unit = load_dump(msprobe_fixtures / "statistics_a" / "step0" / "rank").units[0]
    raw = json.loads((unit.directory / "dump.json").read_text())["data"]["Primitive.matmul.MatMul.0.forward"]
    leaf = dict(unit.entry("Primitive.matmul.MatMul.0.forward").leaves())["input.1"]
    assert leaf.shape == tuple(raw["input_args"][1]["shape"])
    assert (leaf.max, leaf.min, leaf.mean, leaf.norm) == tuple(raw["input_args"][1][k] for k in ("Max", "Min", "Mean", "Norm"))
    assert unit.construct["Primitive.matmul.MatMul.0.forward"] == "Cell.blocks.0.Dense.forward.0"
    assert unit.stack["Primitive.matmul.MatMul.0.forward"][0].startswith("File ")


def test_torch_leaves_carry_requires_grad(msprobe_fixtures):
    unit = load_dump(msprobe_fixtures / "torch_statistics_a").units[0]
    leaves = dict(unit.entry("Functional.linear.0.forward").leaves())
    assert leaves["input.0"].requires_grad is False and leaves["input.1"].requires_grad is True
    assert leaves["input.0"].dtype == "torch.float32"


def test_tensor_files_load_lazily_and_match_json_statistics(msprobe_fixtures):
    unit = load_dump(msprobe_fixtures / "tensor_a").get(1, None)
    checked = 0
    for entry in unit.entries:
        for _, leaf in entry.leaves():
            if isinstance(leaf, TensorLeaf) and leaf.data_name:
                arr = unit.load_tensor(leaf)
                assert isinstance(arr, np.memmap) or arr.base is not None or arr.size <= 1
                a64 = np.asarray(arr, dtype=np.float64)
                assert a64.shape == leaf.shape
                np.testing.assert_allclose(a64.max(), leaf.max, rtol=1e-6)
                np.testing.assert_allclose(np.linalg.norm(a64.ravel()), leaf.norm, rtol=1e-5)
                checked += 1
    assert checked == 88


@pytest.mark.parametrize("which", ["root", "step", "rank", "file"])
def test_accepted_paths(msprobe_fixtures, which):
    root = msprobe_fixtures / "statistics_a"
    path = {"root": root, "step": root / "step1", "rank": root / "step1" / "rank",
            "file": root / "step1" / "rank" / "dump.json"}[which]
    dump = load_dump(path)
    expected = [(0, None), (1, None)] if which == "root" else [(1, None)]
    assert [(u.step, u.rank) for u in dump.units] == expected


def _write_unit(rank_dir: Path, names=("Functional.relu.0.forward",)) -> None:
    w = DumpWriter(rank_dir, DumpMeta("statistics", "L1", "mindspore"))
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.0)
    for n in names:
        w.put(Entry.forward(n, Seq((leaf,)), Map(), Seq((leaf,))))
    w.flush()


def test_steps_and_ranks_sorted_by_number_not_by_name(tmp_path):
    for step in (10, 2):
        for rank in (11, 3):
            _write_unit(tmp_path / f"step{step}" / f"rank{rank}")
    (tmp_path / "step2" / "notes.txt").write_text("stray")
    (tmp_path / "README").write_text("stray")
    dump = load_dump(tmp_path)
    assert [(u.step, u.rank) for u in dump.units] == [(2, 3), (2, 11), (10, 3), (10, 11)]


def test_proc_directory_of_msprobe_26_and_dedup_stack(tmp_path):
    unit_dir = tmp_path / "step0" / "proc1234"
    _write_unit(unit_dir, ("Functional.relu.0.forward", "Functional.relu.1.forward"))
    (unit_dir / "stack.json").write_text(json.dumps(
        {"0": [["Functional.relu.0.forward", "Functional.relu.1.forward"], ["File a.py, line 1, in f, \n x"]]}))
    unit = load_dump(tmp_path).units[0]
    assert (unit.step, unit.rank) == (0, None)
    assert unit.stack["Functional.relu.1.forward"] == ("File a.py, line 1, in f, \n x",)


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b'{"task": "statistics", "data": {', "invalid JSON at line 1"),
        (b'\xff\xfe{}', "not UTF-8"),
        (b'[1, 2]', "top level"),
        (b'{"task": "statistics"}', "data: missing"),
        (b'{"data": {}}', "task: missing"),
        (b'{"task": "statistics", "data": {"a": 1, "a": 2}}', "duplicate key"),
        (b'{"task": "statistics", "data": {"X.0.forward": {"output": [{"type": "mindspore.Tensor", '
         b'"dtype": "Float32", "shape": [2], "Max": "big"}]}}}', "output[0].Max"),
    ],
)
def test_malformed_dump_json_is_one_line_error_naming_file(tmp_path, content, expect):
    rank_dir = tmp_path / "rank"
    rank_dir.mkdir()
    (rank_dir / "dump.json").write_bytes(content)
    with pytest.raises(DumpFormatError) as info:
        load_dump(rank_dir)
    msg = str(info.value)
    assert str(rank_dir / "dump.json") in msg and expect in msg and "\n" not in msg


def test_nan_and_infinity_tokens_are_read(tmp_path):
    rank_dir = tmp_path / "rank"
    rank_dir.mkdir()
    (rank_dir / "dump.json").write_text('{"task": "statistics", "framework": "mindspore", "data": {"Functional.x.0.'
                                        'forward": {"output": [{"type": "mindspore.Tensor", "dtype": "Float32", '
                                        '"shape": [2], "Max": Infinity, "Min": -Infinity, "Mean": NaN, "Norm": NaN}]}}}')
    leaf = dict(load_dump(rank_dir).units[0].entries[0].leaves())["output.0"]
    assert leaf.max == float("inf") and leaf.min == float("-inf") and leaf.mean != leaf.mean


def test_empty_directory_and_missing_path(tmp_path):
    with pytest.raises(DumpFormatError, match="no dump.json or debug.json found"):
        load_dump(tmp_path)
    with pytest.raises(DumpFormatError, match="does not exist"):
        load_dump(tmp_path / "nope")


def _tensor_unit(tmp_path: Path, data_name: str) -> tuple:
    rank_dir = tmp_path / "step0" / "rank"
    w = DumpWriter(rank_dir, DumpMeta("tensor", "L1", "mindspore"))
    w.save_tensor("ok.npy", np.arange(3, dtype=np.float32))
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (3,), 2.0, 0.0, 1.0, 5**0.5, data_name=data_name)
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((leaf,))))
    w.flush()
    unit = load_dump(tmp_path).units[0]
    return unit, unit.entries[0].leaves().__next__()[1]


@pytest.mark.parametrize("data_name", ["../../../etc/passwd", "/etc/passwd", "sub/x.npy", ".."])
def test_data_name_outside_the_dump_is_refused(tmp_path, data_name):
    unit, leaf = _tensor_unit(tmp_path, data_name)
    with pytest.raises(DumpFormatError, match="data_name"):
        unit.load_tensor(leaf)


def test_symlink_out_of_the_dump_is_refused(tmp_path):
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(3, dtype=np.float32))
    unit, leaf = _tensor_unit(tmp_path / "d", "link.npy")
    os.symlink(outside, unit.tensor_dir / "link.npy")
    with pytest.raises(DumpFormatError, match="outside"):
        unit.load_tensor(leaf)


def test_pickled_truncated_missing_and_misshapen_npy(tmp_path):
    unit, leaf = _tensor_unit(tmp_path, "bad.npy")
    np.save(unit.tensor_dir / "bad.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DumpFormatError, match="bad.npy"):
        unit.load_tensor(leaf)
    (unit.tensor_dir / "bad.npy").write_bytes((unit.tensor_dir / "ok.npy").read_bytes()[:20])
    with pytest.raises(DumpFormatError, match="not a readable npy"):
        unit.load_tensor(leaf)
    (unit.tensor_dir / "bad.npy").unlink()
    with pytest.raises(DumpFormatError, match="not found"):
        unit.load_tensor(leaf)
    np.save(unit.tensor_dir / "bad.npy", np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(DumpFormatError, match="shape"):
        unit.load_tensor(leaf)


def test_bf16_raw_bits_are_decoded_by_the_json_dtype(tmp_path):
    import ml_dtypes

    values = np.array([1.5, -2.0, 0.0078125], dtype=ml_dtypes.bfloat16)
    rank_dir = tmp_path / "rank"
    w = DumpWriter(rank_dir, DumpMeta("tensor", "L1", "mindspore"))
    w.save_tensor("t.npy", values.view(np.uint16))
    leaf = TensorLeaf("mindspore.Tensor", "BFloat16", (3,), 1.5, -2.0, None, None, data_name="t.npy")
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((leaf,))))
    w.flush()
    unit = load_dump(rank_dir).units[0]
    got = np.asarray(unit.load_tensor(unit.entries[0].leaves().__next__()[1]), dtype=np.float64)
    np.testing.assert_array_equal(got, [1.5, -2.0, 0.0078125])


def test_copy_of_fixture_with_extra_files_still_reads(tmp_path, msprobe_fixtures):
    shutil.copytree(msprobe_fixtures / "statistics_a", tmp_path / "s")
    (tmp_path / "s" / "step0" / "rank" / "dump.json.bak").write_text("junk")
    assert len(load_dump(tmp_path / "s").units) == 2


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ('{"task": "statistics", "data": {"F.x.0.forward": {"output": [{"type": "mindspore.Tensor", "dtype": '
         '"Float32", "shape": [2], "Max": ' + "9" * 5000 + '}]}}}', "integer too large"),
        ('{"task": "statistics", "extra": ' + "[" * 900 + "]" * 900 + ', "data": {}}', "nested deeper than 64"),
        ('{"task": "statistics", "extra": ' + "[" * 100_000 + "]" * 100_000 + ', "data": {}}', "nested too deeply"),
        ('{"task": "statistics", "data": {"F.x.0.forward": {"output": [{"type": "mindspore.Tensor", "dtype": '
         '"Float32", "shape": [' + ", ".join(["10" * 100] * 2) + ']}]}}}', "too large"),
    ],
)
def test_pathological_json_is_a_one_line_error(tmp_path, text, expect):
    with pytest.raises(DumpFormatError, match=expect) as info:
        load_dump(rank_with(tmp_path, text))
    assert "\n" not in str(info.value)


def test_special_files_are_refused(tmp_path):
    with pytest.raises(DumpFormatError, match="neither a regular file nor a directory"):
        load_dump("/dev/null")
    unit, leaf = _tensor_unit(tmp_path, "fifo.npy")
    os.mkfifo(unit.tensor_dir / "fifo.npy")
    with pytest.raises(DumpFormatError, match="not a regular file"):
        unit.load_tensor(leaf)  # never blocks on the FIFO


def test_void_dtype_and_reshaped_npy_are_refused(tmp_path):
    unit, leaf = _tensor_unit(tmp_path, "bad.npy")
    np.save(unit.tensor_dir / "bad.npy", np.zeros(3, dtype="V4"))
    with pytest.raises(DumpFormatError, match="dtype"):
        unit.load_tensor(leaf)
    np.save(unit.tensor_dir / "bad.npy", np.zeros((3, 1), dtype=np.float32))  # same size, other shape
    with pytest.raises(DumpFormatError, match="shape"):
        unit.load_tensor(leaf)


def test_a_statistic_too_large_for_a_float_is_a_one_line_error(tmp_path):
    text = ('{"task": "statistics", "data": {"F.x.0.forward": {"output": [{"type": "mindspore.Tensor", "dtype": '
            '"Float32", "shape": [2], "Max": 1' + "0" * 400 + '}]}}}')
    with pytest.raises(DumpFormatError, match=r"output\[0\]\.Max: integer too large"):
        load_dump(rank_with(tmp_path, text))


def test_a_typeless_tensor_leaf_is_a_one_line_error_and_a_kwargs_container_is_not(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    leaf = '{"dtype": "Float32", "shape": [2, 3], "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.2}'
    text = '{"task": "statistics", "data": {"F.x.0.forward": {"input_args": [' + leaf + "]}}}"
    rank_dir = rank_with(tmp_path / "bad", text)
    with pytest.raises(DumpFormatError) as info:
        load_dump(rank_dir)
    assert str(info.value) == (f"{rank_dir / 'dump.json'}: data['F.x.0.forward'].input_args[0].type: a tensor leaf "
                               "(dtype and shape) needs a string type, got none")
    # msprobe's kwargs of a creation op: the values are nodes, so the object is a container.
    kwargs = ('{"dtype": {"type": "mindspore.dtype", "value": "Float32"}, "shape": [{"type": "int", "value": 2}, '
              '{"type": "int", "value": 3}]}')
    text = '{"task": "statistics", "data": {"F.zeros.0.forward": {"input_args": [], "input_kwargs": ' + kwargs + "}}}"
    entry = load_dump(rank_with(tmp_path / "good", text)).units[0].entries[0]
    assert isinstance(entry.field("input_kwargs"), Map)
    assert [(p, (leaf.type, leaf.value)) for p, leaf in entry.leaves()] == [
        ("kwargs.dtype", ("mindspore.dtype", "Float32")), ("kwargs.shape.0", ("int", 2)), ("kwargs.shape.1", ("int", 3))]


def test_stack_and_construct_hold_repeated_names_and_frames_once(tmp_path):
    names = ("Cell.net.Dense.0.forward", "Functional.relu.0.forward", "Functional.relu.1.forward", "Tensor.add.0.forward")
    unit_dir = tmp_path / "rank0"
    _write_unit(unit_dir, names)
    frames = ["File a.py, line 1, in f, \n x", "File b.py, line 9, in g, \n y"]
    stack = {n: (frames if k % 2 else frames[:1]) for k, n in enumerate(names)}
    stack["Unknown.0.forward"] = [3]  # not a string: kept as its text
    construct = {n: (None if k == 0 else names[0]) for k, n in enumerate(names)}
    construct["Tensor.add.0.forward"] = [names[0], 0]  # Megatron's [parent, micro_step]
    (unit_dir / "stack.json").write_text(json.dumps(stack))
    (unit_dir / "construct.json").write_text(json.dumps(construct))
    unit = load_dump(unit_dir).units[0]
    # the values are the files' own (read independently here)
    assert dict(unit.stack) == {k: tuple(str(f) for f in v) for k, v in stack.items()}
    assert dict(unit.construct) == {k: (v[0] if isinstance(v, list) else v) for k, v in construct.items()}
    # held once: equal stacks are one tuple, equal frames one string, the names the entries' own strings
    assert unit.stack[names[1]] is unit.stack[names[3]]
    assert unit.stack[names[0]][0] is unit.stack[names[1]][0]
    by_name = {e.name: e.name for e in unit.entries}
    assert all(key is by_name[key] for key in unit.stack if key in by_name)
    assert all(key is by_name[key] for key in unit.construct)
    assert all(parent is by_name[names[0]] for parent in unit.construct.values() if parent is not None)
