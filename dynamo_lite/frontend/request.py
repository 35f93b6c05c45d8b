"""The types of one generation request on its way through the frontend, and how it can fail.

The HTTP layer (handlers.py) validates and tokenizes a body into a `GenerationRequest`;
the flow (flow.py) serves it, yielding `Piece`s of output and, last, one `Outcome`.
What goes wrong is a `RequestFailed` subclass that says what happened, not which
HTTP status it is: only errors.py maps these to statuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dynamo_lite.protocol import RequestId, WorkerId


@dataclass(frozen=True)
class Sampling:
    """What the engine is asked besides the prompt: vLLM's SamplingParams by their request names.

    None (or empty) means the engine's default and is not sent. `logprobs` is the top-k of
    completions-style logprobs the engine returns per token (the frontend shapes them for
    chat), `echo` asks the engine for the prompt's logprobs in its first chunk.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    bad_words: tuple[str, ...] = ()
    allowed_token_ids: tuple[int, ...] = ()
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    logprobs: int | None = None
    echo: bool | None = None
    structured_outputs: dict[str, Any] | None = None  # vLLM's StructuredOutputsParams, as validated (schemas.py)
    vllm_xargs: dict[str, Any] | None = None
    cache_salt: str | None = None
    session_id: str | None = None
    thinking_token_budget: int | None = None
    repetition_detection: dict[str, Any] | None = None
    logprob_token_ids: tuple[int, ...] = ()  # the alternatives listed are these (and the token sampled)
    watermarking: bool | None = None
    stream_interval: int | None = None
    use_beam_search: bool | None = None  # the engine's beam search: one request answers `n` choices
    n: int | None = None
    length_penalty: float | None = None

    def fields(self) -> dict[str, Any]:
        """The engine request's fields: those set. Logprob tokens come back as `token_id:N`."""
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if value is None or value == ():
                continue
            out[name] = list(value) if isinstance(value, tuple) else value
        if self.logprobs is not None:
            out["return_tokens_as_token_ids"] = True
        return out

    def resumed(self, generated: int, echo: bool) -> Sampling:
        """The same sampling for a request resent after `generated` tokens (a migration)."""
        min_tokens = None if self.min_tokens is None else max(0, self.min_tokens - generated)
        return replace(self, min_tokens=min_tokens, echo=echo or None)


@dataclass(frozen=True)
class GenerationRequest:
    """A validated, tokenized request: one choice of one prompt."""

    request_id: RequestId
    model: str
    prompt_ids: list[int]
    max_tokens: int
    sampling: Sampling
    arrival: float  # time.monotonic() when the request arrived
    retokenize: Callable[[str], list[int]]  # text -> ids, for engines that return no token ids
    prompt_logprobs: bool = False  # the engine must compute the prompt (local prefill) and echo its logprobs


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One position's logprob: the token there and the alternatives the engine listed, in its order (vLLM's: the
    token sampled first, then the most likely; or the tokens a request named, `logprob_token_ids`)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk of output, as the engine sent it."""

    text: str
    token_ids: list[int] | None  # None: the engine does not return ids
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None  # one per token of the piece, when asked for
    prompt_logprobs: list[TokenLogprob | None] | None = None  # in the first piece, when asked for (first is None)
    stop_reason: int | str | None = None  # the stop string or token id that ended it
    index: int = 0  # the engine's choice: a beam search answers several


@dataclass(frozen=True)
class Outcome:
    """How a served request ended: the last thing the flow yields."""

    completion_tokens: int
    cached_tokens: int | None  # prompt tokens the engine found cached (the last worker's, after a migration);
    # None: not known (vLLM's beam search counts none)
    finish_reason: str | None
    workers: tuple[WorkerId, ...]  # every worker tried, in order
    migrations: int
    stop_reason: int | str | None = None  # the stop string or token id that ended it


# --- failures ---------------------------------------------------------------------


class RequestFailed(Exception):
    """The request cannot be served; the message is meant for the client."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param  # the request field at fault, if one is


class InvalidRequest(RequestFailed):
    """The request asks for something this service does not allow (an empty prompt, too many tokens)."""


class PromptTooLong(RequestFailed):
    """The prompt, with the tokens asked for, does not fit the model's context."""


class NoWorker(RequestFailed):
    """No worker of the model is available (none registered, or every one tried has failed)."""


class MigrationsExhausted(RequestFailed):
    """The worker failed and the request was already moved as often as allowed."""


class WorkerTimedOut(RequestFailed):
    """The worker stopped answering, and there is no other to move the request to."""


class Overloaded(RequestFailed):
    """The request would miss its TTFT target by too much (admission by prediction): refused before any
    engine saw it; `retry_after_s` is when the backlog ahead should have drained."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineRefused(RequestFailed):
    """The engine refused the request itself (a 4xx): retrying elsewhere would not help."""


def max_tokens_for(prompt_tokens: int, asked: int | None, max_model_len: int, cap: int | None,
                   param: str) -> int:  # fmt: skip
    """The completion's token budget, as vLLM 0.32 computes it: what was asked, at most what the context
    leaves after the prompt (an ask past that is cut to it, not refused); nothing asked: what it leaves, at
    most the service's `cap`.

    Raises InvalidRequest (empty prompt, over the service's `cap`, more than the context) or PromptTooLong.
    """
    if not prompt_tokens:
        raise InvalidRequest("The prompt is empty.", param)
    if cap is not None and asked is not None and asked > cap:
        raise InvalidRequest(f"max_tokens is {asked}, but this service allows at most {cap}.", "max_tokens")
    if asked is not None and asked > max_model_len:
        raise InvalidRequest(f"max_tokens={asked} cannot be greater than max_model_len={max_model_len}. Please "
                             "request fewer output tokens.", "max_tokens")
    if prompt_tokens >= max_model_len:
        raise PromptTooLong(f"This model's maximum context length is {max_model_len} tokens. However, your "
                            f"{param} has {prompt_tokens} tokens, and leaves none for the completion. Please "
                            f"reduce the length of the {param}.", param)
    room = max_model_len - prompt_tokens
    return min(room, asked if asked is not None else cap if cap is not None else room)
