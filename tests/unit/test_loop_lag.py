"""The event-loop lag the frontend exports: a loop held by blocking code is measured as late by as long."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from dynamo_lite.infra.loop_lag import LoopLag


async def test_a_blocked_loop_is_measured_late_by_the_time_it_was_held(caplog: pytest.LogCaptureFixture) -> None:
    lags: list[float] = []
    monitor = LoopLag(lags.append, interval_s=0.05, warn_s=0.2)
    monitor.start()
    await asyncio.sleep(0.3)  # free: every wake on time, give or take the scheduler
    free = list(lags)
    with caplog.at_level(logging.WARNING, logger="dynamo_lite.infra.loop_lag"):
        time.sleep(0.4)  # the loop held, as by a synchronous call
        await asyncio.sleep(0.2)
    await monitor.stop()
    assert free and max(free) < 0.3, free
    held = max(lags)
    assert 0.3 <= held <= 1.0, lags  # the 0.4 s hold, less what was left of the sleep it fell in
    assert "event loop stalled" in caplog.text
    count = len(lags)
    await asyncio.sleep(0.2)
    assert len(lags) == count  # stopped: its task cancelled and awaited
