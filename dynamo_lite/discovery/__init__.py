"""etcd service discovery: lease-based worker registration and a live worker view."""

from dynamo_lite.discovery.etcd_client import (
    ETCD_UNAVAILABLE,
    EtcdAuthError,
    etcd_client,
    refusal,
)
from dynamo_lite.discovery.registration import WorkerRegistration
from dynamo_lite.discovery.watcher import WorkerChange, WorkerWatcher

__all__ = [
    "ETCD_UNAVAILABLE",
    "EtcdAuthError",
    "WorkerChange",
    "WorkerRegistration",
    "WorkerWatcher",
    "etcd_client",
    "refusal",
]
