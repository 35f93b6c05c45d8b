"""Router arena, simulated: the arena's workload and fleet in virtual time, beside an oracle router.

The same requests and per-engine capacity as `arena.py` from the same options (arena_workload.py), replayed
on the planner benchmark's fleet simulation (planner_sim_fleet.py: the mock engine's own scheduler, block
pool and timing, without sockets or wall-clock pacing), once per router:
- ``ttft``: the router's ttft cost and learnt TTFT model (`router.cost.score_ttft`, `router.ttft`), with a
  perfect index and each worker's load read from its scheduler: the live router without its event and
  load-report delays;
- ``blocks``: Dynamo's formula, the router's own (`router.cost.score_candidates`), on the same loads, ties
  to the less loaded and then at random, as the router breaks them;
- ``oracle``: each request to the worker where playing that worker's passes forward gives it the earliest
  first token (benchmarks/fleet_oracle.py). It knows every engine's queue, cache and timing exactly, and
  nothing of the requests still to come: the best greedy choice, not a bound;
- ``cache_aware``: vllm-router's and sglang-router's policy of that name, at their defaults (a prefix the
  router sent somewhere, over 0.3 of the prompt, goes back there; else the worker with the fewest requests
  in hand; an imbalance of over 64 requests and 1.5x sends to that one too), on the blocks, not the text.
Options follow a router's name, each as ``+key=value``: ``ttft+copy_weight=1`` (the copy price's weight,
default the router's); ``ttft+view=router`` and ``blocks+view=router`` (the `Router` itself decides, on
what a live one is told: its index from the engines' KV events, its load from its own requests and each
engine's load report every second; default ``exact``); ``oracle+copy_weight=1`` (the same price on the
oracle's own TTFTs, default 0); ``oracle+phase=half`` (the oracle does not know when each engine's pass in
progress ends, and takes it as half done: what a router that does not follow every token can know);
``oracle+cost=marginal`` (its own TTFT plus the delay it causes to the first tokens already queued there).
Beside them, the arena's references (arena_refs.py), the TTFT floor among them under Dynamo's timing.

What it is for: what a router could gain, and where its tail comes from, without the noise of a shared
machine. Deterministic: the same options give the same table. It does not replace the live arena: the
live routers see events and load reports late, and their frontends and engines share two cores.

    .venv/bin/python benchmarks/arena_sim.py --workload tenants --rate 4 --workers 4 --capacity-fraction 0.083 \\
        --timing dynamo --requests 1000 --time-scale 1 --routers ttft,blocks,oracle,oracle+copy_weight=1+phase=half

Writes benchmarks/results/arena_sim.json (or --out), and beside it a plot of each router's hits against its TTFT p99
(when blocks is among the routers); prints the table, with each router's median of the requests' mean ITL and the
share of requests within both SLOs (--slo-ttft-ms, --slo-itl-ms: the arena's goodput). With ``--rates 4,8,16,30``
instead of ``--rate``: every router at every load, and a plot of TTFT p99 and hits against the load (what past the
fleet's capacity does).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from benchmarks import arena_refs  # noqa: E402
from benchmarks.arena_workload import add_workload_options, capacity, check_workload_options, load_requests  # noqa: E402,E501
from benchmarks.paths import RESULTS, recorded_args  # noqa: E402
from benchmarks.planner_sim_fleet import Fleet  # noqa: E402
from benchmarks.replay_stats import percentile  # noqa: E402
from benchmarks.sim_fleet_types import FleetConfig, Request  # noqa: E402
from benchmarks.trace_replay import ReplayRequest, block_tokens  # noqa: E402
from dynamo_lite.config.schema import MockEngineSpec  # noqa: E402
from dynamo_lite.engines.mock.scheduler import SchedulerConfig  # noqa: E402
from dynamo_lite.engines.mock.timing import DynamoTiming, RooflineTiming  # noqa: E402
from router import RouterConfig  # noqa: E402

ROUTERS = ("ttft", "blocks", "oracle", "cache_aware")
OPTIONS = {"ttft": ("copy_weight", "view"), "blocks": ("view",), "oracle": ("copy_weight", "phase", "cost"),
           "cache_aware": ()}


@dataclass(frozen=True)
class Result:
    router: str
    prefix_hit_ratio: float  # cached / prompt tokens, as the engines count them
    ttft_p50_ms: float
    ttft_p99_ms: float
    busy: float  # pass seconds over workers x the replay's span
    requests_cv: float  # coefficient of variation of the requests per worker
    good: float  # share of the requests within both SLOs (TTFT, mean ITL), as the arena's goodput counts them
    itl_p50_ms: float  # median of the requests' mean ITL
    seconds: float  # wall seconds the simulation took


def sim_requests(requests: list[ReplayRequest], block_size: int, time_scale: float,
                 with_tokens: bool = False) -> list[Request]:  # fmt: skip
    """The replay's requests as the simulation's, their blocks named by content (arena_refs.BlockNames);
    ``with_tokens``: with the token ids the live arena sends (trace_replay.block_tokens), for the router."""
    names = arena_refs.BlockNames(block_size)
    return [Request(i, r.at_s * time_scale, r.input_tokens, r.output_tokens, names.of(r),
                    [t for h, n in r.blocks for t in block_tokens(h, n)] if with_tokens else None)
            for i, r in enumerate(requests)]  # fmt: skip


def router_options(label: str) -> tuple[str, dict[str, str]]:
    """``name+key=value+...`` as (name, options); ValueError naming what is wrong."""
    name, *pairs = label.split("+")
    if name not in OPTIONS:
        raise ValueError(f"unknown router {name!r}; choose from {', '.join(ROUTERS)}")
    options = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in OPTIONS[name]:
            known = ", ".join(OPTIONS[name]) or "none"
            raise ValueError(f"{label}: {pair!r} is not key=value with a key of {name} (known: {known})")
        options[key] = value
    if options.get("phase", "known") not in ("known", "half"):
        raise ValueError(f"{label}: phase is known or half, not {options['phase']!r}")
    if options.get("cost", "own") not in ("own", "marginal"):
        raise ValueError(f"{label}: cost is own or marginal, not {options['cost']!r}")
    if options.get("view", "exact") not in ("exact", "router"):
        raise ValueError(f"{label}: view is exact or router, not {options['view']!r}")
    for key in ("copy_weight",):
        if key in options:
            try:
                if float(options[key]) < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{label}: {key} must be a number >= 0, not {options[key]!r}") from None
    return name, options


def simulate(label: str, requests: list[ReplayRequest], args: argparse.Namespace, num_gpu_blocks: int) -> Result:
    started = time.perf_counter()
    spec = MockEngineSpec()
    longest = max(r.input_tokens + r.output_tokens for r in requests)
    sched = SchedulerConfig(block_size=args.block_size, num_gpu_blocks=num_gpu_blocks, max_num_seqs=spec.max_num_seqs,
                            max_num_batched_tokens=spec.max_num_batched_tokens,
                            max_model_len=max(4096, longest + 1))  # fmt: skip
    timing = DynamoTiming() if args.timing == "dynamo" else RooflineTiming()
    router, options = router_options(label)
    config = FleetConfig(sched=sched, timing=timing, speedup=1 / args.time_scale, router=router,
                         copy_weight=float(options.get("copy_weight", RouterConfig.copy_weight)),
                         itl_target_s=args.itl_target_ms / 1000,
                         oracle_copy_weight=float(options.get("copy_weight", 0.0)),
                         oracle_knows_phase=options.get("phase", "known") == "known",
                         oracle_marginal=options.get("cost", "own") == "marginal",
                         router_view=options.get("view", "exact") == "router")  # fmt: skip
    fleet = Fleet(config, aggregated=args.workers)
    reqs = sim_requests(requests, args.block_size, args.time_scale, with_tokens=config.router_view)
    for r in reqs:
        fleet.at(r.arrival, "arrival", r)
    while fleet.pending():
        fleet.run_until(fleet.now + 60.0)
    if len(fleet.finished) != len(reqs):
        raise RuntimeError(f"{label}: {len(fleet.finished)} of {len(reqs)} requests finished")
    ttfts = sorted((r.first_token_at - r.arrival) * 1000 for r in reqs)  # type: ignore[operator]
    span = max(r.done_at for r in reqs)  # type: ignore[type-var]
    per_worker = [sum(1 for r in reqs if r.worker is w) for w in fleet.workers]
    mean = sum(per_worker) / len(per_worker)
    cv = math.sqrt(sum((n - mean) ** 2 for n in per_worker) / len(per_worker)) / mean
    itls = sorted(r.itl_s * 1000 for r in reqs)  # type: ignore[operator]
    good = sum(1 for r in reqs if (r.first_token_at - r.arrival) * 1000 <= args.slo_ttft_ms  # type: ignore[operator]
               and r.itl_s * 1000 <= args.slo_itl_ms)  # type: ignore[operator]
    return Result(label, sum(r.cached_tokens for r in reqs) / sum(r.isl for r in reqs), percentile(ttfts, 50),
                  percentile(ttfts, 99), sum(w.busy_s for w in fleet.workers) / (len(fleet.workers) * span), cv,
                  good / len(reqs), percentile(itls, 50), time.perf_counter() - started)  # fmt: skip


def of_sticky(hits: float, sticky: float) -> str:
    """Prefix hits as a share of the sticky reference's; "-" where it has none (a trace sharing no prefix)."""
    return f"{hits / sticky:.2f}" if sticky else "-"


