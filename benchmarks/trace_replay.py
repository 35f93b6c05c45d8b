"""Replay a request trace against any OpenAI-compatible endpoint: latency, prefix hits, goodput.

Each trace line (in Mooncake's terms: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``: one id
per 512-token block, equal ids = equal prefix up to that block; Azure's and BurstGPT's CSV traces are read as
such rows, with no prefix shared: trace_formats.py) becomes one streaming POST /v1/completions, sent open loop
``timestamp * time_scale`` seconds after the start (``--max-inflight`` optionally bounds requests in flight).
The prompt is text, one word ``t<N>`` per token: the mock engine's tokenizer maps it to token N, and routers
that route on text (sglang-router's cache_aware) see the same prefixes. Each hash id expands to
``tokens_per_hash`` deterministic token ids drawn from (seed, id), so equal ids give equal prefixes at any
engine block size. ``--tokens-per-hash 64`` shrinks every prompt 8x and keeps the prefix structure: a prompt
has round(input_length * tokens_per_hash / 512) tokens, its last block truncated.

Per request: send time, TTFT (first chunk with content), ITLs (gaps between content chunks: one token per
chunk on vLLM; an engine that groups tokens under load gives fewer, longer gaps), end-to-end, usage tokens
and ``usage.prompt_tokens_details.cached_tokens``. A failure or a timeout is a record with an error, never
dropped. Summary: p50/p90/p99 of TTFT, ITL (pooled over requests) and E2E; requests/s and output tokens/s
over the wall time; prefix-hit ratio (cached / prompt tokens over the requests that report cached tokens)
beside the ceiling of one infinite cache shared by all; goodput: requests/s completed within both SLOs
(TTFT, and mean ITL = (E2E - TTFT) / (completion tokens - 1)).

    .venv/bin/python benchmarks/trace_replay.py      # reduced defaults (1,000 requests, prompts 8x shorter, 10x
                                                     # faster) against deploy/examples/mock-fleet.yaml, ~2 min
    .venv/bin/python -m dynamo_lite.engines.mock --model bench --port 18123 --enable-prompt-tokens-details &
    .venv/bin/python benchmarks/trace_replay.py --url http://127.0.0.1:18123 --limit 100 --time-scale 0.05 \\
        --tokens-per-hash 32
    .venv/bin/python benchmarks/trace_replay.py --url http://127.0.0.1:8000 --model bench --max-inflight 64 \\
        --slo-ttft-ms 1000 --slo-itl-ms 50 --out benchmarks/results/trace_replay_frontend.json

From code::

    reqs = load_trace(TRACE, limit=500, tokens_per_hash=64)
    result = await replay(url, "bench", reqs, time_scale=0.1, timeout_s=120)
    summary = summarize(result.records, result.wall_s, slo_ttft_ms=2000, slo_itl_ms=100)

Writes JSON (config, summary, per-request records) to --out and a PNG beside it (TTFT and rolling prefix hits
over send time). The records, the summary, the table and the plot are in benchmarks/replay_stats.py.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.paths import MOONCAKE_TRACE, REPO, add_trace_option, recorded_args  # noqa: E402
from benchmarks.rate_profile import RateProfile  # noqa: E402
from benchmarks.replay_stats import (  # noqa: E402
    RequestRecord,
    plot,
    print_table,
    record_json,
    summarize,
)
from benchmarks.trace_formats import read_trace  # noqa: E402

TRACE = MOONCAKE_TRACE  # the default --trace
HASH_TOKENS = 512  # tokens per trace hash id
MOCK_VOCAB = 128_256  # the mock engine's default --vocab-size (MockEngineArgs.vocab_size)


# --- the workload -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One trace line, scaled: what to send and when."""

    index: int  # line number in the trace file
    at_s: float  # trace time since the first replayed line, before time_scale
    blocks: tuple[tuple[int, int], ...]  # (hash id, tokens taken from its expansion), in prompt order
    output_tokens: int  # max_tokens

    @property
    def input_tokens(self) -> int:
        return sum(n for _, n in self.blocks)


