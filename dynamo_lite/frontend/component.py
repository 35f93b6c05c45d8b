"""Run the frontend as child processes of `orchestrator up` (supervisor components).

`frontend.processes` processes serve one port: each binds it with SO_REUSEPORT
(when there are several), so the kernel spreads new connections over them. Each is
its own component and its own part of the supervisor, restarted alone when it dies,
and serves its own /metrics and /health on a port of its own (`frontend.metrics_port`
+ its index, or a free one picked here and kept across restarts): a scrape of the
shared port would reach any one of them. Started last, after the worker pools; a
process is up when its own /health answers 200. The first prints how to call the API.
Stopping sends SIGTERM: it stops accepting and lets in-flight requests finish.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from dynamo_lite.config import ClusterSpec
from dynamo_lite.infra import ManagedProcess, free_port
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.ports import ensure_free
from dynamo_lite.infra.process import ProcessInfo, RestartableChild


@dataclass(frozen=True)
class Slot:
    """Where one frontend process serves."""

    port: int  # the shared port of the OpenAI API
    index: int  # 0 .. processes - 1
    metrics_port: int  # this process's own /metrics and /health
    several: bool  # one of several processes on `port` (SO_REUSEPORT)


class FrontendProcess(RestartableChild):
    """Component: one `python -m dynamo_lite.frontend` process for a spec."""

    def __init__(self, spec: ClusterSpec, spec_path: Path, nats_url: str, etcd_url: str, slot: Slot,
                 out: TextIO = sys.stdout, start_timeout_s: float = 180.0) -> None:
        shown = "127.0.0.1" if spec.frontend.host in ("0.0.0.0", "::") else spec.frontend.host
        self.url = f"http://{shown}:{slot.port}"
        self.metrics_url = f"http://{shown}:{slot.metrics_port}"
        self.slot = slot
        self.part = f"frontend {slot.index}" if slot.several else "frontend"
        self.name = f"{self.part} on {self.url}"
        self.spec = spec
        self.out = out
        self.start_timeout_s = start_timeout_s  # a builtin model's tokenizer is built on first use
        argv = [sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec_path), "--nats-url", nats_url,
                "--etcd-url", etcd_url, "--port", str(slot.port), "--metrics-port", str(slot.metrics_port)]
        if slot.several:
            argv += ["--reuse-port", "--process-index", str(slot.index)]
        log_name = f"frontend-{slot.index}.log" if slot.several else "frontend.log"
        self.process = ManagedProcess(self.part, argv, spec.resolved_state_dir() / "logs" / log_name)

    def processes(self) -> list[ProcessInfo]:
        pid = self.process.pid
        return [] if pid is None else [ProcessInfo(name="frontend", pid=pid, url=self.url,
                                                   log=str(self.process.log_path),
                                                   index=self.slot.index if self.slot.several else None,
                                                   metrics_url=self.metrics_url)]

    async def start(self) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(f"{self.metrics_url}/health"), self.start_timeout_s)
        if self.slot.index == 0:
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


def slots(spec: ClusterSpec) -> list[Slot]:
    """The processes' ports. Raises PortInUse (an OSError) when `frontend.port` is taken: with
    several processes it is bound with SO_REUSEPORT, which would share it with the taker silently."""
    f = spec.frontend
    n = f.local_processes()
    port = f.port or free_port(f.host)  # 0: any free port
    if f.port:
        ensure_free(f.host, port)
    own: list[int] = []  # free ports picked one after another; the OS may hand one out twice
    while not f.metrics_port and len(own) < n:
        if (picked := free_port(f.host)) not in own and picked != port:
            own.append(picked)
    return [Slot(port, i, f.metrics_port + i if f.metrics_port else own[i], n > 1) for i in range(n)]


def frontend_stage(spec: ClusterSpec, spec_path: Path, nats_url: str, etcd_url: str) -> list[FrontendProcess]:
    """The frontend processes, when the spec serves any model."""
    if not spec.models:
        return []
    return [FrontendProcess(spec, spec_path, nats_url, etcd_url, slot) for slot in slots(spec)]
