"""comparator/mapping: built-in tables, name canonicalisation, gradient positions, user mapping files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from msprobe_cmp.comparator.mapping import (
    MAX_MAPPING_FILE_BYTES,
    EntryView,
    build_views,
    framework_namespace,
    load_api_mapping,
    load_builtin_tables,
    load_cell_mapping,
    resolve_gradients,
)
from msprobe_cmp.comparator.mapping.canonical import NameMapping
from msprobe_cmp.comparator.matching import match_views
from msprobe_cmp.dump.naming import parse_name
from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf
from msprobe_cmp.errors import ConfigError

TABLE_DIR = Path(__file__).resolve().parents[2] / "msprobe_cmp" / "comparator" / "mapping"


def _t(shape, dtype="Float32", mean=0.5):
    return TensorLeaf("mindspore.Tensor", dtype, tuple(shape), 1.0, 0.0, mean, 1.0)


def _fwd(name, inputs, outputs, params=None):
    p = Map(tuple(params.items())) if params is not None else None
    return Entry.forward(name, Seq(tuple(inputs)), Map(()), Seq(tuple(outputs)), p)


def _bwd(name, inputs, outputs):
    return Entry.backward(name, Seq(tuple(inputs)), Seq(tuple(outputs)))


# ---------------------------------------------------------------------------------------------- tables


def test_every_builtin_entry_parses_with_the_naming_grammar():
    t = load_builtin_tables()
    assert len(t.apis) > 100 and len(t.primitives) > 20 and len(t.cells) > 30
    for ms, pt in t.apis.items():
        for name, prefix in ((ms, ms.split(".")[0]), (pt, pt.split(".")[0])):
            parsed = parse_name(f"{name}.0.forward")
            assert (parsed.kind, parsed.prefix, parsed.stem) == ("api", prefix, name)
    for cls, pt in t.primitives.items():
        assert parse_name(f"Primitive.attr.{cls}.3.backward").op == f"attr.{cls}"
        assert parse_name(f"{pt}.0.forward").kind == "api"
    for ms_cls, target in t.cells.items():
        parsed = parse_name(f"Module.fc1.{target.module}.forward.0")
        assert (parsed.kind, parsed.cell_class) == ("cell", target.module)
        assert parse_name(f"Cell.fc1.{ms_cls}.parameters_grad").kind == "parameters_grad"


@pytest.mark.parametrize("name", ["ms_to_pt_api.yaml", "cell_classes.yaml"])
def test_builtin_tables_have_no_duplicate_keys(name):
    # read the raw text, independently of the loader: every "key:" at one indentation level is unique
    text = (TABLE_DIR / name).read_text()
    seen: dict[tuple[str, int], set[str]] = {}
    section = ""
    for line in text.splitlines():
        m = re.match(r"^( *)([A-Za-z_][\w.]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        if indent == 0:
            section = key
        if section == "composites" and indent > 0:
            continue  # list items: each has its own keys
        bucket = seen.setdefault((section, indent), set())
        assert key not in bucket, f"{name}: {key} twice"
        bucket.add(key)


def test_the_table_holds_the_pairs_the_task_names():
    t = load_builtin_tables()
    assert t.cells["Dense"].module == "Linear" and t.cells["SequentialCell"].module == "Sequential"
    assert dict(t.cells["LayerNorm"].parameters) == {"gamma": "weight", "beta": "bias"}
    assert t.primitives["ReLU"] == "Functional.relu"
    comp = t.composites[0]
    assert (comp.primitives, comp.api) == (("MatMul", "BiasAdd"), "Functional.linear")


# ---------------------------------------------------------------------------------------------- names


def test_namespaces():
    assert framework_namespace("mindspore") == "mindspore"
    assert framework_namespace("pytorch") == framework_namespace("mindtorch") == "pytorch"
    cell = _fwd("Cell.fc1.Dense.forward.0", [_t([2])], [_t([2])])
    module = _fwd("Module.fc1.Linear.forward.0", [_t([2])], [_t([2])])
    assert framework_namespace("unknown", [cell]) == "mindspore"
    assert framework_namespace("unknown", [module]) == "pytorch"
    assert framework_namespace("unknown", [cell, module]) is None


def _names(entries, user=None):
    return [v.name for v in build_views(entries, "mindspore", user)]


def test_ms_names_become_pytorch_names():
    entries = [
        _fwd("Mint.add.0.forward", [_t([2])], [_t([2])]),
        _fwd("MintFunctional.gelu.0.forward", [_t([2])], [_t([2])]),
        _fwd("Functional.concat.0.forward", [_t([2])], [_t([2])]),
        _fwd("Functional.relu.3.forward", [_t([2])], [_t([2])]),  # not in the table: same spelling
        _fwd("Tensor.__add__.0.forward", [_t([2])], [_t([2])]),
        _fwd("Primitive.act.ReLU.1.forward", [_t([2])], [_t([2])]),
        _fwd("Primitive.x.Unknown.0.forward", [_t([2])], [_t([2])]),
        _fwd("Cell.1.fc1.Dense.forward.2", [_t([2])], [_t([2])]),
        _fwd("Cell.seq.SequentialCell.forward.0", [_t([2])], [_t([2])]),
        _fwd("Cell.act.MyCell.forward.0", [_t([2])], [_t([2])]),
    ]
    assert _names(entries) == [
        "Torch.add.0.forward", "Functional.gelu.0.forward", "Torch.cat.0.forward", "Functional.relu.3.forward",
        "Tensor.__add__.0.forward", "Functional.relu.1.forward", "Primitive.x.Unknown.0.forward",
        "Module.1.fc1.Linear.forward.2", "Module.seq.Sequential.forward.0", "Module.act.MyCell.forward.0",
    ]


def test_user_cell_mapping_beats_the_table_and_parameters_are_renamed():
    ln = _fwd("Cell.norm.LayerNorm.forward.0", [_t([2, 4])], [_t([2, 4])], {"gamma": _t([4]), "beta": _t([4])})
    grads = Entry.parameters_grad("Cell.norm.LayerNorm.parameters_grad", [("gamma", Seq((_t([4]),)))])
    dense = _fwd("Cell.blocks.0.Dense.forward.0", [_t([2])], [_t([2])])
    user = NameMapping(cells={"blocks.0.Dense": "layers.0.MyLinear"}, cell_source="m.yaml")
    views = build_views([ln, grads, dense], "mindspore", user)
    assert [v.name for v in views] == ["Module.norm.LayerNorm.forward.0", "Module.norm.LayerNorm.parameters_grad",
                                       "Module.layers.0.MyLinear.forward.0"]
    assert [i.path for i in views[0].items] == ["input.0", "output.0", "parameters.weight", "parameters.bias"]
    assert [i.path for i in views[1].items] == ["weight"]
    assert [i.orig_path for i in views[0].items][2:] == ["parameters.gamma", "parameters.beta"]
    assert views[2].mapped_by == "user cell mapping m.yaml: blocks.0.Dense → layers.0.MyLinear"


def test_batchnorm_moving_statistics_pair_with_pytorch_buffers():
    """MindSpore holds BatchNorm's running statistics as parameters, PyTorch as buffers (recorded in the forward
    entry's ``buffers`` field): the built-in table pairs them, and the pair matches row for row."""
    ms = _fwd("Cell.bn.BatchNorm2d.forward.0", [_t([2, 3, 4, 4])], [_t([2, 3, 4, 4])],
              {"gamma": _t([3]), "beta": _t([3]), "moving_mean": _t([3], mean=0.1), "moving_variance": _t([3])})
    pt_leaf = TensorLeaf("torch.Tensor", "torch.float32", (3,), 1.0, 0.0, 0.1, 1.0)
    pt = Entry.forward("Module.bn.BatchNorm2d.forward.0", Seq((pt_leaf,)), Map(()), Seq((pt_leaf,)),
                       Map((("weight", pt_leaf), ("bias", pt_leaf))),
                       buffers=Map((("running_mean", pt_leaf), ("running_var", pt_leaf), ("num_batches_tracked",
                                    TensorLeaf("torch.Tensor", "torch.int64", (), 1.0, 1.0, 1.0, 1.0)))))
    view = build_views([ms], "mindspore")[0]
    assert [i.path for i in view.items] == ["input.0", "output.0", "parameters.weight", "parameters.bias",
                                            "buffers.running_mean", "buffers.running_var"]
    pt_paths = [p for p, _ in pt.leaves()]
    assert {"buffers.running_mean", "buffers.running_var"} <= set(pt_paths)


