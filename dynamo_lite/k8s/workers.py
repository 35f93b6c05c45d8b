"""One Deployment per worker pool: each pod is one worker, an engine plus its agent.

Pod layout (Kubernetes 1.29+, native sidecars):
- init container `model`: builds a builtin model (or checks a local model
  directory) into the pod's state volume, with the project's own `resolve_model`;
- init container `engine` with `restartPolicy: Always` (a native sidecar): vLLM,
  or the mock engine, with the arguments `orchestrator up` would give it (the same
  `VllmEngineConfig.argv()` / `connectors.kv_transfer_config`), serving on the
  pod IP. Its startup probe gates the agent; its readiness and liveness probes are
  the pod's;
- container `agent`: `python -m dynamo_lite.worker --engine-url http://$(POD_IP):8100`,
  which registers the pod's engine in etcd under the pod's name.

Scale-down: Kubernetes sends SIGTERM to the agent first; it revokes its lease,
hands back prefill jobs and drains the engine (at most 30 s), then exits. Only
then is the engine sidecar stopped (sidecars stop after the main containers), so
no preStop hook is needed; `termination_grace_s` bounds the whole sequence.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from connectors import kv_transfer_config, nixl_env
from dynamo_lite.config import (
    ClusterSpec,
    KvTransferSpec,
    MockEngineSpec,
    ModelSpec,
    PoolSpec,
    VllmEngineSpec,
)
from dynamo_lite.engines.models import BUILTIN
from dynamo_lite.k8s.names import (
    CONFIG_PATH,
    ENGINE_PORT,
    KV_EVENTS_PORT,
    KV_REPLAY_PORT,
    NIXL_PORT,
    STATE_DIR,
    etcd_url,
    k8s_namespace,
    labels,
    nats_url,
    pool_deployment,
    pool_settings,
)  # fmt: skip
from dynamo_lite.k8s.pods import (
    Obj,
    container,
    credentials_env,
    env_list,
    http_probe,
    metadata,
    pod_template,
)

MODEL_CACHE = f"{STATE_DIR}/models"
EVENTS_BIND = f"tcp://127.0.0.1:{KV_EVENTS_PORT}"  # the agent's SUB socket; the engine connects
REPLAY_BIND = f"tcp://127.0.0.1:{KV_REPLAY_PORT}"  # the engine's replay ROUTER
POD_IP = "$(POD_IP)"  # expanded by the kubelet from the downward-API variable


def model_dir_in_pod(model: ModelSpec) -> str:
    """Where the engine finds the weights: the built builtin model, or `path` as it is."""
    if model.path in BUILTIN:
        return f"{MODEL_CACHE}/{BUILTIN[model.path][0]}"
    return model.path


def _kv(pool: PoolSpec) -> dict[str, object] | None:
    kv = pool.kv_transfer or KvTransferSpec()
    return kv_transfer_config(pool.role, kv.buffer_device, kv.progress_delay_us, spin_sleep_us=kv.spin_sleep_us)


def vllm_command(spec: ClusterSpec, pool: PoolSpec) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the vLLM container, from the launcher `orchestrator up` uses."""
    from dynamo_lite.engines.vllm import VllmEngineConfig

    model, v = spec.model_of(pool), pool.vllm or VllmEngineSpec()
    kv = _kv(pool)
    config = VllmEngineConfig(
        model_dir=Path(model_dir_in_pod(model)),
        served_model_name=model.name, port=ENGINE_PORT, host="0.0.0.0", dtype=v.dtype,
        max_model_len=model.max_model_len, block_size=model.block_size, kv_cache_gib=v.kv_cache_gib,
        gpu_memory_utilization=v.gpu_memory_utilization, enforce_eager=v.enforce_eager,
        kv_events_endpoint=EVENTS_BIND, kv_events_replay_endpoint=REPLAY_BIND, kv_transfer_config=kv,
        env=nixl_env(NIXL_PORT, POD_IP) if kv else {}, extra_args=tuple(v.extra_args),
        reasoning_parser=model.reasoning_parser, runner=model.runner,
        device="cuda" if pool_settings(spec, pool).gpus > 0 else "cpu",
    )
    env = config.environ()
    env.pop("PYTHONPATH", None)  # the image installs `connectors` as a package
    env["VLLM_HOST_IP"] = POD_IP
    return ["python", *config.argv()[1:]], env


