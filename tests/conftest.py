"""Shared test helpers: paths of the msprobe fixtures copied into the project (tests/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
MSPROBE_FIXTURES = DATA / "msprobe-1.2.2-mindspore"


@pytest.fixture
def msprobe_fixtures() -> Path:
    """The real msprobe 1.2.2 dumps (see tests/data/msprobe-1.2.2-mindspore/FIXTURES_README.md)."""
    return MSPROBE_FIXTURES
