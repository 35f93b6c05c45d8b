"""From a validated body to the engine requests of its choices: sampling as vLLM builds it,
tool_choice as structured output, request ids, and the output builders (choice.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dynamo_lite.config import ModelSpec
from dynamo_lite.frontend import harmony, harmony_tags, tool_tags
from dynamo_lite.frontend.choice import ChatChoice, ChatOptions, CompletionChoice
from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.logprobs import CompletionLogprobs
from dynamo_lite.frontend.messages import NamedToolChoice
from dynamo_lite.frontend.request import GenerationRequest, PromptTooLong, RequestFailed, Sampling, max_tokens_for
from dynamo_lite.frontend.schemas import ChatCompletionRequest, CompletionRequest, OpenAiRequest
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from dynamo_lite.frontend.tools.formats import PARSERS
from dynamo_lite.frontend.tools.reasoning_own import REASONING_PARSERS
from dynamo_lite.frontend.tools.reasoning_count import TokenMarks, count_tags
from dynamo_lite.protocol import RequestId


def sampling_of(body: OpenAiRequest, structured: dict[str, Any] | None, logprobs_k: int | None,
                echo: bool, keep_special_tokens: bool = False, session_id: str | None = None,
                join_special_tokens: bool = False) -> Sampling:  # fmt: skip
    """vLLM's SamplingParams fields of the body, by their request names. With `use_beam_search` they go to the
    engine as they are, with the beam width `n`: vLLM's beam search takes the fields it uses and ignores the
    rest, and so does it here. `keep_special_tokens`: special tokens kept in the text for the parsers
    (`keeps_special_tokens`), and `join_special_tokens`: written without spaces between them (`joins_special_tokens`).
    `session_id`: the request's (`handlers.session_of`), which the engine puts on its KV events."""
    return Sampling(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, min_p=body.min_p, seed=body.seed,
        stop=body.stop_list(), stop_token_ids=tuple(body.stop_token_ids or ()),
        include_stop_str_in_output=body.include_stop_str_in_output or None, ignore_eos=body.ignore_eos or None,
        min_tokens=body.min_tokens or None, presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty, repetition_penalty=body.repetition_penalty,
        logit_bias=body.logit_bias, bad_words=tuple(body.bad_words or ()),
        allowed_token_ids=tuple(body.allowed_token_ids or ()),
        skip_special_tokens=None if body.skip_special_tokens and not keep_special_tokens else False,
        spaces_between_special_tokens=None if body.spaces_between_special_tokens and not join_special_tokens else False,
        logprobs=logprobs_k, echo=echo or None, structured_outputs=structured, vllm_xargs=body.vllm_xargs,
        cache_salt=body.cache_salt, session_id=session_id, thinking_token_budget=body.thinking_token_budget,
        repetition_detection=body.repetition_detection, logprob_token_ids=tuple(body.logprob_token_ids or ()),
        watermarking=body.watermarking, stream_interval=body.stream_interval,
        use_beam_search=body.use_beam_search or None,
        n=body.choices if body.use_beam_search else None,
        length_penalty=body.length_penalty if body.use_beam_search else None,
    )  # fmt: skip


def truncate(ids: list[int], body: OpenAiRequest, max_model_len: int) -> list[int]:
    """truncate_prompt_tokens as vLLM applies it: keep the last N (or first, truncation_side right); -1: the model's
    length less one token, held back for the output (vLLM's `max_truncation_tokens`)."""
    n = body.truncate_prompt_tokens
    if n is not None and n < 0:
        n = max(0, max_model_len - 1)
    if n is None or len(ids) <= n:
        return ids
    return ids[:n] if body.truncation_side == "right" else ids[len(ids) - n:]


def choice_requests(body: OpenAiRequest, spec: ModelSpec, cap: int | None, rid: str, prompts: list[list[int]],
                    sampling: Sampling, param: str, tok: ModelTokenizer, prompt_logprobs: bool, arrival: float,
                    min_one: bool = False) -> list[GenerationRequest]:  # fmt: skip
    """One request per prompt and choice (index prompt * n + i); seeds differ per choice, as vLLM's n > 1.
    ``arrival``: when the request was received (time.monotonic())."""
    n = body.choices
    if len(prompts) * n > 1024:
        raise ApiError(400, f"{len(prompts)} prompt(s) x n={n} is more than the 1024 choices one request may ask for.",
                       param="n", code="invalid_value")
    out = []
    for p, ids in enumerate(prompts):
        try:
            limit = 1 if min_one else body.output_limit()
            max_tokens = max_tokens_for(len(ids), limit, spec.max_model_len, cap, param)
        except RequestFailed as e:
            code = "context_length_exceeded" if isinstance(e, PromptTooLong) else "invalid_value"
            raise ApiError(400, e.message, param=e.param, code=code) from None
        for i in range(n):
            s = sampling
            if n > 1 and sampling.seed is not None:
                s = Sampling(**{**sampling.__dict__, "seed": (sampling.seed + i) % 2**63})
            suffix = f"-{p * n + i}" if len(prompts) * n > 1 else ""
            out.append(GenerationRequest(RequestId(rid + suffix), body.model, ids, max_tokens, s, arrival,
                                         tok.encode_text, prompt_logprobs))  # fmt: skip
    return out


