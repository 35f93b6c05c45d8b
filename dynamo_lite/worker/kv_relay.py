"""Relay an engine's KV events from ZMQ onto NATS, in order, recovering missed batches.

The relay binds a SUB socket on loopback and the engine's PUB connects to it (vLLM
binds only for wildcard endpoints). Each ZMQ message is `[topic, seq (8 bytes,
big-endian), msgpack KVEventBatch]`. A batch is republished as `RelayedKvEvents` on
`<ns>.kv_events.<worker_id>` with the engine's sequence number. When a sequence
number jumps (the relay started late, or ZMQ dropped messages), the missing batches
are asked from the engine's replay socket (a ROUTER: send the first missing seq,
receive `[topic, seq, payload]` frames until seq -1) and published first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import msgspec
import zmq
import zmq.asyncio

from dynamo_lite.protocol import KvEventBatch, RelayedKvEvents, WorkerId
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)

END_SEQ = -1
Publish = Callable[[RelayedKvEvents, bool], Awaitable[None]]
"""publish(batch, replayed): `replayed` is True for a batch recovered from the replay socket."""


class KvEventRelay:
    def __init__(
        self,
        worker_id: WorkerId,
        bind_endpoint: str,
        publish: Publish,
        replay_endpoint: str | None = None,
        replay_timeout_s: float = 2.0,
    ) -> None:
        self.worker_id = worker_id
        self.bind_endpoint = bind_endpoint
        self.replay_endpoint = replay_endpoint
        self.replay_timeout_s = replay_timeout_s
        self.publish = publish
        self.next_seq = 0
        """The engine sequence number the relay expects next."""
        self.batches_relayed = 0
        self.batches_replayed = 0
        self._ctx = zmq.asyncio.Context()
        self._sub: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._decoder = msgspec.msgpack.Decoder(KvEventBatch)

    def start(self) -> None:
        """Bind now (before the engine starts, so it has a peer to connect to) and relay in the background."""
        if self._task is not None:
            return
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.bind(self.bind_endpoint)
        self._task = asyncio.create_task(self._run(), name=f"kv-relay-{self.worker_id}")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None
        self._ctx.term()

    async def _run(self) -> None:
        assert self._sub is not None
        while True:
            _topic, seq_bytes, payload = await self._sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq > self.next_seq:
                await self._replay(self.next_seq, seq)
            if seq < self.next_seq:
                continue  # already relayed through a replay
            await self._relay(seq, payload)

    async def _relay(self, seq: int, payload: bytes, replayed: bool = False) -> None:
        try:
            batch = self._decoder.decode(payload)
        except msgspec.DecodeError as e:
            log.error("worker %s: undecodable KV event batch %d dropped: %s", self.worker_id, seq, e)
        else:
            await self.publish(RelayedKvEvents(worker_id=self.worker_id, seq=seq, batch=batch), replayed)
            self.batches_relayed += 1
            self.batches_replayed += replayed
        self.next_seq = seq + 1

    async def _replay(self, first: int, upto: int) -> None:
        """Publish batches [first, upto) from the engine's replay buffer, as far as it has them."""
        if self.replay_endpoint is None:
            log.warning("worker %s: KV event batches %d..%d lost (no replay endpoint)", self.worker_id, first, upto - 1)
            return
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        try:
            await dealer.send_multipart([b"", first.to_bytes(8, "big")])
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), self.replay_timeout_s)
                _empty, _topic, seq_bytes, payload = frames
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                if seq == END_SEQ or seq >= upto:
                    break
                if seq >= self.next_seq:
                    await self._relay(seq, payload, replayed=True)
        except TimeoutError:
            log.warning("worker %s: KV event replay from %d timed out", self.worker_id, first)
        finally:
            dealer.close(linger=0)
        if self.next_seq < upto:
            log.warning("worker %s: KV event batches %d..%d not in the engine's replay buffer",
                        self.worker_id, self.next_seq, upto - 1)
