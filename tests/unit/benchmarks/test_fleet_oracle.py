"""benchmarks/fleet_oracle.py against the mock's own scheduler: a request sent in the middle of a pass, with
prompts chunked over several passes, decodes running, others waiting and a cached prefix, gets its first
token exactly when the oracle said (no block shortage, no later arrival); and arena_sim.py end to end."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from benchmarks import arena_sim  # noqa: E402
from benchmarks.fleet_oracle import marginal_ttft, predicted_ttft  # noqa: E402
from dynamo_lite.engines.mock.blocks import hash_blocks  # noqa: E402
from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig, StepPlan  # noqa: E402
from dynamo_lite.engines.mock.sequence import Sequence  # noqa: E402
from dynamo_lite.engines.mock.timing import DynamoTiming, RooflineTiming, TimingModel  # noqa: E402
from router.types import WorkerId  # noqa: E402

BS = 16
rng = random.Random(7)


def tokens(n: int) -> list[int]:
    return [rng.randrange(32000) for _ in range(n)]


def seq(rid: str, prompt: list[int], max_tokens: int) -> Sequence:
    return Sequence(request_id=rid, prompt=prompt, max_tokens=max_tokens, output_key=0, arrival=0.0,
                    prompt_hashes=hash_blocks(prompt, BS))  # fmt: skip


def run_pass(sched: Scheduler, timing: TimingModel, t: float) -> tuple[StepPlan, float]:
    plan = sched.schedule(t)
    return plan, t + timing.step_seconds(plan.load)


@pytest.mark.parametrize("timing", [DynamoTiming(), RooflineTiming()], ids=["dynamo", "roofline"])
@pytest.mark.parametrize("cached", [True, False], ids=["prefix-cached", "cold"])
def test_the_first_token_comes_when_the_oracle_said(timing: TimingModel, cached: bool) -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=4096, max_num_batched_tokens=2048))
    prefix = tokens(1000)
    warm = seq("warm", prefix + tokens(40), 2)  # leaves the prefix's blocks cached, in no one's use
    sched.add(warm)
    t = 0.0
    while sched.has_work():
        plan, t = run_pass(sched, timing, t)
        sched.finish_step(plan, t)
    for i, (n, out) in enumerate([(12000, 6), (300, 20), (700, 3), (60, 40)]):
        sched.add(seq(f"r{i}", tokens(n), out))
        plan, t = run_pass(sched, timing, t)  # one arrival per pass: some decode, one is chunked
        sched.finish_step(plan, t)
    sched.add(seq("late", tokens(900), 5))  # waits in the queue
    plan, ends = run_pass(sched, timing, t)
    assert sched.running and plan.scheduled
    now = t + 0.3 * (ends - t)  # the new request comes in the middle of that pass
    prompt = (prefix if cached else tokens(1000)) + tokens(333)
    ours = seq("ours", prompt, 4)
    predicted = predicted_ttft(sched, plan, ends, now, ours.prompt_hashes, len(prompt), None, timing)

    sched.add(ours)  # after the pass in progress was planned, as the engine sees it
    sched.finish_step(plan, ends)
    t, passes = ends, 0
    while ours.first_token_at is None:
        plan, t = run_pass(sched, timing, t)
        sched.finish_step(plan, t)
        passes += 1
    assert passes >= 2  # it waited behind chunks of the 12,000-token prompt
    assert ours.num_local_cached == (992 if cached else 0)  # the 62 full blocks of the prefix
    assert predicted == pytest.approx(ours.first_token_at - now, rel=1e-9)


def test_what_if_the_prefix_were_cached_there() -> None:
    timing = DynamoTiming()
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=4096))
    prompt = tokens(3000)
    hashes = hash_blocks(prompt, BS)
    cold = predicted_ttft(sched, None, 0.0, 0.0, hashes, len(prompt), None, timing)
    warm = predicted_ttft(sched, None, 0.0, 0.0, hashes, len(prompt), 2048, timing)
    # an idle engine: one pass of the uncached tokens and the decode term at the blocks it then holds
    assert cold == pytest.approx((timing.prefill_ms(3000) + timing.decode_ms(188, 4096)) / 1000)
    assert warm == pytest.approx((timing.prefill_ms(952) + timing.decode_ms(188, 4096)) / 1000)


def test_the_marginal_cost_adds_the_delay_to_the_first_tokens_of_those_already_there() -> None:
    timing = DynamoTiming()
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=4096))
    sched.add(seq("there", tokens(2000), 4))  # waiting on an idle engine: ours joins its pass
    prompt = tokens(1500)
    hashes = hash_blocks(prompt, BS)
    own = predicted_ttft(sched, None, 0.0, 0.0, hashes, len(prompt), None, timing)
    both = (timing.prefill_ms(3500) + timing.decode_ms(125 + 94, 4096)) / 1000  # one pass: 2,000 + 1,500 tokens
    alone = (timing.prefill_ms(2000) + timing.decode_ms(125, 4096)) / 1000
    assert own == pytest.approx(both)
    assert marginal_ttft(sched, None, 0.0, 0.0, hashes, len(prompt), None, timing) == pytest.approx(both + both - alone)


def test_the_router_view_routes_through_the_router_on_its_events_and_its_own_load() -> None:
    import planner_sim_fleet as sim

    config = sim.FleetConfig(sched=SchedulerConfig(block_size=BS, num_gpu_blocks=2048), timing=DynamoTiming(),
                             router="ttft", router_view=True)  # fmt: skip
    fleet = sim.Fleet(config, aggregated=2)
    prefix = tokens(800)
    reqs = [sim.Request(i, at, len(p), 4, hash_blocks(p, BS), p)
            for i, (at, p) in enumerate([(0.0, prefix + tokens(100)), (1.0, prefix + tokens(100)),
                                         (1.0005, tokens(900))])]  # fmt: skip
    for r in reqs:
        fleet.at(r.arrival, "arrival", r)
    while fleet.pending():  # ends: the periodic load reports stop once nothing else is to come
        fleet.run_until(fleet.now + 5)
    first, again, other = reqs
    assert fleet.router is not None
    # the second prompt went where the KV events said its prefix was, and found it there
    assert again.worker is first.worker and again.cached_tokens == 800
    assert fleet.router.index.num_blocks(WorkerId(str(first.worker.wid))) >= 50  # type: ignore[union-attr]
    # the third, sent while the second is in flight there, goes to the other engine (the router's own load)
    assert other.worker is not first.worker
    assert fleet.router.ttft_model.ttft.updates == 3  # every first token taught its model
    assert fleet.router.load_of(WorkerId(str(first.worker.wid))).requests == 0  # type: ignore[union-attr]


def test_the_cache_aware_peer_routes_as_vllm_routers_policy() -> None:
    """sim_routing.CacheAware, the peers' policy: a prompt whose prefix the router sent somewhere before (over
    0.3 of it) goes there, however loaded; one that matches less goes to the least loaded worker; and an
    imbalance of over 64 requests (and 1.5x) sends everything to the least loaded."""
    import planner_sim_fleet as sim
    from sim_routing import CacheAware

    fleet = sim.Fleet(sim.FleetConfig(sched=SchedulerConfig(block_size=BS, num_gpu_blocks=4096)), aggregated=3)
    a, b, c = fleet.workers
    policy = CacheAware(BS)

    def request(rid: int, prompt: list[int]) -> sim.Request:
        return sim.Request(rid, 0.0, len(prompt), 4, hash_blocks(prompt, BS))

    def busy(w: sim.Worker, n: int) -> None:
        for i in range(n):
            w.sched.add(seq(f"{w.wid}-{len(w.sched.waiting)}-{i}", tokens(32), 4))

    prefix = tokens(640)
    busy(a, 1)
    home = policy.pick([a, b, c], request(0, prefix + tokens(64)))
    assert home is b  # nothing matches: the least loaded, ties to the first
    busy(b, 20)
    assert policy.pick([a, b, c], request(1, prefix + tokens(900))) is b  # 640 of 1,540 tokens (0.42) sent there
    assert policy.pick([a, b, c], request(2, prefix + tokens(1600))) is c  # 640 of 2,240 (0.29): below 0.3
    busy(b, 60)  # 80 requests in hand on b, 1 on a, none on c (the policy picks; it does not send)
    assert policy.pick([a, b, c], request(3, prefix + tokens(64))) is c  # imbalanced: the least loaded


def test_arena_sim_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    labels = "ttft,blocks,ttft+view=router,oracle,oracle+copy_weight=1+phase=half,oracle+cost=marginal,cache_aware"
    assert arena_sim.main(["--workload", "tenants", "--requests", "150", "--workers", "3", "--rate", "4",
                           "--capacity-fraction", "0.1", "--timing", "dynamo", "--time-scale", "1",
                           "--routers", labels, "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    rows = {r["router"]: r for r in result["results"]}
    assert list(rows) == labels.split(",")
    for r in rows.values():
        assert 0 < r["prefix_hit_ratio"] < 1 and 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"] and 0 < r["busy"] <= 1
        assert 0 < r["good"] <= 1 and r["itl_p50_ms"] > 0
    assert {ref["name"] for ref in result["references"]} == {"shared", "sticky", "round_robin"}
    assert "| oracle+copy_weight=1+phase=half |" in result["table"]
    # the same options give the same table: nothing in the simulation depends on the machine
    again = tmp_path / "again.json"
    arena_sim.main(["--workload", "tenants", "--requests", "150", "--workers", "3", "--rate", "4",
                    "--capacity-fraction", "0.1", "--timing", "dynamo", "--time-scale", "1",
                    "--routers", labels, "--out", str(again)])  # fmt: skip
    assert json.loads(again.read_text())["table"] == result["table"]


@pytest.mark.parametrize("label, problem", [
    ("oracle+phase=soon", "phase is known or half"),
    ("oracle+cost=all", "cost is own or marginal"),
    ("blocks+view=live", "view is exact or router"),
    ("ttft+phase=half", "known: copy_weight"),
    ("oracle+copy_weight=-1", "copy_weight must be a number >= 0"),
    ("best", "unknown router 'best'"),
])  # fmt: skip
def test_bad_router_labels_name_the_problem(label: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        arena_sim.parse(["--routers", label])
    assert problem in capsys.readouterr().err


def test_the_ttft_router_keeps_the_whole_fleet_busy_far_past_its_capacity(tmp_path: Path) -> None:
    """At 30x the tenants trace's load, the ITL fit falls with KV fill (a request sent to a long queue
    decodes after the crush). The guard once passed over every idle worker for the busiest: the fleet
    was 47% busy, one worker took over 40% of the requests and TTFT p99 was 15 s."""
    out = tmp_path / "over.json"
    assert arena_sim.main(["--workload", "tenants", "--requests", "1000", "--workers", "4", "--rate", "30",
                           "--capacity-fraction", "0.083", "--timing", "dynamo", "--time-scale", "1",
                           "--routers", "ttft+view=router", "--out", str(out)]) == 0  # fmt: skip
    (row,) = json.loads(out.read_text())["results"]
    assert row["busy"] > 0.9 and row["requests_cv"] < 0.2
    assert row["ttft_p99_ms"] < 3000  # blocks: 2.9 s


def test_a_load_sweep_runs_every_router_at_every_rate(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    assert arena_sim.main(["--workload", "tenants", "--requests", "120", "--workers", "3", "--rates", "2,20",
                           "--capacity-fraction", "0.1", "--timing", "dynamo", "--time-scale", "1",
                           "--routers", "ttft,blocks", "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert "--rates 2,20" in result["command"] and result["capacity"]["num_gpu_blocks"] > 0
    rows = result["sweep"]
    assert [(r["rate"], r["router"]) for r in rows] == [(2, "ttft"), (2, "blocks"), (20, "ttft"), (20, "blocks")]
    assert all(a["ttft_p99_ms"] < b["ttft_p99_ms"] for a, b in zip(rows[:2], rows[2:]))  # 10x the load queues
    assert out.with_suffix(".png").stat().st_size > 0
    with pytest.raises(SystemExit):
        arena_sim.parse(["--rates", "4,x"])
