"""RowTableBuilder.set_sides (msprobe_cmp/comparator/rowtable.py): each row's side columns from its leaf, the
strings, shapes and statistics written column-wise, the codes given in the order of the rows that first hold them."""

from __future__ import annotations

import math

import numpy as np

from msprobe_cmp.comparator.rowtable import ABSENT, ABSENT_LEAF, NULL, TENSOR, VALUE, RowTableBuilder
from msprobe_cmp.dump.schema import TensorLeaf, ValueLeaf
from msprobe_cmp.dump.serde import entries_from_json


class _OwnLeaf(TensorLeaf):
    """A subclass of the tensor leaf (a side is a tensor when its leaf is one)."""

    __slots__ = ()


def test_side_columns_and_codes_in_row_order():
    leaves = [
        TensorLeaf("torch.Tensor", "B", (2,), 1.0, None, 0.5, math.nan, md5="x"),
        None,
        ABSENT_LEAF,
        ValueLeaf("int", 3),
        TensorLeaf("torch.Tensor", "A", (3, 1), 2.0, -1.0, 0.0, 4.0, data_name="f.npy"),
        _OwnLeaf("torch.Tensor", "B", (2,), -math.inf, -7.0, None, 3.0),
    ]
    builder = RowTableBuilder(len(leaves))
    builder.set_sides(0, leaves)
    t = builder.table
    assert t.side_kind[:, 0].tolist() == [TENSOR, NULL, ABSENT, VALUE, TENSOR, TENSOR]
    assert t.side_kind[:, 1].tolist() == [ABSENT] * 6
    # the value leaf's type and value first (its row), then the dtypes, md5s and data names in row order
    assert list(t.strings) == ["int", "3", "B", "A", "x", "f.npy"]
    assert t.side_dtype[:, 0].tolist() == [2, -1, -1, 0, 3, 2]
    assert t.side_value[:, 0].tolist() == [-1, -1, -1, 1, -1, -1]
    assert list(t.shapes) == [(2,), (3, 1)]
    assert t.side_shape[:, 0].tolist() == [0, -1, -1, -1, 1, 0]
    assert t.side_md5[:, 0].tolist() == [4, -1, -1, -1, -1, -1]
    assert t.side_data_name[:, 0].tolist() == [-1, -1, -1, -1, 5, -1]
    stats, defined = t.side_stats[:, 0], t.side_stats_defined[:, 0]
    np.testing.assert_array_equal(stats[0], [1.0, np.nan, 0.5, np.nan])
    assert defined[0].tolist() == [True, False, True, True]  # a recorded NaN is defined, a missing Max is not
    np.testing.assert_array_equal(stats[4], [2.0, -1.0, 0.0, 4.0])
    np.testing.assert_array_equal(stats[5], [-np.inf, -7.0, np.nan, 3.0])
    assert defined[5].tolist() == [True, True, False, True]
    assert not defined[1:4].any() and np.isnan(stats[1:4]).all()
    # B's side: codes go on from A's, new strings and shapes added in row order
    builder.set_sides(1, [ABSENT_LEAF, TensorLeaf("torch.Tensor", "C", (5,)), None, None,
                          TensorLeaf("torch.Tensor", "A", (2,), md5="y"), ValueLeaf("str", "s")])
    t = builder.table
    assert list(t.strings) == ["int", "3", "B", "A", "x", "f.npy", "str", "'s'", "C", "y"]
    assert t.side_kind[:, 1].tolist() == [ABSENT, TENSOR, NULL, NULL, TENSOR, VALUE]
    assert t.side_dtype[:, 1].tolist() == [-1, 8, -1, -1, 3, 6]
    assert t.side_value[:, 1].tolist() == [-1, -1, -1, -1, -1, 7]
    assert list(t.shapes) == [(2,), (3, 1), (5,)]
    assert t.side_shape[:, 1].tolist() == [-1, 2, -1, -1, 0, -1]
    assert t.side_md5[:, 1].tolist() == [-1, -1, -1, -1, 9, -1]
    assert not t.side_stats_defined[1, 1].any()


