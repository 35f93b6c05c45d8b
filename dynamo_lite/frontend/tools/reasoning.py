"""Reasoning parsers: the thinking part of the output is `reasoning`, the rest content, as vLLM 0.32's
parsers of the same names split it.

A thinking model's template opens `<think>` in the prompt, so the output is reasoning until `</think>`
(without `</think>`, all of it is reasoning). Whether the request thinks at all is read from its
`chat_template_kwargs`, per family, as vLLM reads it:

- deepseek_r1, olmo3, minimax_m2, step3p5: always.
- qwen3, nemotron_v3, mimo: unless `enable_thinking` is false.
- glm45, glm47, kimi_k2: unless `thinking` / `enable_thinking` say no (neither true).
- seed_oss: as qwen3, with `<seed:think>` ... `</seed:think>`.
- deepseek_v3: only when `thinking` or `enable_thinking` is true.
- deepseek_v4, deepseek_v41: as glm45, and not when `reasoning_effort` is none.
- gemma4: `<|channel>thought` ... `<channel|>`, wherever the model opens it (see its class).
- mistral: `[THINK]` ... `[/THINK]`, wherever the model opens it.
- kimi_k3: `<|open|>think<|sep|>` ... `<|close|>think<|sep|>` unless `thinking` (else `enable_thinking`) is false;
  its content is the response channel's text.
- holo2: as deepseek_v3, thinking when neither `thinking` nor `enable_thinking` is given.
- step3: always; up to the first `</think>`, a `<think>` being text.
- minimax_m2_append_think: never; the content starts with the `<think>` the prompt opened.

gemma4, kimi_k3, minimax_m3, step3 and minimax_m2_append_think are in reasoning_own.py, with the table of all
(`REASONING_PARSERS`).

Not thinking, all of the output is content, tags and all (deepseek_v4: a `<think>` there still opens
reasoning). The families vLLM parses with its parser engine (all but deepseek_r1, olmo3 and deepseek_v3) run one
machine: a `<think>` inside reasoning and a `</think>` inside content are dropped; the family's tool-call
opening (`ENDS_AT`) also ends reasoning and stays in the content; glm45, deepseek_v4, gemma4 and mistral go
back to reasoning on an opening tag in the content; and the white space that ends all of the reasoning is
dropped (`STRIP`), but for qwen3 and seed_oss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynamo_lite.frontend.tools.base import partial_marker


class ReasoningParser:
    """Fed output deltas; returns (reasoning, content) per delta. One per choice of a request.

    This base is deepseek_r1's: a leading `<think>` is dropped, the first `</think>` ends the reasoning,
    and any later tag is text."""

    START, END = "<think>", "</think>"
    ENDS_AT: tuple[str, ...] = ()  # tool-call openings that end the reasoning; they stay in the content
    TAGS: tuple[str, ...] = ()  # the other tags vLLM's parser of the family knows (its tool-call closing)
    ENGINE = False  # vLLM's parser engine: stray tags dropped (a START in reasoning, an END in content)
    REENTERS = False  # a START in the content opens reasoning again
    STRIP = False  # the white space that ends all of the reasoning is dropped
    OFF_STILL_PARSES = False  # not thinking, the output is still parsed (from content), not passed as it is
    KEEPS_SPECIAL = False  # vLLM's parser asks the engine to keep special tokens, off its parser engine too
    COUNT = "between"  # how vLLM counts the reasoning tokens (reasoning_count.py): between, read, until, kimi_k3, none
    COUNT_INSIDE = False  # thinking, the count starts inside the reasoning ("between", "kimi_k3")
    COUNT_ONLY_THINKING = False  # not thinking, vLLM counts none
    COUNT_TAGS: tuple[str, ...] = ()  # the tags the count walks, if not (START, END)
    FORCES: str | None = None  # content a request may force (`forces`): "blank" or "absent" content is swapped
    GATE_UNTHINKING = False  # vLLM's engine gate, built without the request's kwargs, never thinks (plan.py)
    forced = False  # the request forces content (set by `new_reasoning_parser`)

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        """`opened`: the prompt left the reasoning open (`opened_by`), so the output starts in it."""
        self.thinking = thinking
        self._held = ""  # text that may be the start of a marker
        self._space = ""  # the reasoning's trailing white space, held while STRIP
        if opened:
            self._state = "reasoning"
        elif thinking:
            self._state = "reasoning" if self.ENGINE else "start"
        else:
            self._state = "content" if self.OFF_STILL_PARSES else "plain"

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        """Whether a request with these chat_template_kwargs thinks."""
        return True

    @classmethod
    def opened_by(cls, prompt: str) -> bool:
        """Whether the rendered prompt leaves the reasoning open, whatever the kwargs (gemma4's only)."""
        return False

    @classmethod
    def forces(cls, kwargs: Mapping[str, Any]) -> bool:
        """Whether a request with these chat_template_kwargs forces content (nemotron_v3's and Granite 4.2's
        `enable_thinking` false or `force_nonempty_content` true)."""
        return cls.FORCES is not None and (kwargs.get("enable_thinking") is False
                                           or kwargs.get("force_nonempty_content") is True)  # fmt: skip

    def promoted(self) -> str:
        """A forced stream's last content: all of its reasoning, if the reasoning never ended."""
        return ""

    def swapped(self) -> str | None:
        """A forced whole answer's content, when vLLM swaps it with the reasoning (None: no swap)."""
        return None

    @staticmethod
    def always_thinks(chat_template: str) -> bool:
        """Whether the model's chat template always thinks, whatever the kwargs say (GLM-5.3's, under glm45)."""
        return False

    @property
    def reasoning_now(self) -> bool | None:
        """Whether the output read so far ends in reasoning (None: not known yet)."""
        return self._state in ("start", "reasoning")

    @property
    def began(self) -> bool | None:
        """Where reasoning_now was not known: whether the output began in reasoning, once known (gemma4's)."""
        return None

    @classmethod
    def tags(cls) -> frozenset[str]:
        """The family's literal tags: kept where the text of other special tokens is dropped."""
        return frozenset((cls.START, cls.END, *cls.ENDS_AT, *cls.TAGS))

    def feed(self, text: str) -> tuple[str, str]:
        text, self._held = self._held + text, ""
        reasoning, content = "", ""
        while text:
            if self._state == "plain":
                return reasoning, content + text
            if self._state == "start":
                stripped = text.lstrip()
                if not stripped or (self.START.startswith(stripped) and stripped != self.START):
                    self._held = text
                    break
                text = stripped[len(self.START):] if stripped.startswith(self.START) else text
                self._state = "reasoning"
                continue
            markers = self._markers()
            hit = min(((i, m) for m in markers if (i := text.find(m)) >= 0), default=None)
            if hit is None:
                keep = partial_marker(text, markers)
                self._held, text = text[len(text) - keep:], text[: len(text) - keep]
                if self._state == "reasoning":
                    reasoning += self._reason(text)
                else:
                    content += text
                break
            at, marker = hit
            if self._state == "reasoning":
                reasoning += self._reason(text[:at])
                if marker != self.START:
                    self._state = "content"
            else:
                content += text[:at]
                if marker == self.START:
                    self._state = "reasoning"
            text = text[at:] if marker in self.ENDS_AT else text[at + len(marker):]
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        reasoning = self._reason(held) if self._state in ("start", "reasoning") else ""
        self._space = ""
        return (reasoning, "") if self._state in ("start", "reasoning") else ("", held)

    def _markers(self) -> tuple[str, ...]:
        if self._state == "reasoning":
            return (self.END, *self.ENDS_AT, *((self.START,) if self.ENGINE else ()))
        return (*((self.END,) if self.ENGINE else ()), *((self.START,) if self.REENTERS else ()))

    def _reason(self, text: str) -> str:
        """Reasoning text out; while STRIP, its trailing white space is held back: sent before more reasoning,
        dropped at the end of the output (so only the white space that ends all of the reasoning goes)."""
        if not self.STRIP:
            return text
        text, self._space = self._space + text, ""
        body = text.rstrip()
        self._space = text[len(body):]
        return body


class EngineReasoningParser(ReasoningParser):
    COUNT = "read"
    ENGINE = True
    STRIP = True


class MiniMaxM2ReasoningParser(EngineReasoningParser):
    ENDS_AT, TAGS = ("<minimax:tool_call>",), ("</minimax:tool_call>",)


class Qwen3ReasoningParser(EngineReasoningParser):
    ENDS_AT, TAGS = ("<tool_call>",), ("</tool_call>",)
    STRIP = False

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("enable_thinking", True))


