"""Reading the configuration: the TOML file, then PUBLISHER_* environment variables, then
CLI --set, each value coerced to its field's type and the whole tree checked before any
connection opens; every complaint names the key."""
from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from publisher.config import Config, ConfigError
from publisher.config.checks import check_config

ENV_PREFIX = "PUBLISHER_"


def load_config(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> Config:
    """Read the TOML file, apply PUBLISHER_<SECTION>_<KEY> variables and `key.path=value` overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"configuration file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from None
    environ = os.environ if environ is None else environ
    leaves = _leaf_paths(Config)
    for dotted in leaves:
        env_name = env_name_of(dotted)
        if env_name in environ:
            _set_path(raw, dotted, _parse_scalar(environ[env_name]))
    _warn_misspelt_variables(environ, leaves)
    for item in overrides:
        dotted, sep, text = item.partition("=")
        dotted = dotted.strip()
        if not sep or not dotted:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        if dotted not in leaves and not _is_mapping_entry(dotted):
            raise ConfigError(f"--set {dotted}: {unknown_key(dotted, leaves)}")
        _set_path(raw, dotted, _parse_scalar(text))
    config = _build(Config, raw, "")
    check_config(config, raw)
    return config


EXAMPLE = "examples/publisher.toml"
"""Where every key is shown, with its default and what it does."""


def env_name_of(dotted: str) -> str:
    """The environment variable that sets a key: PUBLISHER_<SECTION>_<KEY>."""
    return ENV_PREFIX + dotted.replace(".", "_").upper()


def unknown_key(dotted: str, known: set[str]) -> str:
    """The complaint for a key no setting has: the closest known key, if one is close, else
    where every key is shown; a list of all of them on one line helps nobody find theirs. A key
    in the wrong section is found by its name first."""
    name = dotted.rpartition(".")[2]
    close = sorted(key for key in _leaf_paths(Config) if key.rpartition(".")[2] == name and key != dotted)[:1]
    close = close or difflib.get_close_matches(dotted, sorted(known), n=1)
    if close:
        return f"unknown key; did you mean `{close[0]}`?"
    return f"unknown key (every key is shown in {EXAMPLE})"


MISSPELT_CUTOFF = 0.85
"""How alike a PUBLISHER_ variable must be to a setting's to be taken for a misspelling of it:
other PUBLISHER_ variables (of the tests, of a deployment's own scripts) are left alone."""


def _warn_misspelt_variables(environ: Mapping[str, str], leaves: set[str]) -> None:
    """A PUBLISHER_ variable that is no setting's but nearly one's is said once: it sets nothing."""
    names = {env_name_of(dotted): dotted for dotted in leaves}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in names:
            continue
        close = difflib.get_close_matches(variable, sorted(names), n=1, cutoff=MISSPELT_CUTOFF)
        if close:
            logging.getLogger("publisher").warning(
                "environment variable %s sets no key and is ignored; did you mean %s (%s)?", variable, close[0],
                names[close[0]])


def _leaf_paths(cls: type, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            paths |= _leaf_paths(hint, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        elif _entries_of(hint) is None:
            paths.add(prefix + f.name)
    return paths


def _is_mapping_entry(dotted: str) -> bool:
    return dotted.startswith("spark.conf.") and len(dotted) > len("spark.conf.")


def _set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    if _is_mapping_entry(dotted):
        raw.setdefault("spark", {}).setdefault("conf", {})[dotted[len("spark.conf.") :]] = value
        return
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def _parse_scalar(text: str) -> Any:
    """Environment and --set values are TOML values when they parse as one, plain strings otherwise."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _build(cls: type, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "the configuration"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {_show(raw)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        candidates = {prefix + name for name in names} | (_leaf_paths(Config) if not prefix else set())
        raise ConfigError(f"{prefix}{unknown[0]}: {unknown_key(prefix + unknown[0], candidates)}")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        hint = hints[name]
        key = prefix + name
        entries = _entries_of(hint)
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, value, key + ".")  # type: ignore[arg-type]
        elif entries is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a table of named entries ([{key}.NAME]), got {_show(value)}")
            values[name] = {entry: _build(entries, body, f"{key}.{entry}.") for entry, body in value.items()}
        else:
            values[name] = _coerce(hint, value, key)
    return cls(**values)


def _entries_of(hint: Any) -> type | None:
    """The entry type of a `Mapping[str, <dataclass>]` setting (named tables such as
    [subscribers.NAME]), else None."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Mapping and len(args) == 2 and isinstance(args[1], type):
        return args[1] if dataclasses.is_dataclass(args[1]) else None
    return None


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None or value == "":
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, key)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = tuple(member.value for member in hint)
        if value not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, choices))}, got {_show(value)}")
        return hint(value)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {', '.join(map(repr, args))}, got {_show(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {_show(value)}")
        return tuple(value)
    if origin is Mapping and args and args[1] is not str:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table, got {_show(value)}")
        return {str(k): _coerce(args[1], v, f"{key}.{k}") for k, v in value.items()}
    if origin is Mapping or hint is Mapping:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table of settings, got {_show(value)}")
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {_show(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected a whole number, got {_show(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {_show(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {_show(value)}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {_show(value)}")
        return value
    raise ConfigError(f"{key}: unsupported setting type {hint}")  # pragma: no cover


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"
