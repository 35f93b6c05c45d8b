"""Planner benchmark: goodput and cost of four ways to run a mock fleet over the Mooncake trace.

Strategies, each a discrete-event simulation over the same slice of the Mooncake trace
(default benchmarks/data/mooncake_synthetic_trace.jsonl; planner_sim_fleet.py: the mock
engine's scheduler and roofline timing, 8B model on an H200, in virtual time):
- static aggregated: `--static-total` aggregated workers;
- static disaggregated: every P:D split of `--static-total` workers; the best
  (goodput, then fewer replica-seconds) is reported as "at the best fixed ratio";
- load planner: starts at `--planner-start` (2 prefill + 1 decode), `LoadPolicy` every interval;
- SLA planner: the same, `SlaPolicy` with the shipped mock profile.
The planners run the real decision core (planner.Planner) on a virtual clock,
within a budget of `--budget` workers; new workers serve after `--startup-s`.
Goodput: requests per second (over the slice) whose TTFT and mean ITL both meet
the targets; unfinished requests do not count. Replica-seconds: the sum over
workers of the time from being asked for to being stopped (drained).

    .venv/bin/python benchmarks/planner_sim.py              # default: ~2-4 minutes on 2 cores
    .venv/bin/python benchmarks/planner_sim.py --duration-s 120 --jobs 2
Writes benchmarks/results/planner_sim.json and planner_sim.png.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.paths import RESULTS, add_trace_option, recorded_args  # noqa: E402
from planner import (  # noqa: E402
    EngineProfile, Limits, LoadPolicy, LoadPolicyConfig, Planner, Pool, PoolLimits, SlaPolicy, SlaPolicyConfig,
    VirtualClock,
)  # fmt: skip
from planner_sim_fleet import TRACE_BLOCK, Fleet, FleetConfig, Request  # noqa: E402


@dataclass(frozen=True)
class Run:
    name: str
    kind: str  # "static_agg", "static_disagg", "load", "sla"
    prefill: int = 0
    decode: int = 0


def load_trace(args: argparse.Namespace) -> list[Request]:
    start_ms, end_ms = args.start_s * 1000, (args.start_s + args.duration_s) * 1000
    reqs = []
    with open(args.trace) as f:
        for line in f:
            r = json.loads(line)
            if not start_ms <= r["timestamp"] < end_ms:
                continue
            osl = max(1, int(r["output_length"]))
            isl = min(int(r["input_length"]), args.max_isl)
            per = TRACE_BLOCK // 16
            hashes = [hash((h, j)) & 0x7FFFFFFFFFFFFFFF for h in r["hash_ids"] for j in range(per)][: isl // 16]
            reqs.append(Request(len(reqs), (r["timestamp"] - start_ms) / 1000 / args.time_scale, isl, osl, hashes))
    return reqs


def make_planner(kind: str, args: argparse.Namespace) -> Planner:
    limits = Limits(prefill=PoolLimits(1, args.budget - 1), decode=PoolLimits(1, args.budget - 1),
                    max_total=args.budget, max_step=args.max_step, cooldown_s=args.cooldown_s,
                    scale_down_after=args.scale_down_after)
    if kind == "sla":
        policy = SlaPolicy(SlaPolicyConfig(ttft_target_s=args.ttft_ms / 1000, itl_target_s=args.itl_ms / 1000),
                           EngineProfile.load())
    else:
        policy = LoadPolicy(LoadPolicyConfig())
    return Planner(policy, limits, VirtualClock())


def simulate(run: Run, args: argparse.Namespace) -> dict:
    started = time.monotonic()
    reqs = load_trace(args)
    config = FleetConfig(startup_s=args.startup_s)
    if run.kind in ("load", "sla"):
        p0, d0 = (int(x) for x in args.planner_start.split(":"))
        fleet, planner = Fleet(config, aggregated=False, prefill=p0, decode=d0), make_planner(run.kind, args)
    else:
        fleet, planner = Fleet(config, aggregated=run.kind == "static_agg", prefill=run.prefill, decode=run.decode), None
    for r in reqs:
        fleet.at(r.arrival, "arrival", r)
    horizon = args.duration_s / args.time_scale
    series, t = [], 0.0
    while t < horizon + args.tail_s and (t < horizon or fleet.pending()):
        t += args.interval_s
        fleet.run_until(t)
        obs = fleet.observe()
        if planner is not None:
            planner.clock.set(t)  # type: ignore[attr-defined]
            decision = planner.tick(obs, fleet.replicas())
            for pool in Pool:
                if decision.of(pool).delta:
                    fleet.scale(pool, decision.of(pool).target)
        rep = fleet.replicas()
        kv = [d.kv_usage for d in obs.decode]
        series.append({"t": round(t, 1), "prefill": rep.prefill, "decode": rep.decode,
                       "queue": obs.prefill_queue or 0, "in_flight": obs.prefill_in_flight or 0,
                       "kv": round(sum(kv) / len(kv), 3) if kv else 0.0})
    return summarise(run, args, reqs, fleet, t, series, time.monotonic() - started)


def summarise(run: Run, args: argparse.Namespace, reqs: list[Request], fleet: Fleet, end: float, series: list,
              wall_s: float) -> dict:
    horizon = args.duration_s / args.time_scale
    done = [r for r in reqs if r.done_at is not None]
    ttfts = sorted(r.first_token_at - r.arrival for r in done)  # type: ignore[operator]
    itls = sorted(r.itl_s for r in done)  # type: ignore[misc]
    good = [r for r in done if r.first_token_at - r.arrival <= args.ttft_ms / 1000  # type: ignore[operator]
            and r.itl_s <= args.itl_ms / 1000]  # type: ignore[operator]
    replica_s = fleet.replica_seconds(end)

    def pct(xs: list[float], q: float) -> float | None:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4) if xs else None

    return {
        "name": run.name, "kind": run.kind, "requests": len(reqs), "finished": len(done), "good": len(good),
        "goodput_rps": round(len(good) / horizon, 3), "good_fraction": round(len(good) / max(1, len(reqs)), 3),
        "replica_seconds": round(replica_s, 1), "mean_replicas": round(replica_s / end, 2),
        "good_per_replica_hour": round(len(good) / replica_s * 3600, 1) if replica_s else 0.0,
        "ttft_p50_s": pct(ttfts, 0.5), "ttft_p90_s": pct(ttfts, 0.9), "itl_mean_s": round(statistics.fmean(itls), 4)
        if itls else None, "itl_p90_s": pct(itls, 0.9), "sim_end_s": round(end, 1), "wall_s": round(wall_s, 1),
        "series": series,
    }


def _work(item: tuple[Run, argparse.Namespace]) -> dict:
    run, args = item
    result = simulate(run, args)
    print(f"  {run.name:<24} goodput {result['goodput_rps']:6.2f} req/s ({result['good_fraction']:.0%} good), "
          f"{result['replica_seconds']:8.0f} replica-s, {result['wall_s']:.0f} s wall", flush=True)
    return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_option(p)
    p.add_argument("--start-s", type=float, default=0.0, help="slice of the trace: start (trace seconds)")
    p.add_argument("--duration-s", type=float, default=240.0, help="slice of the trace: length (trace seconds)")
    p.add_argument("--time-scale", type=float, default=1.0, help="arrivals come this many times faster")
    p.add_argument("--max-isl", type=int, default=65536, help="clamp prompts to this many tokens")
    p.add_argument("--ttft-ms", type=float, default=2000.0, help="TTFT target")
    p.add_argument("--itl-ms", type=float, default=50.0, help="ITL target (mean per request)")
    p.add_argument("--budget", type=int, default=8, help="planners: most workers in total")
    p.add_argument("--static-total", type=int, default=6, help="static fleets: workers in total")
    p.add_argument("--startup-s", type=float, default=30.0, help="a new worker serves after this long")
    p.add_argument("--planner-start", default="2:1", help="planners: prefill:decode workers at the start")
    p.add_argument("--interval-s", type=float, default=10.0, help="planner interval (and sampling of the plot)")
    p.add_argument("--cooldown-s", type=float, default=30.0)
    p.add_argument("--scale-down-after", type=int, default=3)
    p.add_argument("--max-step", type=int, default=2)
    p.add_argument("--tail-s", type=float, default=120.0, help="simulate this long after the last arrival at most")
    p.add_argument("--jobs", type=int, default=2, help="simulations run in parallel")
    p.add_argument("--out", type=Path, default=RESULTS / "planner_sim.json")
    p.add_argument("--plot", type=Path, default=RESULTS / "planner_sim.png")
    return p.parse_args(argv)


def runs(args: argparse.Namespace) -> list[Run]:
    n = args.static_total
    out = [Run(f"static aggregated x{n}", "static_agg", 0, n)]
    out += [Run(f"static disagg {p}P:{n - p}D", "static_disagg", p, n - p) for p in range(1, n)]
    return out + [Run("load planner", "load"), Run("SLA planner", "sla")]


def plot(results: list[dict], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_q) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for r, color in zip(results, ("tab:blue", "tab:orange", "tab:green", "tab:red")):
        ts = [s["t"] for s in r["series"]]
        if r["kind"] != "static_agg":
            ax_r.step(ts, [s["prefill"] for s in r["series"]], where="post", color=color, label=f"{r['name']}: prefill")
        ax_r.step(ts, [s["decode"] for s in r["series"]], where="post", color=color, ls="--",
                  label=f"{r['name']}: " + ("workers" if r["kind"] == "static_agg" else "decode"))
        if r["kind"] != "static_agg":
            ax_q.plot(ts, [s["queue"] + s["in_flight"] for s in r["series"]], color=color, label=r["name"])
            ax_q.plot(ts, [s["queue"] for s in r["series"]], color=color, ls=":")
    ax_r.set_ylabel("replicas")
    ax_r.legend(fontsize=7, ncol=2, loc="upper left")
    ax_q.set_ylabel("prefill jobs: pending + in flight\n(dotted: pending only)")
    ax_q.set_xlabel("simulated seconds")
    ax_q.legend(fontsize=7)
    fig.suptitle(f"Mooncake trace {args.start_s:.0f}-{args.start_s + args.duration_s:.0f} s x{args.time_scale:g}; "
                 f"TTFT <= {args.ttft_ms:.0f} ms, ITL <= {args.itl_ms:.0f} ms")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    todo = runs(args)
    n_req = len(load_trace(args))
    print(f"{n_req} requests over {args.duration_s / args.time_scale:.0f} simulated s; {len(todo)} simulations, "
          f"{args.jobs} at a time", flush=True)
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        results = pool.map(_work, [(r, args) for r in todo], chunksize=1)
    disagg = [r for r in results if r["kind"] == "static_disagg"]
    best = max(disagg, key=lambda r: (r["goodput_rps"], -r["replica_seconds"]))
    table = [results[0], best] + [r for r in results if r["kind"] in ("load", "sla")]
    print(f"\n{'strategy':<26}{'goodput req/s':>14}{'good':>7}{'replica-s':>11}{'mean repl':>10}"
          f"{'good/repl-h':>12}{'TTFT p90':>10}{'ITL mean':>10}")
    for r in table:
        label = r["name"] + (" (best)" if r is best else "")
        print(f"{label:<26}{r['goodput_rps']:>14.2f}{r['good_fraction']:>7.0%}{r['replica_seconds']:>11.0f}"
              f"{r['mean_replicas']:>10.2f}{r['good_per_replica_hour']:>12.0f}{r['ttft_p90_s'] or 0:>9.2f}s"
              f"{(r['itl_mean_s'] or 0) * 1000:>8.1f}ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": recorded_args(args), "requests": n_req,
                                    "table": [r["name"] for r in table], "best_static_disagg": best["name"],
                                    "results": results}, indent=1) + "\n")
    plot(table, args.plot, args)
    print(f"\nwrote {args.out} and {args.plot} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
