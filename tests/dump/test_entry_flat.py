"""Entry.flat(): an entry's leaves as two tuples (paths, leaves), the paths tuple shared between entries."""

from __future__ import annotations

from msprobe_cmp.dump.schema import Entry, Map, Seq, TensorLeaf, ValueLeaf, iter_leaves, shared_paths


def _t(x: float) -> TensorLeaf:
    return TensorLeaf("torch.Tensor", "torch.float32", (2,), x, x, x, x)


def _forward(name: str, scale: float) -> Entry:
    return Entry.forward(
        name,
        Seq((_t(scale), Seq((_t(2 * scale), None)))),
        Map((("dim", ValueLeaf("int", 1)), ("opts", Map((("eps", ValueLeaf("float", 1e-5)),))))),
        Seq((_t(3 * scale),)),
    )


def test_flat_is_the_leaves_of_iter_leaves_in_file_order() -> None:
    entry = _forward("Functional.f.0.forward", 1.0)
    # built independently: iter_leaves over each field, under the field's path spelling
    expected = [
        *iter_leaves(entry.field("input_args"), "input"),
        *iter_leaves(entry.field("input_kwargs"), "kwargs"),
        *iter_leaves(entry.field("output"), "output"),
    ]
    paths, leaves = entry.flat()
    assert list(zip(paths, leaves, strict=True)) == expected
    assert paths == ("input.0", "input.1.0", "input.1.1", "kwargs.dim", "kwargs.opts.eps", "output.0")
    assert list(entry.leaves()) == expected
    assert list(entry.leaves()) == expected  # an iterator each time, from the kept flattening


def test_entries_of_the_same_paths_share_one_paths_tuple() -> None:
    one, two = _forward("Functional.f.0.forward", 1.0), _forward("Functional.f.1.forward", 5.0)
    assert one.flat()[0] is two.flat()[0]
    assert one.flat()[1] != two.flat()[1]
    other = Entry.backward("Functional.f.0.backward", Seq((_t(1.0),)), Seq((None,)))
    assert other.flat()[0] == ("input.0", "output.0")
    assert other.flat()[0] is not one.flat()[0]
    assert shared_paths(("input.0", "output.0")) is other.flat()[0]


def test_parameters_grad_flat_paths() -> None:
    entry = Entry.parameters_grad("Cell.net.parameters_grad", [("weight", Seq((_t(1.0),))),
                                                                ("bias", Seq((_t(2.0), _t(3.0))))])
    paths, leaves = entry.flat()
    assert paths == ("weight", "bias.0", "bias.1")
    assert leaves == (_t(1.0), _t(2.0), _t(3.0))


def test_flag_fields_are_not_leaves_and_the_cache_is_not_part_of_equality() -> None:
    entry = Entry("Tensor.add.0.forward", (("input_args", Seq((_t(1.0),))), ("is_recompute", ValueLeaf("bool", False)),
                                           ("output", Seq((_t(2.0),)))))
    fresh = Entry(entry.name, entry.fields)
    assert entry.flat() == (("input.0", "output.0"), (_t(1.0), _t(2.0)))
    assert entry == fresh and hash(entry) == hash(fresh)  # one flattened, the other not
    assert repr(entry) == repr(fresh)
