"""POST /v1/chat/completions/batch, vLLM's: several conversations in one request, one choice each.

As vLLM 0.32 serves it: the body has a chat request's fields, `messages` being a list of conversations.
Each conversation is served as a chat request of its own, with the body's other fields (tokenized,
routed, prefilled and parsed as any), and the answer is one `chat.completion` whose choice i is
conversation i's, with the usage of all (no usage details, as vLLM's has none). vLLM's limits hold:
no beam search, n 1, tool_choice none (and at most 1,024 conversations, as a completions batch). The
fields its batch request does not have (`stream`, `tools` ...) are ignored, as vLLM ignores them, so
the answer is never streamed.
"""

from __future__ import annotations

import json

from aiohttp import web

from dynamo_lite.frontend import checks
from dynamo_lite.frontend.choice import ChatChoice
from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.handlers import chat_plan, counted, generate
from dynamo_lite.frontend.respond import Plan
from dynamo_lite.frontend.schemas import MAX_CHOICES, ChatCompletionRequest, parse_request
from dynamo_lite.frontend.state import STATE

FIELDS = frozenset({  # vLLM 0.32's BatchChatCompletionRequest
    "add_generation_prompt", "best_of", "cache_salt", "chat_template", "chat_template_kwargs", "continue_final_message",
    "early_stopping", "echo", "frequency_penalty", "guided_decoding_backend", "include_reasoning",
    "include_stop_str_in_output", "length_penalty", "logit_bias", "logprob_token_ids", "logprobs",
    "max_completion_tokens", "max_tokens", "media_io_kwargs", "messages", "min_p", "mm_processor_kwargs", "model", "n",
    "presence_penalty", "priority", "repetition_penalty", "request_id", "response_format", "return_token_ids",
    "return_tokens_as_token_ids", "seed", "stop", "structured_outputs", "temperature", "tool_choice", "top_k",
    "top_logprobs", "top_p", "use_beam_search", "user", "watermarking"})  # fmt: skip


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions/batch", counted("chat_batch", chat_batch))


async def chat_batch(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        body = json.loads(await request.read())
    except ValueError as e:
        raise ApiError(400, f"The body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.")
    conversations = body.get("messages")
    if not isinstance(conversations, list) or not conversations or \
            not all(isinstance(c, list) and c for c in conversations):  # fmt: skip
        raise ApiError(400, "`messages` must be a non-empty list of conversations, each a non-empty list of "
                            "messages.", param="messages")  # fmt: skip
    if len(conversations) > MAX_CHOICES:  # each is an engine request, as a completions batch's prompts are
        raise ApiError(400, f"At most {MAX_CHOICES} conversations in one request.", param="messages")
    if body.get("use_beam_search"):
        raise ApiError(400, "Batch chat completions do not support beam search. Please set `use_beam_search` to "
                            "False.", param="use_beam_search")  # fmt: skip
    if body.get("n") not in (None, 1):
        raise ApiError(400, "Batch chat completions do not support `n > 1`. Please set `n` to 1.", param="n")
    if body.get("tool_choice") not in (None, "none"):
        raise ApiError(400, "Batch chat completions take no tools: `tool_choice` can only be none.",
                       param="tool_choice")  # fmt: skip
    shared = {k: v for k, v in body.items() if k in FIELDS and k != "messages"}
    plans = []
    for conversation in conversations:
        one = json.dumps({**shared, "messages": conversation}).encode()
        chat, check = parse_request(one, ChatCompletionRequest, state.config.frontend.strict_request_fields)
        checks.common(chat, next(iter(state.models), None))
        checks.chat(chat)
        plans.append(await chat_plan(request, state, chat, check, len(one), "chatcmpl-"))
    choices = []
    for index, p in enumerate(plans):
        (choice,) = p.choices
        assert isinstance(choice, ChatChoice)
        choice.index = index
        choices.append(choice)
    first = plans[0]
    merged = Plan(first.shape, [r for p in plans for r in p.requests], list(choices), list(range(len(plans))),
                  token_text=first.token_text, header=first.header, usage_details=False)  # fmt: skip
    return await generate(request, state, merged)