def mock_command(spec: ClusterSpec, pool: PoolSpec) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the mock engine container, from the worker's own builder."""
    from dynamo_lite.engines.mock import engine_command
    from dynamo_lite.worker.engine import mock_engine_args

    model = spec.model_of(pool)
    local = mock_engine_args(pool.mock or MockEngineSpec(), model.name, model.block_size, model.max_model_len,
                             ENGINE_PORT, EVENTS_BIND, REPLAY_BIND, _kv(pool))
    args = dataclasses.replace(local, host="0.0.0.0", nixl_side_channel_host=POD_IP, nixl_side_channel_port=NIXL_PORT)
    return engine_command(args, python="python"), {}


def _resources(spec: ClusterSpec, pool: PoolSpec) -> Obj:
    k = pool_settings(spec, pool)
    amounts = {"cpu": k.cpu, "memory": k.memory}
    limits = dict(amounts)
    if k.gpus > 0:
        limits[k.gpu_resource] = str(k.gpus)
    return {"requests": amounts, "limits": limits}


def engine_container(spec: ClusterSpec, pool: PoolSpec) -> Obj:
    argv, env = vllm_command(spec, pool) if pool.engine == "vllm" else mock_command(spec, pool)
    gpu = pool_settings(spec, pool).gpus > 0
    ports: list[Obj] = [{"name": "http", "containerPort": ENGINE_PORT}]
    if _kv(pool) is not None:
        ports.append({"name": "nixl", "containerPort": NIXL_PORT})
    shm = [{"name": "dshm", "mountPath": "/dev/shm"}] if pool.engine == "vllm" else []
    return container(
        spec, "engine", argv, image=spec.kubernetes.gpu_image if gpu else None,
        env=env_list(env), ports=ports, resources=_resources(spec, pool),
        restartPolicy="Always",  # a native sidecar: started before, stopped after the agent
        volumeMounts=shm,  # vLLM's shared memory between its processes
        # Loading weights (and, on GPUs, profiling memory) takes minutes: allow 15.
        startupProbe=http_probe("http", "/health", 10, 90),
        readinessProbe=http_probe("http", "/health", 10, 3),
        livenessProbe=http_probe("http", "/health", 15, 4),
    )


def model_container(spec: ClusterSpec, pool: PoolSpec) -> Obj:
    path = spec.model_of(pool).path
    return container(spec, "model", ["python", "-m", "dynamo_lite.k8s.prepare_model", path, "--cache-dir", MODEL_CACHE],
                     resources={"requests": {"cpu": "1", "memory": "2Gi"}})


def agent_container(spec: ClusterSpec, pool: PoolSpec) -> Obj:
    command = [
        "python", "-m", "dynamo_lite.worker", "-f", CONFIG_PATH, "--pool", pool.name,
        "--nats-url", nats_url(spec), "--etcd-url", etcd_url(spec),
        "--engine-url", f"http://{POD_IP}:{ENGINE_PORT}", "--worker-id", "$(POD_NAME)",
        "--kv-events-port", str(KV_EVENTS_PORT), "--kv-events-replay", REPLAY_BIND,
    ]  # fmt: skip
    # No probes: the agent serves no HTTP; a fatal error ends its process and the kubelet restarts it.
    return container(spec, "agent", command, env=credentials_env(spec),
                     resources={"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}})


def pool_deployment_object(spec: ClusterSpec, spec_text: str, pool: PoolSpec) -> Obj:
    k = pool_settings(spec, pool)
    selector = labels(spec, "worker", pool.name)
    vllm = pool.engine == "vllm"
    inits = ([model_container(spec, pool)] if vllm else []) + [engine_container(spec, pool)]
    pod = pod_template(
        spec, spec_text, selector, [agent_container(spec, pool)],
        initContainers=inits, terminationGracePeriodSeconds=k.termination_grace_s,
        extra_volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}] if vllm else [],
    )
    if k.node_selector:
        pod["spec"]["nodeSelector"] = dict(k.node_selector)
    meta = metadata(spec, pool_deployment(spec, pool), k8s_namespace(spec), selector)
    meta["annotations"] = {"dynamo-lite/role": pool.role.value}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            # The starting size; the planner (or `kubectl scale`) changes it through the scale subresource.
            "replicas": pool.replicas,
            "selector": {"matchLabels": selector},
            # New workers come up before old ones go: a pool never drops below its size on a roll.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": pod,
        },
    }
