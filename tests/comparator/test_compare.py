"""compare(): small dumps written with DumpWriter, and the acceptance tests on real msprobe 1.2.2 dumps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.comparator import CompareOptions, Comparison, compare
from msprobe_cmp.comparator.compare import ComparisonRow, likely_origin
from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq, TensorLeaf, ValueLeaf, load_dump
from msprobe_cmp.errors import ConfigError

# ------------------------------------------------------------------ helpers


def leaf(writer: DumpWriter | None, data_name: str | None, arr: np.ndarray, dtype: str = "Float32", **kw) -> TensorLeaf:
    """A tensor leaf with statistics of ``arr`` (NaN-propagating, like msprobe); saves the npy if asked."""
    a64 = arr.astype(np.float64)
    stats = (
        {
            "max": float(a64.max()),
            "min": float(a64.min()),
            "mean": float(a64.mean()),
            "norm": float(np.linalg.norm(a64)),
        }
        if arr.size
        else {}
    )
    if writer is not None and data_name is not None:
        writer.save_tensor(data_name, arr)
    else:
        data_name = None
    return TensorLeaf("mindspore.Tensor", dtype, tuple(arr.shape), data_name=data_name, **{**stats, **kw})


def write_unit(rank_dir: Path, arrays: dict[str, np.ndarray], task: str = "tensor", extra=()) -> None:
    """One unit: an entry ``Functional.<key>.0.forward`` per array, input.0 = output.0 = the array."""
    w = DumpWriter(rank_dir, DumpMeta(task, "L1", "mindspore"))
    for key, arr in arrays.items():
        name = f"Functional.{key}.0.forward"
        save = w if task == "tensor" else None
        inp = leaf(save, f"{name}.input.0.npy", arr)
        out = leaf(save, f"{name}.output.0.npy", arr)
        w.put(Entry.forward(name, Seq((inp,)), Map(), Seq((out,))))
        w.set_stack(name, [f"File train.py, line 1, in step, \n y = {key}(x)"])
        w.set_parent(name, "Cell.net.Net.forward.0")
    for entry in extra:
        w.put(entry)
    w.flush()


def rows_by_name(c: Comparison, unit: int = 0) -> dict[str, ComparisonRow]:
    return {r.name: r for r in c.units[unit].rows}


X = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)

# ------------------------------------------------------------------ small dumps


def test_identical_small_dump_passes(tmp_path):
    write_unit(tmp_path / "a" / "step0" / "rank", {"relu": X, "gelu": X * 2})
    write_unit(tmp_path / "b" / "step0" / "rank", {"relu": X, "gelu": X * 2})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.mode == "tensor" and c.verdict == "pass"
    assert c.first_divergent is None and c.first_failing is None
    r = rows_by_name(c)["Functional.relu.0.forward.output.0"]
    assert r.metric("Cosine") == 1.0 and r.metric("MaxAbsErr") == 0.0 and r.differs is False
    assert r.parent_cell == "Cell.net.Net.forward.0" and r.stack and "relu" in r.stack[0]


def test_divergence_and_failure_are_located_in_execution_order(tmp_path):
    write_unit(tmp_path / "a", {"first": X, "second": X + 0.01, "third": X + 5.0})
    write_unit(tmp_path / "b", {"first": X, "second": X, "third": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.verdict == "fail"
    assert c.first_divergent is not None and c.first_divergent.name == "Functional.second.0.forward.input.0"
    assert c.first_failing is not None and c.first_failing.name == "Functional.third.0.forward.input.0"
    assert "Functional.second" in c.first_divergent.label
    second = c.row(c.first_divergent)
    # below every threshold, but 0.01 enters there out of nothing recorded before it (comparator/localise.py)
    assert second.verdict == "warning" and second.metric("MaxAbsErr") == pytest.approx(0.01, abs=1e-6)
    assert second.reasons[0].startswith("error enters here")
    assert c.likely_origin is not None and c.likely_origin.ref.name == second.name
    third = c.row(c.first_failing)
    assert any("MaxAbsErr" in reason for reason in third.reasons)
    assert dict(c.verdict_counts)["fail"] == 2


def test_the_likely_origin_across_ranks_is_in_a_failing_rank(tmp_path):
    """rank0 drifts a little (a warning that enters at 'second'), rank1 fails (5.0 enters at 'third'): ranks run at
    once, so the origin shown for the comparison is the failing rank's, though rank0 comes first; each unit keeps
    its own first jump."""
    write_unit(tmp_path / "a" / "step0" / "rank0", {"first": X, "second": X + 0.01, "third": X})
    write_unit(tmp_path / "b" / "step0" / "rank0", {"first": X, "second": X, "third": X})
    write_unit(tmp_path / "a" / "step0" / "rank1", {"first": X, "second": X, "third": X + 5.0})
    write_unit(tmp_path / "b" / "step0" / "rank1", {"first": X, "second": X, "third": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert [u.verdict for u in c.units] == ["pass", "fail"]
    assert c.first_divergent is not None and c.first_divergent.unit == 0  # rank0's drift comes first in unit order
    o = c.likely_origin
    assert o is not None and (o.ref.unit, o.ref.name) == (1, "Functional.third.0.forward.input.0")
    assert likely_origin(c.units[:1]) is not None and likely_origin(c.units[:1]).ref.name == (
        "Functional.second.0.forward.input.0")
    assert likely_origin(()) is None


def test_relative_errors_divide_by_b(tmp_path):
    write_unit(tmp_path / "a", {"f": np.full(4, 1.1, dtype=np.float32)})
    write_unit(tmp_path / "b", {"f": np.full(4, 1.0, dtype=np.float32)})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert r.metric("MaxRelativeErr") == pytest.approx(0.1, rel=1e-6)
    assert r.metric("Max diff") == pytest.approx(0.1, rel=1e-6)  # A - B, signed


def test_nonfinite_same_positions_pass_with_note_and_opposite_infinities_fail(tmp_path):
    a = np.array([1.0, np.nan, 3.0, np.inf], dtype=np.float32)
    b = np.array([1.0, np.nan, 3.0, np.inf], dtype=np.float32)
    c_ = np.array([1.0, np.nan, 3.0, -np.inf], dtype=np.float32)
    write_unit(tmp_path / "a", {"same": a, "opposite": a})
    write_unit(tmp_path / "b", {"same": b, "opposite": c_})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = rows_by_name(c)
    same = rows["Functional.same.0.forward.input.0"]
    assert same.verdict == "pass" and any("left out" in n for n in same.notes)
    opposite = rows["Functional.opposite.0.forward.input.0"]
    assert opposite.verdict == "fail" and "1 of 4 positions" in opposite.reasons[0]


def test_missing_tensor_file_falls_back_to_statistics(tmp_path):
    # Agreeing statistics are weaker evidence than the values the user asked for: a warning, never a plain pass.
    write_unit(tmp_path / "a", {"f": X})
    write_unit(tmp_path / "b", {"f": X})
    (tmp_path / "a" / "dump_tensor_data" / "Functional.f.0.forward.input.0.npy").unlink()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert r.compared_by == "statistics" and r.verdict == "warning"
    assert r.reasons[0].startswith("tensor file could not be read (") and "not compared" in r.reasons[0]
    assert not any("compared statistics instead" in n for n in r.notes)  # said once, as the reason
    assert r.metric("Max diff") == 0.0 and r.metric("MaxAbsErr lower bound") == 0.0
    assert rows_by_name(c)["Functional.f.0.forward.output.0"].verdict == "pass"  # its file is there
    assert c.verdict == "pass"  # warnings do not fail the run
    # the comparison adds no note counting such rows: the reports and the CLI count them, in one wording
    assert not [n for n in c.notes if "statistics" in n]


def test_unreadable_tensor_file_with_failing_statistics_fails(tmp_path):
    # Statistics that fail the rules still fail when the tensor file cannot be read, and the reasons say so too.
    write_unit(tmp_path / "a", {"f": X + 2.0})
    write_unit(tmp_path / "b", {"f": X})
    (tmp_path / "b" / "dump_tensor_data" / "Functional.f.0.forward.input.0.npy").write_bytes(b"not an npy file")
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert r.compared_by == "statistics" and r.verdict == "fail" and c.verdict == "fail"
    assert r.metric("Mean diff") == pytest.approx(2.0)
    assert r.reasons[0].startswith("MaxAbsErr")  # the statistics' own reason first
    assert r.reasons[-1].startswith("tensor file could not be read (") and "compared statistics instead" in r.reasons[-1]
    assert str(tmp_path / "b" / "dump_tensor_data" / "Functional.f.0.forward.input.0.npy") in r.reasons[-1]


def test_tensor_files_missing_on_both_sides_are_both_named(tmp_path):
    # one fix, not two reruns: the reason names A's and B's missing file
    write_unit(tmp_path / "a", {"f": X})
    write_unit(tmp_path / "b", {"f": X})
    for side in ("a", "b"):
        (tmp_path / side / "dump_tensor_data" / "Functional.f.0.forward.input.0.npy").unlink()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert r.verdict == "warning" and r.reasons[0].count("tensor file not found") == 2
    for side in ("a", "b"):
        assert str(tmp_path / side / "dump_tensor_data" / "Functional.f.0.forward.input.0.npy") in r.reasons[0]


def test_statistics_mode_and_lower_bound_failure(tmp_path):
    write_unit(tmp_path / "a", {"f": X, "g": X + 2.0}, task="statistics")
    write_unit(tmp_path / "b", {"f": X, "g": X}, task="statistics")
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.mode == "statistics" and c.verdict == "fail"
    g = rows_by_name(c)["Functional.g.0.forward.input.0"]
    assert g.metric("Mean diff") == pytest.approx(2.0) and g.metric("MaxAbsErr lower bound") == pytest.approx(2.0)
    assert g.verdict == "fail"


def test_md5_mode(tmp_path):
    for side, md5 in (("a", "0000beef"), ("b", "0000beef")):
        w = DumpWriter(tmp_path / side, DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.f.0.forward", Seq((leaf(None, None, X, md5=md5),)), Map(), Seq(())))
        w.put(
            Entry.forward(
                "Functional.g.0.forward", Seq((leaf(None, None, X, md5=md5 if side == "a" else "1"),)), Map(), Seq(())
            )
        )
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.mode == "md5"
    rows = rows_by_name(c)
    assert rows["Functional.f.0.forward.input.0"].verdict == "pass"
    assert rows["Functional.g.0.forward.input.0"].verdict == "fail"


def test_md5_mode_row_without_checksum_is_a_warning(tmp_path):
    # md5 mode (both sides carry checksums), but one row has none on B: judged by statistics, so a warning.
    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side, DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.f.0.forward", Seq((leaf(None, None, X, md5="0000beef"),)), Map(), Seq(())))
        md5 = "0000cafe" if side == "a" else None
        w.put(Entry.forward("Functional.g.0.forward", Seq((leaf(None, None, X, md5=md5),)), Map(), Seq(())))
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = rows_by_name(c)
    assert c.mode == "md5" and rows["Functional.f.0.forward.input.0"].verdict == "pass"
    g = rows["Functional.g.0.forward.input.0"]
    assert (g.compared_by, g.verdict) == ("statistics", "warning")
    assert g.reasons[0].startswith("no checksum in B: compared statistics instead")


def test_md5_mode_blank_checksums_are_no_checksums(tmp_path):
    # Found by the breaker: "" on both sides "agreed" as checksums although the statistics differ.
    for side, scale in (("a", 3.0), ("b", 1.0)):
        w = DumpWriter(tmp_path / side, DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.f.0.forward", Seq((leaf(None, None, X, md5="0000aaaa"),)), Map(), Seq(())))
        w.put(Entry.forward("Functional.g.0.forward", Seq((leaf(None, None, X * scale, md5=" "),)), Map(), Seq(())))
        w.put(Entry.forward("Functional.h.0.forward", Seq((leaf(None, None, X, md5=""),)), Map(), Seq(())))
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = rows_by_name(c)
    assert c.mode == "md5" and rows["Functional.f.0.forward.input.0"].compared_by == "md5"
    g = rows["Functional.g.0.forward.input.0"]
    assert (g.compared_by, g.verdict) == ("statistics", "fail")  # max 3 vs 1: |dMax| = 2 > 1
    assert g.metric("Max diff") == pytest.approx(2.0) and "no checksum on either side" in g.reasons[-1]
    h = rows["Functional.h.0.forward.input.0"]
    assert (h.compared_by, h.verdict) == ("statistics", "warning")
    assert h.reasons[0].startswith("no checksum on either side: compared statistics instead")


def test_fallback_with_statistics_on_one_side_only_says_nothing_was_compared(tmp_path):
    write_unit(tmp_path / "a", {"f": X})
    w = DumpWriter(tmp_path / "b", DumpMeta("tensor", "L1", "mindspore"))
    # no statistics, and a data_name whose file was never written (found by the breaker)
    bare = TensorLeaf("mindspore.Tensor", "Float32", X.shape, data_name="Functional.f.0.forward.input.0.npy")
    w.put(Entry.forward("Functional.f.0.forward", Seq((bare,)), Map(), Seq(())))
    w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert (r.match_class, r.verdict, len(r.reasons)) == ("matched", "warning", 1)
    assert r.reasons[0].startswith("tensor file could not be read (") and r.reasons[0].endswith(
        ", and B recorded no statistics: nothing was compared")


def test_values_and_mismatches(tmp_path):
    def entries(dim, k, scale, shape):
        return [
            Entry.forward(
                "Functional.cat.0.forward",
                Seq((ValueLeaf("int", k),)),
                Map((("dim", ValueLeaf("int", dim)),)),
                Seq((ValueLeaf("float", scale),)),
            ),
            Entry.forward(
                "Functional.view.0.forward", Seq((leaf(None, None, np.zeros(shape, np.float32) + 1),)), Map(), Seq(())
            ),
        ]

    write_unit(tmp_path / "a", {"relu": X}, extra=entries(1, 2, 0.5, (2, 6)))
    write_unit(tmp_path / "b", {"relu": X}, extra=entries(0, 2, 0.5000001, (3, 4)))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = rows_by_name(c)
    # issue 15: a call argument that differs (dim 1 against 0) is an argument difference, a warning by default (its
    # effect shows in the call's outputs, which the tensor rules judge), no longer a "value differs" failure
    dim = rows["Functional.cat.0.forward.kwargs.dim"]
    assert (dim.verdict, dim.reasons, dim.differs) == ("warning", ("argument differs: dim A 1, B 0",), True)
    assert rows["Functional.cat.0.forward.input.0"].verdict == "pass"
    scale = rows["Functional.cat.0.forward.output.0"]
    assert scale.verdict == "pass" and scale.metric("MaxAbsErr") == pytest.approx(1e-7)
    view = rows["Functional.view.0.forward.input.0"]
    assert view.match_class == "shape_mismatch" and view.verdict == "fail"
    assert c.verdict == "fail"


def test_units_paired_by_ids_not_directory_order(tmp_path):
    for r in (0, 1):
        write_unit(tmp_path / "a" / "step0" / f"rank{r}", {"f": X + r})
    write_unit(tmp_path / "a" / "step3" / "rank0", {"f": X})
    for r in (1, 0):  # B written in the other order, and rank1 holds rank1's data
        write_unit(tmp_path / "b" / "step0" / f"rank{r}", {"f": X + r})
    write_unit(tmp_path / "b" / "step5" / "rank0", {"f": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert [(u.unit_a.label, u.unit_b.label) for u in c.units] == [
        ("step0/rank0", "step0/rank0"),
        ("step0/rank1", "step0/rank1"),
    ]
    assert c.verdict == "pass"
    assert {(u.side, u.label) for u in c.unpaired} == {("a", "step3/rank0"), ("b", "step5/rank0")}
    assert any("one side only" in n for n in c.notes)


def test_non_distributed_rank_pairs_with_rank0(tmp_path):
    for s in (0, 1):
        write_unit(tmp_path / "a" / f"step{s}" / "rank", {"f": X})
        write_unit(tmp_path / "b" / f"step{s}" / "rank0", {"f": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert len(c.units) == 2 and not c.unpaired and c.verdict == "pass"


def test_nothing_in_common_is_nothing_compared(tmp_path):
    write_unit(tmp_path / "a", {"relu": X})
    write_unit(tmp_path / "b", {"gelu": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.verdict == "nothing_compared"
    counts = dict(c.counts)
    assert counts["matched"] == 0 and counts["only_in_a"] == 2 and counts["only_in_b"] == 2
    # A stretch of calls that differs entirely: A's calls, then B's
    assert [r.entry_name for r in c.units[0].rows] == ["Functional.relu.0.forward"] * 2 + [
        "Functional.gelu.0.forward"
    ] * 2


def test_empty_tensors_on_both_sides_are_equal(tmp_path):
    empty = np.zeros((0, 4), np.float32)
    write_unit(tmp_path / "a", {"f": empty})
    write_unit(tmp_path / "b", {"f": empty})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    r = rows_by_name(c)["Functional.f.0.forward.input.0"]
    assert r.match_class == "matched" and r.verdict == "pass" and r.differs is False
    assert "empty tensor (0 elements) on both sides: equal" in r.notes
    assert c.verdict == "pass" and c.first_divergent is None


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError):
        CompareOptions(mode="fast")  # type: ignore[arg-type]


def test_forced_statistics_mode_on_tensor_dumps(tmp_path):
    write_unit(tmp_path / "a", {"f": X})
    write_unit(tmp_path / "b", {"f": X + 1e-3})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(mode="statistics"))
    assert c.mode == "statistics"
    assert rows_by_name(c)["Functional.f.0.forward.input.0"].compared_by == "statistics"


# ------------------------------------------------------------------ acceptance: real msprobe 1.2.2 dumps

# Rows that must be identical at step0 in run b (blocks.0.weight + 0.001) vs run a: everything computed before
# the perturbed weight is used, the parameters it does not touch, the label, and the loss-gradient seed.
IDENTICAL_AT_STEP0 = {
    "Primitive.shape_op.Shape.0.forward.input.0",  # the network input
    "Primitive.matmul.MatMul.0.forward.input.0",
    "Cell.blocks.0.Dense.forward.0.input.0",
    "Primitive.bias_add.BiasAdd.0.forward.input.1",  # blocks.0.bias
    "Cell.blocks.0.Dense.forward.0.parameters.bias",
    "Primitive.matmul.MatMul.1.forward.input.1",  # blocks.1.weight
    "Primitive.bias_add.BiasAdd.1.forward.input.1",
    "Cell.blocks.1.Dense.forward.0.parameters.weight",
    "Cell.blocks.1.Dense.forward.0.parameters.bias",
    "Primitive.matmul.MatMul.2.forward.input.1",  # head.weight
    "Primitive.bias_add.BiasAdd.2.forward.input.1",
    "Cell.head.Dense.forward.0.parameters.weight",
    "Cell.head.Dense.forward.0.parameters.bias",
    "Tensor.__sub__.0.forward.input.1",  # the label
    "Functional.square.0.backward.input.0",  # d loss / d square
}


@pytest.fixture(scope="module")
def fixture_comparisons() -> dict[str, Comparison]:
    root = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
    return {
        kind: compare(load_dump(root / f"{kind}_b"), load_dump(root / f"{kind}_a")) for kind in ("statistics", "tensor")
    }


@pytest.mark.parametrize("kind", ["statistics", "tensor"])
def test_fixture_pairs_both_steps_and_modes(fixture_comparisons, kind):
    c = fixture_comparisons[kind]
    assert c.mode == kind
    assert [u.unit_a.label for u in c.units] == ["step0/rank", "step1/rank"]
    assert not c.unpaired
    counts = dict(c.counts)
    assert counts["matched"] == 2 * 97 and sum(counts.values()) == 2 * 97
    # Cell.blocks.0 backward output is null on both sides (the network input needs no gradient): matched, skipped
    null_row = rows_by_name(c)["Cell.blocks.0.Dense.backward.0.output.0"]
    assert null_row.verdict == "skip" and null_row.a.kind == null_row.b.kind == "null"
    assert c.compared_count == 2 * 96
    assert c.verdict == "pass"  # +0.001 on one weight stays within msprobe's tolerance


@pytest.mark.parametrize("kind", ["statistics", "tensor"])
@pytest.mark.parametrize("step", [0, 1])
def test_fixture_first_layer_input_identical(fixture_comparisons, kind, step):
    rows = rows_by_name(fixture_comparisons[kind], step)
    for name in ("Cell.blocks.0.Dense.forward.0.input.0", "Primitive.matmul.MatMul.0.forward.input.0"):
        r = rows[name]
        assert r.match_class == "matched" and r.differs is False and r.verdict == "pass"
        for key in ("Max diff", "Min diff", "Mean diff", "L2norm diff"):
            assert r.metric(key) == 0.0
        if kind == "tensor":
            assert r.metric("Cosine") == 1.0 and r.metric("MaxAbsErr") == 0.0


@pytest.mark.parametrize("kind", ["statistics", "tensor"])
def test_fixture_step0_identical_rows_and_everything_downstream_differs(fixture_comparisons, kind):
    u = fixture_comparisons[kind].units[0]
    tensor_rows = [r for r in u.rows if r.compared_by in ("tensor", "statistics")]
    identical = {r.name for r in tensor_rows if r.differs is False}
    assert identical == IDENTICAL_AT_STEP0
    for r in tensor_rows:
        if r.name not in IDENTICAL_AT_STEP0:
            assert r.differs is True, r.name
    rows = rows_by_name(fixture_comparisons[kind], 0)
    assert rows["Cell.blocks.0.Dense.forward.0.output.0"].differs is True
    assert rows["Cell.head.Dense.forward.0.output.0"].differs is True
    # execution order: the weight enters MatMul.0 before the cell's own entry is recorded
    first = fixture_comparisons[kind].first_divergent
    assert first.name == "Primitive.matmul.MatMul.0.forward.input.1"
    assert first.parent_cell == "Cell.blocks.0.Dense.forward.0" and "Cell.blocks.0.Dense.forward.0" in first.label


def test_fixture_perturbed_weight_max_abs_err_is_0_001(fixture_comparisons):
    root = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
    name = "Cell.blocks.0.Dense.forward.0.parameters.weight"
    for step in (0, 1):
        files = [
            root / run / f"step{step}" / "rank" / "dump_tensor_data" / f"{name}.npy" for run in ("tensor_b", "tensor_a")
        ]
        wb, wa = (np.load(f, allow_pickle=False).astype(np.float64) for f in files)
        independent = float(np.max(np.abs(wb - wa)))
        r = rows_by_name(fixture_comparisons["tensor"], step)[name]
        assert r.metric("MaxAbsErr") == pytest.approx(independent, abs=1e-12)
        if step == 0:
            assert r.metric("MaxAbsErr") == pytest.approx(0.001, abs=1e-6)


def test_fixture_metrics_agree_with_msprobe_own_results(fixture_comparisons):
    # Values read once from compare_out_tensor/compare_result_*.xlsx (msprobe 1.2.2, step0, b vs a);
    # msprobe rounds Cosine > 0.9999 to 6 decimals and other numbers to 12.
    expected = {
        "Primitive.matmul.MatMul.0.forward.input.1": (0.999992, 0.001000002027, 1.888248920441, 0.0, 0.40625),
        "Primitive.matmul.MatMul.0.forward.output.0": (0.999983, 0.010638862848, 0.680135607719, 0.0, 0.28125),
        "Primitive.relu.ReLU.0.forward.output.0": (0.999984, 0.010638833046, 0.639201462269, 0.4921875, 0.6328125),
        "Cell.head.Dense.parameters_grad.weight": (0.999987, 0.0028462708, 0.175069689751, 0.234375, 0.421875),
        "Cell.head.Dense.parameters_grad.bias": (0.999999, 0.000619977713, 0.062270980328, 0.25, 0.75),
    }
    rows = rows_by_name(fixture_comparisons["tensor"], 0)
    keys = ("Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
    for name, values in expected.items():
        r = rows[name]
        assert r.metric("Cosine") == pytest.approx(values[0], abs=1e-6)
        for key, value in zip(keys[1:], values[1:], strict=True):
            assert r.metric(key) == pytest.approx(value, abs=1e-5), (name, key)


@pytest.mark.parametrize("kind", ["statistics", "tensor"])
def test_fixture_compared_with_itself(kind):
    root = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
    dump = load_dump(root / f"{kind}_a")
    c = compare(dump, dump)
    assert c.verdict == "pass" and c.first_divergent is None and c.first_failing is None
    for u in c.units:
        for r in u.rows:
            assert r.match_class == "matched"
            assert r.differs in (False, None)
            if kind == "tensor" and r.compared_by == "tensor":
                assert r.metric("Cosine") in (1.0, None) and r.metric("MaxAbsErr") == 0.0


def _stat_unit(path: Path, leaves: dict[str, TensorLeaf]) -> None:
    w = DumpWriter(path, DumpMeta("statistics", "L1", "mindspore"))
    for name, leaf in leaves.items():
        w.put(Entry.forward(name, Seq(), Map(), Seq((leaf,))))
    w.flush()


def _leaf(shape: tuple[int, ...], v: float) -> TensorLeaf:
    return TensorLeaf("mindspore.Tensor", "Float32", shape, v, v, v, v)


def test_first_divergent_never_comes_after_first_failing(tmp_path: Path) -> None:
    # Row 0 differs in shape (a failure), row 1 in value: the first divergent row is row 0, like the first failing.
    _stat_unit(tmp_path / "a" / "rank", {"Functional.x.0.forward": _leaf((8, 8), 1.0),
                                         "Functional.y.0.forward": _leaf((2,), 1.5)})
    _stat_unit(tmp_path / "b" / "rank", {"Functional.x.0.forward": _leaf((8, 16), 1.0),
                                         "Functional.y.0.forward": _leaf((2,), 1.0)})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.first_failing is not None and c.first_divergent is not None
    assert c.row(c.first_failing).match_class == "shape_mismatch"
    assert c.first_divergent.row == c.first_failing.row == 0


def test_unpaired_rows_are_said_in_a_note(tmp_path: Path) -> None:
    _stat_unit(tmp_path / "a" / "rank", {"Functional.x.0.forward": _leaf((2,), 1.0),
                                         "Functional.only_a.0.forward": _leaf((2,), 1.0)})
    _stat_unit(tmp_path / "b" / "rank", {"Functional.x.0.forward": _leaf((2,), 1.0)})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.verdict == "pass"
    assert any("1 row(s) have no partner (only_in_a 1, only_in_b 0)" in n and "1 matched row(s) only" in n
               for n in c.notes)


# ------------------------------------------------------------------ found in code review


def test_one_finite_value_left_after_matching_nan_is_not_called_all_zero(tmp_path):
    # [nan, nan, 1.0105] vs [nan, nan, 1.0]: one finite value left, |diff| 0.0105 -> warning, not a failure.
    write_unit(tmp_path / "a" / "rank", {"x": np.array([np.nan, np.nan, 1.0105], dtype=np.float32)})
    write_unit(tmp_path / "b" / "rank", {"x": np.array([np.nan, np.nan, 1.0], dtype=np.float32)})
    row = rows_by_name(compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b")))["Functional.x.0.forward.output.0"]
    assert row.verdict == "warning" and not any("all zero" in r for r in row.reasons)


@pytest.mark.filterwarnings("ignore:Casting complex values")  # the test helper's statistics of complex data
def test_complex_tensors_are_compared_by_their_parts(tmp_path):
    a = np.array([1 + 1j, 2], dtype=np.complex64)
    b = np.array([100 + 1j, -50j], dtype=np.complex64)
    write_unit(tmp_path / "a" / "rank", {"z": a})
    write_unit(tmp_path / "b" / "rank", {"z": b})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    row = rows_by_name(c)["Functional.z.0.forward.output.0"]
    va, vb = np.array([1, 2, 1, 0.0]), np.array([100, 0, 1, -50.0])  # real parts, then imaginary parts
    assert row.metric("MaxAbsErr") == pytest.approx(np.max(np.abs(va - vb)))
    assert row.metric("Cosine") == pytest.approx(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))
    assert row.verdict == "fail" and c.verdict == "fail"


def test_int64_beyond_float64_precision_still_differs(tmp_path):
    write_unit(tmp_path / "a" / "rank", {"ids": np.array([2**60 + 1, 7], dtype=np.int64)})
    write_unit(tmp_path / "b" / "rank", {"ids": np.array([2**60, 7], dtype=np.int64)})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    row = rows_by_name(c)["Functional.ids.0.forward.output.0"]
    assert row.differs is True and row.verdict == "fail" and c.verdict == "fail"


def test_bfloat16_arrays_saved_by_the_writer_read_back(tmp_path):
    import ml_dtypes

    values = np.array([1.5, -2.0, 3.0], dtype=ml_dtypes.bfloat16)
    w = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "L1", "mindspore"))
    w.save_tensor("t.npy", values)
    leaf_ = TensorLeaf("mindspore.Tensor", "BFloat16", (3,), 3.0, -2.0, 2.5 / 3, None, data_name="t.npy")
    w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((leaf_,))))
    w.flush()
    unit = load_dump(tmp_path / "rank").units[0]
    np.testing.assert_array_equal(np.asarray(unit.load_tensor(leaf_), dtype=np.float64), [1.5, -2.0, 3.0])


def test_nan_threshold_is_refused_and_inf_thresholds_render_as_json(tmp_path):
    import json

    from msprobe_cmp.comparator.rules import Rules, Thresholds
    from msprobe_cmp.reports import render_json

    with pytest.raises(ConfigError, match="NaN"):
        Thresholds(max_abs_err_fail_above=float("nan"))
    write_unit(tmp_path / "a" / "rank", {"x": X})
    rules = Rules(default=Thresholds(max_abs_err_fail_above=float("inf")))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "a"), CompareOptions(rules=rules))
    assert json.loads(render_json(c))["thresholds"]["default"]["max_abs_err_fail_above"] == "Infinity"


def test_units_with_the_same_id_are_reported_not_dropped(tmp_path):
    for side, procs in (("a", (100, 200)), ("b", (300, 400))):
        for p in procs:
            write_unit(tmp_path / side / "step0" / f"proc{p}", {"x": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert len(c.units) == 1 and len(c.unpaired) == 2  # one pair, one leftover per side: nothing vanishes
    assert any("same step and rank" in n for n in c.notes)


def _stepless_notes(c: Comparison) -> list[str]:
    return [n for n in c.notes if "have no step directory" in n]


def test_step_less_units_against_one_step_get_no_hint(tmp_path):
    # A -/rank0, -/rank1 against B step0/rank2: the ranks do not meet, so nothing is paired; B has a single step, so
    # "give one of B's step directories (e.g. b/step0)" would only say what was given: no such hint.
    for r in (0, 1):
        write_unit(tmp_path / "a" / f"rank{r}", {"x": X})
    write_unit(tmp_path / "b" / "step0" / "rank2", {"x": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.units == () and len(c.unpaired) == 3
    assert _stepless_notes(c) == []
    # the same from B's side: B's step-less units against A's one step
    c = compare(load_dump(tmp_path / "b"), load_dump(tmp_path / "a"))
    assert c.units == () and _stepless_notes(c) == []


def test_step_less_units_against_several_steps_get_a_hint_listing_them(tmp_path):
    for r in (0, 1):
        write_unit(tmp_path / "a" / f"rank{r}", {"x": X})
    for step in range(7):
        write_unit(tmp_path / "b" / f"step{step}" / "rank0", {"x": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.units == ()
    assert _stepless_notes(c) == [
        f"A's unit(s) have no step directory while B has step(s) 0, 1, 2, 3, 4 and 2 more: give one of B's step "
        f"directories (e.g. {tmp_path / 'b' / 'step0'}) to compare against them"]
    # with two steps the hint fires too (more than one), from B's side as well
    for step in range(2):
        write_unit(tmp_path / "two" / f"step{step}" / "rank0", {"x": X})
    c = compare(load_dump(tmp_path / "two"), load_dump(tmp_path / "a"))
    assert _stepless_notes(c) == [
        f"B's unit(s) have no step directory while A has step(s) 0, 1: give one of A's step directories "
        f"(e.g. {tmp_path / 'two' / 'step0'}) to compare against them"]


def test_rows_of_unpaired_steps_count_against_the_matched_share(tmp_path):
    for s in range(10):
        write_unit(tmp_path / "a" / f"step{s}" / "rank", {"x": X})
    write_unit(tmp_path / "b" / "step0" / "rank", {"x": X})
    write_unit(tmp_path / "b" / "step42" / "rank", {"x": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.verdict == "too_few_matched"  # 2 matched rows of 2 + 9*2 + 2 unpaired rows


def test_notes_for_mixed_tasks_empty_units_and_world_sizes(tmp_path):
    write_unit(tmp_path / "a" / "step0" / "rank0", {"x": X}, task="tensor")
    write_unit(tmp_path / "a" / "step0" / "rank1", {"x": X}, task="tensor")
    write_unit(tmp_path / "b" / "step0" / "rank0", {"x": X}, task="statistics")
    write_unit(tmp_path / "b" / "step1" / "rank0", {}, task="statistics")
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert c.mode == "statistics"
    assert c.notes[0] == "world sizes differ: A has 2 rank(s) per step, B has 1"
    assert any("A was recorded with task tensor, B with statistics: compared in statistics mode" in n for n in c.notes)
    assert any(n.startswith("warning: B has 1 empty unit(s)") and "step1/rank0" in n for n in c.notes)


def test_tensor_file_dtype_other_than_dump_json_is_noted(tmp_path):
    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("tensor", "L1", "mindspore"))
        w.save_tensor("t.npy", np.arange(4, dtype=np.float32))
        bf16 = TensorLeaf("mindspore.Tensor", "BFloat16", (4,), 3.0, 0.0, 1.5, 14**0.5, data_name="t.npy")
        f16 = TensorLeaf("mindspore.Tensor", "Float16", (4,), 3.0, 0.0, 1.5, 14**0.5, data_name="t.npy")
        w.put(Entry.forward("Functional.x.0.forward", Seq((bf16,)), Map(), Seq((f16,))))
        w.flush()
    rows = rows_by_name(compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b")))
    assert "A's bfloat16 tensor is stored as float32 (msprobe's convention)" in rows["Functional.x.0.forward.input.0"].notes
    assert "A's tensor file holds float32, dump.json says Float16" in rows["Functional.x.0.forward.output.0"].notes


def test_cell_rollup_and_parent_chain(tmp_path):
    """net > fc1 > matmul: a difference inside fc1's MatMul rolls up into fc1 and net, not into fc2."""
    base = np.linspace(1.0, 2.0, 8, dtype=np.float32)
    tree = {  # entry -> (parent, target values); the baseline is `base` everywhere
        "Cell.net.Net.forward.0": (None, base),
        "Cell.net.fc1.Dense.forward.0": ("Cell.net.Net.forward.0", base),
        "Primitive.matmul.MatMul.0.forward": ("Cell.net.fc1.Dense.forward.0", base[::-1].copy()),
        "Cell.net.fc2.Dense.forward.0": ("Cell.net.Net.forward.0", base),
    }
    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("tensor", "mix", "mindspore"))
        for name, (parent, target) in tree.items():
            arr = target if side == "a" else base
            w.put(Entry.forward(name, Seq(), Map(), Seq((leaf(w, f"{name}.output.0.npy", arr),))))
            w.set_parent(name, parent)
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    cells = {cell.cell: cell for cell in c.units[0].cells}
    cos = float(base[::-1].astype(np.float64) @ base / (np.linalg.norm(base) ** 2))
    mae = float(np.max(np.abs(base[::-1].astype(np.float64) - base)))
    for name, depth in (("Cell.net.Net.forward.0", 0), ("Cell.net.fc1.Dense.forward.0", 1)):
        assert cells[name].depth == depth and cells[name].differing == 1 and cells[name].rows >= 2
        assert cells[name].min_cosine == pytest.approx(cos) and cells[name].max_abs_err == pytest.approx(mae)
    assert cells["Cell.net.fc2.Dense.forward.0"].differing == 0 and cells["Cell.net.fc2.Dense.forward.0"].depth == 1
    assert cells["Cell.net.Net.forward.0"].rows == 4  # its own row and the three below it
    assert c.first_divergent is not None
    assert c.first_divergent.parents == ("Cell.net.fc1.Dense.forward.0", "Cell.net.Net.forward.0")
    assert "in Cell.net.fc1.Dense.forward.0 < Cell.net.Net.forward.0" in c.first_divergent.label


