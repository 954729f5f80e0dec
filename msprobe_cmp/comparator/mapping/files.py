"""Load user mapping files: a cell mapping and an API mapping, in msprobe's YAML formats.

Both loaders treat the file as hostile input (a CI job may compare dumps and mapping files it did not
write): the file is read only when it is at most :data:`MAX_MAPPING_FILE_BYTES`; YAML aliases are
refused (no "billion laughs" expansion), duplicate keys are errors instead of a silent last-wins, and
every wrong type or unknown key is a one-line :class:`~msprobe_cmp.errors.ConfigError` naming the file
and the field.  ``yaml.safe_load`` semantics otherwise (no Python objects).

**Cell mapping** (msprobe's ``-cm`` file, ``tests/data/msprobe-1.2.2-mindspore/cell_mapping_ms_to_torch.yaml``)::

    blocks.0.Dense: blocks.0.Linear     # "<cell path>.<MindSpore class>": "<module path>.<PyTorch class>"
    head.Dense: head.Linear
    Dense: Linear                       # a bare class name maps the class wherever it appears

A leading ``Cell.`` / ``Module.`` on either side is accepted and ignored.

**API mapping** (msprobe's ``-am`` file): a list of records (a single record without the list, the form
msprobe's documentation shows, is accepted too)::

    - ms_api: Functional.conv2d          # "<Family>.<name>", MindSpore families
      pt_api: Functional.conv2d          # PyTorch families (Torch, Functional, Tensor, Distributed, ...)
      ms_args: [0, 1]                    # optional: MindSpore input i  <->  PyTorch input pt_args[k]
      pt_args: [0, 1]
      ms_output: [0]                     # optional ("ms_outputs" accepted): outputs likewise
      pt_output: [0]

Where msprobe 1.2.2 crashes or guesses (docs/design.md §3) this loader is stricter and clearer: the
documented single-record form and the ``ms_outputs`` spelling are accepted; argument indices are
integers compared as integers (msprobe matches them as string prefixes, so ``1`` also takes ``10``);
``ms_args`` without ``pt_args`` (or lists of different lengths) is an error, not a silent misalignment.

**Fused records** (msprobe-cmp's own kind, in the same list): one cell/module call of one side compared with the
concatenation of several calls of the other (a fused QKV projection against separate ``q_proj`` / ``k_proj`` /
``v_proj``; docs/mapping.md, "One call against several")::

    - fused: Module.model.layers.{i}.self_attn.qkv_proj.Linear      # "<Module|Cell>.<path>.<Class>"
      parts: [Module.model.layers.{i}.self_attn.q_proj.Linear,     # at least two, in concatenation order
              Module.model.layers.{i}.self_attn.k_proj.Linear,
              Module.model.layers.{i}.self_attn.v_proj.Linear]
      dim: -1               # optional (default -1): outputs and their gradients concatenate along it
      parameters_dim: 0     # optional (default 0): parameters and their gradients concatenate along it

A ``{name}`` placeholder stands for one name component (a layer index) and must appear in ``fused`` and in every
part.  :func:`parse_api_mapping` returns them in :attr:`ApiMappingRecords.fused`.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from msprobe_cmp.errors import ConfigError

#: Largest mapping file read, in bytes (1 MiB: a mapping for the largest models is a few hundred KiB).
MAX_MAPPING_FILE_BYTES = 1 << 20

#: API families of MindSpore entry names (docs/design.md §1) accepted as ``ms_api``.
MS_API_FAMILIES = ("Functional", "Tensor", "Mint", "MintFunctional", "Distributed", "Primitive", "Jit")
#: API families of PyTorch / mindtorch entry names accepted as ``pt_api``.
PT_API_FAMILIES = ("Torch", "Functional", "Tensor", "Distributed", "NPU", "Aten", "VF")

_API_KEYS = (
    "ms_api", "pt_api", "ms_args", "pt_args", "ms_output", "pt_output", "ms_outputs", "pt_outputs",
    "ms_parameters", "pt_parameters", "ms_parameters_grad", "pt_parameters_grad",
)


@dataclass(frozen=True)
class ApiMappingRecord:
    """One MindSpore API ↔ PyTorch API pairing (from a user file or the built-in tables).

    Attributes:
        ms_api: the MindSpore API as ``"<Family>.<name>"`` (``"Functional.conv2d"``); for a Primitive
            ``"Primitive.<Class>"`` (any attribute) or ``"Primitive.<attr>.<Class>"``.
        pt_api: the PyTorch API (``"Functional.conv2d"``, ``"Torch.add"``).
        args: ``(MindSpore input index, PyTorch input index)`` pairs, or None for "same positions";
            inputs left out of a given list have no counterpart.
        outputs: the same for outputs.
        parameters: ``(MindSpore name, PyTorch name)`` pairs for ``parameters.<name>`` rows (msprobe's
            ``ms_parameters`` / ``pt_parameters``), or None.
        source: where the record comes from (``"user API mapping <file>, record 3"``), for reports.
    """

    ms_api: str
    pt_api: str
    args: tuple[tuple[int, int], ...] | None = None
    outputs: tuple[tuple[int, int], ...] | None = None
    parameters: tuple[tuple[str, str], ...] | None = None
    source: str = ""


@dataclass(frozen=True)
class FusedRecord:
    """One fused call against the concatenation of several calls (a ``fused`` record of an API-mapping file).

    Attributes:
        fused: the fused cell/module without direction or call index, ``"<Module|Cell>.<path>.<Class>"``
            (``"Module.model.layers.{i}.self_attn.qkv_proj.Linear"``); ``{name}`` placeholders stand for one
            name component each.
        parts: the separate cells/modules, in concatenation order (at least two), with the same placeholders.
        dim: the dimension outputs and output gradients concatenate along (negative counts from the end).
        parameters_dim: the dimension parameters and parameter gradients concatenate along.
        source: where the record comes from (``"user API mapping apis.yaml, record 3"``), for reports.
    """

    fused: str
    parts: tuple[str, ...]
    dim: int = -1
    parameters_dim: int = 0
    source: str = ""


class ApiMappingRecords(tuple[ApiMappingRecord, ...]):
    """The API records of a mapping file (a plain tuple of :class:`ApiMappingRecord`, what every consumer of
    :attr:`~msprobe_cmp.comparator.mapping.NameMapping.apis` iterates) carrying the file's fused records in
    :attr:`fused` (:mod:`msprobe_cmp.comparator.fused` reads them)."""

    fused: tuple[FusedRecord, ...]

    def __new__(
        cls, records: tuple[ApiMappingRecord, ...] = (), fused: tuple[FusedRecord, ...] = ()
    ) -> ApiMappingRecords:
        obj = super().__new__(cls, records)
        obj.fused = tuple(fused)
        return obj

    def __getnewargs__(self) -> tuple[tuple[ApiMappingRecord, ...], tuple[FusedRecord, ...]]:
        return (tuple(self), self.fused)


class StrictYamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and duplicate mapping keys (the mapping and rules files' loader)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        """The next node; an alias is an error (no "billion laughs" expansion)."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping; a key given twice is an error (not a silent last-wins)."""
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value[:60]!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _brief(value: Any) -> str:
    if isinstance(value, (dict, list, tuple, set)):
        return f"a {type(value).__name__}"
    if value is None:
        return "nothing (null)"
    text = str(value)
    shown = repr(text[:40] + "...") if len(text) > 40 else repr(value)
    return f"{type(value).__name__} {shown}"


