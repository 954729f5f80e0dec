"""Small reader defects found by reviews: a rank directory whose dump.json is not a readable file, two directory
names of one rank, an integer too long to read, an ``"md5"`` key spelled with escapes, and the rare path of
:func:`~msprobe_cmp.dump.reader.read_dump_json` that the standard library's decoder reads."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from small_dump import rank_with

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, load_dump, reader, scan_dump
from msprobe_cmp.dump.reader import load_rank_dump, read_dump_json, scan_rank_dump
from msprobe_cmp.errors import DumpFormatError


def _unit(rank_dir: Path, md5: str | None = None, scale: float = 1.0) -> Path:
    w = DumpWriter(rank_dir, DumpMeta("statistics", "L1", "mindspore"))
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (2,), scale, 0.0, 0.5, 1.0, md5=md5)
    w.put(Entry.forward("Functional.relu.0.forward", Seq((leaf,)), Map(), Seq((leaf,))))
    w.flush()
    return rank_dir


# 1. a rank directory whose dump.json is a directory, a dangling symlink or a FIFO ---------------------------------


def _broken(rank_dir: Path, how: str) -> Path:
    rank_dir.mkdir(parents=True)
    file = rank_dir / "dump.json"
    if how == "directory":
        file.mkdir()
    elif how == "dangling":
        os.symlink("missing.json", file)
    else:
        os.mkfifo(file)
    return file


_PROBLEM = {"directory": "is a directory, not a file", "dangling": "a symlink to a file that does not exist",
            "fifo": "not a regular file"}


@pytest.mark.parametrize("how", ["directory", "dangling", "fifo"])
@pytest.mark.parametrize("read", [load_dump, scan_dump])
def test_a_rank_whose_dump_json_is_not_a_file_is_an_error_not_dropped(tmp_path, how, read):
    _unit(tmp_path / "step0" / "rank0")
    file = _broken(tmp_path / "step0" / "rank1", how)
    for given in (tmp_path, tmp_path / "step0", tmp_path / "step0" / "rank1"):
        with pytest.raises(DumpFormatError) as info:
            read(given)  # never blocks on the FIFO
        assert str(info.value) == f"{file}: {_PROBLEM[how]}"


def test_a_broken_dump_json_is_not_replaced_by_the_debug_json_beside_it(tmp_path):
    rank_dir = tmp_path / "step0" / "rank0"
    file = _broken(rank_dir, "directory")
    (rank_dir / "debug.json").write_text('{"task": "tensor", "level": "debug", "data": {}}')
    with pytest.raises(DumpFormatError, match=f"^{file}: is a directory, not a file$"):
        load_dump(tmp_path)
    # a directory without dump.json still reads its debug.json
    file.rmdir()
    assert load_dump(tmp_path).units[0].json_name == "debug.json"


# 2. rank1 and rank01 in one step ------------------------------------------------------------------------------------


@pytest.mark.parametrize("read", [load_dump, scan_dump])
def test_two_directory_names_of_one_rank_are_an_error_naming_both(tmp_path, read):
    for name in ("rank0", "rank1", "rank01"):
        _unit(tmp_path / "step0" / name)
    for given in (tmp_path, tmp_path / "step0"):
        with pytest.raises(DumpFormatError) as info:
            read(given)
        assert str(info.value) == f"{tmp_path / 'step0'}: rank01 and rank1 are the same rank (1); keep one of them"
    # proc<pid> directories (msprobe 26.x, one per process) all have rank None: still read, the comparison notes them
    for name in ("proc100", "proc200"):
        _unit(tmp_path / "step1" / name)
    assert len(load_dump(tmp_path / "step1").units) == 2



@pytest.mark.parametrize("read", [load_dump, scan_dump])
def test_two_directory_names_of_one_step_are_an_error_naming_both(tmp_path, read):
    for step in ("step0", "step1", "step01"):
        _unit(tmp_path / step / "rank0")
    (tmp_path / "step001").mkdir()  # no rank below it: not a step of the dump, ignored
    with pytest.raises(DumpFormatError) as info:
        read(tmp_path)
    assert str(info.value) == f"{tmp_path}: step01 and step1 are the same step (1); keep one of them"
    (tmp_path / "step01" / "rank0" / "dump.json").unlink()  # step01 holds no unit now: the dump reads
    assert [(u.step, u.rank) for u in read(tmp_path).units] == [(0, 0), (1, 0)]

# 3. an integer too long to read ----------------------------------------------------------------------------------


_LIMIT = sys.get_int_max_str_digits()


_IN_ENTRY = ('{"task": "statistics", "data": {"F.x.0.forward": {"output": [{"type": "mindspore.Tensor", "dtype": '
             '"Float32", "shape": [2], "Max": 1, "Min": -' + "9" * 5000 + '}]}}}')
_IN_HEADER = '{"task": "statistics", "level": {"deep": [0, ' + "9" * 5000 + '], "later": 1}, "data": {}}'


@pytest.mark.parametrize(
    ("read", "text", "field"),
    [
        (load_dump, _IN_ENTRY, "data['F.x.0.forward'].output[0].Min"),  # the scan leaves entries to the worker
        (load_dump, _IN_HEADER, "level.deep[1]"),
        (scan_dump, _IN_HEADER, "level.deep[1]"),
    ],
)
def test_an_integer_too_long_names_the_field_and_the_reason(tmp_path, read, text, field):
    file = rank_with(tmp_path, text) / "dump.json"
    with pytest.raises(DumpFormatError) as info:
        read(file.parent)
    assert str(info.value) == f"{file}: {field}: integer too large (5000 digits; at most {_LIMIT} are read)"


def test_an_integer_too_long_before_another_error_is_still_the_error_given(tmp_path):
    text = '{"task": "statistics", "x": ' + "1" * 5000 + ', "data": {"a": 1, "a": 2}}'
    file = rank_with(tmp_path, text) / "dump.json"
    with pytest.raises(DumpFormatError) as info:
        load_dump(file.parent)
    assert str(info.value) == f"{file}: integer too large (5000 digits; at most {_LIMIT} are read)"
    assert len(str(info.value)) < 300


# 4. an "md5" key spelled with escapes ------------------------------------------------------------------------------


def _escaped_md5(rank_dir: Path) -> Path:
    """``rank_dir``'s dump.json with its "md5" keys spelled ``"\\u006d\\u0064\\u0035"``."""
    file = rank_dir / "dump.json"
    text = file.read_text()
    assert '"md5"' in text
    file.write_text(text.replace('"md5"', '"\\u006d\\u0064\\u0035"'))
    return rank_dir


