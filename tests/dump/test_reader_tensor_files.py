"""Tensor files the operating system refuses (symlink loops, names too long, no permission, a path component that is
not a directory) are a DumpFormatError of their row, never an OSError or RuntimeError; every message names the file
under the unit directory as loaded (not its resolved target) and quotes at most 100 characters of a data_name."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from small_dump import ARRAYS, RELU_OUT, write_dump

from msprobe_cmp.dump import TensorLeaf, load_dump
from msprobe_cmp.dump.reader import RankDump, register_tensor_loader, unregister_tensor_loader
from msprobe_cmp.errors import DumpFormatError

RELU = "Functional.relu.0.forward"


def _relu_out(rank: Path) -> tuple[RankDump, TensorLeaf]:
    """The unit at ``rank`` (loaded from that path as given) and its relu output leaf."""
    unit = load_dump(rank).units[0]
    leaf = dict(unit.entry(RELU).leaves())["output.0"]
    assert isinstance(leaf, TensorLeaf)
    return unit, leaf


def _set_relu_data_name(rank: Path, data_name: str) -> None:
    doc = json.loads((rank / "dump.json").read_text())
    doc["data"][RELU]["output"][0]["data_name"] = data_name
    (rank / "dump.json").write_text(json.dumps(doc))


def _error(unit: RankDump, leaf: TensorLeaf) -> str:
    with pytest.raises(DumpFormatError) as info:
        unit.load_tensor(leaf)
    return str(info.value)


def test_a_tensor_file_that_is_a_symlink_to_itself(tmp_path):
    rank = write_dump(tmp_path)
    file = rank / "dump_tensor_data" / RELU_OUT
    file.unlink()
    file.symlink_to(RELU_OUT)  # ln -s X X
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == f"{file}: cannot read the tensor file: symlink loop"


def test_dump_tensor_data_that_is_a_symlink_to_itself(tmp_path):
    rank = write_dump(tmp_path)
    shutil.rmtree(rank / "dump_tensor_data")
    (rank / "dump_tensor_data").symlink_to("dump_tensor_data")
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == f"{rank}/dump_tensor_data/{RELU_OUT}: cannot read the tensor file: symlink loop"


def test_two_symlinks_pointing_at_each_other(tmp_path):
    rank = write_dump(tmp_path)
    tensors = rank / "dump_tensor_data"
    (tensors / RELU_OUT).unlink()
    (tensors / RELU_OUT).symlink_to("other.npy")
    (tensors / "other.npy").symlink_to(RELU_OUT)
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == f"{tensors / RELU_OUT}: cannot read the tensor file: symlink loop"


@pytest.mark.parametrize("length", [300, 5000])
def test_a_data_name_too_long_for_the_file_system_is_quoted_cut(tmp_path, length):
    rank = write_dump(tmp_path)
    name = "M" + "x" * length + ".npy"
    _set_relu_data_name(rank, name)
    unit, leaf = _relu_out(rank)
    shown = f"{rank}/dump_tensor_data/M{'x' * 99}..."
    assert _error(unit, leaf) == f"{shown}: cannot read the tensor file: File name too long"


def test_a_long_data_name_that_is_not_plain_is_quoted_cut(tmp_path):
    rank = write_dump(tmp_path)
    _set_relu_data_name(rank, "../" + "y" * 5000)
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == (f"{rank}/dump.json: data_name '../{'y' * 97}...': not a plain file name inside "
                                  "dump_tensor_data")


def test_a_long_data_name_that_resolves_outside_is_quoted_cut(tmp_path):
    rank = write_dump(tmp_path / "d")
    name = "z" * 200 + ".npy"
    (tmp_path / "outside.npy").write_bytes((rank / "dump_tensor_data" / RELU_OUT).read_bytes())
    (rank / "dump_tensor_data" / name).symlink_to(tmp_path / "outside.npy")
    _set_relu_data_name(rank, name)
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == f"{rank}/dump.json: data_name '{'z' * 100}...': resolves outside dump_tensor_data"


def test_dump_tensor_data_that_is_a_regular_file(tmp_path):
    rank = write_dump(tmp_path)
    shutil.rmtree(rank / "dump_tensor_data")
    (rank / "dump_tensor_data").write_text("not a directory")
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == f"{rank}/dump_tensor_data/{RELU_OUT}: cannot read the tensor file: Not a directory"


def test_a_data_name_the_file_system_cannot_encode(tmp_path):
    rank = write_dump(tmp_path)
    _set_relu_data_name(rank, "\ud800.npy")  # a lone surrogate: valid JSON, no file name on Linux
    unit, leaf = _relu_out(rank)
    assert _error(unit, leaf) == (f"{rank}/dump_tensor_data/\ud800.npy: cannot read the tensor file: the file system "
                                  "cannot encode the name")


@pytest.mark.parametrize(("err", "strerror"), [(errno.EACCES, "Permission denied"), (errno.EIO, "Input/output error")])
def test_stat_refused_by_the_os(tmp_path, monkeypatch, err, strerror):
    rank = write_dump(tmp_path)
    unit, leaf = _relu_out(rank)
    real_stat = os.stat

    def refusing_stat(path, *args, **kwargs):
        if str(path).endswith(RELU_OUT):
            raise OSError(err, os.strerror(err), str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", refusing_stat)  # root ignores chmod: refuse through the call instead
    assert _error(unit, leaf) == f"{rank}/dump_tensor_data/{RELU_OUT}: cannot read the tensor file: {strerror}"


def test_open_refused_by_the_os_does_not_quote_the_resolved_path(tmp_path, monkeypatch):
    real = tmp_path / "storage" / "rank"
    write_dump(tmp_path / "storage")
    shutil.move(str(tmp_path / "storage" / "step0" / "rank"), real)
    (tmp_path / "dump" / "step0").mkdir(parents=True)
    (tmp_path / "dump" / "step0" / "rank").symlink_to(real)
    unit, leaf = _relu_out(tmp_path / "dump")

    def refusing_load(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(np, "load", refusing_load)
    assert _error(unit, leaf) == (f"{tmp_path}/dump/step0/rank/dump_tensor_data/{RELU_OUT}: not a readable npy file: "
                                  "Permission denied")


@pytest.mark.parametrize("linked", ["rank", "dump_tensor_data"])
def test_messages_name_the_file_under_the_unit_directory_as_loaded(tmp_path, linked):
    """A rank directory or dump_tensor_data on shared storage, reached through a symlink: the file is named under
    the dump the user gave, so the reports' path rewriting can hide the root; the target's path never shows."""
    storage = tmp_path / "storage"
    storage.mkdir()
    rank = write_dump(tmp_path / "dump")
    moved = rank if linked == "rank" else rank / "dump_tensor_data"
    shutil.move(str(moved), storage / linked)
    moved.symlink_to(storage / linked)

    unit, leaf = _relu_out(tmp_path / "dump")
    np.testing.assert_array_equal(unit.load_tensor(leaf), ARRAYS[RELU_OUT.removesuffix(".npy")])  # confinement holds
    shown = f"{tmp_path}/dump/step0/rank/dump_tensor_data/{RELU_OUT}"
    target = storage / ("rank/dump_tensor_data" if linked == "rank" else "dump_tensor_data") / RELU_OUT

    target.write_bytes(b"\x93NUMPY junk")
    message = _error(unit, leaf)
    assert message.startswith(f"{shown}: not a readable npy file: ")
    assert str(storage) not in message
    np.save(target, np.zeros((4, 3), np.float32))
    assert _error(unit, leaf) == f"{shown}: shape: file holds [4, 3], dump.json says [3, 4]"
    target.unlink()
    assert _error(unit, leaf) == f"{shown}: tensor file not found"
    target.mkdir()
    assert _error(unit, leaf) == f"{shown}: not a regular file"


def test_a_registered_loaders_errors_name_the_file_as_loaded(tmp_path):
    storage = tmp_path / "storage"
    storage.mkdir()
    rank = write_dump(tmp_path / "dump")
    (rank / "dump_tensor_data" / "t.fake").write_bytes(b"x")
    shutil.move(str(rank / "dump_tensor_data"), storage / "tensors")
    (rank / "dump_tensor_data").symlink_to(storage / "tensors")
    _set_relu_data_name(rank, "t.fake")
    unit, leaf = _relu_out(rank)
    resolved = storage / "tensors" / "t.fake"

    def failing(path: Path) -> np.ndarray:
        assert path == resolved  # the loader reads the file the confinement check resolved
        raise DumpFormatError(path, "dtype", f"cannot decode {path} (bad)")

    def oserror(path: Path) -> np.ndarray:
        raise OSError(errno.EIO, "Input/output error", str(path))

    shown = f"{rank}/dump_tensor_data/t.fake"
    register_tensor_loader(".fake", failing)
    try:
        assert _error(unit, leaf) == f"{shown}: dtype: cannot decode {shown} (bad)"
        register_tensor_loader(".fake", oserror)
        assert _error(unit, leaf) == f"{shown}: cannot read the tensor file: Input/output error"
    finally:
        unregister_tensor_loader(".fake")
    assert _error(unit, leaf) == f"{shown}: unsupported tensor file type '.fake' (only .npy is read)"