def load_trace(path: Path, limit: int | None = None, tokens_per_hash: int = HASH_TOKENS, *, start: int = 0,
               max_output: int | None = None) -> list[ReplayRequest]:  # fmt: skip
    """Requests ``start .. start + limit`` of a trace (trace_formats.py: Mooncake, Azure or BurstGPT), times
    rebased to the first of them."""
    if not 1 <= tokens_per_hash <= HASH_TOKENS:
        raise ValueError(f"tokens_per_hash must be in [1, {HASH_TOKENS}], got {tokens_per_hash}")
    out: list[ReplayRequest] = []
    first_ms: float | None = None
    for i, r in enumerate(read_trace(path)):
        if i < start:
            continue
        if limit is not None and len(out) >= limit:
            break
        first_ms = r.timestamp_ms if first_ms is None else first_ms
        n = max(1, round(r.input_length * tokens_per_hash / HASH_TOKENS))
        blocks = tuple((h, min(tokens_per_hash, n - k * tokens_per_hash))
                       for k, h in enumerate(r.hash_ids) if k * tokens_per_hash < n)  # fmt: skip
        output = r.output_length if max_output is None else min(r.output_length, max_output)
        out.append(ReplayRequest(i, (r.timestamp_ms - first_ms) / 1000, blocks, max(1, output)))
    return out


def warp(requests: Sequence[ReplayRequest], profile: RateProfile, time_scale: float) -> list[ReplayRequest]:
    """Send times (``at_s * time_scale``) warped by ``profile``, kept in ``at_s`` units (so the replay's
    ``time_scale`` still applies once)."""
    return [ReplayRequest(r.index, profile.warp(r.at_s * time_scale) / time_scale, r.blocks, r.output_tokens)
            for r in requests]


def block_tokens(hash_id: int, n: int, vocab_size: int = MOCK_VOCAB, seed: int = 0) -> list[int]:
    """The first ``n`` token ids that ``hash_id`` expands to: a pure function of (seed, hash_id, vocab_size);
    a shorter expansion is a prefix of a longer one."""
    return random.Random(f"{seed}/{hash_id}").choices(range(vocab_size), k=n)


@functools.lru_cache(maxsize=4096)  # pure memo: ~15 MB of text at 512 tokens per id
def _block_text(hash_id: int, n: int, vocab_size: int, seed: int) -> str:
    return " ".join(f"t{t}" for t in block_tokens(hash_id, n, vocab_size, seed))


def prompt_text(blocks: Sequence[tuple[int, int]], vocab_size: int = MOCK_VOCAB, seed: int = 0) -> str:
    """A prompt as words ``t<N>``, one per token; equal leading blocks give an equal leading text."""
    return " ".join(_block_text(h, n, vocab_size, seed) for h, n in blocks)


def prefix_hit_ceiling(requests: Sequence[ReplayRequest]) -> float:
    """Cached / prompt tokens with one infinite token-level cache shared by all: no router beats it."""
    seen: dict[int, int] = {}  # hash id -> most tokens of it seen (a last block may be partial)
    hit = total = 0
    for r in requests:
        for h, n in r.blocks:
            hit += min(n, seen.get(h, 0))
            if seen.get(h, 0) < n:
                break
        total += r.input_tokens
        for h, n in r.blocks:
            seen[h] = max(seen.get(h, 0), n)
    return hit / total if total else 0.0


# --- the replay ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Progress:
    elapsed_s: float
    total: int
    sent: int
    finished: int
    errors: int

    def line(self) -> str:
        return (f"[{self.elapsed_s:7.1f}s] sent {self.sent}/{self.total}  done {self.finished - self.errors}  "
                f"errors {self.errors}  inflight {self.sent - self.finished}")  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: list[RequestRecord]  # in trace order, one per request, failures included
    wall_s: float  # replay start to the last answer


def api_url(base_url: str, path: str) -> str:
    """``base_url`` (with or without a trailing /v1) + /v1/``path``."""
    base = base_url.rstrip("/")
    return (base.removesuffix("/v1")) + "/v1/" + path


