from __future__ import annotations

import json

import pytest

from msprobe_cmp.dump.naming import api_name, cell_name, parameters_grad_name, parse_name, tensor_file_name


@pytest.mark.parametrize(
    ("name", "kind", "prefix", "op", "index", "direction", "stem"),
    [
        ("Functional.relu.0.forward", "api", "Functional", "relu", 0, "forward", "Functional.relu"),
        ("Tensor.__add__.3.backward", "api", "Tensor", "__add__", 3, "backward", "Tensor.__add__"),
        ("Primitive.matmul.MatMul.12.forward", "api", "Primitive", "matmul.MatMul", 12, "forward",
         "Primitive.matmul.MatMul"),
        ("Cell.fc1.Dense.forward.0", "cell", "Cell", "fc1.Dense", 0, "forward", "Cell.fc1.Dense"),
        ("Cell.1.fc1.Dense.backward.2", "cell", "Cell", "1.fc1.Dense", 2, "backward", "Cell.1.fc1.Dense"),
        ("Module.blocks.0.Linear.forward.0", "cell", "Module", "blocks.0.Linear", 0, "forward",
         "Module.blocks.0.Linear"),
        ("Cell.blocks.0.Dense.parameters_grad", "parameters_grad", "Cell", "blocks.0.Dense", None, None,
         "Cell.blocks.0.Dense"),
        ("Cell.head.Dense.parameters_grad.1", "parameters_grad", "Cell", "head.Dense", 1, None, "Cell.head.Dense"),
        ("loss.0", "other", "loss", "0", None, None, "loss.0"),
    ],
)
def test_parse_name(name, kind, prefix, op, index, direction, stem):
    p = parse_name(name)
    assert (p.kind, p.prefix, p.op, p.index, p.direction, p.stem) == (kind, prefix, op, index, direction, stem)


def test_cell_path_and_class():
    p = parse_name("Cell.blocks.0.Dense.forward.0")
    assert (p.cell_path, p.cell_class) == ("blocks.0", "Dense")
    assert parse_name("Functional.relu.0.forward").cell_path is None


def test_builders_invert_parse():
    assert api_name("Functional", "relu", 0, "forward") == "Functional.relu.0.forward"
    assert api_name("Primitive", "matmul.MatMul", 2, "backward") == "Primitive.matmul.MatMul.2.backward"
    assert cell_name("fc1", "Dense", "forward", 0) == "Cell.fc1.Dense.forward.0"
    assert cell_name("fc1", "Dense", "backward", 1, model_index=1) == "Cell.1.fc1.Dense.backward.1"
    assert cell_name("fc1", "Linear", "forward", 0, prefix="Module") == "Module.fc1.Linear.forward.0"
    assert parameters_grad_name("blocks.0", "Dense") == "Cell.blocks.0.Dense.parameters_grad"
    assert tensor_file_name("Functional.relu.0.forward", "output.0") == "Functional.relu.0.forward.output.0.npy"


@pytest.mark.parametrize(
    "call",
    [
        lambda: api_name("Functional", "relu", -1, "forward"),
        lambda: api_name("Functional", "relu", 0, "sideways"),
        lambda: api_name("", "relu", 0, "forward"),
        lambda: cell_name("fc1", "Dense", "forward", 0, prefix="Layer"),
        lambda: tensor_file_name("../evil", "output.0"),
        lambda: tensor_file_name("a/b", "output.0"),
    ],
)
def test_builders_reject_bad_parts(call):
    with pytest.raises(ValueError):
        call()


def test_every_fixture_name_parses_to_a_known_kind(msprobe_fixtures):
    for dump in sorted(msprobe_fixtures.glob("*_[ab]/step*/rank/dump.json")):
        for name in json.loads(dump.read_text())["data"]:
            assert parse_name(name).kind != "other", (dump, name)


def test_twin_names_the_same_call_in_the_other_direction():
    from msprobe_cmp.dump.naming import parse_name

    assert parse_name("Cell.fc1.Dense.forward.0").twin("backward") == "Cell.fc1.Dense.backward.0"
    assert parse_name("Functional.relu.2.backward").twin("forward") == "Functional.relu.2.forward"
    assert parse_name("Primitive.matmul.MatMul.3.forward").twin("backward") == "Primitive.matmul.MatMul.3.backward"
    assert parse_name("Functional.relu.2.forward").twin("forward") is None  # already that direction
    assert parse_name("Cell.fc1.Dense.parameters_grad").twin("forward") is None
