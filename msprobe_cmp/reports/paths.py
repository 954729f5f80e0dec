"""Keep the comparing machine's absolute paths out of reports (issue 8: a report is shared, the file system is not).

A :class:`~msprobe_cmp.comparator.compare.Comparison` names files in its inputs, unit directories, notes
and reasons (an unreadable tensor file, a duplicate unit).  :func:`relative_paths` rewrites every occurrence of a dump
root given on the command line into the form the user typed when it was relative, or into the root's last
component when it was absolute: ``/home/me/runs/ms_fp16/step0/rank/dump.json`` becomes
``ms_fp16/step0/rank/dump.json``.  ``msprobe-cmp --absolute-paths`` skips this.

Call stacks (stack.json) are left as recorded: they are the recording machine's, and the line they point
to is the evidence.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from msprobe_cmp.comparator.compare import Comparison, UnitComparison, UnitRef
from msprobe_cmp.dump.reader import DEBUG_JSON, DUMP_JSON, RANK_DIR_RE, STEP_DIR_RE


def dump_root(path: Path) -> Path:
    """The dump root of an input path: ``path`` without a trailing ``dump.json`` / ``debug.json``, rank directory
    (``rank``, ``rank<R>`` or msprobe 26.x's ``proc<pid>``) and ``step<N>`` (in that order, each only when present):
    ``/runs/fp16/step0/rank/dump.json`` → ``/runs/fp16``.  The names and patterns are the reader's
    (:mod:`msprobe_cmp.dump.reader`), so every directory it reads as a unit is stripped, a rank directory or a
    dump.json given directly being named by the dump root around it."""
    if path.name in (DUMP_JSON, DEBUG_JSON):
        path = path.parent
    if RANK_DIR_RE.fullmatch(path.name):
        path = path.parent
    if STEP_DIR_RE.fullmatch(path.name):
        path = path.parent
    return path


def display_names(paths: Iterable[Path]) -> dict[str, str]:
    """``absolute path text → shown text`` for each dump root (:func:`dump_root` of each input path): the typed
    relative path, or the last component.

    Both the path as typed and its resolved form are keys (messages may carry either).  Longer keys are
    listed first, so that a root inside another root is rewritten by its own entry.  A root that is the file
    system's root or the current directory (``.``: the input was typed from inside its dump root) is not used:
    the input path itself is then named as before.
    """
    out: dict[str, str] = {}
    for given in paths:
        path = dump_root(given)
        if str(path) in ("", ".") or (path.is_absolute() and not path.name):
            path = given
        shown = str(path) if not path.is_absolute() else (path.name or str(path))
        for form in {os.path.abspath(path), str(path.resolve())} | ({str(path)} if path.is_absolute() else set()):
            if form not in ("/", "") and form not in out:
                out[form] = shown
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))


def _rewrite(text: str, names: Mapping[str, str]) -> str:
    if "/" not in text:
        return text
    for absolute, shown in names.items():
        if absolute in text:
            text = text.replace(absolute, shown)
    return text


def _rewrite_all(texts: tuple[str, ...], names: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(_rewrite(t, names) for t in texts)


def _unit_ref(ref: UnitRef, names: Mapping[str, str]) -> UnitRef:
    return replace(ref, directory=_rewrite(ref.directory, names))


def _unit(unit: UnitComparison, names: Mapping[str, str]) -> UnitComparison:
    return replace(
        unit, unit_a=_unit_ref(unit.unit_a, names), unit_b=_unit_ref(unit.unit_b, names),
        notes=_rewrite_all(unit.notes, names), rows=unit.rows.with_texts(lambda text: _rewrite(text, names)),
    )


def relative_paths(comparison: Comparison, roots: Iterable[Path]) -> Comparison:
    """``comparison`` with every occurrence of the given dump roots rewritten (see the module docstring).

    Args:
        comparison: the result of :func:`~msprobe_cmp.comparator.compare`.
        roots: the dump paths as given on the command line (target, baseline, noise rerun).

    Returns:
        A new Comparison (the input is frozen and left as it is); the row columns are shared, only the
        reason and note texts are rewritten.
    """
    names = display_names(roots)
    if not names:
        return comparison
    return replace(
        comparison,
        input_a=_rewrite(comparison.input_a, names),
        input_b=_rewrite(comparison.input_b, names),
        input_noise=None if comparison.input_noise is None else _rewrite(comparison.input_noise, names),
        notes=_rewrite_all(comparison.notes, names),
        units=tuple(_unit(u, names) for u in comparison.units),
        unpaired=tuple(_unit_ref(u, names) for u in comparison.unpaired),
    )