def test_pytorch_side_keeps_its_names():
    e = _fwd("Module.fc.Linear.forward.0", [_t([2])], [_t([2])])
    assert [v.name for v in build_views([e], "pytorch")] == ["Module.fc.Linear.forward.0"]


# ---------------------------------------------------------------------------------------------- gradients


def test_gradient_positions():
    x, w, b = (8, 16), (4, 16), (4,)
    # positional (msprobe-cmp's recorder)
    assert resolve_gradients([x, w, b], [x, w, b]) == [(0, False), (1, False), (2, False)]
    # msprobe 1.2.2 MindSpore Primitive: reversed, nulls dropped
    assert resolve_gradients([x, w], [w, x], reversed_first=True) == [(1, False), (0, False)]
    assert resolve_gradients([(8, 16), (16, 16)], [(16, 16)], reversed_first=True) == [(1, False)]
    # PyTorch linear as msprobe records it: (bias, input, weight.T)
    assert resolve_gradients([x, w, b], [b, x, (16, 4)]) == [(2, False), (0, False), (1, True)]
    # a null leaf takes the position left free
    assert resolve_gradients([(8, 16), (16, 16), (16,)], [(16,), None, (16, 16)]) == [(2, False), (0, False),
                                                                                        (1, False)]
    assert resolve_gradients([x], [(3, 3)]) is None


