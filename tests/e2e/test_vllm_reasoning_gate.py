"""A thinking model asked for JSON, behind `orchestrator up` with a real vLLM engine: it thinks, then writes the
JSON. The model has a reasoning parser (qwen3), so its engine is started with vLLM's --reasoning-parser and holds
the request to its schema only once the reasoning has ended, as vLLM's own server does.

The model is the tiny random-weight Llama with `<think>` and `</think>` in its vocabulary. A logit bias makes it
close its reasoning at once: the engine lets it write `</think>`, then holds it to the schema. Without the
engine's reasoning parser the schema holds from the first token, `</think>` cannot be written, and the frontend
(which reads the output as reasoning until `</think>`) would answer with the JSON as reasoning and no content.

A second model on the same weights has deepseek_v3's parser, whose engine gate (built without the request's kwargs,
which the completions endpoint does not carry) never thinks: asked to think, it is held to the schema from its
first token, and the frontend reads that answer as not thinking, so the JSON is its content.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")

from dynamo_lite.engines.models.tiny import build_tiny_thinking  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from tests.e2e.running import Running, await_aggregated, orchestrator_up  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]
SIZE = "block_size: 128, max_model_len: 512"
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


def test_a_thinking_model_writes_its_json_after_its_reasoning(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    model = build_tiny_thinking(tmp_path / "model")
    end = AutoTokenizer.from_pretrained(str(model)).convert_tokens_to_ids("</think>")
    port = free_port()
    spec = (f"namespace: gate\nstate_dir: {tmp_path / 'state'}\nfrontend: {{port: {port}}}\n"
            f"models: [{{name: think, path: '{model}', {SIZE}, reasoning_parser: qwen3}},\n"
            f"         {{name: ds, path: '{model}', {SIZE}, reasoning_parser: deepseek_v3}}]\n"
            "pools:\n  - {name: agg, role: aggregated, engine: vllm, model: think}\n"
            "  - {name: ds, role: aggregated, engine: vllm, model: ds}\n")  # fmt: skip
    with orchestrator_up(tmp_path, port, spec, Running) as cluster:
        await_aggregated(cluster, "think")
        await_aggregated(cluster, "ds")
        for model, extra in (("think", {"logit_bias": {str(end): 100}}),
                             ("ds", {"chat_template_kwargs": {"thinking": True}})):  # fmt: skip
            body = {"model": model, "messages": [{"role": "user", "content": "Give a."}], "max_tokens": 12,
                    "temperature": 0, **extra,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
            request = urllib.request.Request(f"{cluster.url}/v1/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})  # fmt: skip
            answer = json.loads(urllib.request.urlopen(request, timeout=120).read())
            message = answer["choices"][0]["message"]
            assert not message.get("reasoning"), (model, message)  # ended at the model's `</think>`, or never began
            assert message["content"].lstrip().startswith("{"), (model, message)  # the JSON its schema holds it to
            assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
