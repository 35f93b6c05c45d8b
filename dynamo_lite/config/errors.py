"""Pydantic validation errors of a YAML file, explained for people: file, line, key path, problem."""

from __future__ import annotations

import difflib

import yaml
from pydantic import BaseModel, ValidationError


def explain(error: ValidationError, source: str, root: yaml.Node | None, schema: type[BaseModel]) -> list[str]:
    """One line per problem: `source:LINE: key.path: what is wrong` (LINE from the YAML node tree)."""
    lines = []
    for err in error.errors(include_url=False):
        loc = err["loc"]
        where = f"{source}{_line_of(root, loc)}: {key_path(loc) or '(top level)'}"
        if err["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key{_suggestion(schema, loc)}")
        elif err["type"] == "value_error":
            lines.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
        elif err["type"] == "missing":
            lines.append(f"{where}: required key is missing")
        else:
            lines.append(f"{where}: {err['msg']} (got {err['input']!r})")
    return lines


def _line_of(root: yaml.Node | None, loc: tuple[int | str, ...]) -> str:
    """':LINE' of the deepest YAML node on the key path, or '' when there is none."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return "" if line is None else f":{line + 1}"


def key_path(loc: tuple[int | str, ...]) -> str:
    """('pools', 1, 'replicas') -> 'pools[1].replicas'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _suggestion(schema: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    section = _section_at(schema, loc[:-1])
    if section is None:
        return ""
    allowed = sorted(section.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f" (allowed: {', '.join(allowed)}){hint}"


def _section_at(schema: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    model = schema
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        inner = model_in(field.annotation)
        if inner is None:
            return None
        model = inner
    return model


def model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = model_in(arg)
        if found is not None:
            return found
    return None