def test_noise_floor_mode_turns_failures_within_run_to_run_noise_into_warnings(tmp_path):
    # Scaled copies keep Cosine at 1, so only MaxAbsErr decides: max(base) = 2.
    base = np.linspace(1.0, 2.0, 16)
    write_unit(tmp_path / "b" / "rank", {"x": base})            # baseline
    write_unit(tmp_path / "rerun" / "rank", {"x": base * 1.4})  # rerun of the baseline: noise MaxAbsErr 0.8
    write_unit(tmp_path / "a1" / "rank", {"x": base * 1.7})     # MaxAbsErr 1.4: > 1 fails, but <= 2 x 0.8
    write_unit(tmp_path / "a2" / "rank", {"x": base * 1.9})     # MaxAbsErr 1.8: > 2 x 0.8, still fails
    b, rerun = load_dump(tmp_path / "b"), load_dump(tmp_path / "rerun")
    plain = compare(load_dump(tmp_path / "a1"), b)
    assert plain.verdict == "fail"
    within = compare(load_dump(tmp_path / "a1"), b, CompareOptions(noise=rerun))
    row = rows_by_name(within)["Functional.x.0.forward.output.0"]
    assert row.metric("MaxAbsErr") == pytest.approx(1.4) and row.verdict == "warning"
    assert "within run-to-run noise" in row.reasons[-1] and "MaxAbsErr 0.8" in row.reasons[-1]
    assert within.verdict == "pass" and any(n.startswith("noise-floor mode") for n in within.notes)
    beyond = compare(load_dump(tmp_path / "a2"), b, CompareOptions(noise=rerun))
    assert beyond.verdict == "fail"
    note = rows_by_name(beyond)["Functional.x.0.forward.output.0"].notes[-1]
    assert note == f"beyond run-to-run noise (the rerun of B differs from B by MaxAbsErr {0.4 * 2.0:.6g})"
    assert note.code == "beyond_noise" and note.params == {"noise": f"MaxAbsErr {0.4 * 2.0:.6g}"}


