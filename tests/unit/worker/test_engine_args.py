"""Engine command lines built from the spec, and parsing engine metrics."""

from __future__ import annotations

import json
from pathlib import Path

from connectors import kv_transfer_config
from dynamo_lite.engines.vllm import VllmEngineConfig
from dynamo_lite.protocol import Role, WorkerId
from dynamo_lite.worker.load_reporter import cache_blocks, load_report, parse_engine_metrics

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="4681"} 1.0
"""


def test_load_and_capacity_from_vllm_metrics() -> None:
    report = load_report(WorkerId("w"), parse_engine_metrics(METRICS))
    assert (report.running, report.waiting, report.kv_usage) == (3, 1, 0.25)
    assert cache_blocks(METRICS) == 4681
    assert cache_blocks("") == 0


def test_cpu_decode_engine_argv_and_env() -> None:
    config = VllmEngineConfig(
        model_dir=Path("/models/tiny"), served_model_name="tiny", port=8100, max_model_len=2048, block_size=128,
        kv_events_endpoint="tcp://127.0.0.1:5557", kv_events_replay_endpoint="tcp://127.0.0.1:5558",
        kv_transfer_config=kv_transfer_config(Role.DECODE, "cpu"), env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"},
        device="cpu",
    )
    argv = config.argv()
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert flag("--dtype") == "float32", "auto means fp32 on a CPU"
    assert flag("--block-size") == "128" and flag("--served-model-name") == "tiny"
    assert "--enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert json.loads(flag("--kv-events-config")) == {
        "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:5557", "topic": "kv",
        "replay_endpoint": "tcp://127.0.0.1:5558",
    }
    assert json.loads(flag("--kv-transfer-config"))["kv_role"] == "kv_consumer"
    env = config.environ()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600" and env["HF_HUB_OFFLINE"] == "1"


def test_gpu_engine_keeps_dtype_and_sets_memory_fraction() -> None:
    config = VllmEngineConfig(model_dir=Path("/m"), served_model_name="m", port=1, device="cuda",
                              gpu_memory_utilization=0.8)
    argv = config.argv()
    assert argv[argv.index("--dtype") + 1] == "auto"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    assert "VLLM_CPU_KVCACHE_SPACE" not in config.environ()


def test_a_model_s_reasoning_parser_reaches_the_engine_s_structured_outputs() -> None:
    """With models[].reasoning_parser, the engine is started with vLLM's --reasoning-parser: it then holds a
    request to its structured output only after the reasoning ends, as vLLM's server does (a thinking model
    thinks, then writes the JSON). vLLM's own argument parser reads our command line so."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = VllmEngineConfig(model_dir=Path("/m"), served_model_name="m", port=1, device="cpu",
                              reasoning_parser="qwen3")  # fmt: skip
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(config.argv()[3:])
    assert AsyncEngineArgs.from_cli_args(args).reasoning_parser == "qwen3"
    plain = VllmEngineConfig(model_dir=Path("/m"), served_model_name="m", port=1, device="cpu")
    assert "--reasoning-parser" not in plain.argv()


def test_a_pooling_model_s_engine_runs_vllm_s_pooling_runner() -> None:
    """models[].runner: pooling starts the engine with --runner pooling, as vLLM's argument parser reads it."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = VllmEngineConfig(model_dir=Path("/m"), served_model_name="m", port=1, device="cpu", runner="pooling",
                              extra_args=("--convert", "embed"))  # fmt: skip
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(config.argv()[3:])
    engine = AsyncEngineArgs.from_cli_args(args)
    assert (engine.runner, engine.convert) == ("pooling", "embed")
    assert "--runner" not in VllmEngineConfig(model_dir=Path("/m"), served_model_name="m", port=1).argv()

