"""NixlConnector settings per role, and the progress-delay fix applied to NIXL's real bindings."""

from __future__ import annotations

import pytest

from connectors import kv_role_for, kv_transfer_config, nixl_env
from dynamo_lite.protocol import Role


def test_roles_map_to_kv_roles() -> None:
    assert kv_role_for(Role.PREFILL) == "kv_producer"
    assert kv_role_for(Role.DECODE) == "kv_consumer"
    assert kv_role_for(Role.AGGREGATED) is None
    assert kv_role_for(Role.AGGREGATED, aggregated_kv=True) == "kv_both"


def test_cpu_config_uses_our_connector_with_a_delay() -> None:
    assert kv_transfer_config(Role.PREFILL, "cpu") == {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_producer",
        "kv_buffer_device": "cpu",
        "kv_connector_module_path": "connectors.nixl_connector",
        "kv_connector_extra_config": {"progress_delay_us": 1000},
    }


def test_cuda_config_is_plain_nixl_unless_a_delay_is_asked() -> None:
    assert kv_transfer_config(Role.DECODE, "cuda") == {
        "kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cuda",
    }
    assert kv_transfer_config(Role.DECODE, "cuda", progress_delay_us=50)["kv_connector_extra_config"] == {
        "progress_delay_us": 50
    }
    assert kv_transfer_config(Role.AGGREGATED, "cpu") is None


def test_side_channel_env() -> None:
    assert nixl_env(5600) == {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}


def test_progress_delay_clamps_the_agent_config_nixl_builds() -> None:
    pytest.importorskip("vllm", reason="needs vLLM")
    nixl_api = pytest.importorskip("nixl._api", reason="needs NIXL (pip install nixl-cu12 and nixl --no-deps)")
    import sys

    from connectors.nixl_connector import install_progress_delay

    api = sys.modules[nixl_api.nixl_agent.__module__]
    original = api.nixlBind
    try:
        install_progress_delay(750)
        config = api.nixlBind.nixlAgentConfig()
        config.pthrDelay = 0  # what nixl_agent.__init__ does
        assert config.pthrDelay == 750
        assert isinstance(config, original.nixlAgentConfig), "still the binding's type, as nixlAgent requires"
        install_progress_delay(2000)  # a second install updates the delay, it does not wrap twice
        config = api.nixlBind.nixlAgentConfig()
        config.pthrDelay = 10
        assert config.pthrDelay == 2000 and api.nixlBind._bindings is original
    finally:
        api.nixlBind = original
