"""Logprobs in the shapes vLLM's server returns them, from the engine's per-token entries.

The engine is asked for completions-style logprobs with tokens as ids
(`return_tokens_as_token_ids`), so the frontend knows every id and writes each token's
text with the model's tokenizer (`token_text`, cached per id), as vLLM does:
- completions: `tokens`, `token_logprobs`, `top_logprobs` (the token and the top k, by
  text) and `text_offset` (running over token lengths, carried across chunks);
- chat: a `content` list of `{token, logprob, bytes, top_logprobs: [k entries]}`, the sampled token
  first (as vLLM lists them);
- prompt_logprobs: per prompt position None (the first) or `{id: {logprob, rank, decoded_token}}`.

A beam search's logprobs are vLLM's of one beam step: the alternatives are those the engine listed for
the step (in its order), whichever token the beam took; a chat entry's own `bytes` are null.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynamo_lite.frontend.request import TokenLogprob

FLOOR = -9999.0  # vLLM's stand-in for -inf in JSON


@dataclass
class CompletionLogprobs:
    """One choice's completions-style logprobs; `text_offset` continues across calls."""

    k: int
    text: Callable[[int], str]  # token id -> its text (or `token_id:N`)
    beam_search: bool = False  # the engine's k + 1 alternatives as they are, as vLLM writes a beam's
    offset: int = 0

    def body(self, entries: list[TokenLogprob | None], token_ids: list[int]) -> dict[str, Any]:
        tokens: list[str] = []
        token_logprobs: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        for entry, token_id in zip(entries, token_ids, strict=False):
            token = self.text(entry.token_id if entry is not None else token_id)
            tokens.append(token)
            offsets.append(self.offset)
            self.offset += len(token)
            if entry is None:
                token_logprobs.append(None)
                tops.append(None)
                continue
            token_logprobs.append(max(entry.logprob, FLOOR))
            top = {} if self.beam_search else {token: max(entry.logprob, FLOOR)}
            for alt, lp in entry.top[: max(self.k, 0) if self.k >= 0 and not self.beam_search else None]:
                top.setdefault(self.text(alt), max(lp, FLOOR))
            tops.append(top)
        return {"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens, "top_logprobs": tops}


def chat_content(entries: list[TokenLogprob | None], k: int, text: Callable[[int], str],
                 beam_search: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """The `content` list of a chat choice's logprobs."""
    out = []
    for entry in entries:
        if entry is None:
            continue
        token = text(entry.token_id)
        # vLLM's list: the first k of the sampled token, then the most likely (so when sampling picked a less
        # likely token, it is first, and the most likely k - 1 follow); a beam's: the first k the step listed
        ranked = list(entry.top) if beam_search else \
            [(entry.token_id, entry.logprob), *(a for a in entry.top if a[0] != entry.token_id)]
        alternatives = ranked if k < 0 else ranked[:k]
        out.append({"token": token, "logprob": max(entry.logprob, FLOOR),
                    "bytes": None if beam_search else list(token.encode()),
                    "top_logprobs": [{"token": (t := text(alt)), "logprob": max(lp, FLOOR), "bytes": list(t.encode())}
                                     for alt, lp in alternatives]})  # fmt: skip
    return out


def prompt_logprobs(entries: list[TokenLogprob | None], k: int,
                    text: Callable[[int], str]) -> list[dict[str, dict[str, Any]] | None]:  # fmt: skip
    """vLLM's `prompt_logprobs`: the prompt token and the top k at each position (rank from the engine's list;
    a prompt token outside it gets rank k + 1, the least it can be)."""
    out: list[dict[str, dict[str, Any]] | None] = []
    for entry in entries:
        if entry is None:
            out.append(None)
            continue
        ranked = entry.top if k < 0 else entry.top[:k]
        position = {tid: r for r, (tid, _) in enumerate(entry.top, start=1)}
        step = {str(entry.token_id): {"logprob": max(entry.logprob, FLOOR),
                                      "rank": position.get(entry.token_id, len(entry.top) + 1),
                                      "decoded_token": text(entry.token_id)}}  # fmt: skip
        for r, (tid, lp) in enumerate(ranked, start=1):
            step.setdefault(str(tid), {"logprob": max(lp, FLOOR), "rank": r, "decoded_token": text(tid)})
        out.append(step)
    return out
