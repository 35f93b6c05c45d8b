"""benchmarks/: every command starts (``--help`` exits 0) and finds its default data inside the repository.

A fresh clone has nothing but the repository: a benchmark that reads a trace must default to one shipped in
benchmarks/data, and no benchmark may name an absolute directory of some machine or a folder beside the clone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
COMMANDS = sorted(p for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())
# the benchmarks that replay a trace; each must take --trace, by default a file in the repository
TRACE_READERS = {"arena.py", "arena_sim.py", "frontend_restart.py", "planner_sim.py", "router_replay.py", "trace_replay.py"}
# a path of some machine, or out of the repository (the /proc of benchmarks measuring a process is no file)
FOREIGN_PATH = re.compile(r"""["'(\s`](/(work|root|home|tmp|mnt|Users|data)/|\.\./|~/)|shared/data|DESIGN""")


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """``python benchmarks/X.py --help`` of every command, run in parallel from an empty directory (the
    benchmarks may not depend on the working directory); wide columns, so that argparse wraps no path."""
    cwd, env = tmp_path_factory.mktemp("cwd"), {**os.environ, "COLUMNS": "1000"}

    def run(script: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), "--help"], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((p.name for p in COMMANDS), pool.map(run, COMMANDS), strict=True))


def test_the_commands_are_found() -> None:
    names = {p.name for p in COMMANDS}
    assert TRACE_READERS <= names
    assert {"cluster.py", "paths.py", "planner_sim_fleet.py"}.isdisjoint(names)  # modules, not commands


@pytest.mark.parametrize("name", [p.name for p in COMMANDS])
def test_help_exits_0(name: str, helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    done = helps[name]
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


@pytest.mark.parametrize("name", sorted(TRACE_READERS))
def test_default_trace_is_in_the_repository(name: str, helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    out = helps[name].stdout
    assert "--trace" in out, f"{name} takes no --trace"
    m = re.search(r"--trace TRACE .*\(default: (\S+)\)", out)
    assert m, f"{name}: --help shows no default for --trace"
    trace = Path(m.group(1))
    assert trace.is_absolute() and trace.resolve().is_relative_to(REPO), trace
    assert trace.is_file(), f"{name}: default trace {trace} is missing"


def test_every_trace_option_has_an_in_repo_default(helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert {name for name, done in helps.items() if "--trace" in done.stdout} == TRACE_READERS


def test_the_shipped_trace() -> None:
    paths = _load_paths()
    trace = paths.MOONCAKE_TRACE
    assert trace.is_file() and trace.is_relative_to(BENCHMARKS / "data")
    with trace.open() as f:
        first = json.loads(f.readline())
    assert set(first) == {"timestamp", "input_length", "output_length", "hash_ids"}
    assert len(first["hash_ids"]) == -(-first["input_length"] // 512)
    readme = (BENCHMARKS / "data" / "README.md").read_text()
    assert trace.name in readme and "Apache" in readme and "kvcache-ai/Mooncake" in readme


def test_results_record_repository_paths_relative() -> None:
    paths = _load_paths()
    assert paths.recorded(paths.MOONCAKE_TRACE) == "benchmarks/data/mooncake_synthetic_trace.jsonl"
    outside = REPO.parent / "elsewhere.jsonl"
    assert paths.recorded(outside) == str(outside)
    assert paths.recorded(3) == 3


def test_no_machine_paths_in_benchmarks() -> None:
    sources = [*BENCHMARKS.glob("*.py"), *BENCHMARKS.glob("data/*.md")]
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in sources
            for i, line in enumerate(p.read_text().splitlines(), 1) if FOREIGN_PATH.search(line)]  # fmt: skip
    assert not hits, "\n".join(hits)


def _load_paths() -> ModuleType:
    """benchmarks/paths.py, imported from its file."""
    spec = importlib.util.spec_from_file_location("benchmarks_paths", BENCHMARKS / "paths.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_comma_separated_option_keeps_its_order_and_names_what_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    """`comma_choices`, which the benchmarks' --routers, --clients, --runs and --setups go through."""
    import argparse

    sys.path.insert(0, str(REPO))
    from benchmarks.paths import comma_choices

    p = argparse.ArgumentParser(prog="b")
    assert comma_choices(p, " ours, delay,,ours ", ("delay", "ours"), "setup") == ["ours", "delay", "ours"]
    assert comma_choices(p, "x:1", ("a",), "router", also=lambda n: n.startswith("x:")) == ["x:1"]
    for value, named in (("a,zz,yy", "yy, zz"), (" , ", "(none given)")):
        with pytest.raises(SystemExit) as exit_:
            comma_choices(p, value, ("a", "b"), "run")
        assert exit_.value.code == 2
        assert f"unknown run(s) {named}; choose from a, b" in capsys.readouterr().err
