"""Routing modes as interchangeable selection policies.

Every policy sees the same `RoutingContext` (candidates in the caller's order,
their cost terms, their loads) and returns the index of the
chosen candidate. Policies own only their own state (a cursor, a generator);
they never touch the index or the load tracker.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from router.cost import CandidateScore, pick_lowest, sample_softmax
from router.load import LoadView
from router.types import WorkerId


class RouterMode(enum.StrEnum):
    TTFT = "ttft"  # lowest predicted TTFT (router.ttft) over the index built from engines' KV events
    BLOCKS = "blocks"  # Dynamo's cost formula (router.cost) over that index; "kv" is its old name
    APPROX = "approx"  # cost formula over an index learned from the router's own decisions (TTL)
    ROUND_ROBIN = "round_robin"  # candidates in turn
    RANDOM = "random"  # uniform
    LEAST_LOADED = "least_loaded"  # lowest queued prefill + decode blocks, cache ignored

    @classmethod
    def _missing_(cls, value: object) -> RouterMode | None:
        return cls.BLOCKS if value == "kv" else None


@dataclass(frozen=True, slots=True)
class RoutingContext:
    """Everything a policy may look at for one request; sequences are index-aligned."""

    candidates: Sequence[WorkerId]
    scores: Sequence[CandidateScore]
    loads: Sequence[LoadView]


class Policy(Protocol):
    def select(self, ctx: RoutingContext) -> int:
        """Index into ``ctx.candidates`` of the chosen worker (``candidates`` is never empty)."""
        ...


class CostPolicy:
    """Lowest cost (see `router.cost`), or softmax sampling when ``temperature > 0``.

    Ties go to the least loaded (queued prefill + decode blocks), then at random. In ``ttft`` mode a
    decoding stream barely moves a new prompt's predicted TTFT, so equal predictions must not put two
    streams on one worker while another idles. No tie is broken by shared state alone (such as the
    blocks each worker holds): frontends that route at the same moment, each before it has heard of
    the other's request, would all make the same choice.
    """

    def __init__(self, block_size: int, temperature: float, rng: random.Random) -> None:
        self._bs = block_size
        self._temperature = temperature
        self._rng = rng

    def select(self, ctx: RoutingContext) -> int:
        costs = [s.cost for s in ctx.scores]
        if self._temperature > 0:
            return sample_softmax(costs, self._temperature, self._rng)
        loads = ctx.loads
        return pick_lowest(costs, lambda i: loads[i].prefill_tokens / self._bs + loads[i].decode_blocks, self._rng)


class RoundRobinPolicy:
    """The next candidate after the previous choice, by position in the candidate list."""

    def __init__(self) -> None:
        self._cursor = 0

    def select(self, ctx: RoutingContext) -> int:
        i = self._cursor % len(ctx.candidates)
        self._cursor = i + 1
        return i


class RandomPolicy:
    """Uniformly at random."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def select(self, ctx: RoutingContext) -> int:
        return self._rng.randrange(len(ctx.candidates))


class LeastLoadedPolicy:
    """Lowest ``prefill_tokens / block_size + decode_blocks``; ties to fewer requests, then random."""

    def __init__(self, block_size: int, rng: random.Random) -> None:
        self._bs = block_size
        self._rng = rng

    def select(self, ctx: RoutingContext) -> int:
        loads = [ld.prefill_tokens / self._bs + ld.decode_blocks for ld in ctx.loads]
        return pick_lowest(loads, lambda i: ctx.loads[i].requests, self._rng)


def make_policy(mode: RouterMode, block_size: int, temperature: float, rng: random.Random) -> Policy:
    """The policy for a mode."""
    if mode in (RouterMode.TTFT, RouterMode.BLOCKS, RouterMode.APPROX):
        return CostPolicy(block_size, temperature, rng)
    if mode is RouterMode.ROUND_ROBIN:
        return RoundRobinPolicy()
    if mode is RouterMode.RANDOM:
        return RandomPolicy(rng)
    if mode is RouterMode.LEAST_LOADED:
        return LeastLoadedPolicy(block_size, rng)
    raise ValueError(f"unknown router mode {mode!r}")

