"""The mock engine's configuration, its command line, and the inverse: argv
from a typed `MockEngineArgs`, so that a supervisor can launch it as a child
process (`engine_command(args)`).

Flag names mirror `vllm serve` / `python -m vllm.entrypoints.openai.api_server`
where vLLM has one; the mock-only flags (`--timing`, `--speedup-ratio`,
`--model-size`, `--gpu`, `--kv-transfer-bandwidth`, `--vocab-size`,
`--nixl-side-channel-*`) are named after what they simulate. A handful of vLLM
flags that change nothing here (`--dtype`, `--enforce-eager` ...) are accepted
and ignored, so a vLLM command line runs unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from dynamo_lite.engines.mock.timing import GPU_PRESETS, MODEL_PRESETS, TimingName

KvRole = Literal["kv_producer", "kv_consumer", "kv_both"]


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    """vLLM's `--kv-events-config` (vllm/config/kv_events.py), same keys and defaults."""

    enable_kv_cache_events: bool = False
    publisher: Literal["null", "zmq"] | None = None  # None: "zmq" when enabled, else "null"
    endpoint: str = "tcp://*:5557"  # PUB: binds for tcp://*:P, connects for a named host
    replay_endpoint: str | None = None  # ROUTER, always bound
    buffer_steps: int = 10_000  # batches kept for replay
    hwm: int = 100_000  # PUB high-water mark
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def enabled(self) -> bool:
        return self.enable_kv_cache_events and (self.publisher or "zmq") == "zmq"


@dataclass(frozen=True, slots=True)
class KvTransferConfig:
    """vLLM's `--kv-transfer-config` (vllm/config/kv_transfer.py); the mock uses role and engine id."""

    kv_connector: str | None = None
    engine_id: str | None = None  # NixlConnector: random uuid when unset
    kv_buffer_device: str = "cuda"
    kv_role: KvRole | None = None
    kv_port: int = 14579
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    kv_connector_module_path: str | None = None
    enable_permute_local_kv: bool = False
    kv_load_failure_policy: Literal["recompute", "fail"] = "fail"
    kv_buffer_size: float | None = None  # older vLLM keys, accepted for compatibility
    kv_rank: int | None = None
    kv_parallel_size: int | None = None
    kv_ip: str | None = None


