"""Measure what recording with msprobe-cmp's PrecisionDebugger costs per training step (issue 7).

    .venv/bin/python bench/record_overhead.py [--steps N] [--quick] [--workload mlp|transformer|all] [--repeat K]
                                              [--configs LABELS] [--workdir DIR] [--json FILE]

Two MindSpore PyNative CPU workloads, each trained with Adam:

* ``mlp``: 512 -> 4 x (Dense 512 + ReLU) -> Dense 10, batch 64 (msprobe's baseline workload).
* ``transformer``: one pre-norm transformer block (d_model 128, 4 heads, FFN 512, sequence 32,
  batch 8) built from CPU-supported ops: ``nn.Dense``, ``ops.softmax``, ``ops.bmm``, layer norm
  written with ``ops.mean``/``ops.sqrt``, tanh-approximated GELU; mean-pooled into a 10-class head.

Configurations: plain (no recorder); levels L0, L1, mix x tasks statistics, md5 (``summary_mode`` in a
config file) and tensor; and mix/statistics with step filters that exclude the timed steps:
``step=[1000]`` (nothing is ever selected: only the API wrappers are installed) and ``step=[0,1000]``
(step 0 is recorded, so every hook is installed, and steps 1.. are excluded). Each configuration runs in
a fresh Python subprocess (no state shared, no fork after MindSpore). The step time is the mean wall
time of steps 2..N (the first step, with hook installation and kernel compilation, is left out); each
step ends with ``loss.asnumpy()`` so the asynchronous CPU dispatch is finished inside the timed region.
Prints one table per workload: ms/step, ratio recorded/plain, dump size and entries recorded per step.
Default (20 steps, both workloads) takes about 3-4 minutes on 2 cores; ``--quick`` runs 6 steps and
fewer configurations.

``--alternate ROUNDS``: the measure least disturbed by other load on the machine.  One process per recorded
configuration (the step-filter ones excepted) alternates blocks of plain and recorded steps: ROUNDS times,
``--block`` plain steps with the model hooks removed (as on a step the filter excludes; the API wrappers stay
installed and only check their switch) and then ``--block`` recorded steps; the first step of each block
(hook reinstallation, caches) is not counted.  Prints the median plain and recorded step times and their
ratio, and the ratio of the two fastest steps (what the machine's other load disturbs least).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# (label, level, task, summary_mode, step filter); level None = plain run without a recorder.
CONFIGS: list[tuple[str, str | None, str, str, list[int]]] = [
    ("plain", None, "", "", []),
    ("L0 statistics", "L0", "statistics", "statistics", []),
    ("L1 statistics", "L1", "statistics", "statistics", []),
    ("mix statistics", "mix", "statistics", "statistics", []),
    ("L0 md5", "L0", "statistics", "md5", []),
    ("L1 md5", "L1", "statistics", "md5", []),
    ("mix md5", "mix", "statistics", "md5", []),
    ("L0 tensor", "L0", "tensor", "statistics", []),
    ("L1 tensor", "L1", "tensor", "statistics", []),
    ("mix tensor", "mix", "tensor", "statistics", []),
    # No step selected: the API wrappers are installed (at construction), the cell hooks never are.
    ("mix statistics, step=[1000]", "mix", "statistics", "statistics", [1000]),
    # Step 0 recorded (every hook installed), steps 1.. excluded: the timed steps are all excluded ones.
    ("mix statistics, step=[0,1000]", "mix", "statistics", "statistics", [0, 1000]),
]
QUICK = ("plain", "mix statistics", "mix md5", "mix tensor", "mix statistics, step=[1000]",
         "mix statistics, step=[0,1000]")
WORKLOADS = ("mlp", "transformer")


# ----------------------------------------------------------------------------------------------
# Worker side: runs in a fresh subprocess, imports MindSpore, prints one JSON line.


def _build(workload: str) -> tuple[Any, Any, Any, Any]:
    """``(net, loss_fn, x, y)`` of ``workload`` with fixed seeds."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    rs = np.random.RandomState(0)
    if workload == "mlp":

        class MLP(nn.Cell):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.layers = nn.CellList([nn.Dense(512, 512) for _ in range(4)])
                self.relu = nn.ReLU()
                self.head = nn.Dense(512, 10)

            def construct(self, x: Any) -> Any:
                for layer in self.layers:
                    x = self.relu(layer(x))
                return self.head(x)

        net = MLP()
        x = ms.Tensor(rs.standard_normal((64, 512)).astype(np.float32))
        y = ms.Tensor(rs.randint(0, 10, size=64).astype(np.int32))
    else:
        d_model, heads, ffn, seq, batch = 128, 4, 512, 32, 8

        class LayerNorm(nn.Cell):  # type: ignore[misc]
            """Layer norm from elementary ops (no CPU kernel for mint's layer_norm)."""

            def __init__(self, dim: int) -> None:
                super().__init__()
                self.gamma = ms.Parameter(ms.Tensor(np.ones(dim, np.float32)), name="gamma")
                self.beta = ms.Parameter(ms.Tensor(np.zeros(dim, np.float32)), name="beta")

            def construct(self, x: Any) -> Any:
                mean = ops.mean(x, -1, keep_dims=True)
                var = ops.mean((x - mean) * (x - mean), -1, keep_dims=True)
                return (x - mean) / ops.sqrt(var + 1e-5) * self.gamma + self.beta

        class Block(nn.Cell):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.ln1 = LayerNorm(d_model)
                self.qkv = nn.Dense(d_model, 3 * d_model)
                self.proj = nn.Dense(d_model, d_model)
                self.ln2 = LayerNorm(d_model)
                self.fc1 = nn.Dense(d_model, ffn)
                self.fc2 = nn.Dense(ffn, d_model)

            def construct(self, x: Any) -> Any:
                b, s, d = x.shape
                hd = d // heads
                qkv = self.qkv(self.ln1(x)).reshape(b, s, 3, heads, hd).transpose(2, 0, 3, 1, 4)
                q, k, v = qkv[0], qkv[1], qkv[2]  # [b, heads, s, hd]
                q = q.reshape(b * heads, s, hd)
                k = k.reshape(b * heads, s, hd)
                v = v.reshape(b * heads, s, hd)
                att = ops.softmax(ops.bmm(q, k.transpose(0, 2, 1)) / float(np.sqrt(hd)), axis=-1)
                o = ops.bmm(att, v).reshape(b, heads, s, hd).transpose(0, 2, 1, 3).reshape(b, s, d)
                x = x + self.proj(o)
                h = self.fc1(self.ln2(x))
                h = 0.5 * h * (1.0 + ops.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
                return x + self.fc2(h)

        class Model(nn.Cell):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.block = Block()
                self.head = nn.Dense(d_model, 10)

            def construct(self, x: Any) -> Any:
                return self.head(ops.mean(self.block(x), 1))

        net = Model()
        x = ms.Tensor(rs.standard_normal((batch, seq, d_model)).astype(np.float32))
        y = ms.Tensor(rs.randint(0, 10, size=batch).astype(np.int32))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, loss_fn, x, y


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _training(workload: str) -> tuple[Any, Any, Any, Any, Any]:
    """``(net, optimizer, grad_fn, x, y)`` of ``workload``: Adam (lr 1e-3) and ``ms.value_and_grad`` of the loss."""
    import mindspore as ms

    net, loss_fn, x, y = _build(workload)
    optimizer = ms.nn.Adam(net.trainable_params(), learning_rate=1e-3)

    def forward(x: Any, y: Any) -> Any:
        return loss_fn(net(x), y)

    return net, optimizer, ms.value_and_grad(forward, None, optimizer.parameters), x, y


def _debugger(spec: dict[str, Any]) -> Any:
    """A PrecisionDebugger configured by ``spec`` (level, task, summary_mode, and the step filter when the spec
    has one) through a config file written beside its dump path."""
    from msprobe_cmp import PrecisionDebugger

    dump, task = Path(spec["dump_path"]), spec["task"]
    config = {"dump_path": str(dump), "task": task, "level": spec["level"],
              task: {"summary_mode": spec["summary_mode"]}}
    if "step" in spec:
        config["step"] = spec["step"]
    cfg = dump.parent / f"{dump.name}.config.json"
    cfg.write_text(json.dumps(config))
    return PrecisionDebugger(cfg, framework="mindspore")


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Train ``spec["workload"]`` for ``spec["steps"]`` steps, recording per ``spec``; time every step."""
    net, optimizer, grad_fn, x, y = _training(spec["workload"])
    dump = Path(spec["dump_path"])
    debugger = _debugger(spec) if spec["level"] is not None else None
    times = []
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        if debugger is not None:
            debugger.start(net)
        loss, grads = grad_fn(x, y)
        if debugger is not None:
            debugger.stop()
        optimizer(grads)
        if debugger is not None:
            debugger.step()
        loss.asnumpy()
        times.append(time.perf_counter() - t0)
    if debugger is not None:
        debugger.close()
    entries = 0
    first = dump / "step0"
    if first.is_dir():
        for dj in first.rglob("dump.json"):
            entries += len(json.loads(dj.read_text())["data"])
    rest = times[1:] or times
    return {"mean_ms": 1000 * sum(rest) / len(rest), "first_ms": 1000 * times[0],
            "dump_bytes": _dir_size(dump) if dump.exists() else 0, "entries_per_step": entries}


def run_alternating_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Alternate blocks of plain and recorded steps of ``spec["workload"]`` in this process (see ``--alternate``)."""
    import statistics

    net, optimizer, grad_fn, x, y = _training(spec["workload"])
    dump = Path(spec["dump_path"])
    debugger = _debugger(spec)
    adapter = debugger._adapter  # the bench removes the model hooks for its plain steps

    def plain_step() -> float:
        t0 = time.perf_counter()
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        loss.asnumpy()
        return time.perf_counter() - t0

    def recorded_step() -> float:
        t0 = time.perf_counter()
        debugger.start(net)
        loss, grads = grad_fn(x, y)
        debugger.stop()
        optimizer(grads)
        debugger.step()
        loss.asnumpy()
        return time.perf_counter() - t0

    plain: list[float] = []
    recorded: list[float] = []
    block = max(2, spec["block"])
    for round_ in range(spec["rounds"] + 1):  # round 0 warms up
        adapter._park_model_hooks()
        p = [plain_step() for _ in range(block)][1:]
        r = [recorded_step() for _ in range(block)][1:]
        if round_:
            plain += p
            recorded += r
    debugger.close()
    shutil.rmtree(dump, ignore_errors=True)
    return {"plain_ms": 1000 * statistics.median(plain), "recorded_ms": 1000 * statistics.median(recorded),
            "ratio": statistics.median(recorded) / statistics.median(plain), "min_ratio": min(recorded) / min(plain),
            "steps": len(recorded)}


# ----------------------------------------------------------------------------------------------
# Driver side.


def run_config(workload: str, cfg: tuple[str, str | None, str, str, list[int]], steps: int,
               workdir: Path) -> dict[str, Any]:
    label, level, task, summary_mode, step = cfg
    dump = workdir / f"{workload}_{''.join(ch if ch.isalnum() else '_' for ch in label)}"
    spec = {"workload": workload, "level": level, "task": task, "summary_mode": summary_mode, "step": step,
            "steps": steps, "dump_path": str(dump)}
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         env=env, timeout=1800)
    shutil.rmtree(dump, ignore_errors=True)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"{workload} / {label} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return dict(json.loads(lines[-1]), label=label)


