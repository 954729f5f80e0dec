"""What a recorder declares it could not capture (dump.json ``not_captured``) shapes the comparison: the other
side's rows of those entries are ``not_captured`` (a known gap, left out of the matched-share floor), and an
incomplete step (the run stopped during it) never gets a verdict."""

from __future__ import annotations

import json
from pathlib import Path

from msprobe_cmp.comparator import compare
from msprobe_cmp.dump.reader import load_dump

LEAF = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
        "Norm": 1.0}


def _fwd() -> dict:
    return {"input_args": [LEAF], "input_kwargs": {}, "output": [LEAF]}


def _bwd() -> dict:
    return {"input": [LEAF], "output": [LEAF]}


def _write(root: Path, data: dict, not_captured: list[dict] | None = None) -> Path:
    rank = root / "step0" / "rank"
    rank.mkdir(parents=True)
    doc = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    if not_captured is not None:
        doc["not_captured"] = not_captured
    (rank / "dump.json").write_text(json.dumps(doc))
    return root


FULL = {
    "Functional.linear.0.forward": _fwd(), "Module.fc.Linear.forward.0": _fwd(),
    "Functional.relu.0.forward": _fwd(),
    "Functional.relu.0.backward": _bwd(), "Module.fc.Linear.backward.0": _bwd(),
    "Functional.linear.0.backward": _bwd(),
    "Module.fc.Linear.parameters_grad": {"weight": [LEAF], "bias": [LEAF]},
}
FORWARD_ONLY = {k: v for k, v in FULL.items() if k.endswith("forward") or ".forward." in k}


def test_declared_backward_gap_makes_the_other_sides_backward_rows_not_captured(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", FORWARD_ONLY, [{"what": "backward", "reason": "no autograd here"}])
    b = _write(tmp_path / "b", FULL)
    c = compare(load_dump(a), load_dump(b))
    rows = c.units[0].rows
    backward = [r for r in rows if ".backward" in r.entry_name or r.entry_name.endswith("parameters_grad")]
    # 3 backward entries x 2 leaves + 2 parameter gradients
    assert len(backward) == 8
    assert {r.match_class for r in backward} == {"not_captured"}
    assert all(r.reasons[0] == "A's recorder declared it could not capture this: no autograd here" for r in backward)
    forward = [r for r in rows if r not in backward]
    assert len(forward) == 6 and {r.match_class for r in forward} == {"matched"}
    # 6 matched of 14 rows is under the 0.5 floor, but the 8 declared gaps are not mispairings: a pass
    assert c.verdict == "pass"
    assert c.matched_share == 1.0 and c.matched_share_of == "all rows"


def test_without_the_declaration_the_same_rows_are_only_in_b_and_there_is_no_verdict(tmp_path: Path) -> None:
    c = compare(load_dump(_write(tmp_path / "a", FORWARD_ONLY)), load_dump(_write(tmp_path / "b", FULL)))
    assert {r.match_class for r in c.units[0].rows if ".backward" in r.entry_name} == {"only_in_b"}
    assert c.verdict == "too_few_matched"
    assert c.matched_share == 6 / 14


def test_a_per_entry_gap_does_not_hide_the_other_sides_rows(tmp_path: Path) -> None:
    # a recorder says why an entry is missing ("no gradient reached its outputs"), but a backward that never
    # came may be the regression itself (a detached tensor): the other side's rows stay unpaired, not hidden
    data = {k: v for k, v in FULL.items() if k != "Functional.relu.0.backward"}
    gap = [{"what": "Functional.relu.0.backward", "reason": "no gradient reached its outputs"}]
    c = compare(load_dump(_write(tmp_path / "a", data, gap)), load_dump(_write(tmp_path / "b", FULL)))
    classes = {r.name: r.match_class for r in c.units[0].rows}
    assert classes["Functional.relu.0.backward.input.0"] == "only_in_b"
    assert classes["Functional.linear.0.backward.input.0"] == "matched"


def test_a_gradient_null_on_one_side_only_is_flagged_and_counted(tmp_path: Path) -> None:
    # fc's parameter gradients are null in A (the layer was cut off from the loss) and real in B
    data = dict(FULL, **{"Module.fc.Linear.parameters_grad": {"weight": [None], "bias": [None]}})
    c = compare(load_dump(_write(tmp_path / "a", data)), load_dump(_write(tmp_path / "b", FULL)))
    rows = {r.name: r for r in c.units[0].rows}
    weight = rows["Module.fc.Linear.parameters_grad.weight"]
    # a parameter without a gradient does not train: that fails
    assert weight.match_class == "not_captured" and weight.verdict == "fail"
    assert weight.reasons[0] == "the parameter got no gradient in A but one in B: it does not train in A"
    assert c.verdict == "fail"
    assert c.first_divergent is not None and c.first_divergent.name == "Module.fc.Linear.parameters_grad.weight"
    assert c.matched_share == 12 / 14


def test_a_backward_value_null_on_one_side_only_is_a_warning(tmp_path: Path) -> None:
    data = dict(FULL, **{"Functional.relu.0.backward": {"input": [LEAF], "output": [None]}})
    c = compare(load_dump(_write(tmp_path / "a", data)), load_dump(_write(tmp_path / "b", FULL)))
    row = {r.name: r for r in c.units[0].rows}["Functional.relu.0.backward.output.0"]
    assert row.match_class == "not_captured" and row.verdict == "warning"
    assert row.reasons[0].startswith("A recorded null where B has a tensor")
    assert c.verdict == "pass" and c.first_divergent is not None
    assert c.first_divergent.name == "Functional.relu.0.backward.output.0"


def test_an_incomplete_step_gets_no_verdict(tmp_path: Path) -> None:
    gap = [{"what": "step", "reason": "incomplete: closed before stop()"}]
    c = compare(load_dump(_write(tmp_path / "a", FULL, gap)), load_dump(_write(tmp_path / "b", FULL)))
    assert all(r.match_class == "matched" for r in c.units[0].rows)
    assert c.verdict == "too_few_matched"
    assert any("recorded incompletely" in n for n in c.notes)


def test_an_incomplete_step_without_a_partner_also_gets_no_verdict(tmp_path: Path) -> None:
    gap = [{"what": "step", "reason": "incomplete: closed before stop()"}]
    a = _write(tmp_path / "a", FULL)
    b = _write(tmp_path / "b", FULL)
    step1 = b / "step1" / "rank"
    step1.mkdir(parents=True)
    doc = json.loads((b / "step0" / "rank" / "dump.json").read_text())
    doc["not_captured"] = gap
    (step1 / "dump.json").write_text(json.dumps(doc))
    c = compare(load_dump(a), load_dump(b))
    assert c.verdict == "too_few_matched"
    assert any("B step1/rank" in n and "recorded incompletely" in n for n in c.notes), c.notes
