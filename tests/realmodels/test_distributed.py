"""Distributed runs on one machine: a 2-rank PyTorch DistributedDataParallel training and a 2-rank MindSpore
(CPU, dynamic cluster) data-parallel training, each rank recorded into its own ``step<N>/rank<R>/``.

Each rank is a separate Python process running this file as a script (``python test_distributed.py <kind> ...``);
a launch is killed and fails after :data:`LAUNCH_TIMEOUT` seconds, so a hang cannot block CI.  Only the loopback
interface is used: torch's ranks meet through a :class:`torch.distributed.FileStore` (torch's TCPStore would
listen on every interface) and talk over gloo bound to ``lo`` (``GLOO_SOCKET_IFNAME=lo``: gloo listens on
127.0.0.1, on ports the kernel picks free); MindSpore's scheduler and workers listen on 127.0.0.1
(``MS_SCHED_HOST``, a free ``MS_SCHED_PORT``).

What is checked against values computed here independently (numpy, float64, no framework, no DDP):

* one ``step<N>/rank<R>/dump.json`` per step and rank;
* ``Distributed.*`` entries for the collectives the step calls explicitly, with their input values and their
  group (torch: ``{"type": "torch.distributed.ProcessGroup", "value": [0, 1]}``, the group's global ranks);
* ``parameters_grad``: the gradient each rank computed **locally**, before the gradients are averaged across
  ranks, while the training itself uses their mean.  Under DDP the recorder's parameter hooks are
  ``Tensor.register_hook`` hooks, which autograd runs before it accumulates the gradient into ``.grad``; DDP's
  reducer hooks on that accumulation and writes the averaged gradients into ``.grad`` only when the backward
  finishes (a ``register_post_accumulate_grad_hook`` hook still sees the local gradient too);
* two identical torch runs compare as a pass, rank by rank;
* a rank list that names no rank of the job warns at ``start()``; each rank left out says it is not recorded.

MindSpore 2.10's CPU wheel runs two ranks, but of ``mindspore.communication.comm_func`` only ``broadcast`` (with
an explicit ``group=GlobalComm.WORLD_COMM_GROUP``: the default ``"hccl_world_group"`` does not exist on CPU)
works there: ``all_reduce`` fails with "Create kernelmod for op InnerCommAllReduce failed",
``all_gather_into_tensor`` / ``reduce_scatter_tensor`` with "The kernel InnerCommAllGather (InnerCommReduceScatter)
unregistered", ``barrier``, ``reduce``, ``scatter_tensor`` and ``gather_into_tensor`` with "Unsupported op [...] on
CPU", ``recv`` with "The kernel InnerCommIrecv unregistered".  The MindSpore run averages its gradients with
``nn.DistributedGradReducer`` (the ``AllReduce`` Primitive, which has a CPU kernel).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

WORLD = 2
STEPS = 2
LR = 0.1
#: Layer sizes of the model (fc1: IN → HIDDEN, ReLU, fc2: HIDDEN → OUT), batch size per rank.
IN, HIDDEN, OUT, BATCH = 4, 8, 3, 5
#: Seconds a whole 2-rank launch may take before its processes are killed.
LAUNCH_TIMEOUT = 90.0
#: The group the explicit collectives get (every rank of the job).
GROUP = [0, 1]


# ----------------------------------------------------------------- the data and model, in numpy


def initial_parameters() -> dict[str, np.ndarray]:
    """The model's starting parameters (float32), the same on every rank: ``fc1.weight`` ... ``fc2.bias``."""
    rng = np.random.default_rng(2024)
    return {
        "fc1.weight": rng.uniform(-0.5, 0.5, (HIDDEN, IN)).astype(np.float32),
        "fc1.bias": rng.uniform(-0.5, 0.5, HIDDEN).astype(np.float32),
        "fc2.weight": rng.uniform(-0.5, 0.5, (OUT, HIDDEN)).astype(np.float32),
        "fc2.bias": rng.uniform(-0.5, 0.5, OUT).astype(np.float32),
    }


