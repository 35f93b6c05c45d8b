"""cancel_and_wait ends a task that swallows its cancellation, as asyncio.wait_for does on Python 3.11."""

from __future__ import annotations

import asyncio
import sys

from dynamo_lite.tasks import cancel_and_wait


async def test_a_cancellation_swallowed_by_wait_for_is_repeated() -> None:
    """The race the prefill submitter's depth poller lost: cancelled just as its request was answered."""
    answers: list[asyncio.Future[int]] = []
    got: list[int] = []

    async def poller() -> None:
        while True:
            answer = asyncio.get_running_loop().create_future()
            answers.append(answer)
            got.append(await asyncio.wait_for(answer, 10))

    task = asyncio.create_task(poller())
    await asyncio.sleep(0)
    answers[-1].set_result(1)  # the answer arrives, and in the same turn of the loop the task is cancelled
    task.cancel()
    await asyncio.sleep(0.05)
    if sys.version_info < (3, 12):  # CPython gh-86296: the result is returned, the cancellation lost
        assert got == [1] and not task.done()
    await asyncio.wait_for(cancel_and_wait(task, recancel_s=0.1), 5)
    assert task.cancelled()


async def test_a_task_s_cleanup_on_cancellation_is_let_finish() -> None:
    cleaned = asyncio.Event()

    async def worker() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.2)  # a NAK, an abort: shorter than recancel_s
            cleaned.set()

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    await cancel_and_wait(task, recancel_s=1.0)
    assert cleaned.is_set()


async def test_failed_and_finished_tasks_and_none_are_taken_as_they_are() -> None:
    async def fail() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fail())
    done = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait(failed, done, None)  # the ValueError is retrieved, not raised
    assert failed.exception() is not None and done.done() and not done.cancelled()
