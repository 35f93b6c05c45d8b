"""The admission queue on the real event loop: who gets a freed slot, timeouts, cancellation, and
refusals by predicted TTFT through the HTTP app."""

from __future__ import annotations

import asyncio

import pytest

from dynamo_lite.frontend.admission import Admission, Refused, band
from dynamo_lite.frontend.app import STATE
from tests.unit.frontend.conftest import Script, pieces
from tests.waiting import eventually_async

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]


async def hold(admission: Admission, name: str, priority: int, order: list[str], release: asyncio.Event) -> None:
    async with admission.slot(lambda: priority):
        order.append(name)
        await release.wait()


async def test_a_freed_slot_goes_to_the_lowest_priority_then_the_earliest() -> None:
    waited: list[tuple[int, float]] = []
    admission = Admission(limit=1, max_queued=10, timeout_s=10, waited=lambda p, s: waited.append((p, s)))
    order: list[str] = []
    release = {n: asyncio.Event() for n in ("first", "low", "default-a", "high", "default-b")}
    tasks = [asyncio.create_task(hold(admission, "first", 0, order, release["first"]))]
    await eventually_async(lambda: order == ["first"], timeout=2, interval=0.001, what="the first holds the slot")
    for name, priority in (("low", 5), ("default-a", 0), ("high", -3), ("default-b", 0)):
        tasks.append(asyncio.create_task(hold(admission, name, priority, order, release[name])))
        await asyncio.sleep(0)  # (arrival order is the order of these calls)
    await eventually_async(lambda: admission.waiting == 4, timeout=2, interval=0.001, what="four waiting")
    for served, name in enumerate(("first", "high", "default-a", "default-b"), start=2):
        release[name].set()
        await eventually_async(lambda n=served: len(order) == n, timeout=2, interval=0.001, what="the slot passed on")
    release["low"].set()
    await asyncio.gather(*tasks)
    assert order == ["first", "high", "default-a", "default-b", "low"]
    assert [p for p, _ in waited] == [-3, 0, 0, 5]  # told only of those that waited
    assert admission.running == 0 and admission.waiting == 0


async def test_priority_is_read_only_for_a_request_that_waits() -> None:
    admission = Admission(limit=1, max_queued=1, timeout_s=1)
    asked: list[str] = []

    def priority() -> int:
        asked.append("asked")
        return 0

    async with admission.slot(priority):
        assert asked == [] and admission.running == 1
    assert admission.running == 0


async def test_a_full_queue_and_a_long_wait_are_refused_and_the_waiter_leaves_the_queue() -> None:
    admission = Admission(limit=1, max_queued=1, timeout_s=0.05)
    release = asyncio.Event()
    order: list[str] = []
    first = asyncio.create_task(hold(admission, "first", 0, order, release))
    await eventually_async(lambda: order == ["first"], timeout=2, interval=0.001, what="the first holds the slot")
    second = asyncio.create_task(hold(admission, "second", 0, order, release))
    await eventually_async(lambda: admission.waiting == 1, timeout=2, interval=0.001, what="one waiting")
    with pytest.raises(Refused) as full:
        async with admission.slot():
            pass
    assert full.value.reason == "queue_full" and full.value.status == 429
    with pytest.raises(Refused) as late:
        await second
    assert late.value.reason == "queue_timeout" and admission.waiting == 0
    release.set()
    await first
    assert admission.running == 0 and order == ["first"]


async def test_a_waiter_that_goes_away_gives_its_turn_to_the_next() -> None:
    admission = Admission(limit=1, max_queued=4, timeout_s=10)
    order: list[str] = []
    release = asyncio.Event()
    first = asyncio.create_task(hold(admission, "first", 0, order, release))
    await eventually_async(lambda: order == ["first"], timeout=2, interval=0.001, what="the first holds the slot")
    gone = asyncio.create_task(hold(admission, "gone", -1, order, release))
    after = asyncio.create_task(hold(admission, "after", 1, order, release))
    await eventually_async(lambda: admission.waiting == 2, timeout=2, interval=0.001, what="two waiting")
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert admission.waiting == 1
    release.set()
    await asyncio.gather(first, after)
    assert order == ["first", "after"] and admission.running == 0


async def test_a_waiter_cancelled_as_the_slot_reaches_it_passes_the_slot_on() -> None:
    admission = Admission(limit=1, max_queued=4, timeout_s=10)
    order: list[str] = []
    release = asyncio.Event()
    held = admission.slot()
    await held.__aenter__()
    unlucky = asyncio.create_task(hold(admission, "unlucky", 0, order, release))
    after = asyncio.create_task(hold(admission, "after", 0, order, release))
    await eventually_async(lambda: admission.waiting == 2, timeout=2, interval=0.001, what="two waiting")
    await held.__aexit__(None, None, None)  # hands the slot to `unlucky` without letting it run ...
    unlucky.cancel()  # ... which is cancelled before it could
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await unlucky
    await after
    assert order == ["after"] and admission.running == 0 and admission.waiting == 0


def test_bands() -> None:
    assert [band(p) for p in (-(2**63), -1, 0, 1, 2**63 - 1)] == ["high", "high", "default", "low", "low"]


