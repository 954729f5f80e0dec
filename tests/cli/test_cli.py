"""The msprobe-cmp command on real msprobe dumps: exit codes, one-line errors, outputs never overwritten."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe_cmp.cli import main
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_dump_compared_with_itself_passes(msprobe_fixtures, tmp_path, capsys):
    run = msprobe_fixtures / "tensor_a"
    code, out, err = _run([run, run, "-o", tmp_path / "out"], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    rows = [r for u in doc["units"] for r in u["rows"]]
    tensor_rows = [r for r in rows if r.get("metrics", {}).get("Cosine") is not None]
    assert rows and all(r["match_class"] == "matched" for r in rows)
    assert tensor_rows and all(r["metrics"]["Cosine"] == 1.0 for r in tensor_rows)
    assert "PASS" in out and str(tmp_path / "out" / "report.html") in out


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_fixture_pair_b_against_a(msprobe_fixtures, tmp_path, capsys, task):
    code, out, err = _run([msprobe_fixtures / f"{task}_b", msprobe_fixtures / f"{task}_a", "-o", tmp_path], capsys)
    # +0.001 on one weight: the outputs differ but stay within msprobe's thresholds.
    assert code == 0, err
    assert "first divergent: " in out and "Cell.blocks.0.Dense.forward.0" in out
    for name in ("report.html", "comparison.json", "comparison.csv"):
        assert (tmp_path / name).stat().st_size > 0


def test_step_and_rank_directories_and_dump_json_are_accepted(msprobe_fixtures, tmp_path, capsys):
    a = msprobe_fixtures / "statistics_b" / "step1" / "rank" / "dump.json"
    b = msprobe_fixtures / "statistics_a" / "step1"
    code, _, err = _run([a, b, "-o", tmp_path], capsys)
    assert code == 0, err


def test_a_rank_directory_against_a_dump_of_steps_says_what_to_give(msprobe_fixtures, tmp_path, capsys):
    # Found by the new-user check: nothing was compared and the note gave no hint why.
    a = tmp_path / "copied" / "rank"  # a rank directory copied out of its step: its step cannot be known
    shutil.copytree(msprobe_fixtures / "tensor_b" / "step1" / "rank", a)
    code, out, _ = _run([a / "dump.json", msprobe_fixtures / "tensor_a", "-o", tmp_path / "out"], capsys)
    assert code == 3 and out.splitlines()[0] == "verdict: NOTHING_COMPARED  (tensor mode)"  # both are tensor dumps
    hint = ("note: A's unit(s) have no step directory while B has step(s) 0, 1: give one of B's step directories "
            "(e.g. tensor_a/step0) to compare against them")
    assert hint in out.splitlines()
    # following the hint compares: a step-less unit is paired by rank with the other side's one step
    code, out, _ = _run([a / "dump.json", msprobe_fixtures / "tensor_a" / "step1", "-o", tmp_path / "out2"], capsys)
    assert code == 0 and "verdict: PASS" in out.splitlines()[0]


def test_step_less_rank_directories_pair_by_rank_with_the_other_sides_one_step(tmp_path, capsys):
    # Found by the breaker: lone/rank0 + lone/rank1 (no step directory) against two/step0/{rank0,rank1} compared
    # nothing and the hint pointed at a path that does not exist.
    names = ["Functional.relu.0.forward"]
    for rank in (0, 1):
        _unit(tmp_path / "lone" / f"rank{rank}", names)
        _unit(tmp_path / "two" / "step0" / f"rank{rank}", names)
    code, out, _ = _run([tmp_path / "lone", tmp_path / "two" / "step0", "-o", tmp_path / "out"], capsys)
    assert code == 0, out
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert [(u["a"]["label"], u["b"]["label"]) for u in doc["units"]] == [("-/rank0", "step0/rank0"),
                                                                        ("-/rank1", "step0/rank1")]
    assert ("note: one side's units have no step directory: paired by rank (A -/rank0 with B step0/rank0, "
            "A -/rank1 with B step0/rank1)") in out.splitlines()


def _unit(path: Path, names):
    w = DumpWriter(path, DumpMeta("statistics", "L1", "mindspore"))
    leaf = TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.0)
    for n in names:
        w.put(Entry.forward(n, Seq((leaf,)), Map(), Seq((leaf,))))
    w.flush()


def test_nothing_in_common_exits_3_never_0(tmp_path, capsys):
    _unit(tmp_path / "a" / "step0" / "rank", ["Functional.relu.0.forward"])
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.gelu.0.forward"])
    code, out, err = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 3, (out, err)
    assert "entries only in A: Functional.relu.0.forward" in out and "entries only in B: Functional.gelu.0.forward" in out


def test_summary_lines_quoting_a_huge_entry_name_are_cut(tmp_path, capsys):
    # Found by the breaker: "entries only in A: ..." printed a 5,000-character entry name whole.
    long_name = "Functional." + "x" * 5000 + ".0.forward"
    _unit(tmp_path / "a" / "step0" / "rank", [long_name])
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.gelu.0.forward"])
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 3
    line = next(x for x in out.splitlines() if x.startswith("entries only in A: "))
    assert len(line) <= 2100 and "characters left out" in line and line.endswith("x" * 50 + ".0.forward")


def test_regression_exits_1(tmp_path, capsys):
    w = DumpWriter(tmp_path / "a" / "rank", DumpMeta("statistics", "L1", "mindspore"))
    w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(),
                        Seq((TensorLeaf("mindspore.Tensor", "Float32", (4,), 9.0, 0.0, 2.0, 9.0),))))
    w.flush()
    w = DumpWriter(tmp_path / "b" / "rank", DumpMeta("statistics", "L1", "mindspore"))
    w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(),
                        Seq((TensorLeaf("mindspore.Tensor", "Float32", (4,), 1.0, 0.0, 0.5, 1.0),))))
    w.flush()
    code, out, err = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 1, (out, err)
    assert "FAIL" in out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["only-one"],
        ["/nonexistent/a", "/nonexistent/b"],
        ["--bogus"],
    ],
)
def test_usage_and_input_errors_are_one_line_exit_2(argv, capsys, tmp_path):
    code, out, err = _run(argv + ["-o", str(tmp_path / "o")] if len(argv) > 1 else argv, capsys)
    assert code == 2
    assert err.startswith("msprobe-cmp: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_malformed_dump_names_file_and_field(msprobe_fixtures, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(msprobe_fixtures / "statistics_a", bad)
    f = bad / "step0" / "rank" / "dump.json"
    doc = json.loads(f.read_text())
    doc["data"]["Cell.blocks.0.Dense.forward.0"]["output"][0]["shape"] = "8x16"
    f.write_text(json.dumps(doc))
    code, _, err = _run([bad, msprobe_fixtures / "statistics_a", "-o", tmp_path / "o"], capsys)
    assert code == 2
    assert str(f) in err and "Cell.blocks.0.Dense.forward.0" in err and "shape" in err


def test_existing_reports_are_not_overwritten_without_force(msprobe_fixtures, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("keep me")
    run = msprobe_fixtures / "statistics_a"
    code, _, err = _run([run, run, "-o", out], capsys)
    assert code == 2 and "--force" in err
    assert (out / "report.html").read_text() == "keep me"
    code, _, _ = _run([run, run, "-o", out, "--force"], capsys)
    assert code == 0 and (out / "report.html").read_text() != "keep me"


def test_console_script_runs_without_a_framework_import(msprobe_fixtures, tmp_path):
    run = msprobe_fixtures / "statistics_a"
    code = ("import sys; from msprobe_cmp.cli import main; c = main(sys.argv[1:]); "
            "assert 'mindspore' not in sys.modules and 'torch' not in sys.modules; sys.exit(c)")
    res = subprocess.run([sys.executable, "-c", code, str(run), str(run), "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "Exit codes" in capsys.readouterr().out


def test_summary_never_says_identical_when_nothing_was_compared(tmp_path, capsys):
    _unit(tmp_path / "a" / "step0" / "rank", ["Functional.relu.0.forward"])
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.gelu.0.forward"])
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 3 and "identical" not in out and "nothing was compared" in out


def test_summary_counts_warnings(tmp_path, capsys):
    # Mean 0.1 vs 0.5 (|diff| 0.4 > 1e-3, 0.4 / 0.5 > 0.5): a statistics-mode warning, not a failure.
    for side, mean in (("a", 0.1), ("b", 0.5)):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(),
                            Seq((TensorLeaf("mindspore.Tensor", "Float32", (4,), 1.0, 0.0, mean, 1.0),))))
        w.flush()
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 0 and "verdicts: warning 1" in out


def test_output_problems_are_one_line_errors(msprobe_fixtures, tmp_path, capsys):
    run = msprobe_fixtures / "statistics_a"
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = _run([run, run, "-o", afile / "sub"], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    code, _, err = _run([run, run, "-o", out, "--force"], capsys)
    assert code == 2 and "is a directory" in err
    dangling = tmp_path / "o2"
    dangling.mkdir()
    (dangling / "report.html").symlink_to(tmp_path / "nowhere")
    code, _, err = _run([run, run, "-o", dangling], capsys)
    assert code == 2 and "--force" in err


def test_a_bug_exits_4_with_traceback_never_1(msprobe_fixtures, tmp_path, capsys, monkeypatch):
    def boom(*_a, **_k):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr("msprobe_cmp.cli.compare", boom)
    run = msprobe_fixtures / "statistics_a"
    code, _, err = _run([run, run, "-o", tmp_path], capsys)
    assert code == 4 and "Traceback" in err and "internal error" in err


def test_control_characters_in_names_are_escaped_in_the_summary(tmp_path, capsys):
    name = "Functional.x\x1b[2J\nFAKE verdict: PASS.0.forward"
    for side, v in (("a", 2.0), ("b", 1.0)):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward(name, Seq(), Map(), Seq((TensorLeaf("mindspore.Tensor", "Float32", (2,), v, 0, 0, v),))))
        w.flush()
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert "\x1b" not in out and "\nFAKE" not in out and "\\x1b" in out


def test_all_zero_target_against_nonzero_baseline_fails(tmp_path, capsys):
    import numpy as np

    for side, v in (("a", 0.0), ("b", 0.95)):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("tensor", "L1", "mindspore"))
        w.save_tensor("t.npy", np.full(1000, v, dtype=np.float32))
        leaf = TensorLeaf("mindspore.Tensor", "Float32", (1000,), v, v, v, v * 1000**0.5, data_name="t.npy")
        w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(), Seq((leaf,))))
        w.flush()
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 1 and "FAIL" in out


def test_unreadable_tensor_files_are_said_in_the_summary(msprobe_fixtures, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(msprobe_fixtures / "tensor_a", broken)
    for npy in broken.glob("step*/rank/dump_tensor_data/*.npy"):
        npy.unlink()
    code, out, _ = _run([broken, msprobe_fixtures / "tensor_a", "-o", tmp_path / "out"], capsys)
    rows = [r for u in json.loads((tmp_path / "out" / "comparison.json").read_text())["units"] for r in u["rows"]]
    compared = [r for r in rows if r["match_class"] == "matched" and r["verdict"] != "skip"]
    by_stats = [r for r in compared if r["compared_by"] == "statistics"]
    # the same data on both sides: every tensor row's statistics agree, so each is a warning, and nothing fails
    assert by_stats and all(r["verdict"] == "warning" for r in by_stats) and code == 0
    lines = out.splitlines()
    assert lines[0] == (f"verdict: PASS  (tensor mode; {len(by_stats)} of {len(compared)} compared rows judged by "
                        "statistics only)")
    assert (f"first divergent: none: the {len(compared)} compared rows are identical ({len(by_stats)} of them by "
            "their statistics only)") in lines
    # one line names the first such row, in the reports' wording; the count is said once, on the verdict line
    assert (f"first judged by statistics only: {by_stats[0]['name']} (step0/rank); tensor mode could not compare "
            "their values: a tensor file missing or unreadable, or values that are not real numbers; their statistics "
            "were compared instead") in lines
    assert sum("by statistics only" in x or "by their statistics only" in x for x in lines) == 3
    assert not [x for x in lines if x.startswith("note:") and "statistics only" in x]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.count("statistics only") == 1  # its own bullet; no note repeats it


def test_cross_framework_pair_says_why_little_matched(msprobe_fixtures, tmp_path, capsys):
    code, out, _ = _run([msprobe_fixtures / "torch_statistics_a", msprobe_fixtures / "statistics_a", "-o", tmp_path],
                        capsys)
    assert code == 3 and "A was recorded with pytorch, B with mindspore" in out


def test_printed_share_says_it_counts_units_found_on_one_side_only(tmp_path, capsys):
    # A has steps 0 and 1, B step 0 only: 2 matched rows of 4 (the 2 rows of A's step 1 are in no class count).
    for step in (0, 1):
        _unit(tmp_path / "a" / f"step{step}" / "rank", ["Functional.relu.0.forward"])
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.relu.0.forward"])
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o"], capsys)
    assert code == 0 and "rows: matched 2  (50.0% of all rows matched, counting the rows of the 1 unit(s) found on " \
        "one side only, floor 50%)" in out


def test_matched_share_floor_gives_exit_3_not_a_pass(tmp_path, capsys):
    # 1 of 3 rows matched (33%) is below the default floor of 50%: no verdict, exit 3.
    _unit(tmp_path / "a" / "step0" / "rank", ["Functional.relu.0.forward"])
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.relu.0.forward", "Functional.gelu.0.forward"])
    # Each entry has 2 rows (input.0, output.0): matched 2, only_in_b 2 -> 50%, at the floor: pass.
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o1"], capsys)
    assert code == 0 and "(50.0% of all rows matched, floor 50%)" in out
    _unit(tmp_path / "b" / "step0" / "rank", ["Functional.relu.0.forward", "Functional.gelu.0.forward",
                                              "Functional.tanh.0.forward"])
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o2"], capsys)
    assert code == 3 and "TOO_FEW_MATCHED" in out and "below the floor of 50.0%" in out
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o3", "--min-matched-share", "0.3"], capsys)
    assert code == 0
    rules = tmp_path / "rules.yaml"
    rules.write_text("min_matched_share: 0.2\n")
    code, _, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o4", "--rules", rules], capsys)
    assert code == 0


def test_bad_rules_option_is_exit_2(tmp_path, capsys, msprobe_fixtures):
    run = msprobe_fixtures / "statistics_a"
    code, _, err = _run([run, run, "-o", tmp_path / "o", "--min-matched-share", "2"], capsys)
    assert code == 2 and "--min-matched-share" in err
    bad = tmp_path / "r.toml"
    bad.write_text("[default]\nbogus = 1\n")
    code, _, err = _run([run, run, "-o", tmp_path / "o", "--rules", bad], capsys)
    assert code == 2 and "default.bogus: unknown key" in err


def test_lone_surrogate_in_a_name_does_not_crash_the_reports(tmp_path, capsys):
    for side in ("a", "b"):
        d = tmp_path / side / "rank"
        d.mkdir(parents=True)
        (d / "dump.json").write_text('{"task": "statistics", "framework": "mindspore", "data": {"Functional.x\\ud800.0'
                                     '.forward": {"output": [{"type": "mindspore.Tensor", "dtype": "Float32", '
                                     '"shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0}]}}}')
    code, _, err = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out"], capsys)
    assert code == 0, err
    assert "\\ud800" in (tmp_path / "out" / "comparison.csv").read_text()


def test_noise_option(tmp_path, capsys):
    import numpy as np

    for side, v in (("a", 1.7), ("b", 1.0), ("rerun", 1.4)):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("tensor", "L1", "mindspore"))
        arr = np.linspace(1.0, 2.0, 16) * v
        w.save_tensor("t.npy", arr)
        leaf = TensorLeaf("mindspore.Tensor", "Float64", (16,), float(arr.max()), float(arr.min()), float(arr.mean()),
                          float(np.linalg.norm(arr)), data_name="t.npy")
        w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((leaf,))))
        w.flush()
    assert _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o1"], capsys)[0] == 1
    code, out, _ = _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o2", "--noise", tmp_path / "rerun"], capsys)
    assert code == 0 and "noise-floor mode" in out and "warning 1" in out


def test_csv_values_are_numbers_and_text_is_neutralised(tmp_path, capsys):
    import csv

    from msprobe_cmp.dump import ValueLeaf

    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.x.0.forward", Seq((ValueLeaf("float", -1.5), ValueLeaf("int", -3),
                                                           ValueLeaf("str", "=cmd|x"))), Map(), Seq()))
        w.flush()
    assert _run([tmp_path / "a", tmp_path / "b", "-o", tmp_path / "o"], capsys)[0] == 0
    text = (tmp_path / "o" / "comparison.csv").read_text()
    rows = {r["NPU Name"]: r for r in csv.DictReader(text.splitlines())}
    assert rows["Functional.x.0.forward.input.0"]["NPU Value"] == "-1.5"
    assert rows["Functional.x.0.forward.input.1"]["NPU Value"] == "-3"
    assert not rows["Functional.x.0.forward.input.2"]["NPU Value"].startswith(("=", "+", "-", "@"))


def _stats_dump(root: Path, maximum: float = 1.0) -> Path:
    """A one-entry statistics dump at ``root/step0/rank`` (no framework needed); returns ``root``."""
    w = DumpWriter(root / "step0" / "rank", DumpMeta("statistics", "L1", "mindspore"))
    w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(),
                        Seq((TensorLeaf("mindspore.Tensor", "Float32", (4,), maximum, 0.0, 0.5, 1.0),))))
    w.flush()
    return root


@pytest.mark.parametrize("option", ["--noise", "--rules", "--cell-mapping", "--api-mapping"])
@pytest.mark.parametrize("bad", ["missing", "directory"])
def test_bad_input_path_options_name_the_option(tmp_path, capsys, option, bad):
    run = _stats_dump(tmp_path / "run")
    path = tmp_path / "nowhere" if bad == "missing" else tmp_path / "empty"
    if bad == "directory":  # a directory where a file is read, or a directory holding no dump for --noise
        path.mkdir()
    code, out, err = _run([run, run, "-o", tmp_path / "out", option, path], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"msprobe-cmp: error: {option}: {path}: ") and err.count("\n") == 1, err
    if bad == "missing":
        assert "does not exist" in err or "No such file or directory" in err
    assert not (tmp_path / "out").exists()


def test_malformed_noise_dump_names_the_option_and_the_file(tmp_path, capsys):
    run = _stats_dump(tmp_path / "run")
    rerun = _stats_dump(tmp_path / "rerun")
    (rerun / "step0" / "rank" / "dump.json").write_text("{")
    code, _, err = _run([run, run, "-o", tmp_path / "out", "--noise", rerun], capsys)
    assert code == 2
    assert err.startswith(f"msprobe-cmp: error: --noise: {rerun / 'step0' / 'rank' / 'dump.json'}: invalid JSON")
    assert not (tmp_path / "out").exists()


def test_missing_noise_is_reported_before_the_dumps_are_read(tmp_path, capsys, monkeypatch):
    import msprobe_cmp.cli as cli

    def no_loading(path):
        raise AssertionError(f"loaded {path}")

    monkeypatch.setattr(cli, "load_dump", no_loading)
    run = _stats_dump(tmp_path / "run")
    code, _, err = _run([run, run, "-o", tmp_path / "out", "--noise", tmp_path / "nowhere"], capsys)
    assert code == 2 and err == f"msprobe-cmp: error: --noise: {tmp_path / 'nowhere'}: does not exist\n"


def test_missing_positional_input_keeps_the_typed_path(tmp_path, capsys, monkeypatch):
    _stats_dump(tmp_path / "b")
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--absolute-paths"]):
        code, _, err = _run(["nope", "b", "-o", "out", *extra], capsys)
        assert code == 2 and err == "msprobe-cmp: error: nope: does not exist\n"


def test_absolute_paths_resolves_relative_inputs(tmp_path, capsys, monkeypatch):
    real = tmp_path / "real"
    _stats_dump(real / "a")
    _stats_dump(real / "b", maximum=9.0)
    _stats_dump(real / "rerun", maximum=9.0)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "b").symlink_to(real / "b")  # resolved: the report shows where the dump really is
    monkeypatch.chdir(tmp_path / "work")
    inputs = ["../real/a", "b", "--noise", "../real/rerun"]
    assert _run([*inputs, "-o", "typed"], capsys)[0] == 1
    doc = json.loads((tmp_path / "work" / "typed" / "comparison.json").read_text())
    assert (doc["input_a"], doc["input_b"], doc["input_noise"]) == ("../real/a", "b", "../real/rerun")
    assert _run([*inputs, "-o", "absolute", "--absolute-paths"], capsys)[0] == 1
    doc = json.loads((tmp_path / "work" / "absolute" / "comparison.json").read_text())
    a, b = str((real / "a").resolve()), str((real / "b").resolve())
    assert (doc["input_a"], doc["input_b"], doc["input_noise"]) == (a, b, str((real / "rerun").resolve()))
    assert (doc["units"][0]["a"]["directory"], doc["units"][0]["b"]["directory"]) == (f"{a}/step0/rank",
                                                                                      f"{b}/step0/rank")
    noise_note = [n for n in doc["notes"] if n.startswith("noise-floor mode")]
    assert noise_note and str((real / "rerun").resolve()) in noise_note[0]


def test_help_says_how_debug_json_is_read(tmp_path, capsys):
    assert main(["--help"]) == 0
    assert "debug.json" in " ".join(capsys.readouterr().out.split())
    # What the help says: a debug.json is read as the file itself and as a rank directory with no dump.json.
    leaf = {"a": TensorLeaf("mindspore.Tensor", "Float32", (2,), 1.0, 0.0, 0.5, 1.0),
            "b": TensorLeaf("mindspore.Tensor", "Float32", (2,), 3.0, 0.0, 1.5, 3.0)}
    for side in ("a", "b"):
        DumpWriter(tmp_path / side / "step0" / "rank", DumpMeta("statistics", "debug", "mindspore")).write_debug(
            {"loss.0": leaf[side]})
    code, _, err = _run([tmp_path / "a" / "step0" / "rank" / "debug.json", tmp_path / "b" / "step0" / "rank",
                         "-o", tmp_path / "out"], capsys)
    assert code == 1, err
    doc = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert [r["name"] for r in doc["units"][0]["rows"]] == ["loss.0.tensor"]


@pytest.mark.parametrize("key_len", [12, 100_000])
def test_an_error_quoting_dump_text_is_one_printable_line(tmp_path, capsys, key_len):
    # Found by the breaker: a dump's kwargs key holding ESC[31m and a newline reached the terminal raw, and a
    # 100,000-character key made a 100 KB error line.
    import small_dump

    doc = small_dump.dump_json()
    key = ("a\nb\x1b[31mRED" + "k" * key_len)[:key_len]
    doc["data"]["Functional.add.0.forward"]["input_kwargs"] = {key: {"dtype": "Float32", "shape": [3], "Max": 1.0}}
    rank = tmp_path / "a" / "step0" / "rank"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps(doc))
    code, out, err = _run([tmp_path / "a", tmp_path / "a", "-o", tmp_path / "out"], capsys)
    assert code == 2 and out == "" and not (tmp_path / "out").exists()
    line = err.rstrip("\n")
    assert "\n" not in line and "\x1b" not in line and "\\x1b[31m" in line
    assert line.startswith("msprobe-cmp: error: ") and str(rank / "dump.json") in line
    assert line.endswith("needs a string type, got none")  # the complaint survives the cut
    assert len(line) <= 2100


@pytest.mark.parametrize("jobs", [1, 2])  # 2: the dumps are scanned (scan_dump), not loaded
@pytest.mark.parametrize("bad", ["directory", "dangling", "rank01"])
def test_a_rank_the_reader_cannot_take_exits_2_naming_it(tmp_path, capsys, bad, jobs):
    run = _stats_dump(tmp_path / "run")
    other = _stats_dump(tmp_path / "other")
    if bad == "rank01":
        shutil.copytree(other / "step0" / "rank", other / "step0" / "rank1")
        shutil.copytree(other / "step0" / "rank", other / "step0" / "rank01")
        expected = f"{other / 'step0'}: rank01 and rank1 are the same rank (1); keep one of them"
    else:
        (other / "step0" / "rank1").mkdir()
        file = other / "step0" / "rank1" / "dump.json"
        if bad == "directory":
            file.mkdir()
            expected = f"{file}: is a directory, not a file"
        else:
            file.symlink_to("missing.json")
            expected = f"{file}: a symlink to a file that does not exist"
    code, _, err = _run([run, other, "-o", tmp_path / "out", "--jobs", jobs], capsys)
    assert code == 2
    assert err == f"msprobe-cmp: error: {expected}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["the dump root", "below the rank directory", "the dump.json's directory",
                                   "through a symlink", "inside the noise dump"])
def test_an_output_inside_an_input_dump_is_refused(tmp_path, capsys, where):
    run = _stats_dump(tmp_path / "run")
    other = _stats_dump(tmp_path / "other")
    noise = _stats_dump(tmp_path / "noise")
    rank = run / "step0" / "rank"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv: list = [run, other]
    holder = run
    if where == "the dump root":
        out = run
    elif where == "below the rank directory":
        out = rank / "reports"
    elif where == "the dump.json's directory":
        argv, holder, out = [rank / "dump.json", other], rank / "dump.json", rank
    elif where == "through a symlink":
        link = tmp_path / "link"
        link.symlink_to(run, target_is_directory=True)
        out = link / "reports"
    else:
        argv, holder, out = [run, other, "--noise", noise], noise, noise / "out"
    code, stdout, err = _run([*argv, "-o", out, "--force"], capsys)
    assert code == 2 and stdout == ""
    assert err == f"msprobe-cmp: error: --output {out}: inside the input dump {holder}; write the reports elsewhere\n"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name != "link") == before


def test_an_output_beside_the_input_dumps_is_fine(tmp_path, capsys):
    run = _stats_dump(tmp_path / "run")
    code, _, err = _run([run, run, "-o", tmp_path / "runs-report"], capsys)  # a sibling whose name starts alike
    assert code == 0, err
    assert (tmp_path / "runs-report" / "report.html").is_file()


def test_an_output_inside_an_input_is_named_before_force_is_asked_for(tmp_path, capsys):
    run = _stats_dump(tmp_path / "run")
    (run / "out").mkdir()
    (run / "out" / "report.html").write_text("earlier")
    code, _, err = _run([run, run, "-o", run / "out"], capsys)  # no --force: the refusal, not "pass --force"
    assert code == 2 and "inside the input dump" in err and "--force" not in err


def test_an_output_through_a_symlink_loop_is_a_usage_error(tmp_path, capsys):
    run = _stats_dump(tmp_path / "run")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code, _, err = _run([run, run, "-o", loop / "out"], capsys)
    assert code == 2 and err.startswith("msprobe-cmp: error: ") and err.count("\n") == 1, err
