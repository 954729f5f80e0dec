"""Issue 8: reports hold no absolute path of the comparing machine unless --absolute-paths asks for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from small_dump import RELU_OUT
from small_dump import write_dump as _write_dump

from msprobe_cmp.cli import REPORT_FILES, main
from msprobe_cmp.reports.paths import display_names, dump_root


def _pair_with_a_missing_tensor_file(base: Path) -> None:
    rank = _write_dump(base / "runs" / "fp16")
    _write_dump(base / "runs" / "fp32")
    (rank / "dump_tensor_data" / RELU_OUT).unlink()  # its note names the file


def _report_texts(out: Path) -> dict[str, str]:
    return {name: (out / name).read_text(encoding="utf-8") for name in REPORT_FILES}


def test_absolute_roots_are_shown_by_their_last_component(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pair_with_a_missing_tensor_file(tmp_path)
    out = tmp_path / "out"
    assert main([str(tmp_path / "runs" / "fp16"), str(tmp_path / "runs" / "fp32"), "-o", str(out)]) == 0
    texts = _report_texts(out)
    for name, text in texts.items():
        assert str(tmp_path) not in text, name
    assert "fp16/step0/rank/dump_tensor_data/" + RELU_OUT in texts["comparison.json"]


def test_an_absolute_noise_rerun_is_shown_by_its_last_component(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _pair_with_a_missing_tensor_file(tmp_path)
    _write_dump(tmp_path / "runs" / "rerun")
    out = tmp_path / "out"
    runs = tmp_path / "runs"
    assert main([str(runs / "fp16"), str(runs / "fp32"), "--noise", str(runs / "rerun"), "-o", str(out)]) == 0
    texts = _report_texts(out)
    for name, text in texts.items():
        assert str(tmp_path) not in text, name
    assert json.loads(texts["comparison.json"])["input_noise"] == "rerun"


def test_absolute_paths_option_keeps_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pair_with_a_missing_tensor_file(tmp_path)
    out = tmp_path / "out"
    args = [str(tmp_path / "runs" / "fp16"), str(tmp_path / "runs" / "fp32"), "-o", str(out), "--absolute-paths"]
    assert main(args) == 0
    missing = str(tmp_path / "runs" / "fp16" / "step0" / "rank" / "dump_tensor_data" / RELU_OUT)
    assert missing in _report_texts(out)["comparison.json"]


def test_relative_roots_are_shown_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _pair_with_a_missing_tensor_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["runs/fp16", "runs/fp32", "-o", "out"]) == 0
    texts = _report_texts(tmp_path / "out")
    assert all(str(tmp_path) not in t for t in texts.values())
    assert "runs/fp16/step0/rank/dump_tensor_data/" + RELU_OUT in texts["comparison.json"]


def test_display_names_prefer_the_longest_root_and_never_rewrite_the_file_system_root(tmp_path: Path) -> None:
    names = display_names([tmp_path / "a", tmp_path / "a" / "inner", Path("/")])
    keys = list(names)
    assert keys.index(str(tmp_path / "a" / "inner")) < keys.index(str(tmp_path / "a"))
    assert names[str(tmp_path / "a" / "inner")] == "inner"
    assert "/" not in names


@pytest.mark.parametrize("inner", ["step0/rank", "step0/rank/dump.json"])
def test_an_absolute_rank_directory_or_dump_json_is_named_by_its_dump_root(
    tmp_path: Path, inner: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by the new-user check: `…/fp16/step0/rank/dump.json` was shown as "dump.json" and the unit directories
    # (`…/fp16/step0/rank`, which does not contain the input's text) kept this machine's absolute path.
    _pair_with_a_missing_tensor_file(tmp_path)
    out = tmp_path / "out"
    runs = tmp_path / "runs"
    assert main([str(runs / "fp16" / inner), str(runs / "fp32" / inner), "-o", str(out)]) == 0
    texts = _report_texts(out)
    for name, text in texts.items():
        assert str(tmp_path) not in text, name
    doc = json.loads(texts["comparison.json"])
    assert (doc["input_a"], doc["input_b"]) == (f"fp16/{inner}", f"fp32/{inner}")
    assert "fp16/step0/rank/dump_tensor_data/" + RELU_OUT in texts["comparison.json"]


def test_an_input_typed_from_inside_its_dump_root_is_shown_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _pair_with_a_missing_tensor_file(tmp_path)
    monkeypatch.chdir(tmp_path / "runs" / "fp16")
    out = tmp_path / "out"
    assert main(["step0/rank", str(tmp_path / "runs" / "fp32"), "-o", str(out)]) == 0
    texts = _report_texts(out)
    assert all(str(tmp_path) not in t for t in texts.values())
    assert "step0/rank/dump_tensor_data/" + RELU_OUT in texts["comparison.json"]


def test_dump_root_strips_only_the_dump_layout() -> None:
    assert dump_root(Path("/r/fp16/step12/rank3/dump.json")) == Path("/r/fp16")
    assert dump_root(Path("/r/fp16/step0/rank")) == Path("/r/fp16")
    assert dump_root(Path("/r/fp16/rank0/debug.json")) == Path("/r/fp16")
    assert dump_root(Path("/r/fp16")) == Path("/r/fp16")
    assert dump_root(Path("/r/ranking/stepper")) == Path("/r/ranking/stepper")  # not rank<R> / step<N>
    # msprobe 26.x's proc<pid> rank directories, which the reader reads as units, are part of the layout too
    assert dump_root(Path("/r/fp16/step0/proc4242/dump.json")) == Path("/r/fp16")
    assert dump_root(Path("/r/fp16/step3/proc7")) == Path("/r/fp16")
    assert dump_root(Path("/r/fp16/proc")) == Path("/r/fp16/proc")  # proc<pid> has digits
    assert dump_root(Path("/r/fp16/process1")) == Path("/r/fp16/process1")


def test_an_absolute_proc_directory_is_named_by_its_dump_root(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    for run, pid in (("fp16", 4242), ("fp32", 77)):
        rank = _write_dump(tmp_path / "runs" / run)
        rank.rename(rank.parent / f"proc{pid}")  # msprobe 26.x's layout: step0/proc<pid>
    (tmp_path / "runs" / "fp16" / "step0" / "proc4242" / "dump_tensor_data" / RELU_OUT).unlink()
    out = tmp_path / "out"
    a, b = tmp_path / "runs" / "fp16" / "step0" / "proc4242", tmp_path / "runs" / "fp32" / "step0" / "proc77"
    assert main([str(a), str(b), "-o", str(out)]) == 0
    texts = _report_texts(out)
    for name, text in texts.items():
        assert str(tmp_path) not in text, name
    doc = json.loads(texts["comparison.json"])
    assert (doc["input_a"], doc["input_b"]) == ("fp16/step0/proc4242", "fp32/step0/proc77")
    assert "fp16/step0/proc4242/dump_tensor_data/" + RELU_OUT in texts["comparison.json"]
