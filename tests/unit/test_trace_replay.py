"""benchmarks/trace_replay.py, its pure parts: prompt construction from trace hash ids, the summary
(benchmarks/replay_stats.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from dynamo_lite.engines.mock.args import MockEngineArgs
from dynamo_lite.engines.mock.tokenizer import WordTokenizer
from dynamo_lite.frontend.schemas import CompletionRequest, parse_body

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_replay.py"
_spec = importlib.util.spec_from_file_location("trace_replay", _PATH)
assert _spec and _spec.loader
tr = importlib.util.module_from_spec(_spec)
sys.modules["trace_replay"] = tr  # dataclasses resolve their module through sys.modules
_spec.loader.exec_module(tr)
from benchmarks import replay_stats  # noqa: E402 - trace_replay put the repository on sys.path


def _trace(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _ids(text: str) -> list[int]:
    return WordTokenizer(tr.MOCK_VOCAB).encode(text)


def test_vocab_default_is_the_mocks() -> None:
    assert tr.MOCK_VOCAB == MockEngineArgs.__dataclass_fields__["vocab_size"].default


@pytest.mark.parametrize("tph", [512, 64, 32, 7])
def test_equal_hash_ids_give_equal_token_prefixes_and_scaled_lengths(tmp_path: Path, tph: int) -> None:
    trace = _trace(tmp_path, [
        {"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 10, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 9]},
        {"timestamp": 20, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 30, "input_length": 700, "output_length": 5, "hash_ids": [4, 2]},
    ])  # fmt: skip
    reqs = tr.load_trace(trace, tokens_per_hash=tph)
    a, b, c, d = (_ids(tr.prompt_text(r.blocks)) for r in reqs)
    for r, ids, n in zip(reqs, (a, b, c, d), (1300, 1100, 1536, 700)):
        assert len(ids) == r.input_tokens == round(n * tph / 512)
    assert a[: 2 * tph] == b[: 2 * tph] and a[2 * tph] != b[2 * tph]  # ids 1, 2 shared, then 3 vs 9
    assert c[: len(a)] == a  # same ids, longer: the truncated last block is a prefix of the full one
    assert d[0] != a[0]  # another first id: no common prefix (engines chain block hashes from the start)
    assert d[tph:] == a[tph : len(d)] == tr.block_tokens(2, len(d) - tph)  # a block's tokens depend on its id only


def test_a_shorter_expansion_is_a_prefix_of_the_full_one() -> None:
    full = tr.block_tokens(42, 512)
    assert tr.block_tokens(42, 64) == full[:64]
    assert all(0 <= t < tr.MOCK_VOCAB for t in full)
    assert tr.block_tokens(42, 64, seed=1) != full[:64]
    assert max(tr.block_tokens(7, 512, vocab_size=100)) < 100


def test_load_trace_start_limit_rebase_and_output_cap(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [{"timestamp": 1000 * i, "input_length": 10, "output_length": 50 * i, "hash_ids": [i]}
                              for i in range(5)])  # fmt: skip
    reqs = tr.load_trace(trace, limit=2, tokens_per_hash=512, start=2, max_output=120)
    assert [(r.index, r.at_s, r.output_tokens, r.input_tokens) for r in reqs] == [(2, 0.0, 100, 10), (3, 1.0, 120, 10)]
    assert tr.load_trace(trace, tokens_per_hash=1)[0].input_tokens == 1  # rounds to 0: one token still


def test_ceiling_counts_leading_blocks_seen_before() -> None:
    reqs = [tr.ReplayRequest(0, 0.0, ((1, 4), (2, 4)), 1), tr.ReplayRequest(1, 0.0, ((1, 4), (3, 4)), 1),
            tr.ReplayRequest(2, 0.0, ((1, 4), (2, 2)), 1), tr.ReplayRequest(3, 0.0, ((5, 4), (2, 4)), 1)]  # fmt: skip
    assert tr.prefix_hit_ceiling(reqs) == pytest.approx((0 + 4 + 6 + 0) / 30)


def test_request_body_passes_the_frontends_schema() -> None:
    req = tr.ReplayRequest(0, 0.0, ((1, 8),), 3)
    body = tr._body("bench", req, tr.MOCK_VOCAB, 0, ignore_eos=False)
    parsed = parse_body(json.dumps(body).encode(), CompletionRequest)
    assert parsed.stream and parsed.include_usage and parsed.max_tokens == 3
    fixed = parse_body(json.dumps(tr._body("bench", req, tr.MOCK_VOCAB, 0, ignore_eos=True)).encode(), CompletionRequest)
    assert fixed.ignore_eos is True  # honoured now (vLLM's field policy), as benchmark clients need


def _rec(i: int, ttft: float | None, e2e: float | None, tokens: int = 11, cached: int | None = None,
         error: str | None = None) -> tr.RequestRecord:  # fmt: skip
    return tr.RequestRecord(i, 0.0, 100, tokens, sent_s=float(i), ttft_s=ttft, itl_s=[0.01] * (tokens - 1),
                            e2e_s=e2e, prompt_tokens=100, completion_tokens=tokens, cached_tokens=cached,
                            error=error)  # fmt: skip


def test_summary_percentiles_goodput_and_hits() -> None:
    records = [_rec(i, ttft=(i + 1) / 100, e2e=(i + 1) / 100 + 0.1, cached=50 if i < 2 else None) for i in range(100)]
    records[99].e2e_s = 1.0 + 1.0  # mean ITL 100 ms: still within a 100 ms SLO
    records[98].e2e_s = 0.99 + 2.0  # mean ITL 200 ms
    records.append(_rec(100, ttft=None, e2e=600.0, error="timeout: no complete answer in 600s"))
    s = tr.summarize(records, 10.0, slo_ttft_ms=500, slo_itl_ms=100)
    assert (s.sent, s.completed, s.errors, s.errors_by_kind) == (101, 100, 1, {"timeout": 1})
    assert s.ttft_ms == replay_stats.Percentiles(p50=505.0, p90=901.0, p99=990.1)
    assert s.itl_ms == replay_stats.Percentiles(10.0, 10.0, 10.0)
    assert s.prefix_hit_ratio == 0.5  # only the two requests that reported cached tokens count
    assert s.good == 50 and s.goodput_rps == 5.0  # TTFT <= 500 ms: requests 0..49
    assert s.requests_per_s == 10.0 and s.output_tokens_per_s == 110.0
    assert tr.summarize(records, 10.0, slo_ttft_ms=1e9, slo_itl_ms=100).good == 99  # 98's mean ITL is 200 ms


def test_summary_of_nothing_completed() -> None:
    s = tr.summarize([_rec(0, None, 1.0, error="HTTP 400: too long")], 1.0, slo_ttft_ms=1, slo_itl_ms=1)
    assert s.ttft_ms is None and s.prefix_hit_ratio is None and s.good == 0 and s.errors_by_kind == {"HTTP 400": 1}


def test_percentile_interpolates() -> None:
    assert replay_stats.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert replay_stats.percentile([7.0], 99) == 7.0


def test_api_url_takes_a_base_with_or_without_v1() -> None:
    assert tr.api_url("http://h:1/v1/", "completions") == tr.api_url("http://h:1", "completions")
    assert tr.api_url("http://h:1", "models") == "http://h:1/v1/models"