def read_bounded(path: str | Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path``, without hanging on a named pipe that nobody writes to.

    The file is opened non-blocking (so ``open`` of a writer-less FIFO returns at once; it then reads as empty)
    and read blocking (so ``<(command)`` process substitution still delivers its output).

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit + 1)
    finally:
        os.close(fd)


def read_yaml_file(path: str | Path, what: str) -> Any:
    """Parse a small YAML file defensively (module docstring).

    Args:
        path: the file.
        what: what the file is, for messages (``"cell mapping"``).

    Returns:
        The parsed document (plain dicts, lists, strings, numbers), None for an empty file.

    Raises:
        ConfigError: unreadable, larger than :data:`MAX_MAPPING_FILE_BYTES`, not UTF-8, invalid YAML,
            an alias, a duplicate key or absurd nesting; one line naming the file (and line).
    """
    file = Path(path)
    try:
        data = read_bounded(file, MAX_MAPPING_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the {what} file: {exc.strerror or exc}") from None
    if len(data) > MAX_MAPPING_FILE_BYTES:
        raise ConfigError(f"{file}: {what} file larger than {MAX_MAPPING_FILE_BYTES // 1024} KiB: refused")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: {what} file is not UTF-8") from None
    try:
        return yaml.load(text, Loader=StrictYamlLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = " ".join(str(exc.problem or exc).split())[:160]
        raise ConfigError(f"{file}: {where}invalid {what} YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: invalid {what} YAML: {' '.join(str(exc).split())[:160]}") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{file}: unreadable {what} file: {type(exc).__name__}") from None


def _strip_cell_prefix(text: str) -> str:
    for prefix in ("Cell.", "Module."):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _check_dotted(value: Any, file: Path, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{file}: {where}: expected a string, got {_brief(value)}")
    text = value.strip()
    if not text or any(not part for part in text.split(".")) or any(ch.isspace() for ch in text):
        raise ConfigError(f"{file}: {where}: expected dot-separated names without spaces, got {_brief(value)}")
    return text


def parse_cell_mapping(doc: Any, file: Path) -> dict[str, str]:
    """Validate a parsed cell-mapping document (module docstring).

    Returns:
        ``{"<path>.<MindSpore class>" or "<MindSpore class>": "<path>.<PyTorch class>" or "<class>"}``,
        prefixes ``Cell.`` / ``Module.`` removed.

    Raises:
        ConfigError: not a mapping, empty, a non-string key or value, an empty name part.
    """
    if doc is None:
        raise ConfigError(f"{file}: cell mapping file is empty (expected 'blocks.0.Dense: blocks.0.Linear' lines)")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{file}: cell mapping: expected a mapping '<cell path>.<Class>: <module path>.<Class>', got {_brief(doc)}"
        )
    out: dict[str, str] = {}
    for key, value in doc.items():
        k = _strip_cell_prefix(_check_dotted(key, file, f"key {_brief(key)}"))
        v = _strip_cell_prefix(_check_dotted(value, file, str(key)[:60]))
        if k in out:
            raise ConfigError(f"{file}: {str(key)[:60]}: mapped twice (with and without a Cell./Module. prefix)")
        out[k] = v
    return out


def load_cell_mapping(path: str | Path) -> dict[str, str]:
    """Read a cell-mapping file (msprobe's ``-cm`` format, module docstring).

    Raises:
        ConfigError: see :func:`read_yaml_file` and :func:`parse_cell_mapping`.
    """
    file = Path(path)
    return parse_cell_mapping(read_yaml_file(file, "cell mapping"), file)


def _check_api(value: Any, families: tuple[str, ...], file: Path, where: str) -> str:
    text = _check_dotted(value, file, where)
    parts = text.split(".")
    if len(parts) < 2:
        raise ConfigError(f"{file}: {where}: expected '<Family>.<name>', got {_brief(value)}")
    if parts[0] not in families:
        raise ConfigError(
            f"{file}: {where}: unknown API family {parts[0][:40]!r} in {text[:80]!r} (known: {', '.join(families)})"
        )
    last = parts[-1]
    if last in ("forward", "backward") or (last.isdigit() and len(parts) > 2):
        raise ConfigError(f"{file}: {where}: give the API without call index or direction, got {text[:80]!r}")
    if parts[0] != "Primitive" and len(parts) > 2:
        raise ConfigError(f"{file}: {where}: unknown API {text[:80]!r}: expected '{parts[0]}.<name>' (one dot)")
    if len(parts) > 3:
        raise ConfigError(f"{file}: {where}: unknown API {text[:80]!r}: expected 'Primitive.[<attr>.]<Class>'")
    return text


def _index_list(value: Any, file: Path, where: str) -> list[int]:
    if not isinstance(value, list):
        raise ConfigError(f"{file}: {where}: expected a list of argument indices, got {_brief(value)}")
    out: list[int] = []
    for k, item in enumerate(value):
        if isinstance(item, str) and item.strip().isdigit() and item.strip().isascii():
            item = int(item.strip())
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 10_000:
            raise ConfigError(f"{file}: {where}[{k}]: expected an index from 0 to 9999, got {_brief(item)}")
        if item in out:
            raise ConfigError(f"{file}: {where}[{k}]: index {item} listed twice")
        out.append(item)
    return out


def _name_list(value: Any, file: Path, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{file}: {where}: expected a list of parameter names, got {_brief(value)}")
    out = []
    for k, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{file}: {where}[{k}]: expected a parameter name, got {_brief(item)}")
        out.append(item.strip())
    return out


def _paired(rec: dict[str, Any], ms_keys: tuple[str, ...], pt_keys: tuple[str, ...], file: Path, where: str,
            names: bool = False) -> tuple[tuple[Any, Any], ...] | None:
    ms_key = next((k for k in ms_keys if k in rec), None)
    pt_key = next((k for k in pt_keys if k in rec), None)
    if ms_key is None and pt_key is None:
        return None
    if ms_key is None or pt_key is None:
        given, missing = (ms_key, pt_keys[0]) if pt_key is None else (pt_key, ms_keys[0])
        raise ConfigError(f"{file}: {where}.{missing}: missing ({given} is given; they pair element by element)")
    conv = _name_list if names else _index_list
    ms_list = conv(rec[ms_key], file, f"{where}.{ms_key}")
    pt_list = conv(rec[pt_key], file, f"{where}.{pt_key}")
    if len(ms_list) != len(pt_list):
        raise ConfigError(
            f"{file}: {where}.{pt_key}: {len(pt_list)} item(s), but {ms_key} has {len(ms_list)}: they pair element "
            "by element"
        )
    if not names and len(set(pt_list)) != len(pt_list):
        raise ConfigError(f"{file}: {where}.{pt_key}: an index is listed twice")
    return tuple(zip(ms_list, pt_list, strict=True))


_FUSED_KEYS = ("fused", "parts", "dim", "parameters_dim")
#: A ``{name}`` placeholder of a fused record: one name component (docs/mapping.md).
PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Most parts one fused record may list, and the largest |dim| accepted.
MAX_FUSED_PARTS = 64
_MAX_DIM = 32


def _check_cell_name(value: Any, file: Path, where: str) -> tuple[str, frozenset[str]]:
    """A fused record's cell/module name and its placeholders, or a one-line ConfigError."""
    text = _check_dotted(value, file, where)
    tokens = text.split(".")
    if tokens[0] not in ("Module", "Cell"):
        raise ConfigError(
            f"{file}: {where}: expected 'Module.<path>.<Class>' or 'Cell.<path>.<Class>', got {text[:80]!r}")
    if len(tokens) < 3:
        raise ConfigError(
            f"{file}: {where}: expected '{tokens[0]}.<path>.<Class>' (a path and a class), got {text[:80]!r}")
    last = tokens[-1]
    if last in ("forward", "backward", "parameters_grad") or last.isdigit() or tokens[-2] in ("forward", "backward"):
        raise ConfigError(f"{file}: {where}: give the cell without direction or call index, got {text[:80]!r}")
    names: set[str] = set()
    for token in tokens:
        if "{" in token or "}" in token:
            match = PLACEHOLDER_RE.fullmatch(token)
            if match is None:
                raise ConfigError(
                    f"{file}: {where}: a placeholder must be a whole name component such as '{{i}}', got {token[:40]!r}"
                )
            names.add(match.group(1))
    return text, frozenset(names)


def _check_dim(rec: dict[str, Any], key: str, default: int, file: Path, where: str) -> int:
    value = rec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not -_MAX_DIM <= value < _MAX_DIM:
        raise ConfigError(f"{file}: {where}.{key}: expected an integer from {-_MAX_DIM} to {_MAX_DIM - 1}, got "
                          f"{_brief(value)}")
    return value


def parse_fused_record(rec: dict[str, Any], file: Path, where: str) -> FusedRecord:
    """Validate one ``fused`` record (module docstring).

    Raises:
        ConfigError: an unknown key; ``fused`` or a part that is not ``<Module|Cell>.<path>.<Class>`` (a direction
            or call index given, a malformed ``{placeholder}``); ``parts`` not a list of 2 to
            :data:`MAX_FUSED_PARTS` distinct names; a part equal to ``fused``; placeholders that differ between
            ``fused`` and a part; ``dim`` / ``parameters_dim`` not an integer in [-32, 31].
    """
    for key in rec:
        if key not in _FUSED_KEYS:
            raise ConfigError(f"{file}: {where}.{str(key)[:60]}: unknown key in a fused record (known: "
                              f"{', '.join(_FUSED_KEYS)})")
    if "parts" not in rec:
        raise ConfigError(f"{file}: {where}.parts: missing (the cells whose concatenation the fused one computes)")
    fused, names = _check_cell_name(rec["fused"], file, f"{where}.fused")
    parts_doc = rec["parts"]
    if not isinstance(parts_doc, list):
        raise ConfigError(f"{file}: {where}.parts: expected a list of cell names, got {_brief(parts_doc)}")
    if not 2 <= len(parts_doc) <= MAX_FUSED_PARTS:
        raise ConfigError(f"{file}: {where}.parts: expected 2 to {MAX_FUSED_PARTS} cells, got {len(parts_doc)}")
    parts: list[str] = []
    for k, item in enumerate(parts_doc):
        part, part_names = _check_cell_name(item, file, f"{where}.parts[{k}]")
        if part == fused:
            raise ConfigError(f"{file}: {where}.parts[{k}]: {part[:80]!r} is the fused cell itself")
        if part in parts:
            raise ConfigError(f"{file}: {where}.parts[{k}]: {part[:80]!r} listed twice")
        if part_names != names:
            shown = ", ".join("{" + n + "}" for n in sorted(names ^ part_names))
            raise ConfigError(f"{file}: {where}.parts[{k}]: placeholder {shown} not in both fused and this part "
                              "(each placeholder must appear in fused and in every part)")
        parts.append(part)
    dim = _check_dim(rec, "dim", -1, file, where)
    parameters_dim = _check_dim(rec, "parameters_dim", 0, file, where)
    return FusedRecord(fused, tuple(parts), dim, parameters_dim, f"user API mapping {file.name}, {where}")


def parse_api_mapping(doc: Any, file: Path) -> ApiMappingRecords:
    """Validate a parsed API-mapping document (module docstring).

    Returns:
        The ``ms_api``/``pt_api`` records, in file order, as an :class:`ApiMappingRecords` tuple whose ``fused``
        attribute holds the ``fused`` records (:func:`parse_fused_record`).

    Raises:
        ConfigError: empty, not a list of records, a record that is not a mapping, a missing
            ``ms_api``/``pt_api``, an unknown key or API family, a malformed index list, or the same
            ``ms_api`` mapped twice; a malformed fused record, or a cell named by two fused records; one line
            naming the file and the record.
    """
    if doc is None:
        raise ConfigError(f"{file}: API mapping file is empty (expected a list of ms_api/pt_api records)")
    records = [doc] if isinstance(doc, dict) else doc
    if not isinstance(records, list) or not records:
        raise ConfigError(f"{file}: API mapping: expected a list of records with ms_api and pt_api, got {_brief(doc)}")
    out: list[ApiMappingRecord] = []
    fused: list[FusedRecord] = []
    cells_used: dict[str, int] = {}
    seen: dict[str, int] = {}
    for i, rec in enumerate(records):
        where = f"record {i}"
        if not isinstance(rec, dict):
            raise ConfigError(f"{file}: {where}: expected a mapping with ms_api and pt_api, got {_brief(rec)}")
        if "fused" in rec:
            record = parse_fused_record(rec, file, where)
            for k, cell in enumerate((record.fused, *record.parts)):
                field = "fused" if k == 0 else f"parts[{k - 1}]"
                if cell in cells_used:
                    raise ConfigError(f"{file}: {where}.{field}: {cell[:80]!r} is already used by fused record "
                                      f"{cells_used[cell]}")
                cells_used[cell] = i
            fused.append(record)
            continue
        for key in rec:
            if key not in _API_KEYS:
                raise ConfigError(f"{file}: {where}.{str(key)[:60]}: unknown key (known: {', '.join(_API_KEYS)})")
        for key in ("ms_api", "pt_api"):
            if key not in rec:
                raise ConfigError(f"{file}: {where}.{key}: missing")
        ms_api = _check_api(rec["ms_api"], MS_API_FAMILIES, file, f"{where}.ms_api")
        pt_api = _check_api(rec["pt_api"], PT_API_FAMILIES, file, f"{where}.pt_api")
        if pt_api.startswith("Primitive."):
            raise ConfigError(f"{file}: {where}.pt_api: PyTorch has no Primitive entries")
        if ms_api in seen:
            raise ConfigError(f"{file}: {where}.ms_api: {ms_api!r} is already mapped by record {seen[ms_api]}")
        seen[ms_api] = i
        args = _paired(rec, ("ms_args",), ("pt_args",), file, where)
        outputs = _paired(rec, ("ms_output", "ms_outputs"), ("pt_output", "pt_outputs"), file, where)
        params = _paired(rec, ("ms_parameters", "ms_parameters_grad"), ("pt_parameters", "pt_parameters_grad"),
                         file, where, names=True)
        out.append(ApiMappingRecord(ms_api, pt_api, args, outputs, params, f"user API mapping {file.name}, {where}"))
    return ApiMappingRecords(tuple(out), tuple(fused))


def load_api_mapping(path: str | Path) -> ApiMappingRecords:
    """Read an API-mapping file (msprobe's ``-am`` format, module docstring).

    Returns:
        The records (:func:`parse_api_mapping`): a tuple of :class:`ApiMappingRecord` whose ``fused`` attribute
        holds the :class:`FusedRecord` ones.

    Raises:
        ConfigError: see :func:`read_yaml_file` and :func:`parse_api_mapping`.
    """
    file = Path(path)
    return parse_api_mapping(read_yaml_file(file, "API mapping"), file)
