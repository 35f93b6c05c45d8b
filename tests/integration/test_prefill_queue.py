"""The prefill queue against a real nats-server with JetStream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NatsClient

from dynamo_lite.infra import EmbeddedNats
from dynamo_lite.protocol import PrefillJob, PrefillResult, RequestId, WorkerId
from dynamo_lite.queue import (
    PoisonJobError,
    PrefillConsumer,
    PrefillError,
    PrefillSubmitter,
    PrefillTimeout,
    QueueSettings,
    RetryableJobError,
    connect_nats,
)
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
NS = "qtest"
MODEL = "tiny"
FAST = QueueSettings(ack_wait_s=2.0, max_deliver=3)


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[NatsClient]:
    client = await connect_nats(nats_server.url, "test")
    yield client
    await client.close()


@pytest.fixture
async def submitter(nc: NatsClient) -> AsyncIterator[PrefillSubmitter]:
    sub = PrefillSubmitter(nc, NS, FAST)
    await sub.start()
    yield sub
    await sub.stop()


def echo_result(worker: str):
    async def handle(job: PrefillJob) -> PrefillResult:
        params = {"remote_block_ids": [[len(job.token_ids)]], "remote_engine_id": worker}
        return PrefillResult(job_id=job.job_id, worker_id=WorkerId(worker), kv_transfer_params=params,
                             prompt_tokens=len(job.token_ids))
    return handle


async def consumer(nc: NatsClient, worker: str, handler, **kw) -> PrefillConsumer:
    c = PrefillConsumer(nc, NS, MODEL, WorkerId(worker), handler, settings=FAST, nak_delay_s=0.1, **kw)
    await c.start()
    return c


async def test_submit_and_get_typed_result(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    worker = await consumer(nc, "p1", echo_result("p1"))
    results = await asyncio.gather(
        *(submitter.prefill(RequestId(f"r{i}"), MODEL, list(range(10 + i)), timeout_s=10) for i in range(8))
    )
    assert [r.kv_transfer_params["remote_block_ids"] for r in results] == [[[10 + i]] for i in range(8)]
    assert {r.worker_id for r in results} == {"p1"}
    # The worker acks a job once the submitter confirmed its result, a moment after the caller has it.
    async def all_acked() -> bool:  # acked jobs leave the work queue
        return (await submitter.depth(MODEL)).total == 0

    await eventually_async(all_acked, timeout=5, interval=0.05, what="all 8 jobs acked")
    await worker.stop()
    assert worker.jobs_done == 8


async def test_long_job_is_kept_alive_by_heartbeats(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    calls = []

    async def slow(job: PrefillJob) -> PrefillResult:
        calls.append(job.job_id)
        await asyncio.sleep(FAST.ack_wait_s * 2.5)  # well past ack_wait
        return await echo_result("slow")(job)

    worker = await consumer(nc, "slow", slow, concurrency=2)
    result = await submitter.prefill(RequestId("long"), MODEL, [1, 2, 3], timeout_s=20)
    assert result.worker_id == "slow"
    assert len(calls) == 1, "in_progress heartbeats prevented a redelivery"
    await worker.stop()


async def test_retryable_error_naks_and_job_is_retried(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    attempts = []

    async def flaky(job: PrefillJob) -> PrefillResult:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise RetryableJobError("engine busy")
        return await echo_result("flaky")(job)

    worker = await consumer(nc, "flaky", flaky)
    result = await submitter.prefill(RequestId("r"), MODEL, [1, 2], timeout_s=10)
    assert result.worker_id == "flaky" and len(attempts) == 2
    assert attempts[1] - attempts[0] < FAST.ack_wait_s, "nak redelivers after its delay, not after ack_wait"
    await worker.stop()


async def test_poison_job_is_terminated_and_submitter_told_why(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    attempts = []

    async def reject(job: PrefillJob) -> PrefillResult:
        attempts.append(job.job_id)
        raise PoisonJobError("prompt longer than max_model_len (9000 > 4096)")

    worker = await consumer(nc, "strict", reject)
    with pytest.raises(PrefillError, match=r"rejected by worker strict: prompt longer than max_model_len"):
        await submitter.prefill(RequestId("r"), MODEL, [1], timeout_s=10)
    await asyncio.sleep(FAST.ack_wait_s + 0.5)  # time for a redelivery, were there one: none may come
    assert len(attempts) == 1, "a terminated job is never redelivered"
    assert (await submitter.depth(MODEL)).total == 0
    await worker.stop()


async def test_job_failing_every_delivery_is_reported(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    async def broken(job: PrefillJob) -> PrefillResult:
        raise ConnectionResetError("engine connection reset")

    worker = await consumer(nc, "broken", broken)
    with pytest.raises(PrefillError, match=r"failed 3 times, last: engine connection reset"):
        await submitter.prefill(RequestId("r"), MODEL, [1], timeout_s=15)
    await worker.stop()


async def test_no_worker_times_out_with_a_clear_error(submitter: PrefillSubmitter) -> None:
    started = time.monotonic()
    with pytest.raises(PrefillTimeout, match=r"request lonely: prefill job \w+ got no result within 1.5 s"):
        await submitter.prefill(RequestId("lonely"), MODEL, [1, 2, 3], timeout_s=1.5)
    assert time.monotonic() - started < 3
    depth = await submitter.depth(MODEL)
    assert depth.pending == 1, "the job stays queued for the planner to see"


async def test_expired_job_is_dropped_not_run(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    with pytest.raises(PrefillTimeout):
        await submitter.prefill(RequestId("stale"), MODEL, [1], timeout_s=0.5)
    ran = []

    async def handle(job: PrefillJob) -> PrefillResult:
        ran.append(job.request_id)
        return await echo_result("late")(job)

    worker = await consumer(nc, "late", handle)
    fresh = await submitter.prefill(RequestId("fresh"), MODEL, [1], timeout_s=10)
    assert fresh.worker_id == "late" and ran == ["fresh"], "the job whose submitter gave up is not prefilled"
    await worker.stop()


HANGING_CONSUMER = textwrap.dedent(
    """
    import asyncio, sys
    from dynamo_lite.protocol import WorkerId
    from dynamo_lite.queue import PrefillConsumer, QueueSettings, connect_nats

    async def main():
        nc = await connect_nats(sys.argv[1], "doomed")
        async def hang(job):
            print("got", job.request_id, flush=True)
            await asyncio.sleep(3600)
        c = PrefillConsumer(nc, "qtest", "tiny", WorkerId("doomed"), hang,
                            settings=QueueSettings(ack_wait_s=2.0, max_deliver=3))
        await c.start()
        print("ready", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_job_redelivered_to_another_worker_when_one_dies(
    nats_server: EmbeddedNats, nc: NatsClient, submitter: PrefillSubmitter
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HANGING_CONSUMER, nats_server.url],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)).strip() == "ready"
        pending = asyncio.create_task(submitter.prefill(RequestId("orphan"), MODEL, [7, 8, 9], timeout_s=30))
        assert (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10)).strip() == "got orphan"
        proc.kill()  # dies holding the job, without acking
        proc.wait()
        survivor = await consumer(nc, "survivor", echo_result("survivor"))
        result = await asyncio.wait_for(pending, 20)
        assert result.worker_id == "survivor"
        assert result.kv_transfer_params == {"remote_block_ids": [[3]], "remote_engine_id": "survivor"}
        await survivor.stop()
    finally:
        proc.kill()
        proc.wait()


