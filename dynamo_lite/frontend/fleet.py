"""The live fleet as the frontend sees it: per model, a `Router` over its decode and
aggregated workers, and the count of its prefill workers.

Fed by four sources, all on the event loop: discovery (`on_worker_change`, a
`WorkerWatcher` listener), relayed KV events (`on_kv_events`), load reports
(`on_load`) and KV snapshots (`begin_sync` / `end_sync`: while a worker's snapshot is
fetched, its live KV batches are buffered; the snapshot becomes its baseline and the
buffered batches apply on top, those it already covers dropped as duplicates).
Pure apart from the metrics it counts: no I/O here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dynamo_lite.discovery import WorkerChange
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.protocol import (
    KvEventBatch,
    LoadReport,
    PeerLoad,
    RelayedKvEvents,
    Role,
    WorkerId,
    WorkerLoad,
    WorkerRecord,
)
from router import EventOutcome, Router, RouterConfig

log = logging.getLogger(__name__)

ROUTED_ROLES = (Role.DECODE, Role.AGGREGATED)


@dataclass
class ModelFleet:
    """One served model's workers and router."""

    name: str
    router: Router
    workers: dict[WorkerId, WorkerRecord]
    clock: Callable[[], float] = time.monotonic
    suspects: dict[WorkerId, float] = field(default_factory=dict)  # worker -> avoided until (clock time)

    def candidates(self, exclude: Iterable[WorkerId] = ()) -> list[WorkerId]:
        """Workers a request can decode on (decode and aggregated), in a stable order.

        Workers that failed a request recently are left out while others remain: a dead
        worker stays registered until its lease expires, and should not be every
        request's first try until then.
        """
        skip = set(exclude)
        live = sorted(w.worker_id for w in self.workers.values() if w.role in ROUTED_ROLES and w.worker_id not in skip)
        now = self.clock()
        healthy = [w for w in live if self.suspects.get(w, 0.0) <= now]
        return healthy or live

    def suspect(self, worker_id: WorkerId, for_s: float) -> None:
        """Avoid a worker that just failed for `for_s` seconds (or until it re-registers)."""
        self.suspects[worker_id] = self.clock() + for_s

    def count(self, role: Role) -> int:
        return sum(1 for w in self.workers.values() if w.role == role)


@dataclass(frozen=True)
class KvSnapshot:
    """A worker's cached blocks as its agent sent them, consistent with its KV batch `seq` (-1: none)."""

    worker_id: WorkerId
    seq: int
    batches: list[KvEventBatch]


@dataclass
class _Sync:
    token: int
    buffered: list[RelayedKvEvents] = field(default_factory=list)


