"""The space a sweep walks: varied fields, sweep variables and linked fields.

Three kinds of specification, each one command-line string:

- ``--vary FIELD=VALUES`` — a scenario field and its values: a list (``kvstore.servers=1,8,16``),
  a range (``cluster.hosts[0].count=1..16``, ``1..16:3`` adding 3, ``1..64x2`` doubling), or
  several fields linked into one axis (``cluster.server_hosts.count+kvstore.servers=1..8``
  gives both the same value; ``a+b=1/2,2/4`` gives them pairs).
- ``--let NAME=VALUES`` — a sweep variable that is not a scenario field (a column of its own,
  used by links), e.g. ``servers_per_worker=0,1,2``.
- ``--link FIELD=EXPR`` — a field computed from the others for every point, e.g.
  ``kvstore.servers=max(1, servers_per_worker*{cluster.hosts[0].count})``: ``{path}`` is the
  value of a varied (or earlier linked) field, bare names are ``--let`` variables; the
  arithmetic is + - * / // % **, min, max, int, round.

Points are the Cartesian product of the axes in the order given; every field path is checked
against the scenario schema up front so a typo is one line, not a hundred invalid rows.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import itertools
import math
import operator
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from simscale.spec.config import ConfigError, parse_override
from simscale.whatif.errors import WhatIfError

MAX_VALUES_PER_AXIS = 100_000

_RANGE = re.compile(
    r"^\s*(?P<lo>-?\d+(?:\.\d+)?)\s*\.\.\s*(?P<hi>-?\d+(?:\.\d+)?)"
    r"\s*(?:(?P<op>[:x*])\s*(?P<step>\d+(?:\.\d+)?))?\s*$"
)


@dataclass(frozen=True)
class Axis:
    """One dimension of the sweep: ``names`` take ``values[i]`` together at step i."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    fields: bool  # scenario fields (True) or --let variables (False)


@dataclass(frozen=True)
class Link:
    """A field computed from the point's other values."""

    field: str
    text: str
    refs: tuple[str, ...]  # field paths referenced as {path}, in placeholder order
    tree: ast.Expression


@dataclass(frozen=True)
class Grid:
    axes: tuple[Axis, ...]
    links: tuple[Link, ...] = ()

    @property
    def columns(self) -> list[str]:
        cols = [n for a in self.axes for n in a.names]
        return cols + [lk.field for lk in self.links if lk.field not in cols]

    @property
    def field_columns(self) -> list[str]:
        cols = [n for a in self.axes if a.fields for n in a.names]
        return cols + [lk.field for lk in self.links if lk.field not in cols]

    def __len__(self) -> int:
        return math.prod(len(a.values) for a in self.axes) if self.axes else 1

    def points(self) -> list[dict[str, Any]]:
        """Every point as {column: value}, in the order of the axes (the last varies fastest)."""
        out = []
        for combo in itertools.product(*(a.values for a in self.axes)):
            point: dict[str, Any] = {}
            for axis, values in zip(self.axes, combo, strict=True):
                point.update(zip(axis.names, values, strict=True))
            for lk in self.links:
                point[lk.field] = evaluate_link(lk, point)
            out.append(point)
        return out

    def overrides(self, point: dict[str, Any]) -> list[tuple[str, Any]]:
        """The (field path, value) pairs a point sets in the scenario."""
        return [(c, point[c]) for c in self.field_columns]


# ---- parsing ----


def parse_grid(vary: Sequence[str], let: Sequence[str] = (), link: Sequence[str] = ()) -> Grid:
    """Parse the three kinds of specification; WhatIfError (one line) for anything wrong."""
    axes = [_parse_axis(text, fields=True) for text in vary]
    axes += [_parse_axis(text, fields=False, option="--let") for text in let]
    seen: set[str] = set()
    for a in axes:
        for n in a.names:
            if n in seen:
                raise WhatIfError(f"{n!r} is varied twice; give each field one --vary")
            seen.add(n)
    lets = {n for a in axes if not a.fields for n in a.names}
    links = []
    for text in link:
        lk = _parse_link(text, lets)
        missing = [r for r in lk.refs if r not in seen]
        if missing:
            raise WhatIfError(
                f"--link {text!r}: {{{missing[0]}}} is not varied or linked before it; "
                f"known: {', '.join(sorted(seen)) or 'none'}"
            )
        if lk.field in seen:
            raise WhatIfError(f"--link {text!r}: {lk.field} is already varied")
        seen.add(lk.field)
        links.append(lk)
    return Grid(tuple(axes), tuple(links))


def _split_spec(text: str, option: str) -> tuple[str, str]:
    if "=" not in text:
        raise WhatIfError(f"{option} {text!r}: expected NAME=VALUES, e.g. kvstore.servers=1,8,16")
    name, values = text.split("=", 1)
    return name.strip(), values.strip()


def _parse_axis(text: str, fields: bool, option: str = "--vary") -> Axis:
    name, raw = _split_spec(text, option)
    names = tuple(n.strip() for n in name.split("+"))
    for n in names:
        if fields:
            check_field_path(n, option)
        elif not n.isidentifier():
            raise WhatIfError(f"{option} {text!r}: {n!r} is not a name (letters, digits, _)")
    if not raw:
        raise WhatIfError(f"{option} {text!r}: no values, expected e.g. 1,2,4 or 1..16x2")
    m = _RANGE.match(raw)
    if m:
        singles = _range(m, f"{option} {text!r}")
        values = tuple((v,) * len(names) for v in singles)
    else:
        items = [v.strip() for v in raw.split(",")]
        if any(not v for v in items):
            raise WhatIfError(f"{option} {text!r}: an empty value in the list")
        values = tuple(_tuple_value(v, len(names), f"{option} {text!r}") for v in items)
    return Axis(names, values, fields)


