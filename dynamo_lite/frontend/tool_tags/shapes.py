"""The pieces of an xgrammar structural tag, as the JSON vLLM sends the engine (`StructuralTag.model_dump()`:
every field written, defaults too), and the tools and tool_choice the tag builders read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dynamo_lite.frontend.errors import ApiError

Shape = dict[str, Any]
Choice = Literal["auto", "required", "forced"]  # xgrammar's: forced is a named tool


@dataclass(frozen=True)
class Fn:
    """A function tool as a tag builder reads it: its name, the schema its arguments are held to (True: any JSON,
    for a tool that is not strict), whether it is strict, and its parameters as given (glm's builder reads a loose
    tool's keys)."""

    name: str
    arguments: Any
    strict: bool = False
    parameters: Any = None


def const(value: str) -> Shape:
    return {"type": "const_string", "value": value}


def tag(begin: str, content: Shape, end: str | list[str]) -> Shape:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def any_text(excludes: Sequence[str] = ()) -> Shape:
    return {"type": "any_text", "excludes": list(excludes), "max_tokens": None, "max_chars": None}


def json_schema(schema: Any, style: str = "json") -> Shape:
    return {"type": "json_schema", "json_schema": schema, "style": style, "any_order": False,
            "max_whitespace_cnt": None, "excludes": []}  # fmt: skip


def regex(pattern: str) -> Shape:
    return {"type": "regex", "pattern": pattern}


def star(content: Shape) -> Shape:
    return {"type": "star", "content": content}


def plus(content: Shape) -> Shape:
    return {"type": "plus", "content": content}


def sequence(*elements: Shape) -> Shape:
    return {"type": "sequence", "elements": list(elements)}


def either(*elements: Shape) -> Shape:
    return {"type": "or", "elements": list(elements)}


def optional(content: Shape) -> Shape:
    return {"type": "optional", "content": content}


def triggered(triggers: Sequence[str], tags: Sequence[Shape], excludes: Sequence[str] = (),
              at_least_one: bool = False) -> Shape:  # fmt: skip
    return {"type": "triggered_tags", "triggers": list(triggers), "tags": list(tags), "at_least_one": at_least_one,
            "stop_after_first": False, "excludes": list(excludes)}  # fmt: skip


def separated(tags: Sequence[Shape], separator: str = "", at_least_one: bool = True,
              stop_after_first: bool = False) -> Shape:  # fmt: skip
    return {"type": "tags_with_separator", "tags": list(tags), "separator": separator, "at_least_one": at_least_one,
            "stop_after_first": stop_after_first}  # fmt: skip


_CALL_LISTS = ("triggered_tags", "token_triggered_tags", "tags_with_separator")


def single_call(shape: Any) -> Any:
    """`shape` with every list of calls stopped after its first (parallel_tool_calls false), as vLLM's
    `limit_to_single_tool_call` does; in every builder's tag those lists repeat calls, never arguments."""
    if isinstance(shape, list):
        return [single_call(s) for s in shape]
    if not isinstance(shape, dict) or "type" not in shape:
        return shape
    out = {k: (single_call(v) if k != "json_schema" else v) for k, v in shape.items()}
    if out["type"] in _CALL_LISTS:
        out["stop_after_first"] = True
    return out


def held_format(held: dict[str, Any]) -> Shape | None:
    """A response format (the engine's `structured_outputs`) as a tag's format, as vLLM's
    `structured_outputs_to_format` maps it; None: none is held."""
    if held.get("json_object"):
        return json_schema({"type": "object"})
    if held.get("json") is not None:
        schema = held["json"]
        return json_schema(json.loads(schema) if isinstance(schema, str) else schema)
    if held.get("regex") is not None:
        return regex(held["regex"])
    if held.get("choice") is not None:
        return either(*(const(c) for c in held["choice"]))
    if held.get("structural_tag") is not None:
        given = json.loads(held["structural_tag"])
        if isinstance(given, dict) and "structures" in given:  # the legacy kind: triggers and JSON structures
            return triggered(given["triggers"], [tag(s["begin"], json_schema(s["schema"]), s["end"])
                                                 for s in given["structures"]])  # fmt: skip
        if not isinstance(given, dict) or "format" not in given:
            raise ApiError(400, "A structural tag needs its `format`.", param="response_format")
        return given["format"]
    if held.get("grammar") is not None:
        return {"type": "grammar", "grammar": ebnf(held["grammar"])}
    return None


def ebnf(grammar: str) -> str:
    """A grammar in the EBNF an xgrammar format takes: as given when a line defines a rule with `::=`, else read as
    Lark and converted by xgrammar, as vLLM's `structured_outputs_to_format` does (a 400 when it is not Lark)."""
    for line in grammar.split("\n"):
        if "::=" in re.sub(r"(#|//).*$", "", line):
            return grammar
    try:
        # vLLM's converter, which comes with vLLM; importing it first takes ~0.1 s in the frontend, whose
        # tokenizers have imported torch already
        from xgrammar import Grammar
    except ImportError:
        raise ApiError(400, "A Lark grammar together with a tool the engine holds calls to needs xgrammar in the "
                            "frontend's environment, to turn it into EBNF as vLLM does; give the grammar in EBNF "
                            "(rules with `::=`).", param="structured_outputs")  # fmt: skip
    try:
        return str(Grammar.from_lark(grammar))
    except Exception:  # noqa: BLE001 - xgrammar raises what its Lark reader raises; vLLM answers any of it so
        raise ApiError(400, "Invalid grammar specification.", param="structured_outputs") from None
