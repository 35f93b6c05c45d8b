"""`orchestrator render k8s -f cluster.yaml [-o DIR]`: the Kubernetes objects of a cluster spec.

`render_k8s(spec, spec_text)` is pure: the same spec gives the same objects, in
the order `kubectl apply` needs them (Namespace, ConfigMap, NATS and etcd,
workers, frontend, planner). Without `-o` they go to stdout as one YAML stream;
with `-o DIR` each object is a file `NN-kind-name.yaml`, so `kubectl apply -f DIR`
applies them in that order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from dynamo_lite.config import ClusterSpec, ConfigError, parse_cluster_spec
from dynamo_lite.infra.entrypoint import LOG_ENV, LOG_LEVELS
from dynamo_lite.k8s import control, infra, workers
from dynamo_lite.k8s.pods import Obj

HEADER = "# Rendered by `orchestrator render k8s` from {source}; edit the spec and render again.\n"


def render_k8s(spec: ClusterSpec, spec_text: str) -> list[Obj]:
    """Every object of the cluster; `spec_text` (the spec as written) goes into the ConfigMap."""
    objects: list[Obj] = [*infra.namespace(spec), infra.config_map(spec, spec_text)]
    objects += infra.nats(spec) + infra.etcd(spec)
    objects += [workers.pool_deployment_object(spec, spec_text, pool) for pool in spec.pools]
    objects += control.frontend(spec, spec_text) + control.planner(spec, spec_text)
    return objects


class _Dumper(yaml.SafeDumper):
    """Block-style YAML without anchors; multi-line strings (the embedded cluster.yaml) as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def file_names(objects: list[Obj]) -> list[str]:
    return [f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml" for i, o in enumerate(objects)]


def write_dir(objects: list[Obj], out: Path, source: str) -> list[Path]:
    """One file per object; files of an earlier render that are not rewritten are removed."""
    out.mkdir(parents=True, exist_ok=True)
    names = file_names(objects)
    for stale in out.glob("[0-9][0-9]-*.yaml"):
        if stale.name not in names:
            stale.unlink()
    paths = []
    for name, obj in zip(names, objects, strict=True):
        path = out / name
        path.write_text(HEADER.format(source=source) + to_yaml(obj))
        paths.append(path)
    return paths


def to_stream(objects: list[Obj], source: str) -> str:
    return HEADER.format(source=source) + "---\n".join(to_yaml(o) for o in objects)


def run_render(spec: ClusterSpec, args: argparse.Namespace) -> int:
    """The `render k8s` command, once the CLI has loaded the spec from `args.file`."""
    text = Path(args.file).read_text()
    try:
        objects = render_k8s(spec, text)
    except ValueError as e:  # a name Kubernetes cannot take
        print(f"error: {e}", file=sys.stderr)
        return 2
    source = Path(args.file).as_posix()
    if args.output is None:
        sys.stdout.write(to_stream(objects, source))
    else:
        for path in write_dir(objects, args.output, source):
            print(path)
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--file", required=True, type=Path, help="cluster spec (cluster.yaml)")
    p.add_argument("-o", "--output", type=Path, help="directory to write one file per object (default: stdout)")
    p.add_argument("--log-level", choices=LOG_LEVELS, help=f"default: ${LOG_ENV}, else info")


def add_render_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add `render k8s` to the CLI's subparsers; the parsed args carry `file`, `output`,
    `log_level` and `run` (called as `args.run(spec, args)`)."""
    render = sub.add_parser("render", help="write the cluster as manifests for another platform",
                            description="write the cluster as manifests for another platform")
    targets = render.add_subparsers(dest="target", required=True, metavar="TARGET")
    k8s = targets.add_parser("k8s", help="Kubernetes manifests", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(k8s)
    k8s.set_defaults(run=run_render)
    return render


def main(argv: list[str] | None = None) -> int:
    """Standalone: `python -m dynamo_lite.k8s -f cluster.yaml [-o DIR]`."""
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.k8s", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    args = p.parse_args(argv)
    try:
        spec = parse_cluster_spec(args.file.read_text(), source=str(args.file))
    except (ConfigError, OSError) as e:
        print(f"error: invalid cluster spec\n{e}", file=sys.stderr)
        return 2
    return run_render(spec, args)
