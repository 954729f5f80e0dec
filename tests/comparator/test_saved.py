"""A comparison saved to comparison-data.npz loads back equal field by field (comparator/saved.py), and a missing,
corrupt or foreign file is a one-line DumpFormatError naming the file and the field."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msprobe_cmp.comparator import CompareOptions, compare
from msprobe_cmp.comparator.notes import Note, code_of
from msprobe_cmp.comparator.result import CellRollup, Comparison, Jump, LikelyOrigin, RowRef
from msprobe_cmp.comparator.rowtable import RowTable
from msprobe_cmp.comparator.rules import OriginRules, Rules, ThresholdOverride, Thresholds
from msprobe_cmp.comparator.saved import FORMAT, SAVED_FILE, VERSION, load_comparison, save_comparison
from msprobe_cmp.dump import DumpMeta, Entry, Map, RankDump, Seq, TensorLeaf, ValueLeaf, load_dump
from msprobe_cmp.dump.reader import Dump
from msprobe_cmp.errors import DumpFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-mindspore"
PYTORCH_DUMP = Path(__file__).resolve().parents[1] / "data" / "msprobe-1.2.2-pytorch" / "dump.json"


def assert_same(x: Any, y: Any, where: str = "comparison") -> None:
    """``x`` and ``y`` equal field by field, of the same types (a tuple stays a tuple), floats exactly (a NaN equal
    to a NaN, -0.0 not equal to 0.0), mappings in the same order."""
    assert type(x) is type(y), f"{where}: {type(x).__name__} != {type(y).__name__}"
    if isinstance(x, RowTable):
        assert x == y, where
        assert x.strings == y.strings and x.tuples == y.tuples and x.stacks == y.stacks and x.shapes == y.shapes
        assert _notes_of(x) == _notes_of(y), f"{where}: the notes' codes or parameters"
        for name in RowTable.COLUMNS:
            a, b = getattr(x, name), getattr(y, name)
            assert a.dtype == b.dtype and a.shape == b.shape, f"{where}.{name}"
            assert a.tobytes() == b.tobytes(), f"{where}.{name}"  # bit for bit: NaN payloads and -0.0 too
            assert not b.flags.writeable, f"{where}.{name} is writeable"
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            assert_same(getattr(x, f.name), getattr(y, f.name), f"{where}.{f.name}")
    elif isinstance(x, float):
        assert (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y)), \
            f"{where}: {x!r} != {y!r}"
    elif isinstance(x, (tuple, list)):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(x, dict):
        assert list(x) == list(y), f"{where}: keys"
        for k in x:
            assert_same(x[k], y[k], f"{where}[{k!r}]")
    else:
        assert x == y, f"{where}: {x!r} != {y!r}"


def _notes_of(table: RowTable) -> list[tuple[str, str | None, str | None]]:
    """Every reason and note text of ``table`` with its note code and parameters as JSON (None: a plain text)."""
    return [(str(n), code_of(n), n.params_json() if isinstance(n, Note) else None) for t in table.tuples for n in t]


def round_trip(comparison: Comparison, tmp_path: Path) -> Comparison:
    path = save_comparison(comparison, tmp_path / "saved")
    assert path == tmp_path / "saved" / SAVED_FILE
    loaded = load_comparison(path)
    assert_same(comparison, loaded)
    assert loaded == comparison or _has_nan_outside_rows(comparison)  # dataclass equality too
    # saving what was loaded gives the same bytes (fixed time stamps, deterministic header)
    again = save_comparison(loaded, tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()
    return loaded


def _has_nan_outside_rows(c: Comparison) -> bool:
    """NaN in a Jump / CellRollup / the origin: dataclass equality compares it by identity, which a load changes."""
    floats = [j.error_in for u in c.units for j in u.jumps] + [j.error_out for u in c.units for j in u.jumps]
    floats += [x for u in c.units for cell in u.cells for x in (cell.min_cosine, cell.max_abs_err) if x is not None]
    if c.likely_origin is not None:
        floats += [c.likely_origin.error_in, c.likely_origin.error_out, c.likely_origin.floor]
    return any(isinstance(x, float) and math.isnan(x) for x in floats)


# ------------------------------------------------------------------------------------------- real comparisons
@pytest.mark.parametrize("target, baseline", [
    ("tensor_b", "tensor_a"),              # tensor mode, a likely origin
    ("statistics_b", "statistics_a"),      # statistics mode, two steps
    ("statistics_a", "torch_statistics_a"),  # MindSpore against PyTorch
    ("torch_statistics_a", "statistics_a"),  # PyTorch against MindSpore
])
def test_msprobe_fixture_comparisons_round_trip(tmp_path, target, baseline):
    c = compare(load_dump(FIXTURES / target), load_dump(FIXTURES / baseline))
    assert c.units and all(len(u.rows) for u in c.units)
    loaded = round_trip(c, tmp_path)
    if target == "tensor_b":
        assert c.mode == "tensor" and loaded.likely_origin is not None and loaded.likely_origin == c.likely_origin
    if "torch" in target + baseline:
        assert any(r.mapped_by for u in loaded.units for r in u.rows)  # cross-framework rows kept their mapping


def test_noise_mode_and_a_pytorch_dump_round_trip(tmp_path):
    c = compare(load_dump(FIXTURES / "tensor_b"), load_dump(FIXTURES / "tensor_a"),
                CompareOptions(noise=load_dump(FIXTURES / "tensor_a")))
    assert c.input_noise is not None
    round_trip(c, tmp_path / "noise")
    pt = load_dump(PYTORCH_DUMP)
    round_trip(compare(pt, pt), tmp_path / "pytorch")


# ----------------------------------------------------------------------------------- hand-made comparisons
def _t(mx=1.0, mn=-1.0, mean=0.0, norm=2.0, shape=(4,), dtype="Float32", **kw):
    return TensorLeaf("mindspore.Tensor", dtype, shape, max=mx, min=mn, mean=mean, norm=norm, **kw)


def _fwd(name, *inputs, out=()):
    return Entry.forward(name, Seq(tuple(inputs)), Map(), Seq(tuple(out)))


def _unit(entries, name, step=0, rank=0):
    return RankDump(Path(name), step, rank, DumpMeta("statistics", "L1", "mindspore"), tuple(entries))


@pytest.fixture(scope="module")
def mixed() -> Comparison:
    """NaN / ±Inf / missing statistics, values, nulls, shape and dtype mismatches, one-sided rows, non-ASCII and
    lone-surrogate names, an unpaired unit and rules with every kind of field."""
    odd = "Functional.naïve_\ud800\x01.0.forward"
    a = [
        _fwd("Functional.ok.0.forward", _t()),
        _fwd("Functional.nan.0.forward", _t(mx=math.nan, mean=math.inf), out=(_t(mn=-math.inf),)),
        _fwd("Functional.bad.0.forward", _t(mx=5.0, mean=3.0)),
        _fwd("Functional.none.0.forward", _t(mx=None, norm=None)),
        _fwd("Functional.shape.0.forward", _t(shape=(2, 2))),
        _fwd("Functional.dtype.0.forward", _t(dtype="Float16")),
        _fwd("Functional.value.0.forward", ValueLeaf("float", 1e-5), None),
        _fwd(odd, _t(mx=-0.0, mn=-0.0, mean=-0.0, norm=0.0)),
        _fwd("Functional.a_only.0.forward", _t()),
    ]
    b = [
        _fwd("Functional.ok.0.forward", _t()),
        _fwd("Functional.nan.0.forward", _t(mx=math.nan, mean=1.0), out=(_t(),)),
        _fwd("Functional.bad.0.forward", _t()),
        _fwd("Functional.none.0.forward", _t(mx=None)),
        _fwd("Functional.shape.0.forward", _t(shape=(4,))),
        _fwd("Functional.dtype.0.forward", _t()),
        _fwd("Functional.value.0.forward", ValueLeaf("float", 1e-12), _t()),
        _fwd(odd, _t(mx=0.0, mn=0.0, mean=0.0, norm=0.0)),
        _fwd("Functional.b_only.0.forward", _t()),
    ]
    rules = Rules(
        default=Thresholds(max_abs_err_fail_above=math.inf, relative_floor=1e-7),
        overrides=(ThresholdOverride(Thresholds(cosine_fail_below=-math.inf, cosine_suspect_below=0.5), "*.bad.*"),
                   ThresholdOverride(Thresholds(max_abs_err_fail_above=2), None, "Float16")),
        min_matched_share=0.25, noise_factor=3, argument_differs="fail",
        localisation=OriginRules(jump_ratio=20, warn=False),
    )
    da = Dump(Path("run_a"), (_unit(a, "run_a/step0/rank0"), _unit(a[:2], "run_a/step1/rank0", step=1)))
    db = Dump(Path("run_b"), (_unit(b, "run_b/step0/rank0"),))
    c = compare(da, db, CompareOptions(rules=rules))
    assert c.unpaired and c.rules == rules and c.verdict == "fail"
    return c


def test_edge_values_round_trip(mixed, tmp_path):
    loaded = round_trip(mixed, tmp_path)
    assert loaded.rules == mixed.rules
    assert isinstance(loaded.rules.noise_factor, int) and isinstance(loaded.rules.localisation.jump_ratio, int)
    rows = {r.name: r for r in loaded.units[0].rows}
    nan_row = rows["Functional.nan.0.forward.input.0"]
    assert nan_row.a is not None and math.isnan(nan_row.a.max) and nan_row.a.mean == math.inf
    assert rows["Functional.none.0.forward.input.0"].a.max is None  # None stays None, NaN stays NaN
    assert any("\ud800" in name for name in rows)


def test_notes_load_back_with_their_codes_and_parameters(mixed, tmp_path):
    loaded = round_trip(mixed, tmp_path)
    notes = {code_of(n): n for t in loaded.units[0].rows.tuples for n in t if code_of(n)}
    assert set(notes) >= {"shape_differs", "null_one_side", "nonfinite_stat_agrees", "stats_one_side",
                          "compatible_dtypes"}
    assert notes["shape_differs"].params == {"a": [2, 2], "b": [4]}
    assert str(notes["shape_differs"]) == "shape differs: A [2, 2], B [4]"
    assert notes["compatible_dtypes"].params == {"a": "Float16", "b": "Float32", "how": "compared in float64"}
    agrees = notes["nonfinite_stat_agrees"].params
    assert agrees["stat"] == "max" and math.isnan(agrees["value"])  # NaN survives the JSON
    plain = [n for t in loaded.units[0].rows.tuples for n in t if code_of(n) is None]
    assert "present in A only" in plain and all(type(n) is str for n in plain)  # reasons stay plain text


def _text_list(arrays: dict[str, np.ndarray], prefix: str, texts: list[str]) -> None:
    blobs = [t.encode() for t in texts]
    arrays[prefix + ".utf8"] = np.frombuffer(b"".join(blobs), np.uint8)
    arrays[prefix + ".ends"] = np.cumsum([len(b) for b in blobs], dtype=np.int64)


def _text_items(arrays: dict[str, np.ndarray], prefix: str) -> list[str]:
    blob, ends = arrays[prefix + ".utf8"].tobytes(), arrays[prefix + ".ends"].tolist()
    return [blob[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _change_note(arrays: dict[str, np.ndarray], kind: str | None = None, params: str | None = None,
                 drop: bool = False) -> None:
    """Unit 0's first note with a code: its code and / or parameters replaced (``drop``: the last kind removed)."""
    kinds, docs = _text_items(arrays, "u0.tuples.kinds"), _text_items(arrays, "u0.tuples.params")
    k = next(i for i, code in enumerate(kinds) if code)
    kinds[k] = kinds[k] if kind is None else kind
    docs[k] = docs[k] if params is None else params
    _text_list(arrays, "u0.tuples.kinds", kinds[:-1] if drop else kinds)
    _text_list(arrays, "u0.tuples.params", docs)