# --- chat ----------------------------------------------------------------------------------
def chat_structured(body: ChatCompletionRequest, spec: ModelSpec, tok: ModelTokenizer) -> dict[str, Any] | None:
    """What the engine holds a chat answer to: tool_choice required or named, else the response format; for a
    gpt-oss model with Harmony's parsers, as one structural tag (harmony_tags.py)."""
    if tok.harmony and harmony.PARSERS & {spec.tool_call_parser, spec.reasoning_parser}:
        tool_tags.named_tool(body)  # (its check of the named tool)
        return harmony_tags.structured_outputs(body, spec.tool_call_parser == harmony.TOOL_PARSER,
                                               spec.tool_strict_level)  # fmt: skip
    return tool_held(body, spec.tool_call_parser, spec.tool_strict_level)


def tool_held(body: ChatCompletionRequest, tool_parser: str | None, level: str = "auto") -> dict[str, Any] | None:
    """What the engine holds the answer to, for a model of tool-call parser `tool_parser` and tool_strict_level
    `level`: the model's own format (tool_tags.py) for the parsers that read required / named answers so, else
    the JSON of `tool_structured`."""
    if tool_parser == "mistral":
        return tool_tags.mistral_held(body)
    if tool_parser in tool_tags.NATIVE:
        return tool_tags.structured_outputs(body, tool_parser, level)
    return tool_structured(body) or body.structured()


def tool_structured(body: ChatCompletionRequest) -> dict[str, Any] | None:
    """required / named tool_choice as the JSON schema the engine holds the output to, as vLLM builds it
    (`vllm/tool_parsers/utils.py`): required is a list of `{"name", "parameters"}` objects, the tools' `$defs`
    moved to the list's."""
    if (tool := tool_tags.named_tool(body)) is not None:
        return {"json": tool.function.parameters or {"type": "object", "properties": {}}}
    if body.effective_tool_choice() != "required":
        return None
    items, defs = [], {}
    for t in body.tools or ():
        params = dict(t.function.parameters or {})
        for name, schema in (params.pop("$defs", None) or {}).items():
            if defs.setdefault(name, schema) != schema:
                raise ApiError(400, f"Tool definition '{name}' has multiple schemas, which is not supported.",
                               param="tools", code="invalid_value")
        items.append({"properties": {"name": {"type": "string", "enum": [t.function.name]},
                                     "parameters": params or {"type": "object", "properties": {}}},
                      "required": ["name", "parameters"]})  # fmt: skip
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": items}}
    if body.parallel_tool_calls is False:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return {"json": schema}


