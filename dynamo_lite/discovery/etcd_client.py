"""Build an aetcd client from a URL (and credentials), and the errors that mean 'etcd is
unreachable' or 'etcd refuses us'."""

from __future__ import annotations

import aetcd
import aetcd.exceptions
import grpc

from dynamo_lite.config import split_url
from dynamo_lite.credentials import ETCD_PASSWORD, ETCD_USER, EtcdCredentials

ETCD_UNAVAILABLE: tuple[type[BaseException], ...] = (
    aetcd.exceptions.ClientError,
    grpc.aio.AioRpcError,
    TimeoutError,
    ConnectionError,
)
"""What an etcd call raises while the server is down, restarting or unreachable (and, being
ClientErrors too, when it refuses us: check `refusal(e)` before retrying)."""


class EtcdAuthError(RuntimeError):
    """etcd refused this client: authentication is on and the credentials are missing, wrong or
    lack permission (or are given to an etcd without authentication). Retrying cannot help."""


_REFUSALS = {
    "user name is empty": "etcd has authentication enabled and no credentials were given: set etcd.user and "
                          f"etcd.password_env in cluster.yaml (`orchestrator up` passes them on as {ETCD_USER} "
                          f"and {ETCD_PASSWORD})",
    "authentication failed": "wrong etcd user name or password (etcd.user, etcd.password_env)",
    "permission denied": "the etcd user may not read or write the /dynamo_lite/ prefix: grant its role readwrite there",
    "authentication is not enabled": "credentials were given but this etcd has no authentication: "
                                     "remove etcd.user and etcd.password_env",
    "invalid auth token": "the client's etcd auth token is no longer valid (etcd restarted, or it expired): "
                          "restart this process to authenticate again",
}


def refusal(error: BaseException) -> EtcdAuthError | None:
    """The EtcdAuthError that explains `error` when it is etcd refusing our credentials, else None."""
    if isinstance(error, aetcd.exceptions.ClientError) and error.args and isinstance(error.args[0], EtcdAuthError):
        return error.args[0]  # raised by `connect()` inside a call, which aetcd wraps in a ClientError
    if not isinstance(error, aetcd.exceptions.ClientError | grpc.aio.AioRpcError):
        return None
    detail = str(error.details() if isinstance(error, grpc.aio.AioRpcError) else error)
    for marker, explanation in _REFUSALS.items():
        if marker in detail:
            return EtcdAuthError(f"etcd refused the request ({detail.strip()}): {explanation}")
    return None


def etcd_client(url: str, timeout_s: float = 5.0, credentials: EtcdCredentials | None = None) -> aetcd.Client:
    """An unconnected client for `http://host:port` with a per-call timeout. Connecting raises
    EtcdAuthError if etcd refuses the credentials.

    `credentials`: None takes them from the process environment (DYNAMO_LITE_ETCD_USER and
    _PASSWORD; unset: no authentication). aetcd authenticates once, when it connects.
    """
    creds = credentials if credentials is not None else EtcdCredentials.from_environ()
    host, port = split_url(url)
    # gRPC backs off up to 2 minutes between reconnect attempts by default; an etcd that
    # restarts should be found again within a second.
    options = {"grpc.initial_reconnect_backoff_ms": 200, "grpc.max_reconnect_backoff_ms": 1000}
    # aetcd passes `timeout` to gRPC as the deadline of every call and watch creation.
    return _Client(host=host, port=port, username=creds.user, password=creds.password,  # type: ignore[arg-type]
                   timeout=timeout_s, options=options)


class _Client(aetcd.Client):
    """aetcd's client, whose `connect()` (where it authenticates) raises EtcdAuthError when etcd
    refuses the credentials, instead of an error that looks like etcd being unreachable."""

    async def connect(self) -> None:
        try:
            await super().connect()
        except ETCD_UNAVAILABLE as e:
            if (refused := refusal(e)) is not None:
                raise refused from e
            raise
