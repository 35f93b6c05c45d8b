"""Anthropic's Messages API (/v1/messages) through the frontend, with Anthropic's own SDK, against a mock cluster
brought up by `orchestrator up` (the `api_cluster` fixture). Model outputs are scripted through the mock
(vllm_xargs.mock_output). The OpenAI API: test_api_openai.py.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.integration.api_requests import HI, WEATHER, post, script, thinking

pytestmark = pytest.mark.integration
ANTHROPIC_WEATHER = {"name": "get_weather", "description": "Weather of a city.",
                     "input_schema": WEATHER["function"]["parameters"]}


@pytest.fixture
def url(api_cluster: str) -> str:
    return api_cluster


@pytest.fixture
def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=60)


def test_messages_text_whole_streamed_and_stopped(url: str, claude: anthropic.Anthropic) -> None:
    """Anthropic's Messages API (/v1/messages) with Anthropic's SDK: the system prompt rendered as the chat's,
    stop reasons as Anthropic names them, and the SDK's stream helper builds the same message."""
    ask = {"model": "a", "max_tokens": 12, "system": "Be brief.", "messages": HI}
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    m = claude.messages.create(**ask, extra_body=script("Hello big world"))  # type: ignore[arg-type]
    chat = client.chat.completions.create(model="a", max_tokens=1, messages=[
        {"role": "system", "content": "Be brief."}, *HI])
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "Hello big world"
    assert m.stop_reason == "end_turn" and m.usage.output_tokens == 4 and m.role == "assistant"
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    cut = claude.messages.create(**{**ask, "max_tokens": 2}, extra_body=script("Hello big world"))  # type: ignore[arg-type]
    assert cut.stop_reason == "max_tokens"
    stopped = claude.messages.create(**ask, stop_sequences=[" big"], extra_body=script("Hello big world"))  # type: ignore[arg-type]
    assert (stopped.content[0].text, stopped.stop_reason, stopped.stop_sequence) == ("Hello", "stop_sequence", " big")
    with claude.messages.stream(**ask, extra_body=script("Hello big world")) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello big world" and final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 4
    count = claude.messages.count_tokens(model="a", system="Be brief.", messages=HI)  # type: ignore[arg-type]
    assert count.input_tokens == chat.usage.prompt_tokens


def test_messages_tool_use_and_its_result(url: str, claude: anthropic.Anthropic) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ask = {"model": "a", "max_tokens": 60, "messages": HI, "tools": [ANTHROPIC_WEATHER]}
    m = claude.messages.create(**ask, extra_body=script(call))  # type: ignore[arg-type]
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and m.stop_reason == "tool_use"
    with claude.messages.stream(**ask, extra_body=script(call)) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [("get_weather", {"city": "Paris"})]
    assert final.stop_reason == "tool_use"
    # The next turn: the tool_use block goes back, its result in a user turn, rendered as the chat tool turns.
    turn = [*HI, {"role": "assistant", "content": [use.model_dump()]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21 C and sunny"}]}]
    answer = claude.messages.create(**{**ask, "messages": turn}, extra_body=script("Sunny."))  # type: ignore[arg-type]
    history = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": use.id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": use.id, "content": "21 C and sunny"}]
    tokens = post(url, "/tokenize", {"model": "a", "messages": history, "tools": [WEATHER]})["count"]
    assert answer.content[0].text == "Sunny." and answer.usage.input_tokens + answer.usage.cache_read_input_tokens \
        == tokens


def test_messages_thinking_and_errors_in_anthropic_s_shape(url: str, claude: anthropic.Anthropic) -> None:
    m = claude.messages.create(model="a", max_tokens=60, messages=HI,  # type: ignore[arg-type]
                               extra_body=thinking("<think>It is June.</think>Sunny."))
    assert [b.type for b in m.content] == ["thinking", "text"] and m.content[0].thinking == "It is June."
    image = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="a", max_tokens=8, messages=[{"role": "user", "content": [image]}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "messages[0].content[0]" in e.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="nope", max_tokens=8, messages=HI)  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        claude.messages.create(model="a", messages=HI, max_tokens=0)  # type: ignore[arg-type]
