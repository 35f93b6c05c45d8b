"""Credentials by reference: the spec names environment variables, never holds a secret; what
`up` hands its children; the state file only its owner reads; Kubernetes takes them from a Secret."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dynamo_lite import credentials
from dynamo_lite.config import ConfigError, parse_cluster_spec
from dynamo_lite.credentials import EtcdCredentials, NatsCredentials
from dynamo_lite.k8s import render_k8s
from dynamo_lite.orchestrator.state import ClusterState, read_state, write_state
from tests.unit.k8s.schema import schema_errors


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_cluster_spec(text, source="c.yaml")
    return str(info.value)


def test_defaults_bind_loopback_and_serve_the_admin_api_without_a_token() -> None:
    spec = parse_cluster_spec("")
    assert (spec.nats.host, spec.etcd.host, spec.admin.host) == ("127.0.0.1",) * 3
    assert spec.admin.enabled and spec.admin.port == 0 and spec.admin.token() is None


@pytest.mark.parametrize(("text", "problem"), [
    ("nats: {token_env: T}\n", "c.yaml:1: nats: token_env, user and password_env are for an external server (`url`)"),
    ("nats: {url: 'nats://n:4222', token_env: T, user: u}\n", "c.yaml:1: nats: give `token_env`, or `user` with"),
    ("nats: {url: 'nats://n:4222', user: u}\n", "c.yaml:1: nats: `user` and `password_env` go together"),
    ("nats: {url: 'nats://n:4222', token_env: 'my-token'}\n",
     "c.yaml:1: nats.token_env: expected the name of an environment variable, got 'my-token'"),
    ("etcd: {host: 0.0.0.0}\n", "c.yaml:1: etcd: host '0.0.0.0' is not a loopback address: the embedded etcd has no"),
    ("etcd: {user: u, password_env: P}\n", "c.yaml:1: etcd: user and password_env are for an external etcd (`url`)"),
    ("etcd: {url: 'http://e:2379', password_env: P}\n", "c.yaml:1: etcd: `user` and `password_env` go together"),
    ("admin: {host: 0.0.0.0}\n", "c.yaml:1: admin: host '0.0.0.0' is not a loopback address: name `token_env`"),
])
def test_credentials_are_checked_where_they_are_given(text: str, problem: str) -> None:
    assert error_of(text).startswith(problem)


def test_off_loopback_admin_with_a_token_or_disabled_is_fine() -> None:
    assert parse_cluster_spec("admin: {host: 0.0.0.0, token_env: ADMIN_TOKEN}\n").admin.token_env == "ADMIN_TOKEN"
    assert not parse_cluster_spec("admin: {host: 10.0.0.1, enabled: false}\n").admin.enabled
    assert parse_cluster_spec("nats: {host: 0.0.0.0}\n").nats.host == "0.0.0.0"  # token-protected


def test_secrets_are_read_from_the_variables_the_spec_names(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_cluster_spec(
        "nats: {url: 'nats://n:4222', user: dl, password_env: NATS_PW}\n"
        "etcd: {url: 'http://e:2379', user: root, password_env: ETCD_PW}\n"
        "admin: {token_env: ADMIN_TOKEN}\n"
    )
    for name in ("NATS_PW", "ETCD_PW", "ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="^nats.password_env: environment variable NATS_PW is not set"):
        spec.nats.credentials()
    with pytest.raises(ConfigError, match="^etcd.password_env: environment variable ETCD_PW is not set"):
        spec.etcd.credentials()
    with pytest.raises(ConfigError, match="^admin.token_env: environment variable ADMIN_TOKEN is not set"):
        spec.admin.token()
    monkeypatch.setenv("NATS_PW", "n-secret")
    monkeypatch.setenv("ETCD_PW", "e-secret")
    monkeypatch.setenv("ADMIN_TOKEN", "a-secret")
    assert spec.nats.credentials() == NatsCredentials(user="dl", password="n-secret")
    assert spec.etcd.credentials() == EtcdCredentials("root", "e-secret")
    assert spec.admin.token() == "a-secret"


def test_credentials_travel_as_environment_variables_and_never_print() -> None:
    nats = NatsCredentials(token="t0ken")
    etcd = EtcdCredentials("root", "pw")
    environ = nats.environ() | etcd.environ()
    assert environ == {credentials.NATS_TOKEN: "t0ken", credentials.ETCD_USER: "root", credentials.ETCD_PASSWORD: "pw"}
    assert NatsCredentials.from_environ(environ) == nats and EtcdCredentials.from_environ(environ) == etcd
    assert NatsCredentials.from_environ({}) == NatsCredentials() and not NatsCredentials()
    assert nats.connect_options() == {"token": "t0ken"}
    assert "t0ken" not in repr(nats) and "pw" not in repr(etcd)
    assert len(credentials.new_token()) >= 43 and credentials.new_token() != credentials.new_token()


def test_state_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    state = ClusterState(namespace="n", spec_path="s", supervisor_pid=os.getpid(), nats_url="nats://127.0.0.1:1",
                         etcd_url="http://127.0.0.1:2", nats_embedded=True, etcd_embedded=True, nats_token="t0ken",
                         admin_url="http://127.0.0.1:3")
    (tmp_path / "cluster.tmp").write_text("")
    os.chmod(tmp_path / "cluster.tmp", 0o644)  # a leftover from before must not keep its mode
    write_state(tmp_path, state)
    assert stat.S_IMODE((tmp_path / "cluster.json").stat().st_mode) == 0o600
    assert read_state(tmp_path) == state


def test_kubernetes_pods_take_external_credentials_from_a_secret() -> None:
    text = ("namespace: ext\nnats: {url: 'nats://nats.infra:4222', token_env: NATS_TOKEN}\n"
            "etcd: {url: 'http://etcd.infra:2379', user: dl, password_env: ETCD_PW}\nplanner: {enabled: true}\n"
            "models: [{name: m, path: builtin:tiny}]\npools: [{name: agg, role: aggregated, engine: mock}]\n")
    objects = render_k8s(parse_cluster_spec(text), text)
    envs = {}
    for o in objects:
        if o["kind"] == "Deployment":
            pod = o["spec"]["template"]["spec"]
            for c in pod["containers"] + pod.get("initContainers", []):
                envs[(o["metadata"]["name"], c["name"])] = {e["name"]: e for e in c.get("env", [])}
    secret = {"secretKeyRef": {"name": "ext-credentials", "key": "nats-token"}}
    for who in [("ext-frontend", "frontend"), ("ext-planner", "planner"), ("ext-pool-agg", "agent")]:
        env = envs[who]
        assert env[credentials.NATS_TOKEN]["valueFrom"] == secret, who
        assert env[credentials.ETCD_USER]["value"] == "dl"
        assert env[credentials.ETCD_PASSWORD]["valueFrom"]["secretKeyRef"]["key"] == "etcd-password"
    assert credentials.NATS_TOKEN not in envs[("ext-pool-agg", "engine")], "the engine never talks to NATS"
    assert [e for o in objects for e in schema_errors(o)] == []