def test_the_reruns_pairing_notes_are_said_and_no_other_of_its_notes(tmp_path):
    # The rerun's only unit is rank 3 of step 5, B's is rank0: paired as the single units they are, which the notes
    # say for the rerun too; the rerun's other notes (its own comparison against B) are not repeated.
    base = np.linspace(1.0, 2.0, 16)
    write_unit(tmp_path / "b" / "rank0", {"x": base})
    write_unit(tmp_path / "rerun" / "step5" / "rank3", {"x": base * 1.4})
    write_unit(tmp_path / "a" / "rank0", {"x": base * 1.7})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(noise=load_dump(tmp_path / "rerun")))
    rerun_notes = [n for n in c.notes if n.startswith("rerun vs B: ")]
    assert len(rerun_notes) == 1 and "each side holds one unit: paired A step5/rank3 with B " in rerun_notes[0], c.notes


def test_noise_judged_by_statistics_is_said_to_be_a_lower_bound(tmp_path):
    # Found by the breaker: a rerun whose tensor file is missing was quoted as "MaxAbsErr 0.0", a raw statistics
    # lower bound presented as a measured noise.
    base = np.linspace(1.0, 2.0, 16)
    write_unit(tmp_path / "b" / "rank", {"x": base})
    write_unit(tmp_path / "rerun" / "rank", {"x": base * 1.4})
    (tmp_path / "rerun" / "rank" / "dump_tensor_data" / "Functional.x.0.forward.output.0.npy").unlink()
    write_unit(tmp_path / "a" / "rank", {"x": base * 1.9})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(noise=load_dump(tmp_path / "rerun")))
    row = rows_by_name(c)["Functional.x.0.forward.output.0"]
    # the rerun's lower bound: max(|dMax|, |dMin|, |dMean|, |dNorm|/sqrt(n)) of base * 1.4 against base = 0.4 * 2
    bound = max(0.4 * 2.0, 0.4 * 1.0, 0.4 * 1.5, 0.4 * float(np.linalg.norm(base)) / 4.0)
    assert row.verdict == "fail" and row.notes[-1] == (
        f"beyond run-to-run noise (the rerun of B differs from B by MaxAbsErr >= {bound:.6g} (a lower bound from the "
        "statistics))")


