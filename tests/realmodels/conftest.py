"""The real-model corpus needs packages the ``test`` extra and tools/install-corpus.sh install.  Without them these
tests skip, except under CI (env var ``CI`` set), where a missing package is a failure: .ci/run installs them."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def need(module: str) -> Any:
    """Import ``module`` or skip (fail under CI) naming how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"the real-model corpus needs {module} (pip install -e '.[test]' and tools/install-corpus.sh): {exc}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
