"""What the tests of the API through the frontend send to the `api_cluster` fixture's models: a tool, a question,
scripted answers (the mock engine writes `vllm_xargs.mock_output`) and a plain JSON POST."""

from __future__ import annotations

import json
import urllib.request

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}  # fmt: skip
HI = [{"role": "user", "content": "What is the weather in Paris?"}]


def script(text: str) -> dict:
    """The extra body that has the mock engine answer `text`."""
    return {"vllm_xargs": {"mock_output": text}}


def thinking(text: str) -> dict:
    """`script`, on a request that asks model `a` to think (it does not by default)."""
    return {**script(text), "chat_template_kwargs": {"enable_thinking": True}}


def post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())
