"""Write the msprobe dump layout: ``<rank_dir>/{dump.json, stack.json, construct.json, dump_tensor_data/}``.

Every file is written atomically (to a temporary file in the same directory, then
``os.replace``), so a crash leaves either the previous complete file or the new one, never a
torn one.  JSON is written compactly by the standard library's C encoder (no indentation: with
``indent`` the standard library falls back to its pure-Python encoder, ~10x slower), with
``NaN``/``Infinity`` tokens for non-finite statistics as msprobe writes them, so msprobe's own
compare (any JSON reader) reads our dumps.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from msprobe_cmp.dump.reader import CONSTRUCT_JSON, DEBUG_JSON, DUMP_JSON, STACK_JSON, TENSOR_DIR
from msprobe_cmp.dump.schema import DumpMeta, Entry, Node
from msprobe_cmp.dump.serde import entry_to_json, meta_to_json, node_to_json

#: Numbers the temporary files of this process (with its pid, a temporary file's name is unique without a random part).
_TEMP_NUMBERS = itertools.count()

#: Flags of a new temporary file: created here or failing (never an existing file), closed in child processes.
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


#: Bytes a file name may have on the common file systems (ext4, XFS, btrfs, NTFS in UTF-16 units, APFS).
NAME_MAX = 255


def create_temp(path: Path) -> tuple[int, str]:
    """A new empty file beside ``path``, ``.<name>.<pid>.<n>.tmp`` (pid and n in hex), open for writing:
    ``(descriptor, its name)``.

    It is created with mode 0666, less the process umask, which the kernel applies: the mode a plain
    ``open(path, "w")`` gives (``tempfile.mkstemp`` gives 0600 and would need a ``chmod`` and a read of the umask,
    ~200 us a file together). ``<name>`` is ``path``'s name, cut after a whole character if need be, so that the
    whole name stays within :data:`NAME_MAX` bytes however many files came before.

    Raises:
        OSError: the file cannot be created (a missing directory, permissions, no space).
    """
    name = path.name
    while True:
        suffix = f".{os.getpid():x}.{next(_TEMP_NUMBERS):x}.tmp"
        if len(name) * 4 + len(suffix) + 1 > NAME_MAX:  # perhaps too long once encoded: cut it at a byte
            room = NAME_MAX - len(suffix) - 1
            name = path.name[:room]
            while len(os.fsencode(name)) > room:  # whole characters only: the name stays valid UTF-8
                name = name[:-1]
        tmp = os.path.join(path.parent, f".{name}{suffix}")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o666), tmp
        except FileExistsError:  # left by an earlier process of the same pid: take the next number
            continue


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, durable: bool = False) -> None:
    """Create ``path`` atomically: ``write(fh)`` fills a temporary file in the same directory, which
    then replaces ``path`` (``os.replace``, atomic on POSIX).

    The file gets the mode a plain ``open(path, "w")`` would give it.  On failure the previous file
    (if any) is left untouched and the temporary file is removed.  With ``durable`` the data is
    fsync'ed before the rename and the directory after it, so the new file survives a power loss too.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda fh: fh.write(data), durable=durable)


#: Compact JSON through the C encoder (``indent`` would select the pure-Python one).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=True, check_circular=False, separators=(",", ":"))


#: At most this many distinct stacks keep their JSON text between flushes (:meth:`DumpWriter._stack_json`).
MAX_STACK_TEXTS = 100_000


