"""KV-aware routing for dynamo_lite: a pure library (no I/O).

Start with `Router` (router/router.py): `route(token_ids, candidates) -> Decision`.
Pieces: `hashing` (chained xxh64 block hashes), `index` (which worker holds which
block), `events` (vLLM KV-event ingestion with sequence checks), `approx` (index
learned from decisions), `recent` (the claims of prompts just sent, ttft mode), `load`
(per-worker load), `cost` (the formula and its knobs), `ttft` (the predicted-TTFT model,
learnt online), `policies` (the routing modes).
"""

from router.approx import ApproxIndex
from router.cost import (
    CandidateScore,
    TtftTerms,
    pick_lowest,
    sample_softmax,
    score_candidates,
    softmax_weights,
)
from router.events import EventOutcome, KvEventIngestor, SeqStatus
from router.hashing import ROOT_SEED, hash_blocks, tokens_to_bytes
from router.index import KvIndex
from router.load import LoadTracker, LoadView
from router.policies import RouterMode, RoutingContext
from router.router import Decision, Router, RouterConfig
from router.ttft import Seed, TtftModel

__all__ = [
    "ROOT_SEED",
    "ApproxIndex",
    "CandidateScore",
    "Decision",
    "Seed",
    "TtftModel",
    "TtftTerms",
    "EventOutcome",
    "KvEventIngestor",
    "KvIndex",
    "LoadTracker",
    "LoadView",
    "Router",
    "RouterConfig",
    "RouterMode",
    "RoutingContext",
    "SeqStatus",
    "hash_blocks",
    "pick_lowest",
    "sample_softmax",
    "score_candidates",
    "softmax_weights",
    "tokens_to_bytes",
]
