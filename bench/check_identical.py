"""Check that two source trees of msprobe-cmp compare dumps to the same values (for speed work on the reader and
the comparator, issue 7).

    git worktree add /tmp/base HEAD          # BEFORE changing anything
    ... change the code ...
    .venv/bin/python bench/check_identical.py --base /tmp/base [--entries 10000] [--workdir DIR]

Writes a set of dump pairs once, then, for each pair and each tree (``--base`` and this repository), runs a
child process with ``PYTHONPATH=<tree>`` that loads both sides, compares them and writes the five reports
(``msprobe_cmp.cli.write_reports``): comparison.json and the HTML page's data block are compared parsed, the
CSV, junit.xml, summary.md and the rest of the HTML as text.  Prints one line per pair and exits 1 when any
output differs.

The pairs: the bench's statistics pair of ``--entries`` entries (``bench/compare_speed.py``); the mindstudio-probe
1.2.2 fixtures under ``tests/data`` (statistics, tensor, and MindSpore <-> PyTorch statistics both ways); an md5
pair; and a "hard" statistics pair written as raw JSON (so that both the orjson and the json parse paths run):
failures, warnings, NaN/+-Inf statistics (as the ``NaN``/``Infinity`` tokens msprobe writes), missing
statistics, NaN-count differences and invalid counts, shape and dtype mismatches, compatible dtypes, values,
nulls, empty tensors, backward and parameters_grad entries, and entries present on one side only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "data" / "msprobe-1.2.2-mindspore"


_DATA_OPEN = '<script type="application/json" id="report-data">'


def _child(tree: Path, a: Path, b: Path, out: Path) -> None:
    """Compare a with b using the code in ``tree`` and write the five reports (``cli.write_reports``) to out/."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from msprobe_cmp import compare, load_dump\n"
        "from msprobe_cmp.cli import write_reports\n"
        "write_reports(compare(load_dump(sys.argv[1]), load_dump(sys.argv[2])), Path(sys.argv[3]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", code, str(a), str(b), str(out)], env=env, capture_output=True,
                         text=True, cwd=str(tree), timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"compare in {tree} failed:\n{res.stderr[-3000:]}")


def _reports(out: Path) -> dict[str, Any]:
    """The five reports of one tree, in the form they are compared in: comparison.json and the HTML page's data
    block parsed (same values, not necessarily the same bytes), everything else as text."""
    html = (out / "report.html").read_text("utf-8")
    start = html.index(_DATA_OPEN) + len(_DATA_OPEN)
    end = html.index("</script>", start)
    return {
        "json": json.loads((out / "comparison.json").read_text("utf-8")),
        "csv": (out / "comparison.csv").read_text("utf-8"),
        "junit": (out / "junit.xml").read_text("utf-8"),
        "markdown": (out / "summary.md").read_text("utf-8"),
        "page data": json.loads(html[start:end]),
        "page": html[:start] + html[end:],
    }


def _stats(rs: random.Random, scale: float = 1.0) -> dict[str, Any]:
    a = [rs.gauss(0, scale) for _ in range(3)]
    return {"Max": max(a), "Min": min(a), "Mean": sum(a) / 3, "Norm": math.sqrt(sum(x * x for x in a))}


def _leaf(rs: random.Random, dtype: str = "Float32", shape: tuple[int, ...] = (4, 8), **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape), **_stats(rs)}
    out.update(kw)
    return out


