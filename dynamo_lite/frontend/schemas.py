"""Request bodies of the OpenAI API, as pydantic models, and how a bad body becomes a 400.

Unknown top-level keys are rejected with 400 `Unrecognized request argument
supplied: <key>`, as OpenAI's API does (and STYLE's extra="forbid"), so a typo
such as `max_token` never passes silently. Message objects ignore extra keys
(`refusal`, `annotations` ...), because clients replay assistant messages from
earlier responses verbatim. Parameters that OpenAI defines but this service does
not implement (n > 1, logprobs, tools, response_format ...) are 400s that say so.

The models are also the request schemas of the OpenAPI document (openapi.py), so
what they accept is what JSON Schema says: types are strict ("5" is no number, 0
is no `false`), yet `1.0` is the integer 1, as JSON does not tell them apart.
Numbers have the bounds engines need (seed: int64; token ids: 0 <= id < 2^31).
"""

from __future__ import annotations

import reprlib
from typing import Annotated, Literal, TypeVar

import msgspec
import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from dynamo_lite.frontend.errors import ApiError


def _of_type(kind: type) -> BeforeValidator:
    """pydantic matches literals with ==, so 0 would pass for False and true for 1; the JSON type must match too."""

    def check(value: object) -> object:
        if type(value) is not kind:
            raise PydanticCustomError("literal_error", "Input should be a {kind}", {"kind": kind.__name__})
        return value

    return BeforeValidator(check)


def _json_number(literal: str) -> int | float:
    """JSON (and JSON Schema's "integer") does not tell 1.0 from 1: a whole number is an int here too."""
    value = float(literal)
    return int(value) if value.is_integer() else value


_JSON = msgspec.json.Decoder(float_hook=_json_number)
MAX_MESSAGES = 2048  # as OpenAI's API
FalseOnly = Annotated[Literal[False], _of_type(bool)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]  # what engines take (vLLM: a torch.long)
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]  # an index into a vocabulary (the router packs them as uint32)
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class _Body(BaseModel):
    # strict: "5" is not a number and "yes" not a boolean, as in OpenAI's API
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class _Sampling(_Body):
    """What chat and completions share: the sampling parameters passed to engines."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    seed: Int64 | None = None
    n: Annotated[Literal[1], _of_type(int)] = 1
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    user: str | None = None  # accepted for compatibility; not used

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    # bounded: the chat template renders on the event loop (250k empty messages, a 4 MB body, took seconds)
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: FalseOnly | None = None

    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """POST /v1/completions: one prompt, as text or token ids."""

    prompt: (
        Annotated[str, Field(min_length=1)]
        | TokenIds
        | Annotated[list[str], Field(min_length=1, max_length=1)]
        | Annotated[list[TokenIds], Field(min_length=1, max_length=1)]
    )
    echo: FalseOnly = False
    logprobs: None = None

    def output_limit(self) -> int | None:
        return self.max_tokens


OpenAiRequest = ChatCompletionRequest | CompletionRequest
M = TypeVar("M", bound=BaseModel)


def parse_body(raw: bytes, model: type[M]) -> M:
    """Validate a request body; raises ApiError(400) naming the offending parameter."""
    try:
        data = _JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # msgspec nests on the C stack: deep `[[[[...` is a RecursionError
        raise ApiError(400, "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
                            "using your HTTP library correctly. The OpenAI API expects a JSON payload.)",
                       code="invalid_json") from None  # fmt: skip
    if not isinstance(data, dict):
        raise ApiError(400, f"The request body must be a JSON object, got {type(data).__name__}.", code="invalid_json")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise _explain(e) from None


def _explain(error: pydantic.ValidationError) -> ApiError:
    first = error.errors(include_url=False)[0]
    loc = [str(p) for p in first["loc"] if not _is_union_tag(p)]
    param = _param_path(first["loc"])
    if first["type"] == "extra_forbidden":
        return ApiError(400, f"Unrecognized request argument supplied: {param}", param=param,
                        code="unrecognized_argument")
    if first["type"] == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if first["type"] == "literal_error" and loc and loc[-1] == "n":
        return ApiError(400, "Only n=1 is supported.", param="n", code="unsupported_parameter")
    if first["type"] == "literal_error" and loc and loc[-1] in ("logprobs", "echo"):
        return ApiError(400, f"'{loc[-1]}' is not supported.", param=loc[-1], code="unsupported_parameter")
    if loc and loc[0] == "prompt" and len(loc) == 1 and len(error.errors()) > 1:
        return ApiError(400, "Invalid value for 'prompt': expected a non-empty string or list of token ids (token "
                             "ids must be >= 0 and < 2^31), or a list holding exactly one of those.", param="prompt",
                        code="invalid_value")
    got = _SHORT.repr(first.get("input"))
    return ApiError(400, f"Invalid value for '{param}': {first['msg']} (got {got}).", param=param,
                    code="invalid_value")


def _short_repr() -> reprlib.Repr:
    """repr() of a rejected value, bounded in depth and length (a body may nest 900 deep or hold 10^6 items)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, 60, 60, 8, 6
    return r


_SHORT = _short_repr()


def _is_union_tag(part: object) -> bool:
    """pydantic puts the tried union member ('str', 'list[int]', 'function-after[...]') into locations."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "list", "constrained-str"))


def _param_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if _is_union_tag(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
