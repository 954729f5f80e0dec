"""Real PyTorch model code from the registry, random init, fixed seeds, configs small enough to train a step in
well under a second on 2 CPU cores.

Each builder returns a :class:`Case`: the model (``torch.nn.Module``, in training mode), a batch and a loss
function.  The model code is the packages' own (Hugging Face ``transformers`` BERT, GPT-2 and Llama;
``pytorchcv``'s ResNet-18, whose blocks use ``nn.ReLU(inplace=True)`` and ``BatchNorm2d`` like torchvision's);
only the configuration is ours.  Nothing is downloaded: weights are random.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.realmodels.case import SEED, Case

__all__ = ["BUILDERS", "SEED", "Case", "train_step"]


def train_step(case: Case, opt: Any, debugger: Any = None) -> Any:
    """One optimiser step of ``case`` (recorded by ``debugger``, a ``PrecisionDebugger``, when given: start before
    the forward, stop after the backward, step after the optimiser); returns the loss tensor."""
    opt.zero_grad()
    if debugger is not None:
        debugger.start(case.model)
    loss = case.loss_of(case.model, case.batch)
    loss.backward()
    if debugger is not None:
        debugger.stop()
    opt.step()
    if debugger is not None:
        debugger.step()
    return loss


def _lm_batch(torch: Any, vocab: int, batch: int = 2, seq: int = 8) -> dict[str, Any]:
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, -2:] = 0  # padding in the second sequence: the attention mask matters
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def _hf_loss(model: Any, batch: dict[str, Any]) -> Any:
    return model(**batch).loss


def _hf_case(torch: Any, name: str, model_cls: str, config_cls: str, cfg: dict[str, Any], overrides: Any) -> Case:
    """A ``transformers`` language model ``model_cls(config_cls(**cfg, **overrides))`` with fixed seeds, in training
    mode, its batch and loss."""
    import transformers

    torch.manual_seed(SEED)
    cfg = {**cfg, **overrides}
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**cfg)).train()
    return Case(name, model, _lm_batch(torch, cfg["vocab_size"]), _hf_loss)


def bert(torch: Any, **overrides: Any) -> Case:
    """``transformers`` BertForMaskedLM: 2 layers, hidden 32, 2 heads, dropout on (0.1)."""
    cfg = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
               max_position_embeddings=32, type_vocab_size=2)
    return _hf_case(torch, "bert", "BertForMaskedLM", "BertConfig", cfg, overrides)


def gpt2(torch: Any, **overrides: Any) -> Case:
    """``transformers`` GPT2LMHeadModel: 2 layers, 32 wide, 2 heads, dropout on (0.1)."""
    cfg = dict(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32)
    return _hf_case(torch, "gpt2", "GPT2LMHeadModel", "GPT2Config", cfg, overrides)


def llama(torch: Any, **overrides: Any) -> Case:
    """``transformers`` LlamaForCausalLM (RMSNorm, rotary embeddings, SiLU MLP, grouped-query attention)."""
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=32)
    return _hf_case(torch, "llama", "LlamaForCausalLM", "LlamaConfig", cfg, overrides)


def resnet18(torch: Any, inplace: bool = True) -> Case:
    """``pytorchcv``'s ResNet-18 (17 ``nn.ReLU(inplace=True)``, 20 ``BatchNorm2d``), 10 classes, 2 images of
    3x224x224 (its final pool is a fixed 7x7 average).  ``inplace=False`` gives its numerically identical twin (every ReLU out of place)."""
    from pytorchcv.models.resnet import resnet18 as build

    torch.manual_seed(SEED)
    model = build(num_classes=10).train()
    if not inplace:
        for module in model.modules():
            if isinstance(module, torch.nn.ReLU):
                module.inplace = False
    g = torch.Generator().manual_seed(SEED + 1)
    batch = {"x": torch.randn(2, 3, 224, 224, generator=g), "y": torch.tensor([3, 7])}
    return Case("resnet18", model, batch, lambda m, b: torch.nn.functional.cross_entropy(m(b["x"]), b["y"]))


BUILDERS: dict[str, Callable[..., Case]] = {"bert": bert, "gpt2": gpt2, "llama": llama, "resnet18": resnet18}
