"""Reasoning parsers: the thinking part of the output is `reasoning`, the rest content, as vLLM 0.32's
parsers of the same names split it.

A thinking model's template opens `<think>` in the prompt, so the output is reasoning until `</think>`
(a leading `<think>` is dropped; without `</think>`, all of it is reasoning). Whether the request
thinks at all is read from its `chat_template_kwargs`, per family, as vLLM reads it:

- deepseek_r1, minimax_m2: always.
- qwen3: unless `enable_thinking` is false; a `<tool_call>` ends the reasoning too.
- glm45, glm47: unless `thinking` / `enable_thinking` say no (neither true); a `<tool_call>` ends it too.
- kimi_k2: as glm45, with `<|tool_calls_section_begin|>`.
- seed_oss: as qwen3, with `<seed:think>` ... `</seed:think>` and `<seed:tool_call>`.
- deepseek_v3: only when `thinking` or `enable_thinking` is true.

Not thinking, all of the output is content, tags and all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynamo_lite.frontend.tools.base import partial_marker


class ReasoningParser:
    """Fed output deltas; returns (reasoning, content) per delta. One per choice of a request."""

    START, END = "<think>", "</think>"
    ENDS_AT: tuple[str, ...] = ()  # tool-call openings that end the reasoning; they stay in the content

    def __init__(self, thinking: bool = True) -> None:
        self._held = ""
        self._state = "start" if thinking else "content"  # start -> reasoning -> content

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        """Whether a request with these chat_template_kwargs thinks."""
        return True

    def feed(self, text: str) -> tuple[str, str]:
        text = self._held + text
        self._held = ""
        reasoning = ""
        if self._state == "start":
            stripped = text.lstrip()
            if not stripped or (self.START.startswith(stripped) and stripped != self.START):
                self._held = text
                return "", ""
            if stripped.startswith(self.START):
                text = stripped[len(self.START):]
            self._state = "reasoning"
        if self._state == "reasoning":
            hit = min(((i, m) for m in (self.END, *self.ENDS_AT) if (i := text.find(m)) >= 0), default=None)
            if hit is None:
                keep = partial_marker(text, (self.END, *self.ENDS_AT))
                self._held = text[len(text) - keep:]
                return text[: len(text) - keep], ""
            at, marker = hit
            reasoning, text = text[:at], text[at + len(marker):] if marker == self.END else text[at:]
            self._state = "content"
        return reasoning, text

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        return (held, "") if self._state != "content" else ("", held)


class Qwen3ReasoningParser(ReasoningParser):
    ENDS_AT = ("<tool_call>",)

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("enable_thinking", True))


class SeedOssReasoningParser(Qwen3ReasoningParser):
    START, END = "<seed:think>", "</seed:think>"
    ENDS_AT = ("<seed:tool_call>",)


class Glm45ReasoningParser(ReasoningParser):
    ENDS_AT = ("<tool_call>",)

    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        said = [kwargs[k] for k in ("thinking", "enable_thinking") if kwargs.get(k) is not None]
        return any(said) if said else True


class KimiK2ReasoningParser(Glm45ReasoningParser):
    ENDS_AT = ("<|tool_calls_section_begin|>",)


class DeepSeekV3ReasoningParser(ReasoningParser):
    @staticmethod
    def thinks(kwargs: Mapping[str, Any]) -> bool:
        return bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking"))


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {  # vLLM's --reasoning-parser names
    "deepseek_r1": ReasoningParser,
    "minimax_m2": ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
    "glm45": Glm45ReasoningParser,
    "glm47": Glm45ReasoningParser,
    "seed_oss": SeedOssReasoningParser,
    "kimi_k2": KimiK2ReasoningParser,
    "deepseek_v3": DeepSeekV3ReasoningParser,
}


def new_reasoning_parser(name: str, chat_template_kwargs: Mapping[str, Any] | None = None) -> ReasoningParser:
    """A fresh parser (one per choice of a request), thinking or not as the request's kwargs say."""
    kind = REASONING_PARSERS[name]
    return kind(kind.thinks(chat_template_kwargs or {}))
