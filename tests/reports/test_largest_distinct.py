"""The "largest disagreements" lists name each tensor once: an API's output, the enclosing cell's output and the
next API's input are one tensor recorded three times, and take one place of the list, not three."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.comparator import Comparison, compare
from msprobe_cmp.dump import Dump, DumpMeta, DumpWriter, Entry, Map, RankDump, Seq, TensorLeaf, load_dump
from msprobe_cmp.reports import common, render_html, render_markdown

LINEAR_OUT = "Functional.linear.0.forward.output.0"
CELL_OUT = "Cell.fc.Dense.forward.0.output.0"
RELU_IN = "Functional.relu.0.forward.input.0"

X = np.linspace(-1.0, 1.0, 64)
Y_B = np.linspace(-2.0, 3.0, 64)
Y_A = Y_B[::-1].copy()  # the linear output disagrees most: reversed
#: The other disagreeing tensors (entry -> (A, B)); every one differs by more than 1 somewhere, so all fail.
OTHERS = {
    "Functional.relu.0.forward.output.0": (np.maximum(Y_A, 0.0), np.maximum(Y_B, 0.0)),
    "Functional.add.0.forward.output.0": (X + 1.5 + 0.4 * np.sin(7 * X), X + 0.4 * np.sin(7 * X)),
    "Functional.mul.0.forward.output.0": (np.cos(3 * X) * 2.5, np.cos(3 * X) * 1.2 + 0.1),
    "Functional.sub.0.forward.output.0": (X * X * 4.0 - 1.3, X * X * 4.0),
}


def _leaf(arr: np.ndarray, name: str) -> TensorLeaf:
    return TensorLeaf("mindspore.Tensor", "Float32", arr.shape, float(arr.max()), float(arr.min()),
                      float(arr.mean()), float(np.linalg.norm(arr)), data_name=f"{name}.npy")


def _write_side(root: Path, side: str) -> Path:
    """A tensor-mode mix dump: linear -> Dense cell (holding it) -> relu, then add, mul, sub."""
    y = Y_A if side == "a" else Y_B
    arrays = {
        "Functional.linear.0.forward.input.0": X, LINEAR_OUT: y,
        "Cell.fc.Dense.forward.0.input.0": X, CELL_OUT: y,
        RELU_IN: y,
    }
    arrays |= {name: pair[0 if side == "a" else 1] for name, pair in OTHERS.items()}
    arrays |= {name.replace("output", "input"): X for name in OTHERS if not name.startswith("Functional.relu")}
    w = DumpWriter(root / side / "step0" / "rank", DumpMeta("tensor", "mix", "mindspore"))
    leaves = {}
    for name, arr in arrays.items():
        w.save_tensor(f"{name}.npy", arr.astype(np.float32))
        leaves[name] = _leaf(arr.astype(np.float32).astype(np.float64), name)
    for entry in ("Functional.linear.0.forward", "Cell.fc.Dense.forward.0", "Functional.relu.0.forward",
                  "Functional.add.0.forward", "Functional.mul.0.forward", "Functional.sub.0.forward"):
        w.put(Entry.forward(entry, Seq((leaves[f"{entry}.input.0"],)), Map(), Seq((leaves[f"{entry}.output.0"],))))
    w.set_parent("Functional.linear.0.forward", "Cell.fc.Dense.forward.0")
    w.flush()
    return root / side


@pytest.fixture(scope="module")
def recorded_thrice(tmp_path_factory) -> Comparison:
    root = tmp_path_factory.mktemp("thrice")
    return compare(load_dump(_write_side(root, "a")), load_dump(_write_side(root, "b")))


def _expected_order() -> list[str]:
    """The distinct disagreeing tensors by the lowest Cosine, then the largest MaxAbsErr (numpy, float32 data)."""
    tensors = {LINEAR_OUT: (Y_A, Y_B), **OTHERS}

    def rank(item):
        a, b = (x.astype(np.float32).astype(np.float64) for x in item[1])
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        return cosine, -float(np.max(np.abs(a - b)))

    return [name for name, _ in sorted(tensors.items(), key=rank)]


def test_one_tensor_recorded_three_times_takes_one_place(recorded_thrice):
    c = recorded_thrice
    rows = {r.name: r for r in c.units[0].rows}
    # the precondition of the expected order: every disagreeing row fails, so Cosine orders them
    assert {rows[n].verdict for n in (LINEAR_OUT, CELL_OUT, RELU_IN, *OTHERS)} == {"fail"}
    expected = _expected_order()
    assert expected[0] == LINEAR_OUT  # the reversed tensor has the lowest Cosine
    top = common.rank_disagreements(c, 3)
    assert [d.row.name for d in top] == expected[:3]
    assert [o.name for o in top[0].also] == [CELL_OUT, RELU_IN]
    assert all(d.also == () for d in top[1:])
    assert [r.name for _, r in common.select_largest_disagreements(c, 3)] == expected[:3]
    # every distinct tensor, each once
    assert [d.row.name for d in common.rank_disagreements(c)] == expected
    assert [d.row.name for d in common.rank_disagreements(c, -1)] == expected[:-1]


def test_markdown_and_html_name_the_other_records(recorded_thrice):
    c = recorded_thrice
    expected = _expected_order()
    md = render_markdown(c, top=3)
    table = [line for line in md.splitlines() if line.startswith(("| Functional", "| Cell"))]
    assert len(table) == 3
    names = [line.split(" | ")[0][2:] for line in table]
    esc = {n: n.replace("_", "\\_") for n in expected}
    assert names[0] == f"{esc[LINEAR_OUT]} (also recorded as {CELL_OUT}, {RELU_IN})"
    assert names[1:] == [esc[n] for n in expected[1:3]]
    assert "### Largest disagreements (top 3)" in md
    assert "are listed once" in md

    html = render_html(c)
    start = html.index("<h2>Largest disagreements</h2>")
    section = html[start:html.index("<h2", start + 1)]  # up to the next heading
    listed = re.findall(r'<tr class="r-\w+"><td class="lname"><a class="rowlink mono" href="#row-0-(\d+)">([^<]+)</a>',
                        section)
    index = {r.name: r.index for r in c.units[0].rows}
    assert listed == [(str(index[n]), n) for n in expected]  # 5 distinct tensors (7 rows before)
    also = re.findall(r'also recorded as (.*?)</div>', section)
    assert also == [f'<a class="rowlink mono" href="#row-0-{index[CELL_OUT]}">{CELL_OUT}</a>, '
                    f'<a class="rowlink mono" href="#row-0-{index[RELU_IN]}">{RELU_IN}</a>']
    assert "The 5 tensors whose two sides disagree most" in section


def test_the_json_report_is_unchanged_by_the_lists(recorded_thrice):
    from msprobe_cmp.reports.tables import render_json_utf8

    assert b"also recorded" not in render_json_utf8(recorded_thrice)


def test_also_recorded_as_caps_the_names():
    assert common.also_recorded_as([]) == ""
    assert common.also_recorded_as(["a"]) == "also recorded as a"
    assert common.also_recorded_as(["a", "b", "c"]) == "also recorded as a, b, c"
    assert common.also_recorded_as(["a", "b", "c", "d", "e"]) == "also recorded as a, b, c and 2 more"
    assert common.also_recorded_as(["a", "b"], shown=1) == "also recorded as a and 1 more"


# ------------------------------------------------------------------ which rows are one tensor (statistics mode)


def t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32", md5=None):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm, md5=md5)


def unit(entries, step=0):
    return RankDump(Path("mem"), step, 0, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


def fwd(name, leaf):
    return Entry.forward(name, Seq(), Map(), Seq((leaf,)))


def test_only_equal_tensors_are_merged():
    same = t(mx=3.0)
    a = [
        fwd("Functional.first.0.forward", same),
        fwd("Functional.copy.0.forward", same),
        fwd("Functional.other_dtype.0.forward", t(mx=3.0, dtype="Float16")),
        fwd("Functional.other_shape.0.forward", t(mx=3.0, shape=(2, 2))),
        fwd("Functional.other_b.0.forward", same),
        fwd("Functional.nan_mean.0.forward", t(mx=3.0, mean=math.nan)),
        fwd("Functional.nan_mean.1.forward", t(mx=3.0, mean=math.nan)),
        fwd("Functional.nan_max.0.forward", t(mx=math.nan, mean=math.nan)),  # NaN in another place than nan_mean's
        fwd("Functional.all_nan.0.forward", t(mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan)),
        fwd("Functional.all_nan.1.forward", t(mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan)),
        fwd("Functional.no_norm.0.forward", t(mx=3.0, norm=None)),
        fwd("Functional.no_norm.1.forward", t(mx=3.0, norm=None)),
    ]
    b = [fwd(e.name, t()) for e in a]
    b[2] = fwd("Functional.other_dtype.0.forward", t(dtype="Float16"))
    b[3] = fwd("Functional.other_shape.0.forward", t(shape=(2, 2)))
    b[4] = fwd("Functional.other_b.0.forward", t(mn=-1.5))  # A equal to first's A, B differs
    b[5] = fwd("Functional.nan_mean.0.forward", t(mean=math.nan))
    b[6] = fwd("Functional.nan_mean.1.forward", t(mean=math.nan))
    b[7] = fwd("Functional.nan_max.0.forward", t(mean=math.nan))
    c = compare(unit(a), unit(b))
    listed = common.rank_disagreements(c, 20)
    by_name = {d.row.entry_name: [o.entry_name for o in d.also] for d in listed}
    assert by_name["Functional.first.0.forward"] == ["Functional.copy.0.forward"]
    # a NaN equals a NaN in the same place (each side keeps a statistic that is not NaN)
    assert by_name["Functional.nan_mean.0.forward"] == ["Functional.nan_mean.1.forward"]
    merged = {"Functional.copy.0.forward", "Functional.nan_mean.1.forward"}
    # every other row stays on its own: other dtype, shape or B side; NaN in another place; a side all NaN;
    # missing statistics
    assert sorted(by_name) == sorted(e.name for e in a if e.name not in merged)
    assert all(v == [] for k, v in by_name.items() if k not in ("Functional.first.0.forward",
                                                                 "Functional.nan_mean.0.forward"))


def test_rows_of_other_units_are_not_merged():
    a0 = [fwd("Functional.f.0.forward", t(mx=3.0))]
    b0 = [fwd("Functional.f.0.forward", t())]
    c = compare(Dump(Path("a"), (unit(a0, 0), unit(a0, 1))), Dump(Path("b"), (unit(b0, 0), unit(b0, 1))))
    listed = common.rank_disagreements(c, 5)
    assert [(d.unit, d.row.entry_name, d.also) for d in listed] == [
        (0, "Functional.f.0.forward", ()), (1, "Functional.f.0.forward", ())]


def test_markdown_caps_the_other_names():
    a = [fwd(f"Functional.f.{k}.forward", t(mx=3.0)) for k in range(6)]
    b = [fwd(f"Functional.f.{k}.forward", t()) for k in range(6)]
    c = compare(unit(a), unit(b))
    md = render_markdown(c)
    line = next(x for x in md.splitlines() if x.startswith("| Functional"))
    assert line.startswith("| Functional.f.0.forward.output.0 (also recorded as Functional.f.1.forward.output.0, "
                           "Functional.f.2.forward.output.0, Functional.f.3.forward.output.0 and 2 more) |")
    assert "### Largest disagreements (top 1)" in md
    html = render_html(c)
    start = html.index("<h2>Largest disagreements</h2>")
    section = html[start:html.index("<h2", start + 1)]  # up to the next heading
    assert section.count('<tr class="r-fail">') == 1
    links = re.findall(r'href="#row-0-(\d+)">Functional\.f\.(\d+)\.forward\.output\.0</a>', section)
    assert links == [(str(k), str(k)) for k in range(6)]  # three shown, the other two behind "and 2 more"
    assert ('Functional.f.3.forward.output.0</a><details class="more"><summary>and 2 more</summary>'
            '<a class="rowlink mono" href="#row-0-4">') in section


def _reference(c: Comparison, limit: int) -> list[tuple[int, str, list[str]]]:
    """Sort every candidate, then group rows of one unit with equal sides (tensors, all statistics present, NaN in
    the same places, each side with a statistic that is not NaN), compared_by, verdict and metrics; the first
    ``limit`` groups with every row of each."""
    candidates = [(ui, r) for ui, u in enumerate(c.units) for r in u.rows
                  if r.verdict == "fail" or (r.differs and r.verdict != "skip")]
    ranked = sorted(candidates, key=lambda item: common._disagreement_key(item[1]))
    groups: dict[object, list] = {}
    order: list[object] = []
    for ui, r in ranked:
        sides = (r.a, r.b)
        stats = [getattr(s, k) for s in sides if s is not None for k in ("max", "min", "mean", "norm")]
        mergeable = (all(s is not None and s.kind == "tensor" for s in sides) and len(stats) == 8
                     and all(v is not None for v in stats)
                     and not all(math.isnan(v) for v in stats[:4]) and not all(math.isnan(v) for v in stats[4:]))
        # NaN compares unequal: the rows' sides and metrics are compared as text (repr), where NaN is "nan"
        ident = ((ui, repr(r.a), repr(r.b), r.compared_by, r.verdict, repr(r.metrics)) if mergeable
                 else (ui, r.index, "own"))
        if ident not in groups:
            groups[ident] = []
            order.append(ident)
        groups[ident].append(r)
    return [(k[0], groups[k][0].name, [o.name for o in groups[k][1:]]) for k in order[:limit]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fast_selection_equals_sorting_every_row(seed):
    """Random dumps with tensors recorded up to 40 times, ties of failing shape mismatches and a tensor that
    fills more than the fast path's window: the same list as sorting every candidate."""
    rng = random.Random(seed)
    pool = [(t(mx=1.0 + rng.choice([0.5, 1.0, 2.0, 4.0]) * k / 50), t()) for k in range(60)]
    # tensors holding NaN: a NaN Max on A (each of a few Means), a side all NaN (never merged)
    pool[5:10] = [(t(mx=math.nan, mean=0.01 * k), t(mean=0.01 * k)) for k in range(5)]
    pool[10] = (t(mx=math.nan, mn=math.nan, mean=math.nan, norm=math.nan), t())
    a, b = [], []
    for k in range(700):
        roll = rng.random()
        if roll < 0.05:
            la, lb = t(shape=(2, 2)), t()  # a failing shape mismatch: equal keys, ties
        elif roll < 0.15:
            la, lb = t(mx=3.0 + seed), t()  # one failing tensor recorded about 70 times
        else:
            la, lb = pool[min(int(rng.expovariate(0.2)), len(pool) - 1)]
        a.append(fwd(f"Functional.f.{k}.forward", la))
        b.append(fwd(f"Functional.f.{k}.forward", lb))
    half = len(a) // 2
    c = compare(Dump(Path("a"), (unit(a[:half], 0), unit(a[half:], 1))),
                Dump(Path("b"), (unit(b[:half], 0), unit(b[half:], 1))))
    for limit in (1, 2, 5, 15, 40, 1000):
        got = [(d.unit, d.row.name, [o.name for o in d.also]) for d in common.rank_disagreements(c, limit)]
        assert got == _reference(c, limit), limit
    facts = common.ReportFacts(c)
    assert facts.disagreements(15) == common.rank_disagreements(c, 15)
    assert facts.disagreements(10) == common.rank_disagreements(c, 15)[:10]  # taken from the ranked 15
    assert facts.largest_disagreements(10) == [(d.unit, d.row) for d in common.rank_disagreements(c, 10)]


