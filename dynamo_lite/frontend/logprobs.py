"""Logprobs in the shapes vLLM's server returns them, from the engine's per-token entries.

The engine is asked for completions-style logprobs with tokens as ids
(`return_tokens_as_token_ids`), so the frontend knows every id and writes each token's
text with the model's tokenizer (`token_text`, cached per id), as vLLM does:
- completions: `tokens`, `token_logprobs`, `top_logprobs` (the token and the top k, by
  text) and `text_offset` (running over token lengths, carried across chunks);
- chat: a `content` list of `{token, logprob, bytes, top_logprobs: [k entries]}`, the sampled token
  first (as vLLM lists them);
- prompt_logprobs: per prompt position None (the first) or `{id: {logprob, rank, decoded_token}}`.

The engine lists each token's alternatives in its order (the token sampled first, then the most likely);
they are ranked here where vLLM ranks them. Where vLLM writes the list as it is (`listed`), so is it here:
- `logprob_token_ids`: the token sampled and the tokens named, every one, in the engine's order;
- a beam search: a beam step's list, whichever token the beam took (completions: all k + 1; chat: the
  first k, and no `bytes` of the token itself, as vLLM's beam search does not detokenize).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynamo_lite.frontend.request import TokenLogprob

FLOOR = -9999.0  # vLLM's stand-in for -inf in JSON


def ranked(entry: TokenLogprob) -> list[tuple[int, float]]:
    """The alternatives, most likely first."""
    return sorted(entry.top, key=lambda a: -a[1])


@dataclass
class CompletionLogprobs:
    """One choice's completions-style logprobs; `text_offset` continues across calls."""

    k: int
    text: Callable[[int], str]  # token id -> its text (or `token_id:N`)
    listed: bool = False  # every alternative as the engine listed it (logprob_token_ids, a beam search)
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
            if self.listed:
                top = {self.text(alt): max(lp, FLOOR) for alt, lp in entry.top}
            else:
                top = {token: max(entry.logprob, FLOOR)}
                for alt, lp in ranked(entry)[: max(self.k, 0) if self.k >= 0 else None]:
                    top.setdefault(self.text(alt), max(lp, FLOOR))
            tops.append(top)
        return {"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens, "top_logprobs": tops}


def chat_content(entries: list[TokenLogprob | None], k: int, text: Callable[[int], str], listed: bool = False,
                 beam_search: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """The `content` list of a chat choice's logprobs (k -1: every alternative)."""
    out = []
    for entry in entries:
        if entry is None:
            continue
        token = text(entry.token_id)
        # vLLM's list: the first k of the sampled token, then the most likely (so when sampling picked a less
        # likely token, it is first, and the most likely k - 1 follow); or the first k the engine listed
        order = list(entry.top) if listed else \
            [(entry.token_id, entry.logprob), *(a for a in ranked(entry) if a[0] != entry.token_id)]
        alternatives = order if k < 0 else order[:k]
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
        best = ranked(entry)
        position = {tid: r for r, (tid, _) in enumerate(best, start=1)}
        step = {str(entry.token_id): {"logprob": max(entry.logprob, FLOOR),
                                      "rank": position.get(entry.token_id, len(best) + 1),
                                      "decoded_token": text(entry.token_id)}}  # fmt: skip
        for r, (tid, lp) in enumerate(best if k < 0 else best[:k], start=1):
            step.setdefault(str(tid), {"logprob": max(lp, FLOOR), "rank": r, "decoded_token": text(tid)})
        out.append(step)
    return out