def test_composite_matmul_biasadd_is_one_linear_with_its_backward():
    x, w, b, y = _t([8, 16], mean=0.1), _t([4, 16], mean=0.2), _t([4], mean=0.3), _t([8, 4], mean=0.4)
    mid = _t([8, 4], mean=0.5)
    gy, gx, gw, gb = _t([8, 4], mean=1.1), _t([8, 16], mean=1.2), _t([4, 16], mean=1.3), _t([4], mean=1.4)
    ms = [
        _fwd("Primitive.matmul.MatMul.0.forward", [x, w], [mid]),
        _fwd("Primitive.bias_add.BiasAdd.0.forward", [mid, b], [y]),
        _bwd("Primitive.bias_add.BiasAdd.0.backward", [gy], [gb, gy]),  # msprobe 1.2.2 order: reversed
        _bwd("Primitive.matmul.MatMul.0.backward", [gy], [gw, gx]),
    ]
    tl = lambda leaf: TensorLeaf("torch.Tensor", "torch.float32", leaf.shape, 1.0, 0.0, leaf.mean, 1.0)  # noqa: E731
    gwt = TensorLeaf("torch.Tensor", "torch.float32", (16, 4), 1.0, 0.0, gw.mean, 1.0)
    pt = [
        _fwd("Functional.linear.0.forward", [tl(x), tl(w), tl(b)], [tl(y)]),
        _bwd("Functional.linear.0.backward", [tl(gy)], [tl(gb), tl(gx), gwt]),
    ]
    views = build_views(ms, "mindspore")
    assert [v.name for v in views] == ["Functional.linear.0.forward", "Functional.linear.0.backward"]
    rows = match_views(views, build_views(pt, "pytorch"))
    by = {r.name: r for r in rows}
    pairs = {r.name: r.name_b for r in rows if r.match_class == "matched"}
    assert pairs == {
        "Primitive.matmul.MatMul.0.forward.input.0": "Functional.linear.0.forward.input.0",
        "Primitive.matmul.MatMul.0.forward.input.1": "Functional.linear.0.forward.input.1",
        "Primitive.bias_add.BiasAdd.0.forward.input.1": "Functional.linear.0.forward.input.2",
        "Primitive.bias_add.BiasAdd.0.forward.output.0": "Functional.linear.0.forward.output.0",
        "Primitive.bias_add.BiasAdd.0.backward.input.0": "Functional.linear.0.backward.input.0",
        "Primitive.bias_add.BiasAdd.0.backward.output.0": "Functional.linear.0.backward.output.0",
        "Primitive.matmul.MatMul.0.backward.output.1": "Functional.linear.0.backward.output.1",
        "Primitive.matmul.MatMul.0.backward.output.0": "Functional.linear.0.backward.output.2",
    }
    # each pair holds the same statistic on both sides (the means were chosen distinct per tensor)
    for name in pairs:
        assert by[name].leaf_a.mean == by[name].leaf_b.mean, name
    assert by["Primitive.matmul.MatMul.0.backward.output.0"].transpose_b
    only_a = sorted(r.name for r in rows if r.match_class == "only_in_a")
    assert only_a == ["Primitive.bias_add.BiasAdd.0.backward.output.1", "Primitive.bias_add.BiasAdd.0.forward.input.0",
                      "Primitive.matmul.MatMul.0.backward.input.0", "Primitive.matmul.MatMul.0.forward.output.0"]
    assert not [r for r in rows if r.match_class == "only_in_b"]


