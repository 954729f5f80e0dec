"""``msprobe-cmp render RESULT -o OUT``: every file a compare writes comes back byte for byte from the saved
comparison alone; bad input is one line on stderr and exit 2, with nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.cli import OUTPUT_FILES, REPORT_FILES, main
from msprobe_cmp.comparator.saved import SAVED_FILE, VERSION

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _without_report_line(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not line.startswith("report: ")]


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> Path:
    """The output directory of a tensor-mode compare with a regression's likely origin (exit 1 or 0 alike)."""
    out = tmp_path_factory.mktemp("compared") / "out"
    assert main([str(FIXTURES / "tensor_b"), str(FIXTURES / "tensor_a"), "-o", str(out)]) in (0, 1)
    return out


@pytest.mark.parametrize("argv", [
    ["tensor_b", "tensor_a"],                                 # tensor mode, a likely origin
    ["statistics_b", "statistics_a"],                         # statistics mode, two steps
    ["statistics_a", "torch_statistics_a"],                   # MindSpore against PyTorch
    ["torch_statistics_a", "statistics_a", "--min-matched-share", "1"],  # too few matched: exit 3
    ["tensor_b", "tensor_a", "--noise", "tensor_a", "--absolute-paths"],
])
def test_render_reproduces_every_file_of_the_compare(tmp_path, capsys, argv):
    argv = [FIXTURES / a if (FIXTURES / a).exists() else a for a in argv]
    code, stdout, err = _run([*argv, "-o", tmp_path / "out"], capsys)
    assert code in (0, 1, 3), err
    written = _files(tmp_path / "out")
    assert set(written) == set(OUTPUT_FILES) and SAVED_FILE in written
    r_code, r_stdout, r_err = _run(["render", tmp_path / "out", "-o", tmp_path / "rendered"], capsys)
    assert (r_code, r_err) == (code, "")
    assert _files(tmp_path / "rendered") == written  # byte for byte, the saved comparison included
    assert _without_report_line(r_stdout) == _without_report_line(stdout)
    assert f"report: {tmp_path / 'rendered' / 'report.html'}" in r_stdout.splitlines()


def test_render_takes_the_file_too_and_renders_a_rendering(compared, tmp_path, capsys):
    code, _, err = _run(["render", compared / SAVED_FILE, "-o", tmp_path / "one"], capsys)
    assert code in (0, 1) and err == ""
    code2, _, _ = _run(["render", tmp_path / "one", "-o", tmp_path / "two"], capsys)
    assert code2 == code
    assert _files(tmp_path / "one") == _files(tmp_path / "two") == _files(compared)


def test_render_does_not_need_the_dumps(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURES / "tensor_b", a)
    shutil.copytree(FIXTURES / "tensor_a", b)
    code, _, _ = _run([a, b, "-o", tmp_path / "out"], capsys)
    shutil.rmtree(a)
    shutil.rmtree(b)
    r_code, _, r_err = _run(["render", tmp_path / "out", "-o", tmp_path / "again"], capsys)
    assert (r_code, r_err) == (code, "")
    assert _files(tmp_path / "again") == _files(tmp_path / "out")


def test_render_refuses_its_own_directory(compared, tmp_path, capsys):
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in compared.iterdir()}
    for out in (compared, compared / ".." / compared.name):
        code, stdout, err = _run(["render", compared, "-o", out], capsys)
        assert code == 2 and stdout == ""
        assert err.count("\n") == 1 and "give another directory" in err
    link = tmp_path / "link"
    link.symlink_to(compared, target_is_directory=True)
    assert _run(["render", compared / SAVED_FILE, "-o", link], capsys)[0] == 2
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in compared.iterdir()} == before


def test_render_keeps_existing_reports_unless_forced(compared, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("keep me")
    code, _, err = _run(["render", compared, "-o", out], capsys)
    assert code == 2 and "summary.md already exists; pass --force" in err
    assert (out / "summary.md").read_text() == "keep me" and not (out / "report.html").exists()
    code, _, err = _run(["render", compared, "-o", out, "--force"], capsys)
    assert code in (0, 1) and err == ""
    assert _files(out) == _files(compared)


def test_compare_keeps_an_existing_saved_comparison_unless_forced(compared, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / SAVED_FILE).write_bytes(b"mine")
    code, _, err = _run([FIXTURES / "tensor_b", FIXTURES / "tensor_a", "-o", out], capsys)
    assert code == 2 and f"{SAVED_FILE} already exists" in err
    assert (out / SAVED_FILE).read_bytes() == b"mine" and not (out / "report.html").exists()


# ---------------------------------------------------------------------------------------------------- bad input
def _broken_version(path: Path) -> None:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays["header"].tobytes())
    header["version"] = VERSION + 1
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(path, **arrays)


