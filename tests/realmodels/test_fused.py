"""One call against several on real model code: transformers' Phi-3 (``Phi3ForCausalLM``: one ``qkv_proj`` Linear
of ``H + 2·kv`` outputs, one ``gate_up_proj``) against Llama (``LlamaForCausalLM``: separate ``q_proj``, ``k_proj``,
``v_proj``, ``gate_proj``, ``up_proj``) of the same tiny config (tests/realmodels/torch_corpus.py ``llama``: hidden 32,
2 layers, 4 heads, 2 kv heads), Llama's weights copied into Phi-3, one training step recorded on each side, compared
with two ``fused`` records (docs/mapping.md, "One call against several").

Why the two compute one function (transformers 4.57.1, models/phi3/modeling_phi3.py and models/llama/modeling_llama.py):
Phi-3's attention slices ``qkv_proj``'s output into q, k, v in that order (``[:H]``, ``[H:H+kv]``, ``[H+kv:]``) and
its MLP ``chunk(2)``s ``gate_up_proj``'s output into gate, up; rotary embeddings are Llama's with
``partial_rotary_factor=1`` (the pass-through slice is empty) and no ``rope_scaling``; ``resid_pdrop=0`` (its two
residual dropouts are identities) and ``attention_dropout=0`` on both; the RMSNorm epsilon is set equal (Phi-3's
default is 1e-5, Llama's 1e-6); ``pad_token_id`` is None on both (Phi-3's default 32000 would be an embedding
padding index); no biases (Llama's ``attention_bias`` / ``mlp_bias`` are False, Phi-3's Linears have none); both
use eager attention.  :func:`test_phi3_with_llamas_weights_computes_llamas_function` checks it numerically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.realmodels.conftest import need

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from msprobe_cmp import PrecisionDebugger  # noqa: E402
from msprobe_cmp.comparator.compare import CompareOptions, Comparison, compare  # noqa: E402
from msprobe_cmp.comparator.mapping import NameMapping, load_api_mapping  # noqa: E402
from msprobe_cmp.comparator.rules import Rules, ThresholdOverride, Thresholds  # noqa: E402
from msprobe_cmp.dump.reader import load_dump  # noqa: E402
from tests.realmodels import torch_corpus  # noqa: E402

TASKS = ("statistics", "tensor")
LAYERS = 2
BUG_LAYER = 0  # v_proj's weight scaled by 1.01 there, on Llama's side only

MAPPING = """\
# Phi-3 fuses what Llama computes separately
- fused: Module.model.layers.{i}.self_attn.qkv_proj.Linear
  parts:
    - Module.model.layers.{i}.self_attn.q_proj.Linear
    - Module.model.layers.{i}.self_attn.k_proj.Linear
    - Module.model.layers.{i}.self_attn.v_proj.Linear
  dim: -1
  parameters_dim: 0
- fused: Module.model.layers.{i}.mlp.gate_up_proj.Linear
  parts: ["Module.model.layers.{i}.mlp.gate_proj.Linear", "Module.model.layers.{i}.mlp.up_proj.Linear"]
"""
FUSED = ("qkv_proj", "gate_up_proj")
PARTS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def _fuse(state: dict[str, Any]) -> dict[str, Any]:
    """Llama's state dict in Phi-3's names: q, k, v weights concatenated along dim 0 into ``qkv_proj``, gate and up
    into ``gate_up_proj`` (Phi-3 slices and chunks the fused outputs in that order)."""
    out = {}
    for key, value in state.items():
        if ".self_attn.q_proj." in key:
            out[key.replace("q_proj", "qkv_proj")] = torch.cat(
                [state[key.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")], 0)
        elif ".mlp.gate_proj." in key:
            out[key.replace("gate_proj", "gate_up_proj")] = torch.cat(
                [state[key.replace("gate_proj", p)] for p in ("gate_proj", "up_proj")], 0)
        elif not any(f".{p}." in key for p in ("k_proj", "v_proj", "up_proj")):
            out[key] = value
    return out


def _pair(bug: bool = False) -> tuple[torch_corpus.Case, torch_corpus.Case]:
    """Phi-3 holding the corpus Llama's weights, and that Llama (v_proj of BUG_LAYER scaled by 1.01 when ``bug``)."""
    transformers = need("transformers")
    llama = torch_corpus.llama(torch, attn_implementation="eager", use_cache=False)
    cfg = llama.model.config
    assert not cfg.attention_bias and not cfg.mlp_bias and cfg.rope_scaling is None
    phi_cfg = transformers.Phi3Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
        original_max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta, rope_scaling=None, partial_rotary_factor=1.0, hidden_act=cfg.hidden_act,
        resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=cfg.attention_dropout, pad_token_id=cfg.pad_token_id,
        tie_word_embeddings=cfg.tie_word_embeddings, sliding_window=None, attn_implementation="eager",
        use_cache=False)
    assert cfg.num_hidden_layers == LAYERS and cfg.attention_dropout == 0.0 and cfg.pad_token_id is None
    phi = transformers.Phi3ForCausalLM(phi_cfg).train()
    phi.load_state_dict(_fuse(llama.model.state_dict()), strict=True)
    if bug:
        with torch.no_grad():
            llama.model.model.layers[BUG_LAYER].self_attn.v_proj.weight.mul_(1.01)
    return torch_corpus.Case("phi3", phi, llama.batch, llama.loss_of), llama


