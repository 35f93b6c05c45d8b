"""Real clients against a mock cluster brought up by `orchestrator up` (the `api_cluster` fixture):
vLLM's own benchmark client, lm-evaluation-harness, aiperf, and three agent frameworks (LangChain, the OpenAI
Agents SDK, Pydantic AI). aiperf pins versions that clash with vLLM's stack in .venv, so deploy/test.sh
installs it into a venv of its own, `.venv-aiperf`. The mock's answers are scripted per request
(`vllm_xargs.mock_output`); model `a` has the hermes tool-call and the qwen3 reasoning parsers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tests.integration.api_requests import script

pytestmark = pytest.mark.integration
AIPERF = Path(__file__).resolve().parents[2] / ".venv-aiperf" / "bin" / "aiperf"  # made by deploy/test.sh
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER_JSON = '{"city": "Paris", "sunny": true}'


class Weather(pydantic.BaseModel):
    city: str
    sunny: bool


def get_weather(city: str) -> str:
    """Weather of a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def url(api_cluster: str) -> str:
    return api_cluster


BENCH = """import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
common = sys.argv[1:]
main(parser.parse_args([*common, "--backend", "openai", "--endpoint", "/v1/completions", "--result-filename", "c.json"]))
main(parser.parse_args([*common, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                        "--result-filename", "chat.json"]))
"""


