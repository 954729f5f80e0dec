"""One cell tree for two frameworks (``rollup.merged_construct``): a PyTorch module paired with a MindSpore cell is
that cell, and what PyTorch ran inside it hangs under it, on msprobe 1.2.2's own dumps of one model."""

from __future__ import annotations

import json
from pathlib import Path

from msprobe_cmp import compare, load_dump
from msprobe_cmp.comparator.rollup import merged_construct, paired_cells
from msprobe_cmp.comparator.rowtable import RowTable

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"


def test_mindspore_against_pytorch_gives_one_tree_without_module_siblings():
    c = compare(load_dump(FIXTURES / "statistics_a"), load_dump(FIXTURES / "torch_statistics_a"))
    assert c.units and all(c.units)
    for u in c.units:
        names = [cell.cell for cell in u.cells]
        assert names and not any(n.startswith("Module.") for n in names), names
        # what PyTorch ran inside a module is counted in the paired cell: every B-only row of a PyTorch entry whose
        # construct.json parent is a module sits under a MindSpore cell (msprobe's "optimizer" parent is no module)
        construct_b = json.loads((FIXTURES / "torch_statistics_a" / f"step{u.unit_b.step}" / "rank"
                                  / "construct.json").read_text())
        inside = [r for r in u.rows if r.match_class == "only_in_b"
                  and (construct_b.get(r.entry_name) or "").startswith("Module.")]
        assert inside, "the pair has PyTorch-only calls inside modules"
        for r in inside:
            chain = u.parent_chains[r.entry_name]
            assert chain and all(c.startswith("Cell.") for c in chain), (r.entry_name, chain)
        rows_in = {cell.cell: cell.rows for cell in u.cells}
        # Cell.head.Dense.forward.0 holds its own rows and, once merged, PyTorch's linear call inside Module.head
        assert rows_in["Cell.head.Dense.forward.0"] > sum(
            1 for r in u.rows if r.entry_name == "Cell.head.Dense.forward.0")


def test_the_merge_by_hand():
    rows = RowTable.from_rows(())  # an empty table: nothing paired, the two files as they are (A's first)
    merged = merged_construct(paired_cells(rows), {"x": "Cell.a.forward.0"}, {"x": "Module.a.forward.0", "y": None})
    assert merged == {
        "x": "Cell.a.forward.0", "y": None}
    c = compare(load_dump(FIXTURES / "statistics_a"), load_dump(FIXTURES / "torch_statistics_a"))
    u = c.units[0]
    construct_b = {"Functional.linear.9.forward": "Module.head.Linear.forward.0",
                   "Module.head.Linear.forward.0": "Module.net.Net.forward.0", "Module.net.Net.forward.0": None}
    merged = merged_construct(paired_cells(u.rows), {}, construct_b)
    # the paired module is its cell (its own rows in the cell); its parent (paired with no cell of A) stays
    assert merged == {"Functional.linear.9.forward": "Cell.head.Dense.forward.0",
                      "Module.head.Linear.forward.0": "Cell.head.Dense.forward.0", "Module.net.Net.forward.0": None}


def _leaf(shape=(4, 8), mx=1.0):
    from msprobe_cmp.dump import TensorLeaf

    return TensorLeaf("torch.Tensor", "torch.float32", shape, max=mx, min=-1.0, mean=0.0, norm=2.0)


def test_calls_aligned_by_call_order_in_one_framework_keep_their_own_rows(tmp_path):
    """A calls a block 3 times, B twice (its first call missing): call order pairs A's .1/.2 with B's .0/.1, whose
    names are also A's.  Each block call keeps its own 4 rows and A's failing call stays the failing cell."""
    from msprobe_cmp.dump import DumpMeta, DumpWriter, Entry, Map, Seq

    def side(name, calls):
        w = DumpWriter(tmp_path / name / "step0" / "rank", DumpMeta("statistics", "mix", "pytorch"))
        w.put(Entry.forward("Module.net.Net.forward.0", Seq((_leaf(),)), Map(), Seq((_leaf(),))))
        w.set_parent("Module.net.Net.forward.0", None)
        for cell, shape, op in calls:
            bad = name == "a" and cell == "Module.blk.Blk.forward.1"
            w.put(Entry.forward(cell, Seq((_leaf(shape),)), Map(), Seq((_leaf(shape, 9.0 if bad else 1.0),))))
            w.set_parent(cell, "Module.net.Net.forward.0")
            w.put(Entry.forward(op, Seq((_leaf(shape),)), Map(), Seq((_leaf(shape),))))
            w.set_parent(op, cell)
        w.flush()

    side("a", [("Module.blk.Blk.forward.0", (2, 2), "Functional.relu.0.forward"),
               ("Module.blk.Blk.forward.1", (4, 8), "Functional.relu.1.forward"),
               ("Module.blk.Blk.forward.2", (5, 8), "Functional.relu.2.forward")])
    side("b", [("Module.blk.Blk.forward.0", (4, 8), "Functional.relu.0.forward"),
               ("Module.blk.Blk.forward.1", (5, 8), "Functional.relu.1.forward")])
    c = compare(load_dump(tmp_path / "a"), load_dump(tmp_path / "b"))
    (u,) = c.units
    assert any(r.entry_name_b not in (None, r.entry_name) for r in u.rows)  # aligned by call order
    merged = merged_construct(paired_cells(u.rows), {}, {"x": "Module.blk.Blk.forward.0"})
    assert merged == {"x": "Module.blk.Blk.forward.0"}
    cells = {cell.cell: cell for cell in u.cells}
    # every block call: its own input and output, its relu's input and output
    assert {k: cells[f"Module.blk.Blk.forward.{k}"].rows for k in range(3)} == {0: 4, 1: 4, 2: 4}
    assert cells["Module.net.Net.forward.0"].rows == len(u.rows)
    assert [name for name, cell in cells.items() if cell.failing] == ["Module.net.Net.forward.0",
                                                                     "Module.blk.Blk.forward.1"]
    assert c.likely_origin is not None and c.likely_origin.where == "Module.blk.Blk.forward.1"
