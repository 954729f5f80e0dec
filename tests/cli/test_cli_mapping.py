"""CLI: --cell-mapping/-cm and --api-mapping/-am, and what a bad mapping file does (one line, exit 2, no files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe_cmp.cli import main
from msprobe_cmp.comparator.mapping import MAX_MAPPING_FILE_BYTES

DATA = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
MS, PT = DATA / "statistics_a", DATA / "torch_statistics_a"


@pytest.mark.parametrize("flag", ["--cell-mapping", "-cm"])
def test_cell_mapping_flag(tmp_path, flag):
    out = tmp_path / "r"
    code = main([str(MS), str(PT), "-o", str(out), flag, str(DATA / "cell_mapping_ms_to_torch.yaml"),
                 "--min-matched-share", "0.1"])
    assert code == 0
    doc = json.loads((out / "comparison.json").read_text())
    row = next(r for r in doc["units"][0]["rows"] if r["name"] == "Cell.head.Dense.forward.0.output.0")
    assert row["entry_b"] == "Module.head.Linear.forward.0" and row["match_class"] == "matched"
    assert row["mapped_by"] == "user cell mapping cell_mapping_ms_to_torch.yaml: head.Dense → head.Linear"


@pytest.mark.parametrize("flag", ["--api-mapping", "-am"])
def test_api_mapping_flag_overrides_the_builtin_table(tmp_path, flag):
    # map ReLU to nothing PyTorch recorded: the built-in ReLU -> Functional.relu pairs must disappear
    am = tmp_path / "am.yaml"
    am.write_text("- ms_api: Primitive.ReLU\n  pt_api: Torch.not_recorded\n")
    out = tmp_path / "r"
    code = main([str(MS), str(PT), "-o", str(out), flag, str(am), "--min-matched-share", "0.1"])
    assert code == 0
    rows = {r["name"]: r for r in json.loads((out / "comparison.json").read_text())["units"][0]["rows"]}
    assert rows["Primitive.relu.ReLU.0.forward.input.0"]["match_class"] == "only_in_a"
    assert rows["Functional.relu.0.forward.input.0"]["match_class"] == "only_in_b"
    # without the file they pair
    out2 = tmp_path / "r2"
    assert main([str(MS), str(PT), "-o", str(out2), "--min-matched-share", "0.1"]) == 0
    rows2 = {r["name"]: r for r in json.loads((out2 / "comparison.json").read_text())["units"][0]["rows"]}
    assert rows2["Primitive.relu.ReLU.0.forward.input.0"]["entry_b"] == "Functional.relu.0.forward"


def _bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("flag", "text", "message"),
    [
        ("-am", "- pt_api: Torch.add\n", "record 0.ms_api: missing"),
        ("-am", "- ms_api: Functional.add\n  pt_api: Torch.add\n  ms_args: 0\n  pt_args: [0]\n",
         "record 0.ms_args: expected a list"),
        ("-am", "- ms_api: Bogus.add\n  pt_api: Torch.add\n", "unknown API family 'Bogus'"),
        ("-cm", "blocks.0.Dense: [blocks.0.Linear]\n", "blocks.0.Dense: expected a string"),
        ("-cm", None, "larger than"),
        ("-am", "BOMB", "aliases"),
        ("-cm", "BOMB", "aliases"),
    ],
)
def test_bad_mapping_file_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, flag, text, message):
    f = tmp_path / "map.yaml"
    if text is None:
        f.write_text("a.Dense: b.Linear\n" * (MAX_MAPPING_FILE_BYTES // 10))
    else:
        f.write_text(_bomb() if text == "BOMB" else text)
    out = tmp_path / "r"
    code = main([str(MS), str(PT), "-o", str(out), flag, str(f)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and str(f) in err, err
    assert not out.exists()


def test_write_mapping_refuses_what_it_must_not_replace(tmp_path, capsys):
    import shutil

    ms = tmp_path / "ms"
    shutil.copytree(MS, ms)
    dump_json = ms / "step0" / "rank" / "dump.json"
    before = dump_json.read_bytes()
    (tmp_path / "adir").mkdir()
    cases = [
        (dump_json, "inside the input dump"),  # even with --force
        (tmp_path / "adir", "exists and is not a regular file"),
        (tmp_path / "out" / "summary.md", "a report file of --output"),
    ]
    (tmp_path / "out").mkdir()
    for target, words in cases:
        code = main([str(ms), str(PT), "-o", str(tmp_path / "out"), "--force", "--write-mapping", str(target)])
        err = capsys.readouterr().err
        assert code == 2 and words in err and err.count("\n") == 1, err
        assert not (tmp_path / "out" / "report.html").exists()  # refused before anything was written
    assert dump_json.read_bytes() == before
    # a same-framework comparison has no cell pairs: nothing written, and it says so
    code = main([str(PT), str(PT), "-o", str(tmp_path / "same"), "--write-mapping", str(tmp_path / "same.yaml")])
    assert code == 0 and not (tmp_path / "same.yaml").exists()
    assert "nothing written" in capsys.readouterr().out


def test_fused_records_between_mindspore_and_pytorch_are_said_to_be_unused(tmp_path, capsys):
    apis = tmp_path / "fused.yaml"
    apis.write_text("- fused: Module.blocks.0.Linear\n  parts:\n    - Module.blocks.1.Linear\n    - Module.blocks.2.Linear\n")
    code = main([str(MS), str(PT), "-o", str(tmp_path / "r"), "-am", str(apis)])
    assert code == 0
    assert "fused records apply within one name space" in capsys.readouterr().out
