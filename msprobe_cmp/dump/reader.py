"""Read msprobe dumps: ``<root>/step<N>/rank<R>/{dump.json, stack.json, construct.json, dump_tensor_data/}``.

Accepts what msprobe 1.x writes (and our own writer), the non-distributed ``rank`` directory,
26.x's ``proc<pid>`` directories and its deduplicated ``stack.json``.  Everything read from a
dump is untrusted: JSON errors become :class:`~msprobe_cmp.errors.DumpFormatError` naming the
file and field, tensor files are confined to the dump's ``dump_tensor_data/`` and loaded with
``allow_pickle=False``.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
import numpy as np

from msprobe_cmp.dump.schema import DumpMeta, Entry, TensorLeaf, pack_entries, unpack_entries
from msprobe_cmp.dump.serde import entries_from_json, meta_from_json
from msprobe_cmp.errors import DumpFormatError

DUMP_JSON = "dump.json"
DEBUG_JSON = "debug.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_DIR = "dump_tensor_data"

#: Reads one tensor file of a given suffix into a numpy array (raising DumpFormatError on a bad file).
TensorLoader = Callable[[Path], np.ndarray]
#: Loaders for tensor files other than ``.npy``, by suffix (``".pt"``); filled by :func:`register_tensor_loader`.
_TENSOR_LOADERS: dict[str, TensorLoader] = {}


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector inside the block and re-enable it on leaving (also on error).

    Loading, comparing and rendering build millions of small acyclic objects.  With the collector running,
    each allocation burst re-scans every object still alive (30-40 % of a large compare's time).  Reference
    counting still frees every record (they hold no cycles).  Loading the two sides of a 100k-entry statistics
    pair (600k tensor leaves) takes 2.3x the CPU time with the collector running (measured for issue 16).  The
    young generations are collected on entry (cheap), so garbage from before the block does not wait for it.
    Nested use is fine, and a block entered while the collector is already off (the caller switched it off) leaves
    it off.  Unlike a :func:`gc.freeze`, this changes nothing in the calling process beyond the block.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.collect(1)  # young garbage from before the block: cheap (at most a few thousand objects)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def register_tensor_loader(suffix: str, loader: TensorLoader) -> None:
    """Let :meth:`RankDump.load_tensor` read tensor files ending in ``suffix`` (e.g. ``".pt"``) with ``loader``.

    ``.npy`` is always read by the reader itself and cannot be replaced.  Registering a suffix again
    replaces its loader.  The loader's array goes through the same shape check and bfloat16 decoding as a
    ``.npy`` file (bf16 as uint16/int16 bit patterns, or float32).

    Raises:
        ValueError: for ``.npy`` or a suffix that does not start with a dot.
    """
    if not suffix.startswith(".") or suffix == ".npy":
        raise ValueError(f"cannot register a tensor loader for {suffix!r}")
    _TENSOR_LOADERS[suffix] = loader


def unregister_tensor_loader(suffix: str) -> None:
    """Forget the loader of ``suffix`` (no-op when none is registered)."""
    _TENSOR_LOADERS.pop(suffix, None)


def tensor_loader_for(suffix: str) -> TensorLoader | None:
    """The loader registered for ``suffix``, or None."""
    return _TENSOR_LOADERS.get(suffix)


#: Names of a step directory (``step<N>``) and of a rank directory (``rank``, ``rank<R>``, msprobe 26.x's ``proc<id>``).
STEP_DIR_RE = re.compile(r"^step(\d+)$")
RANK_DIR_RE = re.compile(r"^(?:rank(\d*)|proc(\d+))$")


def _reject_duplicates(file: Path):  # type: ignore[no-untyped-def]
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)  # C speed; the pairs are walked only when a key repeats
        if len(out) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    raise DumpFormatError(file, repr(k), "duplicate key")
                seen.add(k)
        return out

    return hook


def read_json(file: Path) -> Any:
    """Parse a JSON file; accepts msprobe's ``NaN``/``Infinity``/``-Infinity`` tokens (as floats), keeps integers of
    any size exactly, rejects duplicate keys.

    Returns:
        The parsed value: dicts, lists, str, int, float, bool and None.

    Raises:
        DumpFormatError: when the file cannot be read, is not UTF-8, is not valid JSON (the message gives line and
            column) or nests too deeply for the parser, when a key repeats within an object (naming the key), or
            when an integer has more digits than Python reads (naming its field and its number of digits).
    """
    return _parse_json(file, _read_bytes(file))


def _read_bytes(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise DumpFormatError(file, None, f"cannot read: {exc.strerror or exc}") from None


_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _colons(raw: bytes) -> int:
    """The ``:`` of ``raw``, each ``\\u003a`` escape counted as one more (the duplicate-key check of
    :func:`_parse_json` and :func:`read_dump_json`)."""
    colons = raw.count(b":")
    if b"\\u003" in raw:
        colons += raw.count(b"\\u003a") + raw.count(b"\\u003A")
    return colons


def _parse_json(file: Path, raw: bytes) -> Any:
    """:func:`read_json` of the bytes ``raw`` of ``file``.

    msgspec's decoder reads the bytes (about 2.5x faster than :mod:`json` with a duplicate-key hook).  It keeps
    integers of any size exactly and reads every float as :mod:`json` does (correctly rounded), and it accepts
    a strict subset of what :mod:`json` accepts, so what it returns is what :mod:`json` would.  Where it differs:

    * it refuses ``NaN``/``Infinity`` tokens (a file whose bytes hold ``NaN`` or ``Infinity`` anywhere, even in a
      string, goes straight to :mod:`json`), numbers beyond float range, lone surrogates, integers longer than
      Python's int-string limit and very deep nesting; :mod:`json` then reads the file (the tokens become floats,
      as msprobe means them) or gives the error with its line and column;
    * a repeated key keeps its last value where :mod:`json` with :func:`_reject_duplicates` refuses the file.  Every
      object member is written with exactly one ``:`` outside strings, and msgspec's encoder writes no other ``:``
      but the ones inside strings, unescaped.  So the file holds as many colons (counting a ``\\u003a`` escape as
      one) as the encoding of the decoded value when no member was dropped; when the counts differ, :mod:`json`
      reads the file and names the repeated key.  (A ``\\u003a`` that is not an escape, after an escaped
      backslash, only makes the counts differ: then too :mod:`json` decides.)
    """
    if b"NaN" in raw or b"Infinity" in raw:  # msgspec would refuse the tokens, perhaps after decoding most of the file
        return _parse_json_stdlib(file, raw)
    try:
        obj = _decode(raw)
    except (msgspec.DecodeError, RecursionError):  # msgspec.ValidationError is a DecodeError
        return _parse_json_stdlib(file, raw)
    if _colons(raw) != _encode(obj).count(b":"):
        return _parse_json_stdlib(file, raw)
    return obj


def _parse_json_stdlib(file: Path, raw: bytes) -> Any:
    """:func:`_parse_json` by the standard library's decoder, for what msgspec's refuses or drops."""
    text = _utf8(file, raw)
    with _json_errors(file):
        try:
            return json.loads(text, object_pairs_hook=_reject_duplicates(file))
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            too_long = _too_long_int(file, text)
            if too_long is None:
                raise
            raise too_long from None


class _LongInt:
    """Stands for an integer literal longer than Python's int-string limit while :func:`_too_long_int` looks
    for its place."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _too_long_int(file: Path, text: str) -> DumpFormatError | None:
    """The error of the first integer literal of ``text`` longer than Python's int-string limit, naming its field
    (``data['<entry>'].output[0].Max``, or a header key's path) and its number of digits; None when ``text`` holds
    no such literal (the ValueError had another cause).  Only called once :mod:`json` has refused ``text``: it
    parses the file again, each such literal read as a :class:`_LongInt`.  When the rest of the file holds
    another error (which :mod:`json` met only after the integer), the integer's error, the first, is still the one
    given, without its field."""
    limit = sys.get_int_max_str_digits()
    found: list[int] = []

    def parse_int(literal: str) -> int | _LongInt:
        digits = len(literal) - literal.startswith("-")
        if limit and digits > limit:
            found.append(digits)
            return _LongInt(digits)
        return int(literal)

    try:
        tree = json.loads(text, parse_int=parse_int, object_pairs_hook=_reject_duplicates(file))
    except (ValueError, RecursionError, DumpFormatError):
        tree = None
    if not found:
        return None
    problem = f"integer too large ({found[0]} digits; at most {limit} are read)"
    return DumpFormatError(file, None if tree is None else _path_of_long_int(tree), problem)