def _missing_key(path: Path) -> None:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays["header"].tobytes())
    del header["units"][0]["verdict_counts"]
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize("breaking, expected", [
    (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "truncated or not an npz archive"),
    (lambda p: p.write_bytes(b""), "not a readable saved comparison"),
    (_broken_version, f"version: version {VERSION + 1} is not supported"),
    (_missing_key, "units[0].verdict_counts: missing"),
    (lambda p: p.unlink(), "does not exist"),
])
def test_a_bad_saved_comparison_is_one_line_and_exit_2(compared, tmp_path, capsys, breaking, expected):
    result = tmp_path / "result"
    shutil.copytree(compared, result)
    breaking(result / SAVED_FILE)
    code, stdout, err = _run(["render", result, "-o", tmp_path / "out"], capsys)
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith(f"msprobe-cmp: error: {result / SAVED_FILE}") and expected in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_usage_errors(compared, tmp_path, capsys):
    code, _, err = _run(["render", compared], capsys)  # -o is required
    assert code == 2 and "-o/--output" in err and err.count("\n") == 1
    code, _, err = _run(["render", tmp_path / "nothing-here", "-o", tmp_path / "out"], capsys)
    assert code == 2 and f"{tmp_path / 'nothing-here'}: does not exist" in err
    assert _run(["render", "--help"], capsys)[0] == 0


