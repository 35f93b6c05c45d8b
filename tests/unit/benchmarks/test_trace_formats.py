"""The traces the benchmarks read (benchmarks/trace_formats.py): Mooncake's jsonl, Azure's and BurstGPT's CSV, as
their public files write them, and a file that is none of them refused by name."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import arena_sim, trace_replay
from benchmarks.paths import MOONCAKE_TRACE, REPO
from benchmarks.trace_formats import TraceError, read_trace

AZURE_2023 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.0,1200,7\n2023-11-16 18:15:51,5,0\n")
AZURE_2024 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2024-05-10 00:00:00.009930+00:00,2048,30\n2024-05-10 00:00:01.509930+00:00,513,2\n")
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n45.5,GPT-4,1087,0,1087,API log\n")  # fmt: skip


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_mooncake_rows_are_the_file_s() -> None:
    first = json.loads(MOONCAKE_TRACE.read_text().splitlines()[0])
    (row,) = itertools.islice(read_trace(MOONCAKE_TRACE), 1)
    assert (row.timestamp_ms, row.input_length, row.output_length, list(row.hash_ids)) == (
        first["timestamp"], first["input_length"], first["output_length"], first["hash_ids"])


@pytest.mark.parametrize(("text", "seconds", "lengths"), [
    (AZURE_2023, [0.0, 3.31941, 4.31941], [(374, 44), (1200, 7), (5, 0)]),
    (AZURE_2024, [0.0, 1.5], [(2048, 30), (513, 2)]),
    (BURSTGPT, [0.0, 40.5], [(472, 18), (1087, 0)]),
])  # fmt: skip
def test_csv_traces_are_read_as_requests_sharing_no_prefix(tmp_path: Path, text: str, seconds: list[float],
                                                           lengths: list[tuple[int, int]]) -> None:  # fmt: skip
    path = write(tmp_path, "trace.csv", text)
    rows = list(read_trace(path))
    assert [r.timestamp_ms / 1000 for r in rows] == pytest.approx(seconds)  # (since the first row)
    assert [(r.input_length, r.output_length) for r in rows] == lengths
    assert [len(r.hash_ids) for r in rows] == [-(-isl // 512) or 1 for isl, _ in lengths]  # a block per 512 tokens
    ids = [h for r in rows for h in r.hash_ids]
    assert len(set(ids)) == len(ids)  # no block shared: the trace says nothing of prefixes
    reqs = trace_replay.load_trace(path, tokens_per_hash=64)
    assert [r.at_s for r in reqs] == pytest.approx(seconds)
    assert [r.output_tokens for r in reqs] == [max(1, osl) for _, osl in lengths]
    assert trace_replay.prefix_hit_ceiling(reqs) == 0


@pytest.mark.parametrize(("text", "problem"), [
    ("hello,world\n1,2\n", "line 1: not a trace this reads"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12,x\n",
     "line 2: GeneratedTokens 'x' is not a number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n", "line 2: TIMESTAMP 'yesterday' is no date"),
    ('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1}\n',
     "line 2: not a Mooncake row (KeyError"),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,-3,1\n", "line 2: Request tokens '-3' is not a count"),
])  # fmt: skip
def test_a_file_that_is_no_trace_is_refused_with_its_line(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError, match=re.escape(problem)) as e:
        list(read_trace(path))
    assert str(path) in str(e.value)


def test_a_command_refuses_a_trace_it_cannot_read_when_the_option_is_read(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.txt", "not a trace\n")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "trace_replay.py"), "--trace", str(bad)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "argument --trace" in done.stderr and "line 1" in done.stderr, done.stderr


def test_the_arena_simulation_runs_an_azure_trace(tmp_path: Path) -> None:
    """A CSV trace goes the whole way: the arena's workload, its fleet, its references (whose prefix hits are
    then nil, as the trace shares none)."""
    rows = "".join(f"2023-11-16 18:{15 + i // 60:02d}:{i % 60:02d}.5,{300 + 97 * (i % 13)},{5 + i % 7}\n"
                   for i in range(120))  # fmt: skip
    path = write(tmp_path, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    out = tmp_path / "sim.json"
    assert arena_sim.main(["--workload", "mooncake", "--trace", str(path), "--requests", "120", "--workers", "2",
                           "--routers", "ttft,blocks", "--time-scale", "1", "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert [r["router"] for r in result["results"]] == ["ttft", "blocks"]
    assert all(r["prefix_hit_ratio"] == 0 for r in result["results"])