def test_user_api_mapping_moves_arguments():
    a = _fwd("Functional.my_op.0.forward", [_t([2], mean=0.1), _t([3], mean=0.2)], [_t([3], mean=0.3)])
    b = _fwd("Torch.their_op.0.forward", [_t([3], mean=0.2), _t([2], mean=0.1)], [_t([3], mean=0.3)])
    from msprobe_cmp.comparator.mapping import ApiMappingRecord

    rec = ApiMappingRecord("Functional.my_op", "Torch.their_op", args=((0, 1), (1, 0)), source="user API mapping m")
    rows = match_views(build_views([a], "mindspore", NameMapping(apis=(rec,))), build_views([b], "pytorch"))
    assert {(r.name, r.name_b, r.match_class) for r in rows} == {
        ("Functional.my_op.0.forward.input.0", "Torch.their_op.0.forward.input.1", "matched"),
        ("Functional.my_op.0.forward.input.1", "Torch.their_op.0.forward.input.0", "matched"),
        ("Functional.my_op.0.forward.output.0", "Torch.their_op.0.forward.output.0", "matched"),
    }
    assert all(r.leaf_a.mean == r.leaf_b.mean for r in rows)
    assert all(r.mapped_by == "user API mapping m: Functional.my_op → Torch.their_op" for r in rows)


def test_views_are_entry_like():
    v = build_views([_fwd("Cell.a.Dense.forward.0", [_t([1])], [_t([1])])], "mindspore")[0]
    assert isinstance(v, EntryView) and not v.is_parameters_grad and len(list(v.leaves())) == 2


# ---------------------------------------------------------------------------------------------- user files


def test_the_shipped_cell_mapping_loads():
    m = load_cell_mapping(Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
                          / "cell_mapping_ms_to_torch.yaml")
    assert m == {"blocks.0.Dense": "blocks.0.Linear", "blocks.1.Dense": "blocks.1.Linear", "head.Dense": "head.Linear"}