def test_an_escaped_md5_key_is_seen_by_the_scan(tmp_path):
    a = _escaped_md5(_unit(tmp_path / "a" / "step0" / "rank0", md5="00c0ffee")).parent.parent
    b = _escaped_md5(_unit(tmp_path / "b" / "step0" / "rank0", md5="00c0ffee", scale=2.0)).parent.parent
    unit = scan_rank_dump(a / "step0" / "rank0")
    assert unit.mentions_md5 is True
    assert {leaf.md5 for e in load_rank_dump(a / "step0" / "rank0").entries for _, leaf in e.leaves()} == {"00c0ffee"}
    loaded = compare(load_dump(a), load_dump(b))
    assert loaded.mode == "md5"
    assert compare(scan_dump(a), scan_dump(b)) == loaded
    # no md5 key and no escape that could spell one: the scan still promises no checksum
    assert scan_rank_dump(_unit(tmp_path / "c" / "rank")).mentions_md5 is False


# 5. read_dump_json's fallback to the standard library's decoder reads each entry once ----------------------------


def test_entries_after_a_fallback_are_parsed_once(tmp_path, monkeypatch):
    data = {f"e{k}": {"x": [1e400 if k % 2 else 1.5, k]} for k in range(4)}  # json writes 1e400 as Infinity
    text = '{"task": "statistics", "data": {' + ", ".join(
        f'"e{k}": {{"x": [{"1e400" if k % 2 else "1.5"}, {k}]}}' for k in range(4)) + "}}"
    file = tmp_path / "dump.json"
    file.write_text(text)
    calls: list[int] = []
    real = reader._parse_json_stdlib
    monkeypatch.setattr(reader, "_parse_json_stdlib", lambda f, raw: calls.append(len(raw)) or real(f, raw))
    header, entries = read_dump_json(file, text.encode())
    assert header == {"task": "statistics"}
    assert entries is not None and list(entries) == list(data.items())
    assert calls == [len(text)]  # the whole file once, no entry again
    assert json.loads(text)["data"] == data
