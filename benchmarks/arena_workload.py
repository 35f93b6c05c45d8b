"""The arena's workload: the options that choose it, and the requests and per-engine capacity they give.

Shared by the live arena (arena.py) and its simulation (arena_sim.py), so that both replay the same
requests on the same capacity from the same command-line options.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

from benchmarks import arena_refs, trace_gen, trace_replay
from benchmarks.paths import MOONCAKE_TRACE, add_trace_option, recorded
from benchmarks.rate_profile import RateProfile

WORKLOADS = ("mooncake", *trace_gen.WORKLOADS)


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """The options that choose the workload, its load and the fleet's engines."""
    p.add_argument("--workload", choices=WORKLOADS, default="mooncake",
                   help="mooncake: the --trace file; chat, tenants: generated (benchmarks/trace_gen.py) from --seed")
    add_trace_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed of a generated workload")
    p.add_argument("--requests", type=int, default=1000,
                   help="requests replayed per router (on the Mooncake trace prefix sharing grows with the slice: "
                        "the ceiling is 17%% for 1,000, 34%% for 2,000, 65%% for all 3,993)")
    p.add_argument("--workers", type=int, default=8, help="mock engines in the fleet")
    p.add_argument("--time-scale", type=float, default=0.1, help="wall seconds per (rate-compressed) trace second")
    p.add_argument("--rate", type=float, default=1.0, help="multiply the trace's arrival rate (the load) by this")
    p.add_argument("--rate-profile", default="flat", type=_profile,
                   help="then warp the arrival times by this rate profile, in wall seconds: flat, "
                        "sine:period=120,amplitude=0.4, step:at=120,low=0.5,high=1.5, burst:period=120,duty=0.25,"
                        "high=2 (benchmarks/rate_profile.py); the mean rate stays --rate over whole periods")
    p.add_argument("--tokens-per-hash", type=int, default=64, help="prompt tokens per 512-token trace block")
    p.add_argument("--max-output", type=int, default=32, help="cap on output tokens per request")
    p.add_argument("--num-gpu-blocks", type=int, default=16384,
                   help="KV cache blocks per engine (16,384 x 16 tokens: about 140 of the 8x-reduced prompts)")
    p.add_argument("--capacity-fraction", type=float, default=None,
                   help="instead: KV blocks per engine = this x the slice's distinct blocks (1 / (3 x workers): "
                        "cache pressure)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--timing", choices=("roofline", "dynamo"), default="roofline",
                   help="the mock's timing: roofline (8B on an H200) or dynamo (Dynamo's mocker)")


def check_workload_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.workload != "mooncake" and args.trace != MOONCAKE_TRACE:
        p.error(f"--trace is the mooncake workload's file; --workload {args.workload} is generated")
    if args.rate <= 0 or not 0 < (args.capacity_fraction or 1) <= 1:
        p.error("--rate must be > 0, --capacity-fraction in (0, 1]")


def load_requests(args: argparse.Namespace, work: Path) -> tuple[list[trace_replay.ReplayRequest], dict[str, object]]:
    """The requests to replay (arrival times compressed by --rate, then warped by --rate-profile) and what
    the JSON records about the workload."""
    trace, described = workload(args, work)
    requests = trace_replay.load_trace(trace, args.requests, args.tokens_per_hash, max_output=args.max_output)
    requests = [dataclasses.replace(r, at_s=r.at_s / args.rate) for r in requests]
    return trace_replay.warp(requests, args.rate_profile, args.time_scale), described


def workload(args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, object]]:
    """The trace file to replay and what the JSON records about it."""
    if args.workload == "mooncake":
        return args.trace, {"name": "mooncake", "trace": recorded(args.trace)}
    lines, params = trace_gen.generate(args.workload, args.requests, args.seed)
    path = work / f"{args.workload}.jsonl"
    trace_gen.write_trace(lines, path)
    return path, {"name": args.workload, "seed": args.seed, "generator": trace_gen.params_json(params)}


def capacity(args: argparse.Namespace, requests: list[trace_replay.ReplayRequest],
             log: Callable[[str], None] = print) -> dict[str, object]:
    """Per-engine KV blocks: --num-gpu-blocks, or --capacity-fraction x the slice's distinct blocks, never
    below twice what the longest request needs."""
    bs = args.block_size
    distinct = arena_refs.distinct_blocks(requests, bs)
    floor = 2 * max(math.ceil((r.input_tokens + r.output_tokens) / bs) for r in requests)
    out: dict[str, object] = {"distinct_blocks": distinct, "fraction": args.capacity_fraction}
    blocks = args.num_gpu_blocks if args.capacity_fraction is None else math.ceil(args.capacity_fraction * distinct)
    if blocks < floor:
        log(f"capacity: {blocks} blocks per engine raised to {floor}, twice the longest request's "
            f"{floor // 2} blocks (a smaller cache could not run it beside another)")
        out["raised_from"] = blocks
        blocks = floor
    out["num_gpu_blocks"] = blocks
    return out


def _profile(text: str) -> RateProfile:
    try:
        return RateProfile.parse(text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
