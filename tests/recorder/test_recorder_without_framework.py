"""The recorder package imports without a framework; a missing framework is a clear one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_importing_and_configuring_loads_no_framework(tmp_path: Path) -> None:
    res = _run(
        "import sys; from msprobe_cmp import PrecisionDebugger; import msprobe_cmp.recorder.adapters; "
        "from msprobe_cmp.recorder import load_config; "
        f"c = load_config(dump_path={str(tmp_path)!r}, level='mix'); "
        "print(sorted(m for m in ('mindspore', 'torch', 'sklearn') if m in sys.modules))"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_missing_mindspore_is_a_missing_framework_error(tmp_path: Path) -> None:
    # sys.modules[name] = None makes "import mindspore" fail exactly as when it is not installed.
    res = _run(
        "import sys; sys.modules['mindspore'] = None\n"
        "from msprobe_cmp import PrecisionDebugger\n"
        "from msprobe_cmp.errors import MissingFrameworkError\n"
        "try:\n"
        f"    PrecisionDebugger(dump_path={str(tmp_path)!r}, framework='mindspore')\n"
        "except MissingFrameworkError as e:\n"
        "    print('ERR', e)\n"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ERR mindspore is not installed")
    assert "pip install 'msprobe-cmp[mindspore]'" in res.stdout
    assert res.stdout.count("\n") == 1