def test_noise_factor_is_validated():
    from msprobe_cmp.comparator.rules import Rules

    with pytest.raises(ConfigError, match="noise_factor"):
        Rules(noise_factor=0.5)


def test_nonfinite_counts_fail_a_statistics_row_the_statistics_cannot(tmp_path):
    # Same Max/Min/Mean/Norm (both NaN), but A has 3 NaN and B 1: the counts decide.
    for side, nan in (("a", 3), ("b", 1)):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        lf = TensorLeaf("mindspore.Tensor", "Float32", (8,), np.nan, np.nan, np.nan, np.nan,
                        extra=(("nan_count", nan), ("pos_inf_count", 0), ("neg_inf_count", 0)))
        w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((lf,))))
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    row = rows_by_name(c)["Functional.x.0.forward.output.0"]
    assert row.verdict == "fail" and row.reasons[-1] == "non-finite counts differ: NaN A 3 B 1"


def test_what_the_recorder_could_not_capture_is_said(tmp_path):
    from msprobe_cmp.dump import JsonObject

    write_unit(tmp_path / "a" / "rank", {"x": X})
    item = JsonObject((("what", "hook Cell.fc1.backward"), ("reason", "RuntimeError('x')")))
    meta = DumpMeta("tensor", "mix", "mindspore", extra=(("not_captured", (item,)),))
    w = DumpWriter(tmp_path / "b" / "rank", meta)
    w.put(Entry.forward("Functional.x.0.forward", Seq((leaf(w, "i.npy", X),)), Map(), Seq((leaf(w, "o.npy", X),))))
    w.flush()
    unit_b = load_dump(tmp_path / "b").units[0]
    assert unit_b.meta.not_captured == ("hook Cell.fc1.backward: RuntimeError('x')",)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    assert any("B -/rank: the recorder could not capture 1 thing(s): hook Cell.fc1.backward" in n for n in c.notes)