@pytest.mark.parametrize("seed", range(5))
def test_the_column_order_of_the_keys_is_a_stable_sort_of_the_key_tuples(seed):
    """``_key_order`` (np.lexsort of the key columns) gives the order ``sorted`` gives the key tuples themselves:
    tensor and other rows mixed, many ties, signed zeros and infinities."""
    rng = np.random.default_rng(seed)
    n = 3000

    def floats():
        return rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0, -np.inf, np.inf, 0.5]), n)

    columns = common._KeyColumns(rng.integers(0, 3, n), rng.integers(0, 2, n), rng.random(n) < 0.5, floats(), floats(),
                          floats(), floats())
    keys = common._keys_of(columns, np.arange(n))
    assert common._key_order(columns).tolist() == sorted(range(n), key=keys.__getitem__)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("best", [1, 7, 100, 2999, 3000, 5000])
def test_the_first_keys_found_by_a_partition_are_the_sorts_first(seed, best):
    """``_key_prefix`` (the first ``best`` items, sorting only those that can be among them) is the prefix of the
    whole sort, ties at the boundary included, whatever the mix of severities."""
    rng = np.random.default_rng(seed)
    n = 3000
    severity = rng.integers(0, 3, n) if seed % 2 else np.full(n, 2)  # one level only, or several

    def floats():
        return rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0, -np.inf, np.inf, 0.5]), n)

    columns = common._KeyColumns(severity, rng.integers(0, 2, n), rng.random(n) < 0.5, floats(), floats(), floats(),
                                 floats())
    assert common._key_prefix(columns, best).tolist() == common._key_order(columns)[:best].tolist()
