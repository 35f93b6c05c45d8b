"""Traffic for the fault tests: the official `openai` client sends streaming completions at a steady
rate from a thread of its own, and each request's end is judged.

A request ends `completed` (finish_reason "length", all tokens, usage), `error:<what>` (an HTTP
error status, an SSE error event, or a refused/reset connection) or `lost:<why>` (hung past its
timeout, or malformed). `summarize` turns the outcomes around a fault into one row of the fault
table: sent, completed, errored, lost, and the time to recover.

By default the client keeps connections alive, as the `openai` client does. With
`fresh_connections`, every request opens a new one (no keep-alive pool), as a client behind a
connection-per-request proxy does, and as the SO_REUSEPORT rows need: the kernel places each
new connection on a live frontend process, while a pooled connection to a process that was
killed fails on its next use (the `openai` client's default retries, off here, would resend it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import openai

MAX_TOKENS = 80
TIMEOUT_S = 30.0  # a request not finished by then is lost


@dataclass
class Outcome:
    sent: float
    ended: float | None = None
    status: str = "pending"  # completed | error:<what> | lost:<why>


@dataclass
class Traffic:
    """Sends streaming completions (120-260 random token ids, MAX_TOKENS out) at `rate` per second until stopped."""

    url: str
    rate: float
    model: str = "m"
    seed: int = 7  # the prompts: the same seed sends the same prompts (cached the second time)
    fresh_connections: bool = False  # a new connection per request (no keep-alive)
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sending and wait for every request sent to end."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(TIMEOUT_S + 15)
        assert not self._thread.is_alive(), "the traffic thread did not finish"

    async def _run(self) -> None:
        pool = openai.DefaultAsyncHttpxClient(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=0)
                                              ) if self.fresh_connections else None
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=TIMEOUT_S,
                                    http_client=pool)
        rng = random.Random(self.seed)
        tasks: list[asyncio.Task] = []
        start = time.monotonic()
        while not self._stop.is_set():
            prompt = [rng.randrange(1, 500) for _ in range(rng.randrange(120, 260))]
            outcome = Outcome(time.monotonic())
            self.outcomes.append(outcome)
            tasks.append(asyncio.create_task(self._one(client, prompt, outcome)))
            next_at = start + len(self.outcomes) / self.rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)
        await client.close()

    async def _one(self, client: openai.AsyncOpenAI, prompt: list[int], outcome: Outcome) -> None:
        try:
            async with asyncio.timeout(TIMEOUT_S + 5):
                stream = await client.completions.create(model=self.model, prompt=prompt, max_tokens=MAX_TOKENS,
                                                         stream=True, stream_options={"include_usage": True})
                finish, usage = None, None
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                    usage = chunk.usage or usage
            if finish == "length" and usage is not None and usage.completion_tokens == MAX_TOKENS:
                outcome.status = "completed"
            else:
                outcome.status = f"lost:malformed (finish {finish}, usage {usage})"
        except TimeoutError:
            outcome.status = "lost:timeout"
        except openai.APIStatusError as e:
            outcome.status = f"error:{e.status_code}"
        except openai.APIError as e:  # an SSE error event, or a refused/reset connection
            outcome.status = f"error:{type(e).__name__}"
        outcome.ended = time.monotonic()


@dataclass(frozen=True)
class Summary:
    sent: int
    completed: int
    errored: int
    lost: int
    recovery_s: float  # from the fault to the first request sent after it from which on all completed
    errors: dict[str, int]


def summarize(outcomes: list[Outcome], t_fault: float) -> Summary:
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status != "completed":
            errors[o.status] = errors.get(o.status, 0) + 1
    after = [o for o in outcomes if o.sent >= t_fault]
    recovered_at = next((o.sent for i, o in enumerate(after) if all(x.status == "completed" for x in after[i:])),
                        None)
    return Summary(len(outcomes), sum(o.status == "completed" for o in outcomes),
                   sum(o.status.startswith("error") for o in outcomes),
                   sum(o.status.startswith("lost") for o in outcomes),
                   round(recovered_at - t_fault, 2) if recovered_at is not None else float("inf"), errors)


def write_report(rows: list[dict], suffix: str = "") -> None:
    """With FAULTS_REPORT=path, the rows as JSON at that path (or beside it, named `<stem><suffix>.json`)."""
    report = os.environ.get("FAULTS_REPORT")
    if report and rows:
        path = Path(report)
        if suffix:
            path = path.with_name(f"{path.stem}{suffix}.json")
        path.write_text(json.dumps(rows, indent=2))
