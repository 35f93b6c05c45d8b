"""A frontend process SIGKILLed in the middle of a trace replay: does it route as well once restarted?

`orchestrator up` of a generated cluster.yaml: one frontend process (so every request goes through it),
router mode ``kv``, ``--workers`` mock engines with their agents. A slice of the Mooncake trace is replayed
through it (benchmarks/trace_replay.py: text prompts, streaming) at a steady ``--rate`` (the trace's order and
prompts, not its times). After ``--kill-after`` requests have been sent, the frontend process is SIGKILLed;
the supervisor of `up` restarts it, and the benchmark polls the frontend's /health until it answers 200 again
("back"). The client does not retry: a request in flight on the killed process, or sent while it is down, is
a failure, counted by kind.

Compared, per request, by the engines' own ``usage.prompt_tokens_details.cached_tokens``: the prefix-hit
ratio of the last ``--window`` requests completed before the kill and of the first ``--window`` completed
among those sent once the frontend is back. Three runs, each on fresh engines:

- ``snapshot``: as deployed; the restarted frontend loads every agent's KV snapshot before serving
  (``frontend.kv_snapshot_timeout_s: 2``);
- ``no snapshot``: ``frontend.kv_snapshot_timeout_s: 0``, the restarted frontend's index starts empty and
  learns only from KV events stored from then on (a cold index);
- ``no restart``: the same replay, nothing killed: the hit ratio the same trace requests get from a router
  that never lost its index (the "control" columns give it over each run's own windows).

    .venv/bin/python benchmarks/frontend_restart.py          # 1,800 requests at 20/s, kill after 1,400; ~7 min
    .venv/bin/python benchmarks/frontend_restart.py --runs snapshot --requests 800 --kill-after 500

Writes benchmarks/results/frontend_restart.json; prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import trace_replay  # noqa: E402
from benchmarks.cluster import frontend_processes, orchestrator_up, wait_for  # noqa: E402
from benchmarks.paths import RESULTS, add_trace_option, comma_choices, run_header  # noqa: E402
from benchmarks.trace_replay import ReplayRequest, RequestRecord  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402

MODEL = "bench"
RUNS = {"snapshot": (2.0, True), "no snapshot": (0.0, True), "no restart": (2.0, False)}  # (snapshot timeout, kill)
CONTROL = "no restart"


def log(line: str) -> None:
    print(f"[frontend_restart {time.strftime('%H:%M:%S')}] {line}", flush=True)


@dataclass(frozen=True)
class Window:
    """`requests` completed requests, trace lines `first_line`..`last_line` (not all in between)."""

    requests: int
    first_line: int
    last_line: int
    hit_ratio: float | None  # cached / prompt tokens over these requests
    control_hit_ratio: float | None  # the same trace lines in the `no restart` run


@dataclass
class Run:
    name: str
    kv_snapshot_timeout_s: float
    killed: bool
    startup_s: float
    kill_s: float | None  # replay clock: when SIGKILL was sent
    back_s: float | None  # replay clock: when /health answered 200 again
    summary: dict
    failed_in_flight: int  # sent before the kill, failed (in flight on the killed process)
    failed_while_down: int  # sent between the kill and "back"
    failed_after_back: int  # sent once it was back
    error_samples: list[str]
    before: Window | None = None
    after: Window | None = None


def cluster_yaml(work: Path, name: str, args: argparse.Namespace, snapshot_timeout_s: float, longest: int) -> Path:
    tag = name.replace(" ", "-")
    spec = work / f"cluster-{tag}.yaml"
    spec.write_text(
        f"namespace: restart\nstate_dir: {work / ('state-' + tag)}\n"
        f"models: [{{name: {MODEL}, path: 'builtin:mock-words', block_size: 16, "
        f"max_model_len: {max(4096, longest + 1)}}}]\n"
        f"frontend: {{port: {free_port()}, processes: 1, max_concurrent_requests: 4096, max_queued_requests: 4096, "
        f"upstream_timeout_s: 600, kv_snapshot_timeout_s: {snapshot_timeout_s}, router: {{mode: kv}}}}\n"
        f"pools:\n  - {{name: workers, role: aggregated, engine: mock, model: {MODEL}, replicas: {args.workers}, "
        f"mock: {{speedup_ratio: {args.speedup}, num_gpu_blocks: {args.num_gpu_blocks}}}}}\n")
    return spec


async def kill_and_wait_back(url: str, pid: int, at_s: float, t0: float) -> tuple[float, float]:
    """SIGKILL `pid` at `t0 + at_s`, then poll `url`/health until 200; (kill, back) seconds since `t0`."""
    await asyncio.sleep(max(0.0, t0 + at_s - time.perf_counter()))
    os.kill(pid, signal.SIGKILL)
    killed = time.perf_counter() - t0
    log(f"SIGKILLed frontend pid {pid} at {killed:.1f} s")
    await asyncio.sleep(0.3)  # the kernel has closed the dead process's socket by then
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{url}/health") as resp:
                    if resp.status == 200:
                        return killed, time.perf_counter() - t0
            await asyncio.sleep(0.05)


async def replay_with_kill(url: str, pid: int | None, requests: Sequence[ReplayRequest], kill_at_s: float,
                           timeout_s: float) -> tuple[trace_replay.ReplayResult, float | None, float | None]:  # fmt: skip
    """The replay, and (unless `pid` is None) the kill beside it; the two clocks start within a millisecond."""

    def progress(p: trace_replay.Progress) -> None:
        log(p.line())

    t0 = time.perf_counter()
    killer = asyncio.create_task(kill_and_wait_back(url, pid, kill_at_s, t0)) if pid is not None else None
    try:
        result = await trace_replay.replay(url, MODEL, requests, timeout_s=timeout_s, progress=progress,
                                           progress_every_s=10)  # fmt: skip
        kill_s, back_s = await asyncio.wait_for(killer, 1) if killer else (None, None)
    finally:
        if killer and not killer.done():
            killer.cancel()
    return result, kill_s, back_s


def hit_ratio(records: Sequence[RequestRecord]) -> float | None:
    prompt = sum(r.prompt_tokens or 0 for r in records if r.cached_tokens is not None)
    return round(sum(r.cached_tokens or 0 for r in records) / prompt, 4) if prompt else None


def windows(records: Sequence[RequestRecord], kill_s: float, back_s: float, n: int
            ) -> tuple[list[RequestRecord], list[RequestRecord]]:  # fmt: skip
    """The last `n` requests completed before `kill_s`, and the first `n` completed of those sent after `back_s`."""
    ok = [r for r in records if r.ok and r.sent_s is not None and r.e2e_s is not None]
    before = sorted((r for r in ok if r.sent_s + r.e2e_s < kill_s), key=lambda r: r.sent_s + r.e2e_s)[-n:]
    after = sorted((r for r in ok if r.sent_s >= back_s), key=lambda r: r.sent_s + r.e2e_s)[:n]
    return before, after


def window(records: Sequence[RequestRecord], control: dict[int, RequestRecord] | None) -> Window:
    lines = [r.index for r in records]
    same = [control[i] for i in lines if i in control and control[i].ok] if control else []
    return Window(len(records), min(lines, default=-1), max(lines, default=-1), hit_ratio(records),
                  hit_ratio(same) if same else None)


def run_one(name: str, args: argparse.Namespace, requests: list[ReplayRequest], work: Path) -> tuple[Run, list]:
    snapshot_timeout_s, kill = RUNS[name]
    longest = max(r.input_tokens + r.output_tokens for r in requests)
    spec = cluster_yaml(work, name, args, snapshot_timeout_s, longest)
    started = time.monotonic()
    with orchestrator_up(spec, work / f"up-{spec.stem}.log") as url:
        startup = time.monotonic() - started
        state_dir = work / f"state-{spec.stem.removeprefix('cluster-')}"
        wait_for(lambda: bool(frontend_processes(state_dir)), 60, "the state file of `up`")  # written after /health
        pid = frontend_processes(state_dir)[0].pid if kill else None
        log(f"{name}: ready in {startup:.0f} s; {len(requests)} requests at {args.rate:g}/s"
            + (f", SIGKILL of the frontend after {args.kill_after}" if kill else ""))
        result, kill_s, back_s = asyncio.run(replay_with_kill(url, pid, requests, args.kill_after / args.rate,
                                                              args.timeout))  # fmt: skip
    records = result.records
    summary = trace_replay.summarize(records, result.wall_s, slo_ttft_ms=1000, slo_itl_ms=50)
    failed = [r for r in records if r.error is not None and r.sent_s is not None]
    k, b = kill_s if kill_s is not None else float("inf"), back_s if back_s is not None else float("inf")
    run = Run(name, snapshot_timeout_s, kill, round(startup, 1), kill_s and round(kill_s, 3),
              back_s and round(back_s, 3), asdict(summary), sum(r.sent_s < k for r in failed),
              sum(k <= r.sent_s < b for r in failed), sum(r.sent_s >= b for r in failed),
              sorted({r.error[:200] for r in failed if r.error})[:5])  # fmt: skip
    log(f"{name}: {summary.completed}/{summary.sent} completed, hits {summary.prefix_hit_ratio}"
        + (f", down {b - k:.1f} s, failed {run.failed_in_flight} in flight + {run.failed_while_down} while down "
           f"+ {run.failed_after_back} after" if kill else ""))
    return run, records


def table(runs: Sequence[Run], n: int) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.1%}"

    lines = [f"| run | kv_snapshot_timeout_s | down s | failed: in flight / while down / after | hits, {n} before "
             f"(control) | hits, first {n} after (control) | after - before | whole replay hits |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        b, a = r.before, r.after
        delta = (f"{100 * (a.hit_ratio - b.hit_ratio):+.1f} pt"
                 if a and b and a.hit_ratio is not None and b.hit_ratio is not None else "-")  # fmt: skip
        down = f"{r.back_s - r.kill_s:.1f}" if r.kill_s is not None and r.back_s is not None else "-"
        lines.append(f"| {r.name} | {r.kv_snapshot_timeout_s:g} | {down} | "
                     f"{r.failed_in_flight} / {r.failed_while_down} / {r.failed_after_back} | "
                     f"{pct(b and b.hit_ratio)} ({pct(b and b.control_hit_ratio)}) | "
                     f"{pct(a and a.hit_ratio)} ({pct(a and a.control_hit_ratio)}) | {delta} | "
                     f"{pct(r.summary['prefix_hit_ratio'])} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_option(p)
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, from: {', '.join(RUNS)}")
    p.add_argument("--requests", type=int, default=1800, help="trace lines replayed (from the first)")
    p.add_argument("--rate", type=float, default=20.0, help="requests sent per second, steadily")
    p.add_argument("--kill-after", type=int, default=1400, help="requests sent before the SIGKILL")
    p.add_argument("--window", type=int, default=100, help="requests compared before and after")
    p.add_argument("--workers", type=int, default=4, help="mock engines")
    p.add_argument("--speedup", type=float, default=10.0, help="mock engines' speed-up")
    p.add_argument("--num-gpu-blocks", type=int, default=16384, help="KV cache blocks of 16 tokens per engine")
    p.add_argument("--tokens-per-hash", type=int, default=64, help="prompt tokens per 512-token trace block")
    p.add_argument("--max-output", type=int, default=16, help="cap on output tokens per request")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--out", type=Path, default=RESULTS / "frontend_restart.json")
    args = p.parse_args(argv)
    names = comma_choices(p, args.runs, RUNS, "run")
    if not 0 < args.kill_after < args.requests:
        p.error("--kill-after must be between 0 and --requests")
    trace = trace_replay.load_trace(args.trace, args.requests, args.tokens_per_hash, max_output=args.max_output)
    requests = [ReplayRequest(r.index, i / args.rate, r.blocks, r.output_tokens) for i, r in enumerate(trace)]

    runs: dict[str, Run] = {}
    records: dict[str, list[RequestRecord]] = {}
    with tempfile.TemporaryDirectory(prefix="frontend-restart-") as tmp:
        for name in sorted(names, key=lambda n: n != CONTROL):  # the control first: the others compare with it
            runs[name], records[name] = run_one(name, args, requests, Path(tmp))
    control = {r.index: r for r in records[CONTROL]} if CONTROL in records else None
    for name, run in runs.items():
        if run.kill_s is not None and run.back_s is not None:
            before, after = windows(records[name], run.kill_s, run.back_s, args.window)
            run.before, run.after = window(before, control), window(after, control)
    ordered = [runs[n] for n in RUNS if n in runs]
    text = table(ordered, args.window)
    print(text)
    first = [r for r in records[ordered[0].name][: args.window] if r.ok]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        **run_header(argv, args),
        "client_retries": False,
        "first_window_hit_ratio": hit_ratio(first),  # the trace's first requests on fresh engines
        "runs": [asdict(r) for r in ordered], "table": text,
    }, indent=1) + "\n")  # fmt: skip
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