def _file_leaves() -> list[TensorLeaf]:
    """The tensor leaves of one dump.json entry, views of that file's columns (rows 0, 1, 2, 3)."""
    def leaf(dtype: str, shape: list[int], mx: object, **kw: object) -> dict:
        return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": mx, "Min": -1.0, "Mean": 0.5,
                "Norm": 2.0, **kw}

    (entry,) = entries_from_json({"Torch.add.0.forward": {
        "input_args": [leaf("torch.float16", [4], 3.0, md5="0000abcd"),
                       leaf("torch.float32", [2, 2], None, Mean=math.nan, data_name="add.0.in.1.pt")],
        "input_kwargs": {"alpha": leaf("torch.float32", [4], math.inf, Norm=None, md5="0000abcd")},
        "output": [leaf("torch.bfloat16", [], -0.0)],
    }}, "dump.json")
    leaves = [x for x in entry.flat()[1] if isinstance(x, TensorLeaf)]
    assert len({id(x.columns[0]) for x in leaves}) == 1 and len(leaves[0].columns[0]) == 4
    return leaves


def test_sides_from_a_files_columns_and_a_leaf_of_its_own_match_the_leaves():
    f0, f1, f2, f3 = _file_leaves()
    own = TensorLeaf("mindspore.Tensor", "Float32", (2, 2), -2.0, None, math.nan, 5.0, md5="ffff0000",
                     data_name="own.npy")
    # the file's rows out of their order, the own leaf between them, a value, a null and an absent row
    leaves_a = [f2, ValueLeaf("float", 0.5), own, f0, None, f3, ABSENT_LEAF, f1]
    leaves_b = [own, f1, ABSENT_LEAF, None, f3, f2, f0, ValueLeaf("str", "x")]
    builder = RowTableBuilder(len(leaves_a))
    builder.set_sides(0, leaves_a)
    builder.set_sides(1, leaves_b)
    t = builder.table
    # the string and shape tables a row-by-row pass would build: per side, its values' type and repr in row order,
    # then the tensor dtypes, md5s and data names, each column's new values in row order
    strings: list[str] = []
    shapes: list[tuple[int, ...]] = []
    for side in (leaves_a, leaves_b):
        for x in side:
            if isinstance(x, ValueLeaf):
                strings.extend(v for v in (x.type, repr(x.value)) if v not in strings)
        tensors = [x for x in side if isinstance(x, TensorLeaf)]
        for attr in ("dtype", "md5", "data_name"):
            for x in tensors:
                v = getattr(x, attr)
                if v is not None and v not in strings:
                    strings.append(v)
        shapes.extend(x.shape for x in tensors if x.shape not in shapes)
    assert list(t.strings) == strings
    assert list(t.shapes) == shapes
    for s, side in enumerate((leaves_a, leaves_b)):
        for i, x in enumerate(side):
            if not isinstance(x, TensorLeaf):
                continue
            assert t.side_kind[i, s] == TENSOR
            assert t.strings[t.side_dtype[i, s]] == x.dtype
            assert t.shapes[t.side_shape[i, s]] == x.shape
            for column, value in ((t.side_md5, x.md5), (t.side_data_name, x.data_name)):
                assert (column[i, s] == -1) if value is None else t.strings[column[i, s]] == value
            assert t.side_value[i, s] == -1
            for k, v in enumerate((x.max, x.min, x.mean, x.norm)):
                assert t.side_stats_defined[i, s, k] == (v is not None)
                got = t.side_stats[i, s, k]
                assert math.isnan(got) if v is None or math.isnan(v) else got == v
                if v is not None:  # the same number, its sign too (-0.0)
                    assert math.copysign(1.0, got) == math.copysign(1.0, v)
    assert t.side_kind[:, 0].tolist() == [TENSOR, VALUE, TENSOR, TENSOR, NULL, TENSOR, ABSENT, TENSOR]
    assert t.side_kind[:, 1].tolist() == [TENSOR, TENSOR, ABSENT, NULL, TENSOR, TENSOR, TENSOR, VALUE]
    # one string for "torch.float32" and "0000abcd", held by two rows of the file
    assert t.side_dtype[0, 0] == t.side_dtype[7, 0] and t.side_md5[3, 0] == t.side_md5[0, 0]
