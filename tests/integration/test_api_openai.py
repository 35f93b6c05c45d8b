"""The OpenAI and vLLM API through the frontend, with the official `openai` client, against a mock cluster
brought up by `orchestrator up` (the `api_cluster` fixture: a tool-call and a reasoning parser per model). Model
outputs that parsers must read are scripted through the mock (vllm_xargs.mock_output). Anthropic's Messages API:
test_api_anthropic.py. Other clients (benchmarks, evaluation, agent frameworks): test_api_clients.py.
"""

from __future__ import annotations

import json
import urllib.request

import jsonschema
import openai
import pydantic
import pytest

from tests.integration.api_requests import HI, WEATHER, post, script, thinking

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def url(api_cluster: str) -> str:
    return api_cluster


@pytest.fixture
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def test_n_choices_streaming_and_not(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="a", messages=HI, n=3, max_tokens=6, seed=7, temperature=1)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert len({c.message.content for c in out.choices}) == 3  # a seed per choice, as vLLM's n > 1
    assert out.usage.completion_tokens == 18 and out.usage.prompt_tokens > 5
    chunks = list(client.chat.completions.create(model="a", messages=HI, n=2, max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True, "continuous_usage_stats": True}))
    texts = {0: "", 1: ""}
    finished = {}
    for c in chunks[:-1]:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
            finished[ch.index] = ch.finish_reason or finished.get(ch.index)
        assert c.usage is not None and c.usage.completion_tokens <= 4  # continuous usage stats, per choice
    assert all(texts.values()) and finished == {0: "length", 1: "length"}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8


def test_chat_logprobs_streaming_and_not(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="a", messages=HI, max_tokens=5, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) == 5 and all(len(t.top_logprobs) == 3 for t in content)
    assert all(t.logprob == t.top_logprobs[0].logprob <= 0 for t in content)  # greedy: the sampled token is the top
    stream = client.chat.completions.create(model="a", messages=HI, max_tokens=5, logprobs=True, top_logprobs=3,
                                            stream=True)
    streamed = [t for c in stream for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]


def test_batch_prompts_echo_and_logprobs(client: openai.OpenAI) -> None:
    out = client.completions.create(model="a", prompt=["t1 t2 t3", "t4"], n=2, max_tokens=3)
    assert [c.index for c in out.choices] == [0, 1, 2, 3] and out.usage.completion_tokens == 12
    prompt = [5, 6, 7, 8]  # as lm-evaluation-harness asks for a loglikelihood
    lp = client.completions.create(model="a", prompt=prompt, max_tokens=1, echo=True, logprobs=1).choices[0].logprobs
    assert len(lp.tokens) == 5 and lp.token_logprobs[0] is None and all(v < 0 for v in lp.token_logprobs[1:])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]
    only = client.completions.create(model="a", prompt=prompt, max_tokens=0, echo=True, logprobs=0)
    assert len(only.choices[0].logprobs.tokens) == 4 and only.usage.completion_tokens == 1


def test_ignore_eos_min_tokens_and_stop_strings(client: openai.OpenAI) -> None:
    def run(**kw: object) -> openai.types.Completion:
        return client.completions.create(model="a", prompt="t1 t2", max_tokens=12, **kw)  # type: ignore[arg-type]

    natural = run(extra_body=script("Hello big world"))
    assert natural.choices[0].text == "Hello big world" and natural.choices[0].finish_reason == "stop"
    assert natural.usage.completion_tokens == 4  # three words and EOS
    fixed = run(extra_body={**script("Hello big world"), "ignore_eos": True})
    assert fixed.usage.completion_tokens == 12 and fixed.choices[0].finish_reason == "length"
    longer = run(extra_body={**script("Hello big world"), "min_tokens": 7})
    assert longer.usage.completion_tokens == 8 and longer.choices[0].finish_reason == "stop"
    stops = [f"never{i}" for i in range(20)] + [" big"]
    cut = run(stop=stops, extra_body=script("Hello big world"))
    assert cut.choices[0].text == "Hello" and cut.choices[0].finish_reason == "stop"


