"""--jobs (spawn process pool) and --scheduler (Dask) compare unit pairs elsewhere: the result must be the serial one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from msprobe_cmp.cli import main
from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.compare import UnitTask, compare_unit_task, compare_units
from msprobe_cmp.comparator.units import UnitFacts
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, ValueLeaf, load_dump
from msprobe_cmp.errors import ConfigError


def _write_side(root: Path, scale: float) -> None:
    """2 steps x 3 ranks; B differs from A by ``scale`` on some rows (one row of rank 1, step 1 fails)."""
    for step in range(2):
        for rank in range(3):
            w = DumpWriter(root / f"step{step}" / f"rank{rank}", DumpMeta(task="statistics", level="L1",
                                                                         framework="mindspore"))
            for i in range(40):
                base = 1.0 + i + 10 * rank + 100 * step
                f = 1.0 + scale * ((i % 5) - 2)
                if step == 1 and rank == 1 and i == 7:
                    f = 1.0 + 1000 * scale
                leaf = TensorLeaf("mindspore.Tensor", "Float32", (4, 4), base * f, -base * f, 0.1 * base * f,
                                  4 * base * f)
                name = f"Functional.op{i % 3}.{i // 3}.forward"
                w.put(Entry.forward(name, Seq((leaf, ValueLeaf("int", i))), Map(), Seq((leaf,))))
                w.set_stack(name, [f"File m.py, line {i}, in f"])
                w.set_parent(name, None)
            w.flush()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("parallel")
    _write_side(root / "A", 1e-3)
    _write_side(root / "B", 0.0)
    return root / "A", root / "B"


def test_unit_task_gives_the_in_process_result(dumps: tuple[Path, Path]) -> None:
    a, b = load_dump(dumps[0]), load_dump(dumps[1])
    ua, ub = a.units[4], b.units[4]
    serial = compare_units(ua, ub, "statistics", CompareOptions().rules)
    task = UnitTask(str(ua.directory), ua.step, ua.rank, str(ub.directory), ub.step, ub.rank, "statistics",
                    CompareOptions().rules, None, CompareOptions().mapping)
    compared, facts_a, facts_b = compare_unit_task(task)
    assert compared == serial
    assert (facts_a, facts_b) == (UnitFacts.of(ua), UnitFacts.of(ub))
    # the facts, counted independently: every leaf of the unit's entries, no checksums in a statistics dump
    assert facts_a.entries == len(ua.entries) and facts_a.leaves == sum(len(list(e.leaves())) for e in ua.entries)
    assert not facts_a.has_md5 and facts_a.namespace == "mindspore"
    assert serial.verdict == "fail" and serial.rows[serial.first_failing or 0].entry_name == "Functional.op1.2.forward"


def test_process_pool_result_equals_serial(dumps: tuple[Path, Path]) -> None:
    a, b = load_dump(dumps[0]), load_dump(dumps[1])
    seen: list[tuple[int, int, str]] = []
    serial = compare(a, b)
    parallel = compare(a, b, CompareOptions(jobs=2, progress=lambda d, t, label: seen.append((d, t, label))))
    assert parallel == serial
    assert [u.unit_a.label for u in parallel.units] == [f"step{s}/rank{r}" for s in range(2) for r in range(3)]
    assert parallel.verdict == "fail" and parallel.first_failing is not None
    assert parallel.first_failing.unit == 4
    # progress: one call per unit before it, in order, then the end
    assert [d for d, _, _ in seen] == list(range(7)) and seen[-1] == (6, 6, "")
    # an independent check of one number: Max diff of step0/rank0 row 0 is base*(1 + 1e-3*(-2)) - base
    row = parallel.units[0].rows[0]
    assert math.isclose(row.metric("Max diff") or 0.0, 1.0 * (1 - 2e-3) - 1.0, rel_tol=1e-12)


def test_jobs_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="jobs"):
        CompareOptions(jobs=0)


def test_cli_jobs_writes_the_serial_reports(dumps: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = dumps
    assert main([str(a), str(b), "-o", str(tmp_path / "serial")]) == 1
    assert main([str(a), str(b), "-o", str(tmp_path / "jobs"), "--jobs", "2"]) == 1
    for name in ("comparison.json", "comparison.csv", "junit.xml", "summary.md", "report.html"):
        assert (tmp_path / "jobs" / name).read_bytes() == (tmp_path / "serial" / name).read_bytes(), name
    assert main([str(a), str(b), "-o", str(tmp_path / "bad"), "--jobs", "0"]) == 2


def test_dask_local_cluster_result_equals_serial(dumps: tuple[Path, Path]) -> None:
    distributed = pytest.importorskip("distributed")
    a, b = load_dump(dumps[0]), load_dump(dumps[1])
    serial = compare(a, b)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl:
        on_dask = compare(a, b, CompareOptions(scheduler=cl.scheduler_address))
    assert on_dask == serial


def test_an_unreachable_scheduler_is_a_config_error_naming_the_option(dumps: tuple[Path, Path]) -> None:
    pytest.importorskip("distributed")
    import dask

    a, b = load_dump(dumps[0]), load_dump(dumps[1])
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), pytest.raises(ConfigError) as err:
        compare(a, b, CompareOptions(scheduler="tcp://127.0.0.1:9"))  # port 9: nothing listens there
    assert str(err.value).startswith("--scheduler tcp://127.0.0.1:9: cannot connect to the Dask scheduler")


def test_a_malformed_entry_found_by_a_worker_is_the_serial_one_line_error(dumps: tuple[Path, Path], tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With --jobs the parent reads the headers only and a worker process finds the malformed entry: the error
    comes back to the parent (pickled as its arguments) and is the serial run's line, exit 2."""
    import json
    import pickle
    import shutil

    from msprobe_cmp.errors import DumpFormatError

    err = DumpFormatError("a/dump.json", "data['x']", "expected an object, got str")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.path, back.field, back.problem) == (
        DumpFormatError, str(err), err.path, err.field, err.problem)
    broken = tmp_path / "A"
    shutil.copytree(dumps[0], broken)
    file = broken / "step1" / "rank1" / "dump.json"
    doc = json.loads(file.read_text())
    first = next(iter(doc["data"]))
    doc["data"][first] = "garbage"
    file.write_text(json.dumps(doc))
    lines = []
    for extra in ([], ["--jobs", "2"]):
        assert main([str(broken), str(dumps[1]), "-o", str(tmp_path / f"out{len(extra)}"), *extra]) == 2
        err_text = capsys.readouterr().err.strip()
        lines.append(err_text)
    assert lines[0] == lines[1] == f"msprobe-cmp: error: {file}: data[{first!r}]: expected an object, got str"


def test_two_units_without_entries_compare_to_nothing_compared(tmp_path: Path) -> None:
    doc = {"task": "statistics", "level": "mix", "framework": "mindspore", "dump_data_dir": None, "data": {}}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "dump.json").write_text(__import__("json").dumps(doc))
    for extra in ([], ["--jobs", "2"]):
        out = tmp_path / f"out{len(extra)}"  # beside the dump's directory: an output inside it is refused
        assert main([str(tmp_path / "in" / "dump.json"), str(tmp_path / "in" / "dump.json"), "-o", str(out), *extra]) == 3
        assert (out / "report.html").is_file() and (out / "comparison.csv").read_text().count("\n") == 1


@pytest.mark.parametrize("address", ["", "garbage://x", "127.0.0.1"])
def test_a_malformed_scheduler_address_is_one_line(dumps: tuple[Path, Path], tmp_path: Path, address: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    assert main([str(dumps[0]), str(dumps[1]), "-o", str(tmp_path / "out"), "--scheduler", address]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"msprobe-cmp: error: --scheduler {address!r}: not a Dask scheduler address")
    assert "\n" not in err
