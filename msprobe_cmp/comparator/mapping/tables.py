"""The built-in MindSpore → PyTorch tables, kept as data (``ms_to_pt_api.yaml``, ``cell_classes.yaml``).

The tables are read once per process from the package (they are package data) and validated with
the same strict YAML loading as user files (:mod:`msprobe_cmp.comparator.mapping.files`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
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
class ArgMap:
    """Where a MindSpore API's arguments go in its PyTorch twin (``ms_to_pt_api.yaml``, section ``arguments``).

    Attributes:
        inputs: ``(MindSpore input index, PyTorch input index)`` pairs; an input not listed has no counterpart.
        outputs: the same for outputs (None: outputs keep their positions).
    """

    inputs: tuple[tuple[int, int], ...]
    outputs: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class BuiltinTables:
    """The built-in tables.

    Attributes:
        apis: MindSpore ``"<Family>.<name>"`` → PyTorch ``"<Family>.<name>"``.
        primitives: Primitive class → PyTorch API.
        composites: multi-call patterns, tried before ``primitives``.
        cells: MindSpore Cell class → :class:`CellClassMap`.
        arguments: MindSpore API (``"Functional.cross_entropy"``, ``"Primitive.BatchNorm"``) → :class:`ArgMap`,
            the argument permutation to its PyTorch twin, written from the two frameworks' documented signatures.
        ms_signatures, pt_signatures: API → its parameter names in positional order (MindSpore's and PyTorch's
            documented signatures): a keyword argument ``kwargs.<name>`` is the positional ``input.<k>`` of its
            name, and an API without an ``arguments`` record pairs its arguments by name through them.
        aliases: API → the API it is compared as, on both sides (``Tensor.__iadd__`` → ``Tensor.__add__``: an
            in-place operator computes what its out-of-place twin does).
        plumbing: API (``"Primitive.Shape"``, ``"Tensor.size"``; a Primitive by class) → why its calls have no
            counterpart in the other framework (shape queries, dtype casts one side makes implicitly): such
            rows, when unpaired, are kept but do not count against the matched share.
    """

    apis: dict[str, str]
    primitives: dict[str, str]
    composites: tuple[Composite, ...]
    cells: dict[str, CellClassMap]
    arguments: dict[str, ArgMap] = field(default_factory=dict)
    ms_signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pt_signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    plumbing: dict[str, str] = field(default_factory=dict)

    def plumbing_reason(self, stem: str) -> str | None:
        """Why the API ``stem`` (``"Primitive.shape.Shape"``, ``"Tensor.size"``) is framework plumbing, or None."""
        reason = self.plumbing.get(stem)
        if reason is None and stem.startswith("Primitive."):
            reason = self.plumbing.get(f"Primitive.{stem.rpartition('.')[2]}")
        return reason


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


#: The sections of ``ms_to_pt_api.yaml``.
API_TABLE_SECTIONS = ("apis", "primitives", "composites", "arguments", "ms_signatures", "pt_signatures", "aliases",
                      "plumbing")


def parse_api_tables(doc: Any, file: Path) -> tuple[dict[str, str], dict[str, str], tuple[Composite, ...]]:
    """Validate the ``apis``, ``primitives`` and ``composites`` sections of the built-in API table document
    (the other sections: :func:`parse_argument_tables`).

    Raises:
        ConfigError: a missing or unknown section, a malformed section or entry, naming the file and the entry.
    """
    if not isinstance(doc, dict) or set(doc) != set(API_TABLE_SECTIONS):
        raise ConfigError(f"{file}: expected exactly the sections {', '.join(API_TABLE_SECTIONS)}")
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


def _index_pairs(value: Any, file: Path, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, dict) or not all(
            type(k) is int and type(v) is int and k >= 0 and v >= 0 for k, v in value.items()):
        raise ConfigError(f"{file}: {where}: expected a mapping of argument index to argument index")
    if len(set(value.values())) != len(value):
        raise ConfigError(f"{file}: {where}: a PyTorch index is listed twice")
    return tuple(sorted(value.items()))


def _names(value: Any, file: Path, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x.isidentifier() for x in value):
        raise ConfigError(f"{file}: {where}: expected a list of parameter names")
    if len(set(value)) != len(value):
        raise ConfigError(f"{file}: {where}: a parameter name is listed twice")
    return tuple(value)


def parse_argument_tables(doc: dict[str, Any], file: Path) -> dict[str, Any]:
    """Validate the ``arguments``, ``ms_signatures``, ``pt_signatures``, ``aliases`` and ``plumbing`` sections.

    Returns:
        The keyword arguments of :class:`BuiltinTables` these sections fill.

    Raises:
        ConfigError: a malformed entry, naming the file and the entry.
    """
    out: dict[str, Any] = {}
    for section in API_TABLE_SECTIONS[3:]:
        if not isinstance(doc.get(section), dict):
            raise ConfigError(f"{file}: {section}: expected a mapping")
    arguments: dict[str, ArgMap] = {}
    for k, v in doc["arguments"].items():
        _api(k, MS_API_FAMILIES, file, f"arguments.{k}")
        if not isinstance(v, dict) or not set(v) <= {"inputs", "outputs"} or "inputs" not in v:
            raise ConfigError(f"{file}: arguments.{k}: expected {{inputs: {{...}}, outputs: {{...}}}}")
        outputs = _index_pairs(v["outputs"], file, f"arguments.{k}.outputs") if "outputs" in v else None
        arguments[k] = ArgMap(_index_pairs(v["inputs"], file, f"arguments.{k}.inputs"), outputs)
    out["arguments"] = arguments
    out["ms_signatures"] = {_api(k, MS_API_FAMILIES, file, f"ms_signatures.{k}"): _names(v, file, f"ms_signatures.{k}")
                            for k, v in doc["ms_signatures"].items()}
    out["pt_signatures"] = {_api(k, PT_API_FAMILIES, file, f"pt_signatures.{k}"): _names(v, file, f"pt_signatures.{k}")
                            for k, v in doc["pt_signatures"].items()}
    both = tuple(dict.fromkeys(MS_API_FAMILIES + PT_API_FAMILIES))
    out["aliases"] = {_api(k, both, file, f"aliases.{k}"): _api(v, both, file, f"aliases.{k}")
                      for k, v in doc["aliases"].items()}
    plumbing: dict[str, str] = {}
    for k, v in doc["plumbing"].items():
        _api(k, both, file, f"plumbing.{k}")
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{file}: plumbing.{k}: expected the reason, a sentence")
        plumbing[k] = v
    out["plumbing"] = plumbing
    return out


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
    doc = read_yaml_file(api_file, "built-in API table")
    apis, prims, comps = parse_api_tables(doc, api_file)
    cells = parse_cell_table(read_yaml_file(cell_file, "built-in cell table"), cell_file)
    return BuiltinTables(apis, prims, comps, cells, **parse_argument_tables(doc, api_file))
