"""The routing cost, and how the lowest (or a sampled) candidate is picked.

Formula, per candidate worker ``w`` for a prompt of ``P`` tokens (``B`` = block size):

    overlap_tokens(w)  = overlap_blocks(w) * B        # cached prefix there
    uncached(w)        = P - overlap_tokens(w)        # tokens w would prefill
    prefill_blocks(w)  = (active_prefill_tokens(w) + uncached(w)) / B
    decode_blocks(w)   = active_decode_blocks(w) + ceil(P / B)
    cost(w)            = overlap_weight * prefill_blocks(w) + decode_blocks(w)

``prefill_blocks`` is the prefill work queued on ``w`` once this request joins it
(what sets its TTFT); ``decode_blocks`` is the KV it holds for running requests
(what slows every decode step there, so TPOT); the request's own ``ceil(P / B)``
is the same on every candidate and only keeps costs on one scale. The active
figures are the router's in-flight requests plus load-report corrections
(`router.load`). Lowest cost wins.

Knobs:
- ``overlap_weight`` (>= 0, default 1): the price of one block of prefill against
  one block of decode load. Higher favours cache hits (TTFT), lower favours
  spreading decode load (TPOT); 0 ignores the cache and the prefill queue.
- ``temperature`` (>= 0, default 0): 0 is deterministic argmin. Above 0 the
  costs are min-max normalised to [0, 1] and a worker is drawn with
  probability proportional to ``exp(-normalised_cost / temperature)``: small
  values stay near the argmin, large values approach uniform. Equal costs are
  uniform at any temperature.
Ties at the minimum (temperature 0) go to the less loaded worker (queued prefill
plus decode blocks), then at random with the injected generator
(`router.policies.CostPolicy`). In ``ttft`` mode the learnt load coefficients
count at 0 or more.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from router.load import LoadView
from router.ttft import ITL_PENALTY_S, PAIRS, TOKENS, Features, TtftModel
from router.types import WorkerId


class CandidateScore(NamedTuple):
    """One candidate's terms of the cost formula (a NamedTuple: cheap to build per candidate)."""

    worker_id: WorkerId
    overlap_blocks: int  # leading prompt blocks the worker holds
    prefill_blocks: float  # queued prefill there once this request joins, in blocks
    decode_blocks: float  # decode KV load there once this request joins, in blocks
    cost: float  # overlap_weight * prefill_blocks + decode_blocks; ttft mode: see `score_ttft`
    ttft: TtftTerms | None = None  # ttft mode only


class TtftTerms(NamedTuple):
    """A candidate's terms in ttft mode (`router.ttft`)."""

    predicted_s: float  # predicted seconds from sending to the first token there
    x: Features  # the model's inputs, kept to learn from the measured first token
    kv_fill: float  # KV held there once this request joins, over its capacity (0: capacity unknown)
    copy_s: float  # the price of copying blocks another worker holds (0 without cache pressure)
    itl_guard: bool  # the predicted ITL there breaks the target


