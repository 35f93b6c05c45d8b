"""Profiles: interpolation, JSON round trip, and the mock sweep that produced the shipped one."""

from __future__ import annotations

import pytest

from dynamo_lite.engines.mock.scheduler import SchedulerConfig
from dynamo_lite.engines.mock.timing import RooflineTiming
from planner import DecodePoint, EngineProfile, PrefillPoint
from dynamo_lite.planning.profiler.__main__ import main as profiler_main
from dynamo_lite.planning.profiler.mock_sweep import sweep

SMALL = EngineProfile(
    engine="test",
    prefill=[PrefillPoint(1000, 0.1, 10000.0), PrefillPoint(3000, 0.4, 7500.0)],
    decode=[DecodePoint(1000, 1, 0.010, 100.0), DecodePoint(1000, 10, 0.020, 500.0),
            DecodePoint(3000, 1, 0.012, 83.0), DecodePoint(3000, 10, 0.030, 333.0)],
    kv_capacity_tokens=100000,
)


def test_interpolation_and_clamping():
    assert SMALL.prefill_ttft_s(2000) == pytest.approx(0.25)
    assert SMALL.prefill_ttft_s(10) == 0.1 and SMALL.prefill_ttft_s(99999) == 0.4
    assert SMALL.decode_itl_s(1000, 5.5) == pytest.approx(0.015)
    assert SMALL.decode_itl_s(2000, 1) == pytest.approx(0.011)
    assert SMALL.decode_throughput_at_itl(1000, 0.015) == pytest.approx(300.0)
    assert SMALL.decode_throughput_at_itl(1000, 0.5) == 500.0
    assert SMALL.decode_throughput_at_itl(1000, 0.001) == 0.0


def test_json_round_trip():
    assert EngineProfile.from_json(SMALL.to_json()) == SMALL


def test_mock_sweep_matches_the_engine_physics():
    p = sweep(SchedulerConfig(), RooflineTiming(), "mock", [512, 4096], [1024], [1, 16, 64], progress=lambda _: None)
    assert p.prefill_ttft_s(4096) > p.prefill_ttft_s(512)
    itls = [pt.itl_s for pt in p.decode]
    assert itls == sorted(itls), "ITL grows with the batch"
    assert p.decode[-1].throughput_tps > 10 * p.decode[0].throughput_tps, "batching pays in decode"


def test_profiler_cli_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "p.json"
    assert profiler_main(["--engine", "mock", "-o", str(out), "--isl", "256,1024", "--context", "512",
                          "--concurrency", "1,8"]) == 0
    p = EngineProfile.load(out)
    assert len(p.prefill) == 2 and len(p.decode) == 2 and p.kv_capacity_tokens == 16384 * 16
