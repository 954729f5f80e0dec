"""Record one training step of a small transformers BERT with msprobe 1.2.2's PyTorch PrecisionDebugger.

Run in a side environment that holds mindstudio-probe 1.2.2 (README.md beside this file says how it was made):

    /tmp/msprobe-venv/bin/python tests/data/msprobe-1.2.2-pytorch/record_bert.py OUT_DIR

It writes msprobe's dump under ``OUT_DIR/dump/step0/rank/`` and copies its dump.json, stack.json and
construct.json next to this script (the repository's absolute paths in stack.json shortened, see
:func:`shorten_paths`).  :func:`build` and :func:`train_step` are also what
tests/integration/test_msprobe_pytorch_interop.py runs under msprobe-cmp's recorder, so both recordings are of
the same run: same model, weights, batch, dropout draws and optimiser.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

#: The model's weights are drawn from this seed, the batch from SEED + 1, dropout from DROPOUT_SEED
#: (tests/realmodels: case.py's SEED, torch_corpus.py's BERT configuration and batch, test_torch_corpus.py's
#: dropout seed and optimiser).
SEED = 1234
DROPOUT_SEED = 7
BERT_CONFIG = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=32, type_vocab_size=2)
HERE = Path(__file__).resolve().parent
FILES = ("dump.json", "stack.json", "construct.json")


def build(torch: Any) -> tuple[Any, dict[str, Any], Any]:
    """The model (BertForMaskedLM, random weights from :data:`SEED`, training mode), its batch and an SGD
    optimiser; the global RNG is left seeded with :data:`DROPOUT_SEED` for the dropout draws."""
    import transformers

    torch.manual_seed(SEED)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**BERT_CONFIG)).train()
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, BERT_CONFIG["vocab_size"], (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, -2:] = 0  # padding in the second sequence: the attention mask matters
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(DROPOUT_SEED)
    return model, batch, opt


def train_step(model: Any, batch: dict[str, Any], opt: Any, debugger: Any) -> Any:
    """One recorded optimiser step: start before the forward, stop after the backward, step after the optimiser."""
    opt.zero_grad()
    debugger.start(model)
    loss = model(**batch).loss
    loss.backward()
    debugger.stop()
    opt.step()
    debugger.step()
    return loss


def shorten_paths(text: str, prefixes: dict[str, str]) -> str:
    """``text`` with each machine-specific path prefix replaced by a neutral one (stack.json's frames)."""
    for old, new in prefixes.items():
        text = text.replace(old, new)
    return text


def main(out_dir: str) -> None:
    """Record the step with msprobe and copy the three files beside this script.

    The model is built before the debugger: msprobe 1.2.2 wraps torch's APIs (aten ops included) when the debugger
    is constructed, and with its wrappers in place ``nn.Embedding``'s initialisation fails (an in-place fill of a
    view made under no_grad) and transformers' lazy imports (torch._dynamo, torch.distributed.tensor) break.  So
    neither recorder sees ``Functional.gelu``: transformers' GELUActivation stored the function at construction.
    """
    import torch
    from msprobe.pytorch import PrecisionDebugger

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = {"task": "statistics", "dump_path": str(out / "dump"), "rank": [], "step": [0], "level": "mix",
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    model, batch, opt = build(torch)
    debugger = PrecisionDebugger(config_path=str(out / "config.json"))
    loss = train_step(model, batch, opt, debugger)
    print(f"loss {loss.item()!r}")
    rank_dir = out / "dump" / "step0" / "rank"
    site = str(Path(torch.__file__).resolve().parent.parent)
    prefixes = {site: "/home/user/venv/site-packages", str(HERE.parent.parent.parent): "/home/user/msprobe-cmp"}
    for name in FILES:
        text = (rank_dir / name).read_text()
        (HERE / name).write_text(shorten_paths(text, prefixes) if name == "stack.json" else text)
    shutil.copy(out / "config.json", HERE / "config.json")


if __name__ == "__main__":
    main(sys.argv[1])
