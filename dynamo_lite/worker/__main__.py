"""`python -m dynamo_lite.worker`: one worker agent (and, unless attached, its engine).

    python -m dynamo_lite.worker -f cluster.yaml --pool decode --nats-url nats://... --etcd-url http://...

`orchestrator up` starts one per replica. With `--engine-url` the agent attaches to
an engine started elsewhere (a sidecar container) and only connects it to the cluster.
Runs on uvloop when it is installed, as the frontend does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import zmq

from dynamo_lite.config import ClusterSpec, ConfigError, PoolSpec, load_cluster_spec
from dynamo_lite.infra import ProcessFailed
from dynamo_lite.infra.entrypoint import add_spec_args, configure_logging, run_loop, tune_gc
from dynamo_lite.protocol import WorkerId
from dynamo_lite.worker.agent import AgentSettings, WorkerAgent
from dynamo_lite.worker.engine import EngineHandle, attached_engine, launched_engine

log = logging.getLogger("dynamo_lite.worker")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    p.add_argument("--pool", required=True, help="name of the pool in the spec this worker belongs to")
    p.add_argument("--replica", type=int, default=0, help="replica index, used in the worker id and log names")
    p.add_argument("--worker-id", help="default: <pool>-<replica>-<random>")
    p.add_argument("--cpu-core", type=int, help="CPU engines: pin the engine's threads to this core")
    p.add_argument("--engine-url", help="attach to this running engine instead of launching one")
    p.add_argument("--kv-events-port", type=int, default=0, help="with --engine-url: port to receive KV events on")
    p.add_argument("--kv-events-replay", help="with --engine-url: the engine's KV-event replay endpoint")
    return p.parse_args(argv)


def find_pool(args: argparse.Namespace, spec: ClusterSpec) -> PoolSpec:
    pool = next((p for p in spec.pools if p.name == args.pool), None)
    if pool is None:
        raise ConfigError(f"{args.file}: no pool named {args.pool!r} (pools: {', '.join(p.name for p in spec.pools)})")
    return pool


def build(args: argparse.Namespace, spec: ClusterSpec, worker_id: WorkerId) -> WorkerAgent:
    """The agent and its engine (on freshly picked ports)."""
    pool = find_pool(args, spec)
    model = spec.model_of(pool)
    engine: EngineHandle
    if args.engine_url:
        engine = attached_engine(args.engine_url, args.kv_events_port, args.kv_events_replay)
    else:
        state = spec.resolved_state_dir()
        model_dir = Path()
        if pool.engine == "vllm":
            from dynamo_lite.engines.models import resolve_model

            model_dir = resolve_model(model.path, state / "models")
        engine = launched_engine(spec, pool, model_dir, state / "logs", worker_id, args.cpu_core)
    settings = AgentSettings(
        worker_id=worker_id, namespace=spec.namespace, role=pool.role, model=model.name,
        block_size=model.block_size, pool=pool.name, nats_url=args.nats_url, etcd_url=args.etcd_url,
        lease_ttl_s=spec.etcd.lease_ttl_s,
    )
    return WorkerAgent(settings, engine)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(args.log_level)
    try:
        spec = load_cluster_spec(args.file)
        pool = find_pool(args, spec)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    async def run() -> int:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        worker_id = WorkerId(args.worker_id or f"{pool.name}-{args.replica}-{uuid.uuid4().hex[:6]}")
        agent = await start_agent(lambda: build(args, spec, worker_id))
        stopped = asyncio.create_task(stop.wait())
        engine_gone = asyncio.create_task(agent.engine.wait_exit())
        try:
            await asyncio.wait([stopped, engine_gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stopped, engine_gone):
                task.cancel()
            await agent.stop()
        if engine_gone.done() and not engine_gone.cancelled():
            # The agent leaves with its engine, so that whoever runs the worker (`orchestrator up`,
            # the kubelet) replaces both; its lease is revoked on the way out.
            log.error("worker %s: its engine died (%s); the worker stops", worker_id, engine_gone.result())
            return 1
        return 0

    tune_gc()
    return run_loop(run())


PORT_TAKEN = "address already in use"  # the OS's strerror; asyncio lowercases it, vLLM and ZMQ print it capitalized


def port_taken(error: str) -> bool:
    """Whether a failed start says a port it was to bind was taken."""
    return PORT_TAKEN in error.lower()


async def start_agent(make: Callable[[], WorkerAgent], attempts: int = 3) -> WorkerAgent:
    """Start an agent; if one of the free ports picked for it was taken before the engine
    bound it (another process starting at the same moment), try again with new ports."""
    for attempt in range(1, attempts + 1):
        agent = make()
        try:
            await agent.start()
            return agent
        except (ProcessFailed, zmq.ZMQError) as e:
            await agent.stop()
            if not port_taken(str(e)) or attempt == attempts:
                raise
            log.warning("a port picked for worker %s was taken meanwhile; starting again with new ports (%d/%d)",
                        agent.settings.worker_id, attempt, attempts)
        except BaseException:
            await agent.stop()
            raise
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main())
