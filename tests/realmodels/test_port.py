"""A real port, compared with no mapping file: mindcv's ResNet-18 on MindSpore against pytorchcv's on PyTorch, same
weights and batch, one training step each (tests/realmodels/port.py).  The two models name every layer differently
(``layer2.0.down_sample.0`` / ``features.stage2.unit1.identity_conv.conv``), call a block's shortcut at another
point, compute through other APIs (``BatchNorm`` Primitive / ``batch_norm``, ``out +=`` / ``x + identity``, ``mean``
/ ``avg_pool2d``) and MindSpore adds ``Shape`` queries: the comparison must still pair the layers right and pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realmodels.conftest import need

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")

from msprobe_cmp.cli import main  # noqa: E402
from msprobe_cmp.comparator.compare import LOWER_BOUND_NAME, CompareOptions, Comparison, compare  # noqa: E402
from msprobe_cmp.comparator.mapping import NameMapping, load_cell_mapping  # noqa: E402
from msprobe_cmp.dump.naming import parse_name  # noqa: E402
from msprobe_cmp.dump.reader import load_dump  # noqa: E402
from tests.realmodels import port  # noqa: E402

TASKS = ("statistics", "tensor")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """One recorded step of each side per task: ``{task: (MindSpore dump, PyTorch dump)}``."""
    need("mindcv.models")
    need("pytorchcv.models.resnet")
    return {task: port.record_port(tmp_path_factory.mktemp(f"port_{task}"), task=task) for task in TASKS}


@pytest.fixture(scope="module")
def results(dumps: dict[str, tuple[Path, Path]]) -> dict[str, Comparison]:
    """The comparison of each task's dumps, MindSpore as the target, no mapping file."""
    return {task: compare(load_dump(a), load_dump(b), CompareOptions()) for task, (a, b) in dumps.items()}


@pytest.fixture(scope="module")
def expected_modules() -> dict[str, str]:
    """MindSpore cell path -> pytorchcv module path, from the weight copy (whose pairing the passing comparison
    vouches for): the cell holding each MindSpore parameter is the module holding the PyTorch tensor copied in."""
    pairs = port.copy_weights(port.build_mindspore(ms), port.build_torch(torch), ms)
    out: dict[str, str] = {}
    for ms_name, pt_name in pairs:
        cell, module = ms_name.rpartition(".")[0], pt_name.rpartition(".")[0]
        assert out.setdefault(cell, module) == module
    return out


def _rows(result: Comparison) -> list:
    return [row for unit in result.units for row in unit.rows]


@pytest.mark.parametrize("task", TASKS)
def test_the_correct_port_passes_with_no_mapping_file(results: dict[str, Comparison], task: str) -> None:
    result = results[task]
    rows = _rows(result)
    assert result.mode == task
    assert result.verdict == "pass", [r.name for r in rows if r.verdict == "fail"][:10]
    assert [r.name for r in rows if r.verdict == "fail"] == []
    counts = dict(result.counts)
    assert counts["shape_mismatch"] == counts["dtype_mismatch"] == 0
    # every row of A left unpaired has no counterpart by construction (Shape queries, BatchNorm's extra outputs,...)
    assert result.matched_share is not None and result.matched_share > 0.9, result.matched_share
    assert any("Primitive.shape.Shape ×" in n for n in result.notes), result.notes
    assert any("cell pair(s) inferred" in n for n in result.notes), result.notes


@pytest.mark.parametrize(("primitive", "calls", "pytorch"), [
    ("Conv2D", 20, "Functional.conv2d"), ("BatchNorm", 20, "Functional.batch_norm"),
    ("MaxPool3DWithArgmax", 1, "Functional.max_pool2d"), ("MatMul", 1, "Functional.linear"),
    ("ReLU", 17, "Functional.relu"),
])
def test_every_layer_call_pairs_with_its_pytorch_call(results: dict[str, Comparison], primitive: str, calls: int,
                                                      pytorch: str) -> None:
    rows = [r for r in _rows(results["statistics"]) if parse_name(r.entry_name).op.endswith(f".{primitive}")
            and r.entry_name.endswith(".forward") and r.arg_path == "input.0"]
    assert len(rows) == calls
    assert all(r.match_class == "matched" and r.verdict == "pass" for r in rows), [r.name for r in rows]
    partners = {r.entry_name_b for r in rows}
    assert len(partners) == calls and all(parse_name(b).stem == pytorch for b in partners)


