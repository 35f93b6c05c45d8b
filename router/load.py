"""Per-worker load: the router's own in-flight requests, corrected by worker reports.

Own tracking (exact for this router, instant):
- ``prefill_tokens``: uncached prompt tokens of requests sent to the worker whose
  prefill has not finished (`start` adds, `prefill_done` or `finish` removes);
- ``decode_blocks``: KV blocks of the prompts of requests in flight there
  (``ceil(prompt_tokens / block_size)`` each, from `start` to `finish`).

Peers (other frontends' routers, `update_peer`): each peer's own figures per
worker, as its latest `PeerLoad` message gives them (it replaces the previous
one), added to the own figures; a peer not heard from for ``peer_ttl_s`` stops
counting (a dead frontend's load vanishes). ``own_loads`` is what this router
publishes to them: its own figures only.

Correction from `LoadReport`s (what this router and its peers cannot see:
frontends that do not share, estimation error). On each report the part not
accounted for is kept as an offset, added to the own and peer figures until the
next report:
- decode: ``max(0, kv_usage * kv_capacity_blocks - own and peer decode_blocks)``,
  only when the worker's capacity is known;
- prefill: ``max(0, waiting - own and peer requests awaiting their first
  token) *`` the mean uncached tokens of this router's requests
  (``default_prefill_tokens`` before it has seen any). A request prefilled
  elsewhere (`prefilled_elsewhere`) loads no prefill here, but the engine counts
  it as waiting until its KV has arrived, so it is one of those awaiting.
Reports older than ``report_ttl_s`` (by the injected clock, counted from
arrival) stop counting; a report with an older ``ts`` than the last one is
ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from router.types import LoadReport, RequestId, WorkerId, WorkerLoad

Clock = Callable[[], float]


class LoadView(NamedTuple):
    """A worker's load as the cost function sees it (a NamedTuple: built 32x per decision)."""

    prefill_tokens: float  # uncached prompt tokens waiting for or in prefill
    decode_blocks: float  # KV blocks held by in-flight requests
    requests: int  # in-flight requests there, this router's and its peers'
    prefilling: float = 0.0  # of those, the ones whose prefill has not finished (plus reported waiting ones)


@dataclass(slots=True)
class _Own:
    prefill_tokens: int = 0
    decode_blocks: int = 0
    requests: int = 0
    prefilling: int = 0  # requests whose prefill has not finished
    awaiting: int = 0  # requests without a first token yet: prefilling, or prefilled elsewhere and waiting for KV


_IDLE = _Own()  # shared read-only stand-in for workers with no requests


@dataclass(slots=True)
class _Correction:
    decode_blocks: float = 0.0
    prefill_tokens: float = 0.0
    waiting: int = 0  # requests waiting there that no known router sent
    received_at: float = float("-inf")
    ts: float = float("-inf")


@dataclass(slots=True)
class _Peer:
    loads: Mapping[WorkerId, WorkerLoad]
    ts: float  # the sender's
    received_at: float  # ours


@dataclass(slots=True)
class _InFlight:
    worker_id: WorkerId
    uncached_tokens: int
    blocks: int
    prefilling: bool = True
    awaiting: bool = True  # no first token yet


