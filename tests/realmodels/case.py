"""What every corpus builder returns (PyTorch, mindtorch and MindSpore alike)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The seed of every corpus model's weights (its batch uses SEED + 1).
SEED = 1234


@dataclass
class Case:
    """One corpus model: ``loss_of(model, batch)`` gives a scalar loss tensor."""

    name: str
    model: Any
    batch: dict[str, Any]
    loss_of: Callable[[Any, dict[str, Any]], Any]
