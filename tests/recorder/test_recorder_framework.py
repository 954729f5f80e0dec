"""Which adapter PrecisionDebugger picks: explicit framework= wins, otherwise what the process imported."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.debugger import detect_framework

ROOT = Path(__file__).resolve().parents[2]


def _fake_torch(tensor_module: str) -> types.ModuleType:
    mod = types.ModuleType("torch")
    base = type("Tensor", (), {"__module__": tensor_module})
    mod.Tensor = type("Tensor", (base,), {"__module__": "torch"})  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("torch", "mindspore", "mindtorch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("given", "expected"),
    [("mindspore", "mindspore"), ("pytorch", "pytorch"), ("torch", "pytorch"), ("MindTorch", "mindtorch")],
)
def test_explicit_framework_always_wins(modules: pytest.MonkeyPatch, given: str, expected: str) -> None:
    modules.setitem(sys.modules, "torch", _fake_torch("torch._C"))
    modules.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    assert detect_framework(given) == expected


def test_unknown_framework_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="framework: expected one of mindspore, pytorch"):
        detect_framework("tensorflow")


def test_real_torch_alone_is_pytorch(modules: pytest.MonkeyPatch) -> None:
    modules.setitem(sys.modules, "torch", _fake_torch("torch._C"))
    assert detect_framework() == "pytorch"


def test_mindspore_alone_is_mindspore(modules: pytest.MonkeyPatch) -> None:
    modules.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    assert detect_framework() == "mindspore"


def test_torch_whose_tensor_is_a_mindspore_tensor_is_mindtorch(modules: pytest.MonkeyPatch) -> None:
    modules.setitem(sys.modules, "torch", _fake_torch("mindspore.common.tensor"))
    modules.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    assert detect_framework() == "mindtorch"


def test_mindtorch_imported_before_torch_is_mindtorch(modules: pytest.MonkeyPatch) -> None:
    modules.setitem(sys.modules, "mindtorch", types.ModuleType("mindtorch"))
    modules.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    assert detect_framework() == "mindtorch"


def test_real_torch_and_mindspore_together_need_framework(modules: pytest.MonkeyPatch) -> None:
    modules.setitem(sys.modules, "torch", _fake_torch("torch._C"))
    modules.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    with pytest.raises(ConfigError, match="pass framework='pytorch' or framework='mindspore'"):
        detect_framework()


def test_debugger_refuses_to_guess_in_this_process_when_both_are_imported(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("mindspore")
    from msprobe_cmp import PrecisionDebugger

    with pytest.raises(ConfigError, match="framework"):
        PrecisionDebugger(dump_path=tmp_path, level="L1")


@pytest.mark.torch
def test_a_torch_script_needs_no_framework_argument(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code = (
        "import json, torch\n"
        "from msprobe_cmp import PrecisionDebugger\n"
        f"d = PrecisionDebugger(dump_path={str(tmp_path)!r}, level='L1')\n"
        "d.start(); torch.relu(torch.ones(2)); d.stop(); d.close()\n"
        f"doc = json.load(open({str(tmp_path / 'step0' / 'rank' / 'dump.json')!r}))\n"
        "print(d.framework, doc['framework'], list(doc['data']))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "pytorch pytorch ['Torch.relu.0.forward']"


def test_missing_torch_is_a_missing_framework_error(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from msprobe_cmp import PrecisionDebugger\n"
        "from msprobe_cmp.errors import MissingFrameworkError\n"
        "try:\n"
        f"    PrecisionDebugger(dump_path={str(tmp_path)!r}, framework='pytorch')\n"
        "except MissingFrameworkError as e:\n"
        "    print('ERR', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ERR torch is not installed")
    assert res.stdout.count("\n") == 1
