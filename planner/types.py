"""The planner's boundary data: what it observes each tick and what it decides.

Pure typed dataclasses. `Observation` is built by the planner process (dynamo_lite/planning)
from JetStream, the workers' load reports and the frontend's metrics, or by a
simulator; `Decision` goes to a scaling connector and to the logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Pool(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"  # the decode pool, or the aggregated pool when there is no decode pool


@dataclass(frozen=True, slots=True)
class Replicas:
    prefill: int
    decode: int

    def of(self, pool: Pool) -> int:
        return self.prefill if pool is Pool.PREFILL else self.decode

    @property
    def total(self) -> int:
        return self.prefill + self.decode


@dataclass(frozen=True, slots=True)
class DecodeLoad:
    """One decode worker's last load report."""

    worker_id: str
    kv_usage: float  # 0..1, vllm:kv_cache_usage_perc
    waiting: int  # vllm:num_requests_waiting
    running: int  # vllm:num_requests_running


@dataclass(frozen=True, slots=True)
class Traffic:
    """Frontend metrics over the last interval; a field is None when nothing was measured."""

    request_rate: float  # requests per second arriving
    isl: float | None = None  # mean input tokens per request
    osl: float | None = None  # mean output tokens per request
    ttft_s: float | None = None  # mean time to first token
    itl_s: float | None = None  # mean inter-token latency
    isl_dist: tuple[tuple[float, float], ...] = ()  # (prompt tokens, share of requests), shares sum to 1; () unknown
    cached_share: float | None = None  # prompt tokens found cached / prompt tokens
    remote_share: float | None = None  # requests whose prefill goes to the prefill pool (when it has room) / requests
    remote_prefill_s: float | None = None  # mean time of a remote prefill, submitted to result (queue wait + prefill)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything one tick looks at. Absent inputs mean "nothing to see" (no traffic):
    policies treat them as idle, never as a reason to scale up."""

    prefill_queue: int | None = None  # prefill jobs pending in JetStream (not yet handed out)
    prefill_in_flight: int | None = None  # jobs handed to prefill workers, not yet acked
    decode: tuple[DecodeLoad, ...] = ()  # fresh load reports of the decode (or aggregated) workers
    traffic: Traffic | None = None


@dataclass(frozen=True, slots=True)
class PoolLimits:
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True, slots=True)
class Limits:
    prefill: PoolLimits
    decode: PoolLimits
    max_total: int  # budget: prefill + decode never exceed this (minimums win if they conflict)
    max_step: int = 1  # most replicas removed per pool per tick
    max_step_up: int | None = None  # most replicas added per pool per tick; None: no limit (grow at once)
    cooldown_s: float = 60.0  # after a scale-up, the pool is held this long
    scale_down_after: int = 3  # ticks in a row a policy must ask for fewer replicas before one goes

    def of(self, pool: Pool) -> PoolLimits:
        return self.prefill if pool is Pool.PREFILL else self.decode


@dataclass(frozen=True, slots=True)
class Proposal:
    """A policy's wish for one pool, before limits, step, cool-down and budget."""

    replicas: int
    reason: str


@dataclass(frozen=True, slots=True)
class PoolDecision:
    pool: Pool
    current: int
    proposed: int  # what the policy asked for
    target: int  # what the planner decided after its constraints
    reason: str  # the policy's reason, then each constraint that changed the number

    @property
    def delta(self) -> int:
        return self.target - self.current


@dataclass(frozen=True, slots=True)
class Decision:
    at: float  # clock time of the tick
    prefill: PoolDecision
    decode: PoolDecision
    notes: tuple[str, ...] = field(default_factory=tuple)  # about the inputs (e.g. metrics absent)

    @property
    def replicas(self) -> Replicas:
        return Replicas(self.prefill.target, self.decode.target)

    @property
    def changed(self) -> bool:
        return self.prefill.delta != 0 or self.decode.delta != 0

    def of(self, pool: Pool) -> PoolDecision:
        return self.prefill if pool is Pool.PREFILL else self.decode

    def explain(self) -> str:
        parts = [f"{d.pool.value} {d.current}->{d.target} ({d.reason})" for d in (self.prefill, self.decode)]
        return "; ".join(parts + list(self.notes))
