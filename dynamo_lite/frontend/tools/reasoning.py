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
from dynamo_lite.frontend.tools.kimi_k3 import Unwrapper


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
    COUNT = "between"  # how vLLM counts the reasoning tokens (reasoning_count.py): between, read, kimi_k3, none
    COUNT_INSIDE = False  # thinking, the count starts inside the reasoning ("between", "kimi_k3")
    COUNT_ONLY_THINKING = False  # not thinking, vLLM counts none
    COUNT_MORE: tuple[str, ...] = ()  # the tags the count walks after START and END (kimi_k3's)

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

    @staticmethod
    def always_thinks(chat_template: str) -> bool:
        """Whether the model's chat template always thinks, whatever the kwargs say (GLM-5.3's, under glm45)."""
        return False

    @property
    def reasoning_now(self) -> bool | None:
        """Whether the output read so far ends in reasoning (None: not known yet)."""
        return self._state in ("start", "reasoning")

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


class _Engine(ReasoningParser):
    COUNT = "read"
    ENGINE = True
    STRIP = True


class MiniMaxM2ReasoningParser(_Engine):
    ENDS_AT, TAGS = ("<minimax:tool_call>",), ("</minimax:tool_call>",)


class Qwen3ReasoningParser(_Engine):
    ENDS_AT, TAGS = ("<tool_call>",), ("</tool_call>",)
    STRIP = False

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("enable_thinking", True))


class NemotronV3ReasoningParser(Qwen3ReasoningParser):
    STRIP = True


class Step3p5ReasoningParser(Qwen3ReasoningParser):
    STRIP = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return True  # its template always opens `<think>`


class SeedOssReasoningParser(Qwen3ReasoningParser):
    START, END = "<seed:think>", "</seed:think>"
    ENDS_AT, TAGS = ("<seed:tool_call>",), ("</seed:tool_call>",)


class _Switched(_Engine):
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


class MistralReasoningParser(_Engine):
    """Magistral: `[THINK]` ... `[/THINK]` wherever the model opens it (from content, whatever the kwargs), as
    vLLM reads a vocabulary that has `[THINK]`."""

    START, END = "[THINK]", "[/THINK]"
    ENDS_AT, TAGS = ("[TOOL_CALLS]",), ("[ARGS]",)
    REENTERS = True
    OFF_STILL_PARSES = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return False  # it opens its reasoning itself


class Gemma4ReasoningParser(_Engine):
    """Gemma 4: `<|channel>thought\n` ... `<channel|>`, from content whatever the kwargs; the `thought` label is
    dropped. As vLLM's, the output begins in reasoning when the prompt leaves a channel open (`opened_by`), or
    when its first piece starts with the label or closes a channel it never opened."""

    START, END = "<|channel>", "<channel|>"
    ENDS_AT, TAGS = ("<|tool_call>",), ("<tool_call|>", '<|"|>')
    REENTERS = True
    OFF_STILL_PARSES = True
    LABEL = "thought\n"
    BOUNDARIES = ("<channel|>", "<|tool_call>", "<|turn>", "<|tool_response>")

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking=False, opened=opened)  # from content, whatever the kwargs say
        self._first: str | None = None if opened else ""  # the first piece while it may be the label; None: decided
        self._label: str | None = ""  # the first reasoning, while it may be the label; None once decided

    @classmethod
    def opened_by(cls, prompt: str) -> bool:
        """A `<|channel>` after the last closing, tool call or turn (the template continues a thought after a
        tool's answer), as vLLM reads the prompt's tokens."""
        return prompt.rfind(cls.START) > max(prompt.rfind(b) for b in cls.BOUNDARIES)

    def feed(self, text: str) -> tuple[str, str]:
        if self._first is not None:
            text = self._first + text
            if self.LABEL.startswith(text) and text != self.LABEL:
                self._first = text
                return "", ""
            self._first = None
            if text.startswith(self.LABEL) or (self.END in text and self.START not in text):
                text = self.START + text
        reasoning, content = super().feed(text)
        return self._unlabel(reasoning, ended=self._state != "reasoning"), content

    @property
    def reasoning_now(self) -> bool | None:
        return None if self._first is not None else super().reasoning_now

    def finish(self) -> tuple[str, str]:
        if self._first:  # the whole output is a piece of the label
            first, self._first = self._first, None
            return ("", "") if first == self.LABEL.rstrip() else ("", first)
        reasoning, content = super().finish()
        return self._unlabel(reasoning, ended=True), content

    def _unlabel(self, reasoning: str, ended: bool) -> str:
        if self._label is None:
            return reasoning
        text = self._label + reasoning
        if not text or (not ended and self.LABEL.startswith(text)):
            self._label = text
            return ""
        self._label = None
        if text.startswith(self.LABEL):
            return text[len(self.LABEL):]
        return "" if ended and text == self.LABEL.rstrip() else text