class LoadTracker:
    """Load per worker; all methods O(1) but `update_peer` (O(workers x peers)) and `own_loads`
    (O(workers)); `views` is O(candidates), plus O(peers) when a peer has expired since."""

    def __init__(
        self,
        block_size: int,
        clock: Clock,
        report_ttl_s: float = 10.0,
        default_prefill_tokens: int = 1024,
        peer_ttl_s: float = 1.5,
    ) -> None:
        self._bs = block_size
        self._clock = clock
        self._ttl = report_ttl_s
        self._own: dict[WorkerId, _Own] = {}
        self._corr: dict[WorkerId, _Correction] = {}
        self._capacity: dict[WorkerId, int] = {}
        self._requests: dict[RequestId, _InFlight] = {}
        self._uncached_sum = 0
        self._started = 0
        self._default_prefill = default_prefill_tokens
        self._peer_ttl = peer_ttl_s
        self._peers: dict[str, _Peer] = {}
        self._peer_sum: dict[WorkerId, _Own] = {}  # per worker, the sum over live peers
        self._peers_checked_until = float("inf")  # no peer expires before this (clock time)

    def set_capacity(self, worker_id: WorkerId, kv_capacity_blocks: int) -> None:
        """Total KV blocks of a worker (0: unknown, no decode correction)."""
        self._capacity[worker_id] = kv_capacity_blocks

    def capacity(self, worker_id: WorkerId) -> int:
        """A worker's KV blocks (0: unknown)."""
        return self._capacity.get(worker_id, 0)

    def remove_worker(self, worker_id: WorkerId) -> None:
        """Forget a worker; its in-flight requests finish as no-ops."""
        self._own.pop(worker_id, None)
        self._peer_sum.pop(worker_id, None)
        self._corr.pop(worker_id, None)
        self._capacity.pop(worker_id, None)

    def start(self, request_id: RequestId, worker_id: WorkerId, prompt_tokens: int, uncached_tokens: int) -> None:
        """A request was sent to ``worker_id``. Raises ValueError if ``request_id`` is in flight."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already in flight")
        blocks = -(-prompt_tokens // self._bs)
        self._requests[request_id] = _InFlight(worker_id, uncached_tokens, blocks)
        own = self._own.setdefault(worker_id, _Own())
        own.prefill_tokens += uncached_tokens
        own.decode_blocks += blocks
        own.requests += 1
        own.prefilling += 1
        own.awaiting += 1
        self._uncached_sum += uncached_tokens
        self._started += 1

    def prefill_done(self, request_id: RequestId) -> None:
        """The request's first token arrived: its prefill no longer loads the worker. Idempotent."""
        req = self._requests.get(request_id)
        if req is None:
            return
        self._drop_prefill(req)
        if req.awaiting:
            req.awaiting = False
            own = self._own.get(req.worker_id)
            if own is not None:
                own.awaiting -= 1

    def prefilled_elsewhere(self, request_id: RequestId) -> None:
        """Its prefill ran on another worker: none loads this one, though its first token is still to
        come (the engine waits for the KV). Idempotent."""
        req = self._requests.get(request_id)
        if req is not None:
            self._drop_prefill(req)

    def _drop_prefill(self, req: _InFlight) -> None:
        if not req.prefilling:
            return
        req.prefilling = False
        own = self._own.get(req.worker_id)
        if own is not None:
            own.prefill_tokens -= req.uncached_tokens
            own.prefilling -= 1

    def finish(self, request_id: RequestId) -> None:
        """The request ended (any reason). Unknown ids are ignored."""
        self.prefill_done(request_id)
        req = self._requests.pop(request_id, None)
        if req is None:
            return
        own = self._own.get(req.worker_id)
        if own is not None:
            own.decode_blocks -= req.blocks
            own.requests -= 1

    def update(self, report: LoadReport) -> None:
        """Fold in a worker's published load (see the module docstring)."""
        corr = self._corr.setdefault(report.worker_id, _Correction())
        if report.ts < corr.ts:
            return
        own = self._own.get(report.worker_id, _IDLE)
        self._expire_peers(self._clock())
        peer = self._peer_sum.get(report.worker_id, _IDLE)
        capacity = self._capacity.get(report.worker_id, 0)
        reported_blocks = report.kv_usage * capacity
        known_blocks = own.decode_blocks + peer.decode_blocks
        corr.decode_blocks = max(0.0, reported_blocks - known_blocks) if capacity else 0.0
        foreign_waiting = max(0, report.waiting - own.awaiting - peer.awaiting)
        corr.prefill_tokens = foreign_waiting * self._mean_prefill_tokens()
        corr.waiting = foreign_waiting
        corr.ts = report.ts
        corr.received_at = self._clock()

    def update_peer(self, peer_id: str, ts: float, loads: Mapping[WorkerId, WorkerLoad]) -> None:
        """Replace a peer's load (its figures per worker; absent workers: idle there). A message
        with an older ``ts`` than the peer's last one is ignored."""
        old = self._peers.get(peer_id)
        if old is not None and ts < old.ts:
            return
        now = self._clock()
        self._peers[peer_id] = _Peer(loads, ts, now)
        self._sum_peers(loads.keys() if old is None else {*old.loads, *loads})
        self._peers_checked_until = min(self._peers_checked_until, now + self._peer_ttl)

    def own_loads(self) -> dict[WorkerId, WorkerLoad]:
        """This router's own figures per worker it has requests in flight on (what its peers need)."""
        return {w: WorkerLoad(o.prefill_tokens, o.decode_blocks, o.requests, o.prefilling, o.awaiting)
                for w, o in self._own.items() if o.requests}

    def peers(self) -> int:
        """Peers whose load currently counts."""
        self._expire_peers(self._clock())
        return len(self._peers)

    def view(self, worker_id: WorkerId) -> LoadView:
        """Current load of a worker (zeros for one never seen)."""
        return self.views([worker_id])[0]

    def views(self, worker_ids: Sequence[WorkerId]) -> list[LoadView]:
        """`view` of several workers at one instant (one clock read)."""
        now = self._clock()
        self._expire_peers(now)
        fresh_after = now - self._ttl
        peer_sum = self._peer_sum
        out = []
        for w in worker_ids:
            own = self._own.get(w, _IDLE)
            peer = peer_sum.get(w, _IDLE) if peer_sum else _IDLE
            prefill = own.prefill_tokens + peer.prefill_tokens
            blocks = own.decode_blocks + peer.decode_blocks
            corr = self._corr.get(w)
            if corr is not None and corr.received_at >= fresh_after:
                out.append(LoadView(prefill + corr.prefill_tokens, blocks + corr.decode_blocks,
                                    own.requests + peer.requests, own.prefilling + peer.prefilling + corr.waiting))
            else:
                out.append(LoadView(float(prefill), float(blocks), own.requests + peer.requests,
                                    float(own.prefilling + peer.prefilling)))
        return out

    def streaming(self, worker_id: WorkerId) -> int:
        """Requests in flight on a worker past their first token, this router's and its peers' (no report
        correction: a request an engine reports waiting has not streamed)."""
        self._expire_peers(self._clock())
        own = self._own.get(worker_id, _IDLE)
        peer = self._peer_sum.get(worker_id, _IDLE)
        return own.requests - own.awaiting + peer.requests - peer.awaiting

    def in_flight(self) -> int:
        """Requests started and not finished."""
        return len(self._requests)

    def _expire_peers(self, now: float) -> None:
        """Drop peers not heard from for ``peer_ttl_s``; O(peers)."""
        if now < self._peers_checked_until:
            return
        dead = [p for p, peer in self._peers.items() if now - peer.received_at >= self._peer_ttl]
        touched: set[WorkerId] = set()
        for peer_id in dead:
            touched.update(self._peers.pop(peer_id).loads)
        self._sum_peers(touched)
        oldest = min((peer.received_at for peer in self._peers.values()), default=float("inf"))
        self._peers_checked_until = oldest + self._peer_ttl

    def _sum_peers(self, workers: Iterable[WorkerId]) -> None:
        """Recompute the peer sum of ``workers``: O(len(workers) x peers)."""
        for w in workers:
            total = _Own()
            for peer in self._peers.values():
                load = peer.loads.get(w)
                if load is not None:
                    total.prefill_tokens += load.prefill_tokens
                    total.decode_blocks += load.decode_blocks
                    total.requests += load.requests
                    total.prefilling += load.prefilling
                    total.awaiting += max(load.awaiting, load.prefilling)  # a sender without the field: 0
            if total.requests or total.decode_blocks or total.prefill_tokens:
                self._peer_sum[w] = total
            else:
                self._peer_sum.pop(w, None)

    def _mean_prefill_tokens(self) -> float:
        return self._uncached_sum / self._started if self._started else float(self._default_prefill)
