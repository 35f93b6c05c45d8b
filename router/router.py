"""The `Router` facade: one object per model that the frontend asks where to send each request.

Life cycle, all calls from one thread (the frontend's event loop):

- discovery: `add_worker` when a worker registers, `remove_worker` (or
  `sync_workers` with the live set) when its lease goes;
- events: `apply_events` for each relayed KV event batch;
  `update_load` for each `LoadReport`; `load_snapshot` for a worker's KV
  snapshot (a router that starts after its blocks were stored);
  `update_peer_load` for each other router's `PeerLoad`, and `own_loads` for
  what to publish to them (``on_load_change``, if given, is called whenever that changes);
- per request: `route` decides (it changes no load or index state, only the
  round-robin cursor and the generator), then the caller commits with
  `on_request_start(request_id, decision)` once it really sends the request,
  `on_prefilled_elsewhere` when its prefill ran on another worker,
  `on_prefill_done` at the first token, `on_request_finish` at the end (any
  reason). In ``approx`` mode `on_request_start` is also what teaches the index; in
  ``ttft`` mode `on_prefill_done(measured=True)` and `on_request_finish(output_tokens)`
  teach the TTFT and ITL models (`router.ttft`).

Decisions report the chosen worker's cached prefix in tokens and the prompt's
uncached length there: the inputs of the disaggregation step. In ``ttft``, ``blocks``
and the three cache-blind modes they come from the event-fed index (zero when
no events flow), in ``approx`` mode from the learned index.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from router.approx import ApproxIndex, Clock
from router.cost import CandidateScore, TtftTerms, score_candidates, score_ttft
from router.events import EventOutcome, KvEventIngestor
from router.hashing import hash_blocks
from router.index import KvIndex
from router.load import LoadTracker, LoadView
from router.policies import RouterMode, RoutingContext, make_policy
from router.recent import RecentSends
from router.ttft import Seed, TtftModel
from router.types import (
    BlockHash,
    KvEventBatch,
    LoadReport,
    RequestId,
    WorkerId,
    WorkerLoad,
)


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """Knobs of one router; see `router.cost` for how the cost uses them."""

    block_size: int = 16  # tokens per KV block; must equal the engines' block size
    mode: RouterMode = RouterMode.BLOCKS  # see `RouterMode` (cluster.yaml's default is ttft)
    overlap_weight: float = 1.0  # blocks/approx: price of a prefill block against a decode block (>= 0)
    copy_weight: float = 16.0  # ttft: price of re-computing a prefix another worker holds, at a full cache (>= 0)
    itl_target_s: float = 0.0  # ttft: candidates predicted to break this ITL are passed over (0: no guard)
    ttft_seed: Seed = Seed()  # ttft: where the learnt TTFT model starts (an engine profile's line)
    worker_speeds: bool = False  # ttft: learn each worker's speed against the fleet's (False: one speed for all)
    inflight_ttl_s: float = 1.0  # ttft: a prompt sent counts as cached there this long, before its events (0: off)
    temperature: float = 0.0  # 0: argmin; > 0: softmax sampling over normalised costs
    approx_ttl_s: float = 120.0  # approx mode: how long a routed prompt is assumed cached
    approx_max_blocks_per_worker: int | None = None  # approx mode: optional cap per worker (LRU)
    load_report_ttl_s: float = 10.0  # how long a LoadReport's correction counts
    peer_load_ttl_s: float = 1.5  # how long a peer router's PeerLoad counts without a newer one
    root_seed: int = 0  # parent hash of every sequence's first block (the router's, not the engine's)

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if min(self.overlap_weight, self.temperature, self.copy_weight, self.itl_target_s, self.inflight_ttl_s) < 0:
            raise ValueError("overlap_weight, copy_weight, itl_target_s, inflight_ttl_s and temperature must be >= 0")
        object.__setattr__(self, "mode", RouterMode(self.mode))


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one request goes, and what the disaggregation step needs to know."""

    worker_id: WorkerId
    mode: RouterMode
    prompt_tokens: int
    overlap_blocks: int  # leading full blocks of the prompt cached on the chosen worker
    overlap_tokens: int  # overlap_blocks * block_size
    uncached_tokens: int  # prompt_tokens - overlap_tokens: what the chosen worker must prefill (0 when
    # every token sits in cached full blocks; the engine then still recomputes the last one)
    promised_tokens: int  # of overlap_tokens, those only a prompt just sent there claims (`inflight_ttl_s`),
    # in blocks no KV event has confirmed: its prefill may not have computed them yet
    cost: float  # the chosen worker's cost (computed in every mode, used by ttft/blocks/approx)
    block_hashes: tuple[BlockHash, ...]  # the prompt's full-block hashes (approx learning, replays)
    scores: tuple[CandidateScore, ...]  # every candidate's cost terms, in candidate order
    ttft: TtftTerms | None = None  # ttft mode: the chosen worker's prediction

    @property
    def confirmed_uncached_tokens(self) -> int:
        """The prompt's tokens not in blocks the chosen worker's KV events confirm (`uncached_tokens` plus
        `promised_tokens`): what it must prefill if the prompts just sent there have not finished theirs."""
        return min(self.prompt_tokens, self.uncached_tokens + self.promised_tokens)

    @property
    def predicted_ttft_s(self) -> float | None:
        """Predicted seconds from sending to the first token on the chosen worker (ttft mode; else None)."""
        return self.ttft.predicted_s if self.ttft is not None else None

    def explain(self) -> str:
        """Every candidate's terms on one line, the chosen one first (for a debug log: why it went there)."""
        def terms(s: CandidateScore) -> str:
            t = f"{s.worker_id}: {s.overlap_blocks} blocks cached, {s.prefill_blocks:.0f} to prefill there"
            if s.ttft is None:
                return f"{t}, cost {s.cost:.1f}"
            guard = ", ITL guard" if s.ttft.itl_guard else ""
            return f"{t}, predicted TTFT {s.ttft.predicted_s * 1000:.1f} ms + copy {s.ttft.copy_s * 1000:.1f} ms{guard}"
        return "; ".join(terms(s) for s in sorted(self.scores, key=lambda s: s.worker_id != self.worker_id))