class Fleet:
    def __init__(self, routers: dict[str, RouterConfig], metrics: FrontendMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.load_changed = asyncio.Event()  # set when a router's own in-flight load changes (load_share.py)
        self.models = {name: ModelFleet(name, Router(cfg, clock=clock, on_load_change=self.load_changed.set), {}, clock)
                       for name, cfg in routers.items()}
        self._model_of: dict[WorkerId, str] = {}
        self._syncing: dict[WorkerId, _Sync] = {}
        self._sync_tokens = 0

    def get(self, model: str) -> ModelFleet | None:
        return self.models.get(model)

    def record(self, worker_id: WorkerId) -> WorkerRecord | None:
        model = self._model_of.get(worker_id)
        return None if model is None else self.models[model].workers.get(worker_id)

    # --- discovery ----------------------------------------------------------------
    def on_worker_change(self, change: WorkerChange) -> None:
        if change.previous is not None:
            self._drop(change.previous)
        if change.record is not None:
            self._add(change.record)

    def _add(self, record: WorkerRecord) -> None:
        fleet = self.models.get(record.model)
        if fleet is None:
            log.warning("worker %s serves model %r, which this frontend does not know; ignored",
                        record.worker_id, record.model)
            return
        if record.block_size != fleet.router.config.block_size:
            log.warning("worker %s: block size %d, but model %s uses %d; its KV events will be rejected",
                        record.worker_id, record.block_size, record.model, fleet.router.config.block_size)
        fleet.workers[record.worker_id] = record
        fleet.suspects.pop(record.worker_id, None)
        self._model_of[record.worker_id] = record.model
        if record.role in ROUTED_ROLES:
            fleet.router.add_worker(record.worker_id, record.kv_capacity_blocks)
        self._count(fleet)
        log.info("worker %s (%s, %s) joined: %s", record.worker_id, record.role.value, record.model,
                 record.engine_url)

    def _drop(self, record: WorkerRecord) -> None:
        fleet = self.models.get(record.model)
        self._model_of.pop(record.worker_id, None)
        self._syncing.pop(record.worker_id, None)
        if fleet is None or fleet.workers.pop(record.worker_id, None) is None:
            return
        fleet.router.remove_worker(record.worker_id)
        fleet.suspects.pop(record.worker_id, None)
        self._count(fleet)
        log.info("worker %s (%s, %s) left", record.worker_id, record.role.value, record.model)

    def _count(self, fleet: ModelFleet) -> None:
        for role in Role:
            self.metrics.workers.labels(fleet.name, role.value).set(fleet.count(role))

    # --- events and load ----------------------------------------------------------
    def on_kv_events(self, message: RelayedKvEvents) -> None:
        model = self._model_of.get(message.worker_id)
        if model is None:
            return  # a worker discovery does not (or no longer) know
        sync = self._syncing.get(message.worker_id)
        if sync is not None:
            sync.buffered.append(message)
            return
        self._apply_kv(model, message)

    def _apply_kv(self, model: str, message: RelayedKvEvents) -> None:
        fleet = self.models[model]
        outcome = fleet.router.apply_events(message.worker_id, message.seq, message.batch)
        self.metrics.kv_event_batches.labels(model, outcome.status.value).inc()
        if outcome.needs_resync:
            # Events were lost: the router has already cleared the worker and taken this batch as
            # the new baseline (router.events), so its index re-learns from the blocks stored from
            # now on. (No replay: the agent relays live events only.)
            self.metrics.kv_resyncs.labels(model).inc()
            log.warning("worker %s: gap in KV events at seq %d; its cached blocks were cleared",
                        message.worker_id, message.seq)

    # --- KV snapshots -------------------------------------------------------------
    def begin_sync(self, worker_id: WorkerId) -> int | None:
        """Start buffering a routed worker's live KV batches; returns the token for `end_sync`
        (None: not a routed worker of a known model). A new sync supersedes one in progress."""
        model = self._model_of.get(worker_id)
        if model is None or worker_id not in self.models[model].router.workers:
            return None
        self._sync_tokens += 1
        self._syncing[worker_id] = _Sync(self._sync_tokens)
        return self._sync_tokens

    def end_sync(self, worker_id: WorkerId, token: int, snapshot: KvSnapshot | None) -> EventOutcome | None:
        """Load `snapshot` (None: it failed, keep the index as live events built it) as the worker's
        baseline, then apply the buffered batches. A stale token (the worker left or re-synced
        since) changes nothing. Returns the snapshot's outcome, if one was loaded."""
        sync = self._syncing.get(worker_id)
        model = self._model_of.get(worker_id)
        if sync is None or sync.token != token or model is None:
            return None
        del self._syncing[worker_id]
        outcome = None
        if snapshot is not None:
            outcome = self.models[model].router.load_snapshot(worker_id, snapshot.seq, snapshot.batches)
        for message in sync.buffered:
            self._apply_kv(model, message)
        return outcome

    def model_of(self, worker_id: WorkerId) -> str | None:
        return self._model_of.get(worker_id)

    def on_load(self, report: LoadReport) -> None:
        model = self._model_of.get(report.worker_id)
        if model is None:
            return
        self.models[model].router.update_load(report)
        self.metrics.load_reports.labels(model).inc()

    # --- other frontends' load ----------------------------------------------------
    def on_peer_load(self, load: PeerLoad) -> None:
        """Another frontend process's own in-flight load: each model's router takes its workers' part."""
        parts: dict[str, dict[WorkerId, WorkerLoad]] = {name: {} for name in self.models}
        for worker_id, worker_load in load.workers.items():
            model = self._model_of.get(worker_id)
            if model is not None:
                parts[model][worker_id] = worker_load
        for name, part in parts.items():
            self.models[name].router.update_peer_load(load.frontend_id, load.ts, part)

    def own_loads(self) -> dict[WorkerId, WorkerLoad]:
        """This frontend's own in-flight load per busy worker, over all models (what it shares)."""
        out: dict[WorkerId, WorkerLoad] = {}
        for fleet in self.models.values():
            out.update(fleet.router.own_loads())
        return out