def test_non_finite_and_signed_zero_outside_the_rows_round_trip(mixed, tmp_path):
    unit = mixed.units[0]
    ref = RowRef(0, 1, unit.rows[1].name, unit.unit_a.label, "Cell.x", ("Cell.x", "Cell"))
    cells = (CellRollup("Cell.x", None, 0, 3, 1, 2, math.nan, math.inf, "fail", 1, math.inf),
             CellRollup("Cell.y", "Cell.x", 1, 0, 0, 0, None, -0.0, "skip", None, None))
    jumps = (Jump(1, "computed", 0.0, math.inf, 1e-300), Jump(2, "entered", math.nan, 5e-324, 2.5))
    c = dataclasses.replace(
        mixed, units=(dataclasses.replace(unit, cells=cells, jumps=jumps, parent_chains={"b": ("x",), "a": ()}),
                      *mixed.units[1:]),
        matched_share=-0.0, likely_origin=LikelyOrigin(ref, jumps[1], "Cell.x", ("arg: A 1, B 2",), ("u (A only)",)),
        first_divergent=ref, notes=("ü", "\ud83d"),
    )
    round_trip(c, tmp_path)


def test_every_field_of_every_record_is_in_the_header(mixed, tmp_path):
    header = _header(save_comparison(mixed, tmp_path))
    assert header["format"] == FORMAT and header["version"] == VERSION
    covered = {f.name for f in dataclasses.fields(Comparison)} - {"rules", "units"}
    assert covered <= set(header)
    unit_fields = {f.name for f in dataclasses.fields(mixed.units[0])} - {"parent_chains"}  # chains: in the arrays
    assert unit_fields <= set(header["units"][0])
    assert {f.name for f in dataclasses.fields(Rules)} == set(header["rules"])
    assert {f.name for f in dataclasses.fields(Thresholds)} == set(header["rules"]["default"])
    assert {f.name for f in dataclasses.fields(OriginRules)} == set(header["rules"]["localisation"])
    assert {f.name for f in dataclasses.fields(ThresholdOverride)} == set(header["rules"]["overrides"][0])


