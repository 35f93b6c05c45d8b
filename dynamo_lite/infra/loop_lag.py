"""How late a process's event loop runs what is due: an operator's first question when every stream
of a process pauses at once.

A task sleeps `interval_s` again and again; how much later than asked it wakes is the lag. It counts
whatever held the loop: code that blocked it (a long synchronous call), a garbage collection, or the
process waiting for a CPU. Each lag goes to `observe` (a histogram); one of `warn_s` or more is also
logged, with the time, and with what tells those causes apart:
- how much CPU the loop's thread used while it was late (its own clock, read by the loop itself): near
  the stall's length, code or a garbage collection held it; near nothing, it waited, for a CPU or in a
  blocking call that sleeps;
- where it was halfway through: a watchdog thread takes the loop thread's stack once per stall.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)
STACK_FRAMES = 6  # innermost frames of the sample in the warning


class LoopLag:
    """Measures the running loop's lag from `start()` until `stop()`."""

    def __init__(self, observe: Callable[[float], None], interval_s: float = 0.1, warn_s: float = 0.25) -> None:
        self._observe = observe
        self._interval_s = interval_s
        self._warn_s = warn_s
        self._task: asyncio.Task[None] | None = None
        self._watchdog: threading.Thread | None = None
        self._stopping = threading.Event()
        self._due = 0.0  # time.monotonic() at which the measuring task is due to wake
        self._stack: str | None = None  # the loop thread's stack, taken mid-stall by the watchdog

    def start(self) -> None:
        if self._task is None:
            self._due = time.monotonic() + self._interval_s
            self._task = asyncio.create_task(self._measure_forever(), name="event-loop-lag")
            self._stopping.clear()
            self._watchdog = threading.Thread(target=self._watch, args=(threading.get_ident(),),
                                              name="event-loop-watchdog", daemon=True)  # fmt: skip
            self._watchdog.start()

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._watchdog is not None:
            self._stopping.set()
            self._watchdog.join()
            self._watchdog = None

    async def _measure_forever(self) -> None:
        while True:
            cpu = time.thread_time()
            self._due = time.monotonic() + self._interval_s
            await asyncio.sleep(self._interval_s)
            lag = max(0.0, time.monotonic() - self._due)
            stack, self._stack = self._stack, None
            self._observe(lag)
            if lag >= self._warn_s:
                used = time.thread_time() - cpu
                why = ("code or a garbage collection held it" if used >= 0.5 * (lag + self._interval_s)
                       else "it waited, for a CPU or in a blocking call")  # fmt: skip
                where = (f"; halfway it was in:\n{stack}" if stack else
                         "; the watchdog thread got no turn to look (the GIL held throughout by a C call or a "
                         "garbage collection, or no CPU for either thread)")  # fmt: skip
                log.warning("event loop stalled: it ran %.2f s late; its thread used %.2f s of CPU meanwhile (%s)%s",
                            lag, used, why, where)

    def _watch(self, loop_thread: int) -> None:
        """In a thread of its own: once per stall, halfway to `warn_s`, the loop thread's innermost frames."""
        taken_for = 0.0
        while not self._stopping.wait(self._warn_s / 4):
            due = self._due
            if time.monotonic() - due >= self._warn_s / 2 and taken_for != due:
                frame = sys._current_frames().get(loop_thread)
                stack = "".join(traceback.format_stack(frame)[-STACK_FRAMES:]).rstrip() if frame else None
                if self._due == due:  # still the same stall: the frames are the stall's, not what came after
                    self._stack = stack
                taken_for = due
