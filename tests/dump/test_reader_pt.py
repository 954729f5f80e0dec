"""The dump reader reads msprobe's PyTorch ``.pt`` tensor files once a loader is registered, not before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.dump.reader import load_dump, register_tensor_loader, tensor_loader_for, unregister_tensor_loader
from msprobe_cmp.errors import DumpFormatError

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")


def _leaf(name: str, dtype: str, shape: list[int]) -> dict[str, object]:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": 0.0, "Min": 0.0, "Mean": 0.0,
            "Norm": 0.0, "requires_grad": False, "data_name": name}


def _dump(tmp_path: Path, tensors: dict[str, tuple[object, str]]) -> Path:
    rank = tmp_path / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    args = []
    for name, (tensor, dtype) in tensors.items():
        if isinstance(tensor, bytes):
            (rank / "dump_tensor_data" / name).write_bytes(tensor)
            shape = [2]
        else:
            torch.save(tensor, rank / "dump_tensor_data" / name)
            shape = list(tensor.shape) if hasattr(tensor, "shape") else [2]
        args.append(_leaf(name, dtype, shape))
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": str(rank / "dump_tensor_data"),
           "data": {"Torch.add.0.forward": {"input_args": args, "input_kwargs": {}, "output": []}}}
    (rank / "dump.json").write_text(json.dumps(doc))
    return tmp_path


class _NotATensor:
    """A plain Python object: torch.load(weights_only=True) must refuse to build it."""


@pytest.fixture
def pt_loader() -> Iterator[None]:
    from msprobe_cmp.recorder.adapters.torch_files import load_pt_tensor

    register_tensor_loader(".pt", load_pt_tensor)
    yield
    unregister_tensor_loader(".pt")


def test_pt_files_are_refused_without_a_loader(tmp_path: Path) -> None:
    unit = load_dump(_dump(tmp_path, {"a.pt": (torch.ones(2), "torch.float32")})).units[0]
    assert tensor_loader_for(".pt") is None
    with pytest.raises(DumpFormatError, match=r"unsupported tensor file type '\.pt'"):
        unit.load_tensor(dict(unit.entries[0].leaves())["input.0"])


def test_pt_files_load_with_the_registered_loader(tmp_path: Path, pt_loader: None) -> None:
    values = np.array([[0.5, -1.25, 3.0], [2.0, 1e-3, -7.5]], np.float32)
    bf16_bits = np.array([0x3FC0, 0xC010, 0x0000], np.uint16)  # 1.5, -2.25, 0.0
    bf16 = torch.from_numpy(bf16_bits.view(np.int16)).view(torch.bfloat16)
    ints = torch.arange(4, dtype=torch.int64)
    unit = load_dump(_dump(tmp_path, {
        "f.pt": (torch.from_numpy(values), "torch.float32"),
        "b.pt": (bf16, "torch.bfloat16"),
        "i.pt": (ints, "torch.int64"),
    })).units[0]
    leaves = dict(unit.entries[0].leaves())
    f = unit.load_tensor(leaves["input.0"])
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f, values)
    b = unit.load_tensor(leaves["input.1"])
    assert b.dtype == ml_dtypes.bfloat16  # raw bits decoded by the reader, as for our own .npy files
    np.testing.assert_array_equal(b.astype(np.float32), [1.5, -2.25, 0.0])
    np.testing.assert_array_equal(unit.load_tensor(leaves["input.2"]), [0, 1, 2, 3])


def test_bad_pt_files_are_one_line_errors(tmp_path: Path, pt_loader: None) -> None:
    unit = load_dump(_dump(tmp_path, {
        "junk.pt": (b"not a zip file at all", "torch.float32"),
        "dict.pt": ({"x": torch.ones(2)}, "torch.float32"),
        "shape.pt": (torch.ones(3), "torch.float32"),
    })).units[0]
    leaves = dict(unit.entries[0].leaves())
    with pytest.raises(DumpFormatError, match="not a readable .pt tensor file") as exc:
        unit.load_tensor(leaves["input.0"])
    assert "\n" not in str(exc.value) and "junk.pt" in str(exc.value)
    with pytest.raises(DumpFormatError, match="expected one tensor, found dict"):
        unit.load_tensor(leaves["input.1"])
    doc = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    doc["data"]["Torch.add.0.forward"]["input_args"][2]["shape"] = [4]
    (tmp_path / "step0" / "rank" / "dump.json").write_text(json.dumps(doc))
    unit = load_dump(tmp_path).units[0]
    with pytest.raises(DumpFormatError, match=r"file holds \[3\], dump.json says \[4\]"):
        unit.load_tensor(dict(unit.entries[0].leaves())["input.2"])
    # weights_only: a pickled arbitrary object is refused, never executed
    evil = tmp_path / "step0" / "rank" / "dump_tensor_data" / "evil.pt"
    torch.save(_NotATensor(), evil)
    from msprobe_cmp.recorder.adapters.torch_files import load_pt_tensor

    with pytest.raises(DumpFormatError, match="not a readable .pt tensor file"):
        load_pt_tensor(evil)


def test_npy_cannot_be_replaced() -> None:
    with pytest.raises(ValueError):
        register_tensor_loader(".npy", lambda p: np.zeros(1))


def test_a_compressed_pt_archive_is_refused_before_loading(tmp_path: Path, pt_loader: None) -> None:
    import zipfile

    plain = tmp_path / "plain.pt"
    torch.save(torch.zeros(2), plain)
    packed = tmp_path / "packed.pt"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    root = _dump(tmp_path / "d", {"a.pt": (packed.read_bytes(), "torch.float32")})
    unit = load_dump(root).units[0]
    with pytest.raises(DumpFormatError, match="compressed .pt archive refused"):
        unit.load_tensor(dict(unit.entries[0].leaves())["input.0"])


def test_bf16_pt_values_survive_a_dump_json_that_says_float32(tmp_path: Path, pt_loader: None) -> None:
    values = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    unit = load_dump(_dump(tmp_path, {"a.pt": (values, "torch.float32")})).units[0]
    arr = unit.load_tensor(dict(unit.entries[0].leaves())["input.0"])
    np.testing.assert_array_equal(arr.astype(np.float64), [1.5, -2.25])