class NemotronV3ReasoningParser(Qwen3ReasoningParser):
    """As qwen3's, but a request that forces content (`forces`) gets it: a whole answer whose content is blank
    (FORCES "blank"; Granite 4.2's: absent) has reasoning and content swapped, and a stream whose reasoning never
    ended gets all of it again as content at the end, as vLLM's nemotron_v3 gives them."""

    STRIP = True
    FORCES = "blank"

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._reasoned: list[str] = []  # while forced
        self._said = ""  # the content so far, up to its first character that is not white space (while forced)

    def feed(self, text: str) -> tuple[str, str]:
        return self._seen(*super().feed(text))

    def finish(self) -> tuple[str, str]:
        return self._seen(*super().finish())

    def promoted(self) -> str:
        return "".join(self._reasoned) if self.forced and self.reasoning_now else ""

    def swapped(self) -> str | None:
        blank = not self._said.strip() if self.FORCES == "blank" else not self._said
        return "".join(self._reasoned) if self.forced and blank else None

    def _seen(self, reasoning: str, content: str) -> tuple[str, str]:
        if self.forced:
            self._reasoned.append(reasoning)
            if not self._said.strip():
                self._said += content
        return reasoning, content


class GraniteThinkingReasoningParser(NemotronV3ReasoningParser):
    """Granite 4.2 (vLLM's granite_thinking_parser): nemotron_v3's, with the newlines that open the content
    dropped (its template writes `\\n</think>\\n`). Forced, a whole answer is swapped only when it has no content,
    and a stream gets its reasoning as content unless the content began (vLLM ends the reasoning only then)."""

    FORCES = "absent"

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._begun = False  # the content has begun (its first character that is not a newline)

    def promoted(self) -> str:
        return "".join(self._reasoned) if self.forced and not self._begun else ""

    def _seen(self, reasoning: str, content: str) -> tuple[str, str]:
        reasoning, content = super()._seen(reasoning, content)
        if not self._begun:
            content = content.lstrip("\n")
            self._begun = bool(content)
        return reasoning, content


