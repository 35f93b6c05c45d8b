"""The planner's Prometheus metrics: every input, every decision, every replica count.

On a registry passed in (never the global default); names dynamo_lite_planner_*.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from planner.types import Decision, Observation, Pool

P = "dynamo_lite_planner_"


class PlannerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = self.registry = registry
        self.queue = Gauge(P + "prefill_queue_depth", "Prefill jobs pending in JetStream (-1: unknown)", registry=r)
        self.in_flight = Gauge(P + "prefill_in_flight", "Prefill jobs handed out, not yet acked (-1: unknown)",
                               registry=r)
        self.kv = Gauge(P + "decode_kv_usage", "KV-cache usage (0..1) reported by each decode worker", ["worker"],
                        registry=r)
        self.kv_mean = Gauge(P + "decode_kv_usage_mean", "Mean KV-cache usage of the decode workers", registry=r)
        self.waiting = Gauge(P + "decode_waiting", "Requests waiting on the decode workers, summed", registry=r)
        self.running = Gauge(P + "decode_running", "Requests running on the decode workers, summed", registry=r)
        self.reporting = Gauge(P + "decode_workers_reporting", "Decode workers with a fresh load report",
                               registry=r)
        self.rate = Gauge(P + "request_rate", "Requests per second finished at the frontend (-1: unknown)",
                          registry=r)
        self.isl = Gauge(P + "isl_tokens", "Mean input tokens per request (-1: unknown)", registry=r)
        self.osl = Gauge(P + "osl_tokens", "Mean output tokens per request (-1: unknown)", registry=r)
        self.ttft = Gauge(P + "ttft_seconds", "Mean time to first token (-1: unknown)", registry=r)
        self.itl = Gauge(P + "itl_seconds", "Mean inter-token latency (-1: unknown)", registry=r)
        self.replicas = Gauge(P + "replicas", "Workers each pool has (starting included, draining not)", ["pool"],
                              registry=r)
        self.proposed = Gauge(P + "proposed_replicas", "What the policy asked for, per pool", ["pool"], registry=r)
        self.target = Gauge(P + "target_replicas", "What the planner decided, per pool", ["pool"], registry=r)
        self.decisions = Counter(P + "decisions", "Decisions per pool and direction (up, down, hold)",
                                 ["pool", "direction"], registry=r)
        self.correction = Gauge(P + "correction_factor", "SLA policy: observed over predicted latency", ["pool"],
                                registry=r)
        self.forecast_margin = Gauge(P + "forecast_margin", "SLA policy: requests/s planned above the predicted "
                                     "rate, from how far the rate came above its predictions", registry=r)
        self.scale_failures = Counter(P + "scale_failures", "Scaling actions that failed", registry=r)
        self.dry_run = Gauge(P + "dry_run", "1 when decisions are only logged", registry=r)

    def record(self, obs: Observation, decision: Decision) -> None:
        self.queue.set(_known(obs.prefill_queue))
        self.in_flight.set(_known(obs.prefill_in_flight))
        self.kv.clear()
        for w in obs.decode:
            self.kv.labels(worker=w.worker_id).set(w.kv_usage)
        self.kv_mean.set(sum(w.kv_usage for w in obs.decode) / len(obs.decode) if obs.decode else 0.0)
        self.waiting.set(sum(w.waiting for w in obs.decode))
        self.running.set(sum(w.running for w in obs.decode))
        self.reporting.set(len(obs.decode))
        t = obs.traffic
        self.rate.set(_known(t.request_rate if t else None))
        self.isl.set(_known(t.isl if t else None))
        self.osl.set(_known(t.osl if t else None))
        self.ttft.set(_known(t.ttft_s if t else None))
        self.itl.set(_known(t.itl_s if t else None))
        for pool in Pool:
            d = decision.of(pool)
            self.replicas.labels(pool=pool.value).set(d.current)
            self.proposed.labels(pool=pool.value).set(d.proposed)
            self.target.labels(pool=pool.value).set(d.target)
            direction = "up" if d.delta > 0 else "down" if d.delta < 0 else "hold"
            self.decisions.labels(pool=pool.value, direction=direction).inc()


def _known(value: float | None) -> float:
    return -1.0 if value is None else float(value)
