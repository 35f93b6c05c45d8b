"""The `frontend:` section of cluster.yaml and its sub-sections: router, disaggregation, admission, API keys.

`ApiKeysSpec.load()` reads the key file and the environment variable that the spec names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from dynamo_lite.config.base import ConfigError, Port, Section

RouterMode = Literal["ttft", "blocks", "kv", "approx", "round_robin", "random", "least_loaded"]


class RouterSpec(Section):
    mode: RouterMode = "ttft"
    """ttft: lowest predicted time to first token over the KV-event index (rates learnt online); blocks:
    Dynamo's cost formula over the same index (`kv` is its old name); approx: that formula over an index learnt
    from its own decisions; or round_robin, random, least_loaded (cache-blind)."""
    overlap_weight: Annotated[float, Field(ge=0)] = 1.0
    """Weight of prefill blocks still to compute against active decode blocks in the cost."""
    temperature: Annotated[float, Field(ge=0)] = 0.0
    """0: lowest cost wins. Above 0: softmax sampling over normalised costs."""
    approx_ttl_s: Annotated[float, Field(gt=0)] = 120.0
    """approx mode: how long a routed prefix is assumed to stay cached."""
    copy_weight: Annotated[float, Field(ge=0)] = 16.0
    """ttft mode: price of computing again a prefix that another worker holds, in multiples of the seconds the
    model predicts that recompute adds there, at a full cache. 16 (default; 4 until 2026-12-05): in bursts under
    cache pressure it kept 1.5-2.8 more points of prefix hits than 4 and cut TTFT p99 by 14-37%; at constant load
    0-1.1 more points, for up to 5 ms more TTFT p99 (docs/benchmarks.md). Lower trades hits for TTFT at a steady
    load."""
    inflight_ttl_s: Annotated[float, Field(ge=0)] = 1.0
    """ttft mode: a prompt just sent counts as cached on its worker this long, before its KV events arrive, so the
    prompts that share its prefix meanwhile join it. 1 (default; 0 until 2026-12-05): in bursts under cache pressure
    it kept 0.1-2.1 more points of prefix hits and cut TTFT p99 by 4-18% (goodput -5% on tenants, ITL), for -0.3 to
    +0.5 points and -1 to +2 ms of TTFT p99 at constant load; 10 lost hits and balance (docs/benchmarks.md). 0: KV
    events only."""
    worker_speeds: bool = False
    """ttft mode: learn each worker's speed against the fleet's, for unlike workers. Off by default: on like
    workers, timing noise made the ratios send a worker 0.6x its share (arena, 4 mocks)."""
    itl_guard: bool = True
    """ttft mode: pass over workers whose predicted inter-token latency breaks planner.itl_target_ms. It also arms
    the decode guard of disaggregation.decision: predicted; without it, that rule kept 62-99% of prefills on the
    decode workers in the simulation and lost 37-87 points of SLO attainment with 4-7 prefill workers of 8
    (docs/benchmarks.md). For routing alone, turning it off changed nothing measurable."""
    profile: str | None = None
    """ttft mode: engine profile JSON whose prefill points seed the TTFT model; null: planner.profile, else a generic seed."""


class DisaggregationSpec(Section):
    decision: Literal["threshold", "predicted"] = "threshold"
    """How a request routed to a decode worker chooses where its prefill runs. threshold: on a prefill worker when the prompt part the decode worker has not cached is longer than max_local_prefill_tokens; predicted: on a prefill worker when the predicted time to first token through the prefill queue (its wait, the prefill, and the hop and KV transfer the frontend measured) beats the decode worker's own predicted TTFT, unless prefilling there would hold up the requests streaming on the decode worker for longer than planner.itl_target_ms (with frontend.router.itl_guard; router mode ttft; in other modes, and until a remote prefill has been timed, threshold decides)."""
    max_local_prefill_tokens: Annotated[int, Field(ge=0)] = 512
    """threshold: prefill remotely only when the uncached prompt on the decode worker is longer than this."""
    max_prefill_queue: Annotated[int, Field(ge=0)] = 8
    """Either way, prefill locally when the prefill queue holds this many jobs not yet taken, or more."""
    prefill_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """How long the frontend waits for a prefill job's result."""


class AdmissionSpec(Section):
    reject_predicted_ttft_factor: Annotated[float, Field(gt=0)] | None = None
    """Refuse a request with 429 and Retry-After before any engine sees it when the router's predicted time to its first token (router mode ttft; the remote prefill path's when that is taken) is over this many times planner.ttft_target_ms. The time the request already spent in the frontend (a wait for an admission slot, its tokenization) counts, as its TTFT counts from its arrival. Retry-After: the predicted excess, in whole seconds, at least 1. null: never refuse on prediction (requests wait in the admission queue)."""