def batch(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s batch of step ``step`` (inputs, targets; float32): different data on every rank."""
    rng = np.random.default_rng(1000 * step + rank)
    x = rng.normal(size=(BATCH, IN)).astype(np.float32)
    y = rng.normal(size=(BATCH, OUT)).astype(np.float32)
    return x, y


def reference_gradients(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of the mean squared error of ``fc2(relu(fc1(x)))`` w.r.t. every parameter, by hand in float64."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    h_pre = x64 @ p["fc1.weight"].T + p["fc1.bias"]
    h = np.maximum(h_pre, 0.0)
    out = h @ p["fc2.weight"].T + p["fc2.bias"]
    d_out = 2.0 * (out - y64) / out.size
    d_h = (d_out @ p["fc2.weight"]) * (h_pre > 0)
    return {
        "fc1.weight": d_h.T @ x64,
        "fc1.bias": d_h.sum(axis=0),
        "fc2.weight": d_out.T @ h,
        "fc2.bias": d_out.sum(axis=0),
    }


def reference_run() -> list[dict[str, Any]]:
    """Per step: the parameters the step starts from, each rank's local gradients and their mean (what a
    data-parallel training trains with), computed in numpy without any framework; plain SGD with :data:`LR`."""
    params = {k: v.astype(np.float64) for k, v in initial_parameters().items()}
    steps = []
    for step in range(STEPS):
        local = [reference_gradients(params, *batch(rank, step)) for rank in range(WORLD)]
        mean = {k: sum(g[k] for g in local) / WORLD for k in params}
        steps.append({"params": dict(params), "local": local, "mean": mean})
        params = {k: params[k] - LR * mean[k] for k in params}
    return steps


def stats(array: np.ndarray) -> dict[str, float]:
    """Max, Min, Mean, Norm of ``array`` in float64 (dump.json's statistics keys)."""
    a = np.asarray(array, dtype=np.float64)
    return {"Max": a.max(), "Min": a.min(), "Mean": a.mean(), "Norm": float(np.sqrt((a * a).sum()))}


def assert_stats(leaf: dict[str, Any], array: np.ndarray, what: str, rel: float = 1e-6) -> None:
    """The recorded statistics of ``leaf`` equal ``array``'s within ``rel`` relative to the tensor's scale (its
    largest magnitude; the Norm to itself).  The recording computed in float32, where an element or a mean that
    cancels (a sum of terms of both signs) is only as exact as the terms it sums, not as its own magnitude."""
    want = stats(array)
    scale = float(np.abs(np.asarray(array, dtype=np.float64)).max())
    for key, value in want.items():
        bound = rel * (abs(value) if key == "Norm" else scale) + 1e-12
        assert abs(leaf[key] - value) <= bound, f"{what} {key}: recorded {leaf[key]!r}, expected {value!r}"


# ----------------------------------------------------------------- the workers (one rank, one process)


def torch_worker(rank: int, dump: str, result: str, rank_list: list[int] | None) -> None:
    """One rank of the DDP training: :data:`STEPS` recorded steps of SGD on a small MLP wrapped in
    ``DistributedDataParallel``, each with an explicit ``all_reduce`` and ``broadcast`` on a group of
    :data:`GROUP`.  Writes what only the process can see (``.grad`` after the backward, the collectives'
    results) to ``result`` as JSON.  The rendezvous file is ``$DIST_TEST_STORE``."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from msprobe_cmp import PrecisionDebugger

    torch.set_num_threads(1)
    store = dist.FileStore(os.environ["DIST_TEST_STORE"], WORLD)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
    try:
        group = dist.new_group(GROUP)

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc1 = torch.nn.Linear(IN, HIDDEN)
                self.fc2 = torch.nn.Linear(HIDDEN, OUT)

            def forward(self, x: Any) -> Any:
                return self.fc2(torch.relu(self.fc1(x)))

        net = Net()
        with torch.no_grad():
            for name, value in initial_parameters().items():
                net.get_parameter(name).copy_(torch.from_numpy(value))
        model = DistributedDataParallel(net)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        options: dict[str, Any] = {} if rank_list is None else {"rank": rank_list}
        dbg = PrecisionDebugger(dump_path=dump, level="mix", task="statistics", framework="pytorch", **options)
        out: dict[str, Any] = {"grad": [], "all_reduce": [], "broadcast": []}
        for step in range(STEPS):
            x, y = (torch.from_numpy(a) for a in batch(rank, step))
            opt.zero_grad()
            dbg.start(model)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            reduced = torch.full((3,), float(rank + 1))
            dist.all_reduce(reduced, group=group)
            sent = torch.arange(3, dtype=torch.float32) * (rank + 1) + step  # rank 0's values reach every rank
            dist.broadcast(sent, src=0, group=group)
            dbg.stop()
            out["grad"].append({n: p.grad.tolist() for n, p in net.named_parameters()})
            out["all_reduce"].append(reduced.tolist())
            out["broadcast"].append(sent.tolist())
            opt.step()
            dbg.step()
        dbg.close()
        Path(result).write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def mindspore_worker(rank: int, dump: str, result: str, rank_list: list[int] | None) -> None:
    """One rank (``MS_NODE_ID``) of a MindSpore CPU data-parallel training joined through the dynamic-cluster
    environment variables: :data:`STEPS` recorded steps of the same MLP under ``value_and_grad``, each with an
    explicit ``comm_func.broadcast``; the gradients are averaged by ``nn.DistributedGradReducer`` outside the
    recording, then SGD.  Writes the averaged gradients and the broadcast's result to ``result`` as JSON.  Then
    starts a second debugger whose rank list (``[5]``) names no rank of the job.  Run with ``MS_ROLE=MS_SCHED``
    it is the scheduler: ``init()`` serves the cluster and ends the process."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.communication import GlobalComm, comm_func, init

    from msprobe_cmp import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(IN, HIDDEN)
            self.fc2 = nn.Dense(HIDDEN, OUT)
            self.relu = nn.ReLU()

        def construct(self, x: Any) -> Any:
            return self.fc2(self.relu(self.fc1(x)))

    net = Net()
    params = dict(net.parameters_and_names())
    for name, value in initial_parameters().items():
        params[name].set_data(ms.Tensor(value))
    opt = nn.SGD(net.trainable_params(), learning_rate=LR)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    reducer = nn.DistributedGradReducer(opt.parameters, mean=True, degree=WORLD)
    options: dict[str, Any] = {} if rank_list is None else {"rank": rank_list}
    dbg = PrecisionDebugger(dump_path=dump, level="mix", task="statistics", framework="mindspore", **options)
    out: dict[str, Any] = {"grad": [], "broadcast": []}
    for step in range(STEPS):
        x, y = (ms.Tensor(a) for a in batch(rank, step))
        dbg.start(net)
        _, grads = grad_fn(x, y)
        sent = ms.Tensor(np.arange(3, dtype=np.float32) * (rank + 1) + step)
        received = comm_func.broadcast(sent, 0, group=GlobalComm.WORLD_COMM_GROUP)
        dbg.stop()
        grads = reducer(grads)
        out["grad"].append({p.name: g.asnumpy().tolist() for p, g in zip(opt.parameters, grads, strict=True)})
        out["broadcast"].append(received.asnumpy().tolist())
        opt(grads)
        dbg.step()
    dbg.close()
    # Then a rank list naming no rank of this job: start() warns, nothing is recorded.
    unmatched = PrecisionDebugger(dump_path=f"{dump}_unmatched", level="mix", framework="mindspore", rank=[5])
    unmatched.start(net)
    unmatched.stop()
    unmatched.close()
    Path(result).write_text(json.dumps(out))


WORKERS = {"torch": torch_worker, "mindspore": mindspore_worker}


# ----------------------------------------------------------------- launching the ranks


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(kind: str, tmp: Path, dump: Path, rank_list: list[int] | None = None) -> list[dict[str, Any]]:
    """Run the ``kind`` worker as :data:`WORLD` rank processes (MindSpore: and a scheduler); returns each rank's
    result JSON with its log (stdout and stderr) under ``"log"``.  Kills every process and fails when the
    launch takes longer than :data:`LAUNCH_TIMEOUT` or a rank fails."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOG_v": "3"}
    if kind == "torch":
        env |= {"GLOO_SOCKET_IFNAME": "lo", "DIST_TEST_STORE": str(tmp / "store")}
        roles: list[dict[str, str]] = [{} for _ in range(WORLD)]
    else:
        env |= {"MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(free_port()), "MS_WORKER_NUM": str(WORLD)}
        roles = [{"MS_ROLE": "MS_WORKER", "MS_NODE_ID": str(r)} for r in range(WORLD)] + [{"MS_ROLE": "MS_SCHED"}]
    procs, logs = [], []
    for i, role in enumerate(roles):
        log = tmp / (f"rank{i}.log" if i < WORLD else "scheduler.log")
        logs.append(log)
        args = [sys.executable, __file__, kind, str(i), str(dump), str(tmp / f"result{i}.json"), json.dumps(rank_list)]
        with log.open("w") as f:
            procs.append(subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env | role, cwd=tmp))
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    try:
        for proc in procs[:WORLD]:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if len(procs) > WORLD:  # the scheduler ends when it has seen every worker leave
            procs[WORLD].wait(timeout=max(10.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        tails = " | ".join(f"{log.name}: {log.read_text()[-1500:]}" for log in logs)
        pytest.fail(f"the {WORLD}-rank {kind} run took more than {LAUNCH_TIMEOUT:.0f} s: {tails}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, log in zip(procs[:WORLD], logs, strict=False):
        assert proc.returncode == 0, f"{log.name} failed ({proc.returncode}):\n{log.read_text()[-4000:]}"
    results = []
    for rank in range(WORLD):
        result = json.loads((tmp / f"result{rank}.json").read_text())
        result["log"] = logs[rank].read_text()
        results.append(result)
    return results


def dump_json(root: Path, step: int, rank: int) -> dict[str, Any]:
    """``root/step<step>/rank<rank>/dump.json``."""
    return json.loads((root / f"step{step}" / f"rank{rank}" / "dump.json").read_text())


def log_lines(result: dict[str, Any], level: str, text: str) -> list[str]:
    """The lines of a rank's log that msprobe-cmp logged at ``level`` and that contain ``text``."""
    return [line for line in result["log"].splitlines() if line.startswith(f"{level} msprobe_cmp") and text in line]


def assert_one_directory_per_step_and_rank(dump: Path) -> None:
    """``dump`` holds ``step0..`` with ``rank0..`` each holding a dump.json, and nothing else."""
    assert sorted(p.name for p in dump.iterdir()) == [f"step{s}" for s in range(STEPS)]
    for step in range(STEPS):
        assert sorted(p.name for p in (dump / f"step{step}").iterdir()) == [f"rank{r}" for r in range(WORLD)]
        for rank in range(WORLD):
            assert (dump / f"step{step}" / f"rank{rank}" / "dump.json").is_file()


def assert_local_parameters_grad(dump: Path, prefix: str, cls: str) -> None:
    """Every step's recorded ``parameters_grad`` of ``fc1``/``fc2`` are the rank's own gradients (not their
    mean), and the parameters each step trains from are those of SGD with the mean gradients."""
    ref = reference_run()
    for step in range(STEPS):
        for rank in range(WORLD):
            data = dump_json(dump, step, rank)["data"]
            for layer in ("fc1", "fc2"):
                forward = data[f"{prefix}.{layer}.{cls}.forward.0"]
                grads = data[f"{prefix}.{layer}.{cls}.parameters_grad"]
                for p in ("weight", "bias"):
                    name = f"{layer}.{p}"
                    assert_stats(forward["parameters"][p], ref[step]["params"][name], f"{name} step {step}")
                    (leaf,) = grads[p] if isinstance(grads[p], list) else [grads[p]]
                    what = f"{name} gradient step {step} rank {rank}"
                    assert_stats(leaf, ref[step]["local"][rank][name], what)
                    mean = stats(ref[step]["mean"][name])  # the ranks' data differ: the mean is another tensor
                    assert abs(leaf["Norm"] - mean["Norm"]) > 1e-4 * mean["Norm"], what


def assert_trained_with_mean_gradients(results: list[dict[str, Any]], names: dict[str, str]) -> None:
    """The gradients each rank trained with (``names``: reference name → the worker's name) are the mean of
    the ranks' local gradients."""
    ref = reference_run()
    for step in range(STEPS):
        for rank in range(WORLD):
            for name, mean in ref[step]["mean"].items():
                got = np.asarray(results[rank]["grad"][step][names[name]], dtype=np.float64)
                error = float(np.abs(got - mean).max())  # relative to the tensor's scale, as assert_stats
                assert error <= 1e-6 * float(np.abs(mean).max()), f"{name} step {step} rank {rank}: {error}"


# ----------------------------------------------------------------- PyTorch


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """Two identical recorded 2-rank DDP runs: their dump roots and per-rank results.  The second lists its
    ranks explicitly, with one that does not exist (``rank=[0, 1, 5]``): it records both ranks all the same."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("ddp")
    a = launch("torch", base / "a", base / "dump_a")
    b = launch("torch", base / "b", base / "dump_b", rank_list=[0, 1, 5])
    return base / "dump_a", base / "dump_b", a, b


DdpRuns = tuple[Path, Path, list[dict[str, Any]], list[dict[str, Any]]]


@pytest.mark.torch
def test_ddp_records_one_directory_per_step_and_rank(ddp_runs: DdpRuns) -> None:
    dump_a, dump_b, a, _ = ddp_runs
    assert_one_directory_per_step_and_rank(dump_a)
    assert_one_directory_per_step_and_rank(dump_b)
    # The training is DDP's: after the backward every rank holds the mean of the ranks' gradients.
    assert_trained_with_mean_gradients(a, {n: n for n in initial_parameters()})


@pytest.mark.torch
def test_ddp_explicit_collectives_are_recorded_with_their_group(ddp_runs: DdpRuns) -> None:
    dump, _, results, _ = ddp_runs
    group = {"type": "torch.distributed.ProcessGroup", "value": GROUP}
    for step in range(STEPS):
        for rank in range(WORLD):
            data = dump_json(dump, step, rank)["data"]
            distributed = sorted(n for n in data if n.startswith("Distributed."))
            assert distributed == ["Distributed.all_reduce.0.forward", "Distributed.broadcast.0.forward"]
            ar = data["Distributed.all_reduce.0.forward"]
            # the input as the call received it (before the reduction), the group by its ranks
            assert_stats(ar["input_args"][0], np.full(3, rank + 1.0), f"all_reduce input step {step} rank {rank}")
            assert ar["input_kwargs"] == {"group": group}
            assert results[rank]["all_reduce"][step] == [float(sum(r + 1 for r in GROUP))] * 3
            # in place, returning None: the output recorded is the tensor after the call (the reduced values)
            reduced = np.full(3, float(sum(r + 1 for r in GROUP)))
            assert_stats(ar["output"][0], reduced, f"all_reduce output step {step} rank {rank}")
            bc = data["Distributed.broadcast.0.forward"]
            assert_stats(bc["input_args"][0], np.arange(3.0) * (rank + 1) + step, f"broadcast step {step} rank {rank}")
            assert bc["input_kwargs"] == {"src": {"type": "int", "value": 0}, "group": group}
            assert results[rank]["broadcast"][step] == (np.arange(3.0) + step).tolist()
            assert_stats(bc["output"][0], np.arange(3.0) + step, f"broadcast output step {step} rank {rank}")


@pytest.mark.torch
def test_ddp_parameters_grad_are_the_local_gradients_before_the_all_reduce(ddp_runs: DdpRuns) -> None:
    assert_local_parameters_grad(ddp_runs[0], "Module.module", "Linear")


@pytest.mark.torch
def test_ddp_parameters_grad_reduced_are_the_averaged_gradients_after_the_all_reduce(ddp_runs: DdpRuns) -> None:
    """``<module>.parameters_grad_reduced``: each parameter's ``.grad`` after DDP's all-reduce, i.e. the mean of
    the ranks' local gradients (recomputed here in numpy), the same on every rank."""
    ref = reference_run()
    for step in range(STEPS):
        for rank in range(WORLD):
            data = dump_json(ddp_runs[0], step, rank)["data"]
            for layer in ("fc1", "fc2"):
                reduced = data[f"Module.module.{layer}.Linear.parameters_grad_reduced"]
                for p in ("weight", "bias"):
                    (leaf,) = reduced[p]
                    assert_stats(leaf, ref[step]["mean"][f"{layer}.{p}"], f"{layer}.{p} reduced step {step} rank {rank}")


@pytest.mark.torch
def test_two_identical_ddp_runs_compare_as_a_pass_rank_by_rank(ddp_runs: DdpRuns) -> None:
    from msprobe_cmp.comparator.compare import CompareOptions, compare
    from msprobe_cmp.dump.reader import load_dump

    dump_a, dump_b, _, _ = ddp_runs
    result = compare(load_dump(dump_a), load_dump(dump_b), CompareOptions())
    assert result.verdict == "pass"
    assert not result.unpaired
    pairs = [((u.unit_a.step, u.unit_a.rank), (u.unit_b.step, u.unit_b.rank)) for u in result.units]
    assert pairs == [((s, r), (s, r)) for s in range(STEPS) for r in range(WORLD)]
    for unit in result.units:
        assert unit.verdict == "pass" and unit.compared_count > 0
        rows = {r.name: r for r in unit.rows}
        for name in ("Distributed.all_reduce.0.forward.input.0", "Distributed.all_reduce.0.forward.kwargs.group",
                     "Distributed.broadcast.0.forward.kwargs.group", "Module.module.fc1.Linear.parameters_grad.weight",
                     "Module.module.fc1.Linear.parameters_grad_reduced.weight.0"):
            assert rows[name].match_class == "matched" and rows[name].verdict == "pass", name


@pytest.mark.torch
def test_rank_list_with_an_existing_rank_records_it_without_warning(ddp_runs: DdpRuns) -> None:
    for result in ddp_runs[3]:  # rank=[0, 1, 5]
        assert not log_lines(result, "WARNING", "matches no rank") and not log_lines(result, "INFO", "not recorded")


@pytest.mark.torch
def test_rank_list_matching_no_rank_of_the_job_warns(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    dump = tmp_path / "dump"
    results = launch("torch", tmp_path / "run", dump, rank_list=[5])
    assert not dump.exists() or not any(dump.rglob("dump.json"))
    for rank, result in enumerate(results):
        warnings = log_lines(result, "WARNING", "matches no rank")
        assert len(warnings) == 1, result["log"]  # once, though start() ran at every step
        assert "rank [5] matches no rank of this 2-rank job (ranks 0-1)" in warnings[0]
        assert log_lines(result, "INFO", "not recorded") == [
            f"INFO msprobe_cmp.recorder.adapters.torch msprobe-cmp: rank {rank} is not in the rank list [5]; "
            "it is not recorded"
        ]


# ----------------------------------------------------------------- MindSpore


@pytest.mark.mindspore
def test_mindspore_two_cpu_ranks_record_comm_func_broadcast_local_gradients_and_warn_on_no_rank(tmp_path: Path) -> None:
    pytest.importorskip("mindspore")
    dump = tmp_path / "dump"
    results = launch("mindspore", tmp_path / "run", dump, rank_list=[0, 1])
    assert_one_directory_per_step_and_rank(dump)
    assert_trained_with_mean_gradients(results, {n: n for n in initial_parameters()})
    assert_local_parameters_grad(dump, "Cell", "Dense")
    for step in range(STEPS):
        for rank in range(WORLD):
            data = dump_json(dump, step, rank)["data"]
            assert [n for n in data if n.startswith("Distributed.")] == ["Distributed.broadcast.0.forward"]
            bc = data["Distributed.broadcast.0.forward"]
            assert_stats(bc["input_args"][0], np.arange(3.0) * (rank + 1) + step, f"broadcast input {step} {rank}")
            assert bc["input_args"][1:] == [{"type": "int", "value": 0}]
            assert bc["input_kwargs"] == {"group": {"type": "str", "value": "mccl_world_group"}}
            # comm_func.broadcast returns the received tensor: rank 0's values on every rank
            assert_stats(bc["output"][0], np.arange(3.0) + step, f"broadcast output {step} {rank}")
            assert results[rank]["broadcast"][step] == (np.arange(3.0) + step).tolist()
    # The second debugger (rank=[5]): one warning and one info line per rank, no dump.
    assert not (tmp_path / "dump_unmatched").exists()
    for rank, result in enumerate(results):
        warnings = log_lines(result, "WARNING", "matches no rank")
        assert len(warnings) == 1 and "rank [5] matches no rank of this 2-rank job" in warnings[0], result["log"]
        assert log_lines(result, "INFO", "not recorded") == [
            f"INFO msprobe_cmp.recorder.adapters.mindspore msprobe-cmp: rank {rank} is not in the rank list [5]; "
            "it is not recorded"
        ]


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s", stream=sys.stderr)
    _kind, _rank, _dump, _result, _ranks = sys.argv[1:]
    WORKERS[_kind](int(_rank), _dump, _result, json.loads(_ranks))
