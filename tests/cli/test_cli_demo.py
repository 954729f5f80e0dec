"""`msprobe-cmp demo` end to end: a PyTorch model, its correct MindSpore port and a buggy port, recorded, compared and
reported.  The demo runs once per module (one training step: the bug already fails there)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.cli import main

ROOT = Path(__file__).resolve().parents[2]
needs_frameworks = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mindspore", "torch", "sklearn")),
    reason="needs mindspore, torch and scikit-learn",
)

BN2 = "Cell.bn2.BatchNorm1d.forward.0"
BN2_TORCH = "Module.bn2.BatchNorm1d.forward.0"


@pytest.mark.parametrize("missing", ["torch", "mindspore"])
def test_a_missing_framework_is_one_line_naming_the_extra(tmp_path: Path, missing: str) -> None:
    # sys.modules[name] = None makes "import name" fail exactly as when it is not installed.
    out = tmp_path / "out"
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            "from msprobe_cmp.cli import main\n"
            f"sys.exit(main(['demo', '-o', {str(out)!r}]))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert res.stderr == (f"msprobe-cmp: error: {missing} is not installed; install it with: "
                          f"pip install 'msprobe-cmp[{missing}]'\n")
    assert not out.exists()  # checked before anything is recorded


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the demo into an OUT holding an earlier demo's files: refused without --force, replaced with it."""
    import io
    from contextlib import redirect_stdout

    out = tmp_path_factory.mktemp("demo") / "out"
    stale_report = out / "bug" / "report.html"
    stale_dump = out / "dumps" / "pytorch" / "step0" / "old-file"
    for path in (stale_report, stale_dump):
        path.parent.mkdir(parents=True)
        path.write_text("earlier demo")
    refused = main(["demo", "-o", str(out), "--steps", "1"])
    kept = stale_report.read_text() == "earlier demo" and stale_dump.exists()
    text = io.StringIO()
    with redirect_stdout(text):
        code = main(["demo", "-o", str(out), "--steps", "1", "--force"])
    return {"out": out, "code": code, "text": text.getvalue(), "refused": refused, "kept": kept,
            "stale_dump": stale_dump}


def _doc(out: Path, part: str) -> dict:
    return json.loads((out / part / "comparison.json").read_text())


def _npy(out: Path, run: str, name: str) -> np.ndarray:
    return np.load(out / "dumps" / run / "step0" / "rank" / "dump_tensor_data" / f"{name}.npy").astype(np.float64)


@needs_frameworks
def test_an_earlier_demo_is_refused_without_force_and_replaced_with_it(demo: dict[str, Any]) -> None:
    assert demo["refused"] == 2 and demo["kept"]  # nothing was recorded or written by the refused run
    assert demo["code"] == 0
    assert not demo["stale_dump"].exists()
    assert (demo["out"] / "bug" / "report.html").read_text() != "earlier demo"


@needs_frameworks
def test_the_correct_port_passes_and_the_bug_fails_at_the_changed_cell(demo: dict[str, Any]) -> None:
    out, text = demo["out"], demo["text"]
    correct, bug = _doc(out, "correct"), _doc(out, "bug")
    assert correct["mode"] == bug["mode"] == "tensor"
    assert correct["verdict"] == "pass" and correct["likely_origin"] is None
    assert correct["verdict_counts"]["fail"] == 0 and correct["verdict_counts"]["warning"] == 0
    assert bug["verdict"] == "fail"
    assert bug["likely_origin"]["cell"] == BN2
    # PyTorch BatchNorm's batch counter (num_batches_tracked.add_(1), int64) has no MindSpore partner by construction:
    # its rows stay in the table, but it is no evidence of a missing call at the origin
    counter = [r for r in bug["units"][0]["rows"] if r["entry"].startswith("Tensor.add_.")
               and r["parent_cell"] == BN2.replace("Cell.", "Module.")]
    assert counter and {r["match_class"] for r in counter} == {"only_in_b"}
    assert counter[0]["b"]["dtype"] == "torch.int64"
    assert bug["likely_origin"]["unpaired"] == []
    assert bug["first_failing"]["name"] == f"{BN2}.parameters.moving_variance"
    # Every failing row is bn2's moving variance (its own row, or the next step's BatchNorm reading it): the bug
    # changes nothing else.
    failing = [r["name"] for u in bug["units"] for r in u["rows"] if r["verdict"] == "fail"]
    assert failing == [f"{BN2}.parameters.moving_variance"]
    for part in ("correct", "bug"):
        for name in ("report.html", "comparison.json", "comparison.csv", "junit.xml", "summary.md"):
            assert (out / part / name).is_file()
    lines = text.splitlines()
    assert any(line.startswith("correct port vs PyTorch: PASS") for line in lines)
    assert any(line.startswith("buggy port vs PyTorch:   FAIL") for line in lines)
    assert f"the bug's likely origin: {BN2} (step0/rank)" in text
    assert f"open {out / 'bug' / 'report.html'}" in text


