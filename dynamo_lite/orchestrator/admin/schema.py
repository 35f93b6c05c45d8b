"""What the admin API's requests and replies carry."""

from __future__ import annotations

from typing import Annotated

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from dynamo_lite.infra.process import ProcessInfo
from dynamo_lite.protocol import WorkerRecord


class ScaleRequest(BaseModel):
    """Body of `POST /pools/{name}/scale`."""

    model_config = ConfigDict(extra="forbid")
    replicas: Annotated[int, Field(ge=0, le=1024)]
    """Workers the pool should have; the call returns once they registered (or the extra ones stopped)."""


class PoolInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # the pool's name in cluster.yaml
    role: str  # aggregated, prefill or decode
    engine: str  # vllm or mock
    model: str  # served model name
    replicas: int  # workers in service or starting now


class ScaleReply(msgspec.Struct, frozen=True, kw_only=True):
    pool: PoolInfo  # after scaling
    previous: int  # replicas before


class CheckInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # "nats", "etcd", "frontend", "worker decode-0-ab12cd" ...
    url: str
    healthy: bool
    detail: str


class StatusReply(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /status`: what `orchestrator status` shows, as JSON (no secrets)."""

    namespace: str
    healthy: bool  # every check passed
    supervisor_pid: int | None
    processes: list[ProcessInfo]  # what `up` started
    checks: list[CheckInfo]
    workers: list[WorkerRecord]  # registered in etcd
