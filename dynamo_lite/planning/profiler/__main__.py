"""`python -m dynamo_lite.planning.profiler`: sweep an engine and write the profile the SLA planner uses.

    python -m dynamo_lite.planning.profiler --engine mock -o planner/profiles/mock_roofline_8b_h200.json
    python -m dynamo_lite.planning.profiler --url http://127.0.0.1:8000 --model m -o my_vllm.json

`--engine mock` sweeps the mock engine's pure core in simulated time (seconds);
`--url` sweeps a running engine over vLLM's HTTP API (a real vLLM, or a mock
server with --time-scale set to its speed-up ratio), which takes a while.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ISLS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
CONTEXTS = [512, 1024, 2048, 4096, 8192, 16384, 32768]
CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.planning.profiler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--engine", choices=["mock"], help="sweep the mock engine's core in simulated time")
    src.add_argument("--url", help="sweep the engine serving at this URL (vLLM's HTTP API)")
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the profile (JSON)")
    p.add_argument("--model", help="--url: the served model name")
    p.add_argument("--time-scale", type=float, default=1.0, help="--url: multiply measured times (a mock's speed-up)")
    p.add_argument("--timing", default="roofline", choices=["roofline", "dynamo"], help="--engine mock: timing model")
    p.add_argument("--model-size", default="8b", help="--engine mock: roofline model preset")
    p.add_argument("--gpu", default="h200", help="--engine mock: roofline GPU preset")
    p.add_argument("--num-gpu-blocks", type=int, default=16384)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--isl", type=_ints, default=ISLS, help="input lengths, comma-separated")
    p.add_argument("--context", type=_ints, default=CONTEXTS, help="decode context lengths, comma-separated")
    p.add_argument("--concurrency", type=_ints, default=CONCURRENCIES, help="decode concurrencies, comma-separated")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.engine == "mock":
        from dynamo_lite.engines.mock.scheduler import SchedulerConfig
        from dynamo_lite.engines.mock.timing import (
            GPU_PRESETS,
            MODEL_PRESETS,
            DynamoTiming,
            RooflineTiming,
        )
        from dynamo_lite.planning.profiler.mock_sweep import sweep

        model = MODEL_PRESETS[args.model_size]
        timing = DynamoTiming() if args.timing == "dynamo" else RooflineTiming(model, GPU_PRESETS[args.gpu])
        config = SchedulerConfig(block_size=args.block_size, num_gpu_blocks=args.num_gpu_blocks,
                                 max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                                 kv_bytes_per_token=model.kv_bytes_per_token)
        name = f"mock {args.timing}" + (f" {args.model_size} {args.gpu}" if args.timing == "roofline" else "")
        profile = sweep(config, timing, name, args.isl, args.context,
                        [c for c in args.concurrency if c <= args.max_num_seqs])
    else:
        from dynamo_lite.planning.profiler.http_sweep import HttpSweep

        if not args.model:
            print("error: --url needs --model", file=sys.stderr)
            return 2
        profile = asyncio.run(HttpSweep(args.url, args.model, args.time_scale).sweep(
            args.isl, args.context, args.concurrency))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(profile.to_json() + "\n")
    print(f"wrote {args.output}: {len(profile.prefill)} prefill and {len(profile.decode)} decode points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
