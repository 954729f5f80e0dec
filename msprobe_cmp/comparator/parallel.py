"""Comparing unit pairs elsewhere: in ``spawn`` worker processes (``--jobs``) or on Dask workers (``--scheduler``).

Each worker reads its pair again from the unit directories (:class:`UnitTask`, everything picklable) and runs
:func:`compare_unit_task`, which workers import by this module's path; the results come back in task order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from msprobe_cmp.comparator.mapping import NameMapping
from msprobe_cmp.comparator.result import Mode, UnitComparison
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.comparator.units import NoiseMap, compare_units
from msprobe_cmp.dump.reader import (
    TensorLoader,
    load_rank_dump,
    paused_gc,
    register_tensor_loader,
    tensor_loader_for,
)
from msprobe_cmp.errors import ConfigError


@dataclass(frozen=True)
class UnitTask:
    """One (step, rank) unit pair to compare, by path: what a worker process or a Dask worker needs to read the
    pair itself and compare it (everything picklable).

    Attributes:
        dir_a, step_a, rank_a, dir_b, step_b, rank_b: the two unit directories and their ids.
        mode, rules, noise, mapping: as :func:`compare_units` takes them.
        loaders: tensor-file loaders registered in the parent (``(".pt", loader)``), registered in the worker
            too where that suffix has none, so that the worker reads the same files the same way.
    """

    dir_a: str
    step_a: int | None
    rank_a: int | None
    dir_b: str
    step_b: int | None
    rank_b: int | None
    mode: Mode
    rules: Rules
    noise: NoiseMap | None
    mapping: NameMapping
    loaders: tuple[tuple[str, TensorLoader], ...] = ()


def _registered_loaders() -> tuple[tuple[str, TensorLoader], ...]:
    return tuple((suffix, loader) for suffix in (".pt",) if (loader := tensor_loader_for(suffix)) is not None)


def compare_unit_task(task: UnitTask) -> UnitComparison:
    """Read the unit pair of ``task`` from disk and compare it (:func:`compare_units`): the function a worker
    runs for ``--jobs`` / ``--scheduler``.  Deterministic: the same pair gives the same result in any process.

    Raises:
        msprobe_cmp.errors.DumpFormatError: a unit's files became unreadable since the parent read them.
    """
    for suffix, loader in task.loaders:
        if tensor_loader_for(suffix) is None:
            register_tensor_loader(suffix, loader)
    with paused_gc():
        unit_a = load_rank_dump(Path(task.dir_a), task.step_a, task.rank_a)
        unit_b = load_rank_dump(Path(task.dir_b), task.step_b, task.rank_b)
        return compare_units(unit_a, unit_b, task.mode, task.rules, noise=task.noise, mapping=task.mapping)


def _compare_in_parallel(
    tasks: list[UnitTask],
    labels: list[str],
    jobs: int,
    scheduler: str | None,
    progress: Callable[[int, int, str], None] | None,
) -> tuple[UnitComparison, ...]:
    """:func:`compare_unit_task` of every task on ``scheduler`` (Dask) or a ``spawn`` pool of ``jobs``
    processes (fork can hang once MindSpore or torch ran in the parent), results in task order.

    ``labels`` name the tasks' units for ``progress``; ``jobs``, ``scheduler`` and ``progress`` are those of
    :class:`msprobe_cmp.comparator.compare.CompareOptions`."""
    total = len(tasks)
    if progress is not None:
        progress(0, total, labels[0])
    results: list[UnitComparison] = []
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs Dask: pip install 'msprobe-cmp[dask]'") from None
        with Client(scheduler) as client:
            futures = client.map(compare_unit_task, tasks, pure=False)
            for k, future in enumerate(futures):
                results.append(future.result())
                if progress is not None and k + 1 < total:
                    progress(k + 1, total, labels[k + 1])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        workers = min(jobs, total)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for k, unit in enumerate(pool.map(compare_unit_task, tasks)):
                results.append(unit)
                if progress is not None and k + 1 < total:
                    progress(k + 1, total, labels[k + 1])
    if progress is not None:
        progress(total, total, "")
    return tuple(results)