def _path_of_long_int(tree: Any) -> str | None:
    """The JSON path of the first :class:`_LongInt` of ``tree`` in file order, in the form messages give fields:
    a top-level key as is (``data``'s members as ``data['<name>']``), then ``.key`` and ``[index]``."""
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _LongInt):
            return path or None
        if isinstance(value, dict):
            items = [(v, _member_path(path, k)) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(v, f"{path}[{i}]") for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))
    return None


def _member_path(path: str, key: str) -> str:
    """The path of member ``key`` of the object at ``path`` (:func:`_path_of_long_int`)."""
    if not path:
        return _cut(key)
    if path == "data":
        return f"data[{_quoted(key)}]"
    return f"{path}.{_cut(key)}"


def _utf8(file: Path, raw: bytes) -> str:
    """``raw`` decoded from UTF-8; raises DumpFormatError naming the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DumpFormatError(file, None, f"not UTF-8 (byte {exc.start})") from None


@contextmanager
def _json_errors(file: Path) -> Iterator[None]:
    """Turn the standard library decoder's errors inside the block into DumpFormatError naming ``file`` (line and
    column of a syntax error; an integer literal too long; nesting too deep for the interpreter)."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise DumpFormatError(file, None, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's int-string limit
        raise DumpFormatError(file, None, f"invalid JSON: {str(exc)[:120]}") from None
    except RecursionError:
        raise DumpFormatError(file, None, "JSON nested too deeply") from None