def test_tool_call_parsed_whole_and_streamed(client: openai.OpenAI) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out = client.chat.completions.create(model="a", messages=HI, tools=[WEATHER], max_tokens=60,
                                         extra_body=script("Let me check. " + call))
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check. "
    (tc,) = choice.message.tool_calls
    assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city": "Paris"}
    stream = client.chat.completions.create(model="a", messages=HI, tools=[WEATHER], max_tokens=60, stream=True,
                                            extra_body=script(call))
    calls: dict[int, dict] = {}
    reasons = []
    for chunk in stream:
        for ch in chunk.choices:
            reasons.append(ch.finish_reason)
            for d in ch.delta.tool_calls or ():
                entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
    assert calls == {0: {"name": "get_weather", "arguments": '{"city": "Paris"}'}} and reasons[-1] == "tool_calls"
    pythonic = client.chat.completions.create(model="p", messages=HI, tools=[WEATHER], max_tokens=60,
                                              extra_body=script('[get_weather(city="Oslo")]'))
    assert json.loads(pythonic.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}


def test_named_and_required_tool_choice_through_structured_output(client: openai.OpenAI) -> None:
    """Model `a` has the hermes parser: the engine is held to hermes' own `<tool_call>` format (a structural tag,
    as vLLM 0.32 holds it), with the arguments held to the tool's schema only when the tool is strict."""
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    named = client.chat.completions.create(model="a", messages=HI, tools=[strict], max_tokens=60,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (tc,) = named.choices[0].message.tool_calls
    jsonschema.validate(json.loads(tc.function.arguments), WEATHER["function"]["parameters"])
    assert named.choices[0].finish_reason == "stop" and named.choices[0].message.content == ""
    required = client.chat.completions.create(model="a", messages=HI, tools=[WEATHER], max_tokens=60,
                                              tool_choice="required")
    assert required.choices[0].finish_reason == "tool_calls"
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert isinstance(json.loads(required.choices[0].message.tool_calls[0].function.arguments), dict)
    with pytest.raises(openai.BadRequestError, match="does not match any"):
        client.chat.completions.create(model="a", messages=HI, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})


class Weather(pydantic.BaseModel):
    city: str
    celsius: int
    sunny: bool


def test_structured_output_and_sdk_parse(client: openai.OpenAI) -> None:
    parsed = client.beta.chat.completions.parse(model="a", messages=HI, response_format=Weather, max_tokens=60)
    assert isinstance(parsed.choices[0].message.parsed, Weather)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}, "required": ["n"]}
    out = client.completions.create(model="a", prompt="t1", max_tokens=40,
                                    extra_body={"structured_outputs": {"json": schema}})
    jsonschema.validate(json.loads(out.choices[0].text), schema)


def test_reasoning_content(client: openai.OpenAI) -> None:
    """qwen3's parser as vLLM 0.32's: thinking unless the kwargs (the model's default here) say not; thinking,
    what comes before `</think>` is reasoning, opening tag or not; not thinking, all is content."""
    for opened in ("<think>", ""):
        out = client.chat.completions.create(model="a", messages=HI, max_tokens=60,
                                             extra_body=thinking(f"{opened}It is June.</think>Sunny."))
        message = out.choices[0].message
        assert message.content == "Sunny." and message.reasoning == "It is June."  # type: ignore[attr-defined]
    out = client.chat.completions.create(model="a", messages=HI, max_tokens=60,
                                         extra_body=script("<think>It is June.</think>Sunny."))
    message = out.choices[0].message
    assert message.content == "<think>It is June.</think>Sunny." and not message.reasoning  # type: ignore[attr-defined]