def alternate(workloads: tuple[str, ...], configs: list[tuple[str, str | None, str, str, list[int]]], rounds: int,
              block: int, workdir: Path | None, json_out: Path | None) -> int:
    """``--alternate``: one process per (workload, configuration), plain and recorded steps alternating."""
    print(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, "
          f"alternating {rounds} blocks of {block} plain and {block} recorded steps (first of each not counted)",
          flush=True)
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for workload in workloads:
            rows = []
            for label, level, task, summary_mode, _step in configs:
                dump = Path(tmp) / f"{workload}_{''.join(ch if ch.isalnum() else '_' for ch in label)}"
                spec = {"workload": workload, "level": level, "task": task, "summary_mode": summary_mode,
                        "dump_path": str(dump), "rounds": rounds, "block": block}
                env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
                res = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True,
                                     text=True, env=env, timeout=1800)
                lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
                if res.returncode != 0 or not lines:
                    raise RuntimeError(f"{workload} / {label} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
                row = dict(json.loads(lines[-1]), label=label)
                rows.append(row)
                print(f"  {workload:11s} {label:16s} plain {row['plain_ms']:7.1f} ms, "
                      f"recorded {row['recorded_ms']:7.1f} ms: {row['ratio']:.2f}x "
                      f"(fastest steps {row['min_ratio']:.2f}x)",
                      flush=True)
            results[workload] = rows
            print(f"\n{workload}:\n| config | plain ms/step | recorded ms/step | recorded/plain | fastest/fastest |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for r in rows:
                print(f"| {r['label']} | {r['plain_ms']:.1f} | {r['recorded_ms']:.1f} | {r['ratio']:.2f}x "
                      f"| {r['min_ratio']:.2f}x |")
            print(flush=True)
    if json_out:
        json_out.write_text(json.dumps(results, indent=1))
    return 0


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="training steps per configuration (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="6 steps; only plain, mix statistics/md5/tensor and the "
                   "excluded-step runs")
    p.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    p.add_argument("--configs", help="only these configurations, by label, ';'-separated (plain always runs), e.g. "
                   "'mix statistics;mix statistics, step=[0,1000]'")
    p.add_argument("--repeat", type=int, default=1, help="run each configuration this many times and keep the "
                   "median step time (default: %(default)s)")
    p.add_argument("--workdir", type=Path, help="where the dumps go while measured (default: a temporary directory)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--alternate", type=int, metavar="ROUNDS", help="instead: alternate plain and recorded steps "
                   "in one process per configuration, ROUNDS blocks of each (see the module docstring)")
    p.add_argument("--block", type=int, default=4, help="steps per block with --alternate, the first not counted "
                   "(default: %(default)s)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(run_alternating_worker(spec) if spec.get("rounds") else run_worker(spec)))
        return 0
    steps = 6 if args.quick and args.steps == 20 else args.steps
    if steps < 2:
        p.error("--steps must be at least 2 (the first step is not counted)")
    configs = [c for c in CONFIGS if not args.quick or c[0] in QUICK]
    if args.configs:
        wanted = {w.strip() for w in args.configs.split(";")} | {"plain"}
        unknown = wanted - {c[0] for c in CONFIGS}
        if unknown:
            p.error(f"--configs: unknown {', '.join(sorted(unknown))}; known: {'; '.join(c[0] for c in CONFIGS)}")
        configs = [c for c in CONFIGS if c[0] in wanted]
    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    if args.alternate:
        return alternate(workloads, [c for c in configs if c[1] is not None and not c[4]], args.alternate, args.block,
                         args.workdir, args.json)
    print(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, "
          f"{steps} steps per run (mean of steps 2..{steps})", flush=True)
    all_results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for workload in workloads:
            results = []
            for cfg in configs:
                runs = sorted((run_config(workload, cfg, steps, Path(tmp)) for _ in range(max(1, args.repeat))),
                              key=lambda r: r["mean_ms"])
                r = dict(runs[len(runs) // 2], all_ms=[x["mean_ms"] for x in runs])
                results.append(r)
                spread = f"  (runs: {', '.join(f'{x:.1f}' for x in r['all_ms'])})" if len(runs) > 1 else ""
                print(f"  {workload:11s} {r['label']:30s} {r['mean_ms']:8.1f} ms/step{spread}", flush=True)
            all_results[workload] = results
            plain = results[0]["mean_ms"]
            print(f"\n{workload}: plain {plain:.1f} ms/step")
            print(f"| config | ms/step | recorded/plain | dump size ({steps} steps) | entries/step |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for r in results:
                print(f"| {r['label']} | {r['mean_ms']:.1f} | {r['mean_ms'] / plain:.2f}x | {_size(r['dump_bytes'])} "
                      f"| {r['entries_per_step']} |")
            print(flush=True)
    if args.json:
        args.json.write_text(json.dumps(all_results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
