"""RecordConfig: msprobe config.json keys, overrides, and one-line errors naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe_cmp.errors import ConfigError
from msprobe_cmp.recorder.config import RecordConfig, build_config, load_config, parse_int_list


def _write(tmp_path: Path, obj: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_reads_the_config_msprobe_wrote_for_the_fixtures(msprobe_fixtures: Path) -> None:
    cfg = load_config(msprobe_fixtures / "tensor_a.config.json")
    assert cfg.task == "tensor"
    assert cfg.level == "mix"
    assert cfg.steps == ()
    assert cfg.ranks == ()
    assert cfg.data_mode == ("all",)
    assert cfg.dump_path == Path("/home/user/runs/tensor_a")
    assert cfg.saves_tensors


def test_keyword_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"task": "tensor", "dump_path": "from_file", "level": "L0", "step": [7]})
    cfg = load_config(path, dump_path=tmp_path / "d", task="statistics", level="mix", step=[1, "3-4"])
    assert (cfg.task, cfg.level, cfg.steps) == ("statistics", "mix", (1, 3, 4))
    assert cfg.dump_path == (tmp_path / "d").absolute()


def test_defaults_without_a_file(tmp_path: Path) -> None:
    cfg = load_config(dump_path=tmp_path)
    assert cfg == RecordConfig(dump_path=tmp_path.absolute())
    assert (cfg.task, cfg.level, cfg.summary_mode) == ("statistics", "L1", "statistics")


def test_step_lists_expand_ranges_sort_and_deduplicate() -> None:
    assert parse_int_list([5, "1-3", 2, "3-3"], "f", "step") == (1, 2, 3, 5)
    assert parse_int_list(4, "f", "step") == (4,)
    assert parse_int_list([], "f", "step") == ()


def test_step_selection_and_end(tmp_path: Path) -> None:
    cfg = build_config({"dump_path": str(tmp_path), "step": ["1-2"]})
    assert [cfg.records_step(s) for s in range(4)] == [False, True, True, False]
    assert [cfg.past_last_step(s) for s in range(4)] == [False, False, False, True]
    every = build_config({"dump_path": str(tmp_path)})
    assert every.records_step(12345) and not every.past_last_step(12345)


def test_task_sub_dict_keys_are_accepted(tmp_path: Path) -> None:
    cfg = build_config(
        {
            "dump_path": str(tmp_path),
            "task": "statistics",
            "statistics": {
                "scope": ["Functional.relu.0.forward", "Cell.fc1.Dense.backward.1"],
                "list": ["relu"],
                "data_mode": ["forward"],
                "summary_mode": "md5",
            },
        }
    )
    assert cfg.scope == ("Functional.relu.0.forward", "Cell.fc1.Dense.backward.1")
    assert cfg.scope_bounds == ("Functional.relu.0.forward", "Cell.fc1.Dense.forward.1")
    assert cfg.name_list == ("relu",)
    assert cfg.summary_mode == "md5"
    assert cfg.records_direction("forward") and not cfg.records_direction("backward")
    assert cfg.records_io("input") and cfg.records_io("output")
    # Plain members match whole dot-separated parts (msprobe 1.x matched substrings: relu ⊂ leaky_relu).
    assert cfg.records_name("Functional.relu.0.forward") and not cfg.records_name("Functional.leaky_relu.0.forward")
    assert not cfg.records_name("Functional.add.0.forward")


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        ({"task": "statistics", "step": ["3-1"]}, "step[0]", "start > end"),
        ({"task": "statistics", "step": ["x"]}, "step[0]", "not an integer"),
        ({"task": "statistics", "step": [True]}, "step[0]", "expected an integer"),
        ({"task": "statistics", "step": [2_000_000]}, "step[0]", "outside"),
        ({"task": "statistics", "rank": "0"}, "rank", "expected a list"),
        ({"task": "overflow_check"}, "task", "not supported"),
        ({"task": "nonsense"}, "task", "expected one of"),
        ({"level": "L2"}, "level", "not supported"),
        ({"level": "l0"}, "level", "expected one of"),
        ({"colour": "red"}, "colour", "unknown key"),
        ({"statistics": {"data_mode": ["all", "forward"]}}, "statistics.data_mode", "only member"),
        ({"statistics": {"data_mode": ["sideways"]}}, "statistics.data_mode[0]", "expected one of"),
        ({"statistics": {"summary_mode": "sha"}}, "statistics.summary_mode", "expected one of"),
        ({"statistics": {"scope": ["only-one"]}}, "statistics.scope", "exactly two"),
        ({"statistics": {"lst": []}}, "statistics.lst", "unknown key"),
        ({"async_dump": "yes"}, "async_dump", "expected true or false"),
        ({"async_dump": True, "task": "tensor"}, "tensor.list", "non-empty list"),
        ({"statistics": {"scope": ["Functional.relu", "Cell.a.B.forward.0"]}}, "statistics.scope[0]", "not a full"),
        ({"statistics": {"list": ["name-regex(a[)"]}}, "statistics.list[0]", "invalid regular expression"),
        ({"statistics": {"list": ["name-regex()"]}}, "statistics.list[0]", "expected 'name-regex"),
        ({"level": "debug", "task": "overflow_check"}, "task", "not supported"),
    ],
)
def test_errors_are_one_line_naming_file_and_field(tmp_path: Path, obj: dict, field: str, words: str) -> None:
    path = _write(tmp_path, {"dump_path": str(tmp_path / "d"), **obj})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message


def test_missing_dump_path_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"task": "statistics"})
    with pytest.raises(ConfigError, match=r"config\.json: dump_path: is required"):
        load_config(path)


def test_a_dump_path_at_or_below_a_file_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    existing = tmp_path / "dump.json"
    existing.write_text("{}")
    path = _write(tmp_path, {"dump_path": str(existing)})
    with pytest.raises(ConfigError, match=rf"^{path}: dump_path: {existing} is a file, not a directory$"):
        load_config(path)
    with pytest.raises(ConfigError, match=rf"^arguments: dump_path: {existing} is a file, not a directory$"):
        load_config(path, dump_path=existing / "step0" / "run")
    assert existing.read_text() == "{}"
    assert load_config(path, dump_path=tmp_path / "new" / "dump").dump_path == tmp_path / "new" / "dump"


def test_bad_override_names_the_arguments(tmp_path: Path) -> None:
    path = _write(tmp_path, {"dump_path": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"^arguments: level: "):
        load_config(path, level="L9")
    with pytest.raises(ConfigError, match=r"^arguments: step\[0\]: "):
        load_config(path, step=["9-2"])


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="absent.json: not found"):
        load_config(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "task": ,\n}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json: invalid JSON at line 2"):
        load_config(bad)
    listed = _write(tmp_path, [1, 2], "list.json")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_config(listed)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"task": "statistics", "task": "tensor"}', "duplicate key"),
        ('{"dump_path": "d", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"dump_path": "d", "step": ["\u00b2-3"]}', "step[0]"),
        ('{"dump_path": "d", "step": ["' + "1" * 5000 + '-2"]}', "step[0]"),
    ],
)
def test_pathological_config_files_are_one_line_errors(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value) and "config.json" in str(info.value) and "\n" not in str(info.value)


def test_step_given_as_bytes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="step"):
        load_config(None, dump_path=tmp_path, step=b"12")


def test_config_is_frozen(tmp_path: Path) -> None:
    cfg = load_config(dump_path=tmp_path)
    with pytest.raises(AttributeError):
        cfg.task = "tensor"  # type: ignore[misc]


def test_every_msprobe_fixture_config_is_accepted_as_is(msprobe_fixtures: Path) -> None:
    configs = sorted(msprobe_fixtures.glob("*.config.json"))
    assert len(configs) >= 5
    for path in configs:
        cfg = load_config(path)
        raw = json.loads(path.read_text())
        assert (cfg.task, cfg.level) == (raw["task"], raw["level"]), path


def test_async_dump_is_accepted_and_the_tensor_task_needs_a_list(tmp_path: Path) -> None:
    cfg = build_config({"dump_path": str(tmp_path), "async_dump": True})
    assert cfg.async_dump and cfg.task == "statistics"
    tensor = build_config(
        {"dump_path": str(tmp_path), "async_dump": True, "task": "tensor", "tensor": {"list": ["relu"]}}
    )
    assert tensor.async_dump and tensor.saves_tensors
    with pytest.raises(ConfigError, match=r"^arguments: tensor\.list: .*held in device memory"):
        build_config({"dump_path": str(tmp_path), "async_dump": True}, task="tensor")
    assert not build_config({"dump_path": str(tmp_path), "async_dump": False}, task="tensor").async_dump
