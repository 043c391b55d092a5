"""Typed loading of YAML mappings into frozen dataclasses, with errors that name the field.

Every configuration class in SimScale is a frozen dataclass; this module is the one place that
turns plain YAML data into them. An error always names the file, the field path
(``cluster.hosts[1].nic_gbps``), the bad value and what was expected, so the CLI can print one line
and exit 2 instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import reprlib
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


_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = 4
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlong = 40


def describe(value: Any) -> str:
    """A short rendering of a bad value for an error message; bounded work however big or deep
    the value is (a shared-reference YAML structure must not be expanded to be printed)."""
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- checks usable as field metadata: ``field(default=1.0, metadata=positive("Gbit/s"))`` ----

Check = Callable[[Any], str | None]


def check(fn: Check, unit: str = "", **bounds: float) -> dict[str, Any]:
    """Field metadata: the check, its unit, and its bounds as JSON Schema keywords (``minimum``,
    ``exclusiveMinimum``, ``maximum``) so that the schema is derived from the same numbers."""
    return {"check": fn, "unit": unit, "bounds": bounds}


def positive(unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v > 0 else "a number > 0", unit, exclusiveMinimum=0)


def non_negative(unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v >= 0 else "a number >= 0", unit, minimum=0)


def at_least(low: float, unit: str = "") -> dict[str, Any]:
    return check(lambda v: None if v >= low else f"a number >= {low}", unit, minimum=low)


def _num(x: float) -> str:
    """A bound as people write it: 100,000 and 0.001, not 100000.0 and 1e-03."""
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:g}"


def between(low: float, high: float, unit: str = "") -> dict[str, Any]:
    return check(
        lambda v: None if low <= v <= high else f"a number in [{_num(low)}, {_num(high)}]",
        unit,
        minimum=low,
        maximum=high,
    )


def above(low: float, high: float, unit: str = "") -> dict[str, Any]:
    """A number in the half-open range (low, high]: for rates and costs that cannot be zero."""
    return check(
        lambda v: None if low < v <= high else f"a number in ({_num(low)}, {_num(high)}]",
        unit,
        exclusiveMinimum=low,
        maximum=high,
    )


def count_in(low: int, high: int, unit: str = "") -> dict[str, Any]:
    """An integer count in [low, high]; the bound is what is physically plausible, so that an
    absurd value is refused here rather than exhausting memory or time in the simulator."""
    return check(
        lambda v: None if low <= v <= high else f"an integer in [{_num(low)}, {_num(high)}]",
        unit,
        minimum=low,
        maximum=high,
    )


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
            if abs(value) >= 2**63:
                raise ConfigError(path, f"got {value:g}, expected an integer below 2**63")
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


# ---- safe YAML: bounded size, depth and alias expansion; duplicate keys are errors ----

# A scenario, profile or campaign is a few kilobytes (an explicit model of a thousand arrays is
# under 100 kB); these bounds are far above any real file and far below what hurts.
MAX_YAML_BYTES = 4_000_000
MAX_YAML_DEPTH = 32  # nesting of mappings and lists (a scenario nests 4 deep)
MAX_YAML_NODES = 200_000  # scalars, lists and mappings after every alias is expanded
MAX_INT_DIGITS = 30  # beyond any count or seed the schema allows (2**63 has 19 digits)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader (no arbitrary objects) that also refuses: nesting deeper than
    MAX_YAML_DEPTH (PyYAML recurses per level: 1,000 nested lists were a RecursionError),
    documents that expand past MAX_YAML_NODES through aliases (a 900-byte "billion laughs"
    took 27 s and 1.5 GB to report), a key given twice in one mapping (PyYAML lets the last one
    win silently), and integers too long to be any field's value."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _yaml_problem(
                    self.peek_event().start_mark, f"nested deeper than {MAX_YAML_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise _yaml_problem(key_node.start_mark, f"duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(c.isalnum() for c in str(node.value))  # hex and octal digits too
        if digits > MAX_INT_DIGITS:
            raise _yaml_problem(
                node.start_mark, f"an integer of {digits} digits, expected at most {MAX_INT_DIGITS}"
            )
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _YamlProblem(yaml.YAMLError):
    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.problem_mark = mark
        self.problem = problem


def _yaml_problem(mark: Any, problem: str) -> _YamlProblem:
    return _YamlProblem(mark, problem)


def _expanded_nodes(root: Any) -> int:
    """Nodes of the document with every alias expanded, counted without expanding them (each
    distinct node once, memoised), stopping as soon as the count passes MAX_YAML_NODES."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
                if total > MAX_YAML_NODES:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > MAX_YAML_NODES:
                    break
        sizes[id(node)] = total
        return total

    return size(root)


def safe_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds above; ConfigError naming the line otherwise."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError("", f"{len(text):,} characters, expected at most {MAX_YAML_BYTES:,}")
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here already
        root = loader.get_single_node()
        if root is None:
            return None
        nodes = _expanded_nodes(root)
        if nodes > MAX_YAML_NODES:
            raise _yaml_problem(
                root.start_mark,
                f"expands to more than {MAX_YAML_NODES:,} values through aliases",
            )
        return loader.construct_document(root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or "malformed"
        raise ConfigError("", f"not valid YAML: {where}{problem}") from None
    except RecursionError:
        # Flow-style nesting is parsed recursively by PyYAML before composing; a document
        # that nests deeper than Python's stack is still only too deep.
        too_deep = f"not valid YAML: nested deeper than {MAX_YAML_DEPTH} levels"
        raise ConfigError("", too_deep) from None
    finally:
        if loader is not None:
            loader.dispose()


# ---- files and overrides ----


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``; ConfigError (not a traceback) if missing, empty or broken."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise ConfigError(
                "", f"{p.stat().st_size:,} bytes, expected at most {MAX_YAML_BYTES:,}", str(p)
            )
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("", "no such file", str(p)) from None
    except IsADirectoryError:
        raise ConfigError("", "is a directory, expected a YAML file", str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("", f"cannot read: {e}", str(p)) from None
    try:
        data = safe_yaml(text)
    except ConfigError as e:
        raise e.in_file(str(p)) from None
    if data is None:
        raise ConfigError("", "file is empty, expected a YAML mapping", str(p))
    return data


def positive_seconds(text: str) -> float:
    """An argparse type for a time limit: a finite number of seconds above 0."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number of seconds > 0")
    return value


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type for a count: an integer of at least ``minimum``."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= {minimum}")
        return value

    return parse


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
        value = safe_yaml(raw) if raw.strip() else ""
    except ConfigError as e:
        if e.problem.startswith("not valid YAML"):
            value = raw  # not YAML: taken as the literal string, which the field then checks
        else:
            raise ConfigError("--set", f"{key}: {e.problem}") from None
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
