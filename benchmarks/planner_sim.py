"""Planner benchmark: planners against every static fleet, on a trace warped by a rate profile.

One run simulates (planner_sim_fleet.py: the mock engine's scheduler and roofline
timing, 8B on an H200, in virtual time) the same slice of the Mooncake trace,
its arrival times warped by `--profile` (benchmarks/rate_profile.py), under:
- static fleets at every size up to `--budget` and every P:D ratio: aggregated
  (n workers), disaggregated (P + D, every prefill remote) and conditional P/D
  (P + D, the frontend's decision per request: short or cached prompts and a
  backed-up queue prefill on the decode worker);
- planners within the same budget, starting at `--planner-start`, on a
  virtual clock, new workers serving after `--startup-s`: the SLA planner with
  conditional P/D, and with aggregated workers only, for each load predictor
  (`kalman`; `seasonal`, told the profile's period; `last`: no prediction),
  and the reactive load planner;
- a clairvoyant reference: aggregated workers sized from the profile's true
  multiplier m(t), ceil(k * m + base), asked for one start-up ahead and
  removed only when the multiplier up to the next decision fits fewer; a grid
  of (k, base). No real planner knows m(t): its frontier is what a perfect
  forecast buys for given replica-seconds with this family of sizing rules.
Goodput: requests per second (over the slice) whose TTFT and mean ITL meet the
targets; attainment: their share of all requests (unfinished ones fail).
Replica-seconds: per worker, from being asked for to being stopped (drained).

    .venv/bin/python benchmarks/planner_sim.py     # sine, step and burst train: ~40 min on 2 cores
    .venv/bin/python benchmarks/planner_sim.py --profiles sine:period=240,amplitude=0.6 --budget 8
    .venv/bin/python benchmarks/planner_sim.py --from-json benchmarks/results/planner_sim.json  # re-render
Writes benchmarks/results/planner_sim.json, planner_sim_<profile>.png (replicas over time) and
planner_sim_<profile>_frontier.png (attainment against replica-seconds, every run).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.paths import RESULTS, add_trace_option, recorded_args  # noqa: E402
from benchmarks.planner_sim_fleet import Fleet  # noqa: E402
from benchmarks.planner_sim_report import plot, plot_frontier, print_table, summarise, sweep_table, verdict  # noqa: E402,E501
from benchmarks.rate_profile import RateProfile  # noqa: E402
from benchmarks.sim_fleet_types import ALWAYS_REMOTE, TRACE_BLOCK, FleetConfig, Request  # noqa: E402
from benchmarks.trace_formats import read_trace  # noqa: E402
from dynamo_lite.config.schema import DisaggregationSpec, PlannerSpec  # noqa: E402
from dynamo_lite.frontend.disagg import DisaggPolicy  # noqa: E402
from planner import (  # noqa: E402
    EngineProfile, Limits, LoadPolicy, LoadPolicyConfig, Planner, Pool, PoolLimits, SlaPolicy, SlaPolicyConfig,
    VirtualClock,
)  # fmt: skip
from planner.predict import KalmanPredictor, LastValue, Predictor, SeasonalConfig, SeasonalPredictor  # noqa: E402
from router.ttft import Seed  # noqa: E402



@dataclass(frozen=True)
class Run:
    name: str
    kind: str  # "aggregated", "disaggregated", "conditional" (static), "planner" or "clairvoyant"
    prefill: int = 0
    decode: int = 0  # decode workers, or aggregated ones
    policy: str = ""  # planners: "sla" or "load"
    predictor: str = ""  # sla planner: "kalman", "seasonal", "last"
    aggregated: bool = False  # planner: scale aggregated workers only (no prefill pool)
    k: float = 0.0  # clairvoyant: workers per unit of the rate multiplier
    base: float = 0.0  # clairvoyant: workers added to that

    @property
    def static(self) -> bool:
        return self.kind not in ("planner", "clairvoyant")


def load_trace(args: argparse.Namespace, profile: RateProfile) -> list[Request]:
    """The slice's requests, `--copies` of them overlaid, arrival times warped by ``profile``.

    Copy ``k`` is the slice shifted by ``k / copies`` of its length, wrapping round (so every copy
    covers the whole slice), with prompt hashes of its own: ``copies`` tenants of the trace's shape
    sharing no prefix, ``copies`` times its load, for a fleet ``copies`` times the size.
    """
    start_ms, end_ms = args.start_s * 1000, (args.start_s + args.duration_s) * 1000
    copies = args.copies
    rows = [r for r in read_trace(args.trace) if start_ms <= r.timestamp_ms < end_ms]
    per = args.tokens_per_hash // 16
    timed = []
    for k in range(copies):
        shift_ms = args.duration_s * 1000 * k / copies
        for r in rows:
            osl = max(1, min(r.output_length, args.max_output or 1 << 30))
            isl = min(int(r.input_length * args.tokens_per_hash / TRACE_BLOCK), args.max_isl)
            salt = (k,) if k else ()  # copy 0 keeps the hashes of runs before --copies
            hashes = [hash((*salt, h, j)) & 0x7FFFFFFFFFFFFFFF for h in r.hash_ids for j in range(per)][: isl // 16]
            offset_ms = (r.timestamp_ms - start_ms + shift_ms) % (args.duration_s * 1000)
            timed.append((offset_ms, k, max(1, isl), osl, hashes))
    timed.sort(key=lambda x: (x[0], x[1]))
    return [Request(i, profile.warp(ms / 1000 * args.time_scale), isl, osl, hashes)
            for i, (ms, _, isl, osl, hashes) in enumerate(timed)]


def make_predictor(name: str, profile: RateProfile, max_harmonics: int) -> Predictor:
    if name == "seasonal":  # told the profile's period, as an operator knows their daily cycle
        return SeasonalPredictor(SeasonalConfig(period_s=profile.period, max_harmonics=max_harmonics))
    return LastValue() if name == "last" else KalmanPredictor()


def make_planner(run: Run, args: argparse.Namespace, profile: RateProfile) -> Planner:
    b = args.budget
    spec = PlannerSpec(policy=run.policy, cooldown_s=args.cooldown_s, scale_down_after=args.scale_down_after)
    steps = dict(max_step=args.max_step, max_step_up=args.max_step_up, cooldown_s=spec.effective_cooldown_s,
                 scale_down_after=spec.effective_scale_down_after)
    if run.policy == "sla":
        prefill = PoolLimits(0, 0) if run.aggregated else PoolLimits(0 if args.choose_layout else 1, b - 1)
        limits = Limits(prefill=prefill, decode=PoolLimits(1, b - 1), max_total=b, **steps)
        config = SlaPolicyConfig(ttft_target_s=args.ttft_ms / 1000, itl_target_s=args.itl_ms / 1000,
                                 startup_s=args.startup_s, down_headroom=args.down_headroom,
                                 prefill_pool=not run.aggregated, react_to_measured=args.react_to_measured,
                                 length_window_s=args.length_window_s, spare_replicas=args.spare_replicas,
                                 spare_always=args.spare_always, choose_layout=args.choose_layout and not run.aggregated,
                                 forecast_margin=args.forecast_margin, max_decode=b - 1, max_total=b)
        policy = SlaPolicy(config, EngineProfile.load(), make_predictor(run.predictor, profile, args.max_harmonics))
        return Planner(policy, limits, VirtualClock())
    limits = Limits(prefill=PoolLimits(1, b - 1), decode=PoolLimits(1, b - 1), max_total=b, **steps)
    return Planner(LoadPolicy(LoadPolicyConfig()), limits, VirtualClock())


def clairvoyant_size(run: Run, profile: RateProfile, t: float, ahead_s: float, budget: int) -> int:
    """Workers for the highest true multiplier over [t, t + ahead_s] (1 s steps), within 1..budget."""
    m = max(profile.multiplier(t + d) for d in range(int(ahead_s) + 1))
    return max(1, min(budget, math.ceil(run.k * m + run.base - 1e-9)))


def simulate(item: tuple[Run, argparse.Namespace, str]) -> dict:
    run, args, profile_text = item
    started = time.monotonic()
    profile = RateProfile.parse(profile_text)
    reqs = load_trace(args, profile)
    conditional = DisaggPolicy(args.max_local_prefill_tokens, DisaggregationSpec().max_prefill_queue, args.decision)
    disagg = ALWAYS_REMOTE if run.kind in ("disaggregated",) or run.policy == "load" else conditional
    seed = Seed.from_profile([(p.isl, p.ttft_s) for p in EngineProfile.load().prefill])  # as the frontend seeds it
    config = FleetConfig(startup_s=args.startup_s, disagg=disagg, speedup=args.speedup, router=args.router,
                         ttft_seed=seed, itl_target_s=args.itl_ms / 1000 if args.itl_guard else 0.0)
    planner = None
    if run.static:
        agg = run.kind == "aggregated"
        fleet = Fleet(config, prefill=run.prefill, decode=0 if agg else run.decode, aggregated=run.decode if agg else 0)
    elif run.kind == "clairvoyant":
        fleet = Fleet(config, aggregated=clairvoyant_size(run, profile, 0.0, args.startup_s, args.budget))
    else:
        p0, d0 = (int(x) for x in args.planner_start.split(":"))
        fleet = Fleet(config, aggregated=p0 + d0) if run.aggregated else Fleet(config, prefill=p0, decode=d0)
        planner = make_planner(run, args, profile)
    for r in reqs:
        fleet.at(r.arrival, "arrival", r)
    horizon = max(r.arrival for r in reqs)
    series, t = [], 0.0
    while t < horizon + args.tail_s and (t < horizon or fleet.pending()):
        t += args.interval_s
        fleet.run_until(t)
        obs = fleet.observe()
        if run.kind == "clairvoyant":  # a worker asked for now serves from t + startup until the next decision
            up = keep = 1  # after the last arrival: drain to one
            if t < horizon:
                up = clairvoyant_size(run, profile, t + args.startup_s, args.interval_s, args.budget)
                keep = clairvoyant_size(run, profile, t, args.startup_s + args.interval_s, args.budget)
            n = fleet.replicas().decode
            if up > n or keep < n:
                fleet.scale(Pool.DECODE, up if up > n else keep)
        if planner is not None:
            planner.clock.set(t)  # type: ignore[attr-defined]
            decision = planner.tick(obs, fleet.replicas())
            for pool in Pool:
                if decision.of(pool).delta:
                    fleet.scale(pool, decision.of(pool).target)
        rep = fleet.replicas()
        series.append({"t": round(t, 1), "prefill": rep.prefill, "decode": rep.decode,
                       "rate": round(obs.traffic.request_rate, 2) if obs.traffic else 0.0,
                       "queue": obs.prefill_queue or 0})
    result = summarise(run, args, reqs, fleet, t, horizon, time.monotonic() - started)
    result |= {"profile": profile_text, "series": series if not run.static else []}
    return result


def runs(args: argparse.Namespace) -> list[Run]:
    out = []
    sizes = sorted({int(n) for n in args.static_sizes.split(",")}) if args.static_sizes else range(1, args.budget + 1)
    for n in sizes:
        out.append(Run(f"aggregated x{n}", "aggregated", 0, n))
        for p in range(1, n) if args.static_splits else ():
            out.append(Run(f"disagg {p}P:{n - p}D", "disaggregated", p, n - p))
            out.append(Run(f"conditional {p}P:{n - p}D", "conditional", p, n - p))
    predictors = args.predictors.split(",")
    planners = [Run(f"SLA planner ({p}), conditional P/D", "planner", policy="sla", predictor=p) for p in predictors]
    planners += [Run(f"SLA planner ({p}), aggregated", "planner", policy="sla", predictor=p, aggregated=True)
                 for p in predictors]
    planners.append(Run("load planner (reactive), disagg", "planner", policy="load"))
    return planners + out


def clairvoyant_runs(args: argparse.Namespace, profile: RateProfile) -> list[Run]:
    """The grid: k from half to all of the budget at the profile's peak multiplier, with base 0 and 1."""
    peak = max(profile.multiplier(t) for t in range(0, int(args.duration_s) + 1))
    grid = [(round(args.budget * s / peak, 2), base) for s in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0) for base in (0, 1)]
    return [Run(f"clairvoyant {k:g}m+{base}", "clairvoyant", k=k, base=base) for k, base in grid]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_option(p)
    p.add_argument("--profiles", default="sine:period=240,amplitude=0.6;step:at=360,low=0.4,high=1.6;"
                   "burst:period=240,duty=0.25,high=2.2", help="rate profiles, ';'-separated (rate_profile.py)")
    p.add_argument("--start-s", type=float, default=0.0, help="slice of the trace: start (trace seconds)")
    p.add_argument("--duration-s", type=float, default=720.0, help="slice of the trace: length (trace seconds)")
    p.add_argument("--time-scale", type=float, default=1.0, help="arrival = trace time x this, then warped")
    p.add_argument("--copies", type=int, default=1, help="overlay this many copies of the slice, each shifted by "
                   "1/copies of its length and with prompts of its own: N times the load, for N times the budget")
    p.add_argument("--tokens-per-hash", type=int, default=TRACE_BLOCK, help="prompt tokens per trace hash id "
                   "(512: the trace's lengths; trace_replay.py's option, to predict a live run)")
    p.add_argument("--max-isl", type=int, default=65536, help="clamp prompts to this many tokens")
    p.add_argument("--max-output", type=int, default=0, help="cap output tokens (0: none)")
    p.add_argument("--speedup", type=float, default=1.0, help="mock speedup_ratio (engine s per wall s)")
    p.add_argument("--router", choices=("ttft", "blocks"), default="ttft", help="the router's cost: ttft "
                   "(cluster.yaml's default: predicted TTFT, learnt online) or blocks (Dynamo's formula)")
    p.add_argument("--max-local-prefill-tokens", type=int, default=DisaggregationSpec().max_local_prefill_tokens,
                   help="conditional P/D: prefill on the decode worker up to this many uncached prompt tokens "
                        "(cluster.yaml's frontend.disaggregation.max_local_prefill_tokens)")
    p.add_argument("--decision", choices=("threshold", "predicted"), default=DisaggregationSpec().decision,
                   help="conditional P/D: where prefill runs (cluster.yaml's frontend.disaggregation.decision): "
                        "threshold (by --max-local-prefill-tokens) or predicted (the sooner predicted first token, "
                        "with the decode guard at --itl-ms; ttft routing only)")
    p.add_argument("--itl-guard", action=argparse.BooleanOptionalAction, default=True,
                   help="the router's ITL guard and the predicted rule's decode guard, both at --itl-ms "
                        "(cluster.yaml's frontend.router.itl_guard; --no-itl-guard: neither)")
    p.add_argument("--ttft-ms", type=float, default=2000.0, help="TTFT target")
    p.add_argument("--itl-ms", type=float, default=50.0, help="ITL target (mean per request)")
    p.add_argument("--budget", type=int, default=8, help="most workers: planners' budget, static fleets' largest")
    p.add_argument("--startup-s", type=float, default=30.0, help="a new worker serves after this long")
    p.add_argument("--planner-start", default="4:2", help="planners: prefill:decode workers at the start")
    p.add_argument("--predictors", default="kalman,seasonal,last", help="SLA planner runs, one per predictor")
    p.add_argument("--interval-s", type=float, default=10.0, help="planner interval (and sampling of the plot)")
    # The planners' settings default to cluster.yaml's (PlannerSpec): the results are what an operator gets.
    spec, sla, load = PlannerSpec(), PlannerSpec(policy="sla"), PlannerSpec(policy="load")
    p.add_argument("--scale-down-after", type=int, default=None, help="planners: ticks in a row asking for fewer "
                   "before a pool shrinks (planner.scale_down_after; default: each policy's, sla "
                   f"{sla.effective_scale_down_after}, load {load.effective_scale_down_after})")
    p.add_argument("--max-step", type=int, default=spec.max_step, help="planners: most workers removed per tick "
                   f"(planner.max_step, default {spec.max_step})")
    p.add_argument("--max-step-up", type=int, default=spec.max_step_up, help="planners: most workers added per "
                   "tick (planner.max_step_up; default: no limit)")
    p.add_argument("--cooldown-s", type=float, default=None, help="planners: a pool is held this long after it "
                   "grows (planner.cooldown_s; default: each policy's, sla "
                   f"{sla.effective_cooldown_s:g}, load {load.effective_cooldown_s:g})")
    p.add_argument("--react-to-measured", action=argparse.BooleanOptionalAction, default=spec.react_to_measured,
                   help="SLA planner: also grow at once when the measured rate exceeds the prediction "
                        "(planner.react_to_measured)")
    p.add_argument("--down-headroom", type=float, default=spec.down_headroom, help="SLA planner: shrink only if "
                   f"the predicted peak + this share fits (planner.down_headroom, default {spec.down_headroom})")
    p.add_argument("--length-window-s", type=float, default=spec.length_window_s,
                   help="SLA planner: prompt lengths over the requests of this long (0: the last interval's)")
    p.add_argument("--max-harmonics", type=int, default=spec.season_harmonics, help="SLA planner, seasonal "
                   "predictor: most harmonics of the period fitted, chosen by BIC (cluster.yaml's "
                   "planner.season_harmonics, default 4; 1: a sine)")
    p.add_argument("--spare-replicas", type=int, default=spec.spare_replicas, help="SLA planner: workers added "
                   "to each pool that needs any, where two of its long prompts together would miss the TTFT "
                   "target (cluster.yaml's planner.spare_replicas, default 1; 0: as sized)")
    p.add_argument("--spare-always", action=argparse.BooleanOptionalAction, default=False, help="SLA planner: "
                   "the spare in every pool that needs a worker, whatever its prompts (planner.spare_always)")
    p.add_argument("--forecast-margin", type=float, default=spec.forecast_margin, help="SLA planner: scale up "
                   "for the prediction + this quantile of its errors one start-up ahead (cluster.yaml's "
                   "planner.forecast_margin, default 0.95; 0: the prediction alone)")
    p.add_argument("--choose-layout", action=argparse.BooleanOptionalAction, default=False, help="SLA planner, "
                   "conditional P/D: no prefill pool while the decode workers alone need no more workers (the "
                   "prefill pool's min_replicas 0, as cluster.yaml's planner.prefill.min_replicas: 0; default: "
                   "min_replicas 1, as cluster.yaml's default: both pools sized)")
    p.add_argument("--tail-s", type=float, default=120.0, help="simulate this long after the last arrival at most")
    p.add_argument("--static-sizes", default="", help="static fleets of these sizes only, e.g. 8,16,24,32 "
                   "(default: every size up to the budget)")
    p.add_argument("--static-splits", action=argparse.BooleanOptionalAction, default=True, help="static "
                   "disaggregated and conditional P/D fleets at every P:D split of each size (--no-static-splits: "
                   "aggregated fleets only, for large budgets)")
    p.add_argument("--planners-only", action="store_true", help="skip the static sweep (for tuning; no verdict)")
    p.add_argument("--jobs", type=int, default=2, help="simulations run in parallel")
    p.add_argument("--from-json", type=Path, default=None, help="no simulation: render the tables, checks and "
                   "plots again from an earlier run's results file (its settings and profiles)")
    p.add_argument("--out", type=Path, default=RESULTS / "planner_sim.json")
    args = p.parse_args(argv)
    if args.decision == "predicted" and args.router != "ttft":
        p.error("--decision predicted needs --router ttft: the local TTFT it weighs is the router's prediction")
    return args


