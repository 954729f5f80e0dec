"""Collector: float64 statistics, saved tensors, checksums and non-tensor leaves (numpy only)."""

from __future__ import annotations

import zlib
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from msprobe_cmp.dump.schema import DumpMeta, Entry, Map, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.writer import DumpWriter
from msprobe_cmp.recorder.collector import (
    Collector,
    DeferredTensor,
    HostTensor,
    PendingTensorLeaf,
    compute_crc32,
    compute_stats,
)


class FakeFrameworkTensor:
    """Stands for a framework object the adapter converts (the collector never imports a framework)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _convert(value: object) -> HostTensor | ValueLeaf | None:
    if isinstance(value, FakeFrameworkTensor):
        return HostTensor(value.array, "Float32", "mindspore.Tensor")
    return None


def _numpy_stats(a: np.ndarray) -> tuple[float, float, float, float]:
    f = a.astype(np.float64)
    return float(f.max()), float(f.min()), float(f.mean()), float(np.sqrt((f * f).sum()))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_stats_equal_numpy_float64(dtype: type) -> None:
    a = (np.random.RandomState(3).randn(7, 5) * 50).astype(dtype)
    got = compute_stats(a)
    want = _numpy_stats(a)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_float32_stats_are_reduced_in_float64() -> None:
    # 2**24 + 1 is not representable in float32 but the mean of float32 values must not lose the 1s.
    a = np.full(1000, 16777216.0, dtype=np.float32)
    a[::2] = 16777218.0
    _mx, _mn, mean, norm = compute_stats(a)
    assert mean == 16777217.0
    assert norm == pytest.approx(np.sqrt(500 * 16777216.0**2 + 500 * 16777218.0**2), rel=1e-15)


def test_empty_bool_complex_scalar_and_nan() -> None:
    assert compute_stats(np.zeros((0, 3), np.float32)) == (None, None, None, None)
    assert compute_stats(np.array([True, False, True, True])) == (1.0, 0.0, 0.75, pytest.approx(np.sqrt(3)))
    c = np.array([3 + 4j, 0 + 1j], dtype=np.complex64)
    assert compute_stats(c) == (5.0, 1.0, 3.0, pytest.approx(np.sqrt(26)))
    # A negative 0-d tensor: Norm is |x| (msprobe 1.2.2 writes the value itself: a negative norm).
    assert compute_stats(np.array(-2.5, np.float32)) == (-2.5, -2.5, -2.5, 2.5)
    mx, mn, mean, norm = compute_stats(np.array([1.0, np.nan], np.float32))
    assert all(np.isnan(v) for v in (mx, mn, mean, norm))
    mx, mn, mean, norm = compute_stats(np.array([1.0, -np.inf], np.float32))
    assert (mx, mn, mean, norm) == (1.0, -np.inf, -np.inf, np.inf)


def test_bfloat16_arrays_are_decoded_not_read_as_bits() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    assert compute_stats(a) == (3.0, -2.25, pytest.approx(2.25 / 3), pytest.approx(np.sqrt(1.5**2 + 2.25**2 + 9)))


def test_crc32_is_msprobe_md5_field() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert compute_crc32(a) == f"{zlib.crc32(a.tobytes()):08x}"
    assert compute_crc32(a.T) == f"{zlib.crc32(np.ascontiguousarray(a.T).tobytes()):08x}"
    assert len(compute_crc32(a)) == 8


def test_tensor_task_saves_the_array_the_stats_come_from(tmp_path: Path) -> None:
    writer = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "mix", "mindspore"))
    collector = Collector(_convert, save_tensors=True, checksum=True)
    a = np.random.RandomState(1).randn(4, 3).astype(np.float16)
    leaf = collector.collect(
        FakeFrameworkTensor(a), writer=writer, entry_name="Functional.relu.0.forward", arg_path="input.0"
    )
    assert isinstance(leaf, TensorLeaf)
    assert leaf.data_name == "Functional.relu.0.forward.input.0.npy"
    saved = np.load(tmp_path / "rank" / "dump_tensor_data" / leaf.data_name, allow_pickle=False)
    assert saved.dtype == np.float16 and np.array_equal(saved, a)
    assert (leaf.max, leaf.min, leaf.mean, leaf.norm) == _numpy_stats(saved)
    assert (leaf.type, leaf.dtype, leaf.shape) == ("mindspore.Tensor", "Float32", (4, 3))
    assert leaf.md5 == compute_crc32(a)


def test_statistics_task_saves_nothing(tmp_path: Path) -> None:
    writer = DumpWriter(tmp_path / "rank", DumpMeta("statistics", "mix", "mindspore"))
    leaf = Collector(_convert).collect(
        np.ones(3, np.float32), writer=writer, entry_name="E.0.forward", arg_path="output.0"
    )
    assert isinstance(leaf, TensorLeaf) and leaf.data_name is None and leaf.md5 is None
    assert leaf.type == "numpy.ndarray" and leaf.dtype == "float32"
    assert not (tmp_path / "rank" / "dump_tensor_data").exists()


def test_non_tensor_leaves_and_nesting(tmp_path: Path) -> None:
    writer = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "L1", "mindspore"))
    collector = Collector(_convert, save_tensors=True)
    Point = namedtuple("Point", "x y")
    value = [
        3,
        2.5,
        True,
        "mean",
        None,
        slice(1, None, 2),
        Ellipsis,
        np.float32(0.5),
        (FakeFrameworkTensor(np.zeros(2, np.float32)), {"k": 1}),
        Point(1, 2),
        object(),
    ]
    node = collector.collect(value, writer=writer, entry_name="Tensor.__getitem__.0.forward", arg_path="input")
    assert isinstance(node, Seq)
    items = node.items
    assert items[0] == ValueLeaf("int", 3)
    assert items[1] == ValueLeaf("float", 2.5)
    assert items[2] == ValueLeaf("bool", True)
    assert items[3] == ValueLeaf("str", "mean")
    assert items[4] is None
    assert items[5] == ValueLeaf("slice", (1, None, 2))
    assert items[6] == ValueLeaf("ellipsis", "...")
    assert items[7] == ValueLeaf("float32", 0.5)
    nested = items[8]
    assert isinstance(nested, Seq)
    assert isinstance(nested.items[0], TensorLeaf)
    assert nested.items[0].data_name == "Tensor.__getitem__.0.forward.input.8.0.npy"
    assert nested.items[1] == Map((("k", ValueLeaf("int", 1)),))
    assert items[9] == Map((("x", ValueLeaf("int", 1)), ("y", ValueLeaf("int", 2))))
    assert items[10] is None  # unsupported objects are null, as in msprobe


def test_depth_limit_writes_null() -> None:
    deep: object = 1
    for _ in range(15):
        deep = [deep]
    node = Collector(_convert).collect(deep, writer=None, entry_name="E.0.forward", arg_path="input")
    depth = 0
    while isinstance(node, Seq):
        node = node.items[0]
        depth += 1
    assert node is None and depth == 10


class _NumpyFetcher:
    """A 'device' that is numpy: statistics vectors are float64 arrays, copies are arrays."""

    def __init__(self) -> None:
        self.stat_calls = 0

    def fetch_stats(self, vectors: list[object]) -> np.ndarray:
        self.stat_calls += 1
        return np.stack([np.asarray(v, np.float64) for v in vectors])

    def fetch_copy(self, copy: object) -> np.ndarray:
        return np.asarray(copy)


def _device_vector(a: np.ndarray) -> np.ndarray:
    f = a.astype(np.float64).ravel()
    with np.errstate(all="ignore"):
        return np.array(
            [
                np.nanmax(f),
                np.nanmin(f),
                f.sum(),
                (f * f).sum(),
                np.isnan(f).sum(),
                np.isposinf(f).sum(),
                np.isneginf(f).sum(),
            ]
        )


def test_deferred_leaves_resolve_to_the_synchronous_leaves(tmp_path: Path) -> None:
    arrays = [
        np.array([[1.5, -2.0], [3.0, 0.25]], np.float32),
        np.array([1.0, np.nan, np.inf], np.float32),  # NaN makes all four NaN, as numpy does
        np.array([np.inf, -np.inf, 2.0], np.float32),
        np.array(-2.5, np.float32),
    ]
    fetcher = _NumpyFetcher()
    deferred = Collector(_convert, fetcher=fetcher)
    sync = Collector(_convert)
    placeholders = [
        deferred.collect(
            DeferredTensor("Float32", a.shape, stats=_device_vector(a)),
            writer=None,
            entry_name="e",
            arg_path=f"input.{i}",
        )
        for i, a in enumerate(arrays)
    ]
    empty = deferred.collect(DeferredTensor("Float32", (0, 3)), writer=None, entry_name="e", arg_path="x")
    assert all(isinstance(p, PendingTensorLeaf) for p in placeholders) and deferred.pending_count == 4
    assert isinstance(empty, TensorLeaf) and empty.stats == (None,) * 4 and dict(empty.extra)["nan_count"] == 0
    entry = Entry.forward("e", Seq(tuple(placeholders)), Map(), Seq())
    assert deferred.resolve_pending() == 4 and fetcher.stat_calls == 1  # one batch for every vector
    done = deferred.substitute_entry(entry).field("input_args")
    assert isinstance(done, Seq)
    for leaf, a in zip(done.items, arrays, strict=True):
        want = sync.collect(a, writer=None, entry_name="e", arg_path="p")
        assert isinstance(leaf, TensorLeaf) and isinstance(want, TensorLeaf)
        assert not isinstance(leaf, PendingTensorLeaf)
        np.testing.assert_allclose(np.array(leaf.stats, float), np.array(want.stats, float), rtol=1e-12)
        assert leaf.extra == want.extra and leaf.shape == want.shape
    assert deferred.resolve_pending() == 0
    # A placeholder never resolved (fetch failed, or the step was reset) is written with null statistics.
    deferred.reset_deferred()
    lost = deferred.substitute(placeholders[0])
    assert type(lost) is TensorLeaf and lost.stats == (None,) * 4 and lost.shape == (2, 2)


def test_deferred_copies_are_saved_and_checksummed_at_resolution(tmp_path: Path) -> None:
    writer = DumpWriter(tmp_path / "rank", DumpMeta(task="tensor", level="L1", framework="mindspore"))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    deferred = Collector(_convert, save_tensors=True, checksum=True, fetcher=_NumpyFetcher())
    placeholder = deferred.collect(
        DeferredTensor("Float32", (2, 3), copy=a.copy()),
        writer=writer,
        entry_name="Functional.relu.0.forward",
        arg_path="input.0",
    )
    assert not (writer.tensor_dir / "Functional.relu.0.forward.input.0.npy").exists()  # nothing before the flush
    deferred.resolve_pending()
    leaf = deferred.substitute(placeholder)
    want = Collector(_convert, save_tensors=True, checksum=True).collect(
        a, writer=writer, entry_name="Functional.relu.0.forward", arg_path="input.0"
    )
    assert isinstance(leaf, TensorLeaf) and isinstance(want, TensorLeaf)
    assert (leaf.stats, leaf.md5, leaf.data_name) == (want.stats, want.md5, want.data_name)
    assert np.array_equal(np.load(writer.tensor_dir / str(leaf.data_name)), a)


def test_framework_tensors_go_to_the_converter_first() -> None:
    class ListTensor(list):  # a framework tensor that is also a list: converted, never collected as a Seq
        pass

    seen: list[object] = []

    def convert(value: object) -> HostTensor | ValueLeaf | None:
        seen.append(value)
        return HostTensor(np.asarray(value, np.float32), "Float32") if isinstance(value, ListTensor) else None

    tensor = ListTensor([1.0, -2.0])
    leaf = Collector(convert, tensor_types=(ListTensor,)).collect(tensor, writer=None, entry_name="E", arg_path="x")
    assert isinstance(leaf, TensorLeaf) and (leaf.max, leaf.min, leaf.shape) == (1.0, -2.0, (2,))
    assert seen == [tensor]
    # nested as deep as MAX_DEPTH (10 containers): null, as any framework object there (msprobe stops there too)
    deep: object = tensor
    for _ in range(10):
        deep = [deep]
    node = Collector(convert, tensor_types=(ListTensor,)).collect(deep, writer=None, entry_name="E", arg_path="x")
    for _ in range(10):
        assert isinstance(node, Seq) and len(node.items) == 1
        node = node.items[0]
    assert node is None
    as_seq = Collector(convert).collect(tensor, writer=None, entry_name="E", arg_path="x")
    assert isinstance(as_seq, Seq) and as_seq.items == (ValueLeaf("float", 1.0), ValueLeaf("float", -2.0))


class StampedTensor:
    """A framework tensor with a version counter (weakly referable, as torch.Tensor is)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.version = 0