# --- through the HTTP app --------------------------------------------------------------------
async def test_queued_requests_are_served_by_body_priority_and_the_vllm_header(harness) -> None:
    h = await harness(max_concurrent_requests=1, max_queued_requests=8)
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(1), gate=gate))
    admission = h.app[STATE].admission
    first = asyncio.create_task(h.client.post(CHAT, json={"model": "m", "messages": HELLO}))
    await eventually_async(lambda: admission.running == 1, timeout=5, interval=0.01, what="the first served")
    # each told apart by its max_tokens, which the engine call records
    sends = [(2, {"priority": 7}, {}), (3, {"priority": 7}, {"X-Vllm-Priority": "-2"}), (4, {}, {}),
             (5, {"priority": -1}, {}), (6, {"priority": 7}, {"X-Vllm-Priority": "not a number"})]
    tasks = []
    for i, (max_tokens, extra, headers) in enumerate(sends):
        body = {"model": "m", "messages": HELLO, "max_tokens": max_tokens, **extra}
        tasks.append(asyncio.create_task(h.client.post(CHAT, json=body, headers=headers)))
        await eventually_async(lambda n=i + 1: admission.waiting == n, timeout=5, interval=0.01, what="queued")
    gate.set()
    assert [(await t).status for t in [first, *tasks]] == [200] * 6
    assert [c["max_tokens"] for c in h.engines.calls][1:] == [3, 5, 4, 2, 6]
    waits = {b: await h.metric("dynamo_lite_frontend_admission_queue_seconds_count", band=b)
             for b in ("high", "default", "low")}
    assert waits == {"high": 2, "default": 1, "low": 2}


async def test_a_priority_out_of_the_int64_range_is_a_400(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(1)))
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "priority": 2**63})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "priority"
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "priority": -5})
    assert resp.status == 200


async def test_a_request_predicted_too_late_is_refused_before_any_engine_sees_it(harness) -> None:
    # Any positive prediction exceeds a limit of 1e-9 x the 500 ms target: every request is refused.
    h = await harness(admission={"reject_predicted_ttft_factor": 1e-9})
    h.add_worker("d0", script=Script(pieces(2)))
    for stream in (False, True):
        resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "stream": stream})
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"  # the prediction is far under the target: the least
        body = await resp.json()
        assert body["error"]["code"] == "rate_limit_exceeded" and "predicted time to first token" in \
            body["error"]["message"]
    assert h.engines.calls == []
    assert await h.metric("dynamo_lite_frontend_admission_rejections_total", model="m", reason="predicted_ttft") == 2
    assert await h.metric("dynamo_lite_frontend_requests_total", status="429") == 2


async def test_a_request_predicted_in_time_is_served(harness) -> None:
    h = await harness(admission={"reject_predicted_ttft_factor": 1000.0})
    h.add_worker("d0", script=Script(pieces(2)))
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
    assert resp.status == 200 and len(h.engines.calls) == 1
    assert await h.metric("dynamo_lite_frontend_admission_rejections_total", reason="predicted_ttft") == 0


async def _held_then_queued(h, gate: asyncio.Event, wait_s: float) -> tuple[asyncio.Task, asyncio.Task]:
    """A first request holding the only slot until `gate`, and a second that waits `wait_s` behind it."""
    admission = h.app[STATE].admission
    first = asyncio.create_task(h.client.post(CHAT, json={"model": "m", "messages": HELLO}))
    await eventually_async(lambda: admission.running == 1, timeout=5, interval=0.01, what="the first served")
    second = asyncio.create_task(h.client.post(CHAT, json={"model": "m", "messages": HELLO, "stream": True}))
    await eventually_async(lambda: admission.waiting == 1, timeout=5, interval=0.01, what="the second queued")
    await asyncio.sleep(wait_s)
    gate.set()
    return first, second


async def test_the_wait_for_an_admission_slot_counts_in_the_ttft(harness) -> None:
    h = await harness(max_concurrent_requests=1, max_queued_requests=1)
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(1), gate=gate))
    first, second = await _held_then_queued(h, gate, 0.3)
    assert (await first).status == 200
    resp = await second
    assert resp.status == 200
    await resp.read()
    assert await h.metric("dynamo_lite_frontend_time_to_first_token_seconds_count", model="m") == 1  # the stream's
    assert await h.metric("dynamo_lite_frontend_time_to_first_token_seconds_sum", model="m") >= 0.3


async def test_the_time_already_spent_counts_against_the_predicted_ttft(harness) -> None:
    # 0.4 x the 500 ms target: 0.2 s admitted. The router's prediction for a short prompt on an idle
    # worker is far under that; the second request has waited 0.3 s for its slot before it is predicted.
    h = await harness(max_concurrent_requests=1, max_queued_requests=1, admission={"reject_predicted_ttft_factor": 0.4})
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(1), gate=gate))
    first, second = await _held_then_queued(h, gate, 0.3)
    assert (await first).status == 200, "predicted in time, at once"
    resp = await second
    assert resp.status == 429 and "predicted time to first token" in (await resp.json())["error"]["message"]
    assert len(h.engines.calls) == 1
    assert await h.metric("dynamo_lite_frontend_admission_rejections_total", model="m", reason="predicted_ttft") == 1
