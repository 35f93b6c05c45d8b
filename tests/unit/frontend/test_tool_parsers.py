"""Tool-call and reasoning parsers on canned outputs of each model family, whole and streamed in
random chunk splits: the streamed result equals the whole one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamo_lite.frontend.tools import Parsed, ParsedCall, new_reasoning_parser, new_tool_parser
from dynamo_lite.frontend.tools.formats import PARSERS
from dynamo_lite.frontend.tools.render import render_call

PARIS = ParsedCall("get_weather", '{"city": "Paris"}')
TRICKY = ParsedCall("search", '{"q": "a } ] ) \\" b", "n": [1, 2]}')
CANNED = [
    ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me look.\n", [PARIS]),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n<tool_call>'
               '{"name": "search", "arguments": {"q": "a } ] ) \\" b", "n": [1, 2]}}</tool_call>', "", [PARIS, TRICKY]),
    ("hermes", "No tools < needed here.", "No tools < needed here.", []),
    ("hermes", '<tool_call>{"name": broken json</tool_call>', '<tool_call>{"name": broken json</tool_call>', []),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS]),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "search", "parameters": '
                    '{"q": "a } ] ) \\" b", "n": [1, 2]}}', "", [PARIS, TRICKY]),
    ("llama3_json", "The weather is {unknown}.", "The weather is {unknown}.", []),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", '
                '"arguments": {"q": "a } ] ) \\" b", "n": [1, 2]}}]', "", [PARIS, TRICKY]),
    ("mistral", 'Sure.[TOOL_CALLS]get_weather{"city": "Paris"}', "Sure.", [PARIS]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", [PARIS]),
    ("mistral", "Plain [answer] without calls.", "Plain [answer] without calls.", []),
    ("pythonic", '[get_weather(city="Paris"), search(q=\'a } ] ) " b\', n=[1, 2])]', "", [PARIS, TRICKY]),
    ("pythonic", '<|python_start|>[get_weather(city="Paris")]<|python_end|>', "", [PARIS]),
    ("pythonic", "[1, 2] is a list, not a call.", "[1, 2] is a list, not a call.", []),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> Done.', "", [PARIS]),
    ("qwen3_coder", "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "</function>\n</tool_call>", "Let me look.\n", [PARIS]),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "<function=search>\n<parameter=q>\na } ] ) \" b\n</parameter>\n</function>\n</tool_call>", "",
     [PARIS, ParsedCall("search", '{"q": "a } ] ) \\" b"}')]),
    ("glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", "",
     [PARIS]),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                   "</invoke>\n</minimax:tool_call>", "", [PARIS]),
    ("kimi_k2", '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
                '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>', "", [PARIS]),
    ("deepseek_v31", 'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"q": "a } ] ) \\" b", '
                     '"n": [1, 2]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>', "Sure.", [TRICKY]),
    ("gigachat3", 'Let me look.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": '
                  '{"city": "Paris"}}</s>', "Let me look.", [PARIS]),
    ("gigachat3", 'Sure.</s><|function_call|>{"name": "search", "arguments": {"q": "a } ] ) \\" b", "n": [1, 2]}}',
     "Sure.</s>", [TRICKY]),
    ("gigachat3", "An answer about a function call.</s>\n", "An answer about a function call.", []),
    ("gigachat3", "Done.<|message_sep|>\n\nnot a call", "Done.", []),
    ("gigachat3", 'No.<|message_sep|>\n\n<|function_call|>{"name": broken</s>',
     'No.<|message_sep|>\n\n<|function_call|>{"name": broken', []),
    ("dots", 'Let me look.\n<dots_function_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
             "</parameter>\n</invoke>\n</dots_function_call>", "Let me look.\n", [PARIS]),
    ("dots", '<dots_function_call>{"name": "nothing", "arguments": {}}</dots_function_call> then '
             '<dots_function_call>{"name": "search", "arguments": {"q": "a } ] ) \\" b", "n": [1, 2]}}'
             "</dots_function_call> after", "", [TRICKY]),
    ("dots", "A <dots_function_call>broken</dots_function_call> answer.",
     "A <dots_function_call>broken</dots_function_call> answer.", []),
]


# The request's tools, by name (dots reads calls only of the functions the request lists).
NAMES: dict[str, dict[str, object]] = {"get_weather": {"city": {"type": "string"}}, "search": {}}


def whole(name: str, text: str) -> Parsed:
    """The output fed at once, its calls folded whole (a gigachat3 call is known only at the end of the output: its
    arguments stream even so)."""
    from tests.unit.frontend.conftest import folded

    parser = new_tool_parser(name, NAMES)
    out = parser.feed(text).add(parser.finish())
    return Parsed(out.content, folded(out.calls))


def streamed(name: str, chunks: list[str]) -> Parsed:
    """The output fed in `chunks`, its calls folded whole (the arguments of some formats stream in pieces)."""
    from tests.unit.frontend.conftest import folded

    parser = new_tool_parser(name, NAMES)
    out = Parsed()
    for chunk in chunks:
        out.add(parser.feed(chunk))
    out.add(parser.finish())
    return Parsed(out.content, folded(out.calls))


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@pytest.mark.parametrize(("name", "text", "content", "calls"), CANNED)
def test_canned_outputs(name: str, text: str, content: str, calls: list[ParsedCall]) -> None:
    out = whole(name, text)
    assert out.content == content and out.calls == calls
    assert [json.loads(c.arguments) for c in out.calls] == [json.loads(c.arguments) for c in calls]


@pytest.mark.parametrize(("name", "text", "content", "calls"), CANNED)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
@settings(max_examples=60, deadline=None)
def test_streamed_in_any_split_equals_whole(name: str, text: str, content: str, calls: list[ParsedCall],
                                            cuts: list[int]) -> None:  # fmt: skip
    out = streamed(name, split(text, cuts))
    assert out.content == content and out.calls == calls


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_rendered_history_calls_parse_back(name: str) -> None:
    """A call written into the prompt (tools/render.py) is what the parser of that format reads."""
    text = render_call("get_weather", '{"city": "Paris"}', name)
    assert whole(name, text).calls == [PARIS]


@given(cuts=st.lists(st.integers(min_value=0, max_value=100), max_size=8))
@settings(max_examples=80, deadline=None)
def test_reasoning_in_any_split(cuts: list[int]) -> None:
    for name, text, reasoning, content in [
        ("deepseek_r1", "<think>Hmm, </think maybe.</think>The answer.", "Hmm, </think maybe.", "The answer."),
        ("deepseek_r1", "Thinking without the opening tag</think>Done", "Thinking without the opening tag", "Done"),
        ("deepseek_r1", "Still thinking", "Still thinking", ""),
        ("qwen3", "<think>Plan.</think>\nResult", "Plan.", "\nResult"),
        ("qwen3", "Plan, then a call.<tool_call>{}", "Plan, then a call.", "<tool_call>{}"),
        ("qwen3", "A model that does not think", "A model that does not think", ""),
        ("qwen3 off", "<think>Tags and all</think>", "", "<think>Tags and all</think>"),
        ("deepseek_v3", "<think>Not asked to think</think>", "", "<think>Not asked to think</think>"),
    ]:
        name, _, off = name.partition(" ")
        parser = new_reasoning_parser(name, {"enable_thinking": False} if off else None)
        got_r, got_c = "", ""
        for chunk in [*split(text, cuts)]:
            r, c = parser.feed(chunk)
            got_r, got_c = got_r + r, got_c + c
        r, c = parser.finish()
        assert (got_r + r, got_c + c) == (reasoning, content), (name, text)


def test_cluster_yaml_names_every_parser_the_frontend_has() -> None:
    from typing import get_args

    from dynamo_lite.config.schema import ReasoningParserName, ToolCallParser
    from dynamo_lite.frontend import harmony
    from dynamo_lite.frontend.tools import REASONING_PARSER_NAMES, TOOL_PARSER_NAMES

    assert set(get_args(ToolCallParser)) == {*TOOL_PARSER_NAMES, harmony.TOOL_PARSER}
    assert set(get_args(ReasoningParserName)) == {*REASONING_PARSER_NAMES, harmony.REASONING_PARSER}


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
XML_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\n7\n</parameter>\n<parameter=days>\n3\n</parameter>" \
           "\n</function>\n</tool_call>"


@pytest.mark.parametrize(("model", "tool_choice", "kept"),
                         [({"tool_call_parser": "hermes"}, "auto", True), ({"tool_call_parser": "hermes"}, "none", False),
                          ({"tool_call_parser": "llama3_json"}, "auto", False),
                          ({"tool_call_parser": "qwen3_coder"}, "none", False),
                          ({"tool_call_parser": "qwen3_coder"}, "auto", True),
                          ({"reasoning_parser": "qwen3"}, "none", True),
                          ({"reasoning_parser": "deepseek_r1"}, "none", False),
                          ({"tool_call_parser": "kimi_k3"}, "auto", True), ({"reasoning_parser": "kimi_k3"}, "none", True),
                          ({"tool_call_parser": "kimi_k3"}, "none", False)])  # fmt: skip
async def test_markers_that_are_special_tokens_are_kept_in_the_engine_s_text(harness, model: dict[str, str],
                                                                             tool_choice: str, kept: bool) -> None:  # fmt: skip
    """As vLLM's parsers ask (`test_tool_parsers_vllm.py` holds the rule to vLLM's): the engine does not skip
    special tokens, which some models' markers are, when the parsers that read them run; Kimi K3's, made of
    several special tokens, are written without spaces between them too."""
    from tests.unit.frontend.conftest import Script, pieces

    h = await harness(model={**model, "max_model_len": 2048})
    h.add_worker("d0", script=Script(pieces(2, "stop")))
    resp = await h.client.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tools": [WEATHER],
        "tool_choice": tool_choice})  # fmt: skip
    assert resp.status == 200, await resp.text()
    assert h.engines.calls[0]["sampling"].skip_special_tokens is (False if kept else None)
    joined = kept and "kimi_k3" in model.values()
    assert h.engines.calls[0]["sampling"].spaces_between_special_tokens is (False if joined else None)


async def test_arguments_are_typed_by_the_request_s_tool_schema(harness) -> None:
    """qwen3_coder writes every argument as text; the answer's are typed by the tool's schema, as vLLM's."""
    from dynamo_lite.frontend.request import Piece
    from tests.unit.frontend.conftest import Script

    h = await harness(model={"tool_call_parser": "qwen3_coder"})
    h.add_worker("d0", script=Script([Piece(XML_CALL[:30], None, None), Piece(XML_CALL[30:], None, "stop")]))
    for stream in (False, True):
        resp = await h.client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "tools": [WEATHER],
            "stream": stream})  # fmt: skip
        assert resp.status == 200, await resp.text()
        if stream:
            chunks = [json.loads(line[6:]) for line in (await resp.text()).splitlines()
                      if line.startswith("data: {")]  # fmt: skip
            calls = [c for ch in chunks for d in ch["choices"] for c in d["delta"].get("tool_calls") or ()]
        else:
            calls = (await resp.json())["choices"][0]["message"]["tool_calls"]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            [("get_weather", {"city": "7", "days": 3})], stream


