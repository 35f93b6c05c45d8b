"""Synthetic workloads with real prefix structure, in the Mooncake trace format (benchmarks/data/README.md).

Each line: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one id per 512-token
block; equal ids, equal tokens; a prompt's last id may cover a partial block). As in Mooncake's traces, an
id names the content of one whole block: a partial last block is not shared, and when a later prompt fills
it the block gets a new id. Every generator is a pure function of its parameters and seed.

- ``chat``: multi-turn sessions. Sessions start as a Poisson process; turn 1 is the shared system prompt
  plus a user message; turn k is turn k-1's whole prompt + its answer + a new user message, sent a think
  time (exponential) after turn k-1, so its hash ids extend turn k-1's full blocks.
- ``tenants``: llm-d's prefix benchmark shape: many tenants, each with a long system prompt of its own;
  every request is its tenant's prompt + a unique question; tenants drawn Zipf-skewed, Poisson arrivals.

    .venv/bin/python benchmarks/trace_gen.py        # chat, 2,000 requests: benchmarks/results/chat_trace.jsonl
    .venv/bin/python benchmarks/trace_gen.py tenants --requests 2000 --tenants 150 --prefix-tokens 6000

Any benchmark that replays a trace takes the file written (trace_replay.py, arena.py, router_replay.py ...);
arena.py ``--workload chat|tenants`` generates it in process. From code: ``lines = chat(ChatParams(requests=500), seed=1)``; ``write_trace(lines, path)``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

BLOCK = 512  # tokens per hash id


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One request, as a Mooncake trace line."""

    timestamp: int  # ms since the start
    input_length: int  # prompt tokens
    output_length: int  # tokens generated
    hash_ids: tuple[int, ...]  # ceil(input_length / 512) ids


@dataclass(frozen=True, slots=True)
class ChatParams:
    requests: int = 2000  # turns in the trace (the earliest, over every session)
    session_rate: float = 0.6  # sessions started per second (Poisson)
    system_tokens: int = 1000  # the system prompt every session starts with
    user_tokens: tuple[int, int] = (50, 400)  # a user message's length, uniform
    answer_tokens: tuple[int, int] = (100, 500)  # an answer's length, uniform
    turns: tuple[int, int] = (2, 10)  # turns per session, uniform
    think_s: float = 20.0  # mean pause between turns (exponential)


@dataclass(frozen=True, slots=True)
class TenantParams:
    requests: int = 2000
    rate: float = 4.0  # requests per second (Poisson)
    tenants: int = 150
    prefix_tokens: int = 6000  # each tenant's system prompt
    question_tokens: tuple[int, int] = (600, 1800)  # uniform
    output_tokens: tuple[int, int] = (500, 1500)  # uniform
    zipf_s: float = 1.0  # tenant k (from 1) is drawn with weight k^-s


class _Ids:
    """Fresh hash ids, in order of first use."""

    def __init__(self) -> None:
        self._next = itertools.count()

    def take(self, n: int) -> list[int]:
        return [next(self._next) for _ in range(n)]


def blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def extend(ids: Sequence[int], old_tokens: int, new_tokens: int, fresh: _Ids) -> tuple[int, ...]:
    """The ids of a prompt of ``new_tokens`` whose first ``old_tokens`` are the prompt ``ids`` names: its
    full blocks are kept; the partial last one and everything after get new ids."""
    keep = old_tokens // BLOCK
    return (*ids[:keep], *fresh.take(blocks(new_tokens) - keep))


