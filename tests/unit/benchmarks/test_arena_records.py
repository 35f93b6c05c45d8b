"""benchmarks/arena.py: --records (every request's record, one JSON line each, read back unchanged; the
run's timeline plotted) and --rate-profile, and --engine vllm's block size."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks import arena  # noqa: E402
from benchmarks.arena_report import plot_timeline  # noqa: E402
from benchmarks.replay_stats import RequestRecord  # noqa: E402


def test_records_round_trip(tmp_path: Path) -> None:
    records = [
        RequestRecord(0, 0.0, 900, 32, sent_s=0.001, ttft_s=0.041, itl_s=[0.01, 0.012], e2e_s=0.4, prompt_tokens=900,
                      completion_tokens=32, cached_tokens=704, status=200),
        RequestRecord(1, 0.5, 850, 32, sent_s=0.5, e2e_s=0.6, status=503, error="HTTP 503"),
    ]
    path = tmp_path / "runs" / "dynamo_lite_ttft_1.jsonl"
    arena.write_records(path, records)
    back = [RequestRecord(**json.loads(line)) for line in path.read_text().splitlines()]
    assert back == records


def test_a_run_s_timeline_is_plotted_with_or_without_its_engines(tmp_path: Path) -> None:
    records = [RequestRecord(i, i / 10, 100, 8, sent_s=i / 10, ttft_s=0.04 + i / 100) for i in range(20)]
    records.append(RequestRecord(20, 2.0, 100, 8, sent_s=2.0, status=503, error="HTTP 503"))
    engines = tmp_path / "run.engines.jsonl"
    engines.write_text("".join(json.dumps({"t_s": t / 4, "engine": e, "running": t % 3, "waiting": t % 2,
                                           "kv_usage": t / 40}) + "\n" for t in range(10) for e in (0, 1)))
    for timeline, png in ((engines, tmp_path / "run.png"), (tmp_path / "none.jsonl", tmp_path / "bare.png")):
        plot_timeline(records, timeline, "a run", png)
        assert png.read_bytes().startswith(b"\x89PNG")


def test_records_option_names_a_directory() -> None:
    assert arena.parse(["--records", "/tmp/x"]).records == Path("/tmp/x")
    assert arena.parse([]).records is None


def test_rate_profile_option_parses_and_names_a_bad_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert arena.parse([]).rate_profile.kind == "flat"
    sine = arena.parse(["--rate-profile", "sine:period=20,amplitude=0.4"]).rate_profile
    assert (sine.kind, sine.period, sine.amplitude) == ("sine", 20.0, 0.4)
    with pytest.raises(SystemExit) as refused:
        arena.parse(["--rate-profile", "sine:wobble=1"])
    assert refused.value.code == 2
    assert "unknown key 'wobble'" in capsys.readouterr().err


def test_real_engines_need_vllm_s_cpu_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert arena.parse(["--engine", "vllm", "--block-size", "128"]).engine == "vllm"
    assert arena.parse([]).engine == "mock"
    with pytest.raises(SystemExit):
        arena.parse(["--engine", "vllm"])
    assert "--block-size 128" in capsys.readouterr().err
