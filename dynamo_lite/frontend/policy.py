"""Which request fields are honoured, accepted and ignored, or refused: vLLM's field policy.

vLLM's OpenAI server accepts any key (its models allow extras) and logs the ones it
ignores; clients are written against that, so this frontend does the same:
- a field declared by the request models (schemas.py) is honoured, end to end;
- a field that vLLM or OpenAI accepts without acting on it (`IGNORED`) is accepted, and
  named in a log line;
- a field whose meaning cannot be honoured here (`REFUSED`, declared with its inert value
  only) is a 400 that names it and says why;
- any other key is dropped and counted in a log line (its name is client input, so it
  is not logged); with `frontend.strict_request_fields` it is a 400 naming it instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynamo_lite.frontend.errors import ApiError

IGNORED: dict[str, str] = {
    "metadata": "OpenAI stored-completion metadata; nothing is stored",
    "store": "nothing is stored",
    "service_tier": "one tier",
    "modalities": "text only",
    "audio": "text only",
    "prediction": "no predicted outputs (speculative decoding is the engine's setting)",
    "web_search_options": "no web search",
    "verbosity": "OpenAI-model specific",
    "safety_identifier": "no abuse monitoring",
    "prompt_cache_key": "prefix caching is automatic (KV-aware routing)",
    "prompt_cache_retention": "prefix caching is automatic",
    "function_call": "legacy functions API, ignored by vLLM too (use tools)",
    "functions": "legacy functions API, ignored by vLLM too (use tools)",
    "early_stopping": "beam search only",
    "best_of": "vLLM V1 removed it, and vLLM 0.32 accepts and ignores it too",
    "mm_processor_kwargs": "text models only",
    "media_io_kwargs": "text models only",
    "return_token_offsets": "render endpoints only (vLLM ignores it here too)",
    "mm_payload": "render endpoints only",
    "return_mm_kwargs": "render endpoints only",
    "routed_experts_prompt_start": "no expert routing data is returned",
    "guided_decoding_backend": "the engine picks its structured-output backend",
}

# Declared by the request models with only their inert value (schemas.py), so the OpenAPI document says so too;
# anything else is a 400 with this reason.
REFUSED: dict[str, str] = {
    "suffix": "suffix needs a fill-in-the-middle model, and vLLM refuses it for others",
    "chat_template": "a request's own chat template is refused, as vLLM does without --trust-request-chat-template",
    "kv_transfer_params": "the frontend decides where prefill runs and sets these itself",
    "ec_transfer_params": "there is no encoder-cache disaggregation",
    "prompt_embeds": "prompts are text or token ids",
}


@dataclass(frozen=True)
class FieldCheck:
    """What the policy did with a body's keys."""

    ignored: tuple[str, ...]  # known fields accepted and ignored (their names may be logged)
    unknown: int  # other keys dropped


def apply_policy(data: dict[str, object], declared: frozenset[str], strict: bool) -> FieldCheck:
    """Drop the keys that are not honoured from `data` (in place); ApiError(400) for what cannot be."""
    ignored: list[str] = []
    unknown = 0
    for key in [k for k in data if k not in declared]:
        if key in IGNORED:
            ignored.append(key)
        else:
            if strict:
                raise ApiError(400, f"Unrecognized request argument supplied: {key}", param=key,
                               code="unrecognized_argument")
            unknown += 1
        del data[key]
    return FieldCheck(tuple(ignored), unknown)