def _record(case: torch_corpus.Case, dump: Path, task: str) -> None:
    opt = torch.optim.SGD(case.model.parameters(), lr=0.05)
    dbg = PrecisionDebugger(dump_path=str(dump), framework="pytorch", level="mix", task=task)
    torch_corpus.train_step(case, opt, dbg)
    dbg.close()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``phi3_<task>``, ``llama_<task>`` and ``llama_bug_<task>``: one mix-level step each."""
    out = {}
    for task in TASKS:
        for bug in (False, True):
            phi, llama = _pair(bug)
            if not bug:
                out[f"phi3_{task}"] = tmp_path_factory.mktemp(f"phi3_{task}")
                _record(phi, out[f"phi3_{task}"], task)
            key = f"llama{'_bug' if bug else ''}_{task}"
            out[key] = tmp_path_factory.mktemp(key)
            _record(llama, out[key], task)
    return out


@pytest.fixture(scope="module")
def mapping(tmp_path_factory: pytest.TempPathFactory) -> NameMapping:
    file = tmp_path_factory.mktemp("mapping") / "fused.yaml"
    file.write_text(MAPPING)
    return NameMapping(apis=load_api_mapping(file), api_source=file.name)


def _commuted_rules(dump: Path) -> Rules:
    """The one difference of the two model codes that is not the fusion: Llama's MLP multiplies ``act(gate) * up``,
    Phi-3's ``up * act(gate)``: the operands of that ``Tensor.__mul__`` (and the gradients w.r.t. them) are swapped,
    so their rows compare gate against up.  Their Cosine rules are switched off (the product itself still pairs and
    is judged); the calls are found from Phi-3's construct.json (the ``Tensor.__mul__`` run directly by each
    ``Phi3MLP``)."""
    construct = json.loads((dump / "step0" / "rank" / "construct.json").read_text())
    muls = sorted(name for name, parent in construct.items()
                  if name.startswith("Tensor.__mul__.") and parent and ".mlp.Phi3MLP." in parent)
    assert len(muls) == 2 * LAYERS  # forward and backward, per layer
    loose = Thresholds(cosine_fail_below=-1.0, cosine_suspect_below=-1.0)
    overrides = tuple(ThresholdOverride(loose, f"{name}.{'input' if name.endswith('forward') else 'output'}.*")
                      for name in muls)
    return Rules(overrides=overrides)


def _compare(dumps: dict[str, Path], mapping: NameMapping, a: str, b: str, rules: bool = True) -> Comparison:
    phi = dumps[a if a.startswith("phi3") else b]
    opts = CompareOptions(mapping=mapping, rules=_commuted_rules(phi) if rules else Rules())
    return compare(load_dump(dumps[a]), load_dump(dumps[b]), opts)


def _names(row: Any) -> str:
    return f"{row.entry_name} | {row.entry_name_b or ''}"


def test_phi3_with_llamas_weights_computes_llamas_function() -> None:
    phi, llama = _pair()
    with torch.no_grad():
        out_phi, out_llama = phi.model(**phi.batch), llama.model(**llama.batch)
    np.testing.assert_allclose(out_phi.logits.numpy(), out_llama.logits.numpy(), rtol=0, atol=1e-6)
    assert abs(out_phi.loss.item() - out_llama.loss.item()) <= 1e-6


@pytest.mark.parametrize("task", TASKS)
def test_every_fused_and_part_row_pairs(dumps: dict[str, Path], mapping: NameMapping, task: str) -> None:
    rows = _compare(dumps, mapping, f"phi3_{task}", f"llama_{task}").units[0].rows
    construct = json.loads((dumps[f"phi3_{task}"] / "step0" / "rank" / "construct.json").read_text())
    inside = {name for name, parent in construct.items() if parent and any(f".{m}." in parent for m in FUSED)}
    lonely = [_names(r) for r in rows if r.match_class != "matched"
              and (any(f".{m}." in _names(r) for m in FUSED + PARTS) or r.entry_name in inside)]
    assert lonely == []
    combined = [r for r in rows if (r.mapped_by or "").startswith("fused call: user API mapping fused.yaml")]
    # per layer, qkv_proj: module forward 3 shared inputs + weight + output, backward 2, parameters_grad 1, its
    # Functional.linear 3 shared inputs + weight + bias (null) + output, that linear's backward 4 = 18;
    # gate_up_proj likewise with 2 parts = 16
    assert len(combined) == LAYERS * (18 + 16)
    assert {r.match_class for r in combined} == {"matched"}
    for layer in range(LAYERS):
        qkv = [r for r in combined if r.entry_name == f"Module.model.layers.{layer}.self_attn.qkv_proj.Linear.forward.0"]
        assert [r.arg_path for r in qkv] == ["input.0"] * 3 + ["parameters.weight", "output.0"]
        assert qkv[-1].entry_name_b == " + ".join(
            f"Module.model.layers.{layer}.self_attn.{p}.Linear.forward.0" for p in ("q_proj", "k_proj", "v_proj"))
        assert "compared as the concatenation of q_proj + k_proj + v_proj's output.0 along dim -1" in qkv[-1].notes


@pytest.mark.parametrize("task", TASKS)
def test_the_comparison_passes(dumps: dict[str, Path], mapping: NameMapping, task: str) -> None:
    result = _compare(dumps, mapping, f"phi3_{task}", f"llama_{task}")
    failing = [(r.entry_name, r.arg_path, r.reasons) for r in result.units[0].rows if r.verdict == "fail"]
    assert failing == [] and result.verdict == "pass", failing
    if task == "tensor":  # and the commuted operands are the only failures without the override
        plain = _compare(dumps, mapping, f"phi3_{task}", f"llama_{task}", rules=False)
        failing = {r.entry_name for r in plain.units[0].rows if r.verdict == "fail"}
        assert failing and all(name.startswith("Tensor.__mul__.") for name in failing)


def test_the_parts_may_be_the_target(dumps: dict[str, Path], mapping: NameMapping) -> None:
    result = _compare(dumps, mapping, "llama_statistics", "phi3_statistics", rules=False)
    rows = result.units[0].rows
    assert [_names(r) for r in rows if r.match_class != "matched" and any(
        f".{m}." in _names(r) for m in FUSED + PARTS)] == []
    assert result.verdict == "pass"  # statistics mode: the commuted operands only warn


def _npy(dump: Path, data_name: str) -> np.ndarray:
    return np.load(dump / "step0" / "rank" / "dump_tensor_data" / data_name).astype(np.float64)


def _concatenation_like(parts: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The parts concatenated along the last or the first axis, whichever gives ``shape``."""
    for axis in (-1, 0):
        if all(p.ndim == len(shape) for p in parts) and sum(p.shape[axis] for p in parts) == shape[axis]:
            out = np.concatenate(parts, axis=axis)
            if out.shape == shape:
                return out
    raise AssertionError(f"{[p.shape for p in parts]} do not concatenate to {shape}")


