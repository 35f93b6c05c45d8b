"""Traffic from two scrapes of the frontend's /metrics: the prompt-length distribution, cached and remote shares."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.planning.frontend_metrics import totals, traffic


def test_distribution_and_shares_over_the_interval():
    reg = CollectorRegistry()
    m = FrontendMetrics(reg)
    m.prompt_len.labels("m").observe(100)  # before the first scrape: not in the interval
    before = totals(generate_latest(reg).decode(), "m")
    for n in (300, 300, 20000):
        m.prompt_len.labels("m").observe(n)
        m.input_tokens.labels("m").inc(n)
        m.requests.labels("m", "completions", "200").inc()
    m.cached_tokens.labels("m").inc(2060)
    m.disagg.labels("m", "short_prompt").inc(2)
    m.disagg.labels("m", "queue_full").inc(1)
    t = traffic(before, totals(generate_latest(reg).decode(), "m"), 10.0)
    assert sum(s for _, s in t.isl_dist) == pytest.approx(1.0)
    assert sum(x * s for x, s in t.isl_dist) == pytest.approx(20600 / 3)  # the mean is the histogram's own
    assert [round(s, 3) for _, s in t.isl_dist] == [0.667, 0.333]
    assert t.cached_share == pytest.approx(0.1) and t.remote_share == pytest.approx(1 / 3)
