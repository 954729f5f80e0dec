"""Comparing unit pairs elsewhere: in ``spawn`` worker processes (``--jobs``) or on Dask workers (``--scheduler``).

Each worker reads its pair again from the unit directories (:class:`UnitTask`, everything picklable) and runs
:func:`compare_unit_task`, which workers import by this module's path; the results come back in task order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprobe_cmp.comparator.mapping import NameMapping
from msprobe_cmp.comparator.result import Mode, UnitComparison
from msprobe_cmp.comparator.rules import Rules
from msprobe_cmp.comparator.spool import spool_unit
from msprobe_cmp.comparator.units import NoiseMap, UnitFacts, compare_units
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
        file_a, file_b: the dump JSON file each unit was read from (a file given by the user may have another name
            than ``dump.json``); None: the one :func:`~msprobe_cmp.dump.reader.load_rank_dump` picks.
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
    file_a: str | None = None
    file_b: str | None = None


def _registered_loaders() -> tuple[tuple[str, TensorLoader], ...]:
    return tuple((suffix, loader) for suffix in (".pt",) if (loader := tensor_loader_for(suffix)) is not None)


def compare_unit_task(task: UnitTask) -> tuple[UnitComparison, UnitFacts, UnitFacts]:
    """Read the unit pair of ``task`` from disk and compare it (:func:`compare_units`): the function a worker
    runs for ``--jobs`` / ``--scheduler``.  Deterministic: the same pair gives the same result in any process.

    Returns:
        The unit comparison and the :class:`~msprobe_cmp.comparator.units.UnitFacts` of A's and B's unit (what the
        parent sums up without reading the entries itself).

    Raises:
        msprobe_cmp.errors.DumpFormatError: a unit's files became unreadable since the parent read them.
    """
    for suffix, loader in task.loaders:
        if tensor_loader_for(suffix) is None:
            register_tensor_loader(suffix, loader)
    with paused_gc():
        unit_a = load_rank_dump(Path(task.dir_a), task.step_a, task.rank_a,
                                file=None if task.file_a is None else Path(task.file_a))
        unit_b = load_rank_dump(Path(task.dir_b), task.step_b, task.rank_b,
                                file=None if task.file_b is None else Path(task.file_b))
        compared = compare_units(unit_a, unit_b, task.mode, task.rules, noise=task.noise, mapping=task.mapping)
        return compared, UnitFacts.of(unit_a, task.mapping), UnitFacts.of(unit_b, task.mapping)


def _compare_in_parallel(
    tasks: list[UnitTask],
    labels: list[str],
    jobs: int,
    scheduler: str | None,
    progress: Callable[[int, int, str], None] | None,
    spool: Path | None = None,
) -> tuple[tuple[UnitComparison, UnitFacts, UnitFacts], ...]:
    """:func:`compare_unit_task` of every task on ``scheduler`` (Dask), in a ``spawn`` pool of ``jobs``
    processes (fork can hang once MindSpore or torch ran in the parent), or, with ``jobs`` 1 and no scheduler, one
    after the other in this process; results in task order.

    ``labels`` name the tasks' units for ``progress``; ``jobs``, ``scheduler``, ``progress`` and ``spool`` are those
    of :class:`msprobe_cmp.comparator.compare.CompareOptions`: with ``spool``, each unit's rows and parent chains are
    written to a file there (in a new directory of its own) as the unit comes back
    (:func:`~msprobe_cmp.comparator.spool.spool_unit`) and the unit keeps the file's stand-ins, so that only one
    unit's rows at a time are held here."""
    total = len(tasks)
    if progress is not None:
        progress(0, total, labels[0])
    if spool is not None:  # a directory of this comparison's own: another one spooled there keeps its files
        spool = Path(tempfile.mkdtemp(prefix="comparison-", dir=spool))
    results: list[tuple[UnitComparison, UnitFacts, UnitFacts]] = []
    for k, (unit, facts_a, facts_b) in enumerate(_results_in_order(tasks, jobs, scheduler)):
        if spool is not None:
            unit = spool_unit(unit, spool, f"unit{k:07d}.pkl")
        results.append((unit, facts_a, facts_b))
        if progress is not None and k + 1 < total:
            progress(k + 1, total, labels[k + 1])
    if progress is not None:
        progress(total, total, "")
    return tuple(results)


def _results_in_order(
    tasks: list[UnitTask], jobs: int, scheduler: str | None
) -> Iterator[tuple[UnitComparison, UnitFacts, UnitFacts]]:
    """:func:`compare_unit_task` of each task, in task order, on Dask, in a process pool or here
    (:func:`_compare_in_parallel`).  A Dask result is released on the cluster once received.

    Raises:
        ConfigError: the Dask scheduler cannot be reached (distributed's connect timeout, 30 s by default), its
            address is malformed, or Dask is not installed.
    """
    if scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError("--scheduler needs Dask: pip install 'msprobe-cmp[dask]'") from None
        try:
            client = Client(scheduler)
        except (OSError, TimeoutError) as exc:  # distributed's "Timed out trying to connect to ..."
            raise ConfigError(f"--scheduler {scheduler}: cannot connect to the Dask scheduler: {exc}") from None
        except ValueError as exc:  # an address distributed cannot parse ("missing port number", "unknown scheme")
            raise ConfigError(f"--scheduler {scheduler!r}: not a Dask scheduler address "
                              f"(tcp://HOST:PORT): {exc}") from None
        with client:
            futures: list[Any] = client.map(compare_unit_task, tasks, pure=False)
            for k in range(len(futures)):
                future, futures[k] = futures[k], None
                yield future.result()
                future.release()
    elif jobs == 1:
        for task in tasks:
            yield compare_unit_task(task)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn")) as pool:
            yield from pool.map(compare_unit_task, tasks)
