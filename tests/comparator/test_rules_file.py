"""Rules files (TOML / YAML): thresholds, overrides, the matched-share floor, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprobe_cmp.comparator.rules import DEFAULT_MIN_MATCHED_SHARE, Rules, Thresholds
from msprobe_cmp.comparator.rules_file import load_rules
from msprobe_cmp.errors import ConfigError

TOML = """
min_matched_share = 0.9
noise_factor = 3.0

[default]
cosine_suspect_below = 0.995
relative_floor = 1e-6

[[override]]
pattern = "Cell.head.*"
max_abs_err_fail_above = 10.0

[[override]]
dtype = "BFloat16"
cosine_fail_below = 0.8
"""

YAML = """
min_matched_share: 0.9
noise_factor: 3
default:
  cosine_suspect_below: 0.995
  relative_floor: 1.0e-6
override:
  - pattern: "Cell.head.*"
    max_abs_err_fail_above: 10.0
  - dtype: BFloat16
    cosine_fail_below: 0.8
"""


@pytest.mark.parametrize(("name", "text"), [("rules.toml", TOML), ("rules.yaml", YAML)])
def test_toml_and_yaml_give_the_same_rules(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    rules = load_rules(path)
    default = Thresholds(cosine_suspect_below=0.995, relative_floor=1e-6)
    assert rules.default == default
    assert rules.min_matched_share == 0.9 and rules.noise_factor == 3.0
    # Overrides inherit the file's defaults for what they do not set.
    head = rules.thresholds_for("Cell.head.Dense.forward.0.output.0", ("Float32",))
    assert head == Thresholds(cosine_suspect_below=0.995, relative_floor=1e-6, max_abs_err_fail_above=10.0)
    bf16 = rules.thresholds_for("Functional.relu.0.forward.input.0", ("torch.bfloat16",))
    assert bf16.cosine_fail_below == 0.8 and bf16.cosine_suspect_below == 0.995
    assert rules.thresholds_for("Functional.relu.0.forward.input.0", ("Float32",)) == default


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text("")
    assert load_rules(path) == Rules()
    assert Rules().min_matched_share == DEFAULT_MIN_MATCHED_SHARE == 0.5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[default]\ncosine_fail_belw = 0.9\n", "default.cosine_fail_belw: unknown key"),
        ("[default]\ncosine_fail_below = 'high'\n", "default.cosine_fail_below: expected a number"),
        ("[default]\nrelative_floor = 0\n", "relative_floor: must be > 0"),
        ("min_matched_share = 1.5\n", "min_matched_share: must be between 0 and 1"),
        ("[[override]]\nmax_abs_err_fail_above = 2.0\n", "override[0]: needs a pattern or a dtype"),
        ("[[override]]\npattern = 3\n", "override[0].pattern: expected a string"),
        ("thresholds = 1\n", "thresholds: unknown key"),
        ("noise_factor = 0.5\n", "noise_factor: must be a finite number >= 1"),
        ("[default\n", "invalid TOML"),
        ('argument_differs = "error"\n', "argument_differs: expected \"warning\" or \"fail\", got 'error'"),
        ("argument_differs = true\n", "argument_differs: expected \"warning\" or \"fail\", got True"),
        ("argument_differs = [1]\n", "argument_differs: expected \"warning\" or \"fail\", got a list"),
        ('argument_difers = "fail"\n', "argument_difers: unknown key (known: argument_differs, default, "),
        ("[default]\nargument_differs = 'fail'\n", "default.argument_differs: unknown key"),
    ],
)
def test_bad_rules_are_one_line_errors_naming_file_and_key(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rules(path)
    msg = str(info.value)
    assert words in msg and str(path) in msg and "\n" not in msg


def test_other_suffixes_are_read_as_toml_else_yaml_and_missing_file(tmp_path: Path) -> None:
    # a pipe such as --rules <(echo ...) has no suffix: TOML first, then YAML
    (tmp_path / "r_toml").write_text("min_matched_share = 0.25\n[default]\ncosine_fail_below = 0.8\n")
    rules = load_rules(tmp_path / "r_toml")
    assert rules.min_matched_share == 0.25 and rules.default.cosine_fail_below == 0.8
    (tmp_path / "r_yaml").write_text("min_matched_share: 0.3\ndefault:\n  cosine_fail_below: 0.7\n")
    rules = load_rules(tmp_path / "r_yaml")
    assert rules.min_matched_share == 0.3 and rules.default.cosine_fail_below == 0.7
    with pytest.raises(ConfigError, match="neither valid TOML nor valid YAML"):
        (tmp_path / "r.ini").write_text("[default\n: : :\n")
        load_rules(tmp_path / "r.ini")
    with pytest.raises(ConfigError, match="cannot read"):
        load_rules(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("big.toml", "[default]\nmax_abs_err_fail_above = 1" + "0" * 400 + "\n", "number too large"),
        ("digits.toml", "min_matched_share = 1" + "0" * 5000 + "\n", "unreadable"),
        ("mixed.yaml", "1: 2\nfoo: 3\n", "unknown key"),
        ("deep.toml", "x = " + "[" * 20000 + "]" * 20000 + "\n", "rules"),
        ("neg.toml", "[default]\nmax_abs_err_fail_above = -1\n", "must be >= 0"),
        ("order.toml", "[default]\ncosine_fail_below = 0.999\n", "must not exceed cosine_suspect_below"),
        ("cos.toml", "[default]\ncosine_suspect_below = 2\n", "between -1 and 1"),
    ],
)
def test_hostile_rules_files_are_one_line_errors(tmp_path: Path, name: str, text: str, words: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rules(path)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_yaml_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    levels = ['&a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"&{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefg", "bcdefgh", strict=True)]
    path = tmp_path / "bomb.yaml"
    path.write_text(f"min_matched_share: [{', '.join(levels)}, [*h, *h, *h, *h, *h, *h, *h, *h, *h]]\n")
    with pytest.raises(ConfigError, match=r"bomb.yaml: invalid YAML: aliases \(\*name\) are not allowed") as info:
        load_rules(path)  # 9**9 strings if anything expanded the aliases: refused at the first alias
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(("name", "text"), [("r.toml", 'argument_differs = "fail"\n'),
                                            ("r.yaml", "argument_differs: fail\n")])
def test_argument_differs_key(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_rules(path) == Rules(argument_differs="fail")
    (tmp_path / "default.toml").write_text("min_matched_share = 0.4\n")
    assert load_rules(tmp_path / "default.toml").argument_differs == "warning"




def test_yaml_rules_read_exponent_floats_and_refuse_duplicate_keys(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text("localisation:\n  jump_ratio: 1e3\ndefault:\n  max_abs_err_suspect_above: 1e-3\n")
    rules = load_rules(f)
    assert rules.localisation.jump_ratio == 1000.0 and rules.default.max_abs_err_suspect_above == 0.001
    f.write_text("argument_differs: fail\nargument_differs: warning\n")
    with pytest.raises(ConfigError, match="rules.yaml: invalid YAML: duplicate key 'argument_differs'"):
        load_rules(f)


def test_a_localisation_error_names_the_file_once(tmp_path: Path) -> None:
    f = tmp_path / "neg.toml"
    f.write_text("[localisation]\njump_ratio = -1\n")
    with pytest.raises(ConfigError) as info:
        load_rules(f)
    assert str(info.value).count("neg.toml") == 1 and "localisation.jump_ratio" in str(info.value)