@needs_frameworks
def test_the_bug_is_the_momentum_convention_measured_on_the_recorded_tensors(demo: dict[str, Any]) -> None:
    """From bn2's recorded input (one batch of 64, moving mean 0 and variance 1 before the step), numpy gives what
    each side's moving statistics must hold after it: PyTorch 0.9·old + 0.1·batch (unbiased variance), the buggy
    port 0.1·old + 0.9·batch, the correct port PyTorch's."""
    out = demo["out"]
    x = _npy(out, "pytorch", f"{BN2_TORCH}.input.0")
    assert x.shape == (64, 32)
    mean, var = x.mean(axis=0), x.var(axis=0, ddof=1)
    torch_mean, torch_var = _npy(out, "pytorch", f"{BN2_TORCH}.buffers.running_mean"), _npy(
        out, "pytorch", f"{BN2_TORCH}.buffers.running_var")
    np.testing.assert_allclose(torch_mean, 0.1 * mean, atol=1e-6)
    np.testing.assert_allclose(torch_var, 0.9 + 0.1 * var, atol=1e-6)
    np.testing.assert_allclose(_npy(out, "mindspore", f"{BN2}.parameters.moving_mean"), torch_mean, atol=1e-6)
    np.testing.assert_allclose(_npy(out, "mindspore", f"{BN2}.parameters.moving_variance"), torch_var, atol=1e-6)
    bug_var = _npy(out, "bug", f"{BN2}.parameters.moving_variance")
    np.testing.assert_allclose(_npy(out, "bug", f"{BN2}.parameters.moving_mean"), 0.9 * mean, atol=1e-6)
    np.testing.assert_allclose(bug_var, 0.1 + 0.9 * var, atol=1e-6)
    # The failing row's metrics are these arrays': cosine below the 0.99 rule, MaxAbsErr above 1e-3.
    cosine = float(bug_var @ torch_var / np.linalg.norm(bug_var) / np.linalg.norm(torch_var))
    row = next(r for r in _doc(out, "bug")["units"][0]["rows"] if r["name"] == f"{BN2}.parameters.moving_variance")
    assert row["metrics"]["Cosine"] == pytest.approx(cosine, abs=1e-6) and cosine < 0.99
    assert row["metrics"]["MaxAbsErr"] == pytest.approx(np.abs(bug_var - torch_var).max(), rel=1e-5)


@needs_frameworks
def test_every_row_of_the_port_pairs_with_the_pytorch_run(demo: dict[str, Any]) -> None:
    """Every row of the MindSpore port with a PyTorch counterpart is matched (the share of A's rows is 1), every
    Module entry of the PyTorch run pairs with its Cell, and what PyTorch records alone is what MindSpore has no
    twin of: BatchNorm's counter (``num_batches_tracked += 1``, a ``Tensor.add_``), the buffers before the call,
    the arguments MindSpore's Primitives hold as attributes, and ``loss.backward()``'s seed gradient."""
    out = demo["out"]
    doc = _doc(out, "correct")
    assert doc["matched_share"] == 1.0 and doc["matched_share_of"] == "A's rows"
    rows = doc["units"][0]["rows"]
    torch_entries = json.loads((out / "dumps" / "pytorch" / "step0" / "rank" / "dump.json").read_text())["data"]
    matched_b = {r["entry_b"] for r in rows if r["match_class"] == "matched"}
    modules = {name for name in torch_entries if name.startswith("Module.")}
    assert modules and modules <= matched_b
    ms_entries = json.loads((out / "dumps" / "mindspore" / "step0" / "rank" / "dump.json").read_text())["data"]
    cells = {name for name in ms_entries if name.startswith("Cell.")}
    assert cells and cells <= {r["entry"] for r in rows if r["match_class"] == "matched"}
    only_b = {r["entry_b"] for r in rows if r["match_class"] == "only_in_b"}
    assert {e.rsplit(".", 2)[0] for e in only_b if not e.startswith(("Module.", "Functional."))} == {
        "Tensor.add_", "Torch.ones_like"}
    assert all(r["arg_path_b"].startswith(("buffers_before.", "buffers.num_batches_tracked"))
               for r in rows if r["match_class"] == "only_in_b" and r["entry_b"].startswith("Module."))


