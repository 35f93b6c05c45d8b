"""The planner benchmark's clairvoyant reference (benchmarks/planner_sim.py): it sizes from the true rate
multiplier, ahead by the start-up, within the budget; its check finds the frontier points the targets ask about."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from benchmarks.planner_sim import Run, clairvoyant_runs, clairvoyant_size, parse, simulate  # noqa: E402
from benchmarks.planner_sim_report import clairvoyant_check  # noqa: E402
from benchmarks.rate_profile import RateProfile  # noqa: E402

STEP = RateProfile.parse("step:at=100,low=0.5,high=1.5")


def test_it_sizes_for_the_highest_multiplier_ahead_within_the_budget():
    run = Run("c", "clairvoyant", k=4.0, base=0.5)
    assert clairvoyant_size(run, STEP, 0.0, 30.0, budget=8) == 3  # ceil(4 x 0.5 + 0.5)
    assert clairvoyant_size(run, STEP, 75.0, 30.0, budget=8) == 7  # the step at 100 is within the 30 s ahead
    assert clairvoyant_size(run, STEP, 75.0, 10.0, budget=8) == 3  # ... but not within 10 s
    assert clairvoyant_size(run, STEP, 200.0, 0.0, budget=5) == 5  # the budget caps it
    assert clairvoyant_size(Run("c", "clairvoyant", k=0.1), STEP, 0.0, 0.0, budget=8) == 1  # at least one


def test_the_grid_spans_half_to_all_of_the_budget_at_the_peak():
    args = parse(["--budget", "6", "--duration-s", "300"])
    ks = sorted({r.k for r in clairvoyant_runs(args, STEP)})
    assert ks[0] == round(6 * 0.5 / 1.5, 2) and ks[-1] == round(6 / 1.5, 2)
    assert all(r.kind == "clairvoyant" and not r.static for r in clairvoyant_runs(args, STEP))


def result(name: str, attainment: float, replica_s: float, size: int = 0) -> dict:
    return {"name": name, "kind": "clairvoyant" if not size else "aggregated", "static": bool(size), "size": size,
            "attainment": attainment, "replica_seconds": replica_s, "series": [],
            "good_per_replica_hour": 1000 * attainment * 3600 / replica_s}


def test_the_check_reports_the_best_within_0_7x_and_the_cheapest_reaching_the_full_fleet():
    full = result("aggregated x8", 0.94, 1000.0, size=8)
    seer = [result("a", 0.88, 650.0), result("b", 0.90, 700.0), result("c", 0.93, 800.0),
            result("d", 0.95, 950.0), result("e", 0.96, 990.0)]
    half = result("aggregated x4", 0.89, 500.0, size=4)
    line, within, reach = clairvoyant_check(seer, [half, full], full)
    assert within is not None and within["name"] == "b"  # 700 <= 0.7 x 1000, and more than a
    assert reach is not None and reach["name"] == "d"  # the cheapest at >= 94%
    assert "at most 90.0% (b)" in line and "x0.95 (d)" in line
    # good/replica-h: b (90%) and c (93%) only have the full fleet at >= their attainment: b's 0.90/700 over
    # 0.94/1000 is the best ratio, x1.37 (c: x1.24); a (88%) compares with x4 (89% on 500 replica-s): x0.69
    assert "at most x1.37 the best static at >= its attainment (b)" in line
    line, within, reach = clairvoyant_check(seer[2:4], [], result("aggregated x8", 0.99, 1000.0, size=8))
    assert within is None and reach is None
    assert "no run within 0.7x" in line and "no run reaches" in line


def test_a_short_simulation_scales_with_the_true_rate():
    args = parse(["--duration-s", "60", "--budget", "4", "--startup-s", "10", "--interval-s", "5"])
    profile = "sine:period=60,amplitude=0.6"
    out = simulate((Run("clairvoyant 2m+0", "clairvoyant", k=2.5, base=0), args, profile))
    sizes = [s["prefill"] + s["decode"] for s in out["series"] if s["t"] < out["horizon_s"]]
    assert min(sizes) < max(sizes) <= 4  # it follows the sine (peak 1.6 x 2.5 -> 4, trough 0.4 x 2.5 -> 1)
    assert out["finished"] == out["requests"] and out["replica_seconds"] > 0
