"""`kv_transfer_params` with vLLM NixlConnector semantics (pull mode).

- A request carrying `{"do_remote_decode": true}` is prefilled here, and its
  response says where its KV lives (`producer_params`).
- A request carrying `do_remote_prefill: true` (those params) loads the prompt's
  KV from the prefill instance instead of computing it (`parse_remote_kv`); the
  mock waits bytes / bandwidth of simulated time instead of pulling.
The prefill side frees its blocks when the request ends (they stay in its prefix
cache); vLLM keeps them pinned until the decode side has read them.
"""

from __future__ import annotations

from typing import Any

from dynamo_lite.engines.mock.sequence import RemoteKv, Sequence

_REQUIRED_REMOTE = ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port")


def wants_remote_decode(params: dict[str, Any] | None) -> bool:
    return bool(params and params.get("do_remote_decode"))


def parse_remote_kv(params: dict[str, Any] | None) -> RemoteKv | None:
    """The remote KV a decode request should load, or None for a local prefill.

    Raises ValueError when `do_remote_prefill` is set but the params are incomplete.
    """
    if not params or not params.get("do_remote_prefill"):
        return None
    missing = [k for k in _REQUIRED_REMOTE if k not in params]
    if missing:
        raise ValueError(f"kv_transfer_params: do_remote_prefill without {missing}")
    cached = params.get("remote_prefill_cached_tokens")
    return RemoteKv(
        num_tokens=int(params.get("remote_num_tokens") or 0),
        engine_id=str(params["remote_engine_id"]),
        cached_tokens=int(cached) if cached is not None else None,
    )


def producer_params(seq: Sequence, engine_id: str, host: str, port: int) -> dict[str, Any]:
    """What a prefill instance returns for a finished `do_remote_decode` request."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [seq.final_block_ids],
        "remote_engine_id": engine_id,
        "remote_request_id": seq.request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": len(seq.prompt),
        "remote_blocks_expiry_time": None,
        "transfer_mode": "pull",
        "remote_prefill_cached_tokens": seq.num_local_cached,
    }


def cached_tokens(seq: Sequence) -> int:
    """usage.prompt_tokens_details.cached_tokens: P's own hits for a transferred prompt."""
    if seq.remote_kv is not None and seq.remote_kv.cached_tokens is not None:
        return seq.remote_kv.cached_tokens
    return seq.num_local_cached + seq.num_external