@pytest.mark.parametrize(("parser", "prompt", "opened"),
                         [("gemma4", "<|turn>user\nhi<|tool_response>r<|channel>thought\n", True),
                          ("gemma4", "<|turn>user\nhi<|turn>model\n", False),
                          ("deepseek_v3", "<|channel>thought\n", False)])  # fmt: skip
def test_the_prompt_tells_a_choice_whether_it_starts_in_reasoning(parser: str, prompt: str, opened: bool) -> None:
    from dynamo_lite.config.schema import ModelSpec
    from dynamo_lite.frontend import plan
    from dynamo_lite.frontend.choice import ChatChoice
    from dynamo_lite.frontend.schemas import ChatCompletionRequest

    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    opts = plan.chat_options(body, ModelSpec(name="m", path="x", reasoning_parser=parser), prompt)
    assert opts.reasoning_open is opened
    reasoner = ChatChoice(0, opts, str).reasoner
    assert reasoner is not None
    assert reasoner.feed("The answer.")[0] == ("The answer." if opened else "")


@pytest.mark.parametrize(("model", "thinking", "dropped"),
                         [({"reasoning_parser": "qwen3"}, True, True), ({"reasoning_parser": "qwen3"}, False, False),
                          ({"reasoning_parser": "deepseek_r1"}, True, False), ({}, True, False)])  # fmt: skip
