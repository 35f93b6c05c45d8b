"""The profiler's HTTP sweep against a running mock engine agrees with the pure-core sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamo_lite.engines.mock import MockEngineArgs, engine_command
from dynamo_lite.engines.mock.scheduler import SchedulerConfig
from dynamo_lite.engines.mock.timing import RooflineTiming
from dynamo_lite.infra import ManagedProcess, free_port
from dynamo_lite.infra.health import http_ok
from dynamo_lite.planning.profiler.http_sweep import HttpSweep
from dynamo_lite.planning.profiler.mock_sweep import sweep

pytestmark = pytest.mark.integration


async def test_http_sweep_of_a_mock_engine_matches_its_core(tmp_path: Path) -> None:
    port = free_port()
    engine = ManagedProcess("mock", engine_command(MockEngineArgs(model="m", port=port)), tmp_path / "mock.log")
    engine.start()
    try:
        await engine.wait_healthy(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 30)
        over_http = await HttpSweep(f"http://127.0.0.1:{port}", "m", batch=4, steps=16).sweep(
            [2048, 8192], [1024], [1, 8], progress=lambda _: None)
    finally:
        await engine.stop()
    core = sweep(SchedulerConfig(), RooflineTiming(), "mock", [2048, 8192], [1024], [1, 8], progress=lambda _: None)
    for got, want in zip(over_http.prefill, core.prefill):
        assert want.ttft_s * 0.8 < got.ttft_s < want.ttft_s * 2 + 0.02, (got, want)
    for got, want in zip(over_http.decode, core.decode):
        assert want.itl_s * 0.8 < got.itl_s < want.itl_s * 2, (got, want)
