"""The built-in MindSpore → PyTorch tables, kept as data (``ms_to_pt_api.yaml``, ``cell_classes.yaml``).

The tables are read once per process from the package (they are package data) and validated with
the same strict YAML loading as user files (:mod:`msprobe_cmp.comparator.mapping.files`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from msprobe_cmp.comparator.mapping.files import MS_API_FAMILIES, PT_API_FAMILIES, read_yaml_file
from msprobe_cmp.errors import ConfigError

API_TABLE_FILE = "ms_to_pt_api.yaml"
CELL_TABLE_FILE = "cell_classes.yaml"


@dataclass(frozen=True)
class ArgRef:
    """One argument of one call of a composite: ``<call>.<kind>.<index>`` (``"1.input.1"``).

    Attributes:
        call: the position of the Primitive call in the composite (0 = first).
        kind: ``"input"`` or ``"output"``.
        index: the argument's position (``input_args[index]`` / ``output[index]``).
    """

    call: int
    kind: str
    index: int


@dataclass(frozen=True)
class Composite:
    """Primitive calls that together are one PyTorch call (``MatMul`` + ``BiasAdd`` ≙ ``Functional.linear``).

    Attributes:
        primitives: the Primitive classes, in call order; each call after the first takes the previous
            call's output 0 as its input 0.
        api: the PyTorch API (``"Functional.linear"``).
        inputs: where the PyTorch call's input ``i`` is found among the Primitive calls.
        output: where the PyTorch call's output 0 is found.
    """

    primitives: tuple[str, ...]
    api: str
    inputs: tuple[ArgRef, ...]
    output: ArgRef


@dataclass(frozen=True)
class CellClassMap:
    """A MindSpore Cell class's PyTorch twin.

    Attributes:
        module: the PyTorch Module class name (``"Linear"``).
        parameters: ``(MindSpore parameter name, PyTorch name)`` renames (``("gamma", "weight")``).
    """

    module: str
    parameters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BuiltinTables:
    """The built-in tables.

    Attributes:
        apis: MindSpore ``"<Family>.<name>"`` → PyTorch ``"<Family>.<name>"``.
        primitives: Primitive class → PyTorch API.
        composites: multi-call patterns, tried before ``primitives``.
        cells: MindSpore Cell class → :class:`CellClassMap`.
    """

    apis: dict[str, str]
    primitives: dict[str, str]
    composites: tuple[Composite, ...]
    cells: dict[str, CellClassMap]


def _api(value: Any, families: tuple[str, ...], file: Path, where: str) -> str:
    if not isinstance(value, str) or value.count(".") != 1 or value.split(".")[0] not in families:
        raise ConfigError(f"{file}: {where}: expected '<Family>.<name>' with a family of {', '.join(families)}")
    return value


def _arg_ref(value: Any, n_calls: int, file: Path, where: str) -> ArgRef:
    parts = str(value).split(".")
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in ("input", "output") or not parts[2].isdigit():
        raise ConfigError(f"{file}: {where}: expected '<call>.input.<k>' or '<call>.output.<k>'")
    call = int(parts[0])
    if call >= n_calls:
        raise ConfigError(f"{file}: {where}: call {call} out of range")
    return ArgRef(call, parts[1], int(parts[2]))


def parse_api_tables(doc: Any, file: Path) -> tuple[dict[str, str], dict[str, str], tuple[Composite, ...]]:
    """Validate the built-in API table document (``apis``, ``primitives``, ``composites`` sections).

    Raises:
        ConfigError: a malformed section or entry, naming the file and the entry.
    """
    if not isinstance(doc, dict) or set(doc) != {"apis", "primitives", "composites"}:
        raise ConfigError(f"{file}: expected exactly the sections apis, primitives, composites")
    apis, prims, comps = doc["apis"], doc["primitives"], doc["composites"]
    if not isinstance(apis, dict) or not isinstance(prims, dict) or not isinstance(comps, list):
        raise ConfigError(f"{file}: apis and primitives must be mappings, composites a list")
    out_apis = {_api(k, MS_API_FAMILIES, file, f"apis.{k}"): _api(v, PT_API_FAMILIES, file, f"apis.{k}")
                for k, v in apis.items()}
    out_prims: dict[str, str] = {}
    for k, v in prims.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ConfigError(f"{file}: primitives.{k}: expected a Primitive class name")
        out_prims[k] = _api(v, PT_API_FAMILIES, file, f"primitives.{k}")
    out_comps = []
    for i, c in enumerate(comps):
        where = f"composites[{i}]"
        if not isinstance(c, dict) or set(c) != {"primitives", "api", "inputs", "output"}:
            raise ConfigError(f"{file}: {where}: expected the keys primitives, api, inputs, output")
        classes = c["primitives"]
        if not isinstance(classes, list) or len(classes) < 2 or not all(isinstance(x, str) for x in classes):
            raise ConfigError(f"{file}: {where}.primitives: expected a list of two or more class names")
        if not isinstance(c["inputs"], list):
            raise ConfigError(f"{file}: {where}.inputs: expected a list")
        inputs = tuple(_arg_ref(x, len(classes), file, f"{where}.inputs") for x in c["inputs"])
        output = _arg_ref(c["output"], len(classes), file, f"{where}.output")
        api = _api(c["api"], PT_API_FAMILIES, file, f"{where}.api")
        out_comps.append(Composite(tuple(classes), api, inputs, output))
    return out_apis, out_prims, tuple(out_comps)


def parse_cell_table(doc: Any, file: Path) -> dict[str, CellClassMap]:
    """Validate the built-in Cell-class table document.

    Raises:
        ConfigError: a malformed entry, naming the file and the class.
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"{file}: expected a mapping of MindSpore class to PyTorch class")
    out: dict[str, CellClassMap] = {}
    for k, v in doc.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ConfigError(f"{file}: {k}: expected a class name")
        if isinstance(v, str) and v.isidentifier():
            out[k] = CellClassMap(v)
            continue
        if not isinstance(v, dict) or not set(v) <= {"module", "parameters"} or not isinstance(v.get("module"), str):
            raise ConfigError(f"{file}: {k}: expected a class name or {{module: <class>, parameters: {{...}}}}")
        params = v.get("parameters", {})
        if not isinstance(params, dict) or not all(isinstance(a, str) and isinstance(b, str)
                                                   for a, b in params.items()):
            raise ConfigError(f"{file}: {k}.parameters: expected a mapping of parameter names")
        out[k] = CellClassMap(v["module"], tuple(params.items()))
    return out


def _data_file(name: str) -> Path:
    return Path(str(resources.files("msprobe_cmp.comparator.mapping").joinpath(name)))


@functools.cache
def load_builtin_tables() -> BuiltinTables:
    """The built-in tables, read from the package once per process.

    Raises:
        ConfigError: a package data file is missing or malformed (a broken installation).
    """
    api_file, cell_file = _data_file(API_TABLE_FILE), _data_file(CELL_TABLE_FILE)
    apis, prims, comps = parse_api_tables(read_yaml_file(api_file, "built-in API table"), api_file)
    cells = parse_cell_table(read_yaml_file(cell_file, "built-in cell table"), cell_file)
    return BuiltinTables(apis, prims, comps, cells)
