"""The structural tags of the DeepSeek formats (R1, V3.1, V3.2, V4, V4.1) and Kimi-K2, xgrammar's builtin builders
as vLLM calls them: reasoning disabled, parallel calls (vLLM's `single_call` stops them after the first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dynamo_lite.frontend.tool_tags.shapes import (Choice, Fn, Shape, any_text, const, json_schema, regex,
                                                   separated, sequence, tag, triggered)  # fmt: skip

Builder = Callable[[Sequence[Fn], Choice], Shape]
THINK = ("<think>", "</think>")
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _block(calls: list[Shape], choice: Choice, begin: str, end: str, sep: str = "", *, trigger: str | None = None,
           lead: str = "", one_tag: bool = False, excludes: Sequence[str] = THINK,
           idle: Sequence[str] = THINK) -> Shape:  # fmt: skip
    """The calls, joined by `sep`, between `begin` and `end`. auto: any text (excluding `excludes`; `idle` when
    there is no call) where `trigger` (default `begin`) starts the block; required / forced (the first call only):
    only the block, after `lead`. `one_tag`: the block is a single tag, a named call's tag merged into it."""
    if choice == "auto":
        if not calls:
            return any_text(idle)
        return triggered([trigger or begin], [tag(begin, separated(calls, sep), end)], excludes)
    if one_tag:
        if choice == "forced":
            return tag(begin + calls[0]["begin"], calls[0]["content"], calls[0]["end"] + end)
        return tag(begin, separated(calls, sep), end)
    return sequence(const(lead + begin), calls[0] if choice == "forced" else separated(calls, sep), const(end))


def deepseek_r1(tools: Sequence[Fn], choice: Choice) -> Shape:
    """<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>
    (calls joined by "\\n")<｜tool▁calls▁end｜>, after any text."""
    calls = [tag(f"{CALL_BEGIN}function{SEP}{t.name}\n```json\n", json_schema(t.arguments), "\n```" + CALL_END)
             for t in tools]  # fmt: skip
    return _block(calls, choice, CALLS_BEGIN, CALLS_END, "\n", one_tag=True)


def deepseek_v3_1(tools: Sequence[Fn], choice: Choice) -> Shape:
    """<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>,
    after any text."""
    calls = [tag(CALL_BEGIN + t.name + SEP, json_schema(t.arguments), CALL_END) for t in tools]
    return _block(calls, choice, CALLS_BEGIN, CALLS_END, one_tag=True)


def dsml(invoke: str, block: str, style: str, closed: bool = False) -> Builder:
    """<｜DSML｜`block`>\\n<｜DSML｜`invoke` name="NAME">\\n(the arguments in `style`)</｜DSML｜`invoke`>\\n...
    </｜DSML｜`block`>, after any text (required / named: after "\\n\\n"). `closed`: with no tool, the text may not
    start a block."""

    def build(tools: Sequence[Fn], choice: Choice) -> Shape:
        calls = [tag(f'<｜DSML｜{invoke} name="{t.name}">\n', json_schema(t.arguments, style), f"</｜DSML｜{invoke}>\n")
                 for t in tools]  # fmt: skip
        trigger = f"<｜DSML｜{block}>"
        return _block(calls, choice, trigger + "\n", f"</｜DSML｜{block}>", trigger=trigger, lead="\n\n",
                      idle=(*THINK, trigger) if closed else THINK)  # fmt: skip

    return build


def kimi(tools: Sequence[Fn], choice: Choice) -> Shape:
    """<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}
    <|tool_call_end|>...<|tool_calls_section_end|>, after any text (that does not start a lone call)."""
    calls = [tag(f"<|tool_call_begin|>functions.{t.name}:", sequence(regex(r"\d+"),
                 const("<|tool_call_argument_begin|>"), json_schema(t.arguments)), "<|tool_call_end|>")
             for t in tools]  # fmt: skip
    return _block(calls, choice, "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                  excludes=(*THINK, "<|tool_call_begin|>"))  # fmt: skip


BUILDERS: dict[str, Builder] = {
    "deepseek_r1": deepseek_r1,
    "deepseek_v3_1": deepseek_v3_1,
    "deepseek_v3_2": dsml("invoke", "function_calls", "deepseek_xml"),
    "deepseek_v4": dsml("invoke", "tool_calls", "deepseek_xml"),
    "deepseek_v4_1": dsml(" invoke", " calls", "deepseek_v4_1_xml", closed=True),
    "kimi": kimi,
}
