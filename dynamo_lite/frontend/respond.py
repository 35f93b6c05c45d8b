"""Serving a planned response: its choices' flows merged (fanout.py), written as one JSON answer
or as server-sent events, with usage once at the end (and per chunk with continuous usage stats).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from dynamo_lite.frontend.choice import ChatChoice, CompletionChoice
from dynamo_lite.frontend.errors import api_error, json_response
from dynamo_lite.frontend.fanout import merged
from dynamo_lite.frontend.logprobs import prompt_logprobs
from dynamo_lite.frontend.request import GenerationRequest, Outcome, Piece, RequestFailed, TokenLogprob
from dynamo_lite.frontend.sse import DONE, Shape, sse, usage_body

log = logging.getLogger(__name__)
STATUS_LABEL = web.ResponseKey("status_label", str)  # overrides the HTTP status in the request counter


class StreamEvents(Protocol):
    """A stream in another API's events, built from the one chat choice's stream chunks."""

    def opening(self, usage: dict[str, Any]) -> bytes: ...
    def chunk(self, choice: dict[str, Any]) -> bytes: ...
    def closing(self, outcome: Outcome, usage: dict[str, Any]) -> bytes: ...
    def failed(self, error: dict[str, Any]) -> bytes: ...


class Reshape(Protocol):
    """Another API served by one chat choice (the Responses API, Anthropic's Messages): its whole answer
    from the chat choice and usage, or its stream's events."""

    def whole(self, choice: dict[str, Any], outcome: Outcome, usage: dict[str, Any]) -> dict[str, Any]: ...
    def events(self) -> StreamEvents: ...


@dataclass
class Plan:
    """One response: its envelope, and per choice the request served and the output builder."""

    shape: Shape
    requests: list[GenerationRequest]
    choices: list[ChatChoice | CompletionChoice]
    prompt_of: list[int]  # choice -> prompt index (batch prompts); usage counts each prompt once
    stream: bool = False
    continuous_usage: bool = False
    drop_output: bool = False  # completions max_tokens 0 with echo: the prompt only
    dropped_counted: bool = True  # ... and the token dropped is in usage, as vLLM counts it (not its beam search)
    prompt_logprobs_k: int | None = None  # return vLLM's prompt_logprobs with this top-k
    chat_prompt_ids: bool = False  # chat with return_token_ids: the prompt's token ids beside the choices
    prompt_text: str | None = None  # chat with return_prompt_text: the rendered prompt beside them
    token_text: Callable[[int], str] = str
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    header: dict[str, str] = field(default_factory=dict)
    reshape: Reshape | None = None  # another API's answer, from its one chat choice
    reasoning_details: bool = False  # usage counts the reasoning tokens (the model has a reasoning parser)
    usage_details: bool = True  # usage says the cached prompt tokens, when known (vLLM's batch chat: never)

    def usage(self) -> dict[str, Any]:
        prompts = {p: len(self.requests[i].prompt_ids) for i, p in enumerate(self.prompt_of)}
        cached: dict[int, int | None] = {}
        for i, outcome in sorted(self.outcomes.items()):
            cached.setdefault(self.prompt_of[i], outcome.cached_tokens)
        known = None if None in cached.values() else sum(n for n in cached.values() if n is not None)
        done = 0 if self.drop_output and not self.dropped_counted else \
            sum(o.completion_tokens for o in self.outcomes.values())
        return usage_body(sum(prompts.values()), done, known if self.usage_details else None, self.reasoning_tokens())

    def reasoning_tokens(self, index: int | None = None) -> int | None:
        """The reasoning tokens of one choice, or of all (None: not counted)."""
        if not self.reasoning_details:
            return None
        choices = self.choices if index is None else [self.choices[index]]
        return sum(c.reasoning_tokens for c in choices if isinstance(c, ChatChoice))


async def serve(request: web.Request, plan: Plan, flows: list[AsyncIterator[Piece | Outcome]]) -> web.StreamResponse:
    """The response; `plan.outcomes` holds every choice's outcome when it completed."""
    events = merged(flows)
    try:
        if plan.stream:
            return await _stream(request, plan, events)
        return await _whole(plan, events)
    finally:
        await events.aclose()


async def _whole(plan: Plan, events: AsyncIterator[tuple[int, Piece | Outcome]]) -> web.Response:
    first_prompt: dict[int, list[TokenLogprob | None]] = {}
    try:
        async for index, event in events:
            choice = plan.choices[index]
            if isinstance(event, Outcome):
                plan.outcomes[index] = event
                continue
            if event.prompt_logprobs is not None:
                first_prompt.setdefault(index, event.prompt_logprobs)
            if isinstance(choice, ChatChoice):
                choice.delta(event)
            else:
                choice.delta(event, plan.drop_output)
    except RequestFailed as e:
        raise api_error(e) from None
    choices = []
    for index, choice in enumerate(plan.choices):
        outcome = plan.outcomes[index]
        if isinstance(choice, ChatChoice):
            choices.append(choice.message(outcome))
        else:
            body = choice.whole(outcome)
            if plan.prompt_logprobs_k is not None:
                body["prompt_logprobs"] = prompt_logprobs(first_prompt.get(index, []), plan.prompt_logprobs_k,
                                                          plan.token_text)
            choices.append(body)
    if plan.reshape is not None:
        return json_response(plan.reshape.whole(choices[0], plan.outcomes[0], plan.usage()), headers=plan.header)
    extra = {}
    if plan.shape.chat and plan.prompt_logprobs_k is not None:
        extra["prompt_logprobs"] = prompt_logprobs(first_prompt.get(0, []), plan.prompt_logprobs_k, plan.token_text)
    if plan.chat_prompt_ids:
        extra["prompt_token_ids"] = plan.requests[0].prompt_ids
    if plan.prompt_text is not None:
        extra["prompt_text"] = plan.prompt_text
    return json_response(plan.shape.full(choices, plan.usage(), extra), headers=plan.header)


async def _stream(request: web.Request, plan: Plan,
                  events: AsyncIterator[tuple[int, Piece | Outcome]]) -> web.StreamResponse:  # fmt: skip
    # The first event comes before the headers, so that what fails before any output (no
    # worker, timeout, a refused prompt) is still an HTTP status rather than an SSE error.
    try:
        first = await anext(events)
    except RequestFailed as e:
        raise api_error(e) from None
    except StopAsyncIteration:
        first = None
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           **plan.header})  # fmt: skip
    await response.prepare(request)
    shape = plan.shape
    if plan.reshape is not None:
        return await _stream_reshaped(response, plan, first, events)
    generated = [0] * len(plan.choices)
    closed = [False] * len(plan.choices)  # a chat choice whose finish went with its last piece
    try:
        if shape.chat:
            await response.write(_chat_opening(plan))
        event = first
        while event is not None:
            index, item = event
            choice = plan.choices[index]
            if isinstance(item, Outcome):
                plan.outcomes[index] = item
                body = choice.last(item) if isinstance(choice, ChatChoice) and not closed[index] else None
            elif isinstance(choice, ChatChoice):
                generated[index] += len(item.token_ids or ())
                if item.finish_reason is not None and not choice.holds_back:
                    body, closed[index] = choice.closing_delta(item), True
                else:
                    body = choice.delta(item)
                    if body is None and item.token_ids and not choice.holds_back:
                        body = choice.empty_delta(item)
            else:
                generated[index] += len(item.token_ids or ())
                body = choice.delta(item, plan.drop_output)
            if body is not None:
                usage = None
                if plan.continuous_usage:
                    prompt = len(plan.requests[index].prompt_ids)
                    usage = usage_body(prompt, generated[index], reasoning_tokens=plan.reasoning_tokens(index))
                await response.write(shape.frame(body, usage))
            event = await anext(events, None)
        if shape.include_usage:
            await response.write(shape.usage_chunk(plan.usage()))
        await response.write(DONE)
    except ConnectionResetError:
        log.info("request %s: client went away; engine requests closed", shape.id)
        response[STATUS_LABEL] = "client_closed"
        plan.outcomes.clear()
        return response
    except RequestFailed as e:
        log.warning("request %s failed mid-stream: %s", shape.id, e.message)
        response[STATUS_LABEL] = "stream_error"
        plan.outcomes.clear()
        await response.write(sse(api_error(e).body()) + DONE)
    await response.write_eof()
    return response