def test_the_file_is_a_plain_npz_without_pickles(mixed, tmp_path):
    path = save_comparison(mixed, tmp_path)
    with np.load(path, allow_pickle=False) as npz:
        names = set(npz.files)
        assert "header" in names and "u0.metrics" in names and "u0.strings.utf8" in names
        assert all(npz[n].dtype != object for n in names)
    # a directory is accepted for the file it holds
    assert_same(load_comparison(tmp_path), mixed)


def test_the_module_imports_no_framework():
    code = ("import sys, msprobe_cmp.comparator.saved, msprobe_cmp.cli\n"
            "bad = [m for m in ('torch', 'mindspore') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------ bad files
def _header(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as npz:
        return json.loads(npz["header"].tobytes())


def _rewrite(path: Path, change) -> None:
    """Apply ``change(arrays, header)`` to the saved file's members, then write it back as a plain npz."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays["header"].tobytes())
    change(arrays, header)
    if "header" in arrays:
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(path, **arrays)


@pytest.fixture()
def saved(mixed, tmp_path) -> Path:
    return save_comparison(mixed, tmp_path / "out")


def _error(path: Path) -> str:
    with pytest.raises(DumpFormatError) as info:
        load_comparison(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_missing_file_and_directory_without_it(tmp_path):
    assert "does not exist" in _error(tmp_path / "nowhere.npz")
    message = _error(tmp_path)  # a directory holding no saved comparison: names the file it looked for
    assert message.startswith(str(tmp_path / SAVED_FILE))


def test_truncated_and_foreign_files(saved, tmp_path):
    data = saved.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 30):
        saved.write_bytes(data[:cut])
        assert "truncated or not an npz archive" in _error(saved) or "unreadable" in _error(saved)
    saved.write_text("report,csv\n1,2\n")
    assert "not a readable saved comparison" in _error(saved)
    np.savez(saved, x=np.zeros(3))
    assert "header: missing from the archive" in _error(saved)


def test_a_corrupted_member_fails_its_checksum(saved):
    data = bytearray(saved.read_bytes())
    at = data.index(b"Functional.ok.0.forward")
    data[at] ^= 0x20
    saved.write_bytes(bytes(data))
    assert "unreadable" in _error(saved)


@pytest.mark.parametrize("change, field, problem", [
    (lambda a, h: h.update(version=VERSION + 1), "version", "is not supported"),
    (lambda a, h: h.update(format="something.else"), "format", "not a saved comparison"),
    (lambda a, h: h.pop("verdict"), "verdict", "missing"),
    (lambda a, h: h["units"][0].pop("cells"), "units[0].cells", "missing"),
    (lambda a, h: h["rules"]["default"].update(cosine_fail_below="high"), "rules.default.cosine_fail_below",
     "expected a number"),
    (lambda a, h: h["rules"].update(min_matched_share=2.0), "rules", "min_matched_share"),
    (lambda a, h: h["rules"]["localisation"].update(extra=1), "rules.localisation.extra", "not a field"),
    (lambda a, h: h.update(first_failing={**h["first_failing"], "row": 10**6}), "first_failing.row",
     "out of range"),
    (lambda a, h: h["units"][0].update(rows=3), "u0.verdict", "the header says 3"),
    (lambda a, h: a.pop("u0.metrics"), "u0.metrics", "missing from the archive"),
    (lambda a, h: a.update({"u0.verdict": a["u0.verdict"].astype(np.int64)}), "u0", "column verdict"),
    (lambda a, h: a.update({"u0.entry": a["u0.entry"] + 10**6}), "u0.entry", "outside the strings table"),
    # the localisation's columns: both NaN (not measured) or both numbers, >= 0, the floor finite
    (lambda a, h: a.update({"u0.relative_error": np.full(len(a["u0.verdict"]), -1.0),
                            "u0.noise_floor": np.full(len(a["u0.verdict"]), 1e-6)}), "u0.relative_error", "negative"),
    (lambda a, h: a.update({"u0.relative_error": np.full(len(a["u0.verdict"]), 0.5),
                            "u0.noise_floor": np.full(len(a["u0.verdict"]), np.nan)}), "u0.noise_floor", "NaN where"),
    (lambda a, h: a.update({"u0.relative_error": np.full(len(a["u0.verdict"]), 0.5),
                            "u0.noise_floor": np.full(len(a["u0.verdict"]), np.inf)}), "u0.noise_floor", "infinite"),
    (lambda a, h: a.update({"u0.strings.ends": a["u0.strings.ends"][:-1]}), "u0.strings.ends", "offsets"),
    # a note's code and parameters
    (lambda a, h: _change_note(a, kind="no_such_code"), "u0.tuples.kinds", "unknown note code 'no_such_code'"),
    (lambda a, h: _change_note(a, params="{not json"), "u0.tuples.params", "item "),
    (lambda a, h: _change_note(a, params="[1, 2]"), "u0.tuples.params", "not a JSON object"),
    (lambda a, h: _change_note(a, drop=True), "u0.tuples.kinds", "items for"),
    (lambda a, h: _change_note(a, kind=""), "u0.tuples.params", "parameters without a note code"),
    (lambda a, h: a.update({"header": np.frombuffer(b"{not json", np.uint8)}), "header", "not JSON"),
])
def test_a_bad_field_is_named(saved, change, field, problem):
    if field == "header":  # the header itself replaced: write the arrays as they are
        with np.load(saved, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        change(arrays, {})
        np.savez(saved, **arrays)
    else:
        _rewrite(saved, change)
    message = _error(saved)
    assert f"{saved}: {field}" in message and problem in message, message


def test_the_archive_stores_its_members_uncompressed_with_fixed_time_stamps(saved):
    with zipfile.ZipFile(saved) as zf:
        infos = zf.infolist()
    assert infos[0].filename == "header.npy"
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}


def test_the_reports_of_a_loaded_comparison_are_the_same_bytes(mixed, tmp_path):
    """NaN/±Inf statistics, values, nulls, mismatches, a lone surrogate and control characters in a name, an unpaired
    unit and every kind of rule: the five reports and the saved file from the loaded comparison are the original's."""
    from msprobe_cmp.cli import OUTPUT_FILES, write_reports

    write_reports(mixed, tmp_path / "original")
    write_reports(load_comparison(tmp_path / "original"), tmp_path / "rendered")
    for name in OUTPUT_FILES:
        assert (tmp_path / "rendered" / name).read_bytes() == (tmp_path / "original" / name).read_bytes(), name


# ------------------------------------------------------------------------- numbers beyond 64 bits (exact)
def test_a_dimension_beyond_int64_and_a_step_beyond_uint64_round_trip(tmp_path):
    """An empty tensor of shape [0, 2**64] (the reader accepts it) and a step number 2**64 (orjson cannot write it,
    and would read it back as a float): both load back exact."""
    huge = _t(mx=None, mn=None, mean=None, norm=None, shape=(0, 2**64, -(2**63) - 1, 5))
    entries = [_fwd("Functional.empty.0.forward", huge), _fwd("Functional.ok.0.forward", _t())]
    da = Dump(Path("run_a"), (_unit(entries, "run_a/step18446744073709551616/rank0", step=2**64, rank=2**70),))
    db = Dump(Path("run_b"), (_unit(entries, "run_b/step18446744073709551616/rank0", step=2**64, rank=2**70),))
    c = compare(da, db)
    assert (0, 2**64, -(2**63) - 1, 5) in c.units[0].rows.shapes and c.units[0].unit_a.step == 2**64
    loaded = round_trip(c, tmp_path)
    assert loaded.units[0].unit_a.rank == 2**70 and type(loaded.units[0].unit_a.step) is int


# ------------------------------------------------------------------------------ malformed archives and members
def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _npy(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _patch_central_directory(path: Path, offset: int, value: int, every: bool = False) -> None:
    raw = bytearray(path.read_bytes())
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        raw[at + offset] |= value
        if not every:
            break
        at = raw.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(raw))


def _truncated_npy_header() -> bytes:
    text = b"{'descr': '<f8', 'fortran_order': False, 'shape': (97,"
    text += b" " * (63 - len(text) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def _huge_npy_header() -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**41,)})
    return buf.getvalue()


