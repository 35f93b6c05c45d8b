"""Embedded infrastructure: nats-server and etcd as child processes on loopback."""

from dynamo_lite.infra.binaries import MissingBinary, find_etcd, find_nats_server
from dynamo_lite.infra.etcd_server import EmbeddedEtcd
from dynamo_lite.infra.nats_server import EmbeddedNats
from dynamo_lite.infra.ports import free_port
from dynamo_lite.infra.process import ManagedProcess, ProcessFailed

__all__ = [
    "EmbeddedEtcd",
    "EmbeddedNats",
    "ManagedProcess",
    "MissingBinary",
    "ProcessFailed",
    "find_etcd",
    "find_nats_server",
    "free_port",
]
