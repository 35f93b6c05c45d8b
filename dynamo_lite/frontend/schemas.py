"""Request bodies of the OpenAI API and vLLM's extensions, as pydantic models, and how a bad body becomes a 400.

The models declare every field that is honoured; policy.py decides the rest (accepted and
ignored, refused, or with `strict` a 400 `Unrecognized request argument supplied: <key>`).
Message objects ignore extra keys (messages.py).

The models are also the request schemas of the OpenAPI document (openapi.py), so
what they accept is what JSON Schema says: types are strict ("5" is no number, 0
is no `false`), yet `1.0` is the integer 1, as JSON does not tell them apart.
Numbers have the bounds engines need (seed: int64; token ids: 0 <= id < 2^31).
"""

from __future__ import annotations

import functools
import reprlib
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.messages import (
    ChatMessage,
    ResponseFormat,
    StructuredOutputs,
    Tool,
    ToolChoice,
    structured_from,
)
from dynamo_lite.frontend.policy import REFUSED, FieldCheck, apply_policy


def _json_number(literal: str) -> int | float:
    """JSON (and JSON Schema's "integer") does not tell 1.0 from 1: a whole number is an int here too."""
    value = float(literal)
    return int(value) if value.is_integer() else value


_JSON = msgspec.json.Decoder(float_hook=_json_number)
MAX_MESSAGES = 2048  # as OpenAI's API
MAX_CHOICES = 1024  # prompts x n of one request: each is its own engine request
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]  # what engines take (vLLM: a torch.long)
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]  # an index into a vocabulary (the router packs them as uint32)
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
TopK = Annotated[int, Field(ge=-1, le=1024)]  # logprobs: -1 is the whole vocabulary in vLLM (the engine caps it)


