"""The generated references, the package graph in docs/architecture.md and the dashboards are current."""

from __future__ import annotations

import pytest

from dynamo_lite.docs import GRAPH_BEGIN, GRAPH_END, REPO, generated, stale, with_package_graph
from dynamo_lite.docs.__main__ import main


def test_every_generated_file_is_current() -> None:
    assert stale() == [], "run `python -m dynamo_lite.docs` and commit the result"
    assert main(["--check"]) == 0


def test_generated_files_are_the_repositorys() -> None:
    paths = {p.relative_to(REPO).as_posix() for p in generated()}
    assert {"docs/reference/cluster-yaml.md", "docs/reference/metrics.md", "docs/architecture.md"} <= paths
    assert any(p.startswith("deploy/grafana/dashboards/") and p.endswith(".json") for p in paths)


def test_references_hold_what_they_document() -> None:
    files = {p.relative_to(REPO).as_posix(): text for p, text in generated().items()}
    assert "| `pools[].replicas` |" in files["docs/reference/cluster-yaml.md"]
    assert "`dynamo_lite_frontend_requests_total`" in files["docs/reference/metrics.md"]
    assert "| `router` | - |" in files["docs/architecture.md"]


def test_package_graph_block_is_replaced_and_required() -> None:
    text = f"intro\n{GRAPH_BEGIN}\nold\n{GRAPH_END}\noutro\n"
    fresh = with_package_graph(text, {"a": {"b"}, "b": set()})
    assert fresh == f"intro\n{GRAPH_BEGIN}\n| package | imports (of this project) |\n|---|---|\n| `a` | `b` |\n| `b` | - |\n{GRAPH_END}\noutro\n"
    with pytest.raises(ValueError, match="no"):
        with_package_graph("no markers here", {})
