"""vLLM's Prometheus metrics (names, types, labels, buckets of vllm/v1/metrics),
fed by the mock engine, on a registry the caller owns.

Times are simulated seconds, so that a run at any speed-up reports what the
simulated engine would have shown. Not vLLM's, prefixed ``mock:``: the clock
lag (how far the simulation fell behind wall clock x speed-up) and
``mock:busy_seconds_total``, simulated seconds spent in engine steps: its
increase over a wall interval, divided by (interval x speed-up), is the share
of the time the engine was busy.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dynamo_lite.engines.mock.sequence import FinishReason, Sequence
from dynamo_lite.engines.mock.timing import StepLoad

LABELS = ["model_name", "engine"]
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]  # fmt: skip
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
NIXL_TIME_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
NIXL_BYTES_BUCKETS = [2 ** (10 + i) for i in range(1, 25, 2)]


def tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 series up to max_model_len."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(m * scale)
        scale *= 10


class EngineMetrics:
    """The metrics of one engine (label engine="0", like a single-engine vLLM)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        model_name: str,
        max_model_len: int,
        cache_info: dict[str, str],
        with_nixl: bool = False,
        engine: str = "0",
    ) -> None:
        lv = (model_name, engine)
        self._max_lag = 0.0

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry).labels(*lv)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry).labels(*lv)

        def hist(name: str, doc: str, buckets: list[float]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry).labels(*lv)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens.")
        self.ext_queries = counter("vllm:external_prefix_cache_queries", "External prefix cache queries, in tokens.")
        self.ext_hits = counter("vllm:external_prefix_cache_hits", "External prefix cache hits, in tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", [*LABELS, "source"], registry=registry
        )
        self.by_source = {s: by_source.labels(*lv, s) for s in SOURCES}
        self.prompt_cached = counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success", "Count of successfully processed requests.", [*LABELS, "finished_reason"],
            registry=registry,
        )  # fmt: skip
        self.success = {r: success.labels(*lv, r.value) for r in FinishReason}
        tok_buckets = tokens_buckets(max_model_len)
        self.req_prompt_tokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok_buckets)
        self.req_gen_tokens = hist("vllm:request_generation_tokens", "Number of generation tokens.", tok_buckets)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Tokens per engine_step.", ITERATION_BUCKETS)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token in seconds.", TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "E2e request latency in seconds.", LATENCY_BUCKETS)
        self.queue_time = hist("vllm:request_queue_time_seconds", "Time in WAITING phase.", LATENCY_BUCKETS)
        self.inference_time = hist("vllm:request_inference_time_seconds", "Time in RUNNING phase.", LATENCY_BUCKETS)
        self.prefill_time = hist("vllm:request_prefill_time_seconds", "Time in PREFILL phase.", LATENCY_BUCKETS)
        self.decode_time = hist("vllm:request_decode_time_seconds", "Time in DECODE phase.", LATENCY_BUCKETS)
        # not vLLM's: how far the simulation fell behind wall clock x speed-up (CPU-bound)
        self.lag = gauge("mock:clock_lag_seconds", "Simulated seconds the engine loop is behind its wall-clock pace.")
        self.max_lag = gauge("mock:clock_lag_max_seconds", "Largest mock:clock_lag_seconds seen.")
        self.busy = counter("mock:busy_seconds", "Simulated seconds spent in forward passes (engine steps); its rate "
                            "over simulated time is how busy the engine was.")
        info = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [*cache_info, "engine"],
            registry=registry,
        )  # fmt: skip
        info.labels(**cache_info, engine=engine).set(1)
        self.nixl_time: Histogram | None = None
        self.nixl_bytes: Histogram | None = None
        if with_nixl:
            self.nixl_time = hist("vllm:nixl_xfer_time_seconds", "NIXL KV transfer duration.", NIXL_TIME_BUCKETS)
            self.nixl_bytes = hist("vllm:nixl_bytes_transferred", "Bytes per NIXL KV transfer.", NIXL_BYTES_BUCKETS)
            self.nixl_failed = counter("vllm:nixl_num_failed_transfers", "Failed NIXL KV transfers.")

    def scheduler_state(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)

    def step(self, load: StepLoad, num_preempted: int, lag: float) -> None:
        self.iteration_tokens.observe(load.prefill_tokens + load.decode_seqs)
        self.lag.set(lag)
        if lag > self._max_lag:
            self._max_lag = lag
            self.max_lag.set(lag)
        if num_preempted:
            self.preemptions.inc(num_preempted)

    def admitted(self, seq: Sequence, external_connector: bool) -> None:
        """Prompt accounting at a request's first scheduling, as vLLM's PrefillStats."""
        total = len(seq.prompt)
        local, external = seq.num_local_cached, seq.num_external
        self.prefix_queries.inc(total)
        self.prefix_hits.inc(local)
        if external_connector:
            self.ext_queries.inc(total - local)
            self.ext_hits.inc(external)
        self.prompt_tokens.inc(total)
        self.by_source["local_compute"].inc(total - local - external)
        self.by_source["local_cache_hit"].inc(local)
        self.by_source["external_kv_transfer"].inc(external)
        self.prompt_cached.inc(local + external)

    def kv_received(self, seconds: float, num_bytes: int) -> None:
        if self.nixl_time is not None and self.nixl_bytes is not None:
            self.nixl_time.observe(seconds)
            self.nixl_bytes.observe(num_bytes)

    def token(self, seq: Sequence, now: float, prev_token_at: float | None) -> None:
        self.generation_tokens.inc()
        if prev_token_at is None:
            self.ttft.observe(now - seq.arrival)
        else:
            self.itl.observe(now - prev_token_at)

    def finished(self, seq: Sequence, now: float) -> None:
        assert seq.finish_reason is not None
        self.success[seq.finish_reason].inc()
        self.e2e.observe(now - seq.arrival)
        self.req_prompt_tokens.observe(len(seq.prompt))
        self.req_gen_tokens.observe(len(seq.output))
        if seq.scheduled_at is not None:
            self.queue_time.observe(seq.scheduled_at - seq.arrival)
            self.inference_time.observe(now - seq.scheduled_at)
            if seq.first_token_at is not None:
                self.prefill_time.observe(seq.first_token_at - seq.scheduled_at)
                self.decode_time.observe(now - seq.first_token_at)