def _json_bytes(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode("utf-8")


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DumpWriter:
    """Accumulates the entries of one step on one rank and writes them in msprobe's layout.

    Args:
        rank_dir: the ``<dump_path>/step<N>/rank<R>`` directory (created on first write).
        meta: the dump.json header; ``dump_data_dir`` is set to the tensor directory once a tensor is saved.

        stack_texts: where the JSON text of each distinct stack is kept between flushes and writers (a recorder
            passes the same dict to the writer of every step, so a stack seen at an earlier step is not encoded
            again); None = a dict of this writer's own.  Its keys are the stacks (tuples of lines), its values
            their JSON arrays as text.

    Entries keep the order of their first :meth:`put`; putting an entry again replaces it in place
    (how a parameters_grad placeholder written at forward is filled at backward).
    """

    def __init__(
        self, rank_dir: Path, meta: DumpMeta, *, stack_texts: dict[tuple[str, ...], str] | None = None
    ) -> None:
        self.rank_dir = Path(rank_dir)
        self.meta = meta
        self._entries: dict[str, Entry] = {}
        self._stack: dict[str, tuple[str, ...]] = {}
        self._stack_texts: dict[tuple[str, ...], str] = {} if stack_texts is None else stack_texts
        self._construct: dict[str, str | None] = {}
        self._saved_tensors = False
        # Bumped by every change; what the last flush wrote: (version, meta, durable), or None.
        self._version = 0
        self._flushed: tuple[int, DumpMeta, bool] | None = None

    def put(self, entry: Entry) -> None:
        """Insert ``entry``, or replace the entry of the same name keeping its position."""
        self._entries[entry.name] = entry
        self._version += 1

    def get(self, name: str) -> Entry | None:
        """The entry put under ``name``, or None."""
        return self._entries.get(name)

    def __len__(self) -> int:
        return len(self._entries)

    def set_stack(self, name: str, frames: Sequence[str]) -> None:
        """Record the call stack of entry ``name`` (``"File <path>, line <n>, in <func>, \\n <source>"`` lines)."""
        self._stack[name] = frames if type(frames) is tuple else tuple(frames)
        self._version += 1

    def _stack_json(self) -> bytes:
        """stack.json's bytes: the same text as the compact encoding of ``{name: [lines]}``, each distinct stack
        encoded once (:attr:`_stack_texts`, bounded to :data:`MAX_STACK_TEXTS` stacks)."""
        texts = self._stack_texts
        parts = []
        for name, frames in self._stack.items():
            text = texts.get(frames)
            if text is None:
                text = _ENCODER.encode(frames)
                if len(texts) < MAX_STACK_TEXTS:
                    texts[frames] = text
            parts.append(f"{_ENCODER.encode(name)}:{text}")
        return ("{" + ",".join(parts) + "}").encode("utf-8")

    def set_parent(self, name: str, parent: str | None) -> None:
        """Record the parent cell entry of ``name`` for construct.json (None: top level)."""
        self._construct[name] = parent
        self._version += 1

    @property
    def tensor_dir(self) -> Path:
        """``<rank_dir>/dump_tensor_data``."""
        return self.rank_dir / TENSOR_DIR

    def save_tensor(self, data_name: str, array: np.ndarray) -> None:
        """Save ``array`` as ``dump_tensor_data/<data_name>`` (npy, ``allow_pickle=False``), atomically.

        Raises:
            ValueError: when ``data_name`` is not a plain ``.npy`` file name, or ``array`` holds Python objects.
            OSError: the file could not be written.
        """
        if "/" in data_name or "\\" in data_name or data_name.startswith(".") or not data_name.endswith(".npy"):
            raise ValueError(f"data_name {data_name!r} is not a plain .npy file name")
        arr = np.asarray(array)
        if arr.dtype.hasobject:
            raise ValueError(f"{data_name}: object arrays are not saved")
        if arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and "bfloat16" in str(arr.dtype):
            # ml_dtypes.bfloat16 would be stored as an opaque void type: store its 16-bit patterns,
            # which the reader decodes when dump.json says BFloat16.
            arr = arr.view(np.uint16)
        write_atomic(self.tensor_dir / data_name, lambda fh: np.save(fh, arr, allow_pickle=False))
        self._saved_tensors = True
        self._version += 1

    def _header(self) -> dict[str, Any]:
        meta = meta_to_json(self.meta)
        if self._saved_tensors or self.tensor_dir.is_dir():
            meta["dump_data_dir"] = str(self.tensor_dir.resolve())
        return meta

    def write_debug(self, variables: Mapping[str, Node]) -> None:
        """Write ``debug.json`` (the debug level's ``save()``): the header, then ``data`` mapping each
        ``<name>.<n>`` to the saved variable itself (a leaf, a nested list/dict, or null), atomically."""
        doc = self._header()
        doc["data"] = {name: node_to_json(node) for name, node in variables.items()}
        write_bytes_atomic(self.rank_dir / DEBUG_JSON, _json_bytes(doc), durable=True)

    def flush(self, *, durable: bool = True) -> None:
        """Write dump.json, stack.json and construct.json (each atomically) with everything put so far.

        Args:
            durable: fsync each file before its rename and the directory after it, so the files survive a
                power loss too; without it the files are still replaced atomically (never torn) but may stay
                in the page cache.  When nothing changed since the previous flush, the files are not written
                again; a durable flush after a non-durable one then only fsyncs them.

        Raises:
            OSError: a file could not be written.
        """
        if self._flushed is not None and self._flushed[0] == self._version and self._flushed[1] == self.meta:
            if durable and not self._flushed[2]:
                for name in (STACK_JSON, CONSTRUCT_JSON, DUMP_JSON):
                    _fsync_path(self.rank_dir / name)
                _fsync_path(self.rank_dir)
                self._flushed = (self._version, self.meta, True)
            return
        doc = self._header()
        doc["data"] = {name: entry_to_json(e) for name, e in self._entries.items()}
        # stack.json and construct.json first: dump.json, written last, marks the step complete.
        write_bytes_atomic(self.rank_dir / STACK_JSON, self._stack_json(), durable=durable)
        write_bytes_atomic(self.rank_dir / CONSTRUCT_JSON, _json_bytes(self._construct), durable=durable)
        write_bytes_atomic(self.rank_dir / DUMP_JSON, _json_bytes(doc), durable=durable)
        self._flushed = (self._version, self.meta, durable)