def test_vllm_bench_serve(url: str, tiny_model: Path, tmp_path: Path) -> None:
    """vLLM's own benchmark client (it sends repetition_penalty, ignore_eos, stream_options) on both endpoints."""
    pytest.importorskip("vllm.benchmarks.serve", reason="needs the vllm package")
    run = subprocess.run(
        [sys.executable, "-c", BENCH, "--base-url", url, "--model", "a", "--tokenizer", str(tiny_model),
         "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "12", "--num-prompts", "8",
         "--ignore-eos", "--max-concurrency", "4", "--num-warmups", "0", "--disable-tqdm", "--save-result", "--save-detailed",
         "--result-dir", str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name in ("c.json", "chat.json"):
        result = json.loads((tmp_path / name).read_text())
        assert (result["completed"], result["failed"]) == (8, 0), result["errors"]
        assert result["output_lens"] == [12] * 8, "ignore_eos: every answer is exactly --random-output-len long"


LM_EVAL_TASK = """task: {task}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
doc_to_text: "{{{{question}}}}"
"""


def lm_eval(tmp_path: Path, task: str, spec: str, docs: list[dict[str, Any]], model: str, args: str,
            *flags: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """lm-eval run offline on a task written here (the header above and `spec`, over `docs`): the task's
    results and its logged samples."""
    pytest.importorskip("lm_eval", reason="needs lm-eval")
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / f"{task}.yaml").write_text(LM_EVAL_TASK.format(task=task, data=tmp_path / "docs.jsonl")
                                                     + spec)  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", args, "--tasks", task, *flags,
         "--include_path", str(tmp_path / "tasks"), "--output_path", str(tmp_path / "out"), "--log_samples"],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (results,) = (tmp_path / "out").rglob("results_*.json")
    (samples,) = (tmp_path / "out").rglob(f"samples_{task}_*.jsonl")
    return json.loads(results.read_text())["results"][task], [json.loads(line) for line in samples.read_text().splitlines()]


def test_lm_eval_loglikelihood_task(url: str, tiny_model: Path, tmp_path: Path) -> None:
    """lm-evaluation-harness, local-completions: a multiple-choice (loglikelihood) task from a local file,
    scored from echo + logprobs on token-id prompts."""
    docs = [{"question": f"Question {i}: the sky is", "choices": ["blue", "green", "made of cheese"], "answer": 0}
            for i in range(4)]  # fmt: skip
    spec = 'output_type: multiple_choice\ndoc_to_choice: "{{choices}}"\ndoc_to_target: answer\nmetric_list: [{metric: acc}]\n'
    args = (f"model=a,base_url={url}/v1/completions,tokenizer={tiny_model},tokenizer_backend=huggingface,"
            "num_concurrent=2,max_retries=1")
    results, scored = lm_eval(tmp_path, "dl_choice", spec, docs, "local-completions", args)
    assert 0 <= results["acc,none"] <= 1
    assert len(scored) == 4
    for sample in scored:  # one (loglikelihood, is_greedy) per choice, summed from the continuation's logprobs
        loglikelihoods = [resp[0][0] for resp in sample["resps"]]
        assert len(loglikelihoods) == 3 and all(-1e4 < float(ll) < 0 for ll in loglikelihoods), sample["resps"]


def test_lm_eval_chat_generation_task(url: str, tmp_path: Path) -> None:
    """lm-evaluation-harness, local-chat-completions with --apply_chat_template: a generate_until task from a
    local file, as lm-eval runs a chat model on gsm8k-style tasks (messages, max_tokens, stop, temperature 0,
    seed). Every document gets an answer, cut at the stop string."""
    docs = [{"question": f"Question {i}: count.", "answer": "t0 t1 t2"} for i in range(4)]
    spec = ('output_type: generate_until\ndoc_to_target: "{{answer}}"\n'
            'generation_kwargs: {until: [" t1"], max_gen_toks: 12, do_sample: false}\n'
            "metric_list: [{metric: exact_match}]\n")  # fmt: skip
    args = f"model=a,base_url={url}/v1/chat/completions,num_concurrent=2,max_retries=1"
    results, samples = lm_eval(tmp_path, "dl_gen", spec, docs, "local-chat-completions", args, "--apply_chat_template")
    assert 0 <= results["exact_match,none"] <= 1
    answers = [sample["resps"][0][0] for sample in samples]
    assert len(answers) == 4 and all(" t1" not in a for a in answers), answers
    assert sum(len(a.split()) for a in answers) < 4 * 12, answers  # the mock's words (t<N>) stop before " t1..."


def test_aiperf_fixed_output_lengths(url: str, tiny_model: Path, tmp_path: Path) -> None:
    """aiperf with --extra-inputs ignore_eos:true and min_tokens: every request's usage says exactly the
    requested output length, though the mock's script ends (EOS) after 3 tokens. (aiperf's own count
    re-tokenizes the mock's text, so it differs.)"""
    aiperf = str(AIPERF)
    assert AIPERF.is_file(), "aiperf is installed into .venv-aiperf by deploy/test.sh (its pins clash with .venv's)"
    run = subprocess.run(
        [aiperf, "profile", "--model", "a", "--url", url, "--endpoint-type", "chat", "--streaming",
         "--tokenizer", str(tiny_model), "--synthetic-input-tokens-mean", "32", "--output-tokens-mean", "12",
         "--extra-inputs", json.dumps(script("Sunny.")), "--extra-inputs", "ignore_eos:true",
         "--extra-inputs", "min_tokens:12", "--request-count", "8",
         "--concurrency", "2", "--output-artifact-dir", str(tmp_path / "art"), "--ui-type", "none"],
        capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "art" / "profile_export_aiperf.json").read_text())
    assert summary["completed_request_count"]["avg"] == 8 and summary["error_summary"] == []
    records = [json.loads(line) for line in (tmp_path / "art" / "profile_export.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all("error" not in r or r["error"] is None for r in records)
    assert [r["metrics"]["usage_completion_tokens"]["value"] for r in records] == [12] * 8



def test_aiperf_reads_the_reasoning_tokens(url: str, tiny_model: Path, tmp_path: Path) -> None:
    """A thinking request to a model with a reasoning parser (qwen3): the frontend's usage says how many output
    tokens were reasoning, and aiperf reads completion_tokens_details.reasoning_tokens into its
    usage_reasoning_tokens, as from vLLM. (The mock writes `</think>` as tokens of its own, not as a model's one
    tag token, and groups its tokens into pieces as its timing falls: the count is then the reasoning's share
    of each piece's text, between the 4 words before `</think>` and those with the tag's 4.)"""
    import httpx

    thinking = {**script("Plan it first.</think>Sunny."), "chat_template_kwargs": {"enable_thinking": True}}
    body = {"model": "a", "messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 40, **thinking}
    usage = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()["usage"]
    assert 4 <= usage["completion_tokens_details"]["reasoning_tokens"] <= 8 < usage["completion_tokens"] == 11
    run = subprocess.run(
        [str(AIPERF), "profile", "--model", "a", "--url", url, "--endpoint-type", "chat", "--streaming",
         "--tokenizer", str(tiny_model), "--synthetic-input-tokens-mean", "16", "--output-tokens-mean", "40",
         "--extra-inputs", json.dumps(thinking), "--request-count", "4", "--concurrency", "2",
         "--output-artifact-dir", str(tmp_path / "art"), "--ui-type", "none"],
        capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "art" / "profile_export.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for r in records:
        m = {k: v["value"] for k, v in r["metrics"].items() if k.startswith("usage_")}
        assert 4 <= m["usage_reasoning_tokens"] <= 8 and m["usage_completion_tokens"] == 11, m


def test_aiperf_replays_a_mooncake_trace(url: str, tiny_model: Path, tmp_path: Path) -> None:
    """aiperf replays a Mooncake trace as the arena's `--client aiperf` has it do (benchmarks/aiperf_client.py):
    12 requests, so that aiperf decodes its prompts in worker processes, which find the tokenizer only in a
    Hugging Face cache. Every request is answered, with the prompt length the trace gives, the records come
    back in trace order, and the prefix the requests share (two 64-token blocks) is found cached. A 13th
    prompt, longer than the model takes, is a record with the frontend's 400."""
    from benchmarks import aiperf_client
    from benchmarks.trace_replay import ReplayRequest

    requests = [ReplayRequest(i, i * 0.05, ((1, 64), (2, 64), (100 + i, 40 + i)), 8) for i in range(12)]
    requests.append(ReplayRequest(12, 0.7, tuple((200 + k, 64) for k in range(33)), 8))  # 2,112 > 2,048 tokens
    records, wall_s = aiperf_client.run(url, "a", tiny_model, requests, time_scale=1.0, block_tokens=64,
                                        work=tmp_path, timeout_s=60)  # fmt: skip
    assert [r.error for r in records[:12]] == [None] * 12 and 0.5 < wall_s < 60
    assert [(r.index, r.prompt_tokens, r.max_tokens) for r in records[:12]] == [(i, 168 + i, 8) for i in range(12)]
    assert all(r.ttft_s is not None and r.ttft_s <= r.e2e_s for r in records[:12]), records[:12]  # type: ignore[operator]
    cached = [r.cached_tokens or 0 for r in records[:12]]  # the shared blocks, never the rest; each of the 2
    assert all(c <= 128 for c in cached) and sum(c >= 112 for c in cached) >= 10, cached  # workers' first is cold
    assert (records[12].index, records[12].status) == (12, 400) and "2048" in (records[12].error or ""), records[12]


def test_langchain_text_tools_and_structured_output(url: str) -> None:
    """LangChain's ChatOpenAI: text whole and streamed (with usage), a tool call whole and streamed, the tool's
    result sent back, structured output by JSON schema and JSON mode."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model="a", base_url=f"{url}/v1", api_key="none", max_tokens=40, max_retries=0, stream_usage=True)
    assert chat.invoke("Hi", extra_body=script("Hello there")).content == "Hello there"
    chunks = list(chat.stream("Hi", extra_body=script("Hello there")))
    assert "".join(str(c.content) for c in chunks) == "Hello there"
    assert [c.usage_metadata["output_tokens"] for c in chunks if c.usage_metadata] == [3]
    tools = chat.bind_tools([get_weather])
    ask = [HumanMessage("Weather in Paris?")]
    call = tools.invoke(ask, extra_body=script(CALL))
    assert [(c["name"], c["args"]) for c in call.tool_calls] == [("get_weather", {"city": "Paris"})]
    merged: Any = None
    for chunk in tools.stream(ask, extra_body=script(CALL)):
        merged = chunk if merged is None else merged + chunk
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("get_weather", {"city": "Paris"})]
    result = ToolMessage(get_weather(**call.tool_calls[0]["args"]), tool_call_id=call.tool_calls[0]["id"])
    assert tools.invoke([*ask, call, result], extra_body=script("Sunny.")).content == "Sunny."
    for method in ("json_schema", "json_mode"):
        typed = chat.with_structured_output(Weather, method=method)
        assert typed.invoke("Paris?", extra_body=script(WEATHER_JSON)) == Weather(city="Paris", sunny=True), method


async def test_openai_agents_sdk_on_responses_and_chat(url: str) -> None:
    """The OpenAI Agents SDK, on the Responses API (its default) and on chat completions: a text answer whole and
    streamed, a tool run on the model's call, and an agent loop whose turns send back the calls, their outputs
    and the reasoning: it must end at max_turns, not on an error from the frontend."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from agents.exceptions import MaxTurnsExceeded
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    tool = function_tool(get_weather)
    turn = ["ReasoningItem", "MessageOutputItem", "ToolCallItem", "ToolCallOutputItem"]

    def settings(text: str, think: bool = False) -> ModelSettings:  # (thinking on: a reasoning effort)
        return ModelSettings(max_tokens=80, extra_body=script(text),
                             reasoning=Reasoning(effort="low") if think else None)

    for model in (OpenAIResponsesModel("a", client), OpenAIChatCompletionsModel("a", client)):
        plain = Agent(name="plain", instructions="Be brief.", model=model, model_settings=settings("Hello there"))
        assert (await Runner.run(plain, "Hi")).final_output == "Hello there"
        streamed = Runner.run_streamed(plain, "Hi")
        async for _ in streamed.stream_events():
            pass
        assert streamed.final_output == "Hello there"
        once = Agent(name="once", model=model, tools=[tool], tool_use_behavior="stop_on_first_tool",
                     model_settings=settings(CALL))
        assert (await Runner.run(once, "Weather in Paris?")).final_output == "sunny in Paris"
        loop = Agent(name="loop", model=model, tools=[tool],
                     model_settings=settings("<think>\nI should look it up.\n</think>\n" + CALL, think=True))
        for stream in (False, True):
            with pytest.raises(MaxTurnsExceeded) as ended:
                if stream:
                    run = Runner.run_streamed(loop, "Weather in Paris?", max_turns=3)
                    async for _ in run.stream_events():
                        pass
                else:
                    await Runner.run(loop, "Weather in Paris?", max_turns=3)
            assert ended.value.run_data is not None
            # (the "\n" between the reasoning and the call is a message only in a stream: a whole answer, as vLLM's,
            # makes white space beside calls no content)
            expected = turn if stream else [t for t in turn if t != "MessageOutputItem"]
            assert [type(i).__name__ for i in ended.value.run_data.new_items] == expected * 3, (model, stream)
    await client.close()


async def test_pydantic_ai_text_and_typed_output(url: str) -> None:
    """Pydantic AI on chat completions and the Responses API: text whole and streamed, and a typed output, which
    it asks for as a `final_result` tool with tool_choice required (answered in hermes' format, as vLLM 0.32
    holds a hermes model to)."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    required = '<tool_call>\n{"name": "final_result", "arguments": ' + WEATHER_JSON + "}\n</tool_call>"
    for model in (OpenAIChatModel("a", provider=provider), OpenAIResponsesModel("a", provider=provider)):
        agent = Agent(model, instructions="Be brief.")
        hello = {"max_tokens": 40, "extra_body": script("Hello there")}
        assert (await agent.run("Hi", model_settings=hello)).output == "Hello there"  # type: ignore[arg-type]
        async with agent.run_stream("Hi", model_settings=hello) as stream:  # type: ignore[arg-type]
            assert await stream.get_output() == "Hello there"
        typed = Agent(model, output_type=Weather)
        answer = await typed.run("Weather in Paris?", model_settings={"max_tokens": 60, "extra_body": script(required)})
        assert answer.output == Weather(city="Paris", sunny=True), model
    await client.close()