def test_tool_turns_are_rendered_not_dropped(url: str) -> None:
    history = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C and sunny"}]
    ids = post(url, "/tokenize", {"model": "a", "messages": history, "tools": [WEATHER]})["tokens"]
    text = post(url, "/detokenize", {"model": "a", "tokens": ids})["prompt"]
    assert "get_weather" in text and '"city": "Paris"' in text and "<tools>" in text and "21 C and sunny" in text
    for model in ("a", "p"):  # /tokenize renders as the chat does: the model's tool format and template kwargs
        counted = post(url, "/tokenize", {"model": model, "messages": history, "tools": [WEATHER]})["count"]
        answer = post(url, "/v1/chat/completions", {"model": model, "messages": history, "tools": [WEATHER],
                                                    "max_tokens": 1})  # fmt: skip
        assert counted == answer["usage"]["prompt_tokens"], model


def test_request_ids_field_policy_and_extra_endpoints(url: str, client: openai.OpenAI) -> None:
    req = urllib.request.Request(f"{url}/v1/chat/completions", headers={"X-Request-Id": "my-id-42",
                                                                         "Content-Type": "application/json"},
                                 data=json.dumps({"model": "a", "messages": HI, "max_tokens": 2, "metadata": {"a": 1},
                                                  "store": False, "frobnicate": 1}).encode())  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["X-Request-Id"] == "my-id-42" and json.loads(resp.read())["id"] == "chatcmpl-my-id-42"
    assert len(client.completions.create(model="a", prompt="x", best_of=3, max_tokens=2).choices) == 1  # as vLLM 0.32
    with pytest.raises(openai.BadRequestError, match="suffix") as e:
        client.completions.create(model="a", prompt="x", suffix="y")
    assert e.value.body["param"] == "suffix"  # type: ignore[index]
    assert client.models.retrieve("p").id == "p"
    assert "version" in json.loads(urllib.request.urlopen(f"{url}/version", timeout=5).read())
    tok = post(url, "/tokenize", {"model": "a", "prompt": "hello world", "return_token_strs": True})
    assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"]) and tok["max_model_len"] == 2048


def decisions(url: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("dynamo_lite_frontend_routing_decisions_total{"))


def test_beam_search_is_one_engine_request_per_prompt(url: str, client: openai.OpenAI) -> None:
    """use_beam_search: n beams from one engine request per prompt (vLLM's own beam search runs on the engine),
    whole, streamed as chat, and refused where vLLM refuses it."""
    before = decisions(url)
    out = client.completions.create(model="a", prompt=["t1 t2 t3", "t4"], n=3, max_tokens=4,
                                    extra_body={"use_beam_search": True, "length_penalty": 0.5})
    assert decisions(url) == before + 2  # one per prompt, not one per choice
    assert [c.index for c in out.choices] == list(range(6)) and all(c.text for c in out.choices)
    assert out.usage.completion_tokens == 24
    chat = client.chat.completions.create(model="a", messages=HI, n=2, max_tokens=3, stream=True,
                                          stream_options={"include_usage": True},
                                          extra_body={"use_beam_search": True})  # fmt: skip
    chunks = list(chat)
    texts = {i: "".join(ch.delta.content or "" for c in chunks for ch in c.choices if ch.index == i) for i in (0, 1)}
    assert all(texts.values()) and chunks[-1].usage.completion_tokens == 6 and decisions(url) == before + 3
    echoed = client.completions.create(model="a", prompt=["t1 t2 t3", "t4"], n=3, max_tokens=0, echo=True,
                                       extra_body={"use_beam_search": True})  # as vLLM: each prompt once, no output
    assert [c.text for c in echoed.choices] == ["t1 t2 t3", "t4"] and echoed.usage.completion_tokens == 0
    for extra, param in (({"stream": True}, "use_beam_search"), ({"echo": True, "logprobs": 1}, "echo")):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="a", prompt="x", max_tokens=2,
                                      extra_body={"use_beam_search": True, **extra})  # type: ignore[arg-type]
        assert e.value.body["param"] == param  # type: ignore[index]