#: An object's members, their values left undecoded (msgspec still checks their syntax).
_decode_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


#: What :func:`read_dump_json` gives: the top level without ``data``, and ``data``'s members one at a time.
DumpJson = tuple[Any, "Iterator[tuple[str, Any]] | None"]


def read_dump_json(file: Path, raw: bytes) -> DumpJson:
    """Parse a dump.json with the guarantees of :func:`read_json`, but one ``data`` member at a time: the file's
    Python tree is never built whole; the bytes, the header and the entry being read are all that is held.

    msgspec splits the file (``dict[str, msgspec.Raw]``: its syntax is checked, the values are left as byte spans),
    then decodes the header values and, as they are asked for, each entry's span.  A file it refuses (``NaN`` or
    ``Infinity`` tokens, invalid JSON, a top level that is not an object, deep nesting) is read by the standard
    library's decoder instead, the same way (:func:`_read_dump_json_stdlib`), which reads the tokens as floats
    and gives the errors with line and column.  An entry msgspec refuses after the split (a number beyond float
    range, say) and every entry after it are taken from the standard library's decoder's reading of the whole file
    (which the reader then holds until the last entry has been read), each entry parsed once.

    Duplicate keys (msgspec keeps a repeated key's last value): every object member is written with exactly one
    ``:`` outside strings, and msgspec's encoder writes no ``:`` but one per member and the ones inside strings,
    unescaped.  So when no member was dropped anywhere, the file's colons (a ``\\u003a`` escape counted as one)
    equal the sum, over the pieces decoded, of the colons of their encoding: per entry its encoding's, per object
    split here (the top level, ``data``) its member count and the colons in its keys.  A dropped member takes its
    own ``:`` with it, so a repeated key anywhere makes the counts differ; then the standard library's decoder
    reads the whole file and names the key (an escaped backslash before ``u003a`` only makes the counts differ
    too: then the file is found sound).  The counts are complete when the last entry has been read.

    Args:
        file: the file (for messages); raw: its bytes.

    Returns:
        ``(top, entries)``.  When the top level is an object with a ``data`` object: ``top`` its members but
        ``data``, parsed (dicts, lists, str, int, float, bool, None) and ``entries`` an iterator of ``(entry name,
        parsed value)`` in file order.  Otherwise ``entries`` is None and ``top`` is the parsed file.

    Raises:
        DumpFormatError: what :func:`read_json` raises for the file, here or while iterating: an error in an entry,
            or a repeated key anywhere, may be raised only when the iterator reaches it or its end, so exhaust it
            (then every error :func:`read_json` would raise has been raised, the one it would have raised first).
    """
    try:
        top = _decode_members(raw)
        data = top.pop("data", None)
        header = {key: _decode(value) for key, value in top.items()}
        counted = len(top) + sum(key.count(":") + _encode(value).count(b":") for key, value in header.items())
        members = None
        if data is not None:
            try:
                members = _decode_members(data)
            except msgspec.ValidationError:  # data is not an object
                header["data"] = _decode(data)
                counted += 1 + _encode(header["data"]).count(b":")  # the member "data" and its value
    except (msgspec.DecodeError, RecursionError):  # msgspec.ValidationError (no object) is a DecodeError
        return _read_dump_json_stdlib(file, raw)
    if members is None:
        if counted != _colons(raw):
            _read_dump_json_stdlib(file, raw)  # raises the repeated key's error
        return header, None
    counted += 1 + len(members) + sum(name.count(":") for name in members)
    return header, _entries(file, raw, members, counted)


def _entries(file: Path, raw: bytes, members: dict[str, msgspec.Raw], counted: int) -> Iterator[tuple[str, Any]]:
    """The ``(name, parsed value)`` of each member of ``data`` (:func:`read_dump_json`): ``members`` the spans,
    ``counted`` the colons counted outside them so far."""
    for name, part in members.items():
        try:
            value = _decode(part)
        except (msgspec.DecodeError, RecursionError):
            # e.g. a number beyond float range: the standard library's decoder reads the whole file (raising its
            # first error, if it has one, repeated keys included), and the entries from this one on are taken from
            # that reading, not parsed again
            yield from _stdlib_entries_from(file, raw, name)
            return
        counted += _encode(value).count(b":")
        yield name, value
    if counted != _colons(raw):
        _read_dump_json_stdlib(file, raw)  # raises the repeated key's error


def _stdlib_entries_from(file: Path, raw: bytes, name: str) -> Iterator[tuple[str, Any]]:
    """``data``'s members from ``name`` on, in file order, as the standard library's decoder reads the file
    (:func:`_parse_json_stdlib`, which raises the file's first error, if it has one); each member is let go once
    given."""
    tree = _parse_json_stdlib(file, raw)
    data = tree.get("data") if isinstance(tree, dict) else None
    del tree
    if not isinstance(data, dict) or name not in data:  # cannot happen: msgspec split this very file into members
        raise DumpFormatError(file, f"data[{_quoted(name)}]", "read differently by the two JSON decoders")
    keys = list(data)
    for key in keys[keys.index(name):]:
        yield key, data.pop(key)


