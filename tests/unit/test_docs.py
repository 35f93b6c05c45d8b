"""The generated references, the package graph in docs/architecture.md and the dashboards are current."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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


README_LIMIT = 10_000
MACHINE_PATH = re.compile(r"/work/|/root/|/home/|\.\./shared|shared/data/|DESIGN\.md|VLLM_INTERFACES|STYLE\.md")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = []
    for name in filter(None, names.split("\0")):
        path = REPO / name
        if path.is_file() and b"\0" not in path.read_bytes()[:8192]:
            files.append(path)
    return files


def test_readme_is_short() -> None:
    size = len((REPO / "README.md").read_text())
    assert size < README_LIMIT, f"README.md has {size} characters; move detail into docs/"


def test_no_machine_path_and_no_file_outside_the_repository() -> None:
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()[:120]}" for p in _tracked_text_files()
            if p.name != "test_docs.py" and p.name != "test_benchmarks_start.py"
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if MACHINE_PATH.search(line)]
    assert hits == [], "\n".join(hits)


def test_relative_links_in_markdown_resolve() -> None:
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted(REPO.glob("benchmarks/**/*.md"))]:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == [], "\n".join(broken)
