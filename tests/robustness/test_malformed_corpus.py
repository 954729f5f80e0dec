"""Issue 8: a corpus of malformed dumps, each run through the whole command (``msprobe-cmp TARGET BASELINE``).

Every case builds a small valid pair of tensor-task dumps (three entries, ``.npy`` files written here with
numpy), breaks the target in one way, runs :func:`msprobe_cmp.cli.main` and asserts one of two outcomes:

* ``Error``: exit 2, exactly one line on stderr naming the file and the field, no traceback, and no report
  written (nothing partial presented as complete);
* ``Note``: the command completes (exit 0/1/3), the affected entry carries a note saying what was wrong, and
  the entries the fault does not touch are still compared (their rows are ``matched`` with metrics).

The expected outcome of each case is the policy of docs/contracts.md, written down here by hand.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from small_dump import ARRAYS, ENTRIES, RELU_OUT, Y
from small_dump import write_dump as _write_dump

from msprobe_cmp.cli import REPORT_FILES, main

# ------------------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class Error:
    """Exit 2 with one line naming ``file`` (a path suffix) and containing each of ``fields``."""

    file: str
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Note:
    """Completes; a row of ``entry`` carries a note or reason containing ``text``; the untouched entries are
    compared."""

    entry: str
    text: str


@dataclass(frozen=True)
class UnitNote:
    """Completes; the step/rank unit carries a note containing ``text``; every entry is still compared."""

    text: str


@dataclass(frozen=True)
class Completes:
    """Completes with every entry matched (the fault is harmless, e.g. stray files)."""


Mutation = Callable[[Path], None]


def _edit_json(rel: str, fn: Callable[[dict], object]) -> Mutation:
    def mutate(rank: Path) -> None:
        path = rank / rel
        obj = json.loads(path.read_text())
        result = fn(obj)
        path.write_text(json.dumps(obj if result is None else result))
    return mutate


def _write_text(rel: str, text: str) -> Mutation:
    def mutate(rank: Path) -> None:
        (rank / rel).write_text(text)
    return mutate


def _write_bytes(rel: str, data: bytes) -> Mutation:
    def mutate(rank: Path) -> None:
        (rank / rel).write_bytes(data)
    return mutate


def _replace_in(rel: str, old: str, new: str) -> Mutation:
    def mutate(rank: Path) -> None:
        path = rank / rel
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new, 1))
    return mutate


def _leaf_of(obj: dict, entry: str = "Functional.relu.0.forward", side: str = "output", i: int = 0) -> dict:
    return obj["data"][entry][side][i]


def _set_leaf(key: str, value: object, entry: str = "Functional.relu.0.forward") -> Mutation:
    def fn(obj: dict) -> None:
        _leaf_of(obj, entry)[key] = value
    return _edit_json("dump.json", fn)


def _del_leaf(key: str) -> Mutation:
    def fn(obj: dict) -> None:
        del _leaf_of(obj)[key]
    return _edit_json("dump.json", fn)


def _npy(rel_name: str, fn: Callable[[Path], None]) -> Mutation:
    def mutate(rank: Path) -> None:
        fn(rank / "dump_tensor_data" / rel_name)
    return mutate


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])


def _corrupt_header(path: Path) -> None:
    path.write_bytes(b"\x93NUMPY\x01\x00garbage-not-a-header" + os.urandom(40))


def _object_npy(path: Path) -> None:
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


def _outside_symlink(rank: Path) -> None:
    outside = rank.parent.parent.parent / "secret.npy"
    np.save(outside, np.maximum(Y, 0))
    target = rank / "dump_tensor_data" / RELU_OUT
    target.unlink()
    target.symlink_to(outside)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _deep_nesting(rank: Path) -> None:
    text = (rank / "dump.json").read_text()
    deep = "[" * 5000 + "]" * 5000
    (rank / "dump.json").write_text(text.replace('"input_kwargs": {}', f'"input_kwargs": {{"x": {deep}}}', 1))


def _dump_json_is_dir(rank: Path) -> None:
    (rank / "dump.json").unlink()
    (rank / "dump.json").mkdir()


def _remove(rel: str) -> Mutation:
    def mutate(rank: Path) -> None:
        path = rank / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return mutate


def _stray_files(rank: Path) -> None:
    (rank.parent / "README.txt").write_text("notes")
    (rank.parent / ".DS_Store").write_bytes(b"\x00\x01")
    (rank / "notes.md").write_text("x")
    (rank / "dump_tensor_data" / "stray.bin").write_bytes(b"\x00")
    (rank.parent.parent / "stepX").mkdir()


def _empty_step(rank: Path) -> None:
    shutil.rmtree(rank.parent)
    (rank.parent).mkdir()


def _huge_name(rank: Path) -> None:
    path = rank / "dump.json"
    obj = json.loads(path.read_text())
    long_entry = "Functional." + "x" * 100_000 + ".0.forward"
    obj["data"][long_entry] = obj["data"]["Functional.add.0.forward"]
    path.write_text(json.dumps(obj))


def _self_symlink(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # ln -s X X


def _tensor_dir_self_symlink(rank: Path) -> None:
    shutil.rmtree(rank / "dump_tensor_data")
    (rank / "dump_tensor_data").symlink_to("dump_tensor_data")


def _tensor_dir_is_a_file(rank: Path) -> None:
    shutil.rmtree(rank / "dump_tensor_data")
    (rank / "dump_tensor_data").write_text("x")


def _on_shared_storage(rel: str, then: Mutation) -> Mutation:
    """Move ``rank/rel`` (``.``: the rank directory) out of the dump root and link it back, then apply ``then``."""
    def mutate(rank: Path) -> None:
        moved = rank / rel if rel != "." else rank
        storage = rank.parent.parent.parent / "shared-storage" / moved.name
        storage.parent.mkdir()
        shutil.move(str(moved), storage)
        moved.symlink_to(storage)
        then(rank)
    return mutate


def _leaf_edit(fn: Callable[[dict], None]) -> Mutation:
    return _edit_json("dump.json", lambda obj: fn(_leaf_of(obj)))


def _untyped(leaf: dict, **changes: object) -> None:
    del leaf["type"]
    leaf.update(changes)


def _foo_bar_without_dtype(leaf: dict) -> None:
    leaf["type"] = "foo.Bar"
    del leaf["dtype"]


F = "dump.json"
CASES: dict[str, tuple[Mutation, Error | Note | UnitNote | Completes]] = {
    # --- dump.json: not JSON, or not the shape of a dump
    "empty dump.json": (_write_text(F, ""), Error(F)),
    "truncated dump.json": (lambda r: (r / F).write_text((r / F).read_text()[:300]), Error(F)),
    "trailing comma": (_replace_in(F, '"input_kwargs": {}', '"input_kwargs": {},'), Error(F)),
    "single quotes": (_write_text(F, "{'data': {}}"), Error(F)),
    "top level is a list": (_write_text(F, "[]"), Error(F)),
    "top level is a string": (_write_text(F, '"dump"'), Error(F)),
    "top level is null": (_write_text(F, "null"), Error(F)),
    "missing data": (_edit_json(F, lambda o: o.pop("data")), Error(F, ("data",))),
    "data is a list": (_edit_json(F, lambda o: o.update(data=[])), Error(F, ("data",))),
    "data is null": (_edit_json(F, lambda o: o.update(data=None)), Error(F, ("data",))),
    "task is a number": (_edit_json(F, lambda o: o.update(task=3)), Error(F, ("task",))),
    "level is a list": (_edit_json(F, lambda o: o.update(level=["L1"])), Error(F, ("level",))),
    "framework is a dict": (_edit_json(F, lambda o: o.update(framework={})), Error(F, ("framework",))),
    "entry is a list": (_edit_json(F, lambda o: o["data"].update({ENTRIES[1]: []})), Error(F, (ENTRIES[1],))),
    "entry is a string": (_edit_json(F, lambda o: o["data"].update({ENTRIES[1]: "x"})), Error(F, (ENTRIES[1],))),
    "input_args is a dict": (
        _edit_json(F, lambda o: o["data"][ENTRIES[1]].update(input_args={})), Error(F, (ENTRIES[1], "input_args"))),
    "output is a number": (
        _edit_json(F, lambda o: o["data"][ENTRIES[1]].update(output=7)), Error(F, (ENTRIES[1], "output"))),
    "dtype is a number": (_set_leaf("dtype", 32), Error(F, (ENTRIES[1], "dtype"))),
    "shape is a string": (_set_leaf("shape", "3x4"), Error(F, (ENTRIES[1], "shape"))),
    "shape has a negative size": (_set_leaf("shape", [3, -4]), Error(F, (ENTRIES[1], "shape"))),
    "shape has a float": (_set_leaf("shape", [3, 4.5]), Error(F, (ENTRIES[1], "shape"))),
    "Max is a string": (_set_leaf("Max", "big"), Error(F, (ENTRIES[1], "Max"))),
    "Norm is a list": (_set_leaf("Norm", [1.0]), Error(F, (ENTRIES[1], "Norm"))),
    "requires_grad is a string": (_set_leaf("requires_grad", "yes"), Error(F, (ENTRIES[1], "requires_grad"))),
    "md5 is a number": (_set_leaf("md5", 12345), Error(F, (ENTRIES[1], "md5"))),
    "data_name is a number": (_set_leaf("data_name", 5), Error(F, (ENTRIES[1], "data_name"))),
    "tensor leaf without type, dtype a number": (
        _leaf_edit(lambda leaf: _untyped(leaf, dtype=5)), Error(F, (ENTRIES[1], "output[0].type", "needs a string type"))),
    "tensor leaf without type, dtype null": (
        _leaf_edit(lambda leaf: _untyped(leaf, dtype=None)), Error(F, (ENTRIES[1], "output[0].type"))),
    "tensor leaf without type, shape a string": (
        _leaf_edit(lambda leaf: _untyped(leaf, shape="(3, 4)")), Error(F, (ENTRIES[1], "output[0].type"))),
    "tensor leaf of an unknown type without dtype": (
        _leaf_edit(_foo_bar_without_dtype), Error(F, (ENTRIES[1], "output[0].dtype", "needs a string dtype"))),
    "duplicate entry key": (
        _replace_in(F, '"Functional.add.0.forward": {', '"Functional.relu.0.forward": {}, "Functional.add.0.forward": {'),
        Error(F, ("duplicate", ENTRIES[1]))),
    "duplicate top-level key": (_replace_in(F, '"task": "tensor"', '"task": "tensor", "task": "statistics"'),
                                Error(F, ("duplicate", "task"))),
    "non-UTF-8 bytes": (lambda r: (r / F).write_bytes(b'{"task": "tensor", "data": {"\xff\xfe": {}}}'), Error(F)),
    "lone surrogate in a name": (
        _replace_in(F, '"Functional.add.0.forward": {', '"Functional.\\ud800.0.forward": {"output": []}, '
                    '"Functional.add.0.forward": {'), Completes()),
    "nesting 5000 deep": (_deep_nesting, Error(F)),
    "integer with 5000 digits": (_replace_in(F, '"Max": ', '"Max": ' + "9" * 5000 + ", \"x\": "), Error(F)),
    "huge entry name": (_huge_name, Completes()),
    "dump.json is a directory": (_dump_json_is_dir, Error(F)),
    "dump.json missing": (_remove(F), Error("rank")),
    # --- non-finite tokens and values: read, compared, noted
    "NaN token in Max": (_replace_in(F, '"Max": ', '"Max": NaN, "x": '), Completes()),
    "Infinity token in Min": (_replace_in(F, '"Min": ', '"Min": -Infinity, "x": '), Completes()),
    # --- stack.json / construct.json
    "stack.json invalid": (_write_text("stack.json", "{"), Error("stack.json")),
    "stack.json is a list of numbers": (_write_text("stack.json", "[1, 2]"), Error("stack.json")),
    "construct.json invalid": (_write_text("construct.json", "{]"), Error("construct.json")),
    "construct.json parent is a number": (
        _edit_json("construct.json", lambda o: o.update({ENTRIES[1]: 3})), Error("construct.json", (ENTRIES[1],))),
    "stack.json missing": (_remove("stack.json"), Completes()),
    "construct.json missing": (_remove("construct.json"), Completes()),
    # --- tensor files: one entry noted, the rest compared
    "npy missing": (_npy(RELU_OUT, lambda p: p.unlink()), Note(ENTRIES[1], "tensor file")),
    "npy empty": (_npy(RELU_OUT, lambda p: p.write_bytes(b"")), Note(ENTRIES[1], "tensor file")),
    "npy truncated": (_npy(RELU_OUT, _truncate), Note(ENTRIES[1], "tensor file")),
    "npy corrupt header": (_npy(RELU_OUT, _corrupt_header), Note(ENTRIES[1], "tensor file")),
    "npy of random bytes": (_npy(RELU_OUT, lambda p: p.write_bytes(os.urandom(200))), Note(ENTRIES[1], "tensor file")),
    "npy holding Python objects": (_npy(RELU_OUT, _object_npy), Note(ENTRIES[1], "tensor file")),
    "npy shape disagrees": (_npy(RELU_OUT, lambda p: np.save(p, np.zeros((4, 3), np.float32))), Note(ENTRIES[1], "shape")),
    "npy size disagrees": (_npy(RELU_OUT, lambda p: np.save(p, np.zeros(5, np.float32))), Note(ENTRIES[1], "shape")),
    "npy dtype disagrees": (_npy(RELU_OUT, lambda p: np.save(p, np.maximum(Y, 0).astype(np.float64))),
                            Note(ENTRIES[1], "holds float64, dump.json says Float32")),
    "npy is a FIFO": (_npy(RELU_OUT, _fifo), Note(ENTRIES[1], "tensor file")),
    "npy is a directory": (_npy(RELU_OUT, _directory), Note(ENTRIES[1], "tensor file")),
    "npy symlink out of the dump": (_outside_symlink, Note(ENTRIES[1], "resolves outside dump_tensor_data")),
    "data_name with ../": (_set_leaf("data_name", "../../../secret.npy"), Note(ENTRIES[1], "not a plain file name inside dump_tensor_data")),
    "data_name absolute": (_set_leaf("data_name", "/etc/passwd"), Note(ENTRIES[1], "not a plain file name inside dump_tensor_data")),
    "data_name empty": (_set_leaf("data_name", ""), Note(ENTRIES[1], "not a plain file name inside dump_tensor_data")),
    "npy symlink to itself": (_npy(RELU_OUT, _self_symlink), Note(ENTRIES[1], "symlink loop")),
    "dump_tensor_data symlink to itself": (_tensor_dir_self_symlink, Note(ENTRIES[1], "symlink loop")),
    "dump_tensor_data is a file": (_tensor_dir_is_a_file, Note(ENTRIES[1], "cannot read the tensor file: not a directory")),
    "data_name too long for the file system": (
        _set_leaf("data_name", "M" + "x" * 300 + ".npy"),
        Note(ENTRIES[1], "/M" + "x" * 99 + "...: cannot read the tensor file: file name too long")),
    "data_name of 5000 characters": (
        _set_leaf("data_name", "M" + "x" * 5000 + ".npy"),
        Note(ENTRIES[1], "/M" + "x" * 99 + "...: cannot read the tensor file: file name too long")),
    "data_name with a lone surrogate": (
        _set_leaf("data_name", "\ud800.npy"), Note(ENTRIES[1], "the file system cannot encode the name")),
    "rank directory on shared storage, npy corrupt": (
        _on_shared_storage(".", _npy(RELU_OUT, _corrupt_header)),
        Note(ENTRIES[1], f"target/step0/rank/dump_tensor_data/{RELU_OUT}: not a readable npy file")),
    "dump_tensor_data on shared storage, npy missing": (
        _on_shared_storage("dump_tensor_data", _npy(RELU_OUT, lambda p: p.unlink())),
        Note(ENTRIES[1], f"target/step0/rank/dump_tensor_data/{RELU_OUT}: tensor file not found")),
    "dump_tensor_data missing": (_remove("dump_tensor_data"), Note(ENTRIES[1], "tensor file")),
    "data_name removed (statistics only)": (_del_leaf("data_name"), Note(ENTRIES[1], "no tensor file in A")),
    # --- directories
    "stray files and directories": (_stray_files, Completes()),
    "empty step directory": (_empty_step, Error("target", ("no dump.json",))),
    "mixed tasks": (_edit_json(F, lambda o: o.update(task="statistics")), UnitNote("task")),
}


def _run(tmp_path: Path, mutate: Mutation, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, Path, Path]:
    target = tmp_path / "target"
    baseline = tmp_path / "baseline"
    rank = _write_dump(target)
    _write_dump(baseline)
    mutate(rank)
    out = tmp_path / "out"
    code = main([str(target), str(baseline), "-o", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err, out, rank


def _rows(out: Path) -> list[dict]:
    doc = json.loads((out / "comparison.json").read_text())
    return [row for unit in doc["units"] for row in unit["rows"]]


def _row_text(row: dict) -> str:
    return json.dumps(row)


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


def test_the_base_pair_compares_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err, out, _ = _run(tmp_path, lambda rank: None, capsys)
    assert code == 0, err
    rows = _rows(out)
    assert len(rows) == len(ARRAYS)
    assert all(r["match_class"] == "matched" and r["metrics"]["Cosine"] == pytest.approx(1.0) for r in rows)


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutate, expected = CASES[case]
    code, stdout, err, out, rank = _run(tmp_path, mutate, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    if isinstance(expected, Error):
        assert code == 2, (code, stdout, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert expected.file in lines[0], lines[0]
        for field in expected.fields:
            assert field in lines[0], lines[0]
        assert not any((out / name).exists() for name in REPORT_FILES), "a report was written for unusable input"
        return
    assert code in (0, 1, 3), (code, err)
    rows = _rows(out)
    if isinstance(expected, Completes):
        assert code == 0, (code, err, stdout)
        names = {r["name"] for r in rows if r["match_class"] == "matched"}
        assert {n.removesuffix(".npy") for n in ARRAYS} <= names | {n for n in ARRAYS}
        return
    if isinstance(expected, UnitNote):
        doc = json.loads((out / "comparison.json").read_text())
        notes = " ".join(doc["notes"] + [n for unit in doc["units"] for n in unit["notes"]])
        assert expected.text in notes, notes
        assert all(r["match_class"] == "matched" for r in rows)
        return
    affected = [r for r in rows if r["entry"] == expected.entry]
    assert affected, f"no row of {expected.entry}"
    # the explanation is a note, or the reason of the verdict (a row judged by statistics alone is a warning)
    notes = " ".join(" ".join((r.get("notes") or []) + (r.get("reasons") or [])) for r in affected)
    assert notes.strip(), f"no note on {expected.entry}: {[_row_text(r) for r in affected]}"
    assert not any(r["verdict"] == "pass" and r["compared_by"] == "statistics" for r in affected
                   if "compared statistics instead" in " ".join(r.get("notes") or []))
    assert expected.text.lower() in notes.lower(), notes
    untouched = [r for r in rows if r["entry"] != expected.entry and r["entry"] != "Functional.relu.0.forward"]
    assert untouched and all(r["match_class"] == "matched" and r["metrics"] for r in untouched)


def test_no_report_names_the_storage_behind_a_symlinked_rank_directory(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err, out, _ = _run(tmp_path, _on_shared_storage(".", _npy(RELU_OUT, _corrupt_header)), capsys)
    assert code == 0, err
    storage = str(tmp_path / "shared-storage")
    assert storage not in stdout + err
    assert f"target/step0/rank/dump_tensor_data/{RELU_OUT}: not a readable npy file" in (out / "comparison.json").read_text()
    for name in REPORT_FILES:
        assert "shared-storage" not in (out / name).read_text(errors="replace"), name