async def test_special_tokens_leave_the_text_where_vllm_s_parser_engine_drops_them(
        harness, model: dict[str, str], thinking: bool, dropped: bool) -> None:  # fmt: skip
    """The engine keeps special tokens for vLLM's parser engine, which then drops those that are not its tags;
    other parsers leave them in, as vLLM's do."""
    from dynamo_lite.frontend.request import Piece
    from tests.unit.frontend.conftest import Script

    h = await harness(model={**model, "max_model_len": 2048})
    h.add_worker("d0", script=Script([Piece("<think>Plan.</think>", [1], None),
                                      Piece("An<|im_end|>swer.", [2, 3], "stop")]))  # fmt: skip
    resp = await h.client.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "chat_template_kwargs": {"enable_thinking": thinking}})  # fmt: skip
    message = (await resp.json())["choices"][0]["message"]
    text = (message.get("reasoning") or "") + "|" + message["content"]
    assert ("<|im_end|>" not in text) is dropped, text


HERMES_TWO = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n'
              '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>')


@pytest.mark.parametrize("parallel", [True, False])
async def test_hermes_arguments_stream_as_they_are_written(harness, parallel: bool) -> None:
    """A hermes call opens in the stream once its name is read, and its arguments follow as the engine writes them
    (an agent sees a long argument grow, not a silence), as vLLM streams them; they join into the whole answer's.
    With parallel_tool_calls false the second call is left out, pieces and all."""
    from dynamo_lite.frontend.request import Piece
    from tests.unit.frontend.conftest import Script

    h = await harness(model={"tool_call_parser": "hermes", "max_model_len": 2048})
    pieces = [Piece(HERMES_TWO[i:i + 4], None, None) for i in range(0, len(HERMES_TWO), 4)]
    h.add_worker("d0", script=Script([*pieces[:-1], Piece(pieces[-1].text, None, "stop")]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "tools": [WEATHER],
            "parallel_tool_calls": parallel}  # fmt: skip
    streamed = await h.client.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [json.loads(line[6:]) for line in (await streamed.text()).splitlines() if line.startswith("data: {")]
    deltas = [c for ch in chunks for d in ch["choices"] for c in d["delta"].get("tool_calls") or ()]
    opened = [d for d in deltas if "id" in d]
    assert [d["function"]["name"] for d in opened] == ["get_weather", "search"][:2 if parallel else 1]
    assert len(deltas) > 2 * len(opened)  # the arguments came in pieces
    joined: dict[int, str] = {}
    for d in deltas:
        joined[d["index"]] = joined.get(d["index"], "") + d["function"]["arguments"]
    expected = [{"city": "Paris", "days": 3}, {"q": "x"}][:2 if parallel else 1]
    assert [json.loads(joined[i]) for i in sorted(joined)] == expected
    assert [d["finish_reason"] for ch in chunks for d in ch["choices"] if d["finish_reason"]] == ["tool_calls"]


def test_llama3_arguments_stream_in_pieces_that_join_into_the_calls() -> None:
    from tests.unit.frontend.conftest import folded

    text = '<|python_tag|>{"name": "a", "parameters": {"x": [1, 2]}}; {"name": "b", "parameters": {}}'
    parser = new_tool_parser("llama3_json")
    pieces = [c for ch in text for c in parser.feed(ch).calls] + parser.finish().calls
    assert [(c.name, c.part) for c in pieces if c.part != "more"] == [("a", "open"), ("b", "open")]
    assert sum(c.part == "more" for c in pieces) > 5
    assert folded(pieces) == [ParsedCall("a", '{"x": [1, 2]}'), ParsedCall("b", "{}")]


@pytest.mark.parametrize("name", ["hermes", "llama3_json"])
def test_a_call_name_that_is_not_a_json_string_is_not_streamed(name: str) -> None:
    """A bad escape in the name (model output can be anything) neither breaks the stream nor opens a call."""
    opening = "<tool_call>" if name == "hermes" else ""
    parser = new_tool_parser(name)
    out = parser.feed(opening + '{"name": "a\\x", "arguments": {"q": 1')
    assert not out.calls
    out.add(parser.feed("}}"))
    out.add(parser.finish())
    assert not out.calls  # the whole call is not JSON either


@pytest.mark.parametrize("pieces", [["", "</mm:think>Ans"], ["</mm", ":think>", "Ans"], ["</mm:think>", "Ans"]])
def test_minimax_m3_s_stray_closer_is_dropped_however_the_output_is_cut(pieces: list[str]) -> None:
    """An empty first piece (a token that ends no character yet) or a closer cut in two still starts the output."""
    parser = new_reasoning_parser("minimax_m3", {})
    got = [parser.feed(p) for p in pieces] + [parser.finish()]
    assert ("".join(r for r, _ in got), "".join(c for _, c in got)) == ("", "Ans")


@pytest.mark.parametrize("name", ["hermes", "granite4", "ernie45"])
def test_text_after_a_section_that_is_no_call_is_not_held_back(name: str) -> None:
    """Once a `<tool_call>` section closes and is no call, the whole output is content (as vLLM's whole answer
    makes it): the section and what follows are sent as they come, not held to the end of the output."""
    parser = new_tool_parser(name)
    sent = parser.feed("Sure.<tool_call>\n{bad}\n</tool_call>\nMore")
    sent.add(parser.feed(' text.<tool_call>{"name": "f", "arguments": {}}</tool_call>'))
    assert sent.content == 'Sure.<tool_call>\n{bad}\n</tool_call>\nMore text.<tool_call>{"name": "f", "arguments": {}}' \
                           "</tool_call>" and not sent.calls  # fmt: skip
    assert parser.finish().content == ""


def test_gigachat3_arguments_stream_as_strict_json() -> None:
    """The call opens once its name is read and its arguments follow as written; a raw newline in a string (which
    vLLM's parser reads) is sent escaped, so the pieces join into JSON a client reads."""
    from tests.unit.frontend.conftest import folded

    text = '<|function_call|>{"name": "search", "arguments": {"q": "two\nlines", "n": [1, 2]}}'
    parser = new_tool_parser("gigachat3")
    pieces = [c for ch in text for c in parser.feed(ch).calls] + parser.finish().calls
    assert [(c.name, c.part) for c in pieces if c.part != "more"] == [("search", "open")]
    assert sum(c.part == "more" for c in pieces) > 5
    assert json.loads("".join(c.arguments for c in pieces)) == {"q": "two\nlines", "n": [1, 2]}
    assert folded(pieces) == [ParsedCall("search", '{"q": "two\\nlines", "n": [1, 2]}')]


def test_dots_types_parameters_through_the_schema_s_defs() -> None:
    """As vLLM's dots parser: a `$ref` to the parameters' `$defs`, the first non-null anyOf alternative."""
    tools = {"f": {"where": {"$ref": "#/$defs/Place"}, "n": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                   "s": {"type": ["null", "string"]}}}  # fmt: skip
    parser = new_tool_parser("dots", tools, {"f": {"Place": {"type": "object"}}})
    out = parser.feed('<dots_function_call><invoke name="f"><parameter name="where">{"lat": 1}</parameter>'
                      '<parameter name="n">7</parameter><parameter name="s">7</parameter></invoke>'
                      "</dots_function_call>")  # fmt: skip
    out.add(parser.finish())
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [("f", {"where": {"lat": 1}, "n": 7, "s": "7"})]
    assert not new_tool_parser("dots").feed('<dots_function_call>{"name": "f"}</dots_function_call>').calls
