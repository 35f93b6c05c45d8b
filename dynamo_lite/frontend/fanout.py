"""Several choices of one response (n > 1, batch prompts) served at once, their events merged.

Each choice is its own `RequestFlow.run` (its own routing, migration and engine request);
`merged` runs them as tasks it owns and yields `(choice index, event)` in arrival order.
A failure of one choice fails the response (the others are cancelled); closing the merged
generator cancels and awaits every task, which closes their engine connections. One choice
is served without tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from dynamo_lite.frontend.request import Outcome, Piece
from dynamo_lite.tasks import cancel_and_wait

Event = Piece | Outcome
_END = object()


async def merged(flows: list[AsyncIterator[Event]]) -> AsyncIterator[tuple[int, Event]]:
    if len(flows) == 1:
        async with contextlib.aclosing(flows[0]) as only:  # type: ignore[type-var]
            async for event in only:
                yield 0, event
        return
    queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()

    async def pump(index: int, flow: AsyncIterator[Event]) -> None:
        async with contextlib.aclosing(flow):  # type: ignore[type-var]
            try:
                async for event in flow:
                    queue.put_nowait((index, event))
            except Exception as e:  # noqa: BLE001 - handed to the consumer, which raises it
                queue.put_nowait((index, e))
                return
        queue.put_nowait((index, _END))

    tasks = [asyncio.create_task(pump(i, f), name=f"choice-{i}") for i, f in enumerate(flows)]
    try:
        running = len(tasks)
        while running:
            index, event = await queue.get()
            if event is _END:
                running -= 1
            elif isinstance(event, Exception):
                raise event
            else:
                yield index, event  # type: ignore[misc]
    finally:
        await cancel_and_wait(*tasks)
