"""Typed loading of YAML mappings into frozen dataclasses, with errors that name the field.

Every configuration class in SimScale is a frozen dataclass; this module is the one place that
turns plain YAML data into them. An error always names the file, the field path
(``cluster.hosts[1].nic_gbps``), the bad value and what was expected, so the CLI can print one line
and exit 2 instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration problem at one field; ``str()`` is the one-line message users see."""

    def __init__(self, path: str, problem: str, source: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.source = source
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = f"{self.path}: " if self.path else ""
        prefix = f"{self.source}: " if self.source else ""
        return f"{prefix}{where}{self.problem}"

    def in_file(self, source: str) -> ConfigError:
        return ConfigError(self.path, self.problem, source)


def describe(value: Any) -> str:
    """A short rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- checks usable as field metadata: ``field(default=1.0, metadata=positive("Gbit/s"))`` ----

Check = Callable[[Any], str | None]


def check(fn: Check, unit: str = "") -> dict[str, Any]:
    return {"check": fn, "unit": unit}


def positive(unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v > 0 else "a number > 0", unit)


def non_negative(unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v >= 0 else "a number >= 0", unit)


def at_least(low: float, unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v >= low else f"a number >= {low}", unit)


def between(low: float, high: float, unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if low <= v <= high else f"a number in [{low}, {high}]", unit)


# ---- the loader ----


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _convert(inner[0], value, path)
        errors = []
        for arm in inner:
            try:
                return _convert(arm, value, path)
            except ConfigError as e:
                errors.append(e)
        raise errors[-1]
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed and type(value) is type(allowed[0]):
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(path, f"got {describe(value)}, expected {_type_name(tp)}{hint}")
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"got {describe(value)}, expected a mapping")
        return {
            _convert(key_tp, k, path): _convert(value_tp, v, _join(path, str(k)))
            for k, v in value.items()
        }
    if origin is tuple:
        (item_tp, _) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"got {describe(value)}, expected {_type_name(tp)}")
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(path, f"got {describe(value)}, expected a finite number")
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Any:
        return value
    raise ConfigError(path, f"got {describe(value)}, expected {_type_name(tp)}")


def from_mapping(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from a YAML mapping, checking types, units and unknown keys."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            path,
            f"got {describe(data)}, expected a mapping with fields "
            + ", ".join(f.name for f in dataclasses.fields(cls)),
        )  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(fields)
            raise ConfigError(_join(path, str(key)), f"unknown field ({hint})")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        sub = _join(path, name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(sub, f"missing, expected {_type_name(hints[name])}")
            continue
        value = _convert(hints[name], data[name], sub)
        chk = f.metadata.get("check")
        if chk is not None and value is not None:
            problem = chk(value)
            if problem:
                unit = f.metadata.get("unit")
                unit_text = f" ({unit})" if unit else ""
                raise ConfigError(sub, f"got {describe(value)}, expected {problem}{unit_text}")
        kwargs[name] = value
    try:
        obj = cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(_join(path, e.path), e.problem) from None
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ConfigError as e:
            raise ConfigError(_join(path, e.path), e.problem) from None
    return obj


def to_mapping(obj: Any) -> Any:
    """The plain-data (YAML/JSON-ready) form of a configuration dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_mapping(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_mapping(v) for v in obj]
    return obj


def _join(path: str, name: str) -> str:
    if not name:
        return path
    if not path:
        return name
    return f"{path}{name}" if name.startswith("[") else f"{path}.{name}"


# ---- files and overrides ----


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``; ConfigError (not a traceback) if missing, empty or broken."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("", "no such file", str(p)) from None
    except IsADirectoryError:
        raise ConfigError("", "is a directory, expected a YAML file", str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("", f"cannot read: {e}", str(p)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or "malformed"
        raise ConfigError("", f"not valid YAML: {where}{problem}", str(p)) from None
    if data is None:
        raise ConfigError("", "file is empty, expected a YAML mapping", str(p))
    return data


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """``"kvstore.servers=16"`` → (["kvstore", "servers"], 16); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError("--set", f"got {text!r}, expected path=value (e.g. kvstore.servers=16)")
    key, raw = text.split("=", 1)
    parts: list[str | int] = []
    for token in key.strip().split("."):
        name, _, rest = token.partition("[")
        if name:
            parts.append(name)
        while rest:
            idx, _, rest = rest.partition("]")
            if not idx.isdigit():
                raise ConfigError("--set", f"bad index in {key!r}, expected e.g. hosts[0]")
            parts.append(int(idx))
            rest = rest.lstrip("[")
    if not parts:
        raise ConfigError("--set", f"got {text!r}, expected path=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """Apply ``--set path=value`` overrides to raw YAML data before validation, so that a bad
    override is reported against its field like any other bad value."""
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for i, part in enumerate(parts[:-1]):
            nxt = parts[i + 1]
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    raise ConfigError("--set", f"{text!r}: index {part} out of range")
                node = node[part]
            else:
                if not isinstance(node, dict):
                    raise ConfigError("--set", f"{text!r}: {part!r} is not inside a mapping")
                if not isinstance(node.get(part), dict | list):
                    node[part] = [] if isinstance(nxt, int) else {}
                node = node[part]
        last = parts[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last >= len(node):
                raise ConfigError("--set", f"{text!r}: index {last} out of range")
            node[last] = value
        else:
            if not isinstance(node, dict):
                raise ConfigError("--set", f"{text!r}: {last!r} is not inside a mapping")
            node[last] = value
    return data
