"""Entry-name grammar of the msprobe dump format.

Names are the join keys between two dumps, so they follow msprobe exactly
(see docs/design.md §1 and msprobe's MindSpore/PyTorch dumps):

* API entries: ``<Family>.<api>.<n>.<forward|backward>`` — ``Functional.relu.0.forward``,
  ``Tensor.__add__.3.backward``, ``Primitive.matmul.MatMul.0.forward``, ``Jit.net.0.forward``.
  The call index comes *before* the direction.
* Cell / Module entries: ``<Cell|Module>.<path>.<Class>.<forward|backward>.<n>`` —
  ``Cell.fc1.Dense.forward.0``; with a list of models the list index follows the prefix
  (``Cell.1.fc1.Dense.forward.0``).  The call index comes *after* the direction.
* Parameter gradients: ``<Cell|Module>.<path>.<Class>.parameters_grad`` (msprobe 1.x) or
  ``...parameters_grad.<k>`` (msprobe 26.x).
* Anything else (``debug.json``'s ``loss.0``) parses as kind ``"other"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DIRECTIONS = ("forward", "backward")
CELL_PREFIXES = ("Cell", "Module")
#: Family prefixes of API entries (MindSpore and torch/mindtorch); informative, parsing accepts any.
API_PREFIXES = (
    "Functional",
    "Tensor",
    "Mint",
    "MintFunctional",
    "Distributed",
    "Primitive",
    "Jit",
    "Torch",
    "NPU",
    "Aten",
    "VF",
)

NameKind = Literal["api", "cell", "parameters_grad", "other"]


@dataclass(frozen=True)
class ParsedName:
    """The parts of an entry name.

    Attributes:
        name: the full name as given.
        kind: ``"api"``, ``"cell"``, ``"parameters_grad"`` or ``"other"``.
        prefix: the first dot-separated token (``"Functional"``, ``"Primitive"``, ``"Cell"``, ...).
        op: the name between the prefix and the index/direction: the API (``"relu"``,
            ``"matmul.MatMul"`` for a Primitive) or the cell path and class (``"blocks.0.Dense"``).
        index: the call index ``n`` (for 26.x parameters_grad, the hook-call index ``k``), or None.
        direction: ``"forward"``, ``"backward"`` or None.
        stem: the name without index and direction (``"Functional.relu"``, ``"Cell.fc1.Dense"``).
    """

    name: str
    kind: NameKind
    prefix: str
    op: str
    index: int | None
    direction: str | None
    stem: str

    def twin(self, direction: str) -> str | None:
        """The name of the same call in the other ``direction`` (``"forward"`` / ``"backward"``), or None when this is
        not an API or cell entry of the other direction with a call index.

        ``"Cell.fc1.Dense.forward.0"`` → ``"Cell.fc1.Dense.backward.0"``; ``"Functional.relu.2.backward"`` →
        ``"Functional.relu.2.forward"``.
        """
        if self.direction is None or self.direction == direction or self.index is None:
            return None
        if self.kind == "cell":
            return f"{self.stem}.{direction}.{self.index}"
        if self.kind == "api":
            return f"{self.stem}.{self.index}.{direction}"
        return None

    @property
    def cell_path(self) -> str | None:
        """For cell and parameters_grad names: the cell path (``"blocks.0"``), else None."""
        if self.kind not in ("cell", "parameters_grad"):
            return None
        path, _, _cls = self.op.rpartition(".")
        return path

    @property
    def cell_class(self) -> str | None:
        """For cell and parameters_grad names: the cell class (``"Dense"``), else None."""
        if self.kind not in ("cell", "parameters_grad"):
            return None
        return self.op.rpartition(".")[2]


def _is_index(token: str) -> bool:
    return token.isdigit() and token.isascii()


def parse_name(name: str) -> ParsedName:
    """Split an entry name into its parts; never raises (unknown shapes are kind ``"other"``).

    Examples:
        ``parse_name("Primitive.matmul.MatMul.0.forward")`` → kind ``"api"``, prefix ``"Primitive"``,
        op ``"matmul.MatMul"``, index 0, direction ``"forward"``.
        ``parse_name("Cell.blocks.0.Dense.backward.1")`` → kind ``"cell"``, op ``"blocks.0.Dense"``, index 1.
    """
    tokens = name.split(".")
    prefix = tokens[0]
    if len(tokens) >= 3 and prefix in CELL_PREFIXES:
        if tokens[-1] == "parameters_grad" and len(tokens) >= 3:
            op = ".".join(tokens[1:-1])
            return ParsedName(name, "parameters_grad", prefix, op, None, None, ".".join(tokens[:-1]))
        if tokens[-2] == "parameters_grad" and _is_index(tokens[-1]) and len(tokens) >= 4:
            op = ".".join(tokens[1:-2])
            return ParsedName(name, "parameters_grad", prefix, op, int(tokens[-1]), None, ".".join(tokens[:-2]))
        if len(tokens) >= 4 and tokens[-2] in DIRECTIONS and _is_index(tokens[-1]):
            op = ".".join(tokens[1:-2])
            return ParsedName(name, "cell", prefix, op, int(tokens[-1]), tokens[-2], ".".join(tokens[:-2]))
    if len(tokens) >= 4 and tokens[-1] in DIRECTIONS and _is_index(tokens[-2]):
        op = ".".join(tokens[1:-2])
        return ParsedName(name, "api", prefix, op, int(tokens[-2]), tokens[-1], ".".join(tokens[:-2]))
    return ParsedName(name, "other", prefix, ".".join(tokens[1:]), None, None, name)


def _check_part(value: str, what: str) -> None:
    if not value:
        raise ValueError(f"{what} must not be empty")


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'forward' or 'backward', got {direction!r}")


def _check_index(index: int) -> None:
    if index < 0:
        raise ValueError(f"call index must be >= 0, got {index}")


def api_name(family: str, api: str, index: int, direction: str) -> str:
    """Name of an API call entry: ``api_name("Functional", "relu", 0, "forward")`` → ``"Functional.relu.0.forward"``.

    Args:
        family: the family prefix (``"Functional"``, ``"Tensor"``, ``"Mint"``, ``"Primitive"``, ...).
        api: the API name; for a Primitive, ``"<attribute>.<Class>"`` (``"matmul.MatMul"``).
        index: the call index within the step, from 0; a backward entry carries its forward's index.
        direction: ``"forward"`` or ``"backward"``.

    Raises:
        ValueError: on an empty part, a negative index or an unknown direction.
    """
    _check_part(family, "family")
    _check_part(api, "api")
    _check_index(index)
    _check_direction(direction)
    return f"{family}.{api}.{index}.{direction}"


def _cell_stem(path: str, cls: str, prefix: str, model_index: int | None) -> str:
    _check_part(cls, "cell class")
    if prefix not in CELL_PREFIXES:
        raise ValueError(f"cell prefix must be one of {CELL_PREFIXES}, got {prefix!r}")
    parts = [prefix]
    if model_index is not None:
        parts.append(str(model_index))
    if path:
        parts.append(path)
    parts.append(cls)
    return ".".join(parts)


def cell_name(
    path: str, cls: str, direction: str, index: int, *, prefix: str = "Cell", model_index: int | None = None
) -> str:
    """Name of a cell (module) call entry: ``cell_name("fc1", "Dense", "forward", 0)`` → ``"Cell.fc1.Dense.forward.0"``.

    Args:
        path: the cell's path from ``cells_and_names()`` / ``named_modules()`` (``"blocks.0"``).
        cls: the cell's class name (``"Dense"``).
        direction: ``"forward"`` or ``"backward"``.
        index: the call index of this cell within the step, from 0.
        prefix: ``"Cell"`` (MindSpore) or ``"Module"`` (PyTorch, mindtorch).
        model_index: the model's position when ``start()`` got a list of models, else None.

    Raises:
        ValueError: on an empty class, an unknown prefix or direction, or a negative index.
    """
    _check_direction(direction)
    _check_index(index)
    return f"{_cell_stem(path, cls, prefix, model_index)}.{direction}.{index}"


def parameters_grad_name(path: str, cls: str, *, prefix: str = "Cell", model_index: int | None = None) -> str:
    """Name of a cell's parameter-gradient entry: ``"Cell.fc1.Dense.parameters_grad"`` (msprobe 1.x form)."""
    return f"{_cell_stem(path, cls, prefix, model_index)}.parameters_grad"


def tensor_file_name(entry_name: str, arg_path: str) -> str:
    """File name of a saved tensor in ``dump_tensor_data/``: ``"<entry>.<arg path>.npy"``.

    ``tensor_file_name("Functional.relu.0.forward", "output.0")`` → ``"Functional.relu.0.forward.output.0.npy"``,
    as msprobe names them.

    Raises:
        ValueError: when the result would contain a path separator or start with a dot.
    """
    name = f"{entry_name}.{arg_path}.npy"
    if "/" in name or "\\" in name or name.startswith(".") or "\x00" in name:
        raise ValueError(f"tensor file name {name!r} is not a plain file name")
    return name