def test_logprobs_of_named_tokens(url: str, client: openai.OpenAI) -> None:
    """logprob_token_ids: at each step the sampled token and the tokens named, in that order, whatever their
    likelihood; refused without logprobs and with beam search, as vLLM refuses them."""
    seven, nine = (post(url, "/detokenize", {"model": "a", "tokens": [t]})["prompt"] for t in (7, 9))
    out = client.completions.create(model="a", prompt="t1 t2", max_tokens=3, logprobs=0,
                                    extra_body={"logprob_token_ids": [7, 9]})
    lp = out.choices[0].logprobs
    assert all(list(top)[0] == token and {seven, nine} <= set(top) for token, top in zip(lp.tokens, lp.top_logprobs))
    chat = client.chat.completions.create(model="a", messages=HI, max_tokens=3, logprobs=True,
                                          extra_body={"logprob_token_ids": [9, 7]})
    for entry in chat.choices[0].logprobs.content:
        named = [t.token for t in entry.top_logprobs[1:]]
        assert entry.top_logprobs[0].token == entry.token and named == [t for t in (nine, seven) if t != entry.token]
    for extra, param in (({"logprobs": None}, "logprob_token_ids"), ({"use_beam_search": True}, "logprob_token_ids")):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="a", prompt="x", max_tokens=2,
                                      extra_body={"logprobs": 1, "logprob_token_ids": [7], **extra})
        assert e.value.body["param"] == param  # type: ignore[index]


def test_the_rendered_prompt_is_returned_when_asked(client: openai.OpenAI) -> None:
    """return_prompt_text: the chat template's output beside the answer, and in a stream's first chunk."""
    out = client.chat.completions.create(model="a", messages=HI, max_tokens=2, extra_body={"return_prompt_text": True})
    text = out.model_extra["prompt_text"]  # type: ignore[index]
    assert HI[0]["content"] in text and text != HI[0]["content"]
    first = next(iter(client.chat.completions.create(model="a", messages=HI, max_tokens=2, stream=True,
                                                     extra_body={"return_prompt_text": True})))
    assert first.model_extra["prompt_text"] == text  # type: ignore[index]
    assert "prompt_text" not in client.chat.completions.create(model="a", messages=HI, max_tokens=2).model_extra


def test_many_choices(client: openai.OpenAI) -> None:
    """50 prompts x n=4: 200 engine requests, merged in index order."""
    out = client.completions.create(model="a", prompt=[f"t{i}" for i in range(50)], n=4, max_tokens=2)
    assert [c.index for c in out.choices] == list(range(200)) and out.usage.completion_tokens == 400


FLAT_WEATHER = {"type": "function", **WEATHER["function"]}  # the Responses API's tools are flat


def test_responses_text_whole_and_streamed(client: openai.OpenAI) -> None:
    """/v1/responses: instructions and input rendered as the chat messages they stand for; the SDK's
    stream helper accepts the events and builds the same response."""
    r = client.responses.create(model="a", instructions="Be brief.", input="What is the weather in Paris?",
                                max_output_tokens=12, extra_body=script("Hello big world"))
    chat = client.chat.completions.create(model="a", max_tokens=1, messages=[
        {"role": "system", "content": "Be brief."}, *HI])
    assert r.status == "completed" and r.output_text == "Hello big world" and r.id.startswith("resp_")
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == 4
    assert r.instructions == "Be brief." and r.max_output_tokens == 12
    cut = client.responses.create(model="a", input=HI, max_output_tokens=2, extra_body=script("Hello big world"))
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    with client.responses.stream(model="a", input="Hi", max_output_tokens=12,
                                 extra_body=script("Hello big world")) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello big world"
    assert final.output_text == "Hello big world" and final.usage.output_tokens == 4


