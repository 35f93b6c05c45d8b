"""Run a prefill job on the worker's engine: the prompt with max_tokens 1 and
`kv_transfer_params: {do_remote_decode: true}`; the engine's answer carries the
`kv_transfer_params` a decode engine needs to pull the KV blocks (NixlConnector).
"""

from __future__ import annotations

import logging

import aiohttp

from dynamo_lite.protocol import PrefillJob, PrefillResult, WorkerId
from dynamo_lite.queue import PoisonJobError, RetryableJobError

log = logging.getLogger(__name__)


class EnginePrefill:
    """A prefill-queue handler bound to one engine (see `dynamo_lite.queue.consumer`)."""

    def __init__(self, worker_id: WorkerId, engine_url: str, session: aiohttp.ClientSession,
                 timeout_s: float = 300.0) -> None:
        self.worker_id = worker_id
        self.url = f"{engine_url}/v1/completions"
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def __call__(self, job: PrefillJob) -> PrefillResult:
        body = {
            "model": job.model,
            "prompt": job.token_ids,
            "max_tokens": 1,
            "max_completion_tokens": 1,
            "temperature": 0,
            "stream": False,
            "kv_transfer_params": {"do_remote_decode": True},
        }
        try:
            async with self.session.post(
                self.url, json=body, headers={"X-Request-Id": job.request_id}, timeout=self.timeout
            ) as resp:
                payload = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            raise RetryableJobError(f"engine unreachable: {type(e).__name__}: {e}") from e
        if 400 <= status < 500:
            raise PoisonJobError(f"engine rejected the prompt ({status}): {_message(payload)}")
        if status != 200:
            raise RetryableJobError(f"engine answered {status}: {_message(payload)}")
        params = payload.get("kv_transfer_params")
        if not params:
            raise RetryableJobError("engine returned no kv_transfer_params: is it started with a kv_producer connector?")
        usage = payload.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        log.debug("request %s: prefilled %d tokens on %s", job.request_id, usage.get("prompt_tokens", 0), self.worker_id)
        return PrefillResult(
            job_id=job.job_id,
            worker_id=self.worker_id,
            kv_transfer_params=params,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
        )


def _message(payload: object) -> str:
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict):
            return str(error.get("message", error))
        return str(payload.get("message") or payload.get("detail") or payload)[:300]
    return str(payload)[:300]