def test_the_global_pool_and_the_residual_adds_pair(results: dict[str, Comparison]) -> None:
    rows = _rows(results["statistics"])
    mean = {r.arg_path: r for r in rows if r.entry_name == "Functional.mean.0.forward"}
    assert mean["input.0"].entry_name_b == "Functional.avg_pool2d.0.forward" and mean["input.0"].verdict == "pass"
    assert mean["output.0"].match_class == "matched"  # [2, 512] against [2, 512, 1, 1]
    adds = [r for r in rows if r.entry_name.startswith("Tensor.__iadd__.") and r.entry_name.endswith(".forward")]
    assert len(adds) == 8 * 3 and all(r.match_class == "matched" and r.verdict == "pass" for r in adds)
    assert all(parse_name(r.entry_name_b).stem == "Tensor.__add__" for r in adds)


@pytest.mark.parametrize("task", TASKS)
def test_every_cell_with_parameters_pairs_with_its_pytorchcv_module(
    results: dict[str, Comparison], expected_modules: dict[str, str], task: str
) -> None:
    seen: dict[str, str] = {}
    for r in _rows(results[task]):
        parsed = parse_name(r.entry_name)
        if parsed.kind == "cell" and r.arg_path.startswith("parameters."):
            assert r.match_class == "matched", r.name
            partner = parse_name(r.entry_name_b or r.entry_name)
            seen[parsed.cell_path or ""] = partner.cell_path or ""
    assert seen == expected_modules
    assert len(seen) == 41  # 20 convolutions, 20 BatchNorms, the classifier


def test_tensor_mode_compares_the_values(results: dict[str, Comparison]) -> None:
    rows = [r for r in _rows(results["tensor"]) if r.compared_by == "tensor"]
    assert len(rows) > 700
    cosines = [c for r in rows if (c := r.metric("Cosine")) is not None]
    assert min(cosines) > 0.9999
    worst = max(r.metric("MaxAbsErr") or 0.0 for r in rows)
    assert 0.0 < worst < 1e-3  # two frameworks' kernels round differently, and only that


def test_write_mapping_round_trip_gives_the_same_pairing(dumps: dict[str, tuple[Path, Path]], tmp_path: Path,
                                                         results: dict[str, Comparison]) -> None:
    a, b = dumps["statistics"]
    cells = tmp_path / "cells.yaml"
    assert main([str(a), str(b), "-o", str(tmp_path / "r1"), "--write-mapping", str(cells)]) == 0
    written = load_cell_mapping(cells)
    assert written["layer2.0.down_sample.0.Conv2d"] == "features.stage2.unit1.identity_conv.conv.Conv2d"
    assert written["classifier.Dense"] == "output.Linear"
    assert "layer1.0.relu.ReLU" not in written  # used twice per block, with two modules: inferred again
    assert main([str(a), str(b), "-o", str(tmp_path / "r2"), "--cell-mapping", str(cells)]) == 0
    mapping = NameMapping(cells=written, cell_source=cells.name)
    again = compare(load_dump(a), load_dump(b), CompareOptions(mapping=mapping))

    def pairing(result: Comparison) -> dict[tuple[str, str], tuple[str | None, str | None, str]]:
        return {(r.entry_name, r.arg_path): (r.entry_name_b, r.arg_path_b, r.match_class) for r in _rows(result)}

    assert pairing(again) == pairing(results["statistics"])
    assert again.verdict == "pass"
    # an existing file is not overwritten without --force
    assert main([str(a), str(b), "-o", str(tmp_path / "r3"), "--write-mapping", str(cells)]) == 2


def test_mindcvs_own_stem_pool_is_found_at_the_max_pool(dumps: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    """mindcv's ``MaxPool2d(3, 2, pad_mode="same")`` pads only the bottom and right of the 32x32 map, pytorchcv's
    ``padding=1`` every side: the port as mindcv ships it differs from the pool on, and the comparison (no mapping
    file) says so there, with everything before it passing."""
    def same_pool(model: object) -> None:
        model.max_pool = ms.nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")  # type: ignore[attr-defined]

    bugged = port.record_mindspore(tmp_path / "ms", "statistics", same_pool)
    result = compare(load_dump(bugged), load_dump(dumps["statistics"][1]), CompareOptions())
    assert result.verdict == "fail"
    # rounding makes every row differ a little (two frameworks' kernels); the first row that differs by more than
    # 1e-3 is the pool's output (statistics prove a failure only further on, where the difference has grown)
    rows = _rows(result)
    bound = [r for r in rows if (r.metric(LOWER_BOUND_NAME) or 0.0) > 1e-3]
    assert bound[0].name == "Primitive.max_pool.MaxPool.0.forward.output.0", [r.name for r in bound[:3]]
    before = rows[: rows.index(bound[0])]
    assert any(r.entry_name == "Cell.conv1.Conv2d.forward.0" and r.verdict == "pass" for r in before)
    assert all(r.verdict != "fail" for r in before)
