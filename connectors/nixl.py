"""NixlConnector settings per role. Pure: builds JSON-able dicts, imports nothing of vLLM."""

from __future__ import annotations

from typing import Literal

WorkerRole = Literal["aggregated", "prefill", "decode"]
"""A worker's role as its pool declares it (dynamo_lite's `Role` values compare equal to these)."""

KvRole = Literal["kv_producer", "kv_consumer", "kv_both"]

DEFAULT_CPU_PROGRESS_DELAY_US = 1000
"""Sleep of NIXL's progress thread between polls on CPU buffers (NIXL itself uses 0: a busy loop)."""


def kv_role_for(role: WorkerRole, aggregated_kv: bool = False) -> KvRole | None:
    """prefill -> kv_producer, decode -> kv_consumer, aggregated -> none (or kv_both when asked)."""
    if role == "prefill":
        return "kv_producer"
    if role == "decode":
        return "kv_consumer"
    return "kv_both" if aggregated_kv else None


def kv_transfer_config(
    role: WorkerRole,
    buffer_device: Literal["cpu", "cuda"],
    progress_delay_us: int | None = None,
    aggregated_kv: bool = False,
    spin_sleep_us: int | None = None,
) -> dict[str, object] | None:
    """The `--kv-transfer-config` for an engine of this role, or None for no KV transfer.

    `progress_delay_us`: None picks the default for the device (1 ms on cpu; NIXL's own
    busy loop on cuda, where the thread polls GPU transfers and latency matters more). On cpu
    the engine always loads this repository's connector: it keeps each engine on its own cores.
    `spin_sleep_us`: a sleep for each turn of vLLM's wait between engine core and model worker; 0 or
    None: vLLM's own spin on sched_yield (connectors/nixl_connector.py).
    """
    kv_role = kv_role_for(role, aggregated_kv)
    if kv_role is None:
        return None
    delay = progress_delay_us if progress_delay_us is not None else (
        DEFAULT_CPU_PROGRESS_DELAY_US if buffer_device == "cpu" else 0
    )
    config: dict[str, object] = {
        "kv_connector": "NixlConnector",
        "kv_role": kv_role,
        "kv_buffer_device": buffer_device,
    }
    spin = spin_sleep_us or 0
    if delay > 0 or spin > 0 or buffer_device == "cpu":
        # Same class name, so vLLM's own checks for "NixlConnector" still apply. On cpu it also keeps the
        # engine's compute thread on its own cores (connectors/nixl_connector.py), whatever the delay.
        extra: dict[str, int] = {"progress_delay_us": delay}
        if spin > 0:
            extra["spin_sleep_us"] = spin
        config["kv_connector_module_path"] = "connectors.nixl_connector"
        config["kv_connector_extra_config"] = extra
    return config


def nixl_env(side_channel_port: int, host: str = "127.0.0.1") -> dict[str, str]:
    """Environment of one engine: where its NIXL side channel (handshake) listens."""
    return {"VLLM_NIXL_SIDE_CHANNEL_HOST": host, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel_port)}
