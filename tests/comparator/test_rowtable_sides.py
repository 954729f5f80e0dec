"""RowTableBuilder.set_sides (msprobe_cmp/comparator/rowtable.py): each row's side columns from its leaf, the
strings, shapes and statistics written column-wise, the codes given in the order of the rows that first hold them."""

from __future__ import annotations

import math

import numpy as np

from msprobe_cmp.comparator.rowtable import ABSENT, ABSENT_LEAF, NULL, TENSOR, VALUE, RowTableBuilder
from msprobe_cmp.dump.schema import TensorLeaf, ValueLeaf


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
