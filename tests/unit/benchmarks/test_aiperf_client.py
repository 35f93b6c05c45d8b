"""aiperf's per-request export read as the arena's records (benchmarks/aiperf_client.py)."""

from __future__ import annotations

from typing import Any

from benchmarks import aiperf_client
from benchmarks.trace_replay import ReplayRequest

S = 1_796_552_437_796_662_132  # an epoch instant in ns, as aiperf's metadata has them


def row(start_ns: int, end_ns: int, metrics: dict[str, float], error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"request_start_ns": start_ns, "request_end_ns": end_ns}, "error": error,
            "metrics": {name: {"value": v, "unit": "x"} for name, v in metrics.items()}}  # fmt: skip


def test_a_stream_read_at_once_has_its_first_token_no_later_than_its_end() -> None:
    """When a client is late to read, the whole stream arrives in one read: aiperf's TTFT and latency are then
    the same nanoseconds (49,036,351 here), which in seconds by two routes (ms / 1e3 against ns / 1e9) come out
    one float apart, the TTFT above the end. Both come from aiperf's own milliseconds."""
    ns = 49_036_351
    assert ns / 1e6 / 1e3 > ns / 1e9  # the trap
    ms = ns / 1e6
    exported = [row(S + 10**9, S + 10**9 + 5 * 10**6, {"input_sequence_length": 20, "error_isl": 20}, {"code": 400,
                    "type": "Bad Request", "message": "2048 tokens at most"}),  # fmt: skip
                row(S, S + ns, {"input_sequence_length": 168, "time_to_first_token": ms, "request_latency": ms,
                                          "usage_prompt_tokens": 168, "usage_prompt_cache_read_tokens": 128,
                                          "usage_completion_tokens": 8})]  # fmt: skip
    recs, wall_s = aiperf_client.records(exported, S - 2 * 10**9)
    ok, bad = recs
    assert (ok.index, ok.scheduled_s, ok.input_tokens, ok.status, ok.error) == (0, 2.0, 168, 200, None)
    assert ok.ttft_s is not None and ok.ttft_s <= ok.e2e_s and abs(ok.e2e_s - 0.049036351) < 1e-12
    assert (ok.prompt_tokens, ok.cached_tokens, ok.completion_tokens) == (168, 128, 8)
    assert (bad.index, bad.scheduled_s, bad.input_tokens, bad.status, bad.ttft_s) == (1, 3.0, 20, 400, None)
    assert bad.error == "Bad Request: 2048 tokens at most" and abs(bad.e2e_s - 0.005) < 1e-12
    assert abs(wall_s - 1.005) < 1e-9  # from the first send to the last end


def test_records_take_their_trace_lines_back_when_the_lengths_agree() -> None:
    exported = [row(S + k * 10**8, S + k * 10**8 + 10**7, {"input_sequence_length": n}) for k, n in enumerate((30, 40))]
    requests = [ReplayRequest(7, 0.0, ((1, 30),), 5), ReplayRequest(8, 0.5, ((2, 40),), 6)]
    recs = aiperf_client.matched(aiperf_client.records(exported, S)[0], requests, time_scale=2.0)
    assert [(r.index, r.scheduled_s, r.max_tokens) for r in recs] == [(7, 0.0, 5), (8, 1.0, 6)]
    other = [ReplayRequest(7, 0.0, ((1, 31),), 5), ReplayRequest(8, 0.5, ((2, 40),), 6)]
    recs = aiperf_client.matched(aiperf_client.records(exported, S)[0], other, time_scale=2.0)
    assert [(r.index, r.max_tokens) for r in recs] == [(0, 0), (1, 0)]  # unmatched: left in send order
