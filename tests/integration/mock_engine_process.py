"""A mock engine as a real process, for the integration tests that talk to one over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from dynamo_lite.engines.mock import MockEngineArgs, engine_command
from tests.waiting import eventually_async


@contextlib.asynccontextmanager
async def mock_engine(args: MockEngineArgs, log: Path) -> AsyncIterator[str]:
    """Start `python -m dynamo_lite.engines.mock`, wait for /health, SIGTERM it at the end."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*engine_command(args), stdout=out, stderr=out)
    url = f"http://127.0.0.1:{args.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def healthy() -> bool:
                if proc.returncode is not None:
                    raise RuntimeError(f"mock engine exited: {log.read_text()}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{url}/health") as r:
                        return r.status == 200
                return False

            await eventually_async(healthy, timeout=10, interval=0.05, what=f"the mock engine healthy on {url}")
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                raise
            assert rc == 0, log.read_text()