class ApiKeysSpec(Section):
    file: Path | None = None
    """File of accepted API keys, one per line (blank lines and `#` comments ignored)."""
    env: str | None = None
    """Name of an environment variable holding accepted keys, comma-separated."""

    @property
    def enabled(self) -> bool:
        return self.file is not None or self.env is not None

    def load(self) -> frozenset[str]:
        """The accepted keys; raises ConfigError if a source is missing or holds none."""
        keys: set[str] = set()
        if self.file is not None:
            try:
                lines = self.file.read_text().splitlines()
            except OSError as e:
                raise ConfigError(f"frontend.api_keys.file: cannot read {self.file}: {e.strerror}") from None
            keys.update(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
        if self.env is not None:
            if self.env not in os.environ:
                raise ConfigError(f"frontend.api_keys.env: environment variable {self.env} is not set")
            keys.update(k.strip() for k in os.environ[self.env].split(",") if k.strip())
        if self.enabled and not keys:
            raise ConfigError("frontend.api_keys: the configured sources hold no key")
        return frozenset(keys)


MAX_FRONTEND_PROCESSES = 64
K8S_AUTO_FRONTEND_REPLICAS = 2
"""`frontend.processes: auto` on Kubernetes: two pods, so that losing one leaves the Service answering."""


def auto_frontend_processes(cpu_count: int | None) -> int:
    """`frontend.processes: auto` for `orchestrator up`: half the cores (the engines and the control plane
    need the rest), at least 1, at most 8 (beyond that a process per core adds router indexes, not speed)."""
    return min(8, max(1, (cpu_count or 1) // 2))


class FrontendSpec(Section):
    host: str = "127.0.0.1"
    """Interface the OpenAI-compatible HTTP API listens on."""
    port: Port = 8000
    """Its port."""
    processes: int | Literal["auto"] = "auto"
    """Frontend processes serving `port` together (SO_REUSEPORT; `orchestrator up` restarts each that dies); auto: min(8, max(1, cores // 2)). On Kubernetes: the Deployment's replicas (auto: 2)."""
    metrics_port: Port = 0
    """Each frontend process's own /metrics and /health (a scrape of `port` reaches a random process): process i listens on this + i; 0: free ports."""
    api_keys: ApiKeysSpec = ApiKeysSpec()
    """Optional: when a source is set, /v1/* needs `Authorization: Bearer <key>` (401 otherwise)."""
    max_concurrent_requests: Annotated[int, Field(ge=1)] = 256
    """Admission control: requests served at once; more wait in a queue."""
    max_queued_requests: Annotated[int, Field(ge=0)] = 1024
    """Requests that may wait for a slot; beyond that, 429 with Retry-After."""
    queue_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """A request that waited this long for a slot gets 429 with Retry-After."""
    body_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """A request body not fully received this long after its headers gets 408 (a slow client holds no slot)."""
    max_tokens_limit: Annotated[int, Field(ge=1)] | None = None
    """Largest max_tokens a request may ask for (400 above it); null: only the context length limits it."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    """Largest request body accepted; a larger one gets 413."""
    upstream_timeout_s: Annotated[float, Field(gt=0)] = 120.0
    """Longest wait for a worker's first or next token before the request fails with 504."""
    max_migrations: Annotated[int, Field(ge=0)] = 3
    """A request whose worker fails mid-stream is resent to another worker at most this many times."""
    strict_request_fields: bool = False
    """true: a request field the API does not know is a 400 naming it; false: accepted and logged, as vLLM does."""
    kv_snapshot_timeout_s: Annotated[float, Field(ge=0)] = 2.0
    """A frontend that starts asks every worker's agent for its cached KV blocks (and each worker that joins later), waiting up to this long for each before serving; 0: no snapshot, the router learns only from KV events stored from then on."""
    share_load: bool = True
    """Frontend processes share their in-flight requests per worker over NATS (every 100 ms), so that several do not pile onto one worker; false: each counts only its own (and the workers' load reports)."""
    router: RouterSpec = RouterSpec()
    disaggregation: DisaggregationSpec = DisaggregationSpec()
    admission: AdmissionSpec = AdmissionSpec()
    """Refusing early what the fleet cannot serve in time (the queue's bounds are max_concurrent_requests and max_queued_requests; a waiting request's vLLM `priority`, lower first, orders it there)."""

    @field_validator("processes", mode="before")
    @classmethod
    def _process_count(cls, value: object) -> object:
        if value == "auto" or (type(value) is int and 1 <= value <= MAX_FRONTEND_PROCESSES):
            return value
        raise ValueError(f"expected a whole number from 1 to {MAX_FRONTEND_PROCESSES}, or auto (got {value!r})")

    @model_validator(mode="after")
    def _own_ports_fit(self) -> FrontendSpec:
        n = self.processes if isinstance(self.processes, int) else 1
        if self.metrics_port and self.metrics_port + n - 1 > 65535:
            raise ValueError(f"metrics_port {self.metrics_port} + {n} processes runs past port 65535")
        if self.metrics_port and self.port and self.metrics_port <= self.port < self.metrics_port + n:
            raise ValueError(f"metrics_port {self.metrics_port} (one per process) would take `port` {self.port}")
        return self

    def local_processes(self) -> int:
        """How many frontend processes `orchestrator up` runs on this machine."""
        return auto_frontend_processes(os.cpu_count()) if self.processes == "auto" else self.processes

    def k8s_replicas(self) -> int:
        """How many frontend pods the Kubernetes render asks for."""
        return K8S_AUTO_FRONTEND_REPLICAS if self.processes == "auto" else self.processes