def test_responses_tool_calls_and_their_outputs(url: str, client: openai.OpenAI) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    r = client.responses.create(model="a", input="What is the weather in Paris?", tools=[FLAT_WEATHER],
                                extra_body=script(call), max_output_tokens=60)
    (fc,) = [item for item in r.output if item.type == "function_call"]
    assert fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris"} and fc.call_id
    with client.responses.stream(model="a", input="What is the weather in Paris?", tools=[FLAT_WEATHER],
                                 extra_body=script(call), max_output_tokens=60) as stream:
        done = [e for e in stream if e.type == "response.function_call_arguments.done"]
        final = stream.get_final_response()
    assert [json.loads(e.arguments) for e in done] == [{"city": "Paris"}]
    assert [i.name for i in final.output if i.type == "function_call"] == ["get_weather"]
    # The next turn: the call and its output go back as input items, rendered as the chat tool turns.
    turn = [{"role": "user", "content": "What is the weather in Paris?"}, fc.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": fc.call_id, "output": "21 C and sunny"}]
    answer = client.responses.create(model="a", input=turn, tools=[FLAT_WEATHER], max_output_tokens=8,
                                     extra_body=script("Sunny."))
    history = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": fc.call_id, "type": "function", "function": {"name": "get_weather", "arguments": fc.arguments}}]},
        {"role": "tool", "tool_call_id": fc.call_id, "content": "21 C and sunny"}]
    tokens = post(url, "/tokenize", {"model": "a", "messages": history, "tools": [WEATHER]})["count"]
    assert answer.output_text == "Sunny." and answer.usage.input_tokens == tokens


def test_a_prompt_too_long_is_truncated_to_fit_when_asked(client: openai.OpenAI) -> None:
    """truncate_prompt_tokens -1 (chat) and truncation auto (Responses): the model's length less one token, as
    vLLM's max_truncation_tokens; without them the same prompt is a 400."""
    long_text = " ".join(f"w{i}" for i in range(3000))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="a", messages=[{"role": "user", "content": long_text}], max_tokens=1)
    chat = client.chat.completions.create(model="a", messages=[{"role": "user", "content": long_text}],
                                          max_tokens=1, extra_body={"truncate_prompt_tokens": -1})
    assert chat.usage.prompt_tokens == 2047 and chat.usage.completion_tokens == 1
    r = client.responses.create(model="a", input=long_text, truncation="auto", max_output_tokens=1)
    assert r.usage.input_tokens == 2047 and r.usage.output_tokens == 1


def test_responses_reasoning_format_and_what_is_refused(client: openai.OpenAI) -> None:
    r = client.responses.create(model="a", input=HI, extra_body=script("<think>It is June.</think>Sunny."),
                                max_output_tokens=60, reasoning={"effort": "low"})  # (effort: thinking on)
    assert [i.type for i in r.output] == ["reasoning", "message"] and r.output_text == "Sunny."
    assert r.output[0].content[0].text == "It is June."
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    shaped = client.responses.create(model="a", input=HI, max_output_tokens=40, text={"format": {
        "type": "json_schema", "name": "n", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(shaped.output_text), schema)
    with pytest.raises(openai.NotFoundError, match="resp_gone"):  # nothing is stored, as vLLM by default
        client.responses.create(model="a", input="Hi", previous_response_id="resp_gone")
    for kwargs, param in (({"background": True}, "background"),
                          ({"tools": [{"type": "web_search_preview"}]}, "tools[0]"),
                          ({"max_output_tokens": 0}, "max_output_tokens"),
                          ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]")):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(**{"model": "a", "input": "Hi", **kwargs})  # type: ignore[call-overload]
        assert e.value.body["param"] == param, e.value.body  # type: ignore[index]


def test_embeddings_of_a_pooling_model(url: str, client: openai.OpenAI) -> None:
    """OpenAI's SDK asks for base64 and decodes it: the vectors are the engine's floats (the mock's, here). The
    text endpoints refuse the pooling model by name."""
    got = client.embeddings.create(model="emb", input=["t1 t2 t3", "t4"])
    floats = post(url, "/v1/embeddings", {"model": "emb", "input": ["t1 t2 t3", "t4"]})
    assert [len(d.embedding) for d in got.data] == [64, 64]
    assert got.usage.prompt_tokens == floats["usage"]["prompt_tokens"] == 4
    for mine, theirs in zip(got.data, floats["data"], strict=True):
        assert mine.embedding == pytest.approx(theirs["embedding"], rel=1e-6)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="emb", messages=HI)
    assert e.value.body["param"] == "model"  # type: ignore[index]

