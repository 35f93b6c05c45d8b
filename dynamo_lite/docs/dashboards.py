"""Grafana dashboards, defined here and rendered to JSON (deploy/grafana/dashboards/).

Every panel's queries are plain PromQL over metrics the components export (the
frontend's `dynamo_lite_frontend_*`, the agents' `dynamo_lite_worker_*`, the
planner's `dynamo_lite_planner_*`, the supervisor's `dynamo_lite_supervisor_*`, the
engines' `vllm:*`) and the target labels
from the file-SD list (`namespace`, `component`, `role`, `model`, `worker_id`).
An integration test runs every query against a real Prometheus scraping a real
cluster and fails on any query that returns nothing.

`python -m dynamo_lite.docs` writes them; a test keeps the committed ones current.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

F = "dynamo_lite_frontend_"
W = "dynamo_lite_worker_"
PL = "dynamo_lite_planner_"
SV = "dynamo_lite_supervisor_"
RATE = "[1m]"
OUT = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def quantile(q: float, metric: str, by: str = "model") -> Query:
    return Query(f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{RATE})))", f"p{int(q * 100)} {{{{{by}}}}}")


def rate(metric: str, by: str = "model", where: str = "") -> str:
    selector = f"{{{where}}}" if where else ""
    return f"sum by ({by}) (rate({metric}{selector}{RATE}))"


OVERVIEW = Dashboard("dl-overview", "dynamo_lite / overview", "Traffic, latency against the SLOs, tokens.", (
    Panel("Request rate", (Query(rate(F + "requests_total", "model, status"), "{{model}} {{status}}"),), "reqps"),
    Panel("Error rate (4xx, 5xx, stream errors)",
          (Query(rate(F + "requests_total", "model, status", 'status!~"2.."'), "{{model}} {{status}}"),), "reqps"),
    Panel("Time to first token", (quantile(0.5, F + "time_to_first_token_seconds"),
                                  quantile(0.99, F + "time_to_first_token_seconds")), "s"),
    Panel("Inter-token latency", (quantile(0.5, F + "inter_token_latency_seconds"),
                                  quantile(0.99, F + "inter_token_latency_seconds")), "s"),
    Panel("Goodput: requests within both SLOs", (
        Query(rate(F + "slo_requests_total", "model", 'met="true"'), "within SLOs {{model}}"),
        Query(rate(F + "slo_requests_total", "model"), "all {{model}}"),
    ), "reqps", "A request counts when its TTFT and its mean inter-token latency both meet planner.ttft_target_ms "
                "and planner.itl_target_ms."),
    Panel("Tokens", (Query(rate(F + "input_tokens_total"), "in {{model}}"),
                     Query(rate(F + "output_tokens_total"), "out {{model}}"),
                     Query(rate(F + "cached_tokens_total"), "cached {{model}}")), "short"),
    Panel("In flight", (Query(f"sum by (model) ({F}requests_in_flight)", "{{model}}"),), "short"),
    Panel("Admission: refused with 429", (Query(rate(F + "admission_rejections_total", "model, reason"),
                                                "{{model}} {{reason}}"),), "reqps",
          "queue_full and queue_timeout: the admission queue (max_queued_requests, queue_timeout_s); predicted_ttft: "
          "refused before any engine, predicted to miss planner.ttft_target_ms by frontend.admission's factor."),
    Panel("Admission queue by priority band", (
        Query(rate(F + "admission_queue_seconds_count", "band"), "queued {{band}}"),
        quantile(0.99, F + "admission_queue_seconds", "band"),
    ), "short", "Requests that waited for a slot (per second) and their p99 wait, by vLLM priority band (high: "
                "priority < 0, default: 0, low: > 0); a freed slot goes to the lowest priority first."),
    Panel("Restarts by orchestrator up", (
        Query(f"sum by (part) (increase({SV}restarts_total[15m]))", "{{part}}"),
        Query(f"sum by (part) ({SV}given_up_total)", "given up: {{part}}"),
    ), "short", "Parts that died on their own and were restarted (workers: replaced) in the last 15 minutes; "
                "a part given up after a crash loop shows in `orchestrator status` with its log tail."),
))

ROUTING = Dashboard("dl-routing", "dynamo_lite / routing", "Where requests go and how much prefix they find.", (
    Panel("Decisions per worker", (Query(rate(F + "routing_decisions_total", "worker, mode"), "{{worker}} ({{mode}})"),),
          "reqps"),
    Panel("Prefix hit rate (frontend view)", (Query(
        f"sum(rate({F}cached_tokens_total{RATE})) / sum(rate({F}input_tokens_total{RATE}))", "cached / prompt"),),
        "percentunit"),
    Panel("Prefix hit rate (engines)", (Query(
        f"sum by (worker_id) (rate(vllm:prefix_cache_hits_total{RATE})) / "
        f"sum by (worker_id) (rate(vllm:prefix_cache_queries_total{RATE}))", "{{worker_id}}"),), "percentunit"),
    Panel("Router's index against the engines", (
        Query(f"{rate(F + 'routed_overlap_tokens_total')} / {rate(F + 'cached_tokens_total')}",
              "expected by KV events / found {{model}}"),
        Query(f"{rate(F + 'routed_promised_tokens_total')} / {rate(F + 'cached_tokens_total')}",
              "promised / found {{model}}"),
    ), "percentunit", "Prompt tokens the router expected cached on the worker it chose, over those the engines "
                      "found cached. Near 100%: the index follows what the engines hold. Well above: KV events lost "
                      "or late (see kv_resyncs_total). A prefill run remotely reports the prefill worker's hits, so "
                      "compare where prefill is local. Promised: counted cached because a prompt just sent to that "
                      "worker has them, before its KV events (frontend.router.inflight_ttl_s)."),
    Panel("Routed overlap (share of prompt expected cached)", (
        quantile(0.5, F + "routed_overlap_ratio"), quantile(0.9, F + "routed_overlap_ratio")), "percentunit"),
    Panel("Router decision latency", (quantile(0.5, F + "router_decision_seconds"),
                                      quantile(0.99, F + "router_decision_seconds")), "s"),
    Panel("TTFT prediction: measured / predicted", (quantile(0.1, F + "ttft_prediction_ratio"),
                                                     quantile(0.5, F + "ttft_prediction_ratio"),
                                                     quantile(0.9, F + "ttft_prediction_ratio")), "none",
          "How late each first token came against the ttft router's prediction, of streamed requests prefilled "
          "where they were routed. 1 is exact; a p50 that stays off 1 means the model's rates are off "
          "(it learns them from these first tokens), a wide p10-p90 that the engines' timing is noisy."),
    Panel("Frontend event-loop lag", (quantile(0.99, F + "event_loop_lag_seconds", "instance"),
                                      Query(f"max by (instance) (increase({F}event_loop_lag_seconds_count{RATE})"
                                            f" - ignoring(le) "
                                            f"increase({F}event_loop_lag_seconds_bucket{{le=\"0.25\"}}{RATE}))",
                                            "stalls > 0.25 s {{instance}}")), "s",
          "How late each frontend process's event loop woke from a 0.1 s sleep. A stall holds every stream that "
          "process serves; its log names each of 0.5 s or more."),
))

DISAGGREGATION = Dashboard("dl-disagg", "dynamo_lite / disaggregation", "Local and remote prefill, queue, KV transfer.", (
    Panel("Prefill placement by reason", (Query(rate(F + "disaggregation_decisions_total", "reason"), "{{reason}}"),
                                          Query(rate(F + "decode_guard_moves_total"), "of remote: moved by the decode "
                                                "guard {{model}}")), "reqps",
          "Under frontend.disaggregation.decision: predicted, the decode guard sends a prompt to the prefill pool "
          "rather than hold up the streams on its decode worker; those count as remote and once more here."),
    Panel("Prefill queue depth", (Query(f"max by (model) ({F}prefill_queue_depth)", "{{model}}"),), "short",
          "Each frontend process reads the same queue: the largest of their last reads."),
    Panel("Remote prefill: submit to result", (quantile(0.5, F + "prefill_queue_seconds"),
                                               quantile(0.99, F + "prefill_queue_seconds")), "s"),
    Panel("Prefill jobs on workers", (Query(rate(W + "prefill_jobs_total", "outcome, worker_id"),
                                            "{{worker_id}} {{outcome}}"),), "ops"),
    Panel("KV transfer time (decode engines)", (Query(
        f"sum by (worker_id) (rate(vllm:nixl_xfer_time_seconds_sum{RATE})) / "
        f"sum by (worker_id) (rate(vllm:nixl_xfer_time_seconds_count{RATE}))", "{{worker_id}}"),), "s"),
    Panel("KV transferred", (Query(f"sum by (worker_id) (rate(vllm:nixl_bytes_transferred_sum{RATE}))",
                                   "{{worker_id}}"),), "Bps"),
))

WORKERS = Dashboard("dl-workers", "dynamo_lite / workers", "Engine load per worker and role.", (
    Panel("KV cache usage", (Query("max by (worker_id, role) (vllm:kv_cache_usage_perc)", "{{worker_id}} ({{role}})"),),
          "percentunit"),
    Panel("Running requests", (Query("sum by (worker_id, role) (vllm:num_requests_running)", "{{worker_id}}"),)),
    Panel("Waiting requests", (Query("sum by (worker_id, role) (vllm:num_requests_waiting)", "{{worker_id}}"),)),
    Panel("Generation tokens by role", (Query(rate("vllm:generation_tokens_total", "role"), "{{role}}"),), "short"),
    Panel("Workers registered", (Query(f"sum by (role) ({W}registered)", "{{role}}"),)),
    Panel("KV event batches relayed", (Query(rate(W + "kv_event_batches_total", "worker_id, path"),
                                             "{{worker_id}} {{path}}"),), "ops"),
))

PLANNER = Dashboard("dl-planner", "dynamo_lite / planner", "What the planner sees, decides and runs.", (
    Panel("Replicas per pool", (Query(f"max by (pool) ({PL}replicas)", "now {{pool}}"),
                                Query(f"max by (pool) ({PL}target_replicas)", "target {{pool}}"),
                                Query(f"max by (pool) ({PL}proposed_replicas)", "proposed {{pool}}"))),
    Panel("Input: prefill queue", (Query(f"max({PL}prefill_queue_depth)", "pending"),
                                   Query(f"max({PL}prefill_in_flight)", "in flight"))),
    Panel("Input: decode KV usage", (Query(f"max({PL}decode_kv_usage_mean)", "mean"),
                                     Query(f"max by (worker) ({PL}decode_kv_usage)", "{{worker}}")), "percentunit"),
    Panel("Input: traffic", (Query(f"max({PL}request_rate)", "req/s"), Query(f"max({PL}isl_tokens)", "ISL"),
                             Query(f"max({PL}osl_tokens)", "OSL"))),
    Panel("Input: latency seen", (Query(f"max({PL}ttft_seconds)", "TTFT"), Query(f"max({PL}itl_seconds)", "ITL")), "s"),
    Panel("Decisions", (Query(f"sum by (pool, direction) (increase({PL}decisions_total[5m]))",
                              "{{pool}} {{direction}}"),)),
))

DASHBOARDS = (OVERVIEW, ROUTING, DISAGGREGATION, WORKERS, PLANNER)


def render(dashboard: Dashboard) -> dict[str, object]:
    panels = []
    for i, panel in enumerate(dashboard.panels):
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": panel.title,
            "description": panel.description,
            "datasource": {"type": "prometheus", "uid": "prometheus"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "expr": q.expr, "legendFormat": q.legend,
                         "datasource": {"type": "prometheus", "uid": "prometheus"}}
                        for j, q in enumerate(panel.queries)],
        })  # fmt: skip
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": ["dynamo_lite"], "timezone": "browser", "schemaVersion": 39, "version": 1,
        "refresh": "10s", "time": {"from": "now-30m", "to": "now"}, "panels": panels,
    }  # fmt: skip


def all_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expr) for every query of every panel."""
    return [(d.uid, p.title, q.expr) for d in DASHBOARDS for p in d.panels for q in p.queries]


def rendered_files() -> dict[str, str]:
    return {f"{d.uid}.json": json.dumps(render(d), indent=2) + "\n" for d in DASHBOARDS}
