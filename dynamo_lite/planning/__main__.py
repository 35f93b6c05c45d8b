"""`python -m dynamo_lite.planning`: the planner as its own process, for clusters not run by `orchestrator up`.

    python -m dynamo_lite.planning -f cluster.yaml --nats-url nats://... --etcd-url http://... --connector kubernetes

`orchestrator up` runs the planner inside its supervisor instead (local pools);
this entry point is for Kubernetes (the rendered planner Deployment runs it with
`--connector kubernetes`) or for watching a cluster's decisions without acting
on them (`--connector none`: observe and log only).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from dynamo_lite.config import ClusterSpec, ConfigError, load_cluster_spec
from dynamo_lite.infra.entrypoint import add_spec_args, configure_logging
from dynamo_lite.planning.stage import ClusterLink, build_service, scaled_pools
from planner.connectors.base import ScalingConnector
from planner.connectors.observe_only import ObserveOnlyConnector
from planner.types import Pool, Replicas


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.planning", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    p.add_argument("--connector", choices=["kubernetes", "none"], default="none",
                   help="kubernetes: scale the pools' Deployments; none: only log decisions")
    return p.parse_args(argv)


def make_connector(kind: str, spec: ClusterSpec) -> ScalingConnector:
    pools = scaled_pools(spec)
    if kind == "kubernetes":
        from dynamo_lite.k8s.names import k8s_namespace, pool_deployment
        from dynamo_lite.planning.kubernetes import KubernetesConnector

        return KubernetesConnector(k8s_namespace(spec), {p: pool_deployment(spec, ps) for p, ps in pools.items()})
    return ObserveOnlyConnector(Replicas(*(pools[p].replicas if p in pools else 0 for p in Pool)))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(args.log_level)
    try:
        spec = load_cluster_spec(args.file)
        decode = scaled_pools(spec).get(Pool.DECODE)
        if decode is None:
            raise ConfigError(f"{args.file}: the planner needs a decode (or aggregated) pool")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    frontend = None
    if args.connector == "kubernetes":
        from dynamo_lite.k8s.names import frontend_pods_url

        # The headless Service: one address per ready frontend pod, each scraped (the Service reaches one).
        frontend = [f"{frontend_pods_url(spec)}/metrics"]
    link = ClusterLink(spec, args.nats_url, args.etcd_url, spec.model_of(decode).name, decode.role, frontend,
                       every_address=frontend is not None)
    service = build_service(spec, link, make_connector(args.connector, spec), link.stop,
                            dry_run=args.connector == "none")

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        try:
            await service.start()
            await stop.wait()
        finally:
            await service.stop()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
