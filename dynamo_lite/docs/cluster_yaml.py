"""docs/reference/cluster-yaml.md, generated from the schema's field docstrings."""

from __future__ import annotations

import enum
import types
from typing import Annotated, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from dynamo_lite.config import ClusterSpec
from dynamo_lite.config.errors import model_in

PAGE_HEAD = """# cluster.yaml reference

Every key of the cluster spec, with its type, default and meaning. Unknown keys are
errors: a misspelt key fails with the file, the line, the key path and a suggestion.
Examples: [deploy/examples/](../../deploy/examples/). Generated from the schema
(`dynamo_lite/config/`) by `python -m dynamo_lite.docs`; a test keeps it current.

"""


def page() -> str:
    return PAGE_HEAD + reference_markdown() + "\n"


def reference_markdown() -> str:
    """The table: one row per key, nested keys as dotted paths (`pools[].replicas`)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    _reference_rows(ClusterSpec, "", rows)
    return "\n".join(rows)


def _reference_rows(model: type[BaseModel], prefix: str, rows: list[str]) -> None:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        inner = model_in(field.annotation)
        meaning = (field.description or "").replace("|", "/").replace("\n", " ")
        if inner is not None and get_origin(field.annotation) is list:
            rows.append(f"| `{path}` | list of mappings | `[]` | {meaning} |")
            _reference_rows(inner, f"{path}[].", rows)
        elif inner is not None:
            if field.default is None:
                rows.append(f"| `{path}` | mapping or null | `null` | {meaning} |")
            _reference_rows(inner, f"{path}.", rows)
        else:
            default = "required" if field.is_required() else f"`{_yaml_value(field.default)}`"
            rows.append(f"| `{path}` | {_type_name(field.annotation)} | {default} | {meaning} |")


def _yaml_value(value: object) -> str:
    return yaml.safe_dump(value.value if isinstance(value, enum.Enum) else value, default_flow_style=True).strip().removesuffix("...").strip()


def _type_name(annotation: object) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is Literal:
        return " / ".join(str(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " / ".join(str(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))

