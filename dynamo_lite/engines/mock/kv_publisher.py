"""Publishes KV event batches over ZMQ exactly as vLLM's ZmqEventPublisher
(vllm/distributed/kv_events.py):

- PUB socket: multipart (topic, 8-byte big-endian sequence number, msgpack
  `KVEventBatch`). It binds for a wildcard or ipc/inproc endpoint
  (`tcp://*:P`) and connects otherwise (`tcp://127.0.0.1:P`: the subscriber binds).
- Replay ROUTER (optional, always bound): a client sends the start sequence
  number as 8 big-endian bytes (frames: identity, empty, seq); it receives
  (identity, empty, topic, seq, payload) for each buffered batch from there,
  then (identity, empty, b"", seq -1, b"").
`NullPublisher` drops everything, for engines without `--kv-events-config`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

import msgspec
import zmq
import zmq.asyncio

from dynamo_lite.engines.mock.args import KvEventsConfig
from dynamo_lite.protocol import KvEvent, KvEventBatch
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KvPublisher(Protocol):
    async def start(self) -> None: ...
    def publish(self, ts: float, events: list[KvEvent]) -> None: ...
    async def stop(self) -> None: ...


class NullPublisher:
    async def start(self) -> None:
        return None

    def publish(self, ts: float, events: list[KvEvent]) -> None:
        return None

    async def stop(self) -> None:
        return None


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule: bind wildcard and ipc/inproc endpoints, connect to the rest."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqPublisher:
    """Owns its ZMQ context, PUB socket, replay ROUTER and the task serving replay."""

    def __init__(self, config: KvEventsConfig, data_parallel_rank: int = 0) -> None:
        self._config = config
        self._dp_rank = data_parallel_rank
        self._topic = config.topic.encode()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._encoder = msgspec.msgpack.Encoder()
        self._seq = 0
        self._ctx: zmq.Context | None = None  # PUB: plain non-blocking sends from the engine loop
        self._actx: zmq.asyncio.Context | None = None  # replay ROUTER, served by a task
        self._pub: zmq.Socket | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._ctx is not None:
            return
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(self._config.hwm)
        if is_bind_endpoint(self._config.endpoint):
            self._pub.bind(self._config.endpoint)
        else:
            self._pub.connect(self._config.endpoint)
        if self._config.replay_endpoint:
            self._actx = zmq.asyncio.Context()
            self._replay = self._actx.socket(zmq.ROUTER)
            self._replay.bind(self._config.replay_endpoint)
            self._replay_task = asyncio.create_task(self._serve_replay(), name="kv-events-replay")
        log.info("kv events: PUB %s, replay %s", self._config.endpoint, self._config.replay_endpoint)

    def publish(self, ts: float, events: list[KvEvent]) -> None:
        """Send one batch now (PUB never blocks: past the HWM ZMQ drops, as in vLLM)."""
        if self._pub is None or not events:
            return
        payload = self._encoder.encode(KvEventBatch(ts=ts, events=events, data_parallel_rank=self._dp_rank))
        seq = self._seq
        self._seq += 1
        self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
        self._buffer.append((seq, payload))

    async def stop(self) -> None:
        if self._replay_task is not None:
            await cancel_and_wait(self._replay_task)
            self._replay_task = None
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._replay = None
        for ctx in (self._ctx, self._actx):
            if ctx is not None:
                ctx.term()
        self._ctx = self._actx = None

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3:
                log.warning("kv events: invalid replay request of %d frames", len(frames))
                continue
            client_id, _, start = frames
            start_seq = int.from_bytes(start, "big")
            for seq, payload in list(self._buffer):
                if seq >= start_seq:
                    await self._replay.send_multipart((client_id, b"", self._topic, seq.to_bytes(8, "big"), payload))
            await self._replay.send_multipart((client_id, b"", b"", END_SEQ, b""))


def make_publisher(config: KvEventsConfig | None) -> KvPublisher:
    return ZmqPublisher(config) if config is not None and config.enabled else NullPublisher()
