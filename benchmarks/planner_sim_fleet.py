"""A discrete-event simulation of a mock fleet, for the planner benchmark (planner_sim.py).

Each worker is the mock engine's pure core (`Scheduler` over a `BlockPool`, one
`RooflineTiming` pass at a time) in virtual time, so what it does is what a mock
worker does, only without sockets and wall-clock pacing. Around them, what the
cluster does, in the frontend's order:
- route: a request goes to the aggregated or decode worker of lowest router
  cost, with a perfect index read from each worker's cache. `router="ttft"`
  (cluster.yaml's default): the router's own ttft cost (`router.cost.score_ttft`:
  predicted TTFT + copy price, with the ITL guard), its `TtftModel` seeded
  from the engine profile and learning online from the simulated first tokens
  as the frontend teaches it (local prefills only); the load each candidate
  reports is read from its scheduler. `router="blocks"`: Dynamo's formula, the
  router's own (`router.cost.score_candidates`) on the same loads. Both take
  the router's tie rule (`router.cost.pick_lowest`, as `CostPolicy`): ties to
  the less loaded, then at random.
  `router="oracle"` (the arena simulation's reference): the least TTFT that
  playing each candidate's passes forward gives (`fleet_oracle`).
  `router_view` (aggregated fleets, the arena simulation's): the `Router`
  itself decides, on what a live one is told: the engines' KV events after
  each pass, a load report per engine every `load_interval_s`, and its own
  request life cycle (start, first token, finish);
- decide where prefill runs: the two pure steps that the frontend's
  `PrefillPlacer.place` takes (`place_before_queue`, then, if it needs the
  queue's depth, `place_on_queue`, in `dynamo_lite.frontend.disagg`),
  on the chosen worker's role, the live prefill workers, the uncached tokens
  there and the prefill queue's depth. Under the `predicted` rule (ttft routing
  only) also on the router's predicted local TTFT, the remote path's (the
  learnt prefill time and what this fleet's remote prefills measured:
  `RemoteTimings`) and the decode guard (the streams on the chosen worker).
  Remote: the job goes on a global FIFO queue that prefill workers pull from
  (at most `prefill_concurrency` each, like the agent); when done, the chosen
  worker (or, if it left meanwhile, the cheapest other: a migration) gets the
  request with `remote_kv`, waits out the KV transfer and decodes. Local: the
  chosen worker computes the prompt itself. TTFT is the first token on the
  decode side, as the client sees it;
- scaling: a new worker serves after `startup_s`; a removed worker takes no new
  work, finishes what it has (drain), then stops. Replica-seconds count from a
  worker's start request to its stop.
`Fleet.observe()` builds the planner's `Observation`; `Fleet.scale()` applies a decision. The routers'
choices are in sim_routing.py; the requests, workers and settings in sim_fleet_types.py.
"""

from __future__ import annotations

import gc
import heapq
import itertools
from collections import deque
from dataclasses import replace

from benchmarks.sim_fleet_types import FleetConfig, Request, Worker
from benchmarks.sim_routing import SimRouting
from dynamo_lite.engines.mock.scheduler import Scheduler, StepPlan
from dynamo_lite.engines.mock.sequence import RemoteKv, Sequence
from dynamo_lite.frontend.disagg import (
    Reason,
    Readings,
    RemoteTimings,
    place_before_queue,
    place_on_queue,
)
from dynamo_lite.planning.frontend_metrics import REMOTE_ELIGIBLE
from dynamo_lite.protocol import Role
from planner import DecodeLoad, Observation, Pool, Replicas, Traffic
from router.types import KvEventBatch, LoadReport, RequestId, WorkerId