class KimiK3ReasoningParser(ReasoningParser):
    """Kimi K3: `<|open|>think<|sep|>` ... `<|close|>think<|sep|>` (as deepseek_r1's machine), unless `thinking` (or
    else `enable_thinking`) is false; the content is the response channel's text, without its markers."""

    START, END = "<|open|>think<|sep|>", "<|close|>think<|sep|>"
    COUNT, COUNT_INSIDE, COUNT_ONLY_THINKING, COUNT_MORE = "kimi_k3", True, True, ("<|open|>response<|sep|>",)
    KEEPS_SPECIAL = True

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._unwrap = Unwrapper()

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        thinking = kwargs.get("thinking")
        return bool(kwargs.get("enable_thinking", True) if thinking is None else thinking)

    def feed(self, text: str) -> tuple[str, str]:
        reasoning, content = super().feed(text)
        return reasoning, self._unwrap.feed(content)

    def finish(self) -> tuple[str, str]:
        reasoning, content = super().finish()
        return reasoning, self._unwrap.feed(content) + self._unwrap.finish()


class MiniMaxM3ReasoningParser(ReasoningParser):
    """MiniMax M3: `<mm:think>` ... `</mm:think>`; the output starts in it when the request's `thinking_mode` is
    enabled (the template opens it), else the model may open it anywhere. A `</mm:think>` opening the output
    of a request that does not think is dropped."""

    START, END = "<mm:think>", "</mm:think>"
    COUNT_INSIDE = True
    REENTERS = True
    OFF_STILL_PARSES = True

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._opening: str | None = None if thinking or opened else ""  # the output so far, while it may be the closer

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return kwargs.get("thinking_mode") == "enabled"

    def feed(self, text: str) -> tuple[str, str]:
        if self._opening is not None:
            text = self._opening + text
            if self.END.startswith(text) and text != self.END:
                self._opening = text
                return "", ""
            self._opening, text = None, text.removeprefix(self.END)
        return super().feed(text)

    def finish(self) -> tuple[str, str]:
        opening, self._opening = self._opening or "", None
        reasoning, content = super().feed(opening) if opening else ("", "")
        rest = super().finish()
        return reasoning + rest[0], content + rest[1]


class Olmo3ReasoningParser(ReasoningParser):
    COUNT = "none"  # vLLM's parser counts none


class DeepSeekV3ReasoningParser(ReasoningParser):
    COUNT_ONLY_THINKING = True

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking"))


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {  # vLLM's --reasoning-parser names
    "deepseek_r1": ReasoningParser,
    "minimax_m2": MiniMaxM2ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
    "nemotron_v3": NemotronV3ReasoningParser,
    "step3p5": Step3p5ReasoningParser,
    "glm45": Glm45ReasoningParser,
    "glm47": Glm45ReasoningParser,
    "seed_oss": SeedOssReasoningParser,
    "kimi_k2": KimiK2ReasoningParser,
    "deepseek_v3": DeepSeekV3ReasoningParser,
    "deepseek_v4": DeepSeekV4ReasoningParser,
    "deepseek_v41": DeepSeekV41ReasoningParser,
    "gemma4": Gemma4ReasoningParser,
    "mistral": MistralReasoningParser,
    "mimo": Qwen3ReasoningParser,
    "olmo3": Olmo3ReasoningParser,
    "ling3": Glm45ReasoningParser,
    "kimi_k3": KimiK3ReasoningParser,
    "minimax_m3": MiniMaxM3ReasoningParser,
}


def new_reasoning_parser(name: str, chat_template_kwargs: Mapping[str, Any] | None = None,
                         opened: bool = False) -> ReasoningParser:  # fmt: skip
    """A fresh parser (one per choice of a request), thinking or not as the request's kwargs say; `opened`: the
    prompt left the reasoning open (`opened_by`)."""
    kind = REASONING_PARSERS[name]
    return kind(kind.thinks(chat_template_kwargs or {}), opened)