@needs_frameworks
def test_verdicts_other_than_expected_exit_1(demo: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """With the two ports swapped (the demo's own recordings, no training) the 'correct' comparison fails and the
    'bug' one passes: the demo says so and exits 1."""
    import msprobe_cmp.recorder.demo as demo_module

    dumps = demo["out"] / "dumps"
    swapped = demo_module.DemoRecordings(dumps / "pytorch", dumps / "bug", dumps / "mindspore", ("swapped",))
    monkeypatch.setattr(demo_module, "run_demo_recordings", lambda *a, **k: swapped)
    assert main(["demo", "-o", str(tmp_path / "out"), "--steps", "1"]) == 1
    text = capsys.readouterr().out
    assert "correct port vs PyTorch: FAIL (1 failing, 1 warning rows; UNEXPECTED: expected PASS)" in text
    assert "buggy port vs PyTorch:   PASS (0 failing, 0 warning rows; UNEXPECTED: expected FAIL)" in text
    assert "the bug's likely origin: none" in text


@needs_frameworks
def test_the_demo_reports_in_chromium_origin_first_one_tree_and_screenshots(demo: dict[str, Any], driver: Any) -> None:
    """The bug's report as a newcomer sees it at 1,400 x 900: the likely origin, BatchNorm bn2, on the first screen
    and marked in one cell tree of both frameworks (no PyTorch module beside its MindSpore cell); the correct port's
    report says none.  Screenshots of both go to test-artifacts/."""
    import shutil

    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    driver.set_window_size(1400, 900)
    try:
        for part in ("bug", "correct"):
            driver.get((demo["out"] / part / "report.html").as_uri())
            origin = driver.find_element("id", "likely-origin")
            height = driver.execute_script("return window.innerHeight")
            assert origin.rect["y"] + origin.rect["height"] <= height
            tree = driver.find_elements("css selector", "#cell-tree .cname")
            assert tree and not [t.text for t in tree if t.text.startswith("Module.")]
            # each cell is coloured by its worst error relative to rounding noise
            colours = driver.execute_script(
                "return Array.from(document.querySelectorAll('#cell-tree li .noise')).map(function (e) {"
                " return [e.nextSibling.textContent, e.className, getComputedStyle(e).backgroundColor]; })")
            assert len(colours) >= 14  # the first unit's 14 cell calls, opened at load
            # each unit's line shows its worst verdict and colour, also while it is closed
            units = driver.execute_script(
                "return Array.from(document.querySelectorAll('#cell-tree > details > summary')).map(function (s) {"
                " return [s.querySelector('.badge').textContent, s.querySelector('.noise').className]; })")
            want = ["fail", "noise n4"] if part == "bug" else ["pass", "noise n1"]
            assert units and units == [want] * len(units)  # a line per step: bn2 fails in each
            if part == "bug":
                assert origin.find_element("css selector", "a.rowlink").text == BN2
                marked = driver.find_elements("css selector", "#cell-tree .origin-cell .cname")
                assert [m.text for m in marked] == [BN2]
                bn2 = [c for c in colours if c[0] == BN2]
                assert bn2 and all(c[1] == "noise n4" and c[2] == "rgb(207, 34, 46)" for c in bn2)  # over 1000x
            else:
                assert "none" in origin.text
                # a correct port: every cell within rounding noise (green), none far above it
                assert {c[1] for c in colours} <= {"noise n1", "noise n0"} and "noise n1" in {c[1] for c in colours}
            shot = demo["out"] / f"demo-{part}-report.png"
            driver.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
            shutil.copy(shot, artifacts / shot.name)
    finally:
        driver.set_window_size(1400, 1800)


@needs_frameworks
def test_the_readme_shows_what_the_demo_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's set-up command ends with ``msprobe-cmp demo -o msprobe-cmp-demo --force``; the text block after it is
    what that command prints, line for line (run here as written, 3 steps, from an empty directory)."""
    import io
    from contextlib import redirect_stdout

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(.*?)\n```\n```text\n(.*?)\n```", readme, re.S)
    assert command is not None and command.group(1).endswith("msprobe-cmp demo -o msprobe-cmp-demo --force")
    monkeypatch.chdir(tmp_path)
    text = io.StringIO()
    with redirect_stdout(text):
        code = main(["demo", "-o", "msprobe-cmp-demo", "--force"])
    assert code == 0
    printed, shown = text.getvalue().splitlines(), command.group(2).splitlines()
    # the words exactly; each number to within one unit of its last printed digit (float32 training rounds the
    # last digit of a loss differently on CPUs of different vector width: 2.208058 on one machine, 2.208059 on another)
    assert [_NUMBER.sub("#", line) for line in printed] == [_NUMBER.sub("#", line) for line in shown]
    for got_line, want_line in zip(printed, shown, strict=True):
        for got, want in zip(_NUMBER.findall(got_line), _NUMBER.findall(want_line), strict=True):
            assert abs(float(got) - float(want)) <= _last_digit(want) * 1.000001, (got_line, want_line)


#: a decimal number as the demo prints it (2.208058, 0.89, 1.4e-07, the 6.3e+06 of x6.3e+06); digits without a
#: decimal point (step0, bn2, 32) are words, compared exactly
_NUMBER = re.compile(r"(?<![\d.])\d+\.\d+(?:e[+-]\d+)?")


def _last_digit(number: str) -> float:
    """One unit of the last digit printed in ``number``: 1e-06 for ``2.208058``, 1e-08 for ``1.4e-07``."""
    mantissa, _, exponent = number.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))