def chat_options(body: ChatCompletionRequest, spec: ModelSpec, prompt: str = "", tok: ModelTokenizer | None = None,
                 structured: Mapping[str, Any] | None = None) -> ChatOptions:  # fmt: skip
    """What the request asks of each choice's output; `prompt`: the rendered prompt (a reasoning parser may read
    whether it leaves the reasoning open); `tok`: the model's tokenizer (its chat template and special tokens);
    `structured`: what the engine holds the output to (`chat_structured`)."""
    choice = body.effective_tool_choice()
    if body.tool_choice is not None and body.tool_choice != "none" and not body.tools:
        raise ApiError(400, "When using `tool_choice`, `tools` must be set.", param="tool_choice",
                       code="invalid_value")
    if choice == "auto" and spec.tool_call_parser is None and not (tok is not None and tok.harmony):
        raise ApiError(400, f'"auto" tool choice needs a tool-call parser, and model `{spec.name}` has none '
                            "(models[].tool_call_parser in cluster.yaml, as vLLM's --tool-call-parser).",
                       param="tool_choice", code="invalid_value")
    if body.structured() is not None and isinstance(choice, NamedToolChoice):
        raise ApiError(400, "You can only either use constraints for structured outputs or tools, not both.",
                       param="tool_choice", code="invalid_value")
    if tok is not None and tok.harmony:
        return _harmony_options(body, spec, choice)
    last = body.messages[-1]
    role = "assistant" if body.add_generation_prompt else last.role  # vLLM's answer role
    mode = "named" if isinstance(choice, NamedToolChoice) else choice
    native = spec.tool_call_parser in tool_tags.NATIVE
    kwargs = reasoning_kwargs(body, spec, tok.chat_template if tok else "")
    return ChatOptions(
        tool_mode=mode, tool_name=choice.function.name if isinstance(choice, NamedToolChoice) else None,
        tool_parser=spec.tool_call_parser, reasoning_parser=spec.reasoning_parser,
        native_calls=native,
        tool_properties={t.function.name: (t.function.parameters or {}).get("properties") or {}
                         for t in body.tools or ()},
        tool_defs={t.function.name: (t.function.parameters or {}).get("$defs") or {} for t in body.tools or ()},
        template_kwargs=kwargs,
        reasoning_open=spec.reasoning_parser is not None and REASONING_PARSERS[spec.reasoning_parser].opened_by(prompt),
        unthinking=held_at_once(spec, structured),
        drop_special=dropped_specials(spec, kwargs, mode == "auto" or native and mode != "none",
                                     tok.special_tokens if tok else ()),
        include_reasoning=body.include_reasoning, parallel_tool_calls=body.parallel_tool_calls is not False,
        top_logprobs=-1 if body.logprob_token_ids and body.logprobs else body.logprobs_k(),
        echo=last.text() if body.echo and last.role == role else "", return_token_ids=bool(body.return_token_ids),
        role=role, logprobs_listed=body.logprobs_listed,
        beam_search=body.use_beam_search,
        reasoning_marks=reasoning_marks(tok, spec.reasoning_parser) if tok and spec.reasoning_parser else TokenMarks(),
    )  # fmt: skip


def held_at_once(spec: ModelSpec, structured: Mapping[str, Any] | None) -> bool:
    """Whether the engine holds the output to a grammar from its first token, so that it cannot think: the engine's
    gate (its --reasoning-parser, built without the request's kwargs, which the completions endpoint does not
    carry) of deepseek_v3 and poolside_v1 never thinks, while the request's kwargs may. vLLM's own server passes
    the kwargs to its engine, which lets the model think first; here the output is read as it is then written,
    not thinking. So is one held to a structural tag: most hold from the first token (tool_choice required or
    named), and the triggered tags of held calls under auto exclude `</think>` from their free text."""
    kind = REASONING_PARSERS.get(spec.reasoning_parser or "")
    return bool(structured) and kind is not None and kind.GATE_UNTHINKING


