"""Build an aetcd client from a URL, and the errors that mean 'etcd is unreachable'."""

from __future__ import annotations

import aetcd
import aetcd.exceptions
import grpc

from dynamo_lite.config import split_url

ETCD_UNAVAILABLE: tuple[type[BaseException], ...] = (
    aetcd.exceptions.ClientError,
    grpc.aio.AioRpcError,
    TimeoutError,
    ConnectionError,
)
"""What an etcd call raises while the server is down, restarting or unreachable."""


def etcd_client(url: str, timeout_s: float = 5.0) -> aetcd.Client:
    """An unconnected client for `http://host:port` with a per-call timeout."""
    host, port = split_url(url)
    # gRPC backs off up to 2 minutes between reconnect attempts by default; an etcd that
    # restarts should be found again within a second.
    options = {"grpc.initial_reconnect_backoff_ms": 200, "grpc.max_reconnect_backoff_ms": 1000}
    # aetcd passes `timeout` to gRPC as the deadline of every call and watch creation.
    return aetcd.Client(host=host, port=port, timeout=timeout_s, options=options)  # type: ignore[arg-type]