def table(results: list[Result], refs: list[arena_refs.Reference]) -> str:
    sticky = next(r.prefix_hit_ratio for r in refs if r.name == "sticky")
    blocks = next((r.ttft_p99_ms for r in results if r.router == "blocks"), None)
    rows = ["| router | prefix hits | hits / sticky | TTFT p50 ms | TTFT p99 ms | p99 vs blocks | mean ITL p50 ms | "
            "within SLOs | fleet busy | requests/worker CV |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        vs = f"{r.ttft_p99_ms / blocks:.2f}x" if blocks else "-"
        rows.append(f"| {r.router} | {r.prefix_hit_ratio:.1%} | {of_sticky(r.prefix_hit_ratio, sticky)} | "
                    f"{r.ttft_p50_ms:.0f} | {r.ttft_p99_ms:.0f} | {vs} | {r.itl_p50_ms:.1f} | {r.good:.1%} | "
                    f"{r.busy:.0%} | {r.requests_cv:.2f} |")
    for ref in refs:
        p50, p99, vs = "-", "-", "-"
        if ref.ttft_floor_ms is not None:
            p50, p99 = f"{ref.ttft_floor_ms[0]:.0f} (floor)", f"{ref.ttft_floor_ms[1]:.0f} (floor)"
            vs = f"{ref.ttft_floor_ms[1] / blocks:.2f}x" if blocks else "-"
        share = of_sticky(ref.prefix_hit_ratio, sticky)
        rows.append(f"| reference: {ref.name} | {ref.prefix_hit_ratio:.1%} | {share} | "
                    f"{p50} | {p99} | {vs} | - | - | - | - |")
    return "\n".join(rows)


def plot(results: list[Result], refs: list[arena_refs.Reference], title: str, path: Path) -> None:
    """Each router as a point: prefix hits over sticky's against TTFT p99 over blocks', with #18's targets
    (hits at least 0.95 of sticky, p99 at most 0.8x blocks') and the TTFT floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sticky = next(r.prefix_hit_ratio for r in refs if r.name == "sticky")
    blocks = next(r.ttft_p99_ms for r in results if r.router == "blocks")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in results:
        color = {"oracle": "tab:purple", "ttft": "tab:blue", "cache_aware": "tab:orange"}.get(
            r.router.split("+")[0], "tab:gray")
        share = r.prefix_hit_ratio / sticky if sticky else 0.0  # (a trace sharing no prefix: none to share)
        ax.scatter(share, r.ttft_p99_ms / blocks, color=color)
        ax.annotate(r.router, (share, r.ttft_p99_ms / blocks), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    ax.axvline(0.95, color="k", linestyle=":", label="hits 0.95 of sticky")
    ax.axhline(0.8, color="k", linestyle="--", label="TTFT p99 0.8x blocks")
    floor = next((r.ttft_floor_ms for r in refs if r.ttft_floor_ms is not None), None)
    if floor is not None:
        ax.axhline(floor[1] / blocks, color="tab:red", linestyle="-.", label="TTFT floor (p99)")
    ax.set_xlabel("prefix hits / sticky reference's")
    ax.set_ylabel("TTFT p99 / blocks'")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--routers", default=",".join(ROUTERS),
                   help=f"comma-separated, from: {', '.join(ROUTERS)}, each with options (see above)")
    add_workload_options(p)
    p.add_argument("--itl-target-ms", type=float, default=50.0,
                   help="ttft: the ITL guard's target (the frontend's default: planner.itl_target_ms); 0: no guard")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0, help="goodput: TTFT SLO (the arena's)")
    p.add_argument("--slo-itl-ms", type=float, default=50.0, help="goodput: mean-ITL SLO (the arena's)")
    p.add_argument("--rates", default=None,
                   help="instead of --rate: a load sweep, comma-separated (4,8,16,24,30,40); writes each rate's rows "
                        "and a plot of TTFT p99 and prefix hits against the load")
    p.add_argument("--out", type=Path, default=RESULTS / "arena_sim.json")
    args = p.parse_args(argv)
    check_workload_options(p, args)
    try:
        args.sweep = [float(r) for r in args.rates.split(",")] if args.rates else []
    except ValueError:
        p.error(f"--rates: comma-separated numbers, not {args.rates!r}")
    if any(r <= 0 for r in args.sweep):
        p.error("--rates must all be > 0")
    args.labels = [r.strip() for r in args.routers.split(",") if r.strip()]
    for label in args.labels:
        try:
            router_options(label)
        except ValueError as e:
            p.error(f"--routers: {e}")
    return args


def log(line: str) -> None:
    print(f"[arena_sim {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def sweep(args: argparse.Namespace, command: list[str]) -> int:
    """Every router at every rate of ``args.sweep``: a table, the JSON and a plot against the load."""
    rows: list[dict[str, object]] = []
    refs: list[arena_refs.Reference] = []
    described: dict[str, object] = {}
    cap: dict[str, object] = {}
    for rate in args.sweep:
        args.rate = rate
        with tempfile.TemporaryDirectory(prefix="arena-sim-") as tmp:
            requests, described = load_requests(args, Path(tmp))
        if not refs:  # the slice, its capacity and references do not depend on the rate
            cap = capacity(args, requests, log)
            blocks = int(cap["num_gpu_blocks"])  # type: ignore[call-overload]
            refs = arena_refs.references(requests, args.block_size, args.workers, blocks, args.timing)
        for label in args.labels:
            r = simulate(label, requests, args, blocks)
            log(f"x{rate:g} {label}: hits {r.prefix_hit_ratio:.1%}, TTFT p99 {r.ttft_p99_ms:.0f} ms, "
                f"busy {r.busy:.0%}")
            rows.append({"rate": rate, **asdict(r)})
    sticky = next(r.prefix_hit_ratio for r in refs if r.name == "sticky")
    lines = ["| load | router | prefix hits | hits / sticky | TTFT p50 ms | TTFT p99 ms | fleet busy |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| x{row['rate']:g} | {row['router']} | {row['prefix_hit_ratio']:.1%} | "
              f"{of_sticky(row['prefix_hit_ratio'], sticky)} | {row['ttft_p50_ms']:.0f} | {row['ttft_p99_ms']:.0f} | "
              f"{row['busy']:.0%} |" for row in rows]  # type: ignore[operator,str-format]
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join(command), "workload": described, "capacity": cap,
        "rate_profile": args.rate_profile.describe(), "timing": args.timing,
        "args": {k: str(v) for k, v in recorded_args(args).items() if k != "rate"},
        "references": [asdict(ref) for ref in refs], "sweep": rows, "table": text}, indent=2) + "\n")  # fmt: skip
    plot_sweep(rows, sticky, f"Arena, simulated: {described['name']}, {args.workers} workers x {blocks} blocks, "
               f"{args.rate_profile.describe()}, {args.tokens_per_hash} tokens per trace block",
               args.out.with_suffix(".png"))  # fmt: skip
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


def plot_sweep(rows: list[dict[str, object]], sticky: float, title: str, path: Path) -> None:
    """TTFT p99 (log) and prefix hits over sticky's against the load, a line per router."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (tail, hits) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label in dict.fromkeys(str(row["router"]) for row in rows):
        mine = [row for row in rows if row["router"] == label]
        rates = [float(row["rate"]) for row in mine]  # type: ignore[arg-type]
        tail.plot(rates, [row["ttft_p99_ms"] for row in mine], marker="o", label=label)
        shares = [float(row["prefix_hit_ratio"]) / sticky if sticky else 0.0 for row in mine]  # type: ignore[arg-type]
        hits.plot(rates, shares, marker="o", label=label)
    tail.set_yscale("log")
    tail.set_xlabel("load (x the trace's rate)")
    tail.set_ylabel("TTFT p99, ms")
    hits.axhline(0.95, color="k", linestyle=":", label="0.95 of sticky")
    hits.set_xlabel("load (x the trace's rate)")
    hits.set_ylabel("prefix hits / sticky reference's")
    hits.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]
    if args.sweep:
        return sweep(args, command)
    with tempfile.TemporaryDirectory(prefix="arena-sim-") as tmp:
        requests, described = load_requests(args, Path(tmp))
    cap = capacity(args, requests, log)
    blocks = int(cap["num_gpu_blocks"])  # type: ignore[call-overload]
    refs = arena_refs.references(requests, args.block_size, args.workers, blocks, args.timing)
    log(f"{described['name']}: {len(requests)} requests over {requests[-1].at_s * args.time_scale:.0f} s, "
        f"{args.workers} workers x {blocks} blocks, timing {args.timing}, rate x{args.rate:g}, "
        f"{args.rate_profile.describe()}")
    results = []
    for label in args.labels:
        results.append(simulate(label, requests, args, blocks))
        r = results[-1]
        log(f"{label}: hits {r.prefix_hit_ratio:.1%}, TTFT p99 {r.ttft_p99_ms:.0f} ms ({r.seconds:.0f} s)")
    text = table(results, refs)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = {"command": " ".join(command),
           "workload": described, "rate": args.rate, "rate_profile": args.rate_profile.describe(), "capacity": cap,
           "timing": args.timing, "args": {k: str(v) for k, v in recorded_args(args).items()},
           "references": [asdict(ref) for ref in refs], "results": [asdict(r) for r in results],
           "table": text}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    if "blocks" in args.labels:
        plot(results, refs, f"Arena, simulated: {described['name']}, {args.workers} workers x {blocks} blocks, load "
             f"x{args.rate:g} ({args.rate_profile.describe()}), {args.tokens_per_hash} tokens per trace block",
             args.out.with_suffix(".png"))  # fmt: skip
        log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    else:
        log(f"wrote {args.out} (no plot: it is drawn against blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
