"""Load verdict rules (thresholds, overrides, matched-share floor) from a TOML or YAML file.

File format (TOML shown; YAML has the same keys)::

    min_matched_share = 0.9          # optional; default 0.5
    noise_factor = 2.0               # optional; noise-floor mode tolerance (see Rules)
    argument_differs = "warning"     # optional; "warning" (default) or "fail": a call's non-tensor argument
                                     # that differs between the runs (eps, approximate, a cast target)

    [default]                        # optional; any subset of the Thresholds fields
    cosine_fail_below = 0.9
    cosine_suspect_below = 0.99
    max_abs_err_suspect_above = 1e-3
    max_abs_err_fail_above = 1.0
    stat_warning_ratio = 0.5
    relative_floor = 1e-6            # omit for the dtype's machine epsilon

    [localisation]                   # optional; the likely origin (comparator/localise.py)
    jump_ratio = 10.0                # an output's relative error must exceed this many times its inputs'
    same_kernel_noise_ulps = 16      # rounding floor (ulps of the dtype) between runs of one framework
    cross_kernel_noise_ulps = 1000   # ... across frameworks, or mindtorch against PyTorch
    noise_magnitude_ulps = 100       # a tensor smaller than this (ulps) of its call's largest is rounding noise
    warn = true                      # a jumping row that passes the thresholds becomes a warning

    [[override]]                     # tried in order; the first match wins
    pattern = "Cell.head.*"          # fnmatch over "<entry name>.<arg path>"
    max_abs_err_fail_above = 10.0

    [[override]]
    dtype = "BFloat16"               # any framework's spelling
    cosine_suspect_below = 0.98

An override's unspecified thresholds are the file's defaults.  Unknown keys are errors, so a typo
never silently keeps a default.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from msprobe_cmp.comparator.mapping.files import StrictYamlLoader, read_bounded
from msprobe_cmp.comparator.rules import (
    ARGUMENT_DIFFERS_VERDICTS,
    DEFAULT_ARGUMENT_DIFFERS,
    DEFAULT_MIN_MATCHED_SHARE,
    DEFAULT_NOISE_FACTOR,
    OriginRules,
    Rules,
    ThresholdOverride,
    Thresholds,
)
from msprobe_cmp.errors import ConfigError

#: Rules files larger than this are refused (a rules file is a few lines).
MAX_RULES_FILE_BYTES = 1024 * 1024

_THRESHOLD_KEYS = {f.name for f in fields(Thresholds)}
#: The keys of a rules file's top level.
_TOP_KEYS = frozenset({"default", "override", "min_matched_share", "noise_factor", "argument_differs", "localisation"})
_ORIGIN_KEYS = {f.name for f in fields(OriginRules)}


def _localisation(table: Any, file: Path) -> OriginRules:
    """The ``[localisation]`` table (module docstring) as :class:`OriginRules`."""
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: localisation: expected a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _ORIGIN_KEYS:
            raise ConfigError(
                f"{file}: localisation.{str(key)[:60]}: unknown key (known: {', '.join(sorted(_ORIGIN_KEYS))})")
        if key == "warn":
            if not isinstance(value, bool):
                raise ConfigError(f"{file}: localisation.warn: expected true or false, got {_brief(value)}")
            values[key] = value
        else:
            values[key] = _number(value, file, f"localisation.{key}")
    try:
        return OriginRules(**values)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


class _RulesYamlLoader(StrictYamlLoader):
    """:class:`~msprobe_cmp.comparator.mapping.files.StrictYamlLoader` (no aliases, no duplicate keys) that also reads
    YAML 1.2's exponent floats as numbers: ``1e-3`` and ``1e3`` (YAML 1.1, which PyYAML follows, wants ``1.0e-3``
    and would read them as strings, while the rules' examples and TOML write them so)."""


_RulesYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def _brief(value: Any) -> str:
    """A short description of a value for an error message (never the repr of a container, which a
    YAML alias bomb would expand to gigabytes)."""
    if isinstance(value, (dict, list, tuple, set)):
        return f"a {type(value).__name__}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return "an integer too large"
    text = str(value)
    return repr(text[:40] + "...") if len(text) > 40 else repr(value)