def test_the_same_gaps_of_several_steps_make_one_note_grouped_by_reason(tmp_path):
    from msprobe_cmp.dump import JsonObject

    same = "the call returned this input tensor itself"
    items = tuple(JsonObject((("what", w), ("reason", r))) for w, r in (
        ("Tensor.to.0.backward.input.0", same), ("Tensor.to.0.backward.output.0", same),
        ("Tensor.contiguous.1.backward.input.0", same), ("Tensor.contiguous.1.backward.output.0", same),
        ("Module.fc.Linear.backward.0", "no gradient reached its outputs")))
    for step in (0, 1):
        write_unit(tmp_path / "a" / f"step{step}" / "rank", {"x": X})
        w = DumpWriter(tmp_path / "b" / f"step{step}" / "rank",
                       DumpMeta("tensor", "mix", "mindspore", extra=(("not_captured", items),)))
        w.put(Entry.forward("Functional.x.0.forward", Seq((leaf(w, "i.npy", X),)), Map(), Seq((leaf(w, "o.npy", X),))))
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    notes = [n for n in c.notes if "could not capture" in n]
    assert notes == [
        "B step0/rank, step1/rank: the recorder could not capture 5 thing(s): Tensor.to.0.backward.input.0, "
        "Tensor.to.0.backward.output.0, Tensor.contiguous.1.backward.input.0 and 1 more: " + same
        + "; Module.fc.Linear.backward.0: no gradient reached its outputs"
    ]