def _counting_collector(**kw: object) -> tuple[Collector, list[int]]:
    """A collector whose converter notes each tensor it reads, and whose stamp is the tensor's version (None
    when the version is negative: the adapter cannot tell)."""
    reads: list[int] = []  # ids: the converter keeps no tensor alive

    def convert(value: object) -> HostTensor | None:
        if isinstance(value, StampedTensor):
            reads.append(id(value))
            return HostTensor(value.array.copy(), "Float32", "torch.Tensor")
        return None

    def stamp(value: object) -> object:
        assert isinstance(value, StampedTensor)
        return None if value.version < 0 else value.version

    return Collector(convert, tensor_types=(StampedTensor,), stamp=stamp, **kw), reads  # type: ignore[arg-type]


def test_a_tensor_read_again_with_the_same_stamp_reuses_its_first_leaf() -> None:
    col, reads = _counting_collector()
    t = StampedTensor(np.arange(6, dtype=np.float32))
    first = col.collect(t, writer=None, entry_name="a", arg_path="output.0")
    again = col.collect((t, t), writer=None, entry_name="b", arg_path="input")
    assert reads == [id(t)]
    assert isinstance(again, Seq) and again.items == (first, first)
    assert isinstance(first, TensorLeaf) and first.max == 5.0 and first.mean == 2.5


