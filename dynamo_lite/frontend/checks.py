"""The checks vLLM's chat and completions servers make across fields, beyond each field's own (schemas.py),
worded as vLLM words them: a 400 that names the field. Pure functions of the request body."""

from __future__ import annotations

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.schemas import ChatCompletionRequest, CompletionRequest


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def common(body: ChatCompletionRequest | CompletionRequest, first_model: str | None) -> None:
    """Both APIs' checks, and vLLM's default model (the first served) for a request that names none."""
    if body.model is None:
        body.model = first_model
    if body.stream_options is not None and body.stream_options.model_fields_set and not body.stream:
        raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
    if body.logprob_token_ids and body.use_beam_search:
        raise _bad("`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")


def chat(body: ChatCompletionRequest) -> None:
    top = body.top_logprobs
    if top is not None and (top == -1 or top > 0) and not body.logprobs:
        raise _bad("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    if body.logprob_token_ids and not body.logprobs:
        raise _bad("when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")


def completion(body: CompletionRequest) -> CompletionRequest:
    """The request as it is served: a beam search echoing with `max_tokens` 0 answers each prompt once (vLLM
    answers the echoed prompt once per prompt, and counts no output)."""
    if body.max_tokens == 0 and not body.echo:
        raise _bad("max_tokens 0 is only served with echo (the prompt alone).", "max_tokens")
    if body.prompt_logprobs is not None and body.stream:
        raise _bad("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if body.use_beam_search:  # its beam search computes no prompt logprobs (nor returns them)
        if body.stream:
            raise _bad("Streaming is not currently supported with beam search", "use_beam_search")
        if body.echo and body.logprobs is not None:
            raise _bad("`echo` with `logprobs` is not supported with beam search because beam search does not "
                       "compute prompt logprobs.", "echo")  # fmt: skip
        if body.max_tokens == 0:
            body = body.model_copy(update={"n": 1})
    if body.logprob_token_ids:
        if body.echo and body.max_tokens == 0:
            raise _bad("`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no output "
                       "tokens are generated.", "logprob_token_ids")  # fmt: skip
        if body.logprobs is None:
            raise _bad("when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids")
    return body