class _Body(BaseModel):
    # strict: "5" is not a number and "yes" not a boolean, as in OpenAI's API
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class StreamOptions(_Body):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _Sampling(_Body):
    """What chat and completions share: vLLM's sampling parameters and its extensions."""

    model: str | None = None  # None: the first model served (vLLM's default)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | list[str] | None = None
    seed: Int64 | None = None
    n: Annotated[int, Field(ge=1, le=128)] | None = 1
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    user: str | None = None  # accepted, as in vLLM; not used
    # --- vLLM's sampling extensions (SamplingParams) ---
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0, le=100)] | None = None
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=2**31)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    allowed_token_ids: list[TokenId] | None = None
    bad_words: list[str] | None = None
    prompt_logprobs: TopK | None = None
    logprob_token_ids: list[TokenId] | None = None  # logprobs of these tokens (and the one sampled) at each step
    watermarking: bool | None = None  # on an engine with a watermark config: false opts out
    stream_interval: Annotated[int, Field(ge=1)] | None = None  # tokens per streamed chunk (the engine's at least)
    # --- vLLM's other extensions ---
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: str | dict[str, Any] | None = None  # before vLLM 0.12; constrain as structured_outputs would
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None
    add_special_tokens: bool | None = None
    request_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    cache_salt: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    session_id: str | None = None  # a conversation's stable id: the engines' KV events carry it (as vLLM)
    priority: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] = 0  # orders the admission queue (lower first)
    vllm_xargs: dict[str, str | int | float | list[str | int | float]] | None = None
    thinking_token_budget: Annotated[int, Field(ge=-1)] | None = None
    repetition_detection: dict[str, Any] | None = None
    use_beam_search: bool = False  # the engine's own beam search, n beams (flow.py, `RequestFlow.flows`)
    length_penalty: float = 1.0  # beam search only, as in vLLM
    # --- refused unless inert (policy.REFUSED says why) ---
    chat_template: None = None
    kv_transfer_params: None = None
    ec_transfer_params: None = None
    prompt_embeds: None = None
    suffix: None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def logprobs_listed(self) -> bool:
        """Whether vLLM writes each token's alternatives as the engine listed them (logprobs.py)."""
        return bool(self.logprob_token_ids) or self.use_beam_search

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.continuous_usage_stats)

    @property
    def choices(self) -> int:
        return self.n or 1

    def stop_list(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def structured(self) -> dict[str, Any] | None:
        guided = {k: getattr(self, k) for k in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
                  if getattr(self, k) is not None}  # fmt: skip
        if guided and self.guided_whitespace_pattern is not None:
            guided["guided_whitespace_pattern"] = self.guided_whitespace_pattern
        if len([k for k in guided if k != "guided_whitespace_pattern"]) > 1:
            raise ApiError(400, "You can only use one kind of guided decoding ('guided_json', 'guided_regex', "
                                "'guided_choice' or 'guided_grammar').", param="guided_json", code="invalid_value")
        out = structured_from(self.response_format, self.structured_outputs, guided)
        if out is not None and isinstance(out.get("json"), str):
            try:
                msgspec.json.decode(out["json"])
            except msgspec.DecodeError as e:
                param = "structured_outputs.json" if self.structured_outputs is not None else "guided_json"
                raise ApiError(400, f"The JSON schema is not JSON: {e}.", param=param, code="invalid_value") from None
        return out


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    # bounded: the chat template renders on the event loop (250k empty messages, a 4 MB body, took seconds)
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = False
    top_logprobs: TopK | None = 0
    tools: Annotated[list[Tool], Field(min_length=1)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = True
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    include_reasoning: bool = True
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_prompt_text: bool | None = None  # the prompt as the chat template rendered it, beside the answer

    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def logprobs_k(self) -> int | None:
        """The engine's top-k per output token; None: no logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def effective_tool_choice(self) -> ToolChoice:
        """vLLM's default: auto with tools, none without."""
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"


class CompletionRequest(_Sampling):
    """POST /v1/completions: one prompt or a batch, as text or token ids."""

    prompt: (
        Annotated[str, Field(min_length=1)]
        | TokenIds
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=MAX_CHOICES)]
        | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_CHOICES)]
    )
    max_tokens: Annotated[int, Field(ge=0)] | None = 16  # vLLM's default; 0 with echo: the prompt only
    echo: bool | None = False
    logprobs: TopK | None = None

    def output_limit(self) -> int | None:
        return 16 if self.max_tokens is None else self.max_tokens  # vLLM: null is its default, 16

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def prompts(self) -> list[str] | list[list[int]]:
        """The batch: every prompt as text or as token ids."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if self.prompt and isinstance(self.prompt[0], int):
            return [self.prompt]  # type: ignore[list-item]
        return self.prompt  # type: ignore[return-value]


OpenAiRequest = ChatCompletionRequest | CompletionRequest
M = TypeVar("M", bound=BaseModel)


def parse_body(raw: bytes, model: type[M], strict: bool = False) -> M:
    """Validate a request body; raises ApiError(400) naming the offending parameter."""
    return parse_request(raw, model, strict)[0]


def parse_request(raw: bytes, model: type[M], strict: bool = False) -> tuple[M, FieldCheck]:
    """The body under the field policy (policy.py), and what the policy dropped."""
    data = json_object(raw)
    check = apply_policy(data, _declared(model), strict)
    return validated(data, model), check


def rename_param(param: str | None, names: dict[str, str], messages: str) -> str | None:
    """A chat request's field named in an error, as another API served by it (Responses, Anthropic's Messages)
    names it: `names` maps top-level fields; an error anywhere in the chat messages is about `messages` there,
    whose items do not map one to one."""
    if param is None:
        return None
    head = param.split("[", 1)[0].split(".", 1)[0]
    if head == "messages":
        return messages
    return names.get(head, head) + param[len(head):]


def json_object(raw: bytes) -> dict[str, Any]:
    """A body decoded, or ApiError(400) if it is not a JSON object."""
    try:
        data = _JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # msgspec nests on the C stack: deep `[[[[...` is a RecursionError
        raise ApiError(400, "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
                            "using your HTTP library correctly. The OpenAI API expects a JSON payload.)",
                       code="invalid_json") from None  # fmt: skip
    if not isinstance(data, dict):
        raise ApiError(400, f"The request body must be a JSON object, got {type(data).__name__}.", code="invalid_json")
    return data


def validated(data: dict[str, Any], model: type[M]) -> M:
    """`data` as `model`, or ApiError(400) naming the first offending parameter."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise _explain(e) from None


@functools.cache
def _declared(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for f, info in model.model_fields.items() for name in (f, info.alias) if name)


def _explain(error: pydantic.ValidationError) -> ApiError:
    first = error.errors(include_url=False)[0]
    loc = [str(p) for p in first["loc"] if not _is_union_tag(p)]
    param = _param_path(first["loc"])
    if first["type"] == "extra_forbidden":
        return ApiError(400, f"Unrecognized request argument supplied: {param}", param=param,
                        code="unrecognized_argument")
    if first["type"] == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if loc and loc[0] in REFUSED:
        return ApiError(400, f"'{loc[0]}' is not supported: {REFUSED[loc[0]]}.", param=loc[0],
                        code="unsupported_parameter")
    if loc and loc[0] == "prompt" and len(loc) == 1 and len(error.errors()) > 1:
        return ApiError(400, "Invalid value for 'prompt': expected a non-empty string or list of token ids (token "
                             f"ids must be >= 0 and < 2^31), or a list of up to {MAX_CHOICES} of those.", param="prompt",
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
