#!/usr/bin/env bash
# Second test environment: MindSpore 2.7.0 + the mindtorch shipped inside mindnlp 0.5.1 (PyTorch's API on
# MindSpore). mindtorch 0.4.0 from the registry cannot be imported with any MindSpore on the registry, and
# mindnlp's own dependency list would pull a different MindSpore, so mindnlp is installed without its deps.
# Usage: tools/make-mindtorch-venv.sh [VENV_DIR]   (default: .venv-mindtorch beside the checkout's .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-mindtorch}"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "mindspore==2.7.0" "numpy<2" ml-dtypes safetensors tqdm typing_extensions
"$venv/bin/pip" install -q --no-deps "mindnlp==0.5.1"
# Real model code for the mindtorch corpus tests: transformers 4.57.1 runs under this mindtorch (5.x does not
# import there); it needs no torch from the registry (mindtorch provides it).
"$venv/bin/pip" install -q "transformers==4.57.1" "numpy<2"
# msprobe-cmp itself (its dependencies resolve inside numpy<2).
"$venv/bin/pip" install -q -e .
"$venv/bin/python" -c "import mindtorch, torch, mindspore; assert isinstance(torch.tensor(0.), mindspore.Tensor)"
echo "mindtorch environment ready: $venv"
