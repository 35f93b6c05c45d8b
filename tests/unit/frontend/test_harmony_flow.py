"""A gpt-oss model through the frontend (fake engines): its prompt written in Harmony, its output's tokens read as
Harmony messages into reasoning, content and tool calls, whole and streamed; what it cannot serve refused with a
400 that names the field. The model is the tiny tokenizer with a config.json that says gpt_oss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynamo_lite.frontend import harmony
from dynamo_lite.frontend.request import Piece
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from tests.unit.frontend.conftest import Script

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
OUTPUT = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
          'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
ANSWER = "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
GPT_OSS = {"tool_call_parser": "openai", "reasoning_parser": "openai_gptoss"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> ModelTokenizer:
    from dynamo_lite.engines.models.tiny import train_tokenizer

    out: Path = tmp_path_factory.mktemp("gpt-oss-like")
    train_tokenizer(out)
    (out / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    return ModelTokenizer(out)


def script(text: str, size: int = 3) -> Script:
    """The engine's answer: the output's tokens in pieces of `size` (their text is not read), then the finish."""
    ids = harmony.encoding().encode(text, allowed_special="all")
    pieces = [Piece("x", ids[i:i + size], None) for i in range(0, len(ids), size)]
    pieces[-1] = Piece("x", pieces[-1].token_ids, "stop")
    return Script(pieces)


async def answer(h: Any, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The whole answer's message and finish, and the streamed one's chunks."""
    base = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 50, **body}
    whole = await h.client.post("/v1/chat/completions", json=base)
    assert whole.status == 200, await whole.text()
    streamed = await h.client.post("/v1/chat/completions", json={**base, "stream": True})
    chunks = [json.loads(line[6:]) for line in (await streamed.text()).splitlines() if line.startswith("data: {")]
    return (await whole.json())["choices"][0], chunks


async def test_a_tool_call_and_its_reasoning(harness: Any) -> None:
    h = await harness(model=GPT_OSS)
    h.add_worker("d0", script=script(OUTPUT))
    choice, chunks = await answer(h, {"tools": [WEATHER], "reasoning_effort": "low"})
    message = choice["message"]
    assert message["reasoning"] == "Need the weather." and message["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == \
        [("get_weather", {"city": "Paris"})]
    assert choice["finish_reason"] == "tool_calls"
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert "".join(d["delta"].get("reasoning") or "" for d in deltas) == "Need the weather."
    assert [c["function"]["name"] for d in deltas for c in d["delta"].get("tool_calls") or ()] == ["get_weather"]
    assert deltas[-1]["finish_reason"] == "tool_calls"
    sent = h.engines.calls[0]["prompt"]
    expected = harmony.render(_messages("Weather in Paris?"), _tools([WEATHER]), "low")
    assert sent == expected and "Reasoning: low" in harmony.encoding().decode(sent)


async def test_an_answer_without_reasoning_asked(harness: Any) -> None:
    h = await harness(model={"tool_call_parser": "openai"})
    h.add_worker("d0", script=script(ANSWER, size=1))
    choice, chunks = await answer(h, {})
    assert choice["message"]["content"] == "Hello!" and "reasoning" not in choice["message"]
    assert choice["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hello!"


async def test_without_harmony_s_parsers_the_text_comes_as_it_is(harness: Any) -> None:
    h = await harness()
    h.add_worker("d0", script=Script([Piece("analysisGreet.assistantfinalHello!", [1, 2, 3], "stop")]))
    choice, _ = await answer(h, {})
    assert choice["message"]["content"] == "analysisGreet.assistantfinalHello!"


@pytest.mark.parametrize(("body", "field"), [({"reasoning_effort": "none"}, "reasoning_effort"),
                                             ({"structured_outputs": {"grammar": "start: ("}}, "structured_outputs")])  # not Lark
async def test_what_is_not_served_is_refused_by_name(harness: Any, body: dict[str, Any], field: str) -> None:
    h = await harness(model=GPT_OSS)
    h.add_worker("d0", script=script(ANSWER))
    resp = await h.client.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], **body})  # fmt: skip
    assert resp.status == 400
    assert (await resp.json())["error"]["param"] == field
    assert not h.engines.calls


@pytest.mark.parametrize(("choice", "finish"), [("required", "tool_calls"),
                                                ({"type": "function", "function": {"name": "get_weather"}}, "stop")])
async def test_a_call_required_is_held_by_a_structural_tag(harness: Any, choice: Any, finish: str) -> None:
    """The engine gets Harmony's structural tag, and the call is read from the output's messages; the finish is
    vLLM's (tool_calls when required, stop when named) and the content empty text."""
    h = await harness(model=GPT_OSS)
    h.add_worker("d0", script=script(OUTPUT))
    choice_, _ = await answer(h, {"tools": [WEATHER], "tool_choice": choice})
    assert [c["function"]["name"] for c in choice_["message"]["tool_calls"]] == ["get_weather"]
    assert choice_["finish_reason"] == finish and choice_["message"]["content"] == ""
    tag = json.loads(h.engines.calls[0]["sampling"].structured_outputs["structural_tag"])
    begins = [e["begin"] for e in tag["format"]["elements"][-1]["elements"]]
    assert " to=functions.get_weather<|channel|>commentary json<|message|>" in begins


async def test_a_response_format_holds_the_final_message(harness: Any) -> None:
    h = await harness(model=GPT_OSS)
    h.add_worker("d0", script=script('<|channel|>final<|message|>{"a": 1}<|return|>'))
    choice, _ = await answer(h, {"response_format": {"type": "json_object"}})
    assert json.loads(choice["message"]["content"]) == {"a": 1}
    tag = json.loads(h.engines.calls[0]["sampling"].structured_outputs["structural_tag"])
    assert tag["format"]["elements"][-1]["elements"][0]["begin"] == "<|channel|>final json<|message|>"


@pytest.mark.parametrize(("tool", "reasoning", "is_harmony", "wrong"),
                         [("openai", "openai_gptoss", True, None), (None, None, True, None), ("hermes", None, False, None),
                          ("openai", None, False, "tool_call_parser"), (None, "qwen3", True, "reasoning_parser")])
def test_harmony_s_parsers_go_with_gpt_oss_only(tool: str | None, reasoning: str | None, is_harmony: bool,
                                                wrong: str | None) -> None:  # fmt: skip
    problem = harmony.mismatch(tool, reasoning, is_harmony)
    assert (problem is None) if wrong is None else (problem is not None and problem.startswith(wrong))


def _messages(text: str) -> list[Any]:
    from dynamo_lite.frontend.messages import ChatMessage

    return [ChatMessage.model_validate({"role": "user", "content": text})]


def _tools(tools: list[dict[str, Any]]) -> list[Any]:
    from dynamo_lite.frontend.messages import Tool

    return [Tool.model_validate(t) for t in tools]


async def test_the_responses_api_gives_the_reasoning_and_the_answer(harness: Any) -> None:
    h = await harness(model=GPT_OSS)
    h.add_worker("d0", script=script(ANSWER))
    resp = await h.client.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 50})
    assert resp.status == 200, await resp.text()
    items = (await resp.json())["output"]
    assert [i["type"] for i in items] == ["reasoning", "message"]
    assert items[0]["content"][0]["text"] == "Greet." and items[1]["content"][0]["text"] == "Hello!"