def test_invalid_nonfinite_counts_are_ignored_with_a_note(tmp_path):
    for side, counts in (("a", (("nan_count", "1"), ("pos_inf_count", 0), ("neg_inf_count", 0))),
                         ("b", (("nan_count", 0), ("pos_inf_count", 0), ("neg_inf_count", -1)))):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        lf = TensorLeaf("mindspore.Tensor", "Float32", (4,), 1.0, 0.0, 0.5, 1.0, extra=counts)
        w.put(Entry.forward("Functional.x.0.forward", Seq(), Map(), Seq((lf,))))
        w.flush()
    row = rows_by_name(compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b")))["Functional.x.0.forward.output.0"]
    assert row.verdict == "pass"
    assert "A's NaN/Inf counts are not valid counts (type or range): ignored" in row.notes
    assert "B's NaN/Inf counts are not valid counts (type or range): ignored" in row.notes
    ok = TensorLeaf("t", "Float32", (4,), extra=(("nan_count", 1.0), ("pos_inf_count", 0), ("neg_inf_count", 0)))
    assert ok.nonfinite_counts == (1, 0, 0)  # an integral float from another writer is a count


def test_rerun_without_a_unit_for_the_baseline_is_said(tmp_path):
    for s in (0, 1):
        write_unit(tmp_path / "a" / f"step{s}" / "rank", {"x": X})
        write_unit(tmp_path / "b" / f"step{s}" / "rank", {"x": X})
    write_unit(tmp_path / "rerun" / "step5" / "rank", {"x": X})
    write_unit(tmp_path / "rerun" / "step6" / "rank", {"x": X})
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(noise=load_dump(tmp_path / "rerun")))
    assert any("the rerun has no unit for B step0/rank, step1/rank: no noise tolerance there" in n for n in c.notes)


