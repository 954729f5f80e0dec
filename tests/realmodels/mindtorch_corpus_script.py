"""Run in the mindtorch environment by test_mindtorch_corpus.py: transformers' tiny BERT and GPT-2 with the
weights and inputs the PyTorch side wrote (``<name>.npz``, ``inputs.npz``), recorded at level mix, task statistics,
for four steps each: a forward under ``no_grad`` (step 0), a training step through
``mindtorch.autograd.value_and_grad`` (step 1), one through ``loss.backward()`` (step 2, which computes nothing
under mindtorch on CPU) and a forward with gradients enabled but no backward (step 3).  Writes the dumps
(``mindtorch/<name>``) and, per model, ``<name>_mindtorch.npz``: the recorded and the plain (recorder-free) logits,
losses and parameter gradients.

Usage: ``mindtorch_corpus_script.py OUT_DIR``.
"""

import importlib.util
import json
import sys
from pathlib import Path

import mindtorch  # noqa: F401  (makes "import torch" resolve to mindtorch)
import numpy as np
import torch
from mindtorch.autograd import value_and_grad

from msprobe_cmp import PrecisionDebugger


def use_mindnlp_masks():
    """Give transformers mindnlp's attention-mask builders, as ``import mindnlp`` does (its other transformers
    patches need ``accelerate``, absent here): transformers' own builder vmaps a mask function, which mindtorch
    cannot compile.  mindnlp's module is loaded from its file so that mindnlp's package ``__init__`` does not run."""
    import transformers.masking_utils as masking

    package = importlib.util.find_spec("mindnlp")
    path = Path(package.origin).parent / "transformers" / "masking_utils.py"
    spec = importlib.util.spec_from_file_location("_mindnlp_masking_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("create_causal_mask", "create_sliding_window_causal_mask", "create_masks_for_generate"):
        setattr(masking, name, getattr(module, name))


def build(name):
    """The tiny model, dropout off (the configuration the PyTorch side uses)."""
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM

        return BertForMaskedLM(BertConfig(
            vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32, type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def run(name, out_dir, inputs):
    """Record the model's four steps; save what the test checks; return the run's facts."""
    # Before the model is built: its GELU activations bind mindtorch.nn.functional.gelu at construction.
    dbg = PrecisionDebugger(dump_path=str(out_dir / "mindtorch" / name), level="mix", task="statistics")
    weights = np.load(out_dir / f"{name}.npz")
    model = build(name)
    model.load_state_dict({key: torch.tensor(weights[key]) for key in weights.files}, strict=True)
    model.train()
    ids, mask, labels = (torch.tensor(inputs[k]) for k in ("input_ids", "attention_mask", "labels"))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def loss_of(ids, mask, labels):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    vg = value_and_grad(loss_of, [p for _, p in named], attach_grads=False)
    # step 0: a forward under no_grad
    dbg.start(model)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    dbg.stop()
    dbg.step()
    # step 1: a training step inside mindtorch's gradient context
    dbg.start(model)
    loss, grads = vg(ids, mask, labels)
    dbg.stop()
    dbg.step()
    # step 2: a training step through Tensor.backward() (computes nothing here: its backward is declared missing)
    dbg.start(model)
    loss_of(ids, mask, labels).backward()
    dbg.stop()
    dbg.step()
    # step 3: a forward with gradients enabled and no backward (forward only: nothing declared missing)
    dbg.start(model)
    loss_of(ids, mask, labels)
    dbg.stop()
    dbg.step()
    dbg.close()
    framework = dbg.framework
    # The same computations without the recorder.
    with torch.no_grad():
        plain_logits = model(input_ids=ids, attention_mask=mask).logits
    plain_loss, plain_grads = vg(ids, mask, labels)
    arrays = {"logits": logits.asnumpy(), "plain_logits": plain_logits.asnumpy(),
              "loss": loss.asnumpy(), "plain_loss": plain_loss.asnumpy()}
    arrays.update({f"grad/{n}": g.asnumpy() for (n, _), g in zip(named, grads, strict=True)})
    arrays.update({f"plain_grad/{n}": g.asnumpy() for (n, _), g in zip(named, plain_grads, strict=True)})
    np.savez(out_dir / f"{name}_mindtorch.npz", **arrays)
    return {"framework": framework, "backward_restored": not hasattr(torch.Tensor.backward, "__wrapped__")}


def main():
    """Record both models into ``sys.argv[1]`` and write ``mindtorch_result.json`` there."""
    out_dir = Path(sys.argv[1])
    use_mindnlp_masks()
    inputs = np.load(out_dir / "inputs.npz")
    result = {name: run(name, out_dir, inputs) for name in ("bert", "gpt2")}
    (out_dir / "mindtorch_result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
