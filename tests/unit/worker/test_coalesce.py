"""`Coalescer`: the first item after a quiet window goes at once, the rest of the window's together at
its end, in order; closing sends what is left and leaves no task behind."""

from __future__ import annotations

import asyncio

from dynamo_lite.worker.coalesce import Coalescer


class Sent:
    def __init__(self) -> None:
        self.groups: list[list[int]] = []

    async def __call__(self, items: list[int]) -> None:
        self.groups.append(items)


async def test_a_quiet_item_goes_at_once_and_a_burst_goes_together_at_the_window_end() -> None:
    sent = Sent()
    out = Coalescer(sent, window_s=0.05)
    await out.add(0)
    assert sent.groups == [[0]], "nothing sent before: no wait"
    for i in range(1, 6):
        await out.add(i)
    assert sent.groups == [[0]], "within the window: held"
    await asyncio.sleep(0.1)
    assert sent.groups == [[0], [1, 2, 3, 4, 5]]
    await asyncio.sleep(0.06)  # a quiet window later
    await out.add(6)
    assert sent.groups[-1] == [6]
    await out.close()


async def test_every_item_is_sent_once_in_order_under_a_steady_stream() -> None:
    sent = Sent()
    out = Coalescer(sent, window_s=0.01)
    for i in range(200):
        await out.add(i)
        await asyncio.sleep(0.001)
    await out.close()
    assert [i for group in sent.groups for i in group] == list(range(200))
    assert len(sent.groups) < 100, "a window holds several items when they come faster than it"


async def test_close_sends_what_the_window_held_and_ends_its_task() -> None:
    sent = Sent()
    out = Coalescer(sent, window_s=10.0)
    await out.add(1)
    await out.add(2)
    await out.add(3)
    tasks = {t for t in asyncio.all_tasks() if t.get_name() == "coalescer-window"}
    assert len(tasks) == 1
    await out.close()
    assert sent.groups == [[1], [2, 3]]
    assert all(t.done() for t in tasks)
    await out.close()  # twice: nothing more
    assert sent.groups == [[1], [2, 3]]
