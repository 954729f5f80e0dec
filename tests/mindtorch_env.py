"""Where the second test environment (MindSpore 2.7.0 + mindtorch from mindnlp 0.5.1) lives.

mindtorch cannot share a venv with MindSpore 2.10 and real torch, so tests that need it run a script in
that environment's interpreter (a subprocess) and check the files it writes from the main test process.
``tools/make-mindtorch-venv.sh`` creates it as ``.venv-mindtorch``; ``.ci/run`` does so before the tests.
``MSPROBE_CMP_MINDTORCH_PYTHON`` points at another interpreter.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mindtorch_python() -> str:
    """The mindtorch environment's Python interpreter.

    Skips the calling test when it does not exist, and fails it instead when ``CI`` is set (CI creates it,
    so its absence there is a defect, not a missing optional tool).
    """
    explicit = os.environ.get("MSPROBE_CMP_MINDTORCH_PYTHON")
    path = Path(explicit) if explicit else ROOT / ".venv-mindtorch" / "bin" / "python"
    if path.exists():
        return str(path)
    message = f"the mindtorch test environment {path} is missing (create it with tools/make-mindtorch-venv.sh)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