class Router:
    """KV-aware router over a set of workers; pure (no I/O), not thread-safe.

    ``clock`` (monotonic seconds) times approx-mode TTLs and load-report
    freshness; ``rng`` draws ties and samples. ``index`` is the event-fed
    `KvIndex`, public for inspection.
    """

    def __init__(self, config: RouterConfig, *, clock: Clock = time.monotonic, rng: random.Random | None = None,
                 on_load_change: Callable[[], None] | None = None):
        self.config = config
        self._changed = on_load_change or (lambda: None)  # called when its own in-flight load changes (to share it)
        self._rng = rng if rng is not None else random.Random()
        self.index = KvIndex()
        self._ingestor = KvEventIngestor(self.index, config.block_size, BlockHash(config.root_seed))
        # approx mode: the whole index
        self._approx = ApproxIndex(clock, config.approx_ttl_s, config.approx_max_blocks_per_worker)
        # ttft mode: prompts sent whose blocks no event has reported yet (`inflight_ttl_s`)
        self._sends = (RecentSends(clock, config.inflight_ttl_s)
                       if config.mode is RouterMode.TTFT and config.inflight_ttl_s > 0 else None)
        self._load = LoadTracker(config.block_size, clock, config.load_report_ttl_s,
                                 peer_ttl_s=config.peer_load_ttl_s)
        self._policy = make_policy(config.mode, config.block_size, config.temperature, self._rng)
        self._workers: set[WorkerId] = set()
        self._clock = clock
        # ttft mode's learnt rates, public for inspection
        self.ttft_model = TtftModel(config.ttft_seed, worker_speeds=config.worker_speeds)

    # --- discovery ---------------------------------------------------------
    def add_worker(self, worker_id: WorkerId, kv_capacity_blocks: int = 0) -> None:
        """Register a worker (idempotent; updates its capacity)."""
        self._workers.add(worker_id)
        self.index.add_worker(worker_id)
        self._approx.add_worker(worker_id)
        self._load.set_capacity(worker_id, kv_capacity_blocks)

    def remove_worker(self, worker_id: WorkerId) -> None:
        """Drop a worker wholesale: its blocks, load and event sequence. Unknown ids: no-op."""
        self._workers.discard(worker_id)
        self.index.remove_worker(worker_id)
        self._approx.remove_worker(worker_id)
        if self._sends is not None:
            self._sends.remove_worker(worker_id)
        self._load.remove_worker(worker_id)
        self._ingestor.forget(worker_id)
        self.ttft_model.forget_worker(worker_id)

    def sync_workers(self, live: Iterable[WorkerId]) -> list[WorkerId]:
        """Drop every registered worker not in ``live``; returns those dropped (adds none)."""
        gone = sorted(self._workers - set(live))
        for worker_id in gone:
            self.remove_worker(worker_id)
        return gone

    @property
    def workers(self) -> frozenset[WorkerId]:
        return frozenset(self._workers)

    # --- events and load ---------------------------------------------------
    def apply_events(self, worker_id: WorkerId, seq: int, batch: KvEventBatch) -> EventOutcome:
        """Apply one KV event batch (rules in `router.events`); check ``needs_resync`` on the result."""
        return self._ingestor.apply(worker_id, seq, batch)

    def resync_worker(self, worker_id: WorkerId) -> None:
        """Clear a worker's blocks and accept its next batch of any sequence (before feeding a replay)."""
        self._ingestor.resync(worker_id)

    def load_snapshot(self, worker_id: WorkerId, seq: int, batches: Iterable[KvEventBatch]) -> EventOutcome:
        """Replace a worker's blocks with a snapshot consistent with its batch ``seq`` (its agent's
        view); live batches after ``seq`` then apply on top, older ones are duplicates."""
        return self._ingestor.load_snapshot(worker_id, seq, batches)

    def update_load(self, report: LoadReport) -> None:
        self._load.update(report)

    def update_peer_load(self, peer_id: str, ts: float, loads: Mapping[WorkerId, WorkerLoad]) -> None:
        """Another router's own in-flight load on this router's workers (its latest; see `router.load`)."""
        self._load.update_peer(peer_id, ts, loads)

    def own_loads(self) -> dict[WorkerId, WorkerLoad]:
        """This router's own in-flight load per busy worker, to share with its peers."""
        return self._load.own_loads()

    # --- routing -----------------------------------------------------------
    def route(self, token_ids: Sequence[int], candidates: Sequence[WorkerId]) -> Decision:
        """Choose a worker among ``candidates`` for a prompt. Raises ValueError if none.

        Candidates not registered are allowed (no blocks, only their tracked load).
        """
        hashes = hash_blocks(token_ids, self.config.block_size, BlockHash(self.config.root_seed))
        return self.route_hashes(hashes, len(token_ids), candidates)

    def route_hashes(self, hashes: Sequence[BlockHash], prompt_tokens: int, candidates: Sequence[WorkerId]) -> Decision:
        """`route` for a prompt already hashed with `hash_blocks` (same block size and root seed)."""
        if not candidates:
            raise ValueError("no candidate workers")
        approx = self.config.mode is RouterMode.APPROX
        overlaps = self._approx.find_matches(hashes) if approx else self.index.find_matches(hashes)
        confirmed = overlaps
        claimed = self._sends.find_matches(hashes) if self._sends is not None else None
        if claimed:  # a prefix sent somewhere moments ago counts there before its KV events come
            confirmed = dict(overlaps)
            for w, n in claimed.items():
                if n > overlaps.get(w, 0):
                    overlaps[w] = n
        sizes_of = self._approx.num_blocks if approx else self.index.num_blocks
        bs, weight = self.config.block_size, self.config.overlap_weight
        loads = self._load.views(candidates)
        if self.config.mode is RouterMode.TTFT:
            cfg = self.config
            scores = score_ttft(candidates, overlaps, loads, [self._load.capacity(w) for w in candidates],
                                [sizes_of(w) for w in candidates], prompt_tokens, bs, self.ttft_model,
                                cfg.copy_weight, cfg.itl_target_s)
        else:
            scores = score_candidates(candidates, overlaps, loads, prompt_tokens, bs, weight)
        ctx = RoutingContext(candidates, scores, loads)
        chosen = scores[self._policy.select(ctx)]
        overlap_tokens = chosen.overlap_blocks * bs
        return Decision(
            worker_id=chosen.worker_id,
            mode=self.config.mode,
            prompt_tokens=prompt_tokens,
            overlap_blocks=chosen.overlap_blocks,
            overlap_tokens=overlap_tokens,
            uncached_tokens=max(0, prompt_tokens - overlap_tokens),
            promised_tokens=(chosen.overlap_blocks - confirmed.get(chosen.worker_id, 0)) * bs,
            cost=chosen.cost,
            block_hashes=tuple(hashes),
            scores=tuple(scores),
            ttft=chosen.ttft,
        )

    # --- request life cycle -----------------------------------------------
    def on_request_start(self, request_id: RequestId, decision: Decision) -> None:
        """Commit a decision: the request was sent. Raises ValueError if ``request_id`` is in flight."""
        self._load.start(request_id, decision.worker_id, decision.prompt_tokens, decision.uncached_tokens)
        self._changed()
        if self.config.mode is RouterMode.APPROX:
            self._approx.learn(decision.worker_id, decision.block_hashes)
        elif self._sends is not None:
            self._sends.sent(decision.worker_id, decision.block_hashes)
        if decision.ttft is not None:
            self.ttft_model.sent(request_id, decision.worker_id, decision.ttft.x, decision.ttft.kv_fill, self._clock())

    def on_prefilled_elsewhere(self, request_id: RequestId) -> None:
        """Its prefill ran on another worker (remote prefill): it queues no prefill on its worker, which
        still counts it as waiting until the KV arrives; nothing to learn from its first token."""
        self._load.prefilled_elsewhere(request_id)
        self.ttft_model.first_token(request_id, self._clock(), False)
        self._changed()

    def on_prefill_done(self, request_id: RequestId, measured: bool = True) -> None:
        """First token received (after `on_prefilled_elsewhere` too). Idempotent; unknown ids ignored.

        ``measured``: the time since `on_request_start` is a real first token of a prefill on that
        worker (not a whole answer, not a prefill run elsewhere); ttft mode learns from it.
        """
        self._load.prefill_done(request_id)
        self.ttft_model.first_token(request_id, self._clock(), measured)
        self._changed()

    def on_request_finish(self, request_id: RequestId, output_tokens: int = 0) -> None:
        """The request ended for any reason (``output_tokens`` streamed by it). Unknown ids ignored."""
        self._load.finish(request_id)
        self.ttft_model.finished(request_id, self._clock(), output_tokens)
        self._changed()

    def prefill_seconds(self, uncached_tokens: int, context_tokens: int = 0, fixed: bool = True) -> float | None:
        """ttft mode: the learnt prefill time of ``uncached_tokens`` after ``context_tokens`` cached ones on
        an idle worker of average speed (None in other modes); ``fixed``: see `TtftModel.prefill_seconds`."""
        if self.config.mode is not RouterMode.TTFT:
            return None
        return self.ttft_model.prefill_seconds(uncached_tokens, context_tokens, fixed)

    def load_of(self, worker_id: WorkerId) -> LoadView:
        """The load the cost function uses for a worker."""
        return self._load.view(worker_id)

    def streaming(self, worker_id: WorkerId) -> int:
        """Requests in flight on a worker that have had their first token (what a prefill there holds up)."""
        return self._load.streaming(worker_id)
