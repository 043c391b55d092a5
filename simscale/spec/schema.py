"""The scenario file's JSON Schema, derived from the typed dataclasses that validate it.

Editors (VS Code's YAML extension, JetBrains) use it for completion and checking as you type:
``# yaml-language-server: $schema=scenario.schema.json`` at the top of a scenario file. It is
built from the same types, units and bounds ``simscale.spec.config`` enforces, so it cannot drift
from the loader; the loader stays the authority (cross-field rules live only there).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from simscale import zoo
from simscale.spec import hardware

SCHEMA_ID = "https://simscale.invalid/scenario.schema.json"

# Known names offered as completions for string fields, by field name.
_ENUMS: dict[str, Any] = {
    "instance": lambda: sorted(hardware.INSTANCES),
    "gpu": lambda: sorted(hardware.GPUS),
}


def field_bounds(f: dataclasses.Field[Any]) -> dict[str, Any]:
    """The JSON Schema bounds simscale.spec.config's field check declares (minimum, maximum,
    ...)."""
    return {k: float(v) for k, v in f.metadata.get("bounds", {}).items()}


def _type_schema(tp: Any, defs: dict[str, Any], name: str = "") -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        arms = [_type_schema(a, defs, name) for a in typing.get_args(tp) if a is not type(None)]
        nullable = type(None) in typing.get_args(tp)
        if nullable:
            arms.append({"type": "null"})
        return arms[0] if len(arms) == 1 else {"anyOf": arms}
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(typing.get_args(tp)[0], defs, name)}
    if origin is dict:
        return {
            "type": "object",
            "additionalProperties": _type_schema(typing.get_args(tp)[1], defs),
        }
    if dataclasses.is_dataclass(tp):
        _define(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if tp is str and name in _ENUMS:
        return {"type": "string", "enum": _ENUMS[name]()}
    simple = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return {"type": simple[tp]} if tp in simple else {}


def _define(cls: Any, defs: dict[str, Any]) -> None:
    if cls.__name__ in defs:
        return
    defs[cls.__name__] = {}  # placeholder against recursion
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        prop = _type_schema(hints[f.name], defs, f.name)
        bounds = field_bounds(f)
        if bounds:
            prop = {**prop, **bounds} if "anyOf" not in prop else {"anyOf": prop["anyOf"], **bounds}
        unit = f.metadata.get("unit")
        if unit:
            prop["description"] = unit
        if f.default is not dataclasses.MISSING and isinstance(f.default, int | float | str | bool):
            prop["default"] = f.default
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        props[f.name] = prop
    doc = (cls.__doc__ or "").strip()
    # A dataclass without a docstring gets its signature as __doc__: not a description.
    if not doc or doc.startswith(f"{cls.__name__}("):
        doc = cls.__name__
    body: dict[str, Any] = {
        "type": "object",
        "description": " ".join(doc.split("\n\n")[0].split()),
        "properties": props,
        "additionalProperties": False,
    }
    if required:
        body["required"] = required
    defs[cls.__name__] = body


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file."""
    from simscale.spec.scenario import ModelConfig, Scenario

    defs: dict[str, Any] = {}
    _define(Scenario, defs)
    _define(ModelConfig, defs)
    defs["ModelConfig"]["properties"]["name"] = {
        "anyOf": [{"type": "string", "enum": zoo.names()}, {"type": "null"}]
    }
    root = defs.pop("Scenario")
    # ``model: resnet50`` is shorthand for ``model: {name: resnet50}``.
    root["properties"]["model"] = {
        "anyOf": [{"type": "string", "enum": zoo.names()}, {"$ref": "#/$defs/ModelConfig"}]
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "SimScale scenario",
        **root,
        "$defs": defs,
    }