def _read_dump_json_stdlib(file: Path, raw: bytes) -> DumpJson:
    """:func:`read_dump_json` by the standard library's decoder (:func:`_parse_json_stdlib`, which reads ``NaN`` and
    ``Infinity`` tokens as floats, names a repeated key and gives line and column of a syntax error).  It builds the
    file's tree whole: only the files msgspec refuses come here."""
    obj = _parse_json_stdlib(file, raw)
    if isinstance(obj, dict) and isinstance(obj.get("data"), dict):
        data = obj.pop("data")
        return obj, iter(data.items())
    return obj, None


def _load_stack(file: Path, shared: dict[Any, Any]) -> Mapping[str, tuple[str, ...]]:
    """stack.json: entry name → call-stack lines.  Equal names, lines and stacks are held once: ``shared`` maps
    each to the first equal one met (:func:`load_rank_dump` seeds it with the unit's entry names); a dump's stacks
    repeat from call to call (one call site per layer).

    Raises:
        DumpFormatError: the file is not a JSON object, or a value is not a list of frames (or null).
    """
    if not file.is_file():
        return MappingProxyType({})
    obj = read_json(file)
    if not isinstance(obj, dict):
        raise DumpFormatError(file, None, "expected a JSON object")
    out: dict[str, tuple[str, ...]] = {}
    share: Callable[[Any, Any], Any] = shared.setdefault
    for key, value in obj.items():
        if (
            isinstance(value, list)
            and len(value) == 2
            and isinstance(value[0], list)
            and isinstance(value[1], list)
            and all(isinstance(n, str) for n in value[0])
        ):
            # msprobe 26.x deduplicated form: {"<id>": [[entry names...], [frames...]]}
            frames = tuple([share(f, f) for f in map(str, value[1])])
            frames = share(frames, frames)
            for name in value[0]:
                out[share(name, name)] = frames
        elif isinstance(value, list):
            frames = tuple([share(f, f) for f in (f if type(f) is str else str(f) for f in value)])
            out[share(key, key)] = share(frames, frames)
        elif value is None:
            out[share(key, key)] = ()
        else:
            raise DumpFormatError(file, repr(key), "expected a list of stack frames")
    return MappingProxyType(out)


def _load_construct(file: Path, shared: dict[Any, Any]) -> Mapping[str, str | None]:
    """construct.json: entry name → parent cell entry name (None for top level), the names held once through
    ``shared`` (as :func:`_load_stack`).

    Raises:
        DumpFormatError: the file is not a JSON object, or a value is not a name (or null, or Megatron's
            ``[parent, micro_step]``).
    """
    if not file.is_file():
        return MappingProxyType({})
    obj = read_json(file)
    if not isinstance(obj, dict):
        raise DumpFormatError(file, None, "expected a JSON object")
    out: dict[str, str | None] = {}
    share: Callable[[Any, Any], Any] = shared.setdefault
    for key, value in obj.items():
        if isinstance(value, list) and value:  # Megatron form: [parent, micro_step]
            value = value[0]
        if value is not None and not isinstance(value, str):
            raise DumpFormatError(file, repr(key), "expected a parent cell name or null")
        out[share(key, key)] = value if value is None else share(value, value)
    return MappingProxyType(out)