async def replay(base_url: str, model: str, requests: Sequence[ReplayRequest], *, time_scale: float = 1.0,
                 concurrency_limit: int | None = None, timeout_s: float = 600.0, vocab_size: int = MOCK_VOCAB,
                 seed: int = 0, ignore_eos: bool = False, progress: Callable[[Progress], None] | None = None,
                 progress_every_s: float = 5.0) -> ReplayResult:  # fmt: skip
    """Send ``requests`` open loop (request i at ``at_s * time_scale`` s, or later while ``concurrency_limit``
    are in flight) and wait for every answer; each gets at most ``timeout_s``. ``progress`` is called every
    ``progress_every_s`` and once at the end. Never raises for a failed request: its record says why."""
    url = api_url(base_url, "completions")
    records = [RequestRecord(r.index, r.at_s * time_scale, r.input_tokens, r.output_tokens) for r in requests]
    gate = asyncio.Semaphore(concurrency_limit) if concurrency_limit else None
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        t0 = time.perf_counter()
        snapshot = functools.partial(_progress, records, t0)
        reporter = asyncio.create_task(_report(snapshot, progress, progress_every_s)) if progress else None
        try:
            async with asyncio.TaskGroup() as tg:
                for req, rec in zip(requests, records):
                    body = _body(model, req, vocab_size, seed, ignore_eos)  # built while waiting for its time
                    await asyncio.sleep(max(0.0, t0 + rec.scheduled_s - time.perf_counter()))
                    if gate:
                        await gate.acquire()
                    tg.create_task(_send(session, url, body, rec, t0, timeout_s, gate))
            wall = time.perf_counter() - t0
        finally:
            if reporter:
                reporter.cancel()
                await asyncio.wait([reporter])
    if progress:
        progress(snapshot())
    return ReplayResult(records, wall)


