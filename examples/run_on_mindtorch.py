"""Run ``examples/torch_api_mlp.py`` on mindtorch: ``import mindtorch`` first, then the PyTorch-API module.

    python examples/run_on_mindtorch.py --dump ./dump_mindtorch --steps 2

Takes the same flags as ``torch_api_mlp.py`` (``--mindtorch`` is added).  Needs the mindtorch inside
``mindnlp==0.5.1`` with ``mindspore==2.7.0`` (tools/make-mindtorch-venv.sh builds that environment).
"""

from __future__ import annotations

import sys
from pathlib import Path

import mindtorch  # noqa: F401  (before anything imports torch: `import torch` then resolves to mindtorch)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_api_mlp

if __name__ == "__main__":
    sys.exit(torch_api_mlp.main(["--mindtorch", *sys.argv[1:]]))