@dataclass(frozen=True)
class RankDump:
    """One ``step<N>/rank<R>`` directory: the entries of one step on one rank.

    Attributes:
        directory: the rank directory.
        step: the step number from ``step<N>``, or None when the dump has no step directory.
        rank: the rank from ``rank<R>``, or None for a non-distributed ``rank`` / ``proc<pid>`` directory.
        meta: the dump.json header.
        entries: the entries in file order (execution order, as recorded); empty for a unit of :func:`scan_dump`,
            whose entries were not read (:attr:`scanned`; ``stack`` and ``construct`` are then empty too).
        stack: entry name → call-stack lines (forward entries).
        construct: entry name → parent cell entry name (None for top-level).
        json_name: the file the entries were read from (``dump.json``, or ``debug.json`` for the debug level).
        unread_json: when the directory holds both ``dump.json`` and ``debug.json`` (files of two recordings), the
            one not read, else None.  Only :attr:`json_name` is read: dump.json when the directory was given,
            debug.json when that file itself was given (or the directory holds no dump.json).
        scanned: True for a unit of :func:`scan_dump`: only its header was read.
        mentions_md5: for a unit of :func:`scan_dump` only, whether the file's bytes hold an ``"md5"`` key anywhere,
            or a ``\\u`` escape of ``m``, ``d`` or ``5`` that may spell one (False: no leaf of it carries a
            checksum; True: some may); None for a loaded unit.
    """

    directory: Path
    step: int | None
    rank: int | None
    meta: DumpMeta
    entries: tuple[Entry, ...]
    stack: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    construct: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    json_name: str = DUMP_JSON
    unread_json: str | None = None
    scanned: bool = False
    mentions_md5: bool | None = None

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # compactly (pack_entries: the file's leaf columns once, not a leaf object each), for a unit loaded in another
        # process (multiprocessing, a Dask worker); the look-up tables as plain dicts (a mappingproxy does not pickle)
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state.update(entries=pack_entries(self.entries), stack=dict(self.stack), construct=dict(self.construct))
        return (_unpickle_rank_dump, (state,))

    @property
    def label(self) -> str:
        """``"step0/rank"``-style label of this unit, for messages."""
        step = "-" if self.step is None else f"step{self.step}"
        rank = "rank" if self.rank is None else f"rank{self.rank}"
        return f"{step}/{rank}"

    def entry(self, name: str) -> Entry | None:
        """The entry called ``name``, or None (None too for a unit of :func:`scan_dump`)."""
        for e in self.entries:
            if e.name == name:
                return e
        return None

    @property
    def tensor_dir(self) -> Path:
        """``<directory>/dump_tensor_data`` (whatever ``dump_data_dir`` in the header says)."""
        return self.directory / TENSOR_DIR

    def tensor_path(self, leaf: TensorLeaf) -> Path | None:
        """Where ``leaf``'s tensor file is, confined to :attr:`tensor_dir`; None when it has no ``data_name``.

        The path is resolved (symlinks followed) so that the confinement can be checked; messages name the file
        as :meth:`shown_tensor_file` does, never by its resolved path.

        Raises:
            DumpFormatError: when ``data_name`` is absolute, contains ``..`` or resolves (through
                symlinks) outside the tensor directory, or when the path cannot be resolved (a symlink loop, a
                name too long for the file system, a name the file system cannot encode).
        """
        name = leaf.data_name
        if name is None:
            return None
        file = self.directory / self.json_name
        plain = name and "\x00" not in name and "/" not in name and "\\" not in name and name not in (".", "..")
        if not plain:
            raise DumpFormatError(file, f"data_name {_quoted(name)}", "not a plain file name inside dump_tensor_data")
        try:
            base = self.tensor_dir.resolve()
            path = (base / name).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: Python 3.11's "Symlink loop"
            reason = f"cannot read the tensor file: {_os_reason(exc)}"
            raise DumpFormatError(self.shown_tensor_file(name), None, reason) from None
        if path.parent != base:
            raise DumpFormatError(file, f"data_name {_quoted(name)}", "resolves outside dump_tensor_data")
        return path

    def shown_tensor_file(self, data_name: str) -> str:
        """The tensor file of ``data_name`` as messages name it: ``<directory>/dump_tensor_data/<data_name>``, under the
        unit directory as loaded (not resolved: a report's path rewriting then hides the dump root, and a dump
        on shared storage reached through a symlink does not put that storage's paths in messages), with a
        ``data_name`` longer than 100 characters cut to its first 100 and ``...``."""
        return f"{self.tensor_dir}/{_cut(data_name)}"

    def load_tensor(self, leaf: TensorLeaf) -> np.ndarray:
        """Load ``leaf``'s saved tensor (memory-mapped, ``allow_pickle=False``).

        A bfloat16 tensor stored as raw 16-bit patterns (uint16/int16) is viewed as
        ``ml_dtypes.bfloat16`` when dump.json says ``BFloat16``; other arrays are returned as stored.

        Returns:
            The array as stored (not upcast); callers upcast before computing.

        Raises:
            DumpFormatError: no ``data_name``, a missing/unreadable/corrupt file (any OS error: a symlink loop,
                a name too long, no permission, a path component that is not a directory), an object array,
                a file type other than ``.npy`` for which no loader is registered (``.pt`` needs
                :func:`register_tensor_loader`), or a stored shape that disagrees with dump.json.  Each names
                the file by :meth:`shown_tensor_file`.
        """
        path = self.tensor_path(leaf)
        if path is None or leaf.data_name is None:
            raise DumpFormatError(self.directory / self.json_name, "data_name", "the tensor was not saved")
        shown = self.shown_tensor_file(leaf.data_name)
        loader = None if path.suffix == ".npy" else _TENSOR_LOADERS.get(path.suffix)
        if path.suffix != ".npy" and loader is None:
            suffix = _quoted(path.suffix)
            raise DumpFormatError(shown, None, f"unsupported tensor file type {suffix} (only .npy is read)")
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError) as exc:
            raise _unreadable(shown, exc) from None
        if not stat.S_ISREG(mode):
            raise DumpFormatError(shown, None, "not a regular file")
        if loader is not None:
            try:
                arr = loader(path)
            except DumpFormatError as exc:  # it names the path it was given: the resolved one
                raise DumpFormatError(shown, exc.field, _scrubbed(exc.problem, path, shown)) from None
            except OSError as exc:
                raise _unreadable(shown, exc) from None
            if not isinstance(arr, np.ndarray):
                raise DumpFormatError(shown, None, "the tensor loader did not return an array")
        else:
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except OSError as exc:
                raise _unreadable(shown, exc, "not a readable npy file") from None
            except (ValueError, EOFError) as exc:
                reason = f"not a readable npy file: {_scrubbed(str(exc), path, shown)}"
                raise DumpFormatError(shown, None, reason) from None
        if not isinstance(arr, np.ndarray):
            raise DumpFormatError(shown, None, "not a single npy array")
        # A single value may be stored 0-d or with shape [1]; any other shape difference is an error.
        if tuple(arr.shape) != tuple(leaf.shape) and not (arr.size == leaf.numel == 1):
            raise DumpFormatError(shown, "shape", f"file holds {list(arr.shape)}, dump.json says {list(leaf.shape)}")
        import ml_dtypes

        if leaf.dtype.lower() in ("bfloat16", "torch.bfloat16") and arr.dtype in (np.uint16, np.int16):
            arr = arr.view(ml_dtypes.bfloat16)
        elif arr.dtype.kind not in "biufc" and arr.dtype != ml_dtypes.bfloat16:  # a loader may return bf16 values
            raise DumpFormatError(shown, "dtype", f"file holds non-numeric dtype {arr.dtype}")
        return arr


