"""The frontend's tokenizer call, against the plain Rust `encode` it replaced: time per prompt and how long
the event loop stops while a long prompt is tokenized in a thread.

The frontend tokenizes every request once (`dynamo_lite/frontend/tokenizer.py`). It calls the Rust
tokenizer's `encode_batch_fast` on a one-text batch, where it used to call `encode`: the same ids (checked
here on every prompt), without the character offsets, and with the GIL released. Prompts of at least
`LONG_INPUT_CHARS` go to a thread (`handlers._off_loop_if_long`) so that the loop keeps serving: that only
works if the call lets go of the GIL.

Measured, for each call and prompt length (words drawn from this repository's docs, seeded):
- microseconds per prompt, back to back ("hot"), and after 4 ms idle before each ("after idle": a frontend
  at low load meets its tokenizer with cold caches);
- the longest gap between the wake-ups of a task that sleeps 1 ms at a time (so at least 1 ms) while
  `_off_loop_if_long` tokenizes one prompt of that length: on the loop below `LONG_INPUT_CHARS`, in a thread
  above it.

    .venv/bin/python benchmarks/tokenize_bench.py                      # SmolLM2's tokenizer, ~1 min
    .venv/bin/python benchmarks/tokenize_bench.py --model builtin:mock-words

Writes benchmarks/results/tokenize.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.paths import REPO  # noqa: E402
from dynamo_lite.frontend.handlers import LONG_INPUT_CHARS, _off_loop_if_long  # noqa: E402
from dynamo_lite.frontend.tokenizer import load_tokenizer  # noqa: E402

Encode = Callable[[str], list[int]]
FRONTEND = "encode_batch_fast (the frontend's)"


def prompts(words: int, n: int, seed: int) -> list[str]:
    corpus = " ".join(p.read_text() for p in sorted((REPO / "docs").rglob("*.md"))).split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(corpus) for _ in range(words)) for _ in range(n)]


def per_prompt_us(calls: dict[str, Encode], texts: list[str], idle_s: float) -> dict[str, float]:
    """Mean microseconds per prompt of each call, the calls taking turns on every prompt (first in turn too),
    so that a shared machine's drift hits them alike."""
    total = dict.fromkeys(calls, 0.0)
    for i, text in enumerate(texts):
        names = list(calls) if i % 2 == 0 else list(reversed(calls))
        for name in names:
            if idle_s:
                time.sleep(idle_s)
            start = time.perf_counter()
            calls[name](text)
            total[name] += time.perf_counter() - start
    return {name: round(t / len(texts) * 1e6, 1) for name, t in total.items()}


async def loop_stall_ms(encode: Encode, text: str) -> float:
    """Longest gap between a 1 ms ticker's wake-ups while `text` is tokenized off the loop."""
    done, worst = asyncio.Event(), 0.0

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst, last = max(worst, now - last), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await _off_loop_if_long(len(text), encode, text)
    done.set()
    await task
    return round(worst * 1000, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin:smollm2", help="a models[].path: builtin:* or a directory")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".local/state/dynamo_lite/models")
    ap.add_argument("--words", default="64,600,2000,60000", help="prompt lengths in words, comma-separated")
    ap.add_argument("--prompts", type=int, default=200, help="prompts per length (fewer for long ones)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "tokenize.json")
    a = ap.parse_args()
    tok = load_tokenizer(a.model, a.cache_dir)
    rust = tok._tok._tokenizer
    calls: dict[str, Encode] = {"encode (before)": lambda t: rust.encode(t, add_special_tokens=True).ids,
                                FRONTEND: lambda t: tok.encode_prompt(t, True)}
    rows = []
    for words in (int(w) for w in a.words.split(",")):
        texts = prompts(words, max(4, a.prompts * 64 // max(64, words)), seed=words)
        assert all(calls["encode (before)"](t) == calls[FRONTEND](t) for t in texts), "the calls disagree on ids"
        hot, idle = per_prompt_us(calls, texts, 0.0), per_prompt_us(calls, texts, 0.004)
        for name, encode in calls.items():
            row = {"call": name, "words": words, "chars": len(texts[0]), "tokens": len(encode(texts[0])),
                   "hot_us": hot[name], "after_idle_us": idle[name],
                   "loop_stall_ms": asyncio.run(loop_stall_ms(encode, texts[0]))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{a.model}; prompts of {LONG_INPUT_CHARS} characters or more are tokenized in a thread")
    print("| call | words | characters | tokens | us/prompt hot | us/prompt after 4 ms idle | longest loop gap |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['call']} | {r['words']} | {r['chars']} | {r['tokens']} | {r['hot_us']:.0f} "
              f"| {r['after_idle_us']:.0f} | {r['loop_stall_ms']} ms |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"benchmark": "tokenize_bench", "command": "python benchmarks/tokenize_bench.py "
                                 + " ".join(sys.argv[1:]), "model": a.model, "rows": rows}, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
