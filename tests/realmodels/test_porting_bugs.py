"""Realistic porting bugs injected into real model code (tests/realmodels/bugs.py) are found by the comparator:
each buggy side A against its correct side B fails or warns in statistics and in tensor mode, the comparator's
likely origin names the changed module for most of them, and a correct side against a rerun of itself passes.

Each side is recorded once (task ``tensor``) per module; the comparisons of one pair in both modes read the same
dumps.  The BERT bugs take ~30 s; the MindSpore-port bugs record mindcv's ResNet-18 under PyNative (port.py's
image size), several seconds per side.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realmodels import bugs
from tests.realmodels.conftest import need

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

MODES = ("statistics", "tensor")
#: At least this many bugs (of all of them) must have a likely origin naming the changed module, in each mode.
MIN_ORIGINS_NAMED = 7


class Results:
    """Comparisons of the corpus, each pair recorded and compared once, on first use."""

    def __init__(self, root: Path) -> None:
        self.recorder = bugs.Recorder(root)
        self._comparisons: dict[tuple[str, str], Any] = {}

    def comparison(self, bug: bugs.Bug | str, mode: str) -> Any:
        """The comparison of ``bug`` (or of a control: ``"control-bert"``, ``"control-port"``) in ``mode``."""
        key = (bug if isinstance(bug, str) else bug.name, mode)
        if key not in self._comparisons:
            if isinstance(bug, str):
                a, b = self.recorder.control(bug.removeprefix("control-"))
            else:
                a, b = self.recorder.pair(bug)
            self._comparisons[key] = bugs.compare_dumps(a, b, mode)
        return self._comparisons[key]

    def outcome(self, bug: bugs.Bug, mode: str) -> bugs.Outcome:
        """What the comparison of ``bug`` in ``mode`` says about it."""
        return bugs.outcome(self.comparison(bug, mode), bug.changed)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Results]:
    need("transformers")
    root = tmp_path_factory.mktemp("porting-bugs")
    yield Results(root)
    shutil.rmtree(root, ignore_errors=True)  # tensor dumps


def _need_port() -> None:
    need("mindspore")
    need("mindcv.models")
    need("pytorchcv.models.resnet")
    if not bugs.port_available():
        pytest.fail("tests/realmodels/port.py (the MindSpore <-> PyTorch ResNet-18 pair) cannot be imported")


def _params() -> list[Any]:
    out = []
    for bug in bugs.BERT_BUGS + bugs.PORT_BUGS:
        marks = [pytest.mark.mindspore] if bug.family == "port" else []
        out += [pytest.param(bug, mode, id=f"{bug.name}-{mode}", marks=marks) for mode in MODES]
    return out


def test_there_are_at_least_eight_bugs_each_changing_one_named_module() -> None:
    everything = bugs.BERT_BUGS + bugs.PORT_BUGS
    assert len(everything) >= 8
    assert len({b.name for b in everything}) == len(everything)
    assert all(b.changed and b.description for b in everything)


@pytest.mark.parametrize("mode", MODES)
def test_the_correct_bert_against_a_rerun_of_itself_passes(results: Results, mode: str) -> None:
    comparison = results.comparison("control-bert", mode)
    counts = dict(comparison.verdict_counts)
    assert comparison.verdict == "pass", counts
    assert counts.get("fail", 0) == counts.get("warning", 0) == 0
    assert comparison.first_divergent is None  # same seeds, same code: bit-identical
    assert counts.get("pass", 0) > 500


@pytest.mark.mindspore
@pytest.mark.parametrize("mode", MODES)
def test_the_bug_free_port_passes(results: Results, mode: str) -> None:
    """The port bugs are measured against this: mindcv's ResNet-18 with pytorchcv's weights against pytorchcv's."""
    _need_port()
    comparison = results.comparison("control-port", mode)
    counts = dict(comparison.verdict_counts)
    assert comparison.verdict == "pass", (counts, comparison.first_failing)
    assert counts.get("pass", 0) > 300


@pytest.mark.parametrize(("bug", "mode"), _params())
def test_each_bug_fails_or_warns(results: Results, bug: bugs.Bug, mode: str) -> None:
    if bug.family == "port":
        _need_port()
    comparison = results.comparison(bug, mode)
    outcome = bugs.outcome(comparison, bug.changed)
    assert outcome.detected, (f"{bug.name} in {mode} mode: verdict {outcome.verdict}, no warning; largest error in "
                              f"{bug.changed}: {outcome.changed_err} at {outcome.changed_row}")
    # ... and it is the changed module that fails or warns, not only rows elsewhere
    assert outcome.changed_fail > 0, (bug.name, mode, outcome.first_failing)
    if bug.family == "bert":
        # PyTorch against PyTorch, same seeds: everything before the bug is bit-identical, so the first row that
        # differs is the changed module's (an argument it passes, or its output).
        first = comparison.first_divergent
        assert first is not None
        chain = (first.name, *first.parents)
        assert any(bugs.in_module(n, bug.changed) for n in chain), (first.name, first.parents[:2])
    else:
        # The bug-free port passes, with warnings of its own (other kernels, test_the_bug_free_port_passes): the
        # bug adds failures or warnings inside the changed module.
        control = bugs.outcome(results.comparison("control-port", mode), bug.changed)
        assert outcome.changed_fail > control.changed_fail, (bug.name, mode, outcome.changed_fail,
                                                             control.changed_fail)


@pytest.mark.parametrize("mode", MODES)
def test_the_likely_origin_names_the_changed_module_for_most_bugs(results: Results, mode: str) -> None:
    everything = bugs.BERT_BUGS + bugs.PORT_BUGS
    comparisons = {bug.name: results.comparison(bug, mode) for bug in bugs.BERT_BUGS}

    def named(chosen: tuple[bugs.Bug, ...]) -> tuple[int, dict[str, str | None]]:
        origins = {b.name: (comparisons[b.name].likely_origin.ref.name if comparisons[b.name].likely_origin
                            else None) for b in chosen}
        return sum(1 for b in chosen if bugs.origin_names_module(comparisons[b.name], b.changed)), origins

    try:
        _need_port()
    except pytest.skip.Exception:  # without MindSpore / mindcv (outside CI): every BERT bug's origin must name it
        count, origins = named(bugs.BERT_BUGS)
        assert count == len(bugs.BERT_BUGS), origins
        return
    comparisons.update({bug.name: results.comparison(bug, mode) for bug in bugs.PORT_BUGS})
    count, origins = named(everything)
    assert count >= MIN_ORIGINS_NAMED, origins
