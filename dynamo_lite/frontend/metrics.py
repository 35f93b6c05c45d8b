"""The frontend's Prometheus metrics, on a registry passed in (never the global default).

`labels()` is a dict lookup under a lock, with the label values joined into a key: the
request path takes its children from `for_model(model)` (`ModelMetrics`, built once per
model) and from small dicts for the labels that vary (worker, reason), not per request.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ITL = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536)
P = "dynamo_lite_frontend_"
BANDS = ("high", "default", "low")
REFUSALS = ("queue_full", "queue_timeout", "predicted_ttft")


class FrontendMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.requests = Counter(P + "requests", "Requests finished, by endpoint and HTTP status (or 'stream_error')",
                                ["model", "endpoint", "status"], registry=r)
        self.in_flight = Gauge(P + "requests_in_flight", "Requests being served", ["model"], registry=r)
        self.rejected = Counter(P + "admission_rejections", "Requests refused with 429 by admission control, by "
                                "reason (queue_full, queue_timeout, predicted_ttft)", ["model", "reason"], registry=r)
        self.queued = Gauge(P + "requests_queued", "Requests waiting for an admission slot", registry=r)
        self.queue_time = Histogram(P + "admission_queue_seconds", "Time a request waited for an admission slot, of "
                                    "those that waited, by priority band (high: priority < 0, default: 0, low: > 0)",
                                    ["band"], buckets=_LATENCY, registry=r)  # fmt: skip
        self.queue_time_by_band = {band: self.queue_time.labels(band) for band in BANDS}
        self.ttft = Histogram(P + "time_to_first_token_seconds", "Arrival (the body received; a wait for an admission slot counts) to first output token, of streamed requests (a whole answer comes at once)", ["model"],
                              buckets=_LATENCY, registry=r)
        self.itl = Histogram(P + "inter_token_latency_seconds", "Time between output chunks, per token, of streamed requests", ["model"],
                             buckets=_ITL, registry=r)
        self.e2e = Histogram(P + "request_duration_seconds", "Arrival to last token", ["model"], buckets=_LATENCY,
                             registry=r)
        self.input_tokens = Counter(P + "input_tokens", "Prompt tokens", ["model"], registry=r)
        self.output_tokens = Counter(P + "output_tokens", "Generated tokens", ["model"], registry=r)
        self.cached_tokens = Counter(P + "cached_tokens", "Prompt tokens the engine found cached", ["model"],
                                     registry=r)
        self.prompt_len = Histogram(P + "input_sequence_tokens", "Prompt length", ["model"], buckets=_TOKENS,
                                    registry=r)
        self.routed = Counter(P + "routing_decisions", "Requests routed, by chosen worker and router mode",
                              ["model", "worker", "mode"], registry=r)
        self.routed_overlap = Counter(P + "routed_overlap_tokens", "Prompt tokens the router expected cached on the "
                                      "chosen worker, as its KV events said (compare with cached_tokens_total)",
                                      ["model"], registry=r)
        self.routed_promised = Counter(P + "routed_promised_tokens", "Prompt tokens the router counted cached on the "
                                       "chosen worker only because a prompt just sent there claims them "
                                       "(frontend.router.inflight_ttl_s), no KV event yet", ["model"], registry=r)
        self.disagg = Counter(P + "disaggregation_decisions",
                              "Where prefill ran, by reason (remote, short_prompt, predicted_local, queue_full, "
                              "no_prefill_workers, aggregated_worker, prefill_failed)", ["model", "reason"], registry=r)  # fmt: skip
        self.decode_guard = Counter(P + "decode_guard_moves", "Prefills the predicted rule's decode guard sent to the "
                                    "prefill pool that the decode worker would otherwise have run: it was streaming, "
                                    "and the prefill would have held its streams up past planner.itl_target_ms",
                                    ["model"], registry=r)  # fmt: skip
        self.routed_overlap_ratio = Histogram(P + "routed_overlap_ratio", "Share of each prompt the router expected "
                                              "cached on the chosen worker, as its KV events said", ["model"],
                                              buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0), registry=r)
        self.router_decision = Histogram(P + "router_decision_seconds", "Time to route one request", ["model"],
                                         buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
                                         registry=r)  # fmt: skip
        self.loop_lag = Histogram(P + "event_loop_lag_seconds", "How late this process's event loop woke from a "
                                  "0.1 s sleep: whatever held it (blocking code, garbage collection, no free CPU) "
                                  "held every request's stream as long", buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                                  0.5, 1.0, 2.5, 5.0), registry=r)
        self.ttft_prediction = Histogram(P + "ttft_prediction_ratio", "Measured / predicted time from sending a "
                                         "request to its first token, of streamed requests prefilled on the worker "
                                         "the ttft router chose (1: as predicted; over 1: later)", ["model"],
                                         buckets=(0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0),
                                         registry=r)  # fmt: skip
        self.slo = Counter(P + "slo_requests", "Finished requests, by whether TTFT and mean ITL both met "
                           "planner.ttft_target_ms and planner.itl_target_ms", ["model", "met"], registry=r)
        self.queue_depth = Gauge(P + "prefill_queue_depth", "Prefill jobs waiting, as last read for a decision",
                                 ["model"], registry=r)
        self.queue_wait = Histogram(P + "prefill_queue_seconds", "Remote prefill: submit to result (queue wait "
                                    "plus prefill); the SLA planner fits its prefill correction to it", ["model"],
                                    buckets=_LATENCY, registry=r)  # fmt: skip
        self.migrations = Counter(P + "migrations", "Requests resent to another worker after a failure",
                                  ["model", "reason"], registry=r)
        self.workers = Gauge(P + "workers", "Live workers seen in discovery", ["model", "role"], registry=r)
        self.kv_event_batches = Counter(P + "kv_event_batches", "Relayed KV event batches, by outcome",
                                        ["model", "status"], registry=r)
        self.kv_resyncs = Counter(P + "kv_resyncs", "Workers cleared after a gap in their KV events", ["model"],
                                  registry=r)
        self.load_reports = Counter(P + "load_reports", "Worker load reports received", ["model"], registry=r)

        self._models: dict[str, ModelMetrics] = {}

    def for_model(self, model: str) -> ModelMetrics:
        """The label children of one model, made on first use."""
        children = self._models.get(model)
        if children is None:
            children = self._models[model] = ModelMetrics(self, model)
        return children


class ModelMetrics:
    """One model's label children: what each request touches, looked up once per model."""

    def __init__(self, m: FrontendMetrics, model: str) -> None:
        self._m, self._model = m, model
        self.in_flight = m.in_flight.labels(model)
        self.ttft = m.ttft.labels(model)
        self.itl = m.itl.labels(model)
        self.e2e = m.e2e.labels(model)
        self.input_tokens = m.input_tokens.labels(model)
        self.output_tokens = m.output_tokens.labels(model)
        self.cached_tokens = m.cached_tokens.labels(model)
        self.prompt_len = m.prompt_len.labels(model)
        self.routed_overlap = m.routed_overlap.labels(model)
        self.routed_promised = m.routed_promised.labels(model)
        self.decode_guard = m.decode_guard.labels(model)
        self.routed_overlap_ratio = m.routed_overlap_ratio.labels(model)
        self.router_decision = m.router_decision.labels(model)
        self.ttft_prediction = m.ttft_prediction.labels(model)
        self.slo = {True: m.slo.labels(model, "true"), False: m.slo.labels(model, "false")}
        self.queue_depth = m.queue_depth.labels(model)
        self.queue_wait = m.queue_wait.labels(model)
        self._children: dict[tuple[str, ...], Any] = {}
        self.refusals = {reason: m.rejected.labels(model, reason) for reason in REFUSALS}  # all shown, even at 0

    def refused(self, reason: str) -> Any:
        return self.refusals[reason]

    def routed(self, worker: str, mode: str) -> Any:
        return self._child(self._m.routed, worker, mode)

    def disagg(self, reason: str) -> Any:
        return self._child(self._m.disagg, reason)

    def migrations(self, reason: str) -> Any:
        return self._child(self._m.migrations, reason)

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric._name, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(self._model, *values)
        return child
