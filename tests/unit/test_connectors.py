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
    assert kv_transfer_config(Role.PREFILL, "cpu", spin_sleep_us=200)["kv_connector_extra_config"] == {
        "progress_delay_us": 1000, "spin_sleep_us": 200
    }


def test_cpu_config_uses_our_connector_without_a_delay_too() -> None:
    """Our class also keeps the engine's compute thread on its cores: a delay of 0 must not drop it."""
    config = kv_transfer_config(Role.DECODE, "cpu", progress_delay_us=0, spin_sleep_us=0)
    assert config is not None and config["kv_connector_module_path"] == "connectors.nixl_connector"
    assert config["kv_connector_extra_config"] == {"progress_delay_us": 0}


def test_cuda_config_is_plain_nixl_unless_a_delay_is_asked() -> None:
    assert kv_transfer_config(Role.DECODE, "cuda") == {
        "kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cuda",
    }
    assert kv_transfer_config(Role.DECODE, "cuda", progress_delay_us=50)["kv_connector_extra_config"] == {
        "progress_delay_us": 50
    }
    assert kv_transfer_config(Role.DECODE, "cuda", spin_sleep_us=100)["kv_connector_extra_config"] == {
        "progress_delay_us": 0, "spin_sleep_us": 100
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


def test_threads_moved_while_nixl_starts_go_back_to_their_cpus() -> None:
    """What vLLM's NIXL worker does on a CPU (it moves the thread that creates it to the last core, and the
    threads it starts inherit that), done for real to this thread and to one started meanwhile: both are back
    on this thread's CPUs afterwards. A thread that was there before and has CPUs of its own keeps them."""
    import os
    import threading

    pytest.importorskip("vllm", reason="needs vLLM")
    from connectors.nixl_connector import kept_cpu_affinity

    cpus = os.sched_getaffinity(0)
    assert len(cpus) >= 2, "needs two CPUs to move a thread between"
    last, first = max(cpus), min(cpus)
    done, ready = threading.Event(), threading.Barrier(3)
    tids: dict[str, int] = {}

    def park(name: str, own: set[int] | None) -> None:
        if own is not None:
            os.sched_setaffinity(0, own)
        tids[name] = threading.get_native_id()
        ready.wait()
        done.wait(10)

    older = threading.Thread(target=park, args=("older", {first}))
    older.start()
    try:
        with kept_cpu_affinity():
            os.sched_setaffinity(0, {last})  # as vLLM's NixlConnectorWorker does on a CPU
            newer = threading.Thread(target=park, args=("newer", None))  # inherits {last}, as NIXL's threads do
            newer.start()
            ready.wait()
            assert os.sched_getaffinity(tids["newer"]) == {last}
        assert os.sched_getaffinity(0) == cpus
        assert os.sched_getaffinity(tids["newer"]) == cpus
        assert os.sched_getaffinity(tids["older"]) == {first}
    finally:
        done.set()
        os.sched_setaffinity(0, cpus)


def test_spin_sleep_replaces_the_yield_of_vllms_shared_memory_wait() -> None:
    """The wait of vLLM's engine core for its worker (and back) turns on `sched_yield`, looked up in
    shm_broadcast's module: after the install each turn sleeps the given time, and a second install
    changes the time without wrapping twice."""
    import time

    pytest.importorskip("vllm", reason="needs vLLM")
    from vllm.distributed.device_communicators import shm_broadcast

    from connectors.nixl_connector import install_spin_sleep

    original = shm_broadcast.sched_yield
    try:
        install_spin_sleep(2000)
        t0 = time.perf_counter()
        for _ in range(5):
            shm_broadcast.sched_yield()
        assert time.perf_counter() - t0 >= 5 * 0.002
        turn = shm_broadcast.sched_yield
        install_spin_sleep(1)
        assert shm_broadcast.sched_yield is turn
    finally:
        shm_broadcast.sched_yield = original