def test_two_leaves_with_the_same_path_pair_in_order(tmp_path):
    t1, t2 = _leaf((2,), 1.0), _leaf((2,), 2.0)
    entry = Entry.forward("Functional.x.0.forward", Seq(), Map((("a.b", t1), ("a", Map((("b", t2),))))), Seq())
    for side in ("a", "b"):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        w.put(entry)
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = c.units[0].rows
    assert [r.arg_path for r in rows] == ["kwargs.a.b", "kwargs.a.b"] and c.first_divergent is None


def test_cell_chains_deeper_than_the_cap_are_said(tmp_path):
    from msprobe_cmp.comparator.compare import compute_cell_rollups
    from msprobe_cmp.comparator.rowtable import RowTableBuilder

    construct = {f"Cell.l{i}.C.forward.0": f"Cell.l{i + 1}.C.forward.0" for i in range(1200)}
    cells, chains, truncated = compute_cell_rollups(RowTableBuilder(0).freeze(), construct)
    assert cells == () and not truncated
    write_unit(tmp_path / "a" / "rank", {"x": X})
    unit = load_dump(tmp_path / "a").units[0]
    from dataclasses import replace as dc_replace

    deep = dc_replace(unit, construct={**construct, "Functional.x.0.forward": "Cell.l0.C.forward.0"})
    c = compare(deep, deep)
    assert any("more than 1,000 deep" in n for n in c.units[0].notes)
    assert max(cell.depth for cell in c.units[0].cells) == 1000


