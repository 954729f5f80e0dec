"""Static checks run as part of the test suite: ruff, mypy on msprobe_cmp/, and the import layers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff():
    res = _run([_tool("ruff"), "check", "msprobe_cmp", "tests", "examples", "bench"]
               if (ROOT / "bench").exists() else [_tool("ruff"), "check", "msprobe_cmp", "tests", "examples"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy():
    res = _run([sys.executable, "-m", "mypy", "msprobe_cmp"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_import_layers():
    res = _run([_tool("lint-imports")])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "broken" not in res.stdout.split("Contracts:")[-1].lower() or " 0 broken" in res.stdout


def test_only_adapters_import_a_framework():
    pattern = re.compile(r"^\s*(import|from)\s+(mindspore|torch|mindtorch)\b", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "msprobe_cmp").rglob("*.py")
        if "adapters" not in p.parts and pattern.search(p.read_text())
    ]
    assert offenders == []


def test_importing_the_package_loads_no_framework():
    code = ("import sys, msprobe_cmp, msprobe_cmp.comparator, msprobe_cmp.reports, msprobe_cmp.cli; "
            "print(sorted(m for m in ('mindspore', 'torch', 'mindtorch') if m in sys.modules))")
    res = _run([sys.executable, "-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def _public_defs_without_docstring(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text())
    missing = [] if ast.get_docstring(tree) else [f"{path}: module"]

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_"):
                    continue  # private, or a dunder such as __init__ (documented on its class)
                if not ast.get_docstring(node):
                    missing.append(f"{path}:{node.lineno} {prefix}{node.name}")
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")  # methods; nested functions are not public

    visit(tree.body, "")
    return missing


def test_public_functions_and_classes_have_docstrings():
    missing = [m for p in sorted((ROOT / "msprobe_cmp").rglob("*.py")) for m in _public_defs_without_docstring(p)]
    assert missing == []
