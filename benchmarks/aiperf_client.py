"""Replay the arena's requests with aiperf, NVIDIA's benchmark client, instead of this repository's own.

aiperf is given the requests as a Mooncake-format file (`--custom-dataset-type mooncake_trace`): each
line's timestamp (already rate-compressed, warped and time-scaled: the wall time to send it), input and
output length and hash ids. It makes its own prompts (for each hash id one block of ``block_tokens``
tokens of text from its corpus, by the served model's tokenizer), sends them on its own fixed schedule,
times them on its own clock and reports each request in ``profile_export.jsonl``. Those records become the
arena's `RequestRecord`s, so the same summary and table apply. Prompts are English text through a BPE
tokenizer, not the `t<N>` words of the arena's own client: so the engines must serve a model with a real
tokenizer (the arena's ``--client aiperf`` takes ``builtin:tiny``).

aiperf pins versions that clash with vLLM's, so it lives in a venv of its own, `.venv-aiperf`
(deploy/test.sh makes it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.paths import REPO
from benchmarks.replay_stats import RequestRecord
from benchmarks.trace_replay import ReplayRequest

AIPERF = REPO / ".venv-aiperf" / "bin" / "aiperf"


def write_trace(requests: Sequence[ReplayRequest], time_scale: float, path: Path) -> None:
    """The requests as aiperf reads a Mooncake trace: timestamps in wall milliseconds from the first."""
    with path.open("w") as f:
        for r in requests:
            f.write(json.dumps({"timestamp": round(r.at_s * time_scale * 1000, 3), "input_length": r.input_tokens,
                                "output_length": r.output_tokens, "hash_ids": [h for h, _ in r.blocks]}) + "\n")


def hf_cache(tokenizer: Path, home: Path) -> str:
    """``tokenizer``'s files as a Hugging Face cache entry under ``home`` (HF_HOME); its repo id.

    aiperf 0.13 decodes a trace's prompts in worker processes that force offline mode and then look the
    tokenizer up in the Hugging Face cache by name, so a local directory fails there (from 10 prompts up:
    `Repo id must be in the form 'repo_name'`). A cache entry is found by name."""
    rev = "0" * 40
    entry = home / "hub" / f"models--dynamo_lite--{tokenizer.name}"
    snapshot = entry / "snapshots" / rev
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in tokenizer.iterdir():
        if f.is_file() and (f.name.startswith(("tokenizer", "special_tokens")) or f.suffix == ".jinja"
                            or f.name == "config.json"):  # fmt: skip
            (snapshot / f.name).write_bytes(f.read_bytes())
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(rev)
    return f"dynamo_lite/{tokenizer.name}"


def command(url: str, model: str, tokenizer: str, trace: Path, block_tokens: int, out_dir: Path,
            timeout_s: float, seed: int = 0) -> list[str]:  # fmt: skip
    """aiperf's command line: streamed completions, greedy, on the trace's own schedule."""
    return [str(AIPERF), "profile", "--model", model, "--url", url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", tokenizer, "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace",
            "--fixed-schedule", "--fixed-schedule-auto-offset", "--isl-block-size", str(block_tokens),
            "--extra-inputs", "temperature:0", "--request-timeout-seconds", str(timeout_s),
            "--random-seed", str(seed), "--output-artifact-dir", str(out_dir), "--ui-type", "none"]  # fmt: skip


def run(url: str, model: str, tokenizer: Path, requests: Sequence[ReplayRequest], *, time_scale: float,
        block_tokens: int, work: Path, timeout_s: float) -> tuple[list[RequestRecord], float]:  # fmt: skip
    """Replay ``requests`` through aiperf; its per-request records, their times in seconds from this call (so
    they include aiperf's start-up, and line up with what was sampled from the same moment), and the wall time
    from the first send to the last answer. Raises RuntimeError with aiperf's last lines if it fails."""
    called_ns = time.time_ns()  # aiperf's records carry wall-clock (epoch) instants
    work.mkdir(parents=True, exist_ok=True)
    trace, out_dir = work / "aiperf_trace.jsonl", work / "aiperf"
    write_trace(requests, time_scale, trace)
    deadline = time_scale * requests[-1].at_s + timeout_s + 300  # aiperf's own start-up: tokenizer, corpus, workers
    home = work / "hf"
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    with open(work / "aiperf.log", "wb") as log:
        proc = subprocess.Popen(command(url, model, hf_cache(tokenizer, home), trace, block_tokens, out_dir, timeout_s),
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip
        try:
            proc.wait(deadline)
        finally:  # aiperf runs services in processes of its own: whatever is left of its group goes with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        tail = (work / "aiperf.log").read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"aiperf exited with {proc.returncode}:\n" + "\n".join(tail))
    lines = (out_dir / "profile_export.jsonl").read_text().splitlines()
    out, wall = records([json.loads(line) for line in lines if line.strip()], called_ns)
    return matched(out, requests, time_scale), wall


def matched(recs: list[RequestRecord], requests: Sequence[ReplayRequest], time_scale: float) -> list[RequestRecord]:
    """The records given their trace lines back (index, schedule, max_tokens) where the send order is the trace's
    order, as aiperf's fixed schedule sends; unchanged if the prompt lengths say otherwise. The schedule starts
    at the first send."""
    if not recs or [r.input_tokens for r in recs] != [q.input_tokens for q in requests]:
        return recs
    first = recs[0].scheduled_s
    for r, q in zip(recs, requests, strict=True):
        r.index, r.scheduled_s, r.max_tokens = q.index, first + q.at_s * time_scale, q.output_tokens
    return recs


def records(exported: Sequence[dict], t0_ns: int | None = None) -> tuple[list[RequestRecord], float]:
    """aiperf's per-request export as `RequestRecord`s in send order, times in seconds from ``t0_ns`` (epoch
    ns; by default the first send). aiperf gives no trace line: ``index`` is the send order and ``max_tokens``
    0, until `matched`. Also the wall time from the first send to the last answer."""
    rows = sorted(exported, key=lambda r: r["metadata"]["request_start_ns"])
    if not rows:
        return [], 0.0
    first = rows[0]["metadata"]["request_start_ns"]
    t0 = first if t0_ns is None else t0_ns
    out = []
    for i, row in enumerate(rows):
        meta, metrics = row["metadata"], row.get("metrics", {})
        start_s = (meta["request_start_ns"] - t0) / 1e9
        isl = _value(metrics, "input_sequence_length") or _value(metrics, "error_isl") or 0  # error_isl: a failure's
        rec = RequestRecord(i, start_s, int(isl), 0, sent_s=start_s)
        latency = _value(metrics, "request_latency")  # to the last content, on TTFT's clock and scale: TTFT <= it
        rec.e2e_s = latency / 1000 if latency is not None else (meta["request_end_ns"] - meta["request_start_ns"]) / 1e9
        if row.get("error"):
            rec.status = row["error"].get("code")
            rec.error = f"{row['error'].get('type') or 'error'}: {str(row['error'].get('message'))[:300]}"
        else:
            ttft = _value(metrics, "time_to_first_token")
            rec.ttft_s = None if ttft is None else ttft / 1000
            rec.itl_s = [g / 1000 for g in _value(metrics, "inter_chunk_latency") or []]
            rec.status = 200
        prompt, cached, completion = (_value(metrics, name) for name in (
            "usage_prompt_tokens", "usage_prompt_cache_read_tokens", "usage_completion_tokens"))  # fmt: skip
        rec.prompt_tokens = None if prompt is None else int(prompt)
        rec.cached_tokens = None if cached is None else int(cached)
        rec.completion_tokens = None if completion is None else int(completion)
        out.append(rec)
    wall = max(r["metadata"]["request_end_ns"] for r in rows) - first
    return out, wall / 1e9


def _value(metrics: dict, name: str) -> Any:
    """A metric's value in aiperf's export (``{"value": ..., "unit": ...}``), None if absent."""
    return metrics[name]["value"] if name in metrics else None
