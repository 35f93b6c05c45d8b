"""MockEngineArgs <-> argv, vLLM-compatible flags and JSON configs."""

from __future__ import annotations

import sys

import pytest

from dynamo_lite.engines.mock import KvEventsConfig, KvTransferConfig, MockEngineArgs, engine_command, parse_args
from dynamo_lite.engines.mock.args import to_argv
from dynamo_lite.engines.mock.kv_publisher import is_bind_endpoint


def test_argv_round_trip() -> None:
    args = MockEngineArgs(
        model="llama", served_model_name="served", port=9000, num_gpu_blocks=100, timing="dynamo",
        speedup_ratio=50.0, seed=7, enable_prefix_caching=False, enable_prompt_tokens_details=True,
        kv_events_config=KvEventsConfig(enable_kv_cache_events=True, endpoint="tcp://127.0.0.1:5557", topic="kv"),
        kv_transfer_config=KvTransferConfig(kv_connector="NixlConnector", kv_role="kv_producer"),
        nixl_side_channel_port=5601,
    )  # fmt: skip
    assert parse_args(to_argv(args), env={}) == args


def test_engine_command_runs_the_module() -> None:
    cmd = engine_command(MockEngineArgs(model="m"), python="/py")
    assert cmd[:3] == ["/py", "-m", "dynamo_lite.engines.mock"] and "--model" in cmd
    assert engine_command(MockEngineArgs(model="m"))[0] == sys.executable


def test_a_vllm_command_line_is_accepted() -> None:
    argv = ["--model", "/models/x", "--host", "127.0.0.1", "--port", "8100", "--dtype", "float32",
            "--max-model-len", "4096", "--enforce-eager", "--served-model-name", "x", "--enable-prefix-caching",
            "--num-gpu-blocks-override", "512", "--kv-transfer-config",
            '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_buffer_device":"cpu"}']  # fmt: skip
    args = parse_args(argv, env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5700"})
    assert args.model_name == "x" and args.num_gpu_blocks == 512 and args.max_model_len == 4096
    assert args.kv_transfer_config is not None and args.kv_transfer_config.kv_role == "kv_consumer"
    assert (args.nixl_side_channel_host, args.nixl_side_channel_port) == ("10.0.0.1", 5700)


def test_unknown_config_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        parse_args(["--model", "m", "--kv-events-config", '{"enable_kv_cache_events": true, "endpont": "x"}'], env={})


def test_kv_events_defaults_follow_vllm() -> None:
    assert not KvEventsConfig().enabled
    assert KvEventsConfig(enable_kv_cache_events=True).enabled
    assert not KvEventsConfig(enable_kv_cache_events=True, publisher="null").enabled


@pytest.mark.parametrize(
    "endpoint,binds",
    [("tcp://*:5557", True), ("tcp://127.0.0.1:5557", False), ("ipc:///tmp/x", True), ("tcp://[::]:1", True)],
)
def test_pub_binds_only_for_wildcards_like_vllm(endpoint: str, binds: bool) -> None:
    assert is_bind_endpoint(endpoint) is binds
