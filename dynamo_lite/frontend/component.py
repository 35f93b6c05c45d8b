"""Run the frontend as a child process of `orchestrator up` (a supervisor component).

Started last, after the worker pools; up when its /health answers 200; it then
prints how to call the API. Stopping sends SIGTERM: it stops accepting and lets
in-flight requests finish before it exits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from dynamo_lite.config import ClusterSpec
from dynamo_lite.infra import ManagedProcess, free_port
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.process import ProcessInfo, RestartableChild


class FrontendProcess(RestartableChild):
    """Component: `python -m dynamo_lite.frontend` for a spec."""

    part = "frontend"

    def __init__(self, spec: ClusterSpec, spec_path: Path, nats_url: str, etcd_url: str,
                 out: TextIO = sys.stdout, start_timeout_s: float = 180.0) -> None:
        host = spec.frontend.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        port = spec.frontend.port or free_port()  # 0: any free port
        self.url = f"http://{shown}:{port}"
        self.name = f"frontend on {self.url}"
        self.spec = spec
        self.out = out
        self.start_timeout_s = start_timeout_s  # a builtin model's tokenizer is built on first use
        argv = [sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec_path),
                "--nats-url", nats_url, "--etcd-url", etcd_url, "--port", str(port)]
        self.process = ManagedProcess("frontend", argv, spec.resolved_state_dir() / "logs" / "frontend.log")

    def processes(self) -> list[ProcessInfo]:
        pid = self.process.pid
        return [] if pid is None else [ProcessInfo(name="frontend", pid=pid, url=self.url,
                                                   log=str(self.process.log_path))]

    async def start(self) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(f"{self.url}/health"), self.start_timeout_s)
        print(how_to_call(self.url, self.spec.models[0].name if self.spec.models else "MODEL"),
              file=self.out, flush=True)

    async def stop(self) -> None:
        await self.process.stop(grace_s=40.0)


def how_to_call(url: str, model: str) -> str:
    return (
        f"OpenAI-compatible API: {url}/v1 (models: GET {url}/v1/models, metrics: {url}/metrics)\n"
        f"  curl {url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        f"    -d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello!\"}}]}}'\n"
        f"  python -c \"import openai; c = openai.OpenAI(base_url='{url}/v1', api_key='none'); "
        f"print(c.chat.completions.create(model='{model}', messages=[{{'role': 'user', 'content': 'Hello!'}}])"
        f".choices[0].message.content)\""
    )


def frontend_stage(spec: ClusterSpec, spec_path: Path, nats_url: str, etcd_url: str) -> list[FrontendProcess]:
    """The frontend, when the spec serves any model."""
    return [FrontendProcess(spec, spec_path, nats_url, etcd_url)] if spec.models else []