def _harmony_options(body: ChatCompletionRequest, spec: ModelSpec, choice: Any) -> ChatOptions:
    """A gpt-oss request: its output read as Harmony messages when the model has either of Harmony's parsers (as
    vLLM reads it then; without, the text as it comes): the calls of any tool_choice but none among them."""
    return ChatOptions(
        tool_mode="named" if isinstance(choice, NamedToolChoice) else choice, tool_parser=spec.tool_call_parser,
        reasoning_parser=spec.reasoning_parser,
        harmony=spec.tool_call_parser is not None or spec.reasoning_parser is not None,
        include_reasoning=body.include_reasoning, parallel_tool_calls=body.parallel_tool_calls is not False,
        top_logprobs=-1 if body.logprob_token_ids and body.logprobs else body.logprobs_k(),
        return_token_ids=bool(body.return_token_ids), logprobs_listed=body.logprobs_listed,
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def reasoning_marks(tok: ModelTokenizer, parser: str) -> TokenMarks:
    """The model's ids the reasoning count reads (`ReasoningTokens`): its special tokens, its reasoning family's
    tags that are one token each, and the tags the count walks, as tokens. Once per model and parser."""
    kind = REASONING_PARSERS[parser]

    def ids(tags: Iterable[str]) -> frozenset[int]:
        return frozenset(i for tag in tags if (i := tok.vocab_id(tag)) is not None)

    return TokenMarks(tok.special_ids, ids(kind.tags()), ids((kind.START,)), ids((kind.END, *kind.ENDS_AT)),
                      tuple(tuple(tok.encode_text(tag)) for tag in count_tags(kind)))  # fmt: skip


def keeps_special_tokens(body: ChatCompletionRequest, spec: ModelSpec) -> bool:
    """Whether the engine must keep special tokens in its text, as vLLM 0.32 adjusts a chat request: its parsers
    adjust it when the model has a reasoning parser or the tool_choice is not none, and those that read markers
    which are special tokens in some vocabularies ask for them (vLLM's parser engine whenever it runs, and kimi_k3's
    parsers; hermes, kimi_k2 and others for a request with tools)."""
    choice = body.effective_tool_choice()
    if (spec.reasoning_parser is None and choice == "none") or harmony.PARSERS & {spec.reasoning_parser,
                                                                                  spec.tool_call_parser}:
        return False  # (Harmony reads the output's tokens, not its text)
    reasoning = REASONING_PARSERS.get(spec.reasoning_parser or "")
    if reasoning is not None and (reasoning.ENGINE or reasoning.KEEPS_SPECIAL):
        return True
    keeps = PARSERS[spec.tool_call_parser].keeps_special_tokens if spec.tool_call_parser else "never"
    return keeps == "always" or (keeps == "with tools" and bool(body.tools) and choice != "none")


def joins_special_tokens(body: ChatCompletionRequest, spec: ModelSpec) -> bool:
    """Whether the engine must also write special tokens without spaces between them: Kimi K3's markers are
    several special tokens each, and its vLLM parsers ask for this wherever they keep special tokens."""
    return "kimi_k3" in (spec.tool_call_parser, spec.reasoning_parser) and keeps_special_tokens(body, spec)


def dropped_specials(spec: ModelSpec, kwargs: Mapping[str, Any], tools_parsed: bool,
                     special_tokens: tuple[str, ...]) -> re.Pattern[str] | None:  # fmt: skip
    """The special tokens whose text leaves the output before parsing, as vLLM's parser engine drops them when the
    output goes through it (the model's reasoning parser, when the request thinks or the family parses anyway; or
    its tool-call parser, with tool_choice auto): all but the tags of the model's parsers. None: nothing to drop."""
    reasoning = REASONING_PARSERS.get(spec.reasoning_parser or "")
    tools = PARSERS.get(spec.tool_call_parser or "")
    reasons = reasoning is not None and reasoning.ENGINE and (reasoning.thinks(kwargs) or reasoning.OFF_STILL_PARSES)
    if not (reasons or (tools_parsed and tools is not None and tools.engine)):
        return None
    keep = (reasoning.tags() if reasoning else frozenset()) | (tools.tags() if tools else frozenset())
    return _pattern(tuple(t for t in special_tokens if t and t not in keep))


@functools.lru_cache(maxsize=64)
def _pattern(texts: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))) if texts else None


def reasoning_kwargs(body: ChatCompletionRequest, spec: ModelSpec, chat_template: str) -> dict[str, Any]:
    """The kwargs the reasoning parser reads: the template's, without the thinking switches where the model's
    template has none and always thinks (GLM-5.3 under glm45 / glm47, as vLLM detects it)."""
    kwargs = template_kwargs(body, spec)
    if spec.reasoning_parser in REASONING_PARSERS and REASONING_PARSERS[spec.reasoning_parser].always_thinks(
            chat_template):  # fmt: skip
        return {k: v for k, v in kwargs.items() if k not in ("thinking", "enable_thinking")}
    return kwargs


def template_kwargs(body: ChatCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
    """The chat template's kwargs, as vLLM builds them: the request's, `enable_thinking` from `reasoning_effort`
    where the request does not set it, and the model's defaults under both. The reasoning parser reads them too."""
    kwargs = dict(body.chat_template_kwargs or {})
    if body.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", body.reasoning_effort)
        kwargs.setdefault("enable_thinking", body.reasoning_effort != "none")
    return {**spec.default_chat_template_kwargs, **kwargs}


def chat_choices(body: ChatCompletionRequest, opts: ChatOptions, tok: ModelTokenizer) -> list[ChatChoice]:
    return [ChatChoice(i, opts, token_texts(body, tok)) for i in range(body.choices)]


def token_texts(body: OpenAiRequest, tok: ModelTokenizer) -> Callable[[int], str]:
    """How logprob tokens are written: their text, or `token_id:N` (return_tokens_as_token_ids)."""
    return (lambda t: f"token_id:{t}") if body.return_tokens_as_token_ids else tok.token_text


# --- completions -----------------------------------------------------------------------------
def completion_choices(body: CompletionRequest, prompts: list[list[int]], texts: list[str],
                       tok: ModelTokenizer) -> list[CompletionChoice]:  # fmt: skip
    text = token_texts(body, tok)
    out = []
    for p, ids in enumerate(prompts):
        for i in range(body.choices):
            lp = CompletionLogprobs(body.logprobs, text, body.logprobs_listed) if body.logprobs is not None else None
            echo = ("" if body.return_token_ids else texts[p]) if body.echo else None  # vLLM: ids, not text
            out.append(CompletionChoice(p * body.choices + i, echo, ids, lp, bool(body.return_token_ids)))
    return out
