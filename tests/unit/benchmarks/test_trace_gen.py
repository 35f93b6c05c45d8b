"""benchmarks/trace_gen.py: generated workloads have the structure they claim, in the Mooncake format."""

from __future__ import annotations

import itertools
import math
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks import trace_replay  # noqa: E402
from benchmarks.trace_gen import BLOCK, ChatParams, TenantParams, TraceLine, chat, tenants, write_trace  # noqa: E402


def sessions(lines: list[TraceLine]) -> dict[int, list[TraceLine]]:
    """Turns by session: with a 1000-token system prompt (one full block, id 0), a session's first own id is
    its second, kept by every later turn (a first turn has >= 1050 tokens)."""
    out: dict[int, list[TraceLine]] = defaultdict(list)
    for line in lines:
        out[line.hash_ids[1]].append(line)
    return out


def test_a_chat_turn_extends_the_last_turn_exactly() -> None:
    p = ChatParams(requests=600)
    lines = chat(p, seed=3)
    first_use: dict[int, int] = {}
    for n, line in enumerate(lines):
        for h in line.hash_ids:
            first_use.setdefault(h, n)
    index = {id(line): n for n, line in enumerate(lines)}
    by_session = sessions(lines)
    assert len(by_session) > 50
    extended = 0
    for turns in by_session.values():
        assert turns[0].hash_ids[0] == 0 and p.system_tokens < turns[0].input_length <= p.system_tokens + 400
        for prev, turn in itertools.pairwise(turns):
            keep = prev.input_length // BLOCK  # its full blocks; its partial last block gets a new id
            assert turn.hash_ids[:keep] == prev.hash_ids[:keep]
            user = turn.input_length - prev.input_length - prev.output_length
            assert p.user_tokens[0] <= user <= p.user_tokens[1]
            assert 100 <= prev.output_length <= 500
            new = turn.hash_ids[keep:]
            assert all(first_use[h] == index[id(turn)] for h in new), "the partial block and what follows get fresh ids"
            extended += 1
        assert len(turns) <= p.turns[1]
    assert extended > len(lines) / 2
    for line in lines:
        assert len(line.hash_ids) == math.ceil(line.input_length / BLOCK)
    assert [x.timestamp for x in lines] == sorted(x.timestamp for x in lines)
    assert len(lines) == 600


def test_tenant_requests_share_exactly_their_tenants_prefix() -> None:
    p = TenantParams(requests=3000, tenants=20, prefix_tokens=3000)
    lines = tenants(p, seed=1)
    keep = p.prefix_tokens // BLOCK  # 5 full blocks; the sixth holds the prefix's end and the question
    by_tenant: dict[tuple[int, ...], list[TraceLine]] = defaultdict(list)
    for line in lines:
        by_tenant[line.hash_ids[:keep]].append(line)
        assert len(line.hash_ids) == math.ceil(line.input_length / BLOCK)
    assert len(by_tenant) == 20
    prefix_ids = [h for prefix in by_tenant for h in prefix]
    assert len(prefix_ids) == len(set(prefix_ids)) == 20 * keep  # tenants share nothing
    tails = [h for line in lines for h in line.hash_ids[keep:]]
    assert len(tails) == len(set(tails))  # every question is unique
    assert not set(tails) & set(prefix_ids)
    # Zipf, s = 1: the most popular tenant gets 1 / H(20) of the requests, about 28%
    top = max(len(v) for v in by_tenant.values()) / len(lines)
    assert abs(top - 1 / sum(1 / k for k in range(1, 21))) < 0.03


def test_arrival_rates() -> None:
    lines = tenants(TenantParams(requests=4000, rate=5.0), seed=2)
    assert abs((len(lines) - 1) / (lines[-1].timestamp / 1000) - 5.0) < 0.25
    starts = sorted(turns[0].timestamp for turns in sessions(chat(ChatParams(requests=6000, session_rate=2.0),
                                                                   seed=2)).values())  # fmt: skip
    rate = (len(starts) - 1) / ((starts[-1] - starts[0]) / 1000)
    assert abs(rate - 2.0) < 0.2


def test_deterministic_from_the_seed() -> None:
    assert chat(ChatParams(requests=200), seed=5) == chat(ChatParams(requests=200), seed=5)
    assert chat(ChatParams(requests=200), seed=5) != chat(ChatParams(requests=200), seed=6)
    assert tenants(TenantParams(requests=200), seed=5) == tenants(TenantParams(requests=200), seed=5)
    assert tenants(TenantParams(requests=200), seed=5) != tenants(TenantParams(requests=200), seed=6)


def test_the_written_trace_replays(tmp_path: Path) -> None:
    lines = chat(ChatParams(requests=50), seed=0)
    path = tmp_path / "chat.jsonl"
    write_trace(lines, path)
    loaded = trace_replay.load_trace(path, tokens_per_hash=BLOCK)
    assert [r.input_tokens for r in loaded] == [x.input_length for x in lines]
    assert [tuple(h for h, _ in r.blocks) for r in loaded] == [x.hash_ids for x in lines]
    assert loaded[0].at_s == 0 and loaded[-1].at_s == (lines[-1].timestamp - lines[0].timestamp) / 1000


def test_any_parameter_is_set_from_the_command_line(tmp_path: Path) -> None:
    from benchmarks.trace_gen import main

    out = tmp_path / "t.jsonl"
    assert main(["tenants", "--requests", "50", "--seed", "3", "--set", "prefix_tokens=2000",
                 "--set", "question_tokens=50,300", "--set", "zipf_s=1.5", "--out", str(out)]) == 0
    params = TenantParams(requests=50, prefix_tokens=2000, question_tokens=(50, 300), zipf_s=1.5)
    assert trace_replay.load_trace(out, tokens_per_hash=BLOCK) == trace_replay.load_trace(_written(
        tenants(params, seed=3), tmp_path / "expected.jsonl"), tokens_per_hash=BLOCK)
    for bad in (["--set", "zipf_s=1"], ["--set", "turns=2"], ["--set", "requests=5"]):  # not chat's; not LO,HI
        with pytest.raises(SystemExit):
            main(["chat", *bad, "--out", str(out)])


def _written(lines: list[TraceLine], path: Path) -> Path:
    write_trace(lines, path)
    return path