def test_combined_rows_hold_numpys_numbers(dumps: dict[str, Path], mapping: NameMapping) -> None:
    rows = _compare(dumps, mapping, "phi3_tensor", "llama_tensor").units[0].rows
    checked = 0
    for row in rows:
        if not (row.mapped_by or "").startswith("fused call") or " + " not in (row.entry_name_b or ""):
            continue
        if row.b is None or row.b.data_name is None:
            continue  # a null leaf on both sides
        a = _npy(dumps["phi3_tensor"], row.a.data_name)
        parts = [_npy(dumps["llama_tensor"], name) for name in row.b.data_name.split(" + ")]
        if row.notes[0].startswith("shared input"):  # one part's input, compared as it is
            b = parts[0]
            assert len(parts) == 1 and (row.b.max, row.b.min) == (b.max(), b.min())
        elif "the sum of" in row.notes[0]:  # summed in float64, stored as the parts' float32
            b = np.sum(parts, axis=0).astype(np.float32).astype(np.float64)
            assert row.b.mean == pytest.approx(np.mean(parts, axis=(1, 2, 3)).sum(), rel=1e-9, abs=1e-15)
        else:
            b = _concatenation_like(parts, a.shape)
            assert (row.b.max, row.b.min) == (b.max(), b.min())
            assert row.b.mean == pytest.approx(b.mean(), rel=1e-9, abs=1e-15)
            assert row.b.norm == pytest.approx(np.linalg.norm(b.ravel()), rel=1e-9)
        assert row.b.shape == b.shape == a.shape
        metrics = dict(row.metrics)
        cosine = float(a.ravel() @ b.ravel() / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert metrics["Cosine"] == pytest.approx(cosine, abs=1e-9)
        assert metrics["MaxAbsErr"] == pytest.approx(np.abs(a - b).max(), rel=1e-6, abs=1e-12)
        assert metrics["MaxAbsErr"] <= 1e-6 and row.verdict == "pass"
        checked += 1
    # per layer: qkv 3 shared inputs + 4 module rows (weight, output, grad out, grad in) + weight grad, and its linear's
    # 3 shared inputs + 5 rows (weight, output, grad out, grad x, grad w) = 16; gate_up likewise with 2 parts = 14
    assert checked == LAYERS * (16 + 14)


def _qkv_group(dump: Path, layer: int) -> set[str]:
    """The entries of one layer's ``qkv_proj`` call on Phi-3's side: the module's and the API calls made inside it."""
    construct = json.loads((dump / "step0" / "rank" / "construct.json").read_text())
    module = f"Module.model.layers.{layer}.self_attn.qkv_proj.Linear"
    calls = {f"{module}.forward.0", f"{module}.backward.0", f"{module}.parameters_grad"}
    return calls | {name for name, parent in construct.items() if parent in calls}


@pytest.mark.parametrize("task", TASKS)
def test_a_bug_in_one_part_shows_at_that_layers_fused_row(
    dumps: dict[str, Path], mapping: NameMapping, task: str
) -> None:
    """v_proj's weight scaled by 1.01 on Llama's side: within the thresholds (a 1% change), but the likely origin
    (the first row whose error jumps, docs/design.md §2 "Localisation") is that layer's fused row, a warning, and the
    other layer's qkv rows pass.  (In layer 1 the jump would be hidden behind the commuted MLP operands of layer 0,
    whose rows carry a relative error of ~1 compared as they are: see :func:`_commuted_rules`.)"""
    unit = _compare(dumps, mapping, f"phi3_{task}", f"llama_bug_{task}").units[0]
    rows = unit.rows
    origin = rows[unit.jumps[0].row]
    assert origin.entry_name in _qkv_group(dumps[f"phi3_{task}"], BUG_LAYER), origin
    assert origin.arg_path in ("input.1", "parameters.weight") and origin.verdict == "warning"
    assert origin.reasons[0].startswith("error enters here")
    assert [r.index for r in rows if r.verdict in ("warning", "fail")][0] == origin.index
    other = [r for r in rows if r.entry_name in _qkv_group(dumps[f"phi3_{task}"], 1 - BUG_LAYER)]
    assert len(other) == 18 and {r.verdict for r in other} <= {"pass", "skip"}
    # the numbers: Phi-3's fused weight against Llama's parts with v scaled (in float32, as mul_ does)
    phi, _ = _pair()
    cfg = phi.model.config
    w = phi.model.model.layers[BUG_LAYER].self_attn.qkv_proj.weight.detach().numpy()
    start = cfg.hidden_size + cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    bugged = w.copy()
    bugged[start:] = (torch.from_numpy(w[start:]) * 1.01).numpy()
    w64, bugged64 = w.astype(np.float64), bugged.astype(np.float64)
    metrics = dict(origin.metrics)
    if task == "tensor":
        assert metrics["MaxAbsErr"] == pytest.approx(np.abs(w64 - bugged64).max(), rel=1e-12)
    assert (origin.b.max, origin.b.min) == (bugged64.max(), bugged64.min())
    assert origin.b.norm == pytest.approx(np.linalg.norm(bugged64), rel=1e-12)
    assert origin.b.mean == pytest.approx(bugged64.mean(), rel=1e-9)