def _chat_opening(plan: Plan) -> bytes:
    """A chat stream's first chunks, as vLLM sends them: each choice's role, then each one's echo (if any)."""
    chats = [c for c in plan.choices if isinstance(c, ChatChoice)]
    zero = 0 if plan.reasoning_details else None
    usage = [usage_body(len(r.prompt_ids), 0, reasoning_tokens=zero) if plan.continuous_usage else None
             for r in plan.requests]  # fmt: skip
    roles = [plan.shape.role_chunk(i, usage[i], r.prompt_ids if plan.chat_prompt_ids else None, chats[i].opts.role,
                                   plan.prompt_text) for i, r in enumerate(plan.requests)]  # fmt: skip
    echoes = [plan.shape.frame(echo, usage[i]) for i, c in enumerate(chats) if (echo := c.echo_delta()) is not None]
    return b"".join(roles + echoes)


async def _stream_reshaped(response: web.StreamResponse, plan: Plan, first: tuple[int, Piece | Outcome] | None,
                           events: AsyncIterator[tuple[int, Piece | Outcome]]) -> web.StreamResponse:  # fmt: skip
    """Another API's stream (`plan.reshape`): its one chat choice's stream chunks as that API's events."""
    assert plan.reshape is not None
    out = plan.reshape.events()
    choice = plan.choices[0]
    assert isinstance(choice, ChatChoice)
    try:
        await response.write(out.opening(usage_body(len(plan.requests[0].prompt_ids), 0)))
        event = first
        while event is not None:
            item = event[1]
            if isinstance(item, Outcome):
                plan.outcomes[0] = item
                await response.write(out.chunk(choice.last(item)) + out.closing(item, plan.usage()))
            else:
                body = choice.delta(item)
                if body is not None:
                    await response.write(out.chunk(body))
            event = await anext(events, None)
    except ConnectionResetError:
        log.info("request %s: client went away; engine requests closed", plan.shape.id)
        response[STATUS_LABEL] = "client_closed"
        plan.outcomes.clear()
        return response
    except RequestFailed as e:
        log.warning("request %s failed mid-stream: %s", plan.shape.id, e.message)
        response[STATUS_LABEL] = "stream_error"
        plan.outcomes.clear()
        await response.write(out.failed(api_error(e).body()))
    await response.write_eof()
    return response