async def test_stop_hands_back_unfinished_jobs(nc: NatsClient, submitter: PrefillSubmitter) -> None:
    started = asyncio.Event()

    async def stuck(job: PrefillJob) -> PrefillResult:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    leaving = await consumer(nc, "leaving", stuck)
    pending = asyncio.create_task(submitter.prefill(RequestId("handed-back"), MODEL, [1], timeout_s=20))
    await asyncio.wait_for(started.wait(), 10)
    await leaving.stop(drain_timeout_s=0.5)
    t0 = time.monotonic()
    taker = await consumer(nc, "taker", echo_result("taker"))
    result = await asyncio.wait_for(pending, 15)
    assert result.worker_id == "taker"
    assert time.monotonic() - t0 < FAST.ack_wait_s, "a nak'ed job is redelivered without waiting for ack_wait"
    await taker.stop()


async def test_queued_jobs_survive_a_nats_restart(nats_server: EmbeddedNats, nc: NatsClient,
                                                  submitter: PrefillSubmitter) -> None:
    """Jobs waiting for a worker while nats-server is SIGKILLed and restarted are done afterwards:
    JetStream's file store keeps them; the submitter's client reconnects and gets the results."""
    waiting = [asyncio.create_task(submitter.prefill(RequestId(f"r{i}"), MODEL, list(range(5 + i)), timeout_s=30))
               for i in range(4)]
    async def all_queued() -> bool:
        return (await submitter.depth(MODEL)).pending >= 4

    await eventually_async(all_queued, timeout=10, interval=0.05, what="4 jobs in the queue")
    nats_server.process.kill()
    await asyncio.sleep(0.5)  # the downtime is the fault
    await nats_server.start()
    worker_nc = await connect_nats(nats_server.url, "worker")
    try:
        worker = await consumer(worker_nc, "p1", echo_result("p1"))
        results = await asyncio.gather(*waiting)
        assert [r.prompt_tokens for r in results] == [5, 6, 7, 8]
        await worker.stop()
    finally:
        await worker_nc.close()
