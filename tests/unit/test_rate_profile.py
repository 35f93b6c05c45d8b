"""Rate profiles warp arrival times (benchmarks/rate_profile.py), and the planner simulation's fleet routes
with the frontend's own disaggregation decision and the router's ttft cost (benchmarks/planner_sim_fleet.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from benchmarks.rate_profile import RateProfile  # noqa: E402
from dynamo_lite.frontend import disagg  # noqa: E402
from dynamo_lite.frontend.disagg import DisaggPolicy, Reason  # noqa: E402


def rate_in(times: list[float], lo: float, hi: float) -> float:
    return sum(lo <= t < hi for t in times) / (hi - lo)


@pytest.mark.parametrize("text", ["flat", "sine:period=240,amplitude=0.6", "step:at=240,low=0.4,high=1.6",
                                  "burst:period=240,duty=0.25,high=2.2"])
def test_warp_inverts_the_cumulative_and_keeps_order(text):
    p = RateProfile.parse(text)
    taus = [i * 0.37 for i in range(2000)]
    ts = p.warp_all(taus)
    assert ts == sorted(ts)
    for tau, t in zip(taus[::97], ts[::97]):
        assert p.cumulative(t) == pytest.approx(tau, abs=1e-6)
    assert p.cumulative(480) == pytest.approx(480, rel=1e-9)  # the mean multiplier is 1 over whole periods


def test_a_uniform_trace_gets_the_profile_rate():
    p = RateProfile.parse("sine:period=240,amplitude=0.6")
    ts = p.warp_all([i / 10 for i in range(4800)])  # 10 requests/s for 480 s
    assert rate_in(ts, 50, 70) == pytest.approx(10 * p.multiplier(60), rel=0.05)  # the peak: 16/s
    assert rate_in(ts, 170, 190) == pytest.approx(10 * p.multiplier(180), rel=0.08)  # the trough: 4/s
    burst = RateProfile.parse("burst:period=100,duty=0.2,high=3")
    bt = burst.warp_all([i / 10 for i in range(2000)])
    assert rate_in(bt, 0, 20) == pytest.approx(30, rel=0.02) and rate_in(bt, 30, 90) == pytest.approx(5, rel=0.02)


def test_bad_profiles_name_the_problem():
    with pytest.raises(ValueError, match="unknown key"):
        RateProfile.parse("sine:periode=3")
    with pytest.raises(ValueError, match="amplitude"):
        RateProfile.parse("sine:amplitude=1.2")
    with pytest.raises(ValueError, match="kind"):
        RateProfile.parse("square")


def test_the_simulated_fleet_calls_the_frontends_decision(monkeypatch):
    import planner_sim_fleet as sim

    calls: list[str] = []

    def spy(name):  # the simulation must run the frontend's functions, not copies of them
        real = getattr(disagg, name)

        def call(*a, **k):
            calls.append(name)
            return real(*a, **k)

        monkeypatch.setattr(sim, name, call)

    spy("place_before_queue")
    spy("place_on_queue")
    fleet = sim.Fleet(sim.FleetConfig(disagg=DisaggPolicy(512, 8)), prefill=1, decode=1)
    short = sim.Request(0, 0.0, 200, 4, [])
    long = sim.Request(1, 0.0, 4096, 4, list(range(256)))
    for r in (short, long):
        fleet.at(r.arrival, "arrival", r)
    fleet.run_until(30)
    # the short prompt is decided without the queue's depth, as the frontend decides it; the long one with it
    assert calls == ["place_before_queue", "place_before_queue", "place_on_queue"]
    assert short.reason is Reason.SHORT_PROMPT and long.reason is Reason.REMOTE
    assert short.done_at is not None and long.done_at is not None
    obs = fleet.observe()
    assert obs.traffic is not None and obs.traffic.remote_share == 0.5 and not math.isnan(obs.traffic.request_rate)


def test_the_simulated_fleet_routes_with_the_routers_ttft_cost_and_teaches_its_model(monkeypatch):
    import planner_sim_fleet as sim
    from benchmarks import sim_routing

    calls = []
    real = sim_routing.score_ttft

    def spy(*a, **k):  # the router's own cost, not a copy of it
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(sim_routing, "score_ttft", spy)
    fleet = sim.Fleet(sim.FleetConfig(disagg=DisaggPolicy(512, 8), router="ttft"), aggregated=2)
    busy = sim.Request(0, 0.0, 8192, 4, list(range(512)))  # a long prefill on one worker ...
    short = sim.Request(1, 0.001, 256, 4, [1000 + i for i in range(16)])  # ... so the next goes to the other
    for r in (busy, short):
        fleet.at(r.arrival, "arrival", r)
    fleet.run_until(30)
    assert len(calls) == 2 and busy.worker is not short.worker
    assert busy.done_at is not None and short.done_at is not None
    assert fleet.ttft_model.ttft.updates == 2  # both first tokens (local prefills) were learnt
    blocks = sim.Fleet(sim.FleetConfig(disagg=DisaggPolicy(512, 8), router="blocks"), aggregated=2)
    blocks.at(0.0, "arrival", sim.Request(2, 0.0, 256, 4, []))
    blocks.run_until(5)
    assert len(calls) == 2  # the blocks formula does not call it


def test_the_simulated_ttft_router_breaks_ties_as_the_router_does_not_by_worker_id():
    import collections

    import planner_sim_fleet as sim

    fleet = sim.Fleet(sim.FleetConfig(disagg=DisaggPolicy(512, 8), router="ttft"), aggregated=4)
    reqs = [sim.Request(i, 1.0 * i, 256, 2, [10_000 * i + j for j in range(16)]) for i in range(40)]
    for r in reqs:  # one at a time on an idle fleet, nothing cached: every candidate costs the same
        fleet.at(r.arrival, "arrival", r)
    fleet.run_until(60)
    per_worker = collections.Counter(r.worker.wid for r in reqs)
    assert len(per_worker) == 4 and max(per_worker.values()) < 20  # ties to the lowest id sent all 40 to one


def test_copies_overlay_the_slice_shifted_with_prompts_of_their_own(tmp_path):
    import planner_sim

    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": t * 1000, "input_length": 1024, "output_length": 8, "hash_ids": [t, t + 1]} for t in range(10)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flat = RateProfile.parse("flat")
    one = planner_sim.load_trace(planner_sim.parse(["--trace", str(trace), "--duration-s", "10"]), flat)
    two = planner_sim.load_trace(planner_sim.parse(["--trace", str(trace), "--duration-s", "10", "--copies", "2"]), flat)
    assert len(two) == 2 * len(one) and [r.arrival for r in two] == sorted(r.arrival for r in two)
    assert {tuple(r.hashes) for r in one} < {tuple(r.hashes) for r in two}  # copy 0 keeps its prompts
    assert len({tuple(r.hashes) for r in two}) == 20  # copy 1's are its own
    assert sorted({r.arrival for r in two}) == [float(t) for t in range(10)]  # shifted by 5 s, wrapping round