#: How many characters of a data_name (or other name read from a dump) an error message quotes.
_QUOTED_CHARS = 100


def _cut(text: str, limit: int = _QUOTED_CHARS) -> str:
    """``text``, or its first ``limit`` characters and ``...`` when it is longer."""
    return text if len(text) <= limit else text[:limit] + "..."


def _quoted(text: str) -> str:
    """``repr`` of :func:`_cut` of ``text``, for quoting a name read from a dump in a message."""
    return repr(_cut(text))


def _os_reason(exc: BaseException) -> str:
    """What went wrong in an OS call, without the path it was given (the resolved path, possibly very long):
    "symlink loop" for ELOOP and for the ``RuntimeError`` of :meth:`pathlib.Path.resolve` (Python 3.11, 3.12),
    the ``strerror`` of any other OSError, and "the file system cannot encode the name" for a ``ValueError``
    (a lone surrogate in the name)."""
    if isinstance(exc, RuntimeError) or (isinstance(exc, OSError) and exc.errno == errno.ELOOP):
        return "symlink loop"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return "the file system cannot encode the name"


def _unreadable(
    shown: str, exc: OSError | ValueError, problem: str = "cannot read the tensor file"
) -> DumpFormatError:
    """The error of the tensor file ``shown`` when the OS refused it (``exc``, from a stat, a loader or
    :func:`numpy.load`): "tensor file not found", or ``problem`` and :func:`_os_reason` (never ``str(exc)``, which
    would name the resolved path)."""
    if isinstance(exc, FileNotFoundError):
        return DumpFormatError(shown, None, "tensor file not found")
    return DumpFormatError(shown, None, f"{problem}: {_os_reason(exc)}")


def _scrubbed(text: str, path: Path, shown: str, limit: int = 200) -> str:
    """``text`` (a library's error message) with ``path`` (resolved) replaced by ``shown``, cut to ``limit``
    characters."""
    return _cut(text.replace(str(path), shown), limit)


@dataclass(frozen=True)
class Dump:
    """A whole dump: every (step, rank) unit found under ``root``, sorted by (step, rank).

    Attributes:
        root: the path the dump was loaded from.
        units: the rank dumps; steps/ranks that are None sort first.
    """

    root: Path
    units: tuple[RankDump, ...]

    def get(self, step: int | None, rank: int | None) -> RankDump | None:
        """The unit with this step and rank, or None."""
        for u in self.units:
            if u.step == step and u.rank == rank:
                return u
        return None

    @property
    def steps(self) -> tuple[int | None, ...]:
        """The distinct steps, sorted."""
        return tuple(sorted({u.step for u in self.units}, key=lambda s: -1 if s is None else s))


def _unpickle_rank_dump(state: dict[str, Any]) -> RankDump:
    """The :class:`RankDump` of :meth:`RankDump.__reduce__`'s ``state``."""
    state.update(entries=unpack_entries(state["entries"]), stack=MappingProxyType(state["stack"]),
                 construct=MappingProxyType(state["construct"]))
    return RankDump(**state)


def _parse_rank(name: str) -> tuple[bool, int | None]:
    m = RANK_DIR_RE.match(name)
    if not m:
        return False, None
    if m.group(1):
        return True, int(m.group(1))
    return True, None


def _parse_step(name: str) -> int | None:
    m = STEP_DIR_RE.match(name)
    return int(m.group(1)) if m else None