def _number(value: Any, file: Path, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{file}: {where}: expected a number, got {_brief(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{file}: {where}: number too large, got {_brief(value)}") from None


def _thresholds(base: Thresholds, table: Any, file: Path, where: str, extra_keys: frozenset[str]) -> Thresholds:
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: {where}: expected a table of thresholds")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in extra_keys:
            continue
        if key not in _THRESHOLD_KEYS:
            raise ConfigError(
                f"{file}: {where}.{str(key)[:60]}: unknown key (known: {', '.join(sorted(_THRESHOLD_KEYS))})"
            )
        if key == "relative_floor" and value is None:
            values[key] = None
            continue
        values[key] = _number(value, file, f"{where}.{key}")
    try:
        return replace(base, **values)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {where}: {exc}") from None


def parse_rules(doc: Any, file: Path) -> Rules:
    """Build :class:`Rules` from a parsed rules document (see the module docstring).

    Raises:
        ConfigError: a wrong type, an unknown key or an out-of-range value, naming the file and key.
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"{file}: expected a table/mapping at the top level")
    unknown = sorted(str(k) for k in set(doc) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{file}: {unknown[0][:60]}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    default = _thresholds(Thresholds(), doc.get("default", {}), file, "default", frozenset())
    raw_overrides = doc.get("override", [])
    if not isinstance(raw_overrides, list):
        raise ConfigError(f"{file}: override: expected a list of tables")
    overrides = []
    for i, table in enumerate(raw_overrides):
        where = f"override[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{file}: {where}: expected a table")
        pattern, dtype = table.get("pattern"), table.get("dtype")
        for key, value in (("pattern", pattern), ("dtype", dtype)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{file}: {where}.{key}: expected a string")
        if pattern is None and dtype is None:
            raise ConfigError(f"{file}: {where}: needs a pattern or a dtype")
        thresholds = _thresholds(default, table, file, where, frozenset({"pattern", "dtype"}))
        overrides.append(ThresholdOverride(thresholds, pattern=pattern, dtype=dtype))
    share = doc.get("min_matched_share", DEFAULT_MIN_MATCHED_SHARE)
    noise_factor = doc.get("noise_factor", DEFAULT_NOISE_FACTOR)
    share_f = _number(share, file, "min_matched_share")
    noise_f = _number(noise_factor, file, "noise_factor")
    argument_differs = doc.get("argument_differs", DEFAULT_ARGUMENT_DIFFERS)
    if not isinstance(argument_differs, str) or argument_differs not in ARGUMENT_DIFFERS_VERDICTS:
        raise ConfigError(f'{file}: argument_differs: expected "warning" or "fail", got {_brief(argument_differs)}')
    localisation = _localisation(doc.get("localisation", {}), file)
    try:
        return Rules(default=default, overrides=tuple(overrides), min_matched_share=share_f, noise_factor=noise_f,
                     argument_differs=argument_differs, localisation=localisation)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


def load_rules(path: str | Path) -> Rules:
    """Read verdict rules from a ``.toml`` or ``.yaml``/``.yml`` file (any other name: TOML, else YAML).

    Raises:
        ConfigError: the file cannot be read, is not valid TOML/YAML, or holds an invalid rule.
    """
    file = Path(path)
    try:
        data = read_bounded(file, MAX_RULES_FILE_BYTES)
        if len(data) > MAX_RULES_FILE_BYTES:
            raise ConfigError(f"{file}: larger than {MAX_RULES_FILE_BYTES // 1024} KiB: refused")
        text = data.decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8") from None
    suffix = file.suffix.lower()
    try:
        if suffix == ".toml":
            doc: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            doc = yaml.load(text, Loader=_RulesYamlLoader)
        else:  # no telling suffix (a pipe such as --rules <(...)): TOML, else YAML
            try:
                doc = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                try:
                    doc = yaml.load(text, Loader=_RulesYamlLoader)
                except yaml.YAMLError:
                    raise ConfigError(f"{file}: neither valid TOML nor valid YAML (name it .toml or .yaml to see "
                                      "the parser's message)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: invalid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: invalid YAML: {' '.join(str(exc).split())[:200]}") from None
    except (ValueError, RecursionError) as exc:  # integer literals past Python's limit, absurd nesting
        raise ConfigError(f"{file}: unreadable: {type(exc).__name__}: {str(exc)[:120]}") from None
    try:
        return parse_rules(doc if doc is not None else {}, file)
    except RecursionError:
        raise ConfigError(f"{file}: nested too deeply") from None
