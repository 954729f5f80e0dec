"""msprobe's PyTorch tensor-mode dumps store tensors as .pt: the CLI reads them through the torch adapter's
restricted loader (torch.load(weights_only=True)), and falls back to statistics with a note without torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from small_dump import ARRAYS, dump_json, write_dump

from msprobe_cmp.cli import main


def _write_pt_dump(root: Path, scale: float) -> None:
    """The small dump's tensors as a PyTorch dump with .pt files (msprobe's PyTorch layout), times ``scale``."""
    torch = pytest.importorskip("torch")
    rank = root / "step0" / "rank"
    (rank / "dump_tensor_data").mkdir(parents=True)
    doc = dump_json()
    doc["framework"] = "pytorch"
    for entry in doc["data"].values():
        for leaf in (*entry["input_args"], *entry["output"]):
            name = leaf["data_name"].removesuffix(".npy")
            leaf.update(type="torch.Tensor", dtype="torch.float32", data_name=f"{name}.pt", requires_grad=False)
            torch.save(torch.from_numpy(ARRAYS[name] * np.float32(scale)), rank / "dump_tensor_data" / f"{name}.pt")
    (rank / "dump.json").write_text(json.dumps(doc))


def _rows(out: Path) -> list[dict]:
    return [r for u in json.loads((out / "comparison.json").read_text())["units"] for r in u["rows"]]


def test_pt_tensors_are_compared_as_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_pt_dump(tmp_path / "a", scale=1.001)
    _write_pt_dump(tmp_path / "b", scale=1.0)
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "out")]) in (0, 1)
    rows = _rows(tmp_path / "out")
    assert len(rows) == len(ARRAYS)
    for row in rows:
        assert row["compared_by"] == "tensor", row
        ref = ARRAYS[row["name"]].astype(np.float64)
        expected = np.max(np.abs(ref * np.float32(1.001).astype(np.float64) - ref))
        # the target was scaled in float32: compare with the float32 product, upcast
        got_a = (ARRAYS[row["name"]] * np.float32(1.001)).astype(np.float64)
        assert row["metrics"]["MaxAbsErr"] == pytest.approx(np.max(np.abs(got_a - ref)), rel=1e-12)
        assert row["metrics"]["MaxAbsErr"] == pytest.approx(expected, rel=1e-3)


def test_pt_against_npy_of_the_same_values_is_identical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_pt_dump(tmp_path / "a", scale=1.0)
    write_dump(tmp_path / "b")  # MindSpore names and .npy files: same entry names, same values
    main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "out")])
    rows = [r for r in _rows(tmp_path / "out") if r["match_class"] == "matched"]
    assert rows and all(r["compared_by"] == "tensor" and r["metrics"]["MaxAbsErr"] == 0.0 for r in rows)


def test_without_torch_pt_rows_fall_back_to_statistics_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_pt_dump(tmp_path / "a", scale=1.0)
    _write_pt_dump(tmp_path / "b", scale=1.0)
    import msprobe_cmp.recorder.adapters.torch_files as torch_files
    from msprobe_cmp.errors import MissingFrameworkError

    def no_torch(path: Path) -> np.ndarray:
        raise MissingFrameworkError("torch")

    monkeypatch.setattr(torch_files, "load_pt_tensor", no_torch)
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "out")]) == 0
    rows = _rows(tmp_path / "out")
    assert all(r["compared_by"] == "statistics" for r in rows)
    # the statistics agree, but the values were not compared: each row is a warning saying why (exit code still 0)
    assert all(r["verdict"] == "warning" and any("needs torch" in n for n in r["reasons"]) for r in rows)