def test_a_changed_stamp_a_forget_or_a_new_step_reads_the_tensor_again() -> None:
    col, reads = _counting_collector()
    t = StampedTensor(np.arange(4, dtype=np.float32))
    col.collect(t, writer=None, entry_name="a", arg_path="output.0")
    t.array[:] = 10.0
    t.version += 1  # an in-place write the framework counts
    leaf = col.collect(t, writer=None, entry_name="b", arg_path="input.0")
    assert isinstance(leaf, TensorLeaf) and (leaf.max, leaf.min, leaf.mean, leaf.norm) == (10.0, 10.0, 10.0, 20.0)
    col.forget_reads()  # stop()
    col.collect(t, writer=None, entry_name="c", arg_path="input.0")
    col.start_step()
    col.collect(t, writer=None, entry_name="d", arg_path="input.0")
    assert reads == [id(t)] * 4


def test_a_tensor_without_a_stamp_is_read_every_time() -> None:
    col, reads = _counting_collector()
    t = StampedTensor(np.ones(3, dtype=np.float32))
    t.version = -1
    col.collect([t, t], writer=None, entry_name="a", arg_path="input")
    assert reads == [id(t)] * 2


def test_a_new_tensor_at_a_freed_tensors_id_is_read() -> None:
    """Objects' ids are reused once they are freed: the leaf is reused for the same object only."""
    col, reads = _counting_collector()
    seen: dict[int, TensorLeaf] = {}
    for value in range(20):
        t = StampedTensor(np.full(2, float(value), dtype=np.float32))
        leaf = col.collect(t, writer=None, entry_name="a", arg_path="input.0")
        assert isinstance(leaf, TensorLeaf) and leaf.max == float(value)
        seen[id(t)] = leaf
        del t
    assert len(reads) == 20
    assert len(seen) < 20  # the test did meet a reused id (CPython reuses a freed object's memory at once)


def test_the_tensor_task_reads_and_saves_every_record(tmp_path: Path) -> None:
    col, reads = _counting_collector(save_tensors=True)
    writer = DumpWriter(tmp_path / "rank", DumpMeta("tensor", "L1", "pytorch"))
    t = StampedTensor(np.arange(3, dtype=np.float32))
    a = col.collect(t, writer=writer, entry_name="Functional.relu.0.forward", arg_path="output.0")
    b = col.collect(t, writer=writer, entry_name="Module.fc.Linear.forward.0", arg_path="output.0")
    assert reads == [id(t)] * 2
    assert isinstance(a, TensorLeaf) and isinstance(b, TensorLeaf) and a.data_name != b.data_name
