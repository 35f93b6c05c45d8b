"""Ending the background tasks a component owns: `cancel_and_wait`.

A plain `task.cancel()` and `await gather(task)` can wait forever. On Python 3.11,
`asyncio.wait_for` returns its result instead of raising when the cancellation meets a future
that has just completed (CPython gh-86296, fixed in 3.12). nats-py's `request` (and so every
JetStream call) and our own `wait_for` on an event are such places. A loop cancelled in one of
them swallows the cancellation and goes on. A CI run hung for 300 s in the prefill submitter's
`stop()` this way: its depth poller had just got an answer from JetStream when it was cancelled.
So the cancellation is repeated until the task has ended.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Task[object] | None, recancel_s: float = 1.0) -> None:
    """Cancel the tasks (None is skipped) and return when every one has ended.

    A task still running `recancel_s` after its cancellation is cancelled again. The wait is
    that long so that a task's own cleanup (a NAK, an abort) has the time to finish.
    Exceptions the tasks end with are retrieved, not raised.
    """
    mine = [t for t in tasks if t is not None]
    pending = {t for t in mine if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=recancel_s)
        for task in pending:
            log.debug("task %s still running %.1f s after its cancellation; cancelling it again",
                      task.get_name(), recancel_s)
    await asyncio.gather(*mine, return_exceptions=True)