@pytest.mark.parametrize("breaking, field, problem", [
    (lambda p: _zip(p, {**_members(p), "u0.verdict.npy": _npy(np.array(2, np.uint8))}), "u0.verdict", "0-d"),
    (lambda p: _zip(p, {**_members(p), "u0.metrics.npy": _truncated_npy_header()}), "u0.metrics", "unreadable"),
    (lambda p: _zip(p, {**_members(p), "u0.metrics.npy": _huge_npy_header()}), "u0.metrics", "more than the member"),
    (lambda p: _zip(p, _members(p), zipfile.ZIP_DEFLATED), "header", "compressed (method 8)"),
    (lambda p: _zip(p, _members(p), zipfile.ZIP_LZMA), "header", "compressed (method 14)"),
    (lambda p: _patch_central_directory(p, 8, 1, every=True), "header", "encrypted"),
    (lambda p: _patch_central_directory(p, 6, 211), "", "not a readable saved comparison"),
])
def test_a_malformed_archive_or_member_is_one_line(saved, breaking, field, problem):
    breaking(saved)
    message = _error(saved)
    assert message.startswith(f"{saved}: {field}") and problem in message, message


def test_a_member_bigger_than_the_file_is_refused_before_reading(saved):
    members = _members(saved)
    _zip(saved, members)
    raw = bytearray(saved.read_bytes())
    at = raw.find(b"PK\x01\x02")  # the first member's uncompressed size in the central directory
    raw[at + 24:at + 28] = (2**31).to_bytes(4, "little")
    saved.write_bytes(bytes(raw))
    assert "more than the file's" in _error(saved) or "not a readable" in _error(saved)


