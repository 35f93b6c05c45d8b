"""Traffic over the last interval, from the frontend's Prometheus /metrics.

Counters are turned into rates and means by differencing two scrapes: the
request rate from arrivals (finished requests plus the change in those in
flight, so that it does not lag a backlog), ISL and OSL from token counters per
finished request, TTFT, ITL and the remote prefills' time (submit to result)
from their histograms' sum and count. Several frontend processes
(`frontend.processes`) are scraped each at its own metrics port and their
samples summed, as one frontend.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from planner.types import Traffic

log = logging.getLogger(__name__)

P = "dynamo_lite_frontend_"


@dataclass(frozen=True)
class FrontendMetricNames:
    """Sample names read from the frontend (dynamo_lite/frontend/metrics.py)."""

    requests: str = P + "requests_total"
    input_tokens: str = P + "input_tokens_total"
    output_tokens: str = P + "output_tokens_total"
    ttft_sum: str = P + "time_to_first_token_seconds_sum"
    ttft_count: str = P + "time_to_first_token_seconds_count"
    itl_sum: str = P + "inter_token_latency_seconds_sum"
    itl_count: str = P + "inter_token_latency_seconds_count"
    in_flight: str = P + "requests_in_flight"  # a gauge: arrivals = finished + its change
    cached_tokens: str = P + "cached_tokens_total"
    isl_bucket: str = P + "input_sequence_tokens_bucket"  # by `le`: the prompt-length distribution
    isl_sum: str = P + "input_sequence_tokens_sum"
    disagg: str = P + "disaggregation_decisions_total"  # by `reason`: where prefill ran
    remote_prefill_sum: str = P + "prefill_queue_seconds_sum"  # remote prefills, submit to result
    remote_prefill_count: str = P + "prefill_queue_seconds_count"


REMOTE_ELIGIBLE = ("remote", "queue_full", "prefill_failed", "no_prefill_workers")
"""Disaggregation reasons of requests long and uncached enough for the prefill pool, had it room or workers
(frontend/disagg.py)."""


def totals(text: str, model: str, names: FrontendMetricNames = FrontendMetricNames()) -> dict[str, float]:
    """Each wanted sample summed over its label sets for `model`; histogram buckets as `name|le` and
    disaggregation decisions as `name|reason`."""
    wanted = set(vars(names).values())
    out = dict.fromkeys(wanted, 0.0)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name not in wanted or s.labels.get("model", model) != model:
                continue
            key = s.name
            if s.name == names.isl_bucket:
                key = f"{s.name}|{s.labels['le']}"
            elif s.name == names.disagg:
                key = f"{s.name}|{s.labels.get('reason', '')}"
            out[key] = out.get(key, 0.0) + s.value
            if key != s.name:
                out[s.name] += s.value
    return out


def isl_distribution(prev: dict[str, float], now: dict[str, float], names: FrontendMetricNames
                     ) -> tuple[tuple[float, float], ...]:
    """(prompt tokens, share) per histogram bucket over the interval: each bucket at its geometric middle,
    then all scaled so that the mean is the histogram's own (sum / count)."""
    edges = sorted((float(k.split("|")[1]), k) for k in now if k.startswith(names.isl_bucket + "|"))
    counts, below, lo = [], 0.0, 1.0
    for le, key in edges:
        cumulative = max(0.0, now[key] - prev.get(key, 0.0))
        n = cumulative - below
        below = cumulative
        hi = le if le != float("inf") else lo * 4
        if n > 0:
            counts.append((math.sqrt(lo * hi), n))
        lo = hi
    total = sum(n for _, n in counts)
    if total <= 0:
        return ()
    mean = sum(x * n for x, n in counts) / total
    true_mean = max(0.0, now[names.isl_sum] - prev.get(names.isl_sum, 0.0)) / total
    scale = true_mean / mean if mean > 0 and true_mean > 0 else 1.0
    return tuple((x * scale, n / total) for x, n in counts)


def traffic(prev: dict[str, float], now: dict[str, float], dt: float,
            names: FrontendMetricNames = FrontendMetricNames()) -> Traffic:
    def delta(name: str) -> float:
        return max(0.0, now[name] - prev[name])  # a restarted frontend resets its counters

    requests = delta(names.requests)
    arrived = max(0.0, requests + now[names.in_flight] - prev[names.in_flight])
    ttft_n, itl_n, remote_n = delta(names.ttft_count), delta(names.itl_count), delta(names.remote_prefill_count)
    decided = delta(names.disagg)
    eligible = sum(max(0.0, now.get(f"{names.disagg}|{r}", 0.0) - prev.get(f"{names.disagg}|{r}", 0.0))
                   for r in REMOTE_ELIGIBLE)
    prompt = delta(names.input_tokens)
    return Traffic(
        request_rate=arrived / dt if dt > 0 else 0.0,
        isl=delta(names.input_tokens) / requests if requests else None,
        osl=delta(names.output_tokens) / requests if requests else None,
        ttft_s=delta(names.ttft_sum) / ttft_n if ttft_n else None,
        itl_s=delta(names.itl_sum) / itl_n if itl_n else None,
        isl_dist=isl_distribution(prev, now, names),
        cached_share=min(1.0, delta(names.cached_tokens) / prompt) if prompt else None,
        remote_share=eligible / decided if decided else None,
        remote_prefill_s=delta(names.remote_prefill_sum) / remote_n if remote_n else None,
    )


class FrontendScraper:
    """`await scrape(now)` -> Traffic since the previous scrape (None: first scrape, a process unreachable,
    or the set of processes changed).

    `urls`: the /metrics of every frontend process; their samples are summed. With `every_address`, each
    URL's host is resolved at every scrape and each of its addresses scraped: a Kubernetes headless
    Service names every ready frontend pod. A process restarted between two scrapes starts its counters
    from 0, so that interval counts less than it had."""

    def __init__(self, urls: list[str], model: str, session: aiohttp.ClientSession,
                 names: FrontendMetricNames = FrontendMetricNames(), every_address: bool = False) -> None:
        self.urls = urls
        self.model = model
        self.session = session
        self.names = names
        self.every_address = every_address
        self._prev: tuple[float, dict[str, float]] | None = None
        self._scraped: list[str] = []

    async def scrape(self, now: float) -> Traffic | None:
        current: dict[str, float] = {}
        try:
            targets = await self._targets()
        except OSError as e:
            log.debug("planner: frontend addresses of %s unavailable (%s)", self.urls, e)
            self._prev = None
            return None
        for url in targets:
            try:
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    resp.raise_for_status()
                    for key, value in totals(await resp.text(), self.model, self.names).items():
                        current[key] = current.get(key, 0.0) + value
            except (aiohttp.ClientError, TimeoutError) as e:
                log.debug("planner: frontend metrics at %s unavailable (%s)", url, e)
                self._prev = None
                return None
        if targets != self._scraped:  # a process came or went: its counters are not in both sums
            self._scraped, self._prev = targets, None
        prev, self._prev = self._prev, (now, current)
        if prev is None:
            return None
        return traffic(prev[1], current, now - prev[0], self.names)

    async def _targets(self) -> list[str]:
        if not self.every_address:
            return self.urls
        loop = asyncio.get_running_loop()
        out = []
        for url in self.urls:
            parts = urlsplit(url)
            infos = await loop.getaddrinfo(parts.hostname, parts.port, type=socket.SOCK_STREAM)
            for address in sorted({info[4][0] for info in infos}):
                host = f"[{address}]" if ":" in address else address
                out.append(urlunsplit(parts._replace(netloc=f"{host}:{parts.port}")))
        return out