def test_a_dump_directory_named_render(tmp_path, capsys, monkeypatch):
    """'render' as the first word is the sub-command (as 'demo' is); a dump named render is ./render or comes after
    'compare', and the usage error of 'render TARGET BASELINE' says so when ./render exists."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES / "statistics_b", tmp_path / "render")
    baseline = FIXTURES / "statistics_a"
    code, _, err = _run(["render", baseline, "-o", "out"], capsys)
    assert code == 2 and "write ./render or 'msprobe-cmp compare render BASELINE'" in err and err.count("\n") == 1
    assert _run(["./render", baseline, "-o", "out1"], capsys)[0] == 0
    assert _run(["compare", "render", baseline, "-o", "out2"], capsys)[0] == 0
    assert _files(tmp_path / "out1") == _files(tmp_path / "out2")
    assert set(os.listdir(tmp_path / "out1")) == set(REPORT_FILES) | {SAVED_FILE}


def test_render_refuses_its_own_directory_through_a_symlinked_file(compared, tmp_path, capsys):
    """RESULT a symlink elsewhere to OUT's own comparison-data.npz: OUT is still RESULT's real directory."""
    result = tmp_path / "result"
    shutil.copytree(compared, result)
    before = _files(result)
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "saved.npz"
    link.symlink_to(result / SAVED_FILE)
    code, stdout, err = _run(["render", link, "-o", result, "--force"], capsys)
    assert code == 2 and stdout == "" and "give another directory" in err and err.count("\n") == 1
    assert _files(result) == before


def _dump(root: Path, step: str, shape: str, maximum: float) -> Path:
    rank = root / step / "rank"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(
        '{"task":"statistics","level":"L1","framework":"mindspore","dump_data_dir":null,"data":'
        '{"Functional.relu.0.forward":{"input_args":[],"input_kwargs":{},"output":[{"type":"mindspore.Tensor",'
        f'"dtype":"Float32","shape":{shape},"Max":{maximum},"Min":-1.0,"Mean":0.1,"Norm":2.0}}]}}}}}}')
    return root


@pytest.mark.parametrize("step, shape", [
    ("step18446744073709551616", "[3]"),        # a step number orjson cannot write (read back exact)
    ("step0", "[0,18446744073709551616]"),     # a dimension beyond int64 (an empty tensor)
])
def test_numbers_beyond_64_bits_compare_and_render_byte_for_byte(compared, tmp_path, capsys, step, shape):
    a = _dump(tmp_path / "a", step, shape, 1.0)
    b = _dump(tmp_path / "b", step, shape, 100.0)
    out = tmp_path / "out"
    shutil.copytree(compared, out)  # an earlier result, overwritten with --force
    code, _, err = _run([a, b, "-o", out, "--force"], capsys)
    assert code in (0, 1) and err == ""
    r_code, _, r_err = _run(["render", out, "-o", tmp_path / "rendered"], capsys)
    assert (r_code, r_err) == (code, "")
    assert _files(tmp_path / "rendered") == _files(out)


def test_a_failed_write_never_leaves_an_earlier_saved_comparison_beside_new_reports(compared, tmp_path, capsys,
                                                                                    monkeypatch):
    import msprobe_cmp.cli as cli

    fill_temp = cli._fill_temp
    out = tmp_path / "out"
    shutil.copytree(compared, out)
    before = _files(out)
    calls = []

    def failing_second(path, write, *made):  # the disk fills while the second report is written
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        return fill_temp(path, write, *made)

    monkeypatch.setattr(cli, "_fill_temp", failing_second)
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"], capsys)
    assert code == 2 and "No space left on device" in err
    assert _files(out) == before  # no report replaced: the earlier reports and their saved comparison, as they were
    monkeypatch.undo()

    def failing_save(fh, comparison):  # the disk fills while the saved comparison, written first, is written
        raise OSError(28, "No space left on device", str(out / SAVED_FILE))

    monkeypatch.setattr(cli, "write_saved", failing_save)
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"], capsys)
    assert code == 2 and "No space left on device" in err
    assert _files(out) == before  # nothing replaced
    monkeypatch.undo()

    def unsavable(fh, comparison):
        raise OverflowError("cannot save")

    shutil.rmtree(out)
    shutil.copytree(compared, out)
    monkeypatch.setattr(cli, "write_saved", unsavable)
    before = _files(out)
    assert _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"], capsys)[0] == 4
    assert _files(out) == before  # nothing written when the comparison cannot be saved


def test_cells_whose_construct_json_parents_form_a_cycle_render(tmp_path, capsys):
    """A cyclic construct.json (the compare cuts each chain where it closes) gives cells whose parents form a cycle:
    the saved comparison keeps them and renders byte for byte."""
    for side, source in (("a", "statistics_a"), ("b", "statistics_b")):
        shutil.copytree(FIXTURES / source, tmp_path / side)
        for construct in (tmp_path / side).glob("*/rank/construct.json"):
            cells = json.loads(construct.read_text())
            cells["Cell.blocks.0.Dense.forward.0"] = "Cell.act.ReLU.forward.0"
            cells["Cell.act.ReLU.forward.0"] = "Cell.blocks.0.Dense.forward.0"
            construct.write_text(json.dumps(cells))
    code, _, err = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code in (0, 1) and err == ""
    r_code, _, r_err = _run(["render", tmp_path / "out", "-o", tmp_path / "rendered"], capsys)
    assert (r_code, r_err) == (code, "")
    assert _files(tmp_path / "rendered") == _files(tmp_path / "out")


def _tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def split(monkeypatch):
    """Pages of at most 10 rows: the fixtures' two-step comparison gets an aggregate report.html and a page per
    step."""
    import msprobe_cmp.reports.html as html

    monkeypatch.setattr(html, "PAGE_ROWS", 10)


def test_render_reproduces_the_units_pages_of_a_split_comparison(split, tmp_path, capsys):
    code, stdout, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", tmp_path / "out"], capsys)
    assert code in (0, 1) and err == ""
    assert f"each unit's rows: {tmp_path / 'out' / 'report_units'}{os.sep}" in stdout.splitlines()
    written = _tree(tmp_path / "out")
    assert set(written) == {*OUTPUT_FILES, "report_units/step0_rank.html", "report_units/step1_rank.html"}
    assert b'href="report_units/step1_rank.html"' in written["report.html"]
    assert b'href="../report.html"' in written["report_units/step0_rank.html"]
    r_code, _, r_err = _run(["render", tmp_path / "out", "-o", tmp_path / "rendered"], capsys)
    assert (r_code, r_err) == (code, "")
    assert _tree(tmp_path / "rendered") == written  # byte for byte, the units' pages included


def test_pages_of_units_an_earlier_comparison_had_are_removed(split, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    argv = [FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"]
    _run(argv, capsys)
    (out / "report_units" / "step7_rank.html").write_text("a page of an earlier comparison's unit")
    (out / "report_units" / "notes.txt").write_text("not a page: kept")
    _run(argv, capsys)
    assert sorted(p.name for p in (out / "report_units").iterdir()) == ["notes.txt", "step0_rank.html",
                                                                       "step1_rank.html"]
    (out / "report_units" / "notes.txt").unlink()
    monkeypatch.undo()  # one page again: the earlier pages go, and their directory
    code, _, err = _run(argv, capsys)
    assert code in (0, 1) and err == ""
    assert set(_tree(out)) == set(OUTPUT_FILES) and not (out / "report_units").exists()
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out], capsys)
    assert code == 2 and "already exists" in err


def test_a_failed_units_page_replaces_nothing_and_leaves_no_directory(tmp_path, capsys, monkeypatch):
    import msprobe_cmp.cli as cli
    import msprobe_cmp.reports.html as html

    out = tmp_path / "out"
    code, _, _ = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out], capsys)  # one page
    before = _tree(out)
    assert set(before) == set(OUTPUT_FILES)
    monkeypatch.setattr(html, "PAGE_ROWS", 10)
    fill_temp = cli._fill_temp

    def failing_unit_page(path, write, *made):  # the disk fills while the second unit's page is written
        if path.name == "step1_rank.html":
            raise OSError(28, "No space left on device", str(path))
        return fill_temp(path, write, *made)

    monkeypatch.setattr(cli, "_fill_temp", failing_unit_page)
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"], capsys)
    assert code == 2 and "No space left on device" in err
    assert _tree(out) == before and not (out / "report_units").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_a_stale_page_that_cannot_be_removed_costs_nothing_of_the_new_reports(split, tmp_path, capsys):
    """An earlier comparison's page that cannot be removed (here a directory named like a page) does not stop the
    new reports: they and the saved comparison are all written, render reproduces them, and the page stays."""
    out = tmp_path / "out"
    argv = [FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"]
    _run(argv, capsys)
    (out / "report_units" / "zz.html").mkdir()
    (out / "report_units" / "zz.html" / "inside").write_text("x")
    code, _, err = _run(argv, capsys)
    assert code in (0, 1) and err == ""
    assert (out / "comparison-data.npz").is_file() and (out / "report_units" / "zz.html" / "inside").is_file()
    r_code, _, _ = _run(["render", out, "-o", tmp_path / "rendered"], capsys)
    assert r_code == code
    written = {k: v for k, v in _tree(out).items() if not k.startswith("report_units/zz.html")}
    assert _tree(tmp_path / "rendered") == written


def test_interrupts_are_held_while_the_reports_replace_theirs(compared, tmp_path, capsys, monkeypatch):
    """While the files replace theirs, SIGINT and SIGTERM are blocked (read from the thread's signal mask at each
    replace; no signal is sent: MindSpore, loaded by other tests, handles a real SIGINT its own way), and the mask is
    as before afterwards."""
    import signal

    import msprobe_cmp.cli as cli

    masks = []
    real_replace = os.replace

    def replace_seeing_the_mask(src, dst):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        return real_replace(src, dst)

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    monkeypatch.setattr(cli.os, "replace", replace_seeing_the_mask)
    code = cli.main([str(FIXTURES / "statistics_b"), str(FIXTURES / "statistics_a"), "-o", str(tmp_path / "out")])
    assert code in (0, 1) and len(masks) == len(OUTPUT_FILES)
    assert all({signal.SIGINT, signal.SIGTERM} <= mask for mask in masks)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before and signal.SIGINT not in before


def test_a_full_disk_names_the_report_being_written(compared, tmp_path, capsys, monkeypatch):
    """A write refused without a file name (ENOSPC from fh.write) is reported naming the report it was for, not
    the temporary file, and replaces nothing."""
    import msprobe_cmp.cli as cli

    def full_disk(comparison):
        yield "Npu Name"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "csv_chunks", full_disk)
    out = tmp_path / "out"
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out], capsys)
    assert code == 2
    assert err.strip() == f"msprobe-cmp: error: {out / 'comparison.csv'}: No space left on device"
    assert not out.exists() or list(out.iterdir()) == []


def test_a_full_spool_directory_is_named(tmp_path, monkeypatch):
    """The compared units' rows kept in $TMPDIR (the spool): a full disk there names the directory and says what
    it holds; no temporary file stays."""
    import pickle

    from msprobe_cmp.comparator import spool as spool_module
    from msprobe_cmp.comparator.result import UnitComparison, UnitRef
    from msprobe_cmp.comparator.rowtable import RowTable

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pickle, "dump", full_disk)
    ref_a = UnitRef("a", 0, 0, "step0/rank0", "a")
    unit = UnitComparison(ref_a, UnitRef("b", 0, 0, "step0/rank0", "b"), RowTable.from_rows(()), (), (), None, None,
                          "nothing_compared")
    with pytest.raises(OSError) as caught:
        spool_module.spool_unit(unit, tmp_path, "unit0000000.pkl")
    assert caught.value.filename == str(tmp_path) and caught.value.errno == 28
    assert "No space left on device (keeping the compared units' rows there" in caught.value.strerror
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("in_the_way", ["file", "dangling symlink"])
def test_a_report_units_that_is_not_a_directory_is_named(split, tmp_path, capsys, in_the_way):
    out = tmp_path / "out"
    out.mkdir()
    if in_the_way == "file":
        (out / "report_units").write_text("mine")
    else:
        (out / "report_units").symlink_to(tmp_path / "nowhere")
    code, _, err = _run([FIXTURES / "statistics_b", FIXTURES / "statistics_a", "-o", out, "--force"], capsys)
    assert code == 2
    assert err.strip() == (f"msprobe-cmp: error: {out / 'report_units'}: not a directory (the units' pages are "
                           "written there): move it away")
    assert sorted(p.name for p in out.iterdir()) == ["report_units"]  # nothing written, nothing removed
