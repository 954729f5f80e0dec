"""Checks over a recorded dump.json that every gap is declared (shared by the corpus tests of every framework)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def leaves(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(argument path, leaf or None)`` of a dump.json value (tensor leaves are dicts with a ``type``)."""
    if node is None or (isinstance(node, dict) and "type" in node):
        yield path, node
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, f"{path}.{i}")
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, f"{path}.{k}")


def floating(leaf: Any) -> bool:
    """True for a tensor leaf of a floating or complex dtype, spelt as PyTorch (``torch.float32``) or MindSpore
    (``Float32``, ``BFloat16``) spells it."""
    return isinstance(leaf, dict) and str(leaf.get("dtype", "")).split(".")[-1].lower().startswith(
        ("float", "bfloat", "complex")
    )


def requires_grad(leaf: Any) -> bool:
    """PyTorch's rule: a floating leaf recorded with ``requires_grad`` true."""
    return floating(leaf) and leaf.get("requires_grad") is True


def _declared(name: str, not_captured: dict[str, str]) -> bool:
    return any(name == what or name.startswith(what + ".") for what in not_captured)


def undeclared_gaps(
    doc: dict[str, Any], prefix: str = "Module.", needs_grad: Callable[[Any], bool] = requires_grad
) -> list[str]:
    """What a dump leaves out without saying why: for every forward entry whose outputs need a gradient
    (a backward ran in the step), its backward entry; in it, a gradient for every output and every positional input
    that needs one; for every module's ``parameters_grad``, a gradient per parameter.  A gap is declared when
    ``not_captured`` names it or an enclosing name (the entry, its field).

    ``needs_grad(leaf)`` says which tensor leaves need a gradient: by default :func:`requires_grad` (PyTorch's leaves
    carry the flag).  MindSpore's carry none (msprobe's MindSpore dumps neither), so a MindSpore caller passes its
    own rule, e.g. :func:`floating` minus the batch it fed."""
    data = doc["data"]
    declared = {item["what"]: item["reason"] for item in doc.get("not_captured", [])}
    gaps: list[str] = []
    for name, entry in data.items():
        if ".forward" not in name or not name.startswith(prefix):
            continue
        bwd = name.replace(".forward.", ".backward.") if name.startswith(("Module.", "Cell.")) else (
            name.replace(".forward", ".backward"))
        outputs = [(p, leaf) for p, leaf in leaves(entry.get("output"), "input") if needs_grad(leaf)]
        if not outputs:
            continue
        backward = data.get(bwd)
        if backward is None:
            if not _declared(bwd, declared):
                gaps.append(f"{bwd}: no entry")
            continue
        got = dict(leaves(backward.get("input"), "input"))
        for path, _ in outputs:
            if got.get(path) is None and not _declared(f"{bwd}.{path}", declared):
                gaps.append(f"{bwd}.{path}: null")
        grads = backward.get("output") or []
        for i, leaf in enumerate(entry.get("input_args") or []):
            if needs_grad(leaf) and (i >= len(grads) or grads[i] is None) and not _declared(
                f"{bwd}.output.{i}", declared
            ):
                gaps.append(f"{bwd}.output.{i}: null")
    for name, entry in data.items():
        if not name.endswith(".parameters_grad"):
            continue
        for param, grads in entry.items():
            if not grads or any(g is None for g in grads):
                if not _declared(f"{name}.{param}", declared):
                    gaps.append(f"{name}.{param}: null")
    return gaps