def test_reasons_that_expand_far_beyond_the_file_are_refused(saved):
    """One 10 KB reason repeated 200 times in one tuple that every row points at: reports of hundreds of MB from a
    file of a few hundred KB."""
    members = _members(saved)
    rows = len(np.lib.format.read_array(__import__("io").BytesIO(members["u0.verdict.npy"])))
    big = np.frombuffer(b"R" * 10_000, np.uint8)
    members.update({
        "u0.tuples.texts.utf8.npy": _npy(big), "u0.tuples.texts.ends.npy": _npy(np.array([big.size], np.int64)),
        "u0.tuples.codes.npy": _npy(np.zeros(200 * 100, np.int32)),
        "u0.tuples.lengths.npy": _npy(np.array([0, 200 * 100], np.int64)),
        "u0.reasons.npy": _npy(np.ones(rows, np.int32)), "u0.notes.npy": _npy(np.zeros(rows, np.int32)),
    })
    for column in ("kinds", "params"):  # one empty item: the text is a plain reason
        members.update({f"u0.tuples.{column}.utf8.npy": _npy(np.zeros(0, np.uint8)),
                        f"u0.tuples.{column}.ends.npy": _npy(np.array([0], np.int64))})
    _zip(saved, members)
    message = _error(saved)
    assert f"{saved}: u0: the rows' texts (names, values, shapes, reasons, notes) expand" in message, message


