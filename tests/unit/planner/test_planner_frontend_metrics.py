"""Traffic from two scrapes of the frontend's /metrics: the prompt-length distribution, cached and remote shares,
the remote prefills' time."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.infra import free_port
from dynamo_lite.planning.frontend_metrics import FrontendScraper, totals, traffic


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
    for took in (0.5, 1.5):
        m.queue_wait.labels("m").observe(took)
    t = traffic(before, totals(generate_latest(reg).decode(), "m"), 10.0)
    assert sum(s for _, s in t.isl_dist) == pytest.approx(1.0)
    assert sum(x * s for x, s in t.isl_dist) == pytest.approx(20600 / 3)  # the mean is the histogram's own
    assert [round(s, 3) for _, s in t.isl_dist] == [0.667, 0.333]
    assert t.cached_share == pytest.approx(0.1) and t.remote_share == pytest.approx(1 / 3)
    assert t.remote_prefill_s == pytest.approx(1.0)  # what the prefill pool's correction is fitted to


def test_long_prompts_without_prefill_workers_count_towards_the_remote_share():
    """With no prefill workers the planner must still see what a prefill pool would take, to weigh one."""
    reg = CollectorRegistry()
    m = FrontendMetrics(reg)
    before = totals(generate_latest(reg).decode(), "m")
    m.requests.labels("m", "completions", "200").inc(4)
    m.disagg.labels("m", "short_prompt").inc(3)
    m.disagg.labels("m", "no_prefill_workers").inc(1)
    assert traffic(before, totals(generate_latest(reg).decode(), "m"), 10.0).remote_share == pytest.approx(0.25)


async def test_several_frontend_processes_are_scraped_and_summed_as_one_frontend():
    """`frontend.processes: 2`: each process's own /metrics (real HTTP servers here), summed per scrape."""
    registries = [CollectorRegistry(), CollectorRegistry()]
    processes = [FrontendMetrics(r) for r in registries]
    runners, urls = [], []
    for registry in registries:
        app = web.Application()

        async def scrape(_: web.Request, registry: CollectorRegistry = registry) -> web.Response:
            return web.Response(body=generate_latest(registry), content_type="text/plain")

        app.router.add_get("/metrics", scrape)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}/metrics")
    try:
        async with aiohttp.ClientSession() as session:
            scraper = FrontendScraper(urls, "m", session)
            assert await scraper.scrape(0.0) is None  # the first scrape only sets the baseline
            for m, n in zip(processes, (3, 1), strict=True):
                m.requests.labels("m", "completions", "200").inc(n)
                m.input_tokens.labels("m").inc(100 * n)
            t = await scraper.scrape(2.0)
            assert t is not None and t.request_rate == pytest.approx(2.0) and t.isl == pytest.approx(100)
            # By name, resolved at each scrape (as the planner reads a Kubernetes headless Service):
            # localhost is 127.0.0.1 here, so the same two processes.
            named = FrontendScraper([u.replace("127.0.0.1", "localhost") for u in urls], "m", session,
                                    every_address=True)
            assert await named.scrape(0.0) is None
            processes[0].requests.labels("m", "completions", "200").inc(4)
            t = await named.scrape(1.0)
            assert t is not None and t.request_rate == pytest.approx(4.0)
            await runners[1].cleanup()  # one process down: no traffic figure rather than half of it
            assert await scraper.scrape(4.0) is None
    finally:
        for runner in runners:
            await runner.cleanup()
