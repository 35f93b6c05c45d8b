"""Composition of one mock engine from its `MockEngineArgs`: block pool and
scheduler, timing model, metrics on a registry of its own, KV-event publisher,
simulated clock. No I/O happens here; `MockEngine.start()` opens the sockets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from dynamo_lite.engines.mock.args import MockEngineArgs
from dynamo_lite.engines.mock.clock import SimClock
from dynamo_lite.engines.mock.engine import MockEngine
from dynamo_lite.engines.mock.kv_publisher import make_publisher
from dynamo_lite.engines.mock.metrics import EngineMetrics
from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig
from dynamo_lite.engines.mock.timing import (
    GPU_PRESETS,
    MODEL_PRESETS,
    DynamoTiming,
    RooflineTiming,
    TimingModel,
)
from dynamo_lite.engines.mock.tokenizer import WordTokenizer


@dataclass(frozen=True, slots=True)
class ServerState:
    args: MockEngineArgs
    engine: MockEngine
    registry: CollectorRegistry
    tokenizer: WordTokenizer
    engine_id: str  # NixlConnector engine id (remote_engine_id)
    connector: bool  # a KV connector is configured: kv_transfer_params are honoured


def build_timing(args: MockEngineArgs) -> TimingModel:
    if args.timing == "dynamo":
        return DynamoTiming()
    return RooflineTiming(MODEL_PRESETS[args.model_size], GPU_PRESETS[args.gpu], args.tensor_parallel_size)


def build_state(args: MockEngineArgs, registry: CollectorRegistry | None = None) -> ServerState:
    registry = registry or CollectorRegistry()
    model = MODEL_PRESETS[args.model_size]
    config = SchedulerConfig(
        block_size=args.block_size, num_gpu_blocks=args.num_gpu_blocks, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
        enable_prefix_caching=args.enable_prefix_caching, hash_seed=args.seed,
        kv_bytes_per_token=model.kv_bytes_per_token, kv_transfer_bandwidth=args.kv_transfer_bandwidth * 1e9,
    )  # fmt: skip
    ktc = args.kv_transfer_config
    connector = ktc is not None and ktc.kv_connector is not None
    cache_info = {"block_size": str(args.block_size), "num_gpu_blocks": str(args.num_gpu_blocks),
                  "enable_prefix_caching": str(args.enable_prefix_caching), "cache_dtype": "auto"}  # fmt: skip
    metrics = EngineMetrics(registry, args.model_name, args.max_model_len, cache_info, with_nixl=connector)
    engine = MockEngine(
        Scheduler(config), build_timing(args), metrics, make_publisher(args.kv_events_config),
        SimClock(args.speedup_ratio), external_connector=connector,
    )  # fmt: skip
    engine_id = (ktc.engine_id if ktc else None) or str(uuid.uuid4())
    return ServerState(args, engine, registry, WordTokenizer(args.vocab_size), engine_id, connector)