def test_one_huge_name_every_row_points_at_is_refused(saved):
    members = _members(saved)
    rows = len(np.lib.format.read_array(__import__("io").BytesIO(members["u0.verdict.npy"])))
    name = np.frombuffer(b"N" * 2_000_000, np.uint8)
    members.update({"u0.strings.utf8.npy": _npy(name), "u0.strings.ends.npy": _npy(np.array([name.size], np.int64))})
    for column in ("entry", "arg_path", "entry_b", "arg_path_b", "mapped_by", "parent_cell"):
        members[f"u0.{column}.npy"] = _npy(np.zeros(rows, np.int32))
    for column in ("side_dtype", "side_md5", "side_data_name", "side_value"):
        members[f"u0.{column}.npy"] = _npy(np.zeros((rows, 2), np.int32))
    _zip(saved, members)
    assert "expand to more than" in _error(saved)


# ------------------------------------------------------------------------------- header against the row columns
def _cell(name: str, **changes: Any) -> dict:
    return {"cell": name, "parent": None, "depth": 0, "rows": 0, "failing": 0, "differing": 0, "min_cosine": None,
            "max_abs_err": None, "worst_verdict": "skip", "first_divergent": None, "max_noise_ratio": None, **changes}


def _set_pair(pairs: list, name: str, n: int) -> None:
    for pair in pairs:
        if pair[0] == name:
            pair[1] = n


