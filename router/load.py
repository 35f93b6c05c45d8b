"""Per-worker load: the router's own in-flight requests, corrected by worker reports.

Own tracking (exact for this router, instant):
- ``prefill_tokens``: uncached prompt tokens of requests sent to the worker whose
  prefill has not finished (`start` adds, `prefill_done` or `finish` removes);
- ``decode_blocks``: KV blocks of the prompts of requests in flight there
  (``ceil(prompt_tokens / block_size)`` each, from `start` to `finish`).

Correction from `LoadReport`s (what this router cannot see: other frontends'
requests, its own estimation error). On each report the part the router does not
account for is kept as an offset, added to the own figures until the next report:
- decode: ``max(0, kv_usage * kv_capacity_blocks - own decode_blocks)``, only
  when the worker's capacity is known;
- prefill: ``max(0, waiting - own requests still prefilling) *`` the mean
  uncached tokens of this router's requests (``default_prefill_tokens`` before
  it has seen any).
Reports older than ``report_ttl_s`` (by the injected clock, counted from
arrival) stop counting; a report with an older ``ts`` than the last one is
ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from router.types import LoadReport, RequestId, WorkerId

Clock = Callable[[], float]


class LoadView(NamedTuple):
    """A worker's load as the cost function sees it (a NamedTuple: built 32x per decision)."""

    prefill_tokens: float  # uncached prompt tokens waiting for or in prefill
    decode_blocks: float  # KV blocks held by in-flight requests
    requests: int  # this router's in-flight requests there


@dataclass(slots=True)
class _Own:
    prefill_tokens: int = 0
    decode_blocks: int = 0
    requests: int = 0
    prefilling: int = 0  # requests whose prefill has not finished


_IDLE = _Own()  # shared read-only stand-in for workers with no requests


@dataclass(slots=True)
class _Correction:
    decode_blocks: float = 0.0
    prefill_tokens: float = 0.0
    received_at: float = float("-inf")
    ts: float = float("-inf")


@dataclass(slots=True)
class _InFlight:
    worker_id: WorkerId
    uncached_tokens: int
    blocks: int
    prefilling: bool = True


class LoadTracker:
    """Load per worker; all methods O(1)."""

    def __init__(
        self,
        block_size: int,
        clock: Clock,
        report_ttl_s: float = 10.0,
        default_prefill_tokens: int = 1024,
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

    def set_capacity(self, worker_id: WorkerId, kv_capacity_blocks: int) -> None:
        """Total KV blocks of a worker (0: unknown, no decode correction)."""
        self._capacity[worker_id] = kv_capacity_blocks

    def remove_worker(self, worker_id: WorkerId) -> None:
        """Forget a worker; its in-flight requests finish as no-ops."""
        self._own.pop(worker_id, None)
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
        self._uncached_sum += uncached_tokens
        self._started += 1

    def prefill_done(self, request_id: RequestId) -> None:
        """The request's first token arrived: its prefill no longer loads the worker. Idempotent."""
        req = self._requests.get(request_id)
        if req is None or not req.prefilling:
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
        own = self._own.get(report.worker_id, _Own())
        capacity = self._capacity.get(report.worker_id, 0)
        reported_blocks = report.kv_usage * capacity
        corr.decode_blocks = max(0.0, reported_blocks - own.decode_blocks) if capacity else 0.0
        foreign_waiting = max(0, report.waiting - own.prefilling)
        corr.prefill_tokens = foreign_waiting * self._mean_prefill_tokens()
        corr.ts = report.ts
        corr.received_at = self._clock()

    def view(self, worker_id: WorkerId) -> LoadView:
        """Current load of a worker (zeros for one never seen)."""
        return self.views([worker_id])[0]

    def views(self, worker_ids: Sequence[WorkerId]) -> list[LoadView]:
        """`view` of several workers at one instant (one clock read)."""
        fresh_after = self._clock() - self._ttl
        out = []
        for w in worker_ids:
            own = self._own.get(w, _IDLE)
            corr = self._corr.get(w)
            if corr is not None and corr.received_at >= fresh_after:
                prefill = own.prefill_tokens + corr.prefill_tokens
                out.append(LoadView(prefill, own.decode_blocks + corr.decode_blocks, own.requests))
            else:
                out.append(LoadView(float(own.prefill_tokens), float(own.decode_blocks), own.requests))
        return out

    def in_flight(self) -> int:
        """Requests started and not finished."""
        return len(self._requests)

    def _mean_prefill_tokens(self) -> float:
        return self._uncached_sum / self._started if self._started else float(self._default_prefill)