def load_rank_dump(
    directory: Path, step: int | None = None, rank: int | None = None, *, file: Path | None = None
) -> RankDump:
    """Load one rank directory holding a dump.json (and optionally stack.json, construct.json).

    Args:
        directory: the rank directory.
        step, rank: the ids to stamp on the unit.
        file: the dump JSON to read instead of ``<directory>/dump.json``.

    Raises:
        DumpFormatError: on any malformed file (naming the file and field), and when the dump JSON is a directory,
            a dangling symlink or no regular file (:func:`_unit_file`).
    """
    file = _unit_file(directory, file)
    top, pairs = _read_unit_json(file, _read_bytes(file))
    try:
        meta = meta_from_json(top, file)
        entries = entries_from_json(pairs, file, debug=file.name == DEBUG_JSON)
    except DumpFormatError:
        for _ in pairs:  # an error in the JSON further on is the one to give, as when the file is parsed whole
            pass
        raise
    shared: dict[Any, Any] = {entry.name: entry.name for entry in entries}  # stack.json's and construct.json's names
    return RankDump(
        directory=directory,
        step=step,
        rank=rank,
        meta=meta,
        entries=entries,
        stack=_load_stack(directory / STACK_JSON, shared),
        construct=_load_construct(directory / CONSTRUCT_JSON, shared),
        json_name=file.name,
        unread_json=_unread_json(directory, file),
    )


def _claim(seen: dict[int, str], number: int, name: str, where: Path, what: str) -> None:
    """Note that the directory ``name`` holds the ``what`` (``"rank"``, ``"step"``) ``number``, in ``seen``.

    Raises:
        DumpFormatError: another directory of ``where`` holds the same number (``rank1`` beside ``rank01``).
    """
    other = seen.setdefault(number, name)
    if other != name:
        first, second = sorted((other, name))
        raise DumpFormatError(where, None, f"{first} and {second} are the same {what} ({number}); keep one of them")


def _rank_dirs(step_dir: Path) -> list[tuple[Path, int | None]]:
    """The rank directories of ``step_dir`` holding a dump.json or debug.json (whatever that is: a directory or a
    dangling symlink there is the error of the unit that reads it, never a unit silently left out), with their ranks.

    Raises:
        DumpFormatError: two directories name one rank (``rank1`` and ``rank01``).
    """
    found = []
    named: dict[int, str] = {}
    for child in sorted(step_dir.iterdir()):
        ok, rank = _parse_rank(child.name)
        if ok and child.is_dir() and (_lexists(child / DUMP_JSON) or _lexists(child / DEBUG_JSON)):
            if rank is not None:
                _claim(named, rank, child.name, step_dir, "rank")
            found.append((child, rank))
    return found


def _lexists(path: Path) -> bool:
    """Whether ``path`` is there at all (a dangling symlink too)."""
    return os.path.lexists(path)


def scan_rank_dump(
    directory: Path, step: int | None = None, rank: int | None = None, *, file: Path | None = None
) -> RankDump:
    """The unit :func:`load_rank_dump` loads, without its entries, stack.json and construct.json: the header only,
    read without building the ``data`` object (the comparison of many ranks on Dask workers: the parent pairs the
    units and picks the mode; the workers read the entries).

    Returns:
        A :class:`RankDump` whose ``scanned`` is True, ``entries`` empty and ``mentions_md5`` says whether the
        file's bytes hold an ``"md5"`` key (or a ``\\u`` escape that may spell one).

    Raises:
        DumpFormatError: the file is a directory, a dangling symlink or no regular file, cannot be read, is not a
            JSON object, has no ``data`` object or a malformed header
            (:func:`read_dump_json`: a file msgspec refuses, with ``NaN`` tokens say, is parsed whole by the standard
            library's decoder, once).  An error inside an entry, or a repeated key, is found by the worker that
            loads the unit.
    """
    file = _unit_file(directory, file)
    raw = _read_bytes(file)
    top, _ = _read_unit_json(file, raw)  # the entries are left unread
    return RankDump(
        directory=directory, step=step, rank=rank, meta=meta_from_json(top, file), entries=(), scanned=True,
        json_name=file.name, unread_json=_unread_json(directory, file), mentions_md5=_mentions_md5(raw),
    )


#: A ``\\u`` escape of ``m``, ``d`` or ``5``: a key that decodes to ``md5`` without the bytes ``"md5"`` holds one.
_MD5_ESCAPE = re.compile(rb"\\u00(?:6[dD]|64|35)")


def _mentions_md5(raw: bytes) -> bool:
    """:attr:`RankDump.mentions_md5` of a file whose bytes are ``raw``: whether they hold ``"md5"``, or an escape
    that may spell one of its letters in a key (``"\\u006d\\u0064\\u0035"``; rare, so True then: the comparison
    loads the unit to find out, as for any True)."""
    return b'"md5"' in raw or _MD5_ESCAPE.search(raw) is not None


