"""The typed parts of a chat request: messages (with tool calls and tool results), tools,
tool_choice, response_format and vLLM's structured_outputs.

Message objects ignore keys they do not declare (`refusal`, `annotations` ...), because
clients replay assistant messages from earlier responses verbatim. Content parts other
than text (images, audio, files) cannot be honoured by the text models served here and
are refused, naming the part.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Loose):
    type: Literal["text"]
    text: str


class FunctionCall(_Loose):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Loose):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Loose):
    role: str  # the chat template's roles and any other (vLLM's custom messages), rendered as the template does
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # tool turns: the call answered
    reasoning: str | None = None  # an assistant turn's reasoning (vLLM renames reasoning_content to this)
    reasoning_content: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""

    def template_dict(self) -> dict[str, Any]:
        """The message as chat templates take it; tool-call arguments as objects, as vLLM passes them."""
        out: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                                 for c in self.tool_calls]  # fmt: skip
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        reasoning = self.reasoning or self.reasoning_content
        if reasoning:
            out["reasoning"] = out["reasoning_content"] = reasoning
        return out


def _arguments(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a template renders it as it is


class FunctionDefinition(_Loose):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Loose):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Loose):
    name: Annotated[str, Field(min_length=1)]


class NamedToolChoice(_Loose):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JsonSchemaFormat(_Loose):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default=None, alias="schema")  # type: ignore[assignment]
    strict: bool | None = None
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)


class ResponseFormat(_Loose):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat = None  # type: ignore[assignment]  # not nullable: the document's if/then agrees
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={  # extra: structural_tag's own keys
        "if": {"properties": {"type": {"const": "json_schema"}}},
        "then": {"required": ["json_schema"], "properties": {"json_schema": {"required": ["schema"]}}}})

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise ValueError("When response_format type is 'json_schema', 'json_schema.schema' must be provided.")
        return self


class StructuredOutputs(_Strict):
    """vLLM's StructuredOutputsParams: exactly one constraint, and how whitespace is treated."""

    # not nullable, so that the document's oneOf (given or not) and the model agree
    json_: str | dict[str, Any] = Field(default=None, alias="json")  # type: ignore[assignment]
    regex: str = None  # type: ignore[assignment]
    choice: Annotated[list[str], Field(min_length=1)] = None  # type: ignore[assignment]
    grammar: str = None  # type: ignore[assignment]
    json_object: bool = None  # type: ignore[assignment]
    structural_tag: str = None  # type: ignore[assignment]
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, json_schema_extra={
        "oneOf": [{"required": [k]} for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")]})

    @model_validator(mode="after")
    def _one_constraint(self) -> StructuredOutputs:
        given = [k for k in ("json_", "regex", "choice", "grammar", "json_object", "structural_tag")
                 if getattr(self, k) is not None]  # fmt: skip
        if len(given) != 1:
            raise ValueError("structured_outputs needs exactly one of json, regex, choice, grammar, json_object and "
                             f"structural_tag (got {len(given)}).")
        return self

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_defaults=True)


def structured_from(response_format: ResponseFormat | None, structured: StructuredOutputs | None,
                    guided: dict[str, Any]) -> dict[str, Any] | None:  # fmt: skip
    """The engine's `structured_outputs`: vLLM's own, overridden by response_format (as vLLM does), or the
    pre-0.12 guided_* fields (vLLM 0.32 drops those unconstrained; here they still constrain)."""
    out = structured.wire() if structured is not None else None
    if out is None and guided:
        out = {k.removeprefix("guided_"): v for k, v in guided.items() if v is not None}
    if response_format is None or response_format.type == "text":
        return out
    base = {k: v for k, v in (out or {}).items() if k.startswith(("disable_", "whitespace"))}
    if response_format.type == "json_object":
        return base | {"json_object": True}
    if response_format.type == "json_schema":
        assert response_format.json_schema is not None
        return base | {"json": response_format.json_schema.schema_}
    tag = response_format.model_dump(by_alias=True, exclude={"json_schema"})  # the tag's own keys, as vLLM's
    return base | {"structural_tag": json.dumps(tag)}