def _tuple_value(item: str, n: int, where: str) -> tuple[Any, ...]:
    if n == 1:
        return (_scalar(item),)
    parts = item.split("/")
    if len(parts) == 1:
        return (_scalar(item),) * n
    if len(parts) != n:
        raise WhatIfError(f"{where}: {item!r} has {len(parts)} values for {n} linked fields")
    return tuple(_scalar(p.strip()) for p in parts)


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _range(m: re.Match[str], where: str) -> list[Any]:
    lo_t, hi_t, op, step_t = m["lo"], m["hi"], m["op"], m["step"]
    as_int = not any("." in t for t in (lo_t, hi_t, step_t or ""))
    conv: Callable[[str], float] = int if as_int else float
    lo, hi = conv(lo_t), conv(hi_t)
    step = conv(step_t) if step_t else 1
    if hi < lo:
        raise WhatIfError(f"{where}: empty range {lo_t}..{hi_t} (the end is below the start)")
    out: list[Any] = []
    if op in ("x", "*"):
        if lo <= 0 or step <= 1:
            raise WhatIfError(f"{where}: a multiplying range needs a start > 0 and a factor > 1")
        v = lo
        while v <= hi * (1 + 1e-12):
            out.append(v)
            v = v * step
            if len(out) > MAX_VALUES_PER_AXIS:
                break
    else:
        if step <= 0:
            raise WhatIfError(f"{where}: the step must be > 0")
        n = math.floor((hi - lo) / step + 1e-9) + 1
        out = [lo + i * step for i in range(min(n, MAX_VALUES_PER_AXIS + 1))]
    if len(out) > MAX_VALUES_PER_AXIS:
        raise WhatIfError(f"{where}: more than {MAX_VALUES_PER_AXIS} values")
    return out


# ---- field paths against the scenario schema ----


def _unwrap(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner[0] if len(inner) == 1 else tp
    return tp


def check_field_path(path: str, option: str = "--vary") -> None:
    """WhatIfError naming the bad part (with a did-you-mean) unless ``path`` is a scenario
    field such as ``cluster.hosts[0].nic_gbps``."""
    from simscale.spec.scenario import Scenario

    try:
        parts, _ = parse_override(f"{path}=0")
    except ConfigError as e:
        raise WhatIfError(f"{option}: {e.problem}") from None
    tp: Any = Scenario
    walked = ""
    for part in parts:
        tp = _unwrap(tp)
        if isinstance(part, int):
            if typing.get_origin(tp) is not tuple:
                raise WhatIfError(f"{option}: {walked} is not a list, so {walked}[{part}] is not")
            tp = typing.get_args(tp)[0]
            walked = f"{walked}[{part}]"
            continue
        if not dataclasses.is_dataclass(tp):
            raise WhatIfError(f"{option}: {walked} has no fields, so {walked}.{part} is not one")
        hints = typing.get_type_hints(tp)
        if part not in hints:
            close = difflib.get_close_matches(part, list(hints), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(hints)
            where = f"{walked}.{part}" if walked else part
            raise WhatIfError(f"{option}: {where}: unknown field ({hint})")
        tp = hints[part]
        walked = f"{walked}.{part}" if walked else part


# ---- links ----

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "int": int, "round": round}
_REF = re.compile(r"\{([^{}]+)\}")


def _parse_link(text: str, lets: set[str]) -> Link:
    field, expr = _split_spec(text, "--link")
    check_field_path(field, "--link")
    refs: list[str] = []

    def placeholder(m: re.Match[str]) -> str:
        path = m.group(1).strip()
        check_field_path(path, "--link")
        refs.append(path)
        return f"__ref{len(refs) - 1}"

    source = _REF.sub(placeholder, expr)
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise WhatIfError(f"--link {text!r}: not an arithmetic expression") from None
    allowed = lets | {f"__ref{i}" for i in range(len(refs))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in allowed and node.id not in _FUNCS:
            raise WhatIfError(
                f"--link {text!r}: unknown name {node.id!r} (fields go in braces, e.g. "
                f"{{kvstore.servers}}; --let variables: {', '.join(sorted(lets)) or 'none'})"
            )
    link = Link(field, expr, tuple(refs), tree)
    _check_nodes(link, tree.body)
    return link


def _check_nodes(link: Link, node: ast.AST) -> None:
    ok = (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load)
    ok += (*tuple(_BINOPS), ast.USub, ast.UAdd)
    for sub in ast.walk(node):
        if not isinstance(sub, ok):
            raise WhatIfError(f"--link {link.text!r}: {type(sub).__name__} is not allowed")
        if isinstance(sub, ast.Call) and not (
            isinstance(sub.func, ast.Name) and sub.func.id in _FUNCS and not sub.keywords
        ):
            raise WhatIfError(f"--link {link.text!r}: calls allowed: {', '.join(_FUNCS)}")


def evaluate_link(link: Link, point: dict[str, Any]) -> Any:
    """The linked field's value at ``point``; whole floats become ints (counts stay counts)."""
    env = {f"__ref{i}": point[r] for i, r in enumerate(link.refs)}
    env.update({k: v for k, v in point.items() if k.isidentifier()})

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        return _FUNCS[node.func.id](*(ev(a) for a in node.args))

    try:
        value = ev(link.tree.body)
    except (TypeError, ZeroDivisionError, ValueError) as e:
        raise WhatIfError(f"--link {link.text!r}: {e} at {point}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
