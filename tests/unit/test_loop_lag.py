"""The event-loop lag the frontend exports: a loop held by blocking code is measured as late by as long, and
the warning says whether the loop's thread ran or waited meanwhile, and where it was."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

from dynamo_lite.infra.loop_lag import LoopLag


def spin(seconds: float) -> None:
    """Hold the loop with code: a busy wait, in Python (so the GIL is let go every few ms)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def cpu_used(text: str) -> float:
    match = re.search(r"its thread used ([0-9.]+) s of CPU", text)
    assert match, text
    return float(match[1])


async def test_a_blocked_loop_is_measured_late_by_the_time_it_was_held(caplog: pytest.LogCaptureFixture) -> None:
    lags: list[float] = []
    monitor = LoopLag(lags.append, interval_s=0.05, warn_s=0.2)
    monitor.start()
    await asyncio.sleep(0.3)  # free: every wake on time, give or take the scheduler
    free = list(lags)
    with caplog.at_level(logging.WARNING, logger="dynamo_lite.infra.loop_lag"):
        time.sleep(0.4)  # the loop held, as by a synchronous call that sleeps
        await asyncio.sleep(0.2)
    await monitor.stop()
    assert free and max(free) < 0.3, free
    held = max(lags)
    assert 0.3 <= held <= 1.0, lags  # the 0.4 s hold, less what was left of the sleep it fell in
    assert "event loop stalled" in caplog.text
    assert cpu_used(caplog.text) < 0.1 and "it waited" in caplog.text, caplog.text
    assert "time.sleep(0.4)" in caplog.text, caplog.text  # the watchdog's look at the loop's thread, halfway
    count = len(lags)
    await asyncio.sleep(0.2)
    assert len(lags) == count  # stopped: its task cancelled and awaited, its watchdog thread joined


async def test_a_loop_held_by_code_is_told_from_one_that_waited(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopLag(lambda _: None, interval_s=0.05, warn_s=0.2)
    monitor.start()
    await asyncio.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="dynamo_lite.infra.loop_lag"):
        spin(0.4)
        await asyncio.sleep(0.1)
    await monitor.stop()
    assert cpu_used(caplog.text) >= 0.25 and "code or a garbage collection held it" in caplog.text, caplog.text
    assert "in spin" in caplog.text, caplog.text  # its frames: the busy function, where the stall was