def simulate_all(args: argparse.Namespace, profiles: list[str]) -> list[dict]:
    todo = [r for r in runs(args) if not (args.planners_only and r.static)]
    seer = (lambda p: []) if args.planners_only else (lambda p: clairvoyant_runs(args, RateProfile.parse(p)))
    items = [(r, args, p) for p in profiles for r in todo + seer(p)
             if not (r.predictor == "seasonal" and RateProfile.parse(p).kind in ("flat", "step"))]
    print(f"{len(items)} simulations over {len(profiles)} profiles, {args.jobs} at a time", flush=True)
    out: list[dict] = []
    started, every = time.monotonic(), max(1, len(items) // 20)
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for done, result in enumerate(pool.imap(simulate, items, chunksize=1), 1):  # in order, as map
            out.append(result)
            if done % every == 0 or done == len(items):
                spent = time.monotonic() - started
                print(f"  {done}/{len(items)} simulations done in {spent / 60:.1f} min, "
                      f"about {spent / done * (len(items) - done) / 60:.0f} min left", flush=True)
    return out


def rendered_again(args: argparse.Namespace) -> tuple[list[dict], dict, list[str]]:
    """An earlier run's results, settings and profiles; its targets and start-up replace the options'."""
    old = json.loads(args.from_json.read_text())
    for key in ("ttft_ms", "itl_ms", "startup_s", "planners_only"):
        setattr(args, key, old["settings"][key])
    profiles = list(old["profiles"])
    return [r for p in profiles for r in old["profiles"][p]["results"]], old["settings"], profiles


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    profiles = [p.strip() for p in args.profiles.split(";") if p.strip()]
    started = time.monotonic()
    if args.from_json is not None:
        flat, settings, profiles = rendered_again(args)
    else:
        flat, settings = simulate_all(args, profiles), recorded_args(args)
    report = {"settings": settings, "profiles": {}}
    for prof in profiles:
        results = [r for r in flat if r["profile"] == prof]
        described = RateProfile.parse(prof).describe()
        table, checks = verdict(results)
        print(f"\n== {described}: {results[0]['requests']} requests over {results[0]['horizon_s']:.0f} s")
        print_table(table)
        sweep = sweep_table(results)
        for n, *cells in sweep:
            print(f"  static x{n:<3}" + "".join(f"{c:>22}" for c in cells))
        for line in checks:
            print("  " + line)
        png = args.out.with_name(f"{args.out.stem}_{RateProfile.parse(prof).kind}.png")
        title = f"{described}; TTFT <= {args.ttft_ms:.0f} ms, ITL <= {args.itl_ms:.0f} ms; workers start in " \
                f"{args.startup_s:.0f} s"
        plot([r for r in results if r["kind"] == "planner"], table, png, title)
        frontier_png = png.with_name(png.stem + "_frontier.png")
        if not args.planners_only:
            plot_frontier(results, frontier_png, title)
        report["profiles"][prof] = {"describe": described, "table": table, "checks": checks, "sweep": sweep,
                                    "results": results,
                                    "plot": png.name, "frontier_plot": frontier_png.name}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {args.out} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