@pytest.mark.parametrize("change, field, problem", [
    (lambda a, h: a.update({"u0.verdict": np.zeros_like(a["u0.verdict"])}), "units[0].verdict_counts",
     "contradicts the verdict column"),
    (lambda a, h: _set_pair(h["units"][0]["verdict_counts"], "pass", 10**6), "units[0].verdict_counts",
     "contradicts"),
    (lambda a, h: _set_pair(h["units"][0]["counts"], "matched", 10**6), "units[0].counts", "contradicts"),
    (lambda a, h: h["units"][0]["counts"].append(list(h["units"][0]["counts"][0])), "units[0].counts[",
     "counted twice"),
    (lambda a, h: h["units"][0].update(verdict="pass"), "units[0].verdict", "contradicts the row columns"),
    (lambda a, h: h["units"][0].update(first_failing=None), "units[0].first_failing", "contradicts"),
    (lambda a, h: h["units"][0].update(first_divergent=None), "units[0].first_divergent", "contradicts"),
    (lambda a, h: _set_pair(h["verdict_counts"], "pass", 10**6), "verdict_counts", "units' total"),
    (lambda a, h: _set_pair(h["counts"], "matched", 0), "counts", "units' total"),
    (lambda a, h: h.update(first_failing=None), "first_failing", "is not the units' first"),
    (lambda a, h: h.update(verdict="pass"), "verdict", "contradicts the rows"),
    (lambda a, h: h["units"][0]["cells"].extend([_cell("Z"), _cell("Z")]), "units[0].cells", "listed twice"),
    # numbers beyond the float / int64 range, bools for ints, unknown keys
    (lambda a, h: h["rules"]["default"].update(cosine_fail_below=10**400), "rules.default.cosine_fail_below",
     "float range"),
    (lambda a, h: h.update(matched_share=10**400), "matched_share", "float range"),
    (lambda a, h: h["units"][0]["jumps"].append({"row": 0, "kind": "computed", "error_in": 10**400,
                                                 "error_out": 0.0, "floor": 0.0}), "units[0].jumps[", "float range"),
    (lambda a, h: h["units"][0]["cells"].append(_cell("Z", depth=10**400)), "units[0].cells[", "64-bit"),
    (lambda a, h: h["units"][0]["cells"].append(_cell("Z", min_cosine=-(10**400))), "units[0].cells[", "float range"),
    (lambda a, h: h["units"][0]["cells"].append(_cell("Z", max_abs_err=10**30)), "units[0].cells[", "64 bits"),
    (lambda a, h: h["units"][0]["cells"].append(_cell("Z", max_noise_ratio=-1.0)), "units[0].cells[", "not a ratio"),
    (lambda a, h: h["units"][0]["cells"].append(_cell("Z", max_noise_ratio="nan")), "units[0].cells[", "not a ratio"),
    (lambda a, h: h.update(version=True), "version", "not supported"),
    (lambda a, h: h.update(version=1.0), "version", "not supported"),
    (lambda a, h: h.update(surplus=1), "surplus", "not a field"),
    (lambda a, h: h["units"][0].update(surplus=1), "units[0].surplus", "not a field"),
    (lambda a, h: h["unpaired"][0].update(surplus=1), "unpaired[0].surplus", "not a field"),
])
def test_a_header_contradicting_its_rows_or_out_of_range_is_named(saved, change, field, problem):
    _rewrite(saved, change)
    message = _error(saved)
    assert f"{saved}: {field}" in message and problem in message, message


