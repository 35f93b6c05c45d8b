"""Health probes for embedded servers: one HTTP GET, never raising."""

from __future__ import annotations

import aiohttp


async def http_ok(url: str, timeout_s: float = 2.0, contains: str | None = None) -> bool:
    """True when GET `url` answers 200 (and its body contains `contains`, when given)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            async with session.get(url) as resp:
                if resp.status != 200:
                    return False
                return contains is None or contains in await resp.text()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