def test_both_sides_call_stacks_are_kept(tmp_path):
    import json

    from msprobe_cmp.reports import render_json

    for side, line in (("a", "File a.py, line 1, in f, \n y = relu(x)"), ("b", "File b.py, line 9, in g, \n z = relu(x)")):
        w = DumpWriter(tmp_path / side / "rank", DumpMeta("statistics", "L1", "mindspore"))
        w.put(Entry.forward("Functional.relu.0.forward", Seq(), Map(), Seq((_leaf((2,), 1.0),))))
        w.set_stack("Functional.relu.0.forward", [line])
        w.flush()
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    row = c.units[0].rows[0]
    assert row.stack == ("File a.py, line 1, in f, \n y = relu(x)",)
    assert row.stack_b == ("File b.py, line 9, in g, \n z = relu(x)",)
    unit = json.loads(render_json(c))["units"][0]
    assert unit["stacks_b"] == {"Functional.relu.0.forward": ["File b.py, line 9, in g, \n z = relu(x)"]}


def test_progress_is_reported_per_unit(tmp_path):
    for s in (0, 1, 2):
        write_unit(tmp_path / "a" / f"step{s}" / "rank", {"x": X})
        write_unit(tmp_path / "b" / f"step{s}" / "rank", {"x": X})
    calls: list[tuple[int, int, str]] = []
    compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"),
            CompareOptions(progress=lambda d, t, label: calls.append((d, t, label))))
    assert calls == [(0, 3, "step0/rank"), (1, 3, "step1/rank"), (2, 3, "step2/rank"), (3, 3, "")]


def test_statistics_that_contradict_the_tensor_files_are_a_warning(tmp_path):
    # Found by the new-user check: A's recorded Max edited to 7747 while the files differ by 0.01 passed silently.
    # |max(a) - max(b)| <= max|a - b| for any two arrays of one shape, so |ΔMax| = 1000 cannot come from these files.
    write_unit(tmp_path / "a", {"f": X + 0.01})
    write_unit(tmp_path / "b", {"f": X})
    dump_json = tmp_path / "a" / "dump.json"
    doc = json.loads(dump_json.read_text())
    doc["data"]["Functional.f.0.forward"]["input_args"][0]["Max"] = float(X.max()) + 1000.0
    dump_json.write_text(json.dumps(doc))
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = rows_by_name(c)
    r = rows["Functional.f.0.forward.input.0"]
    mae = float(np.max(np.abs((X + 0.01).astype(np.float64) - X.astype(np.float64))))
    assert r.compared_by == "tensor" and r.metric("MaxAbsErr") == pytest.approx(mae)
    assert r.verdict == "warning" and len(r.reasons) == 1
    assert r.reasons[0].startswith(
        f"dump.json's statistics contradict the tensor files: |ΔMax| = 1000 exceeds the files' MaxAbsErr {mae:.6g}"
    )
    out = rows["Functional.f.0.forward.output.0"]  # its statistics are the files'
    assert out.verdict != "fail" and not any("contradict" in reason for reason in out.reasons)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_statistics_of_the_files_themselves_never_contradict_them(tmp_path, dtype):
    # The bound is exact: statistics computed from the saved arrays (any dtype, any noise scale) never trip it.
    rng = np.random.default_rng(7)
    arrays_a, arrays_b = {}, {}
    for i, scale in enumerate((1e-8, 1e-3, 1.0, 1e3)):
        base = rng.standard_normal((16, 8)).astype(dtype) * dtype(100)
        arrays_a[f"f{i}"] = base
        arrays_b[f"f{i}"] = (base + rng.standard_normal(base.shape) * scale).astype(dtype)
    write_unit(tmp_path / "a", arrays_a)
    write_unit(tmp_path / "b", arrays_b)
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    rows = [r for r in c.units[0].rows if r.compared_by == "tensor"]
    assert len(rows) == 8
    assert not any("contradict" in reason for r in rows for reason in r.reasons)


def test_shape_mismatch_rows_use_the_rules_relative_floor(tmp_path):
    # Found by a helper: shape/dtype-mismatch rows divided by the dtype's eps whatever the rules' relative_floor.
    from msprobe_cmp.comparator.rules import Rules, Thresholds

    write_unit(tmp_path / "a", {"f": X * 2.0}, task="statistics")
    write_unit(tmp_path / "b", {"f": X.reshape(4, 3)}, task="statistics")
    rules = Rules(default=Thresholds(relative_floor=10.0))
    r = rows_by_name(compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"), CompareOptions(rules=rules)))[
        "Functional.f.0.forward.input.0"]
    assert r.match_class == "shape_mismatch" and r.verdict == "fail"
    # Max: A 2.0, B 1.0 -> |dMax| = 1, relative to max(|1.0|, 10) = 0.1 (the dtype's eps floor would give 1.0)
    assert r.metric("Max diff") == pytest.approx(1.0) and r.metric("Max relative diff") == pytest.approx(0.1)
