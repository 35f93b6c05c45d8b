"""Looking into the prefill queue from a test: which jobs are not acked yet, and how many were redelivered.

Read straight from JetStream (a real nats-server), so a fault test can prove that the jobs a killed
prefill worker held went to another worker, rather than assume it.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
from nats.js.errors import NotFoundError

from dynamo_lite.credentials import NatsCredentials
from dynamo_lite.protocol import PrefillJob
from dynamo_lite.queue import connect_nats
from dynamo_lite.queue.stream import consumer_name, stream_name


def unacked_jobs(nats_url: str, namespace: str, older_than_s: float = 0.0,
                 credentials: NatsCredentials | None = None) -> list[int]:
    """Stream sequence numbers of the prefill jobs not acked yet (queued, or held by a worker) that were
    submitted more than `older_than_s` ago: the work queue drops a job once it is acked or terminated."""
    async def read() -> list[int]:
        nc = await connect_nats(nats_url, "test-probe", credentials=credentials)
        try:
            js = nc.jetstream()
            state = (await js.stream_info(stream_name(namespace))).state
            seqs = []
            for seq in range(state.first_seq, state.last_seq + 1):
                try:
                    job = msgspec.json.decode((await js.get_msg(stream_name(namespace), seq)).data, type=PrefillJob)
                except NotFoundError:
                    continue  # acked meanwhile
                if time.time() - job.submitted_at > older_than_s:
                    seqs.append(seq)
            return seqs
        finally:
            await nc.close()

    return asyncio.run(read())


def redeliveries(nats_url: str, namespace: str, model: str, credentials: NatsCredentials | None = None) -> int:
    """Deliveries of the model's prefill jobs beyond each job's first: the consumer numbers every delivery
    (consumer_seq), the stream every job (stream_seq); valid while the model's jobs are the only ones."""
    async def read() -> int:
        nc = await connect_nats(nats_url, "test-probe", credentials=credentials)
        try:
            info = await nc.jetstream().consumer_info(stream_name(namespace), consumer_name(model))
            return info.delivered.consumer_seq - info.delivered.stream_seq
        finally:
            await nc.close()

    return asyncio.run(read())
