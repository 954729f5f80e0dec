"""Two MindSpore runs of one BatchNorm model on CPU: BatchNorm's training outputs 1 and 2 are left uninitialised
(they differ between identical calls), so every comparison of two MindSpore runs sees them differ.  Recorded for
real (the port demo's MindSpore model), an identical rerun must have no likely origin, and the buggy port against
the correct one must name the changed cell (bn2), not the first BatchNorm whose undefined output differs (bn1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump import load_dump

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def runs(record_ports: Callable[..., Path]) -> Path:
    return record_ports("ms_rerun", {"first": "mindspore", "rerun": "mindspore", "bug": "bug"})


def _undefined_rows(c: object) -> list[object]:
    return [r for u in c.units for r in u.rows  # type: ignore[attr-defined]
            if r.entry_name.startswith("Primitive.") and ".BatchNorm." in r.entry_name
            and r.entry_name.endswith(".forward") and r.arg_path in ("output.1", "output.2")]


def test_an_identical_mindspore_rerun_has_no_likely_origin(runs: Path) -> None:
    c = compare(load_dump(runs / "rerun"), load_dump(runs / "first"))
    undefined = _undefined_rows(c)
    # the premise: the undefined outputs are there and some differ between the two identical runs
    assert undefined and any(r.differs for r in undefined)
    assert c.verdict == "pass"
    assert c.likely_origin is None
    assert all(r.verdict in ("pass", "warning") for r in undefined)


def test_the_buggy_port_against_the_correct_one_names_the_changed_cell(runs: Path) -> None:
    for target, baseline in (("bug", "first"), ("first", "bug")):
        c = compare(load_dump(runs / target), load_dump(runs / baseline))
        assert c.verdict == "fail"
        assert c.likely_origin is not None and c.likely_origin.cell == "Cell.bn2.BatchNorm1d.forward.0"