def _hard_pair(root: Path, n: int = 600) -> None:
    """Write the "hard" pair (module docstring) as raw JSON under root/A and root/B."""
    rs = random.Random(7)
    sides: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    counts = {"nan_count": 0, "pos_inf_count": 0, "neg_inf_count": 0}
    for i in range(n):
        name = f"Functional.op{i % 7}.{i // 7}.forward"
        la = _leaf(rs, **counts)
        kind = i % 23
        lb = dict(la)
        noise = 1 + 1e-4 * rs.gauss(0, 1)
        for k in ("Max", "Min", "Mean", "Norm"):
            lb[k] = la[k] * noise
        if kind == 1:  # failure: a large difference
            lb["Max"] = la["Max"] + 5.0
        elif kind == 2:  # warning: a relative change above 0.5 of a statistic, above 1e-3 in value
            lb["Mean"] = la["Mean"] * 3 + 0.01
        elif kind == 3:
            la["Max"] = float("nan")
        elif kind == 4:
            la["Max"] = lb["Max"] = float("inf")
        elif kind == 5:
            la["Min"] = float("-inf")
        elif kind == 6:
            la["Norm"] = None
        elif kind == 7:
            for k in ("Max", "Min", "Mean", "Norm"):
                la[k] = lb[k] = None
        elif kind == 8:
            la["nan_count"] = 2
        elif kind == 9:
            lb["nan_count"] = -1  # not a valid count
        elif kind == 10:
            lb["shape"] = [4, 9]
        elif kind == 11:
            lb["dtype"] = "Int32"
        elif kind == 12:
            lb["dtype"] = "Float16"
        elif kind == 13:
            la["shape"] = lb["shape"] = [0, 8]
        elif kind == 14:
            lb = la = dict(la)  # identical
        elif kind == 15:
            la["pos_inf_count"] = 1.0  # an integral float count
            lb["pos_inf_count"] = 1
        elif kind == 16:
            la["Max"] = 3  # an integer statistic
            lb["Max"] = 3.0000001
        value_a: Any = {"type": "int", "value": i % 3}
        value_b: Any = {"type": "int", "value": (i % 3) if kind != 17 else 99}
        if kind == 18:
            value_a, value_b = {"type": "float", "value": 0.5}, {"type": "float", "value": 0.5 + 1e-2}
        out_a: Any = [la]
        out_b: Any = [lb]
        if kind == 19:
            out_a, out_b = [None], [lb]
        elif kind == 20:
            out_a, out_b = [None], [None]
        sides["A"][name] = {"input_args": [_leaf(rs, **counts), value_a], "input_kwargs": {"dim": value_a},
                            "output": out_a}
        sides["B"][name] = {"input_args": [_leaf(rs, **counts), value_b], "input_kwargs": {"dim": value_b},
                            "output": out_b}
        if kind == 21:  # on one side only
            sides["B"][f"Functional.extra.{i}.forward"] = {"input_args": [_leaf(rs)], "input_kwargs": {},
                                                            "output": [_leaf(rs)]}
        if kind == 22:
            for side in ("A", "B"):
                cell = f"Cell.layer{i}.Dense"
                sides[side][f"{cell}.forward.0"] = {"input_args": [_leaf(rs)], "input_kwargs": {},
                                                    "output": [_leaf(rs)],
                                                    "parameters": {"weight": _leaf(rs), "bias": _leaf(rs)}}
                sides[side][f"{cell}.parameters_grad"] = {"weight": [_leaf(rs)], "bias": [_leaf(rs)]}
                sides[side][f"{cell}.backward.0"] = {"input": [_leaf(rs)], "output": [_leaf(rs)]}
    for side, data in sides.items():
        rank = root / side / "step0" / "rank0"
        rank.mkdir(parents=True)
        doc = {"task": "statistics", "level": "mix", "framework": "mindspore", "dump_data_dir": None, "data": data}
        (rank / "dump.json").write_text(json.dumps(doc))  # NaN / Infinity tokens, as msprobe writes them
        (rank / "stack.json").write_text(json.dumps({k: [f"File m.py, line {j}"] for j, k in enumerate(data)}))
        (rank / "construct.json").write_text(json.dumps({k: None for k in data}))
    # the same pair without any non-finite token: read through orjson
    clean = root.parent / (root.name + "_finite")
    for side, data in sides.items():
        rank = clean / side / "step0" / "rank0"
        rank.mkdir(parents=True)
        fixed = json.loads(json.dumps(data).replace("NaN", "1e300").replace("-Infinity", "-1e308")
                           .replace("Infinity", "1e308"))
        doc = {"task": "statistics", "level": "mix", "framework": "mindspore", "dump_data_dir": None, "data": fixed}
        (rank / "dump.json").write_text(json.dumps(doc, indent=1))


def _md5_pair(root: Path) -> None:
    rs = random.Random(3)
    for side in ("A", "B"):
        data = {}
        for i in range(50):
            md5 = f"{i:08x}" if side == "A" or i % 5 else f"{i + 1:08x}"
            data[f"Functional.op.{i}.forward"] = {"input_args": [_leaf(rs, md5=md5)], "input_kwargs": {},
                                                  "output": [_leaf(rs, md5=md5)]}
        rank = root / side / "step0" / "rank0"
        rank.mkdir(parents=True)
        doc = {"task": "statistics", "level": "L1", "framework": "mindspore", "dump_data_dir": None,
               "summary_mode": "md5", "data": data}
        (rank / "dump.json").write_text(json.dumps(doc))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the other source tree (e.g. a git worktree of HEAD)")
    p.add_argument("--entries", type=int, default=10000, help="entries of the bench pair (default: %(default)s)")
    p.add_argument("--workdir", type=Path, help="where the dumps are written (default: a temporary directory)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "bench"))
    from compare_speed import make_statistics_pair

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        t = Path(tmp)
        make_statistics_pair(t / "bench", args.entries)
        _hard_pair(t / "hard")
        _md5_pair(t / "md5")
        pairs = {
            f"bench {args.entries}": (t / "bench" / "A", t / "bench" / "B"),
            "hard (NaN tokens: json parse)": (t / "hard" / "A", t / "hard" / "B"),
            "hard (finite: orjson parse)": (t / "hard_finite" / "A", t / "hard_finite" / "B"),
            "md5": (t / "md5" / "A", t / "md5" / "B"),
            "fixtures statistics": (FIXTURES / "statistics_b", FIXTURES / "statistics_a"),
            "fixtures tensor": (FIXTURES / "tensor_b", FIXTURES / "tensor_a"),
            "fixtures MindSpore vs PyTorch": (FIXTURES / "statistics_a", FIXTURES / "torch_statistics_a"),
            "fixtures PyTorch vs MindSpore": (FIXTURES / "torch_statistics_a", FIXTURES / "statistics_a"),
        }
        failed = 0
        for label, (a, b) in pairs.items():
            outs = []
            for k, tree in enumerate((args.base.resolve(), REPO)):
                out = t / f"out{k}"
                shutil.rmtree(out, ignore_errors=True)
                _child(tree, a, b, out)
                outs.append(_reports(out))
            base, new = outs
            rows = sum(len(u["rows"]) for u in new["json"]["units"]) if "units" in new["json"] else "?"
            differ = [k for k in base if json.dumps(base[k], sort_keys=True) != json.dumps(new[k], sort_keys=True)]
            failed += bool(differ)
            print(f"{'DIFFERENT' if differ else 'same'}: {label} ({rows} rows; "
                  f"{'differ: ' + ', '.join(differ) if differ else ', '.join(base) + ' equal'})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
