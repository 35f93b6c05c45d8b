"""`orchestrator`: the command line, and the composition root that wires real components."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from dynamo_lite.config import ClusterSpec, ConfigError, load_cluster_spec
from dynamo_lite.infra import MissingBinary, ProcessFailed
from dynamo_lite.infra.entrypoint import add_spec_args, configure_logging
from dynamo_lite.orchestrator.state import pid_alive, read_state
from dynamo_lite.orchestrator.status import cluster_status, render
from dynamo_lite.orchestrator.supervisor import (
    AlreadyRunning,
    Component,
    Endpoints,
    Supervisor,
)

EXIT_CONFIG = 2
EXIT_FAILED = 1

HELP = """\
Run an OpenAI-compatible LLM service on a fleet of vLLM workers.

  orchestrator up -f cluster.yaml       bring the cluster up (foreground; Ctrl-C stops it)
  orchestrator status -f cluster.yaml   what runs where, and whether it is healthy
  orchestrator down -f cluster.yaml     stop a cluster started by `up`
  orchestrator scale -f cluster.yaml POOL N
                                        set a running pool's replicas (through `up`'s admin API)
  orchestrator render k8s -f cluster.yaml -o DIR
                                        the same cluster as Kubernetes manifests

Every key of cluster.yaml: docs/reference/cluster-yaml.md; examples: deploy/examples/.
NATS and etcd are started for you unless the spec names external ones.
Secrets never go in cluster.yaml: it names the environment variables that hold them.
"""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        spec = load_cluster_spec(args.file)
    except ConfigError as e:
        print(f"error: invalid cluster spec\n{e}", file=sys.stderr)
        return EXIT_CONFIG
    return int(args.run(spec, args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrator", description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, run) -> argparse.ArgumentParser:  # noqa: ANN001
        p = sub.add_parser(name, help=help_, description=help_)
        add_spec_args(p, control_plane=False)
        p.set_defaults(run=run)
        return p

    command("up", "bring the cluster up and keep it running until Ctrl-C or SIGTERM", _up)
    command("status", "show the cluster's processes, their health and the registered workers", _status)
    down = command("down", "stop the cluster that `orchestrator up` runs for this spec", _down)
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for an orderly stop")
    scale = command("scale", "set the number of workers of a pool of the running cluster", _scale)
    scale.description = (
        "Set the number of workers of a pool of the running cluster, through the admin API of "
        "`orchestrator up` (its address is in the cluster's state file; when `admin.token_env` names a "
        "variable, the bearer token is read from it). Returns once the new workers have registered, or the "
        "removed ones have drained and stopped. With the planner enabled, it may move the pool again later."
    )
    scale.add_argument("pool", metavar="POOL", help="name of the pool in the spec")
    scale.add_argument("replicas", metavar="N", type=int, help="workers the pool should have (0 or more)")
    scale.add_argument("--timeout", type=float, default=900.0,
                       help="seconds to wait for the workers (vLLM engines take minutes to start)")
    from dynamo_lite.k8s.render import add_render_command

    add_render_command(sub)
    return parser


def _up(spec: ClusterSpec, args: argparse.Namespace) -> int:
    pools: list[Component] = []  # the worker pools, handed to the planner that scales them
    frontends: list[Component] = []  # the frontend processes, whose metrics the planner reads

    def worker_pools(spec: ClusterSpec, spec_path: Path, endpoints: Endpoints) -> list[Component]:
        from dynamo_lite.worker.pool import local_pools

        pools[:] = local_pools(spec, spec_path, endpoints.nats_url, endpoints.etcd_url)
        return list(pools)

    def planner(spec: ClusterSpec, spec_path: Path, endpoints: Endpoints) -> list[Component]:
        from dynamo_lite.frontend.component import FrontendProcess
        from dynamo_lite.planning import planner_stage

        metrics = [f"{f.metrics_url}/metrics" for f in frontends if isinstance(f, FrontendProcess)]
        return list(planner_stage(spec, spec_path, endpoints, pools, on_scaled=supervisor.refresh_state,
                                  frontend_metrics=metrics or None))

    def frontend(spec: ClusterSpec, spec_path: Path, endpoints: Endpoints) -> list[Component]:
        from dynamo_lite.frontend.component import frontend_stage

        frontends[:] = frontend_stage(spec, spec_path, endpoints.nats_url, endpoints.etcd_url)
        return list(frontends)

    def observability(spec: ClusterSpec, spec_path: Path, endpoints: Endpoints) -> list[Component]:
        from dynamo_lite.observability.prometheus import EmbeddedPrometheus
        from dynamo_lite.observability.targets import TargetsWriter, targets_file

        targets = TargetsWriter(spec, endpoints.etcd_url)
        supervisor.state_listeners.append(lambda state: targets.on_processes(state.processes))
        stage: list[Component] = [targets]
        if spec.observability.prometheus.enabled:
            prometheus = spec.observability.prometheus
            stage.append(EmbeddedPrometheus(prometheus, spec.resolved_state_dir(), targets_file(spec)))
        return stage

    if spec.models and spec.frontend.port and read_state(spec.resolved_state_dir()) is None:
        # Before anything starts (a cluster already up is refused by the supervisor); the frontend stage
        # checks again, since its processes bind the port with SO_REUSEPORT, which shares it silently.
        from dynamo_lite.infra.ports import ensure_free

        try:
            ensure_free(spec.frontend.host, spec.frontend.port)
        except OSError as e:
            print(f"error: frontend.port: {e}", file=sys.stderr)
            return EXIT_FAILED
    stages = [_models, observability, worker_pools, frontend, planner]
    supervisor = Supervisor(spec, args.file.resolve(), component_factories=stages)
    if spec.admin.enabled:
        from dynamo_lite.orchestrator.admin import AdminServer, admin_app

        try:
            token = spec.admin.token()
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_CONFIG
        app = admin_app(spec, lambda: pools, lambda: cluster_status(spec), supervisor.refresh_state, token,
                        supervisor.metrics.registry)
        supervisor.admin = AdminServer(spec.admin, app)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await supervisor.run(stop)

    try:
        asyncio.run(run())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except (AlreadyRunning, MissingBinary, ProcessFailed, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _models(spec: ClusterSpec, spec_path: Path, endpoints: Endpoints) -> list[Component]:
    from dynamo_lite.worker.pool import ModelPreparation

    preparation = ModelPreparation(spec)
    return [preparation] if preparation.paths else []


def _status(spec: ClusterSpec, args: argparse.Namespace) -> int:
    try:
        status = asyncio.run(cluster_status(spec))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    print(render(spec, status))
    return 0 if status.healthy and status.checks else EXIT_FAILED


def _down(spec: ClusterSpec, args: argparse.Namespace) -> int:
    state = read_state(spec.resolved_state_dir())
    if state is None:
        print(f"cluster {spec.namespace!r} is not running (no live `orchestrator up` for {spec.resolved_state_dir()})")
        return 0
    print(f"stopping cluster {spec.namespace!r} (supervisor pid {state.supervisor_pid}) ...", flush=True)
    os.kill(state.supervisor_pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while pid_alive(state.supervisor_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(state.supervisor_pid):
        print(f"supervisor did not stop within {args.timeout:.0f} s; killing what it started", file=sys.stderr)
        for p in [*state.processes, None]:
            pid = state.supervisor_pid if p is None else p.pid
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        return EXIT_FAILED
    print("stopped.")
    return 0


def _scale(spec: ClusterSpec, args: argparse.Namespace) -> int:
    from dynamo_lite.orchestrator.admin import AdminError, scale_pool

    state = read_state(spec.resolved_state_dir())
    if state is None:
        print(f"error: cluster {spec.namespace!r} is not running (no live `orchestrator up` for "
              f"{spec.resolved_state_dir()})", file=sys.stderr)
        return EXIT_FAILED
    if state.admin_url is None:
        print("error: the running `orchestrator up` serves no admin API (admin.enabled: false)", file=sys.stderr)
        return EXIT_FAILED
    if args.replicas < 0:
        print("error: N must be 0 or more", file=sys.stderr)
        return EXIT_CONFIG
    try:
        token = spec.admin.token()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        reply = asyncio.run(scale_pool(state.admin_url, args.pool, args.replicas, token, args.timeout))
    except AdminError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"pool {reply.pool.name}: {reply.previous} -> {reply.pool.replicas} replicas")
    return 0


if __name__ == "__main__":
    sys.exit(main())
