"""What the arena reads off the frontends' /metrics, over several processes: a counter by label, and how many
observations of a histogram (the event-loop lag) went past one of its bounds, and its quantiles."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.cluster import counter_by_label, histogram_above, histogram_quantiles  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402


def serve(decisions: dict[str, int], lags: list[float], servers: list) -> str:
    registry = CollectorRegistry()
    routed = Counter("routing_decisions", "", ["worker"], registry=registry)
    for worker, n in decisions.items():
        routed.labels(worker).inc(n)
    lag = Histogram("loop_lag_seconds", "", buckets=(0.1, 0.25, 1.0), registry=registry)
    for value in lags:
        lag.observe(value)
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    servers.append(server)
    return f"http://127.0.0.1:{port}"


def test_counters_and_histograms_are_summed_over_processes() -> None:
    servers: list = []
    try:
        urls = [serve({"w0": 3, "w1": 1}, [0.01, 0.3, 2.0], servers), serve({"w1": 2}, [0.2, 0.26], servers)]
        assert counter_by_label(urls, "routing_decisions", "worker") == {"w0": 3.0, "w1": 3.0}
        assert histogram_above(urls, "loop_lag_seconds", 0.25) == 3.0  # 0.3 and 2.0, and 0.26
        assert histogram_above(urls, "loop_lag_seconds", 1.0) == 1.0
        # as Prometheus's histogram_quantile: buckets 1 | 2 | 4 | 5 cumulative at 0.1 | 0.25 | 1.0 | +Inf
        assert histogram_quantiles(urls, "loop_lag_seconds", (0.1, 0.5, 0.9)) == [0.05, 0.4375, 1.0]
        assert histogram_quantiles([urls[0]], "routing_decisions_missing", (0.5,)) is None
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
