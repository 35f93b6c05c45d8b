"""Where the fleet simulation (planner_sim_fleet.py) sends each request: the simulated routers.

- ``ttft`` and ``blocks``: the router's own costs (`router.cost.score_ttft`, `score_candidates`) on an exact
  view: a perfect index read from each worker's cache, and each candidate's load read from its scheduler.
  ``ttft`` learns its `TtftModel` from the simulated first tokens (the fleet teaches it).
- ``router_view``: the `Router` itself decides, on what the fleet tells it (its KV events, load reports and
  the request life cycle); the fleet feeds it.
- ``oracle``: the least TTFT that playing each candidate's passes forward gives (`fleet_oracle`).
- ``cache_aware``: vllm-router's and sglang-router's policy of that name, with their defaults
  (`CacheAware`), for a peer in the simulation's deterministic comparisons.
The first three take the router's tie rule (`router.cost.pick_lowest`, as `CostPolicy`): the lowest cost, ties to the
less loaded, then at random.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

from benchmarks.fleet_oracle import marginal_ttft, predicted_ttft
from benchmarks.lru_sim import LruCache
from benchmarks.sim_fleet_types import FleetConfig, Request, Worker
from router import Router, RouterConfig, RouterMode
from router.cost import pick_lowest, score_candidates, score_ttft
from router.load import LoadView
from router.ttft import TtftModel
from router.types import RequestId, WorkerId


class SimRouting:
    """One simulated router; ``clock`` reads the simulation's time."""

    def __init__(self, config: FleetConfig, clock: Callable[[], float]) -> None:
        self.config = config
        self._clock = clock
        self.ttft_model = TtftModel(config.ttft_seed)  # the exact view's ttft (the Router has its own)
        self._rng = random.Random(0)  # ties, in both modes
        self.router: Router | None = None
        self.cache_aware = CacheAware(config.sched.block_size)
        if config.router_view:
            self.router = Router(RouterConfig(block_size=config.sched.block_size, mode=RouterMode(config.router),
                                              copy_weight=config.copy_weight, itl_target_s=config.itl_target_s,
                                              ttft_seed=config.ttft_seed),
                                 clock=clock, rng=random.Random(0))  # fmt: skip

    def pick(self, candidates: list[Worker], req: Request) -> Worker:
        """The worker ``req`` goes to, among ``candidates`` (serving, not empty)."""
        if self.router is not None:
            return self._router_pick(candidates, req)
        if self.config.router == "ttft":
            return self._ttft_pick(candidates, req)
        if self.config.router == "oracle":
            return self._oracle_pick(candidates, req)
        if self.config.router == "cache_aware":
            return self.cache_aware.pick(candidates, req)
        return self._blocks_pick(candidates, req)

    def migrate_to(self, candidates: list[Worker], req: Request) -> Worker:
        """Where a request whose decode worker left during its remote prefill goes: the fewest blocks to
        compute there plus those in use and queued (the frontend's migration, by Dynamo's formula)."""
        bs = self.config.sched.block_size

        def cost(w: Worker) -> int:
            hits = len(w.sched.pool.lookup_prefix(req.hashes))
            waiting = sum(len(s.prompt) for s in w.sched.waiting) // bs
            return (len(req.hashes) - hits) + w.sched.pool.num_used_blocks + waiting

        return min(candidates, key=lambda c: (cost(c), c.wid))

    def _router_pick(self, candidates: list[Worker], req: Request) -> Worker:
        """The `Router`'s own decision on what it has been told (router_view), committed as the frontend does."""
        assert self.router is not None and req.tokens is not None, "router_view needs each request's tokens"
        decision = self.router.route(req.tokens, [WorkerId(str(c.wid)) for c in candidates])
        self.router.on_request_start(RequestId(str(req.rid)), decision)
        return next(c for c in candidates if str(c.wid) == decision.worker_id)

    def _pick(self, costs: list[float], loads: list[LoadView]) -> int:
        bs = self.config.sched.block_size
        return pick_lowest(costs, lambda j: loads[j].prefill_tokens / bs + loads[j].decode_blocks, self._rng)

    def _blocks_pick(self, candidates: list[Worker], req: Request) -> Worker:
        """Dynamo's formula (`router.cost.score_candidates`, overlap weight 1)."""
        bs = self.config.sched.block_size
        ids = [str(c.wid) for c in candidates]
        overlaps = {str(c.wid): len(c.sched.pool.lookup_prefix(req.hashes)) for c in candidates}
        loads = [load(c) for c in candidates]
        scores = score_candidates(ids, overlaps, loads, req.isl, bs, 1.0)
        return candidates[self._pick([s.cost for s in scores], loads)]

    def _ttft_pick(self, candidates: list[Worker], req: Request) -> Worker:
        """The lowest predicted TTFT + copy price (+ the ITL guard's penalty)."""
        bs = self.config.sched.block_size
        ids = [str(c.wid) for c in candidates]
        overlaps = {str(c.wid): len(c.sched.pool.lookup_prefix(req.hashes)) for c in candidates}
        loads = [load(c) for c in candidates]
        scores = score_ttft(ids, overlaps, loads, [c.sched.pool.num_blocks for c in candidates],
                            [c.sched.pool.num_cached_blocks for c in candidates], req.isl, bs, self.ttft_model,
                            self.config.copy_weight, self.config.itl_target_s)
        i = self._pick([s.cost for s in scores], loads)
        terms = scores[i].ttft
        assert terms is not None
        self.ttft_model.sent(str(req.rid), ids[i], terms.x, terms.kv_fill, self._clock())
        req.local_ttft_s = terms.predicted_s
        return candidates[i]

    def _oracle_pick(self, candidates: list[Worker], req: Request) -> Worker:
        """The least TTFT from playing each candidate's passes forward (`fleet_oracle`), plus a copy price
        as the ttft mode's: ``oracle_copy_weight`` x the cache's fill x what the blocks another candidate
        holds would save here."""
        bs = self.config.sched.block_size
        cached = {c.wid: len(c.sched.pool.lookup_prefix(req.hashes[: (req.isl - 1) // bs])) * bs for c in candidates}
        best = max(cached.values())
        weight = self.config.oracle_copy_weight

        def cost(c: Worker) -> float:
            ttft = self.oracle_ttft(c, req)
            if weight and cached[c.wid] < best:
                fill = min(1.0, c.sched.pool.num_cached_blocks / c.sched.pool.num_blocks)
                ttft += weight * fill * (ttft - self.oracle_ttft(c, req, best))
            return ttft

        return min(candidates, key=lambda c: (cost(c), c.wid))

    def oracle_ttft(self, w: Worker, req: Request, cached_tokens: int | None = None) -> float:
        """`fleet_oracle.predicted_ttft` of ``req`` on ``w`` now (with ``cached_tokens`` cached there, if
        given); without `oracle_knows_phase`, the pass in progress is taken as half done."""
        now = self._clock()
        ends = w.plan_ends_at
        if w.plan is not None and not self.config.oracle_knows_phase:
            ends = now + (w.plan_ends_at - w.plan_started_at) / 2
        play = marginal_ttft if self.config.oracle_marginal else predicted_ttft
        return play(w.sched, w.plan, ends, now, req.hashes, req.isl, cached_tokens, self.config.timing,
                    self.config.speedup)


def load(w: Worker) -> LoadView:
    """What a worker's load report and the router's in-flight count would say: prompt tokens not computed yet
    (a waiting prompt's cached prefix included: it is found only on admission), KV blocks in use, requests
    in hand, and those still prefilling."""
    todo = [len(q.prompt) - q.num_computed for q in (*w.sched.waiting, *w.sched.running)
            if q.remote_kv is None and q.num_computed < len(q.prompt)]
    return LoadView(float(sum(todo)), float(w.sched.pool.num_used_blocks), len(w.sched.running) + len(w.sched.waiting),
                    float(len(todo)))


class CacheAware:
    """vllm-router's (0.1.17) and sglang-router's (0.3.2) ``cache_aware`` policy, with their defaults, on the
    simulation's blocks instead of the prompt's text.

    Each worker's tree is what the router itself sent there (an approximate tree: it hears nothing of
    evictions, and at the defaults' eviction budget of 32M characters per worker it never trims within a
    replay). Load is each worker's requests in hand. When the fleet is imbalanced (the most loaded has more
    than ``balance_abs`` requests over the least and more than ``balance_rel`` times its count), the least
    loaded worker takes the request; otherwise the worker whose tree matches the longest prefix, if that
    covers more than ``cache_threshold`` of the prompt, else the least loaded (ties to the first)."""

    def __init__(self, block_size: int, cache_threshold: float = 0.3, balance_abs: int = 64,
                 balance_rel: float = 1.5) -> None:
        self.block_size = block_size
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self._trees: defaultdict[int, LruCache] = defaultdict(lambda: LruCache(None))  # worker id -> the block
        # names sent there, never trimmed

    def pick(self, candidates: list[Worker], req: Request) -> Worker:
        loads = [len(c.sched.running) + len(c.sched.waiting) for c in candidates]
        least = candidates[loads.index(min(loads))]
        chosen = least
        if not (max(loads) - min(loads) > self.balance_abs and max(loads) > self.balance_rel * min(loads)):
            matched = [self._trees[c.wid].prefix(req.hashes) for c in candidates]
            best = max(range(len(candidates)), key=lambda i: (matched[i], -i))
            if matched[best] * self.block_size / req.isl > self.cache_threshold:  # their ratio: of the text
                chosen = candidates[best]
        self._trees[chosen.wid].admit(req.hashes)
        return chosen
