#!/usr/bin/env bash
# The real-model corpus's packages that must be installed without their dependencies (tests/realmodels/):
# - pytorchcv: pure-PyTorch model code (ResNet-18 with nn.ReLU(inplace=True) and BatchNorm2d, as torchvision's);
#   its metadata asks for torchvision, whose registry build for torch 2.13 is a CUDA build that does not import
#   on the CPU torch. The model code needs only torch and numpy.
# - mindcv 0.3.0: MindSpore model code (ResNet-18); its own dependency list would pull another MindSpore. It needs
#   numpy, PyYAML and tqdm, which msprobe-cmp already installs.
# Needs the venv to hold torch and MindSpore already: pip install -e ".[mindspore,torch,test]" first (pip then says
# "pytorchcv 0.0.74 requires torchvision, which is not installed": expected, see above).
# Usage: tools/install-corpus.sh [VENV_DIR]   (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
if ! "$venv/bin/python" -c "import torch, mindspore" 2>/dev/null; then
    echo "tools/install-corpus.sh: $venv lacks torch or mindspore: run $venv/bin/pip install -e \".[mindspore,torch,test]\" first" >&2
    exit 2
fi
"$venv/bin/pip" install -q --no-deps "pytorchcv==0.0.74" "mindcv==0.3.0"
"$venv/bin/python" -c "import pytorchcv.models.resnet, mindcv.models"
echo "real-model corpus packages ready in $venv"