def _opt(default: Any, help: str) -> Any:
    """A field with a default and its --help text."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class MockEngineArgs:
    """Everything the mock engine process takes on its command line."""

    model: str = field(metadata={"help": "model name or path; only its name is used"})
    served_model_name: str | None = _opt(None, "name clients ask for (default: model)")
    host: str = _opt("127.0.0.1", "address the HTTP server binds")
    port: int = _opt(8000, "HTTP port")
    block_size: int = _opt(16, "tokens per KV block")
    num_gpu_blocks: int = _opt(16384, "KV cache capacity in blocks (vLLM: --num-gpu-blocks-override)")
    max_num_seqs: int = _opt(256, "running sequences per forward pass")
    max_num_batched_tokens: int = _opt(8192, "token budget per forward pass (chunked prefill)")
    max_model_len: int = _opt(131072, "prompt + output tokens per request")
    enable_prefix_caching: bool = _opt(True, "reuse cached prefix blocks (chained hashes, LRU eviction)")
    seed: int = _opt(0, "output tokens are a function of (seed, prompt, position)")
    timing: TimingName = _opt("roofline", "step-time model: roofline, or NVIDIA Dynamo's mocker")
    model_size: str = _opt("8b", "roofline model preset: 1b, 8b, 70b")
    gpu: str = _opt("h200", "roofline GPU preset: h200, h100, a100, l40s")
    tensor_parallel_size: int = _opt(1, "roofline: GPUs sharing weights and compute")
    speedup_ratio: float = _opt(1.0, "simulated seconds per wall-clock second")
    vocab_size: int = _opt(128256, "output token ids are drawn from [0, vocab_size)")
    kv_transfer_bandwidth: float = _opt(25.0, "GB/s of a simulated KV transfer")
    enable_prompt_tokens_details: bool = _opt(False, "fill usage.prompt_tokens_details.cached_tokens")
    kv_events_config: KvEventsConfig | None = _opt(None, "vLLM KVEventsConfig as JSON: ZMQ PUB + replay ROUTER")
    kv_transfer_config: KvTransferConfig | None = _opt(
        None, "vLLM KVTransferConfig as JSON; with kv_connector set, kv_transfer_params are honoured (NIXL)"
    )
    runner: str = _opt("generate", "vLLM's --runner: generate (text endpoints) or pooling (/v1/embeddings)")
    embedding_size: int = _opt(64, "pooling: the length of each embedding")
    nixl_side_channel_host: str = _opt("localhost", "remote_host in kv_transfer_params (default: $VLLM_NIXL_SIDE_CHANNEL_HOST)")
    nixl_side_channel_port: int = _opt(5600, "remote_port in kv_transfer_params (default: $VLLM_NIXL_SIDE_CHANNEL_PORT)")

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model


_JSON_FIELDS = {"kv_events_config": KvEventsConfig, "kv_transfer_config": KvTransferConfig}
_ENV_DEFAULTS = {
    "nixl_side_channel_host": "VLLM_NIXL_SIDE_CHANNEL_HOST",
    "nixl_side_channel_port": "VLLM_NIXL_SIDE_CHANNEL_PORT",
}
_IGNORED_VLLM_FLAGS = ("--dtype", "--gpu-memory-utilization", "--uvicorn-log-level", "--tokenizer")
_IGNORED_VLLM_SWITCHES = (
    "--enforce-eager",
    "--enable-scale-out",
    "--trust-remote-code",
    "--disable-log-stats",
    "--disable-log-requests",
    "--enable-log-requests",
)


def parse_json_config(cls: type, text: str) -> Any:
    """A config dataclass from JSON; unknown keys are an error, as in vLLM."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {unknown}")
    return cls(**data)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dynamo_lite.engines.mock",
        description="A simulated vLLM engine: vLLM's HTTP API, /metrics and KV events, with simulated time.",
    )
    choices = {"timing": ["roofline", "dynamo"], "model_size": sorted(MODEL_PRESETS), "gpu": sorted(GPU_PRESETS),
               "runner": ["generate", "pooling"]}
    for f in fields(MockEngineArgs):
        flag, help_ = "--" + f.name.replace("_", "-"), f.metadata.get("help")
        if f.name == "model":
            parser.add_argument(flag, required=True, help=help_)
        elif f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_)
        elif f.name in _JSON_FIELDS:
            parser.add_argument(flag, type=str, default=None, metavar="JSON", help=help_)
        elif f.name == "num_gpu_blocks":
            parser.add_argument(flag, "--num-gpu-blocks-override", dest=f.name, type=int, default=f.default, help=help_)
        elif f.name in choices:
            parser.add_argument(flag, choices=choices[f.name], default=f.default, help=help_)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            default = None if f.name in _ENV_DEFAULTS else f.default
            parser.add_argument(flag, type=kind, default=default, help=help_)
    for flag in _IGNORED_VLLM_FLAGS:
        parser.add_argument(flag, dest=None, help=argparse.SUPPRESS)
    for flag in _IGNORED_VLLM_SWITCHES:
        parser.add_argument(flag, action="store_true", dest=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str] | None = None, env: dict[str, str] | None = None) -> MockEngineArgs:
    """MockEngineArgs from a command line; like vLLM, the NIXL side channel
    defaults come from VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT."""
    env = dict(os.environ) if env is None else env
    ns = vars(build_parser().parse_args(argv))
    values = {f.name: ns[f.name] for f in fields(MockEngineArgs)}
    for name, cls in _JSON_FIELDS.items():
        values[name] = parse_json_config(cls, values[name]) if values[name] else None
    for name, var in _ENV_DEFAULTS.items():
        if values[name] is None:
            default = MockEngineArgs.__dataclass_fields__[name].default
            values[name] = type(default)(env.get(var, default))
    return MockEngineArgs(**values)


def to_argv(args: MockEngineArgs) -> list[str]:
    """The command-line arguments that `parse_args` turns back into `args`."""
    argv: list[str] = []
    for f in fields(MockEngineArgs):
        value = getattr(args, f.name)
        flag = "--" + f.name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif f.name in _JSON_FIELDS:
            argv += [flag, json.dumps(asdict(value))]
        else:
            argv += [flag, str(value)]
    return argv


def engine_command(args: MockEngineArgs, python: str | None = None) -> list[str]:
    """The full command that starts a mock engine process with `args`."""
    return [python or sys.executable, "-m", "dynamo_lite.engines.mock", *to_argv(args)]
