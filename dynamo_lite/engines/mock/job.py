"""One request to the mock engine, whatever endpoint it came from (`Job`), and how its output is written: text
and logprobs, chunk by chunk (`Writer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynamo_lite.engines.mock import output
from dynamo_lite.engines.mock.sequence import Sequence
from dynamo_lite.engines.mock.wiring import ServerState


@dataclass(frozen=True, slots=True)
class Job:
    """A request, whatever endpoint it came from."""

    prompt: list[int]
    max_tokens: int | None
    stop_ids: frozenset[int]
    seed: int | None
    n: int
    stream: bool
    include_usage: bool
    kv_transfer_params: dict[str, Any] | None
    stops: tuple[str, ...] = ()  # stop strings, matched on the text
    include_stop: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # completions-style top-k per token
    echo: bool = False  # the prompt's text and logprobs first
    as_ids: bool = False  # return_tokens_as_token_ids
    xargs: dict[str, Any] | None = None
    structured: dict[str, Any] | None = None
    continuous_usage: bool = False
    beam_search: bool = False  # use_beam_search, with n beams
    named: tuple[int, ...] = ()  # logprob_token_ids: the alternatives listed



class Writer:
    """One request's output as text and logprobs, chunk by chunk (stop strings end it: output.py)."""

    def __init__(self, state: ServerState, job: Job, seq: Sequence, pieces: list[str]) -> None:
        self.state, self.job, self.seq = state, job, seq
        self.text = output.OutputText(state.tokenizer, pieces, state.args.vocab_size, job.stops, job.include_stop,
                                      job.min_tokens)  # fmt: skip
        self.offset = 0
        self.echoed = not job.echo

    def chunk(self, ids: list[int]) -> tuple[str, dict[str, Any] | None]:
        start = len(self.seq.output) - len(ids) if ids else len(self.seq.output)
        text = self.text.add(ids)
        entries: list[tuple[int, float | None, list[tuple[int, float]]]] = []
        if not self.echoed:
            self.echoed = True
            text = ("" if self.job.as_ids else self.state.tokenizer.decode(self.seq.prompt)) + text
            if self.job.logprobs is not None:
                entries += [(t, None, []) if i == 0 else (t, *self._lp(self.seq.output_key ^ 0x5EED, i, t))
                            for i, t in enumerate(self.seq.prompt)]  # fmt: skip
        if self.job.logprobs is None:
            return text, None
        entries += [(t, *self._lp(self.seq.output_key, start + i, t, self.job.named)) for i, t in enumerate(ids)]
        return text, self._body(entries)

    def _lp(self, key: int, pos: int, token: int,
            named: tuple[int, ...] = ()) -> tuple[float, list[tuple[int, float]]]:  # fmt: skip
        """The token's logprob and the top k (with logprob_token_ids: the tokens named, each)."""
        vocab = self.state.args.vocab_size
        lp, top = output.logprobs_at(key, pos, token, max(self.job.logprobs or 0, 1), vocab)
        if named:
            top = [(token, lp)] + [(t, output.logprob_of(key, pos, t, token, vocab)) for t in named]
        return lp, top

    def _body(self, entries: list[tuple[int, float | None, list[tuple[int, float]]]]) -> dict[str, Any]:
        name = (lambda t: f"token_id:{t}") if self.job.as_ids else (lambda t: self.state.tokenizer.decode([t]))
        out: dict[str, list[Any]] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        for token, lp, top in entries:
            text = name(token)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp)
            out["text_offset"].append(self.offset)
            self.offset += len(text)
            listed = top if self.job.named else top[: self.job.logprobs]
            out["top_logprobs"].append(None if lp is None else {name(t): v for t, v in [(token, lp), *listed]})
        return out