def test_api_mapping_accepts_msprobe_forms(tmp_path):
    listed = tmp_path / "list.yaml"
    listed.write_text("- ms_api: Functional.conv2d\n  pt_api: Functional.conv2d\n  ms_args: [0, 1]\n"
                      "  pt_args: [0, 1]\n  ms_output: [0]\n  pt_output: [0]\n")
    single = tmp_path / "single.yaml"  # the form msprobe's documentation shows (crashes msprobe 1.2.2)
    single.write_text("ms_api: Mint.add\npt_api: Torch.add\nms_args: ['1', 10]\npt_args: [10, 1]\n"
                      "ms_outputs: [0]\npt_outputs: [0]\n")
    (rec,) = load_api_mapping(listed)
    assert (rec.ms_api, rec.pt_api, rec.args, rec.outputs) == ("Functional.conv2d", "Functional.conv2d",
                                                               ((0, 0), (1, 1)), ((0, 0),))
    (rec,) = load_api_mapping(single)
    assert rec.args == ((1, 10), (10, 1)) and rec.outputs == ((0, 0),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("- pt_api: Torch.add\n", "record 0.ms_api: missing"),
        ("- ms_api: Functional.add\n  pt_api: 3\n", "record 0.pt_api: expected a string"),
        ("- ms_api: Foo.add\n  pt_api: Torch.add\n", "unknown API family 'Foo'"),
        ("- ms_api: Functional.add.0.forward\n  pt_api: Torch.add\n", "without call index"),
        ("- ms_api: Functional.add\n  pt_api: Torch.add\n  colour: red\n", "record 0.colour: unknown key"),
        ("- ms_api: Functional.add\n  pt_api: Torch.add\n  ms_args: [0]\n", "record 0.pt_args: missing"),
        ("- ms_api: Functional.add\n  pt_api: Torch.add\n  ms_args: [0, 1]\n  pt_args: [0]\n", "1 item(s)"),
        ("- ms_api: Functional.add\n  pt_api: Torch.add\n  ms_args: [-1]\n  pt_args: [0]\n", "ms_args[0]"),
        ("- ms_api: Functional.add\n  pt_api: Torch.add\n- ms_api: Functional.add\n  pt_api: Torch.sub\n",
         "already mapped by record 0"),
        ("- [1, 2]\n", "record 0: expected a mapping"),
        ("a: &a [1, 2]\nb: *a\n", "aliases"),
        ("ms_api: Functional.add\nms_api: Functional.sub\npt_api: Torch.add\n", "duplicate key 'ms_api'"),
        ("- ms_api: [unclosed\n", "invalid API mapping YAML"),
    ],
)
def test_bad_api_mapping_files_are_one_line_errors(tmp_path, text, message):
    f = tmp_path / "am.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_api_mapping(f)
    assert message in str(exc.value) and str(f) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("- blocks.0.Dense\n", "expected a mapping"),
        ("blocks.0.Dense: 3\n", "blocks.0.Dense: expected a string"),
        ("blocks..Dense: x.Linear\n", "dot-separated"),
        ("blocks.0.Dense: a b\n", "dot-separated"),
        ("a.Dense: x.Linear\na.Dense: y.Linear\n", "duplicate key 'a.Dense'"),
    ],
)
def test_bad_cell_mapping_files_are_one_line_errors(tmp_path, text, message):
    f = tmp_path / "cm.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_cell_mapping(f)
    assert message in str(exc.value) and str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_hostile_files(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    bomb.write_text("\n".join(lines) + "\n")
    assert yaml.safe_load(bomb.read_text())  # PyYAML itself builds it (shared references)...
    for loader in (load_cell_mapping, load_api_mapping):
        with pytest.raises(ConfigError, match="aliases"):  # ...we refuse before anything walks it
            loader(bomb)
    huge = tmp_path / "huge.yaml"
    huge.write_text("a.Dense: b.Linear\n" * (MAX_MAPPING_FILE_BYTES // 10))
    with pytest.raises(ConfigError, match="larger than"):
        load_cell_mapping(huge)
    with pytest.raises(ConfigError, match="cannot read"):
        load_cell_mapping(tmp_path / "missing.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_api_mapping(binary)


def _argument_doc(**overrides):
    doc = {"apis": {}, "primitives": {}, "composites": [], "arguments": {}, "ms_signatures": {}, "pt_signatures": {},
           "aliases": {}, "plumbing": {}}
    doc.update(overrides)
    return doc


@pytest.mark.parametrize(("overrides", "message"), [
    ({"arguments": {"Primitive.BatchNorm": {"inputs": {0: 0, 1: 0}}}}, "a PyTorch index is listed twice"),
    ({"arguments": {"Primitive.BatchNorm": {"outputs": {0: 0}}}}, "expected {inputs"),
    ({"arguments": {"Primitive.BatchNorm": {"inputs": {"0": 0}}}}, "mapping of argument index"),
    ({"ms_signatures": {"Functional.conv2d": ["input", "input"]}}, "listed twice"),
    ({"pt_signatures": {"Cell.conv2d": ["input"]}}, "family"),
    ({"plumbing": {"Primitive.Shape": ""}}, "the reason"),
])
def test_the_argument_tables_are_validated(overrides, message):
    from msprobe_cmp.comparator.mapping.tables import parse_argument_tables

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_argument_tables(_argument_doc(**overrides), Path("t.yaml"))


def test_a_missing_section_of_the_api_table_is_an_error():
    from msprobe_cmp.comparator.mapping.tables import parse_api_tables

    doc = _argument_doc()
    del doc["plumbing"]
    with pytest.raises(ConfigError, match="expected exactly the sections"):
        parse_api_tables(doc, Path("t.yaml"))


def test_batchnorm_and_cross_entropy_records_follow_the_documented_signatures():
    t = load_builtin_tables()
    ms_bn = ("input_x", "scale", "bias", "mean", "variance")  # mindspore.ops.BatchNorm's inputs
    pt_bn = t.pt_signatures["Functional.batch_norm"]
    names = {"input_x": "input", "scale": "weight", "bias": "bias", "mean": "running_mean", "variance": "running_var"}
    assert dict(t.arguments["Primitive.BatchNorm"].inputs) == {i: pt_bn.index(names[n]) for i, n in enumerate(ms_bn)}
    ms_ce, pt_ce = t.ms_signatures["Functional.cross_entropy"], t.pt_signatures["Functional.cross_entropy"]
    assert [pt_ce.index(n) for n in ms_ce] == [0, 1, 2, 4, 6, 7]
