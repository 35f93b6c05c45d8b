"""The simulated fleet's data (planner_sim_fleet.py): its requests, its workers and its settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig, StepPlan
from dynamo_lite.engines.mock.timing import RooflineTiming, TimingModel
from dynamo_lite.frontend.disagg import DisaggPolicy, Reason
from dynamo_lite.protocol import Role
from router.ttft import Seed

TRACE_BLOCK = 512  # tokens per Mooncake hash id
ALWAYS_REMOTE = DisaggPolicy(max_local_prefill_tokens=-1, max_prefill_queue=1 << 30)  # plain disaggregation


@dataclass
class Request:
    rid: int
    arrival: float
    isl: int
    osl: int
    hashes: list[int]  # engine block hashes of the prompt's full blocks
    tokens: list[int] | None = None  # the prompt's token ids (router_view: what the router hashes); None: isl ones
    first_token_at: float | None = None
    done_at: float | None = None
    itl_s: float | None = None
    worker: Worker | None = None  # the routed (aggregated or decode) worker
    reason: Reason | None = None  # where prefill ran
    eligible: bool = False  # long and uncached enough for the prefill pool (if it had workers and room)
    local_ttft_s: float | None = None  # ttft routing: the router's predicted TTFT on the chosen worker
    prefill_s: float | None = None  # the predicted prefill on a prefill worker (decode workers, ttft routing)
    wait_s: float = 0.0  # the predicted prefill queue wait when it was queued
    queued_at: float | None = None  # put on the prefill queue (remote prefill)
    sent_at: float | None = None  # remote prefill: sent to the decode worker with its KV
    cached_tokens: int = 0  # prompt tokens the prefilling engine found cached


@dataclass
class Worker:
    wid: int
    role: Role
    sched: Scheduler
    requested_at: float  # when it was asked for (replica-seconds start)
    ready_at: float
    draining: bool = False
    stopped_at: float | None = None
    busy: bool = False  # a pass is in progress
    plan: StepPlan | None = None  # the pass in progress
    plan_started_at: float = 0.0
    plan_ends_at: float = 0.0
    busy_s: float = 0.0  # seconds of passes run
    wake_at: float | None = None  # a wake-up is queued (KV transfer landing)

    @property
    def serving(self) -> bool:
        return self.stopped_at is None and not self.draining


@dataclass
class FleetConfig:
    sched: SchedulerConfig = field(default_factory=SchedulerConfig)
    timing: TimingModel = field(default_factory=RooflineTiming)
    startup_s: float = 30.0  # from a scale-up decision to the worker serving
    prefill_concurrency: int = 4  # prefill jobs one prefill worker runs at once (the agent's)
    disagg: DisaggPolicy = ALWAYS_REMOTE  # the frontend's conditional-disaggregation settings
    speedup: float = 1.0  # the mock's speedup_ratio: engine seconds per wall second (to predict a live run)
    router: str = "ttft"  # "ttft": the router's ttft cost and learnt model; "blocks": Dynamo's formula;
    # "oracle": the least TTFT that playing each candidate's passes forward gives (fleet_oracle); "cache_aware":
    # vllm-router's and sglang-router's policy (sim_routing.CacheAware)
    ttft_seed: Seed = field(default_factory=Seed)  # ttft: where the model starts (the engine profile's line)
    itl_target_s: float = 0.0  # ttft: the ITL guard's target (0: no guard)
    copy_weight: float = 1.0  # ttft: the copy price's weight (1: the published planner figures; RouterConfig's is 4)
    oracle_copy_weight: float = 0.0  # oracle: the copy price, as ttft's, on the oracle's own TTFTs (0: none)
    oracle_knows_phase: bool = True  # oracle: knows when the pass in progress ends (False: takes it as half done)
    oracle_marginal: bool = False  # oracle: its own TTFT plus the delay it adds to the others' first tokens there
    router_view: bool = False  # ttft/blocks: the `Router` itself decides, on what a live one is told (above)
    load_interval_s: float = 1.0  # router_view: seconds between each worker's load reports (the agent's)
