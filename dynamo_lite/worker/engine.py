"""The engine a worker agent runs: launched from the pool's spec (vLLM or mock), or attached to.

`EngineHandle` is what the agent needs from any of them: a URL, the endpoints of
its KV events, start/stop, and its process id. Launch parameters that must be
unique per instance (HTTP port, KV-event ports, NIXL side channel) are picked here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from connectors import kv_transfer_config, nixl_env
from dynamo_lite.config import (
    ClusterSpec,
    KvTransferSpec,
    MockEngineSpec,
    PoolSpec,
    VllmEngineSpec,
)
from dynamo_lite.infra import ManagedProcess, free_port
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.ports import listens_on

if TYPE_CHECKING:
    from dynamo_lite.engines.mock import MockEngineArgs


@dataclass
class EngineHandle:
    """One engine process (or an engine someone else runs, when `process` is None)."""

    url: str
    kv_events_bind: str  # where the agent's SUB socket binds; the engine connects to it
    kv_events_replay: str | None  # the engine's replay ROUTER
    nixl_side_channel: str | None = None
    process: ManagedProcess | None = None
    start_timeout_s: float = 600.0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self) -> None:
        if self.process is not None:
            self.process.start()
            port = int(self.url.rsplit(":", 1)[1])

            async def healthy() -> bool:  # and really this engine: another process may have taken its port
                return await http_ok(f"{self.url}/health") and self.pid is not None and listens_on(self.pid, port)

            # A port taken between picking and binding: vLLM exits for its HTTP port, but its NIXL listener
            # thread dies alone and the engine waits for it forever; start_agent retries on new ports.
            await self.process.wait_healthy(healthy, self.start_timeout_s, fatal=b"Address already in use")

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop(grace_s=20.0)

    async def wait_exit(self, poll_s: float = 0.5) -> str:
        """Return, with the reason, once an engine this handle launched exits; never for an attached one."""
        while True:
            reason = self.process.exit_reason() if self.process is not None else None
            if reason is not None:
                return reason
            await asyncio.sleep(poll_s)


def attached_engine(url: str, kv_events_port: int, replay_url: str | None = None) -> EngineHandle:
    """An engine started elsewhere (a sidecar container, a test): the agent neither starts nor stops it."""
    return EngineHandle(url=url.rstrip("/"), kv_events_bind=f"tcp://127.0.0.1:{kv_events_port}",
                        kv_events_replay=replay_url)


def launched_engine(spec: ClusterSpec, pool: PoolSpec, model_dir: Path, log_dir: Path, name: str,
                    cpu_core: int | None = None) -> EngineHandle:
    """An engine process for one worker of `pool`, on free loopback ports."""
    port, events, replay = free_port(), free_port(), free_port()
    model = spec.model_of(pool)
    kv = kv_transfer_config(pool.role, *_kv_settings(pool))
    side_channel = free_port() if kv else None
    env = nixl_env(side_channel) if side_channel else {}
    events_bind = f"tcp://127.0.0.1:{events}"
    replay_ep = f"tcp://127.0.0.1:{replay}"
    if pool.engine == "vllm":
        from dynamo_lite.engines.vllm import VllmEngineConfig

        v = pool.vllm or VllmEngineSpec()
        if cpu_core is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu_core)
        config = VllmEngineConfig(
            model_dir=model_dir, served_model_name=model.name, port=port, dtype=v.dtype,
            max_model_len=model.max_model_len, block_size=model.block_size, kv_cache_gib=v.kv_cache_gib,
            gpu_memory_utilization=v.gpu_memory_utilization, enforce_eager=v.enforce_eager,
            kv_events_endpoint=events_bind, kv_events_replay_endpoint=replay_ep, kv_transfer_config=kv,
            env=env, extra_args=tuple(v.extra_args), reasoning_parser=model.reasoning_parser, runner=model.runner,
        )
        argv, env = config.argv(), config.environ()
    else:
        from dynamo_lite.engines.mock import engine_command

        args = mock_engine_args(pool.mock or MockEngineSpec(), model.name, model.block_size, model.max_model_len, port,
                                events_bind, replay_ep, kv)
        argv = engine_command(replace(args, runner=model.runner))
    process = ManagedProcess(f"engine {name}", argv, log_dir / f"{name}.engine.log", env=env)
    return EngineHandle(
        url=f"http://127.0.0.1:{port}", kv_events_bind=events_bind, kv_events_replay=replay_ep,
        nixl_side_channel=f"127.0.0.1:{side_channel}" if side_channel else None, process=process,
    )


def _kv_settings(pool: PoolSpec) -> tuple[str, int | None, bool, int | None]:
    kv = pool.kv_transfer or KvTransferSpec()
    return kv.buffer_device, kv.progress_delay_us, False, kv.spin_sleep_us


def mock_engine_args(m: MockEngineSpec, model: str, block_size: int, max_len: int, port: int, events: str,
                     replay: str, kv: dict[str, object] | None = None, topic: str = "kv") -> MockEngineArgs:
    """The mock engine a worker of a `engine: mock` pool runs (benchmarks start the same one for peer routers)."""
    from dynamo_lite.engines.mock import (
        KvEventsConfig,
        KvTransferConfig,
        MockEngineArgs,
    )

    transfer = None
    if kv is not None:
        transfer = KvTransferConfig(kv_connector="NixlConnector", kv_role=kv["kv_role"])  # type: ignore[arg-type]
    return MockEngineArgs(
        model=model, port=port, block_size=block_size, max_model_len=max_len, num_gpu_blocks=m.num_gpu_blocks,
        max_num_seqs=m.max_num_seqs, max_num_batched_tokens=m.max_num_batched_tokens, timing=m.timing,
        speedup_ratio=m.speedup_ratio, seed=m.seed, enable_prompt_tokens_details=True,
        kv_events_config=KvEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=events,
                                        replay_endpoint=replay, topic=topic),
        kv_transfer_config=transfer,
    )

