"""vLLM KV-transfer configuration per worker role (NixlConnector), CPU and GPU.

`kv_transfer_config(role, spec)` gives the `--kv-transfer-config` JSON for an
engine; `nixl_env(side_channel_port)` the environment NIXL's side channel needs.
On CPU the connector class is our `connectors.nixl_connector.NixlConnector`, a
subclass of vLLM's that gives NIXL's progress thread a non-zero delay (see there).
"""

from connectors.nixl import KvRole, kv_role_for, kv_transfer_config, nixl_env

__all__ = ["KvRole", "kv_role_for", "kv_transfer_config", "nixl_env"]
