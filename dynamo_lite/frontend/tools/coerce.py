"""Tool-call arguments typed by the tool's JSON schema, as vLLM's parser engine types them.

Formats that write each argument as text (`<parameter=days>3</parameter>`) give strings; vLLM
coerces each to the type its schema declares (`"days": 3`), and also rewrites values of the JSON
formats it parses with the same engine (kimi_k2: `3` under a string schema becomes `"3"`).
A value the schema does not describe is kept as it came.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}  # fmt: skip
_ENUM_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"))  # fmt: skip


def coerce_arguments(args: dict[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    """`args` with each value the schema in `properties` describes coerced to its type."""
    return {k: _coerce(v, properties[k]) if isinstance(properties.get(k), dict) else v for k, v in args.items()}


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        inner = schema.get("properties")
        return coerce_arguments(value, inner) if isinstance(inner, dict) else value
    if isinstance(value, list):
        items = schema.get("items")
        return [_coerce(v, items) for v in value] if isinstance(items, dict) else value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return coerce_text(text, schema_types(schema))


def schema_types(schema: Any) -> set[str]:
    """The JSON types a schema allows (`type`, enum values, anyOf/oneOf/allOf); {"string"} if none is said."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    declared = schema.get("type")
    types.update([declared] if isinstance(declared, str) else [t for t in declared or () if isinstance(t, str)])
    enum = schema.get("enum")
    for v in enum if isinstance(enum, list) else ():
        types.add("null" if v is None else next(name for kind, name in _ENUM_TYPES if isinstance(v, kind)))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            for choice in schema[key]:
                types |= schema_types(choice)
    return types or {"string"}


def coerce_text(value: str, types: set[str]) -> Any:
    """The first of null, integer, number, boolean, object, array, string that `value` reads as; else its JSON
    value, else the text."""
    allowed = {_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types}
    if "null" in allowed and value.lower() == "null":
        return None
    if "integer" in allowed:
        try:
            return int(value)
        except ValueError:
            pass
    if "number" in allowed:
        try:
            number = float(value)
        except ValueError:
            number = math.inf
        if math.isfinite(number):
            return int(number) if number == int(number) else number
    if "boolean" in allowed and value.lower().strip() in ("true", "1", "false", "0"):
        return value.lower().strip() in ("true", "1")
    if allowed & {"object", "array"}:
        parsed = _json(value)
        if parsed is not value:
            return parsed
    if "string" in allowed:
        return value
    return _json(value)


def _json(text: str) -> Any:
    """`text` as JSON if it is (finite) JSON, else `text` itself."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if _finite(parsed) else text


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True