def chat(p: ChatParams, seed: int = 0) -> list[TraceLine]:
    """The first ``p.requests`` turns, by time, of Poisson-arriving chat sessions."""
    rng = random.Random(seed)
    fresh = _Ids()
    system = fresh.take(p.system_tokens // BLOCK)  # its full blocks: shared by every session
    lines: list[TraceLine] = []
    start = 0.0
    while True:
        start += rng.expovariate(p.session_rate)
        if len(lines) >= p.requests and start * 1000 > lines[p.requests - 1].timestamp:
            break  # every later turn comes after the ones kept: lines is sorted below, then cut
        lines.extend(_session(p, rng, fresh, system, start))
        lines.sort(key=lambda line: line.timestamp)
    return lines[: p.requests]


def _session(p: ChatParams, rng: random.Random, fresh: _Ids, system: list[int], start_s: float) -> Iterator[TraceLine]:
    at = start_s
    prompt, context = p.system_tokens, p.system_tokens  # tokens named by ids; tokens the next turn extends
    ids: tuple[int, ...] = tuple(system)
    for turn in range(rng.randint(*p.turns)):
        if turn:
            at += rng.expovariate(1 / p.think_s)
        new = context + rng.randint(*p.user_tokens)
        ids = extend(ids, prompt, new, fresh)
        answer = rng.randint(*p.answer_tokens)
        yield TraceLine(round(at * 1000), new, answer, ids)
        prompt, context = new, new + answer  # the next prompt holds this one and its answer


def tenants(p: TenantParams, seed: int = 0) -> list[TraceLine]:
    """``p.requests`` Poisson arrivals, each its (Zipf-drawn) tenant's system prompt + a unique question."""
    rng = random.Random(seed)
    fresh = _Ids()
    prefixes = [fresh.take(p.prefix_tokens // BLOCK) for _ in range(p.tenants)]
    weights = list(itertools.accumulate(k ** -p.zipf_s for k in range(1, p.tenants + 1)))
    lines = []
    at = 0.0
    for i in range(p.requests):
        if i:
            at += rng.expovariate(p.rate)
        tenant = rng.choices(range(p.tenants), cum_weights=weights)[0]
        length = p.prefix_tokens + rng.randint(*p.question_tokens)
        ids = extend(prefixes[tenant], p.prefix_tokens, length, fresh)
        lines.append(TraceLine(round(at * 1000), length, rng.randint(*p.output_tokens), ids))
    return lines


WORKLOADS = {"chat": (chat, ChatParams), "tenants": (tenants, TenantParams)}


def generate(workload: str, requests: int, seed: int = 0, **overrides: object) -> tuple[list[TraceLine], object]:
    """(lines, the parameters used) of a named workload."""
    make, params_type = WORKLOADS[workload]
    params = params_type(requests=requests, **overrides)  # type: ignore[arg-type]
    return make(params, seed), params  # type: ignore[operator]


def write_trace(lines: Sequence[TraceLine], path: Path) -> None:
    with path.open("w") as f:
        for line in lines:
            f.write(json.dumps({**asdict(line), "hash_ids": list(line.hash_ids)}) + "\n")


def params_json(params: object) -> dict[str, object]:
    return {f.name: getattr(params, f.name) for f in fields(params)}  # type: ignore[arg-type]


def _fields(params_type: type) -> str:
    return ", ".join(f.name for f in fields(params_type) if f.name != "requests")


def _settings(params_type: type, items: Sequence[str]) -> dict[str, object]:
    """``FIELD=VALUE`` strings as keyword arguments of ``params_type``, each typed as its default."""
    defaults = params_type()
    out: dict[str, object] = {}
    for item in items:
        name, _, text = item.partition("=")
        if name == "requests" or name not in {f.name for f in fields(params_type)}:
            raise ValueError(f"{name!r} is not one of {_fields(params_type)}")
        default = getattr(defaults, name)
        try:
            if isinstance(default, tuple):
                lo, hi = (type(default[0])(v) for v in text.split(","))
                out[name] = (lo, hi)
            else:
                out[name] = type(default)(text)
        except ValueError:
            kind = type(default).__name__
            if isinstance(default, tuple):
                kind = f"two {type(default[0]).__name__}s as LO,HI"
            raise ValueError(f"{name}={text!r}: expected {kind}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", nargs="?", choices=sorted(WORKLOADS), default="chat")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tenants", type=int, default=None, help="tenants: how many (default 150)")
    ap.add_argument("--prefix-tokens", type=int, default=None, help="tenants: system prompt length (default 6000)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any other parameter of the workload, repeatable: chat: " + _fields(ChatParams) +
                         "; tenants: " + _fields(TenantParams) + " (a range as LO,HI)")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/<workload>_trace.jsonl")
    a = ap.parse_args(argv)
    overrides = {k: v for k, v in (("tenants", a.tenants), ("prefix_tokens", a.prefix_tokens)) if v is not None}
    if overrides and a.workload != "tenants":
        ap.error("--tenants and --prefix-tokens are options of the tenants workload")
    try:
        overrides.update(_settings(WORKLOADS[a.workload][1], a.set))
    except ValueError as e:
        ap.error(f"--set: {e}")
    lines, params = generate(a.workload, a.requests, a.seed, **overrides)
    out = a.out or Path(__file__).resolve().parent / "results" / f"{a.workload}_trace.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(lines, out)
    span = lines[-1].timestamp / 1000 if lines else 0.0
    print(f"wrote {len(lines)} {a.workload} requests over {span:.0f} s ({len(lines) / max(span, 1e-9):.2f} req/s), "
          f"mean prompt {sum(x.input_length for x in lines) / max(1, len(lines)):.0f} tokens, "
          f"{params_json(params)} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