class Fleet:
    def __init__(self, config: FleetConfig, prefill: int = 0, decode: int = 0, aggregated: int = 0) -> None:
        self.config = config
        self.now = 0.0
        self.workers: list[Worker] = []
        self.queue: deque[Request] = deque()  # the global prefill queue
        self.finished: list[Request] = []
        self.migrations = 0
        self._events: list[tuple[float, int, str, object]] = []
        self._n = itertools.count()
        self._ids = itertools.count()
        self._owner: dict[str, tuple[Request, bool]] = {}  # seq id -> (request, is_prefill)
        self._window: list[Request] = []  # finished since the last observe()
        self._arrivals: list[Request] = []  # arrived since the last observe()
        self._prefilled: list[float] = []  # remote prefills done since the last observe(): queued to done, s
        self.remote = RemoteTimings()  # what the remote prefills measured, as the frontend's placer learns it
        self._last_observe = 0.0
        self.decode_role = Role.DECODE if decode else Role.AGGREGATED  # the role the planner's decode pool scales
        self.routing = SimRouting(config, lambda: self.now)
        self.ttft_model = self.routing.ttft_model  # the exact view's ttft model, which the fleet teaches
        self.router = self.routing.router  # router_view: the `Router`, which the fleet tells what a live one hears
        if self.router is not None:
            if prefill or decode:
                raise ValueError("router_view simulates an aggregated fleet (no remote prefill path)")
            self._event_seq: dict[int, itertools.count[int]] = {}  # per worker, as each engine numbers its batches
            self.at(config.load_interval_s, "load_report")
        for role, n in ((Role.PREFILL, prefill), (Role.DECODE, decode), (Role.AGGREGATED, aggregated)):
            for _ in range(n):
                self._add(role, ready_at=0.0)

    # --- events ---------------------------------------------------------------------
    def at(self, t: float, kind: str, payload: object = None) -> None:
        heapq.heappush(self._events, (t, next(self._n), kind, payload))

    def run_until(self, t: float) -> None:
        """Play the events up to ``t``. CPython's cyclic collector is off meanwhile: the engines allocate
        millions of short-lived objects over a large heap, and its rescans of that heap took 40% of a
        32-worker run (75 s against 42 s without); what little cyclic garbage there is waits for the next
        collection after this call."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._play_until(t)
        finally:
            if was_enabled:
                gc.enable()

    def _play_until(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            self.now, _, kind, payload = heapq.heappop(self._events)
            if kind == "arrival":
                self._arrive(payload)  # type: ignore[arg-type]
            elif kind == "step_end":
                self._step_end(*payload)  # type: ignore[misc]
            elif kind == "wake":
                w: Worker = payload  # type: ignore[assignment]
                w.wake_at = None
                self._kick(w)
            elif kind == "ready":
                self._pull(payload)  # type: ignore[arg-type]
            elif kind == "retry_route":
                self._route(payload)  # type: ignore[arg-type]
            elif kind == "retry_decode":
                self._decode_after_prefill(payload)  # type: ignore[arg-type]
            elif kind == "load_report":
                self._report_load()
        self.now = max(self.now, t)

    def pending(self) -> bool:
        return any(e[2] != "load_report" for e in self._events) or \
            any(w.sched.has_work() for w in self.workers if w.stopped_at is None)

    def _report_load(self) -> None:
        """Every worker's `LoadReport` to the router, as its agent publishes it; again after the interval
        while anything else is to come."""
        assert self.router is not None
        for w in self.live(Role.DECODE, Role.AGGREGATED):
            self.router.update_load(LoadReport(worker_id=WorkerId(str(w.wid)), running=w.sched.num_running,
                                               waiting=w.sched.num_waiting, kv_usage=w.sched.pool.usage,
                                               ts=self.now))  # fmt: skip
        if self.pending():
            self.at(self.now + self.config.load_interval_s, "load_report")

    # --- workers ----------------------------------------------------------------------
    def _add(self, role: Role, ready_at: float) -> Worker:
        w = Worker(next(self._ids), role, Scheduler(self.config.sched), requested_at=self.now, ready_at=ready_at)
        self.workers.append(w)
        if self.router is not None and role != Role.PREFILL:
            self.router.add_worker(WorkerId(str(w.wid)), w.sched.pool.num_blocks)
        if ready_at > self.now:
            self.at(ready_at, "ready", w)
        return w

    def _pool_role(self, pool: Pool) -> Role:
        return Role.PREFILL if pool is Pool.PREFILL else self.decode_role

    def counted(self, pool: Pool) -> list[Worker]:
        """Workers the planner counts: serving or starting, not draining."""
        return [w for w in self.workers if w.role == self._pool_role(pool) and w.serving]

    def replicas(self) -> Replicas:
        return Replicas(len(self.counted(Pool.PREFILL)), len(self.counted(Pool.DECODE)))

    def scale(self, pool: Pool, n: int) -> None:
        workers = self.counted(pool)
        for _ in range(n - len(workers)):
            self._add(self._pool_role(pool), ready_at=self.now + self.config.startup_s)
        for w in reversed(workers[n:] if n < len(workers) else []):
            w.draining = True
            self._maybe_stop(w)

    def _maybe_stop(self, w: Worker) -> None:
        if w.draining and w.stopped_at is None and not w.busy and not w.sched.has_work():
            w.stopped_at = self.now  # like the agent: a request still in remote prefill for it then migrates

    def live(self, *roles: Role) -> list[Worker]:
        return [w for w in self.workers if w.role in roles and w.serving and w.ready_at <= self.now]

    # --- requests -------------------------------------------------------------------------
    def _arrive(self, req: Request) -> None:
        self._arrivals.append(req)
        self._route(req)

    def _route(self, req: Request) -> None:
        candidates = self.live(Role.DECODE, Role.AGGREGATED)
        if not candidates:  # nothing serving: wait for the first worker to come up
            self.at(self.now + 1.0, "retry_route", req)
            return
        w = req.worker = self.routing.pick(candidates, req)
        req.reason = self._place(w, req)
        req.eligible = req.reason.value in REMOTE_ELIGIBLE  # what the planner counts for its prefill pool
        if req.reason is Reason.REMOTE:
            self.ttft_model.first_token(str(req.rid), self.now, measured=False)  # as the frontend: not learnt
            if req.prefill_s is not None:
                self.remote.submitted(req.prefill_s)
            req.queued_at = self.now
            self.queue.append(req)
            # Every idle slot of every prefill worker has a pull waiting; the least busy worker's is served first.
            for p in sorted(self.live(Role.PREFILL), key=lambda p: (self._in_hand(p), p.wid)):
                self._pull(p, limit=1)
            for p in self.live(Role.PREFILL):
                self._pull(p)
        else:
            self._submit(w, self._seq(req, req.osl), req, is_prefill=False)

    def _place(self, w: Worker, req: Request) -> Reason:
        """Where ``req``'s prefill runs, routed to ``w``: as `PrefillPlacer.place`, by the same two pure steps."""
        policy = self.config.disagg
        uncached = req.isl - len(w.sched.pool.lookup_prefix(req.hashes)) * self.config.sched.block_size
        prefill = self.live(Role.PREFILL)
        readings = Readings(w.role, len(prefill), uncached, req.local_ttft_s)
        if w.role is not Role.AGGREGATED and prefill and self.config.router == "ttft":
            readings = replace(
                readings,
                prefill_s=self.ttft_model.prefill_seconds(req.isl),
                stall_s=self.ttft_model.prefill_seconds(uncached, req.isl - uncached, fixed=False),
                streaming=sum(s.first_token_at is not None for s in (*w.sched.running, *w.sched.waiting)),
                itl_target_s=self.config.itl_target_s)
        placement = place_before_queue(readings, policy, self.remote)
        if placement is None:
            in_flight = sum(self._in_hand(p) for p in prefill)
            placement = place_on_queue(readings, policy, self.remote, len(self.queue), in_flight)
        req.prefill_s, req.wait_s = placement.prefill_s, placement.wait_s
        return placement.reason

    def _seq(self, req: Request, max_tokens: int) -> Sequence:
        prompt = req.tokens if req.tokens is not None else [1] * req.isl
        return Sequence(request_id=f"{req.rid}-{next(self._n)}", prompt=prompt, max_tokens=max_tokens,
                        output_key=req.rid, arrival=self.now, prompt_hashes=req.hashes)

    def _in_hand(self, w: Worker) -> int:
        return len(w.sched.running) + len(w.sched.waiting)

    def _pull(self, w: Worker, limit: int | None = None) -> None:
        pulled = 0
        while self.queue and w.role == Role.PREFILL and w.serving and w.ready_at <= self.now and \
                (limit is None or pulled < limit) and self._in_hand(w) < self.config.prefill_concurrency:
            pulled += 1
            req = self.queue.popleft()
            seq = self._seq(req, 1)
            seq.for_remote_decode = True
            self._submit(w, seq, req, is_prefill=True)

    def _decode_after_prefill(self, req: Request) -> None:
        w = req.worker
        if w is None or not w.serving:  # the routed worker left while prefill ran: the frontend migrates
            candidates = self.live(Role.DECODE, Role.AGGREGATED)
            if not candidates:
                self.at(self.now + 1.0, "retry_decode", req)
                return
            self.migrations += 1
            w = req.worker = self.routing.migrate_to(candidates, req)
        seq = self._seq(req, req.osl)
        seq.remote_kv = RemoteKv(num_tokens=req.isl, engine_id="prefill")
        req.sent_at = self.now
        self._submit(w, seq, req, is_prefill=False)

    def _submit(self, w: Worker, seq: Sequence, req: Request, is_prefill: bool) -> None:
        w.sched.add(seq)
        self._owner[seq.request_id] = (req, is_prefill)
        self._kick(w)

    # --- passes ------------------------------------------------------------------------------
    def _kick(self, w: Worker) -> None:
        if w.busy or w.stopped_at is not None or not w.sched.has_work():
            return
        plan = w.sched.schedule(self.now)
        for seq in plan.admitted:
            req, is_prefill = self._owner[seq.request_id]
            if is_prefill or seq.remote_kv is None:  # the engine that computes the prompt
                req.cached_tokens = seq.num_local_cached
        if plan.empty:
            ready = w.sched.next_kv_ready_at()
            if ready is not None and (w.wake_at is None or ready < w.wake_at):
                w.wake_at = ready
                self.at(ready, "wake", w)
            return
        w.busy, w.plan = True, plan
        seconds = self.config.timing.step_seconds(plan.load) / self.config.speedup
        w.busy_s += seconds
        w.plan_started_at, w.plan_ends_at = self.now, self.now + seconds
        self.at(w.plan_ends_at, "step_end", (w, plan))

    def _step_end(self, w: Worker, plan: StepPlan) -> None:
        w.busy, w.plan = False, None
        for out in w.sched.finish_step(plan, self.now):
            if out.prev_token_at is None and out.seq.remote_kv is not None:  # a remotely prefilled first token
                req = self._owner[out.seq.request_id][0]
                assert req.sent_at is not None
                self.remote.first_token(self.now - req.sent_at)
            elif self.router is not None and out.prev_token_at is None:
                self.router.on_prefill_done(RequestId(str(self._owner[out.seq.request_id][0].rid)), measured=True)
            if out.finish_reason is None:
                continue
            req, is_prefill = self._owner.pop(out.seq.request_id)
            if is_prefill:
                assert req.queued_at is not None
                self._prefilled.append(self.now - req.queued_at)
                if req.prefill_s is not None:
                    self.remote.prefilled(self.now - req.queued_at, req.wait_s, req.prefill_s)
                self._decode_after_prefill(req)
            else:
                self._finish(req, out.seq)
        events = w.sched.pool.take_events()
        if self.router is not None and events and w.role != Role.PREFILL:
            seq = next(self._event_seq.setdefault(w.wid, itertools.count()))
            self.router.apply_events(WorkerId(str(w.wid)), seq, KvEventBatch(self.now, events))
        self._pull(w)
        self._kick(w)
        self._maybe_stop(w)

    def _finish(self, req: Request, seq: Sequence) -> None:
        assert seq.first_token_at is not None and seq.last_token_at is not None
        req.first_token_at = seq.first_token_at
        req.done_at = self.now
        n = len(seq.output)
        req.itl_s = (seq.last_token_at - seq.first_token_at) / (n - 1) if n > 1 else 0.0
        self.ttft_model.first_token(str(req.rid), seq.first_token_at, measured=True)  # a no-op once not measured
        self.ttft_model.finished(str(req.rid), seq.last_token_at, n)
        if self.router is not None:
            self.router.on_request_finish(RequestId(str(req.rid)), n)
        self.finished.append(req)
        self._window.append(req)

    # --- what the planner sees ---------------------------------------------------------------------
    def observe(self) -> Observation:
        """What the planner's observer reads: queue depth, decode load reports, and the frontend's metrics
        over the interval (arrivals: rate, prompt lengths, remote share; finished: OSL, latencies, cache hits;
        remote prefills done: their time from the queue to the result)."""
        dt = max(1e-9, self.now - self._last_observe)
        window, self._window, self._last_observe = self._window, [], self.now
        arrived, self._arrivals = self._arrivals, []
        prefilled, self._prefilled = self._prefilled, []
        traffic = None
        if arrived:
            n, prompt = len(arrived), sum(r.isl for r in window)
            done = {} if not window else dict(
                osl=sum(r.osl for r in window) / len(window),
                ttft_s=sum(r.first_token_at - r.arrival for r in window) / len(window),  # type: ignore[operator]
                itl_s=sum(r.itl_s for r in window) / len(window),  # type: ignore[misc]
                cached_share=sum(r.cached_tokens for r in window) / prompt if prompt else None)
            traffic = Traffic(request_rate=n / dt, isl=sum(r.isl for r in arrived) / n,
                              isl_dist=tuple((float(r.isl), 1 / n) for r in arrived),
                              remote_share=sum(r.eligible for r in arrived) / n,
                              remote_prefill_s=_mean(prefilled), **done)
        decode = tuple(DecodeLoad(str(w.wid), w.sched.pool.usage, w.sched.num_waiting, w.sched.num_running)
                       for w in self.live(self.decode_role))
        prefill = self.live(Role.PREFILL)
        in_flight = sum(self._in_hand(w) for w in prefill)
        has_prefill = any(w.role == Role.PREFILL for w in self.workers)
        return Observation(prefill_queue=len(self.queue) if has_prefill else None,
                           prefill_in_flight=in_flight if has_prefill else None, decode=decode, traffic=traffic)

    def replica_seconds(self, until: float) -> float:
        return sum((w.stopped_at if w.stopped_at is not None else until) - w.requested_at for w in self.workers)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