class Step3p5ReasoningParser(Qwen3ReasoningParser):
    STRIP = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return True  # its template always opens `<think>`


class SeedOssReasoningParser(Qwen3ReasoningParser):
    START, END = "<seed:think>", "</seed:think>"
    ENDS_AT, TAGS = ("<seed:tool_call>",), ("</seed:tool_call>",)


class _Switched(EngineReasoningParser):
    """Thinking unless `thinking` / `enable_thinking` say no (neither true)."""

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        said = [kwargs[k] for k in ("thinking", "enable_thinking") if kwargs.get(k) is not None]
        return any(said) if said else True


class Glm45ReasoningParser(_Switched):
    ENDS_AT, TAGS = ("<tool_call>",), ("</tool_call>",)
    REENTERS = True

    @staticmethod
    def always_thinks(chat_template: str) -> bool:
        """GLM-5.3: GLM-4's format with a "Reasoning Effort:" header in place of the thinking switch (vLLM's
        test of the template)."""
        return all(s in chat_template for s in ("[gMASK]<sop>", "Reasoning Effort:", "<tool_call>", "<arg_key>",
                                                "<arg_value>")) and "enable_thinking" not in chat_template  # fmt: skip


class KimiK2ReasoningParser(_Switched):
    ENDS_AT, TAGS = ("<|tool_calls_section_begin|>",), ("<|tool_calls_section_end|>",)


class DeepSeekV4ReasoningParser(_Switched):
    ENDS_AT, TAGS = ("<｜DSML｜tool_calls>", "<｜DSML｜toolcalls>", "<｜DSML｜tool>"), ("</｜DSML｜tool_calls>",)
    REENTERS = True
    OFF_STILL_PARSES = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return _Switched.thinks(kwargs) and kwargs.get("reasoning_effort") != "none"


class DeepSeekV41ReasoningParser(DeepSeekV4ReasoningParser):
    ENDS_AT, TAGS = ("<｜DSML｜ calls>",), ("</｜DSML｜ calls>",)


class MistralReasoningParser(EngineReasoningParser):
    """Magistral: `[THINK]` ... `[/THINK]` wherever the model opens it (from content, whatever the kwargs), as
    vLLM reads a vocabulary that has `[THINK]`."""

    START, END = "[THINK]", "[/THINK]"
    ENDS_AT, TAGS = ("[TOOL_CALLS]",), ("[ARGS]",)
    REENTERS = True
    OFF_STILL_PARSES = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return False  # it opens its reasoning itself


class Olmo3ReasoningParser(ReasoningParser):
    COUNT = "none"  # vLLM's parser counts none


class DeepSeekV3ReasoningParser(ReasoningParser):
    COUNT_ONLY_THINKING = True
    GATE_UNTHINKING = True  # (vLLM's parser without kwargs is its identity parser, whose reasoning has ended)

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking"))


class Holo2ReasoningParser(DeepSeekV3ReasoningParser):
    """deepseek_v3's, thinking unless `thinking` and `enable_thinking` are both unset or false (both unset: thinking)."""

    GATE_UNTHINKING = False

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        said = [kwargs.get(k) for k in ("thinking", "enable_thinking")]
        return any(said) if said != [None, None] else True