def score_candidates(
    candidates: Sequence[WorkerId],
    overlaps: Mapping[WorkerId, int],
    loads: Sequence[LoadView],
    prompt_tokens: int,
    block_size: int,
    overlap_weight: float,
) -> list[CandidateScore]:
    """The cost terms of each candidate, in order (see the module docstring).

    ``overlaps`` holds overlap blocks per worker (absent: 0); ``loads`` is
    aligned with ``candidates``. One loop, no per-candidate calls: this runs for
    every candidate of every request.
    """
    request_blocks = -(-prompt_tokens // block_size)
    out = []
    for w, load in zip(candidates, loads):
        overlap = overlaps.get(w, 0)
        uncached = prompt_tokens - overlap * block_size
        prefill = (load.prefill_tokens + (uncached if uncached > 0 else 0)) / block_size
        decode = load.decode_blocks + request_blocks
        out.append(CandidateScore(w, overlap, prefill, decode, overlap_weight * prefill + decode))
    return out


def score_ttft(
    candidates: Sequence[WorkerId],
    overlaps: Mapping[WorkerId, int],
    loads: Sequence[LoadView],
    capacities: Sequence[int],
    held_blocks: Sequence[int],
    prompt_tokens: int,
    block_size: int,
    model: TtftModel,
    copy_weight: float,
    itl_target_s: float,
) -> list[CandidateScore]:
    """The ttft mode's cost of each candidate: predicted TTFT + copy price (+ `ITL_PENALTY_S`).

    ``capacities`` (KV blocks, 0: unknown) and ``held_blocks`` (blocks the index says it holds) are
    aligned with ``candidates``. The copy price: the seconds that computing again the blocks of this
    prompt's prefix that another candidate holds adds to the prediction here (their tokens and their
    attention over the context, as the model has learnt them), times ``copy_weight`` and how full this
    one's cache is (a copy into free space evicts nothing).
    """
    request_blocks = -(-prompt_tokens // block_size)
    best = max((overlaps.get(w, 0) for w in candidates), default=0)
    best_uncached = max(0, prompt_tokens - best * block_size)  # what a candidate holding the best prefix computes
    best_attn = best_uncached * (prompt_tokens - best_uncached / 2) / PAIRS
    t0, t1, t2, t3, t4, t5 = model.ttft.theta  # one fleet model, inlined: this runs for every candidate
    # Load never makes a prefill faster: a fit that finds otherwise (noise, a feature seen near 0 only)
    # must not steer requests onto busy workers, so the load terms count at 0 or more. Nor do more
    # tokens to compute: the work term's slope (t1 + t2 * kv_fill) and the attention term count at 0
    # or more, or a fit under overload (t3 < 0) would price a prefix's blocks as a loss.
    t2, t3, t4, t5 = max(0.0, t2), max(0.0, t3), max(0.0, t4), max(0.0, t5)
    ratio = model.ratio
    guard_on = itl_target_s > 0 and model.itl_ready
    out = []
    for w, load, cap, held in zip(candidates, loads, capacities, held_blocks):
        overlap = overlaps.get(w, 0)
        uncached = prompt_tokens - overlap * block_size
        if uncached < 0:
            uncached = 0
        decode = load.decode_blocks + request_blocks
        kv_fill = decode / cap if cap else 0.0
        work = (load.prefill_tokens + uncached) / TOKENS
        attn = uncached * (prompt_tokens - uncached / 2) / PAIRS
        over = kv_fill - 1.0 if kv_fill > 1.0 else 0.0
        ahead = load.prefilling
        r = ratio.get(w, 1.0)
        per_work = t1 + t2 * kv_fill
        if per_work < 0.0:
            per_work = 0.0
        predicted = r * (t0 + per_work * work + t3 * attn + t4 * over + t5 * ahead)
        if predicted < 0:
            predicted = 0.0
        copy_s = 0.0
        if cap and best > overlap:  # the seconds the missing blocks add here, as the model predicts them
            extra = (uncached - best_uncached) / TOKENS
            recompute = r * (per_work * extra + t3 * (attn - best_attn))
            if recompute > 0:
                copy_s = copy_weight * (held / cap if held < cap else 1.0) * recompute
        guard = guard_on and model.predict_itl(kv_fill) > itl_target_s
        cost = predicted + copy_s + (ITL_PENALTY_S if guard else 0.0)
        out.append(CandidateScore(w, overlap, (load.prefill_tokens + uncached) / block_size, decode, cost,
                                  TtftTerms(predicted, (1.0, work, work * kv_fill, attn, over, ahead), kv_fill, copy_s,
                                            guard)))
    return out


def pick_lowest(costs: Sequence[float], tie_key: Callable[[int], float], rng: random.Random) -> int:
    """Index of the lowest cost; ties to the lowest ``tie_key(index)``, then uniformly at random.

    ``tie_key`` is called only for tied indices.
    """
    if not costs:
        raise ValueError("no candidates")
    best = min(costs)
    tied = [i for i, c in enumerate(costs) if c == best]
    if len(tied) > 1:
        keys = {i: tie_key(i) for i in tied}
        least = min(keys.values())
        tied = [i for i in tied if keys[i] == least]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


def softmax_weights(costs: Sequence[float], temperature: float) -> list[float]:
    """Sampling probabilities: ``exp(-norm_cost / temperature)``, normalised to sum to 1."""
    if temperature <= 0:
        raise ValueError("temperature must be positive for sampling")
    lo, hi = min(costs), max(costs)
    if hi == lo:
        return [1.0 / len(costs)] * len(costs)
    span = hi - lo
    raw = [math.exp(-((c - lo) / span) / temperature) for c in costs]
    total = sum(raw)  # >= 1: the minimum contributes exp(0)
    return [r / total for r in raw]


def sample_softmax(costs: Sequence[float], temperature: float, rng: random.Random) -> int:
    """Index drawn with `softmax_weights`."""
    weights = softmax_weights(costs, temperature)
    return rng.choices(range(len(costs)), weights=weights, k=1)[0]