@pytest.mark.parametrize("raw, problem", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"format": 1e400}', "beyond the float range"),
    (b'{"format": NaN}', "not JSON"),
    (b'{"format": "x", "format": "y"}', "twice in one object"),
])
def test_a_malformed_header_is_one_line(saved, raw, problem):
    with np.load(saved, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["header"] = np.frombuffer(raw, np.uint8)
    np.savez(saved, **arrays)
    message = _error(saved)
    assert f"{saved}: header: " in message and problem in message, message


@pytest.mark.parametrize("text", ["12x", "-", "5", "1" * 5000])
def test_a_bad_wide_dimension_is_named(tmp_path, text):
    huge = _t(mx=None, mn=None, mean=None, norm=None, shape=(0, 2**64))
    entries = [_fwd("Functional.empty.0.forward", huge)]
    c = compare(Dump(Path("a"), (_unit(entries, "a/step0/rank0"),)), Dump(Path("b"), (_unit(entries, "b/step0/rank0"),)))
    path = save_comparison(c, tmp_path)
    members = _members(path)
    data = text.encode()
    members.update({"u0.shapes.wide.values.utf8.npy": _npy(np.frombuffer(data, np.uint8)),
                    "u0.shapes.wide.values.ends.npy": _npy(np.array([len(data)], np.int64))})
    _zip(path, members)
    assert f"{path}: u0.shapes.wide.values: " in _error(path)
