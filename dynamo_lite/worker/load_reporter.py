"""Scrape an engine's Prometheus `/metrics` and publish its load on NATS.

Reads `vllm:num_requests_running`, `vllm:num_requests_waiting` and
`vllm:kv_cache_usage_perc` (summed over the engine's label sets) every interval
and publishes a `LoadReport` on `<ns>.load.<worker_id>`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dynamo_lite.protocol import LoadReport, WorkerId
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Publish = Callable[[LoadReport], Awaitable[None]]


def parse_engine_metrics(text: str) -> dict[str, float]:
    """Sum of each sample name over its label sets, e.g. {'vllm:num_requests_running': 2.0}."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def cache_blocks(text: str) -> int:
    """`num_gpu_blocks` from vLLM's `vllm:cache_config_info`, 0 when absent."""
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:cache_config_info":
            for sample in family.samples:
                value = sample.labels.get("num_gpu_blocks")
                if value and value.isdigit():
                    return int(value)
    return 0


def load_report(worker_id: WorkerId, metrics: dict[str, float]) -> LoadReport:
    return LoadReport(
        worker_id=worker_id,
        running=int(metrics.get("vllm:num_requests_running", 0)),
        waiting=int(metrics.get("vllm:num_requests_waiting", 0)),
        kv_usage=float(metrics.get("vllm:kv_cache_usage_perc", 0.0)),
        ts=time.time(),
    )


class LoadReporter:
    def __init__(self, worker_id: WorkerId, engine_url: str, publish: Publish, interval_s: float = 1.0) -> None:
        self.worker_id = worker_id
        self.metrics_url = f"{engine_url}/metrics"
        self.publish = publish
        self.interval_s = interval_s
        self.last: LoadReport | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, session: aiohttp.ClientSession) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(session), name=f"load-reporter-{self.worker_id}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self, session: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with session.get(self.metrics_url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    text = await resp.text()
                self.last = load_report(self.worker_id, parse_engine_metrics(text))
                await self.publish(self.last)
            except (aiohttp.ClientError, TimeoutError) as e:
                log.warning("worker %s: engine metrics unavailable (%s)", self.worker_id, e)
            await asyncio.sleep(self.interval_s)