def _unit_file(directory: Path, file: Path | None) -> Path:
    """The dump JSON of a unit: ``file`` when given, else ``<directory>/dump.json``, or its debug.json when it has
    no dump.json (a dump.json that is there but no regular file is not replaced by the debug.json).

    Raises:
        DumpFormatError: the file is a directory ("is a directory, not a file"), a dangling symlink ("a symlink to
            a file that does not exist"), another kind of file that is not a regular file (a FIFO: never opened)
            or cannot be looked at (the OS's reason); a missing file is left to the read, which says so.
    """
    if file is None:
        file = directory / DUMP_JSON
        if not _lexists(file) and _lexists(directory / DEBUG_JSON):
            file = directory / DEBUG_JSON
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        if os.path.islink(file):
            raise DumpFormatError(file, None, "a symlink to a file that does not exist") from None
        return file  # the read says "cannot read: No such file or directory", as before
    except (OSError, ValueError) as exc:
        raise DumpFormatError(file, None, f"cannot read: {_os_reason(exc)}") from None
    if stat.S_ISDIR(mode):
        raise DumpFormatError(file, None, "is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise DumpFormatError(file, None, "not a regular file")
    return file


def _read_unit_json(file: Path, raw: bytes) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    """:func:`read_dump_json` of a unit's file, whose bytes are ``raw``: its header and its entries' iterator.

    Raises:
        DumpFormatError: as :func:`read_dump_json`; or the top level is not an object, or has no ``data`` object.
    """
    top, pairs = read_dump_json(file, raw)
    if not isinstance(top, dict):
        raise DumpFormatError(file, None, "expected a JSON object at the top level")
    if pairs is None:
        raise DumpFormatError(file, "data", "missing or not an object")
    return top, pairs


def _unread_json(directory: Path, file: Path) -> str | None:
    """:attr:`RankDump.unread_json` of a unit read from ``file`` in ``directory``."""
    return next((other for other in (DUMP_JSON, DEBUG_JSON)
                 if other != file.name and file.parent == directory and (directory / other).is_file()), None)


def load_dump(path: str | Path) -> Dump:
    """Load a dump from a dump root, a ``step<N>`` directory, a ``rank<R>`` directory or a dump.json.

    Step and rank numbers come from the directory names (``step3``, ``rank1``; ``rank`` and
    ``proc<pid>`` give rank None).  Stray files and unrelated directories are ignored.

    Raises:
        DumpFormatError: when ``path`` does not exist, holds no dump.json where one is expected,
            any file is malformed, a rank directory's dump.json (or debug.json) is a directory, a dangling symlink
            or no regular file, or two rank directories of one step name the same rank (``rank1`` and ``rank01``), or
            two step directories the same step (``step1`` and ``step01``).
    """
    with paused_gc():
        return _load_dump(Path(path), load_rank_dump)


def scan_dump(path: str | Path) -> Dump:
    """:func:`load_dump` with each unit's header only (:func:`scan_rank_dump`): the same units, steps and ranks,
    found the same way, ``scanned`` and without entries.  For a parent that hands the units to workers (``--scheduler``,
    ``--jobs``): its memory then does not grow with the size of the dumps.

    Raises:
        DumpFormatError: as :func:`load_dump`, for what the headers and the directory layout show.
    """
    return _load_dump(Path(path), scan_rank_dump)


def _load_dump(p: Path, load: Callable[..., RankDump]) -> Dump:
    if not p.exists():
        raise DumpFormatError(p, None, "does not exist")
    if not (p.is_file() or p.is_dir()):
        raise DumpFormatError(p, None, "is neither a regular file nor a directory")
    if p.is_file():
        if p.name != DUMP_JSON and p.suffix != ".json":
            raise DumpFormatError(p, None, "expected a dump.json or a dump directory")
        return Dump(p, (_load_unit_with_context(p.parent, p, load),))
    for name in (DUMP_JSON, DEBUG_JSON):
        if _lexists(p / name):  # a dump.json that is no regular file: the unit's error (_unit_file)
            return Dump(p, (_load_unit_with_context(p, p / name, load),))
    step = _parse_step(p.name)
    ranks = _rank_dirs(p)
    if ranks:
        return Dump(p, tuple(load(d, step, r) for d, r in ranks))
    units: list[RankDump] = []
    steps: dict[int, str] = {}
    for child in sorted(p.iterdir()):
        s = _parse_step(child.name)
        if s is None or not child.is_dir():
            continue
        rank_dirs = _rank_dirs(child)
        if rank_dirs:
            _claim(steps, s, child.name, p, "step")
        units.extend(load(d, s, r) for d, r in rank_dirs)
    if not units:
        raise DumpFormatError(p, None, "no dump.json or debug.json found (expected step<N>/rank<R>/dump.json below it)")
    units.sort(key=lambda u: (-1 if u.step is None else u.step, -1 if u.rank is None else u.rank))
    return Dump(p, tuple(units))


def _load_unit_with_context(directory: Path, file: Path, load: Callable[..., RankDump]) -> RankDump:
    ok, rank = _parse_rank(directory.name)
    step = _parse_step(directory.parent.name) if ok else None
    return load(directory, step, rank if ok else None, file=file)
