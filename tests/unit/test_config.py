"""cluster.yaml validation: each kind of mistake gets a message naming file, line, key path and problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dynamo_lite.config import ConfigError, load_cluster_spec, parse_cluster_spec
from dynamo_lite.config.schema import auto_frontend_processes
from dynamo_lite.protocol import Role

REPO = Path(__file__).resolve().parents[2]


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_cluster_spec(text, source="c.yaml")
    return str(info.value)


def test_every_example_spec_loads() -> None:
    examples = sorted((REPO / "deploy" / "examples").glob("*.yaml"))
    assert examples, "deploy/examples holds example specs"
    for path in examples:
        load_cluster_spec(path)


def test_defaults_and_references() -> None:
    spec = parse_cluster_spec(
        "models: [{name: tiny, path: /models/tiny, block_size: 128}]\n"
        "pools:\n"
        "  - {name: p, role: prefill, engine: vllm, replicas: 2}\n"
        "  - {name: d, role: decode, engine: mock, mock: {speedup_ratio: 10}}\n"
    )
    assert spec.namespace == "default" and spec.nats.embedded and spec.etcd.embedded
    assert [p.role for p in spec.pools] == [Role.PREFILL, Role.DECODE]
    assert spec.model_of(spec.pools[0]).block_size == 128
    assert spec.pools[1].mock is not None and spec.pools[1].mock.speedup_ratio == 10
    assert spec.frontend.router.mode == "ttft"


def test_unknown_key_names_path_and_suggests() -> None:
    assert error_of("etcd:\n  host: 0.0.0.0\n  prot: 2379\n") == (
        "c.yaml:3: etcd.prot: unknown key (allowed: host, lease_ttl_s, password_env, port, url, user); did you mean 'port'?"
    )


def test_unknown_top_level_key() -> None:
    assert error_of("namespace: a\nworkers: []\n") == (
        "c.yaml:2: workers: unknown key (allowed: admin, etcd, frontend, kubernetes, models, namespace, nats, observability, "
        "planner, pools, state_dir, supervisor)"
    )


def test_wrong_enum_value_in_a_list_item() -> None:
    text = "models: [{name: m, path: /m}]\npools:\n  - name: a\n    role: prefil\n    engine: vllm\n"
    assert error_of(text) == "c.yaml:4: pools[0].role: Input should be 'aggregated', 'prefill' or 'decode' (got 'prefil')"


def test_out_of_range_number() -> None:
    text = "models: [{name: m, path: /m}]\npools:\n  - {name: a, role: decode, engine: mock, replicas: -1}\n"
    assert error_of(text) == "c.yaml:3: pools[0].replicas: Input should be greater than or equal to 0 (got -1)"


def test_wrong_type() -> None:
    assert error_of("frontend:\n  port: eighty\n") == (
        "c.yaml:2: frontend.port: Input should be a valid integer, unable to parse string as an integer (got 'eighty')"
    )


def test_missing_required_key() -> None:
    assert error_of("models:\n  - name: m\n") == "c.yaml:2: models[0].path: required key is missing"


def test_bad_url() -> None:
    assert error_of("etcd:\n  url: localhost:2379\n") == (
        "c.yaml:2: etcd.url: expected http://host:port, got 'localhost:2379'"
    )


def test_engine_section_must_match_engine() -> None:
    text = "models: [{name: m, path: /m}]\npools:\n  - {name: a, role: decode, engine: mock, vllm: {dtype: auto}}\n"
    assert error_of(text) == "c.yaml:3: pools[0]: has a `vllm:` section but `engine: mock`"


def test_pool_referring_to_unknown_model() -> None:
    text = "models: [{name: m, path: /m}]\npools:\n  - {name: a, role: decode, engine: mock, model: other}\n"
    assert error_of(text) == (
        "c.yaml: (top level): pool 'a' uses model 'other', which `models` does not define"
    )


@pytest.mark.parametrize(("role", "engine"), [("decode", "mock"), ("decode", "vllm"), ("prefill", "vllm")])
def test_a_pooling_model_is_served_by_aggregated_pools_only(role: str, engine: str) -> None:
    text = (f"models: [{{name: e, path: /m, runner: pooling}}]\n"
            f"pools:\n  - {{name: a, role: {role}, engine: {engine}}}\n")  # fmt: skip
    assert error_of(text) == ("c.yaml: (top level): pool 'a' serves pooling model 'e': it must be an aggregated "
                              "pool (a pooling model has no prefill / decode split)")  # fmt: skip
    for engine in ("vllm", "mock"):
        spec = parse_cluster_spec(f"models: [{{name: e, path: /m, runner: pooling}}]\n"
                                  f"pools: [{{name: a, role: aggregated, engine: {engine}}}]\n")  # fmt: skip
        assert spec.models[0].runner == "pooling"


def test_several_problems_reported_together() -> None:
    lines = error_of("frontend: {port: 70000}\nnats: {url: nats://h}\n").splitlines()
    assert lines == [
        "c.yaml:2: nats.url: expected nats://host:port, got 'nats://h'",
        "c.yaml:1: frontend.port: Input should be less than or equal to 65535 (got 70000)",
    ]


def test_yaml_syntax_error_has_line_and_column() -> None:
    assert error_of("pools:\n  - name: [a\n") == (
        "c.yaml:3:1: not valid YAML: expected ',' or ']', but got '<stream end>'"
    )


def test_top_level_must_be_a_mapping() -> None:
    assert error_of("- a\n- b\n") == "c.yaml: expected a mapping of keys at the top, got list"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.yaml: no such file"):
        load_cluster_spec(tmp_path / "nope.yaml")


def test_cli_prints_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text("namespace: ok\netcd:\n  host: 127.0.0.1\n  lease_ttl: 5\n")
    proc = subprocess.run(
        [sys.executable, "-m", "dynamo_lite.orchestrator.cli", "status", "-f", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: invalid cluster spec",
        f"{bad}:4: etcd.lease_ttl: unknown key (allowed: host, lease_ttl_s, password_env, port, url, user); did you mean 'lease_ttl_s'?",
    ]


def test_frontend_processes_is_a_count_or_auto() -> None:
    for bad, shown in (("0", "0"), ("two", "'two'"), ("true", "True"), ("2.5", "2.5"), ("65", "65")):
        assert error_of(f"frontend:\n  processes: {bad}\n") == (
            f"c.yaml:2: frontend.processes: expected a whole number from 1 to 64, or auto (got {shown})")
    assert error_of("frontend: {port: 8001, processes: 2, metrics_port: 8000}\n") == (
        "c.yaml:1: frontend: metrics_port 8000 (one per process) would take `port` 8001")
    assert error_of("frontend: {processes: 2, metrics_port: 65535}\n") == (
        "c.yaml:1: frontend: metrics_port 65535 + 2 processes runs past port 65535")
    three = parse_cluster_spec("frontend: {processes: 3}\n").frontend
    assert (three.local_processes(), three.k8s_replicas()) == (3, 3)
    auto = parse_cluster_spec("").frontend
    assert auto.processes == "auto" and auto.k8s_replicas() == 2
    assert auto.local_processes() == auto_frontend_processes(os.cpu_count())


def test_auto_frontend_processes_is_half_the_cores_from_1_to_8() -> None:
    assert [auto_frontend_processes(n) for n in (None, 1, 2, 3, 4, 8, 16, 64)] == [1, 1, 1, 1, 2, 4, 8, 8]
