"""`render_k8s`: every object of every example spec is valid for the Kubernetes API,
wired the way the components expect, and the committed manifests are a fresh render."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dynamo_lite.config import ClusterSpec, ConfigError, load_cluster_spec, parse_cluster_spec
from dynamo_lite.k8s import render_k8s
from dynamo_lite.k8s.names import frontend_pods_url, pool_deployments
from dynamo_lite.k8s.render import add_render_command, main, run_render, write_dir
from dynamo_lite.worker.agent import AgentSettings
from tests.unit.k8s.schema import schema_errors

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
COMMITTED = {"default": "default.yaml", "gpu-llama": "gpu-llama.yaml"}  # deploy/k8s/<dir> <- deploy/examples/<spec>
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def rendered(path: Path) -> tuple[ClusterSpec, list[dict[str, Any]]]:
    spec = load_cluster_spec(path)
    return spec, render_k8s(spec, path.read_text())


def pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]) for o in objects if o["kind"] in ("Deployment", "StatefulSet")]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod["spec"].get("initContainers", []) + pod["spec"]["containers"]


def workers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Deployment"
            and o["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]


def engine(deployment: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in deployment["spec"]["template"]["spec"]["initContainers"] if c["name"] == "engine")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_object_validates_against_the_kubernetes_schema(example: Path) -> None:
    _, objects = rendered(example)
    assert objects
    problems = [f"{o['kind']}/{o['metadata']['name']}: {e}" for o in objects for e in schema_errors(o)]
    assert problems == []


def test_the_schema_check_catches_what_the_api_server_would_reject() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a", "imagee": "i"}]}}}}
    assert any("imagee: not a field of V1Container" in e for e in schema_errors(deployment))
    no_selector = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                   "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}}
    assert any("selector" in e and "None" in e for e in schema_errors(no_selector))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": "80"}]}}
    assert schema_errors(service) == ["Service.spec.ports[0].port: expected int, got '80'"]
    assert schema_errors({**service, "apiVersion": "apps/v1"})


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_objects_hold_together_as_the_api_server_checks(example: Path) -> None:
    _, objects = rendered(example)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))
    for o in objects:
        if o["kind"] in ("Service", "Namespace"):
            assert DNS_LABEL.match(o["metadata"]["name"]), o["metadata"]["name"]
    for name, pod in pods(objects):
        owner = next(o for o in objects if o["metadata"]["name"] == name and "template" in o.get("spec", {}))
        assert owner["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        volumes = {v["name"] for v in pod["spec"].get("volumes", [])}
        volumes |= {c["metadata"]["name"] for c in owner["spec"].get("volumeClaimTemplates", [])}
        all_containers = containers(pod)
        assert len({c["name"] for c in all_containers}) == len(all_containers)
        for c in all_containers:
            assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, (name, c["name"])
            port_names = {p["name"] for p in c.get("ports", [])}
            assert all(len(p) <= 15 for p in port_names)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                assert port is None or isinstance(port, int) or port in port_names, (name, c["name"], probe)
            defined: list[str] = []
            for var in c.get("env", []):  # $(VAR) expands only variables defined earlier
                for ref in re.findall(r"\$\((\w+)\)", var.get("value", "")):
                    assert ref in defined, (name, c["name"], var["name"], ref)
                defined.append(var["name"])
            for ref in re.findall(r"\$\((\w+)\)", " ".join(c.get("command", []) + c.get("args", []))):
                assert ref in defined, (name, c["name"], ref)
        for c in pod["spec"]["containers"]:
            assert "restartPolicy" not in c  # only init containers may be sidecars


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_worker_pods_have_probes_resources_and_a_drain_window(example: Path) -> None:
    spec, objects = rendered(example)
    deployments = workers(objects)
    assert {d["metadata"]["name"] for d in deployments} == set(pool_deployments(spec).values())
    for d in deployments:
        pool = next(p for p in spec.pools if pool_deployments(spec)[p.name] == d["metadata"]["name"])
        assert d["spec"]["replicas"] == pool.replicas
        e = engine(d)
        assert e["restartPolicy"] == "Always"  # a native sidecar: outlives the draining agent
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert e[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert e["resources"]["requests"]["cpu"] and e["resources"]["limits"]["memory"]
        agent = d["spec"]["template"]["spec"]["containers"][0]
        assert agent["command"][:3] == ["python", "-m", "dynamo_lite.worker"]
        assert agent["command"][agent["command"].index("--pool") + 1] == pool.name
        assert "--engine-url" in agent["command"]
        grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        drain = AgentSettings.__dataclass_fields__["drain_timeout_s"].default
        assert isinstance(drain, float) and grace > drain + 30  # the agent drains, then the engine stops


def test_gpu_pools_ask_for_gpus_and_run_vllm_for_cuda() -> None:
    spec, objects = rendered(ROOT / "deploy/examples/gpu-llama.yaml")
    for d in workers(objects):
        e = engine(d)
        assert e["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert e["image"] == spec.kubernetes.gpu_image
        assert "--gpu-memory-utilization" in e["command"]
        kv = json.loads(e["command"][e["command"].index("--kv-transfer-config") + 1])
        assert kv["kv_buffer_device"] == "cuda"
        env = {v["name"]: v.get("value") for v in e["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$(POD_IP)" and "VLLM_CPU_KVCACHE_SPACE" not in env
        assert d["spec"]["template"]["spec"]["nodeSelector"]
    cpu_spec, cpu_objects = rendered(ROOT / "deploy/examples/default.yaml")
    for d in workers(cpu_objects):
        e = engine(d)
        assert not any("gpu" in k for k in e["resources"]["limits"])
        assert "--gpu-memory-utilization" not in e["command"]
        env = {v["name"]: v.get("value") for v in e["env"]}
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "PYTHONPATH" not in env


@pytest.mark.parametrize(("processes", "replicas"), [(None, 2), ("auto", 2), (1, 1), (3, 3)])
def test_frontend_runs_frontend_processes_as_replicas_behind_its_service(processes: object, replicas: int) -> None:
    """Each replica is a pod of one frontend process on its own IP (no SO_REUSEPORT, no process index);
    the Service spreads connections over the ready ones, each probed on its own /health."""
    frontend = "" if processes is None else f"frontend: {{processes: {processes}}}\n"
    text = f"namespace: fe\nmodels: [{{name: m, path: builtin:tiny}}]\n{frontend}" \
           "pools: [{name: agg, role: aggregated, engine: mock}]\n"
    objects = render_k8s(parse_cluster_spec(text), text)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "fe-frontend"]
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "fe-frontend"]
    assert deployment["spec"]["replicas"] == replicas
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (api,) = pod["spec"]["containers"]
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in api["ports"]}
    assert "--reuse-port" not in api["command"] and "--process-index" not in api["command"]
    assert api["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    # The planner scrapes each replica's /metrics at the headless Service's addresses (frontend_pods_url).
    (pods,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "fe-frontend-pods"]
    assert pods["spec"]["clusterIP"] == "None" and pods["spec"]["selector"] == service["spec"]["selector"]
    assert frontend_pods_url(parse_cluster_spec(text)) == "http://fe-frontend-pods.fe.svc:8000"
    assert schema_errors(deployment) == [] and schema_errors(service) == [] and schema_errors(pods) == []


def test_planner_rbac_allows_only_get_and_patch_of_the_pool_deployments_scale() -> None:
    spec, objects = rendered(ROOT / "deploy/examples/gpu-llama.yaml")
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert len(roles) == 1
    assert roles[0]["rules"] == [{
        "apiGroups": ["apps"], "resources": ["deployments/scale"],
        "resourceNames": sorted(pool_deployments(spec).values()), "verbs": ["get", "patch"],
    }]
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == roles[0]["metadata"]["name"]
    planner = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-planner"))
    account = planner["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": spec.kubernetes.namespace}]
    assert planner["spec"]["replicas"] == 1
    others = [pod for name, pod in pods(objects) if not name.endswith("-planner")]
    assert all("serviceAccountName" not in pod["spec"] for pod in others)


def test_no_planner_objects_when_the_planner_is_disabled() -> None:
    _, objects = rendered(ROOT / "deploy/examples/default.yaml")
    assert not [o for o in objects if "planner" in o["metadata"]["name"]]


def test_external_nats_and_etcd_are_used_instead_of_rendered() -> None:
    text = ("namespace: ext\nnats: {url: 'nats://nats.infra:4222'}\netcd: {url: 'http://etcd.infra:2379'}\n"
            "models: [{name: m, path: builtin:tiny}]\npools: [{name: agg, role: aggregated, engine: mock}]\n")
    objects = render_k8s(parse_cluster_spec(text), text)
    assert not [o for o in objects if o["kind"] == "StatefulSet"]
    agent = workers(objects)[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert agent[agent.index("--nats-url") + 1] == "nats://nats.infra:4222"
    assert agent[agent.index("--etcd-url") + 1] == "http://etcd.infra:2379"


def test_kubernetes_pools_must_name_a_pool() -> None:
    text = "models: [{name: m, path: builtin:tiny}]\npools: [{name: a, role: aggregated, engine: mock}]\n" \
           "kubernetes: {pools: [{pool: b, gpus: 1}]}\n"
    with pytest.raises(ConfigError, match="kubernetes.pools names pool 'b'"):
        parse_cluster_spec(text)


@pytest.mark.parametrize("directory", sorted(COMMITTED))
def test_committed_manifests_equal_a_fresh_render(directory: str, tmp_path: Path) -> None:
    source = Path("deploy/examples") / COMMITTED[directory]
    spec, objects = rendered(ROOT / source)
    write_dir(objects, tmp_path, source.as_posix())
    committed = ROOT / "deploy" / "k8s" / directory
    regenerate = f"python -m dynamo_lite.k8s -f {source} -o deploy/k8s/{directory}"
    assert sorted(p.name for p in committed.glob("*.yaml")) == sorted(p.name for p in tmp_path.iterdir()), regenerate
    for fresh in tmp_path.iterdir():
        assert (committed / fresh.name).read_text() == fresh.read_text(), regenerate


def test_cli_entry_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "deploy/examples/mock-fleet.yaml"
    assert main(["-f", str(example), "-o", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0] == "00-namespace-mock.yaml" and len(files) == len(rendered(example)[1])
    capsys.readouterr()
    parser = argparse.ArgumentParser()
    add_render_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["render", "k8s", "-f", str(example)])
    assert args.run is run_render and args.output is None and args.log_level is None  # $DYNAMO_LITE_LOG, else info
    assert args.run(load_cluster_spec(args.file), args) == 0
    assert capsys.readouterr().out.count("\n---\n") == len(files) - 1


def test_prepare_model_refuses_a_missing_model_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dynamo_lite.k8s.prepare_model import main as prepare

    assert prepare([str(tmp_path / "absent"), "--cache-dir", str(tmp_path / "cache")]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert prepare([str(tmp_path / "m"), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out.strip() == str((tmp_path / "m").resolve())
