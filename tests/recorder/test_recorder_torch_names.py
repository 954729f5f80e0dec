"""PyTorch recorder against msprobe's own PyTorch recording of the same model (the strongest oracle we have).

``tests/data/msprobe-1.2.2-mindspore/torch_statistics_a`` was recorded by msprobe 1.2.2 on the fixture model,
trained with Adam for two steps (FIXTURES_README.md).  We rebuild that model, record it at mix and check:
the same entry names in the same order (msprobe's ``Tensor.view_as`` entries, made by torch's backward-hook
machinery, are absent from ours by design; the shared ReLU's backward indices follow our convention), the same
parents, and every statistic within float32 rounding of msprobe's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msprobe_cmp import PrecisionDebugger
from msprobe_cmp.dump.reader import load_dump
from msprobe_cmp.dump.schema import TensorLeaf

pytestmark = pytest.mark.torch

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore" / "torch_statistics_a"


def _our_name_in_msprobe_1_2_2(name: str) -> str:
    # msprobe 1.2.2 numbers backward calls in backward order; we give a backward its forward call's index.
    # The shared ReLU runs twice, so its two backward entries swap numbers.
    prefix = "Module.act.ReLU.backward."
    if name.startswith(prefix):
        return prefix + str(1 - int(name[len(prefix) :]))
    return name


#: msprobe 1.2.2 takes a linear's input gradients from AddmmBackward (bias, x, weight.T); ours are positional
#: (x, weight, bias).  Statistics are invariant under the transpose.
_LINEAR_BACKWARD_OUTPUT = {"output.0": "output.1", "output.1": "output.2", "output.2": "output.0"}


def _record(tmp_path: Path, torch_train: Any, level: str, steps: int = 2, **kw: Any) -> Path:
    with PrecisionDebugger(dump_path=tmp_path, level=level, framework="pytorch", **kw) as dbg:
        torch_train(steps, dbg)
    return tmp_path


def test_mix_names_order_and_parents_match_msprobe(tmp_path: Path, torch_train: Any) -> None:
    _record(tmp_path, torch_train, "mix")
    for step in (0, 1):
        ours = json.loads((tmp_path / f"step{step}" / "rank" / "dump.json").read_text())
        ref = json.loads((FIXTURE / f"step{step}" / "rank" / "dump.json").read_text())
        assert ours["framework"] == "pytorch" and ours["level"] == "mix"
        ref_names = [n for n in ref["data"] if not n.startswith("Tensor.view_as.")]
        our_names = [_our_name_in_msprobe_1_2_2(n) for n in ours["data"]]
        assert sorted(our_names) == sorted(ref_names)
        # Forward entries (and parameters_grad placeholders) in msprobe's order; backward entries are written
        # when their first gradient arrives, which may put an API's before its module's.
        assert [n for n in our_names if not n.endswith("backward") and ".backward." not in n] == [
            n for n in ref_names if not n.endswith("backward") and ".backward." not in n
        ]
        construct = json.loads((tmp_path / f"step{step}" / "rank" / "construct.json").read_text())
        ref_construct = json.loads((FIXTURE / f"step{step}" / "rank" / "construct.json").read_text())
        for name, parent in construct.items():
            if name.startswith("Tensor.") or name.endswith(".backward"):
                continue  # msprobe puts optimizer calls under "optimizer"; API backward parents differ by design
            assert parent == ref_construct[name], name


def test_mix_statistics_match_msprobe_within_float32_rounding(tmp_path: Path, torch_train: Any) -> None:
    _record(tmp_path, torch_train, "mix")
    ours, ref = load_dump(tmp_path), load_dump(FIXTURE)
    compared = 0
    for unit in ours.units:
        ref_unit = ref.get(unit.step, unit.rank)
        assert ref_unit is not None
        ref_entries = {e.name: e for e in ref_unit.entries}
        for entry in unit.entries:
            name = _our_name_in_msprobe_1_2_2(entry.name)
            ref_leaves = dict(ref_entries[name].leaves())
            is_linear_bwd = name.startswith("Functional.linear.") and name.endswith(".backward")
            for path, leaf in entry.leaves():
                ref_leaf = ref_leaves.get(_LINEAR_BACKWARD_OUTPUT.get(path, path) if is_linear_bwd else path)
                if not isinstance(leaf, TensorLeaf):
                    continue
                assert isinstance(ref_leaf, TensorLeaf), (name, path)
                assert leaf.dtype == ref_leaf.dtype and leaf.requires_grad == ref_leaf.requires_grad, (name, path)
                for field in ("max", "min", "mean", "norm"):
                    assert getattr(leaf, field) == pytest.approx(getattr(ref_leaf, field), rel=2e-6, abs=1e-7), (
                        name,
                        path,
                        field,
                    )
                    compared += 1
    # 2 steps; every tensor of every entry (forward, backward, parameters, parameter gradients, optimizer)
    assert compared > 1400


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_levels_select_modules_or_apis(tmp_path: Path, torch_train: Any, level: str) -> None:
    _record(tmp_path, torch_train, level, steps=1)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    ref = json.loads((FIXTURE / "step0" / "rank" / "dump.json").read_text())["data"]
    ref_names = [_our_name_in_msprobe_1_2_2(n) for n in ref if not n.startswith("Tensor.view_as.")]
    is_module = lambda n: n.startswith("Module.")  # noqa: E731
    expected = [n for n in ref_names if is_module(n) == (level == "L0")]
    assert sorted(data) == sorted(expected)
    construct = json.loads((tmp_path / "step0" / "rank" / "construct.json").read_text())
    if level == "L1":
        assert construct == {}  # msprobe: no parents at L1


def test_forward_entries_carry_kwargs_and_parameters(tmp_path: Path, torch_train: Any) -> None:
    _record(tmp_path, torch_train, "mix", steps=1)
    data = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]
    assert data["Functional.mse_loss.0.forward"]["input_kwargs"] == {"reduction": {"type": "str", "value": "mean"}}
    assert set(data["Module.head.Linear.forward.0"]["parameters"]) == {"weight", "bias"}
    assert data["Torch.ones_like.0.forward"]["input_kwargs"]["memory_format"] == {
        "type": "torch.memory_format",
        "value": "torch.preserve_format",
    }
    # a module input that needs no gradient: backward output null (as msprobe)
    assert data["Module.blocks.0.Linear.backward.0"]["output"] == [None]