def _body(model: str, req: ReplayRequest, vocab_size: int, seed: int, ignore_eos: bool) -> dict[str, object]:
    body: dict[str, object] = {
        "model": model, "prompt": prompt_text(req.blocks, vocab_size, seed), "max_tokens": req.output_tokens,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    if ignore_eos:  # vLLM/SGLang extension (honoured by our frontend; a strict OpenAI server rejects it)
        body["ignore_eos"] = True
    return body


def _progress(records: Sequence[RequestRecord], t0: float) -> Progress:
    return Progress(time.perf_counter() - t0, len(records), sum(r.sent_s is not None for r in records),
                    sum(r.e2e_s is not None for r in records), sum(r.error is not None for r in records))  # fmt: skip


async def _report(snapshot: Callable[[], Progress], progress: Callable[[Progress], None], every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        progress(snapshot())


async def _send(session: aiohttp.ClientSession, url: str, body: dict[str, object], rec: RequestRecord, t0: float,
                timeout_s: float, gate: asyncio.Semaphore | None) -> None:  # fmt: skip
    """POST one streaming completion and fill ``rec``; raises nothing but cancellation."""
    start = time.perf_counter()
    rec.sent_s = start - t0
    try:
        async with session.post(url, json=body) as resp:
            rec.status = resp.status
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            else:
                await _read_stream(resp, rec, start)
    except TimeoutError:
        rec.error = f"timeout: no complete answer in {timeout_s:g}s"
    except (aiohttp.ClientError, ValueError) as e:  # ValueError: a malformed JSON chunk
        rec.error = f"{type(e).__name__}: {e}"
    finally:
        rec.e2e_s = time.perf_counter() - start
        if gate:
            gate.release()


async def _read_stream(resp: aiohttp.ClientResponse, rec: RequestRecord, start: float) -> None:
    last: float | None = None
    chunks = 0
    async for raw in resp.content:  # SSE: "data: {json}" lines, blank separators, "data: [DONE]" at the end
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            rec.error = f"stream error: {json.dumps(chunk['error'])[:300]}"
            return
        now = time.perf_counter()
        choice = (chunk.get("choices") or [{}])[0]
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            chunks += 1
            if last is None:
                rec.ttft_s = now - start
            else:
                rec.itl_s.append(now - last)
            last = now
        if usage := chunk.get("usage"):
            rec.prompt_tokens = usage.get("prompt_tokens")
            rec.completion_tokens = usage.get("completion_tokens")
            rec.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    else:
        rec.error = "stream ended without [DONE]"
    if rec.completion_tokens is None:
        rec.completion_tokens = chunks


async def first_model(base_url: str) -> str:
    """The first model an endpoint lists at /v1/models."""
    async with aiohttp.ClientSession() as session, session.get(api_url(base_url, "models")) as resp:
        resp.raise_for_status()
        return (await resp.json())["data"][0]["id"]


async def _main(a: argparse.Namespace) -> None:
    reqs = load_trace(a.trace, a.limit, a.tokens_per_hash, start=a.start, max_output=a.max_output)
    profile = RateProfile.parse(a.rate_profile)
    reqs = warp(reqs, profile, a.time_scale)
    model = a.model or await first_model(a.url)
    ceiling = prefix_hit_ceiling(reqs)
    span = reqs[-1].at_s * a.time_scale if reqs else 0.0
    print(f"replaying {len(reqs)} requests (trace lines {a.start}..) to {a.url} model {model} over {span:.0f}s, "
          f"{a.tokens_per_hash} tokens per hash id, avg prompt "
          f"{sum(r.input_tokens for r in reqs) / max(1, len(reqs)):.0f} tokens, rate profile: {profile.describe()}",
          file=sys.stderr)  # fmt: skip
    result = await replay(
        a.url, model, reqs, time_scale=a.time_scale, concurrency_limit=a.max_inflight, timeout_s=a.timeout,
        vocab_size=a.vocab_size, seed=a.seed, ignore_eos=a.ignore_eos,
        progress=(lambda p: print(p.line(), file=sys.stderr)) if a.progress_s > 0 else None,
        progress_every_s=a.progress_s or 5.0,
    )  # fmt: skip
    summary = summarize(result.records, result.wall_s, slo_ttft_ms=a.slo_ttft_ms, slo_itl_ms=a.slo_itl_ms)
    config = recorded_args(a) | {"model": model}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "benchmark": "trace_replay", "command": "python benchmarks/trace_replay.py " + " ".join(sys.argv[1:]),
        "config": config, "prefix_hit_ceiling": round(ceiling, 4), "summary": asdict(summary),
        "records": [record_json(r) for r in result.records],
    }, indent=1) + "\n")  # fmt: skip
    plot(result.records, a.out.with_suffix(".png"), ceiling)
    print_table(summary, ceiling)
    print(f"wrote {a.out} and {a.out.with_suffix('.png')}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="base URL of the OpenAI-compatible server (with or without /v1); default: "
                                 "bring up deploy/examples/mock-fleet.yaml (2 prefill + 2 decode mock workers), "
                                 "replay against it and stop it")
    p.add_argument("--model", default=None, help="model name (default: the first at /v1/models)")
    add_trace_option(p)
    p.add_argument("--start", type=int, default=0, help="skip the first N trace lines")
    p.add_argument("--limit", type=int, default=1000, help="replay at most N requests (0: the whole trace)")
    p.add_argument("--time-scale", type=float, default=0.1, help="send time = trace timestamp * this (0.1: 10x faster)")
    p.add_argument("--rate-profile", default="flat", help="warp send times: flat, sine:period=60,amplitude=0.6, "
                   "step:at=60,low=0.4,high=1.6, burst:period=60,duty=0.25,high=2.2 (seconds of send time; "
                   "benchmarks/rate_profile.py)")
    p.add_argument("--spec", type=Path, default=REPO / "deploy" / "examples" / "mock-fleet.yaml",
                   help="without --url: the cluster.yaml to bring up")
    p.add_argument("--max-inflight", type=int, default=None, help="bound on requests in flight (default: none)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it counts as an error")
    p.add_argument("--tokens-per-hash", type=int, default=64,
                   help=f"tokens per 512-token hash id (scales prompts; {HASH_TOKENS}: the trace's own lengths)")
    p.add_argument("--vocab-size", type=int, default=MOCK_VOCAB, help="prompt token ids are drawn from [0, this)")
    p.add_argument("--seed", type=int, default=0, help="another seed, other prompt tokens (a cold cache for a rerun)")
    p.add_argument("--max-output", type=int, default=32, help="cap on output tokens per request (0: none)")
    p.add_argument("--ignore-eos", action="store_true", 
                   help="send ignore_eos (vLLM/SGLang; a strict server rejects it)")
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--slo-itl-ms", type=float, default=100.0, help="SLO on a request's mean ITL")
    p.add_argument("--progress-s", type=float, default=5.0, help="seconds between progress lines (0: none)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "trace_replay.json")
    a = p.parse_args()
    a.limit, a.max_output = a.limit or None, a.max_output or None
    if a.url is not None:
        asyncio.run(_main(a))
        return
    import tempfile

    from benchmarks.cluster import orchestrator_up

    spec = a.spec
    print(f"no --url: bringing up {spec.name} ...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, orchestrator_up(spec, Path(tmp) / "up.log") as url:
        a.url = url
        asyncio.run(_main(a))


if __name__ == "__main__":
    main()
