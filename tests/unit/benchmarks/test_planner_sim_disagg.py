"""The planner simulation's per-request prefill placement (benchmarks/planner_sim_fleet.py) under the frontend's
`predicted` rule: before a remote prefill has been timed it is the threshold rule; the fleet then learns the
remote path's cost as the frontend's placer does (`RemoteTimings`); an idle decode worker keeps a prompt the
threshold would send away when its own first token comes sooner; and the decode guard sends a long prompt to
the prefill pool while the decode worker streams, which it would have kept without the guard, but keeps a
short one there: the guard counts what its compute adds to the streams' steps, not the TTFT model's fixed
term (which every first token costs, and which the model learns to be well over the ITL target under load)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from dynamo_lite.engines.mock.scheduler import SchedulerConfig  # noqa: E402
from dynamo_lite.frontend.disagg import DisaggPolicy, Reason  # noqa: E402
from router.ttft import Seed  # noqa: E402

BS = 16


def run(itl_target_s: float, rule: str = "predicted") -> list:
    import planner_sim_fleet as sim

    # A fixed term over the ITL target, as the learnt model's is under load (it holds what every first token
    # costs, such as the step in progress): the guard must not count it as a stall.
    config = sim.FleetConfig(sched=SchedulerConfig(block_size=BS, num_gpu_blocks=8192), router="ttft",
                             disagg=DisaggPolicy(512, 1 << 30, rule), itl_target_s=itl_target_s,  # type: ignore[arg-type]
                             ttft_seed=Seed(base_s=0.08, per_1k_tokens_s=0.03))  # fmt: skip
    fleet = sim.Fleet(config, prefill=1, decode=1)
    ids = iter(range(1 << 20))

    def request(rid: int, at: float, isl: int, osl: int) -> sim.Request:
        return sim.Request(rid, at, isl, osl, [next(ids) for _ in range(isl // BS)])

    reqs = [request(0, 0.0, 8000, 4),  # long, first: remote, by the threshold (nothing timed yet)
            request(1, 5.0, 2000, 4),  # over the threshold, on an idle decode worker
            request(2, 10.0, 100, 3000),  # a long stream on the decode worker
            request(3, 11.0, 30000, 4),  # a long prompt while it streams
            request(4, 12.0, 1200, 4)]  # a short one while it streams: little compute, no stall
    for r in reqs:
        fleet.at(r.arrival, "arrival", r)
    fleet.run_until(4.0)
    assert fleet.remote.ready and fleet.remote.first_token_s > 0  # type: ignore[operator]
    while fleet.pending():
        fleet.run_until(fleet.now + 10)
    assert all(r.done_at is not None for r in reqs)
    return reqs


def test_the_predicted_rule_keeps_what_the_decode_worker_reaches_sooner_and_the_guard_what_it_would_stall() -> None:
    reqs = run(itl_target_s=0.05)
    assert [r.reason for r in reqs] == [Reason.REMOTE, Reason.PREDICTED_LOCAL, Reason.PREDICTED_LOCAL, Reason.REMOTE,
                                        Reason.PREDICTED_LOCAL]  # fmt: skip
    assert [r.eligible for r in reqs] == [True, False, False, True, False]  # what the planner sizes its prefill pool on


@pytest.mark.parametrize("rule, reasons", [
    ("predicted", [Reason.REMOTE, Reason.PREDICTED_LOCAL, Reason.PREDICTED_LOCAL, Reason.PREDICTED_LOCAL,
                   Reason.REMOTE]),  # the last: the long prompt kept there is still prefilling, ahead of it
    ("threshold", [Reason.REMOTE, Reason.REMOTE, Reason.SHORT_PROMPT, Reason.REMOTE, Reason.REMOTE]),
])  # fmt: skip
def test_without_the_guard_the_stream_is_held_up_and_the_threshold_rule_goes_by_length(rule, reasons) -> None:
    assert [r.reason for r in run(itl_target_s=0.0, rule=rule)] == reasons


def results(tmp_path: Path, rule: str | None, attainments: dict[str, float]) -> Path:
    """A planner_sim.py results file of one profile, with `attainments` by run name."""
    import json

    def run(name: str, att: float) -> dict:
        kind = name.split()[0]
        p, d = (int(x) for x in name.split()[1].rstrip("D").split("P:")) if kind == "conditional" else (0, 8)
        return {"name": name, "kind": kind, "prefill": p, "decode": d, "size": p + d, "attainment": att,
                "remote_prefill_share": 0.5 if kind == "conditional" else 0.0}

    settings = {"ttft_ms": 2000.0, "itl_ms": 50.0, **({"decision": rule} if rule else {})}
    path = tmp_path / f"{rule}.json"
    path.write_text(json.dumps({"settings": settings, "profiles": {"sine:period=240,amplitude=0.6": {
        "results": [run(n, a) for n, a in attainments.items()]}}}))
    return path


def test_the_rules_report_sets_the_splits_of_both_runs_side_by_side(tmp_path: Path, capsys) -> None:
    from benchmarks import planner_sim_rules

    old = results(tmp_path, None, {"aggregated x8": 0.95, "conditional 1P:7D": 0.6, "conditional 7P:1D": 0.93})
    new = results(tmp_path, "predicted", {"aggregated x8": 0.95, "conditional 1P:7D": 0.8, "conditional 7P:1D": 0.92})
    png = tmp_path / "rules.png"
    assert planner_sim_rules.main([str(old), str(new), "--sizes", "8", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert "| conditional 1P:7D | 60.0% (50%) | 80.0% (50%) | +20.0 |" in out
    assert "| conditional 7P:1D | 93.0% (50%) | 92.0% (50%) | -1.0 |" in out
    assert "| aggregated x8 (either rule) | 95.0% |" in out and png.stat().st_size > 0
    with pytest.raises(SystemExit, match="a --decision predicted run, where the threshold run was expected"):
        planner_sim_rules.main([str(new), str(old)])
