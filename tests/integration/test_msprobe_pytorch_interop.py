"""msprobe 1.2.2 (mindstudio-probe) and msprobe-cmp record the same PyTorch training step: the two dumps pair.

tests/data/msprobe-1.2.2-pytorch/ holds msprobe's dump of one training step of a small ``transformers`` BERT (its
README.md says how it was made, with the script, ``record_bert.py``).  These tests record msprobe-cmp's dump of the
same step in this process, with the same script's ``build()`` and ``train_step()`` (same model, weights, batch,
dropout draws and optimiser), and compare msprobe's dump (A, the target) against ours (B, the baseline).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType

import pytest

from tests.realmodels.conftest import need

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from msprobe_cmp import PrecisionDebugger  # noqa: E402
from msprobe_cmp.comparator.compare import CompareOptions, compare  # noqa: E402
from msprobe_cmp.comparator.result import Comparison, ComparisonRow  # noqa: E402
from msprobe_cmp.dump.naming import parse_name  # noqa: E402
from msprobe_cmp.dump.reader import load_dump  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-pytorch"
ONE_SIDED = ("only_in_a", "only_in_b")

#: Float32 spacing at 1 (2**-23): the backward of msprobe's recorded run differs from the unrecorded run's in the
#: last bits (its module hooks add autograd nodes, which reorders gradient accumulation; README.md there).
ULP32 = 2.0**-23

#: Why a row can exist in one dump only (A = msprobe 1.2.2, B = msprobe-cmp), each reason checked by
#: :func:`_why_one_sided`.  Everything else that one recorder captures must pair with the other's row.
REASONS = {
    "view_as": "A: torch's BackwardHookFunction calls Tensor.view_as on the inputs and outputs of every module msprobe "
               "registers a full backward hook on: msprobe records its own hook machinery",
    "node": "A's backward gradients fit none of the API's forward inputs: msprobe 1.2.2 records the gradients of the "
            "last autograd node of an API made of several (a [16, 64] view in a 3-D linear, scaled_dot_product"
            "_attention's reshaped input); ours are the gradients w.r.t. the API's inputs",
    "null": "a null leaf on one side only: msprobe writes a ModelOutput's None fields and drops null gradients, "
            "msprobe-cmp leaves out the None fields and writes a null per forward input without a gradient",
    "unwrapped": "B: Tensor.view, Tensor.expand and Tensor.to are not in msprobe 1.2.2's support_wrap_ops.yaml",
    "model_output": "B: torch does not call the module backward hook msprobe registers on a module that returns a "
                    "ModelOutput (its UserWarning); msprobe-cmp reads the gradients from autograd's nodes",
    "buffers": "B: module buffers are an msprobe-cmp extension",
    "memory_format": "torch.memory_format is written by msprobe as an object {type, format}, by msprobe-cmp as one "
                     "value: the rows' paths differ",
}


def _recipe() -> ModuleType:
    """tests/data/msprobe-1.2.2-pytorch/record_bert.py, the script that made msprobe's dump."""
    spec = importlib.util.spec_from_file_location("record_bert", DATA / "record_bert.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """msprobe-cmp's recording of the step msprobe recorded (level mix, task statistics), and the step's loss."""
    need("transformers")
    recipe = _recipe()
    model, batch, opt = recipe.build(torch)
    out = tmp_path_factory.mktemp("ours")
    debugger = PrecisionDebugger(dump_path=str(out), framework="pytorch", task="statistics", level="mix")
    loss = recipe.train_step(model, batch, opt, debugger)
    debugger.close()
    return out, float(loss.detach())


@pytest.fixture(scope="module")
def comparison(ours: tuple[Path, float]) -> Comparison:
    """msprobe's dump (A) against ours (B)."""
    return compare(load_dump(DATA / "dump.json"), load_dump(ours[0]), CompareOptions())


def _tensor_rows(comparison: Comparison) -> list[ComparisonRow]:
    return [r for r in comparison.units[0].rows
            if r.match_class == "matched" and r.a is not None and r.a.kind == "tensor" and r.b is not None
            and r.b.kind == "tensor"]


def _why_one_sided(row: ComparisonRow) -> str | None:
    """The key of :data:`REASONS` that explains a row found on one side only, or None when nothing does."""
    stem = parse_name(row.entry_name).stem
    leaf = row.a if row.match_class == "only_in_a" else row.b
    if leaf is not None and leaf.kind == "null":
        return "null"
    if row.entry_name.startswith("Torch.ones_like.") and row.arg_path.startswith("kwargs.memory_format"):
        return "memory_format"
    if row.match_class == "only_in_a":
        if stem == "Tensor.view_as":
            return "view_as"
        if any("fit none of" in note for note in row.notes):
            return "node"
        return None
    if stem in ("Tensor.view", "Tensor.expand", "Tensor.to"):
        return "unwrapped"
    if row.entry_name in ("Module.bert.BertModel.backward.0", "Module.bert.encoder.BertEncoder.backward.0"):
        return "model_output"
    if row.arg_path.startswith("buffers."):
        return "buffers"
    if any("fit none of" in note for note in row.notes):
        return "node"
    return None


def test_the_two_recordings_are_of_one_run(ours: tuple[Path, float], comparison: Comparison) -> None:
    _, loss = ours
    data = json.loads((DATA / "dump.json").read_text())["data"]
    assert data["Functional.cross_entropy.0.forward"]["output"][0]["Max"] == loss  # the same loss, bit for bit
    rows = _tensor_rows(comparison)
    forward = [r for r in rows if ".forward" in r.entry_name]
    assert len(forward) > 150
    # Max and Min are elements of the tensor, so identical tensors give identical Max and Min whatever the
    # recorder: on the CPU the fixture was recorded on, the forward is bit-identical in the two processes.  On a CPU
    # whose torch runs other vector kernels (AVX2 where the recording ran AVX-512) scaled_dot_product_attention and
    # GELU round otherwise: at most ~2 float32 ulps from there on (seen: 31 of 212 rows, 2.1 ulps at most).
    same = [r for r in forward if (r.a.max, r.a.min) == (r.b.max, r.b.min)]  # type: ignore[union-attr]
    assert len(same) > 0.8 * len(forward)
    near = [(r.name, x, y) for r in forward for x, y in ((r.a.max, r.b.max), (r.a.min, r.b.min))  # type: ignore[union-attr]
            if abs(x - y) > 4 * ULP32 * max(abs(x), abs(y))]
    assert near == []
    # The backward too, up to msprobe's hooks reordering gradient accumulation (a few float32 ulps).  msprobe's
    # cross_entropy backward output is another quantity (the gradient w.r.t. log_softmax's output, its last
    # autograd node's), compared in test_msprobe_s_cross_entropy_gradient_is_another_quantity.  Left out: the
    # tensors the comparator finds at rounding-noise magnitude (the attention key's bias gradient, a sum that cancels
    # exactly: ~1e-12 against ~1e-5, whose values are whatever the rounding leaves, so another CPU's forward kernels
    # change them entirely).
    backward = [r for r in rows if ".forward" not in r.entry_name and r.name != "Functional.cross_entropy.0.backward"
                ".output.0"]
    assert len(backward) > 100
    noise = {r.name for r in backward if any(n.startswith("both sides at rounding-noise magnitude") for n in r.notes)}
    assert len(noise) < 10
    far = []
    for r in (r for r in backward if r.name not in noise):
        for x, y in ((r.a.max, r.b.max), (r.a.min, r.b.min)):  # type: ignore[union-attr]
            assert x is not None and y is not None
            if abs(x - y) > 4 * ULP32 * max(abs(x), abs(y)):
                far.append((r.name, x, y))
    assert far == []
    assert sum((r.a.max, r.a.min) != (r.b.max, r.b.min) for r in backward) > 0  # type: ignore[union-attr]


def test_every_row_both_recorders_capture_pairs(ours: tuple[Path, float], comparison: Comparison) -> None:
    rows = comparison.units[0].rows
    assert [r.name for r in rows if r.match_class in ("shape_mismatch", "dtype_mismatch")] == []
    # Every pair is of namesakes (the same call in both runs), backward entries written in another order included.
    assert [r.name for r in rows if r.match_class not in ONE_SIDED and r.entry_name_b is not None] == []
    one_sided = [r for r in rows if r.match_class in ONE_SIDED]
    assert [(r.match_class, r.name) for r in one_sided if _why_one_sided(r) is None] == []
    # Every entry the two dumps share has its rows paired (a null or an unassignable gradient aside).
    names_a = {e.name for e in load_dump(DATA / "dump.json").units[0].entries}
    shared = names_a & {e.name for e in load_dump(ours[0]).units[0].entries}
    paired = {r.entry_name for r in rows if r.match_class in ("matched", "not_captured")}
    assert sorted(shared - paired) == []
    assert len(shared) > 100
    # The reasons, each of which the data shows at least once (a reason nothing needs would hide a new gap).
    assert {_why_one_sided(r) for r in one_sided} == set(REASONS)


def test_api_backward_gradients_pair_by_the_forward_input_they_belong_to(comparison: Comparison) -> None:
    rows = {(r.entry_name, r.arg_path): r for r in comparison.units[0].rows if r.match_class not in ONE_SIDED}
    # msprobe writes layer_norm's gradients as (input, weight, bias), ours one per forward input (input,
    # normalized_shape, weight, bias, eps), with nulls.
    for k in range(4):
        name = f"Functional.layer_norm.{k}.backward"
        got = [(rows[(name, p)].match_class, rows[(name, p)].arg_path_b) for p in ("output.0", "output.1", "output.2")]
        assert got == [("matched", None), ("matched", "output.2"), ("matched", "output.3")], name
    for k, vocab in ((0, 64), (1, 2), (2, 32)):  # word, token type and position embeddings: the weight gradient
        row = rows[(f"Functional.embedding.{k}.backward", "output.0")]
        assert (row.match_class, row.arg_path_b, row.a.shape) == ("matched", "output.1", (vocab, 32))  # type: ignore[union-attr]


def test_msprobe_s_cross_entropy_gradient_is_another_quantity(comparison: Comparison) -> None:
    """msprobe 1.2.2's non-full backward hook gives cross_entropy's last autograd node's gradient (w.r.t. the
    log-probabilities: -1/N at each label, 0 elsewhere); ours is the gradient w.r.t. the logits.  Same shape: they
    pair, and the row says they differ (a warning, never a failure)."""
    row = next(r for r in comparison.units[0].rows if r.name == "Functional.cross_entropy.0.backward.output.0")
    n = 16  # labels in the batch (2 x 8), none ignored
    assert (row.a.max, row.a.min) == (0.0, -1.0 / n)  # type: ignore[union-attr]
    assert row.b.max > 0.0 and row.b.min > -1.0 / n  # type: ignore[union-attr]
    assert row.verdict == "warning"


def test_no_row_fails_and_the_verdict_is_pass(comparison: Comparison) -> None:
    assert [r.name for r in comparison.units[0].rows if r.verdict == "fail"] == []
    assert comparison.verdict == "pass"


def test_the_forward_does_not_diverge(comparison: Comparison) -> None:
    """No forward row warns or fails, and where the forward's rows differ at all (another CPU's vector kernels:
    test_the_two_recordings_are_of_one_run), the first of them is within rounding: nowhere near an origin."""
    unit = comparison.units[0]
    forward = [r for r in unit.rows if ".forward" in r.entry_name]
    assert {r.verdict for r in forward} <= {"pass", "skip"}
    first = unit.first_divergent
    if first is not None and ".forward" in unit.rows[first].entry_name:
        assert unit.rows.relative_error[first] < 4 * ULP32


def test_msprobe_s_statistics_are_float32_reductions(comparison: Comparison) -> None:
    """Why the forward's Mean and Norm differ in the last bits although the tensors are identical: msprobe's are
    float32 reductions, ours float64 (position_ids: 0..31, Norm sqrt(10416) exactly)."""
    row = next(r for r in comparison.units[0].rows if r.name == "Tensor.__getitem__.1.forward.input.0")
    exact = math.sqrt(sum(k * k for k in range(32)))
    assert row.b.norm == exact  # type: ignore[union-attr]
    assert row.a.norm == float(torch.tensor(exact, dtype=torch.float32)) != exact  # type: ignore[union-attr]


def test_the_only_likely_origin_is_the_row_msprobe_records_another_quantity_in(comparison: Comparison) -> None:
    # msprobe's float32 reductions and its hooks' effect on the backward (~1.5 float32 ulps) are rounding, not a jump;
    # cross_entropy's backward output.0 is msprobe's gradient w.r.t. log_softmax's output, not w.r.t. the logits
    # (test_msprobe_s_cross_entropy_gradient_is_another_quantity), so the error does enter there.
    origin = comparison.likely_origin
    assert origin is not None and origin.ref.name == "Functional.cross_entropy.0.backward.output.0"
    assert origin.error_in < 1e-6 < 1e-2 < origin.error_out
