"""Reasoning parsers: the `<think>` ... `</think>` part of the output is `reasoning`, the rest content.

- deepseek_r1: the template opens `<think>` in the prompt, so output is reasoning until
  `</think>` (a leading `<think>` is dropped); without `</think>`, all of it is reasoning.
- qwen3: reasoning only when the output opens with `<think>`; otherwise all is content.
"""

from __future__ import annotations

from dynamo_lite.frontend.tools.base import partial_marker

START, END = "<think>", "</think>"


class ReasoningParser:
    """Fed output deltas; returns (reasoning, content) per delta. One per choice of a request."""

    starts_inside = True

    def __init__(self) -> None:
        self._held = ""
        self._state = "start"  # start -> reasoning -> content

    def feed(self, text: str) -> tuple[str, str]:
        text = self._held + text
        self._held = ""
        reasoning = ""
        if self._state == "start":
            stripped = text.lstrip()
            if not stripped or (START.startswith(stripped) and stripped != START):
                self._held = text
                return "", ""
            if stripped.startswith(START):
                text, self._state = stripped[len(START):], "reasoning"
            elif self.starts_inside:
                self._state = "reasoning"
            else:
                self._state = "content"
        if self._state == "reasoning":
            end = text.find(END)
            if end < 0:
                keep = partial_marker(text, (END,))
                self._held = text[len(text) - keep:]
                return text[: len(text) - keep], ""
            reasoning, text = text[:end], text[end + len(END):]
            self._state = "content"
        return reasoning, text

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        return (held, "") if self._state == "reasoning" else ("", held)


class Qwen3ReasoningParser(ReasoningParser):
    starts_inside = False


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {"deepseek_r1": ReasoningParser, "qwen3": Qwen3ReasoningParser}


def new_reasoning_parser(name: str) -> ReasoningParser:
    return REASONING_PARSERS[name]()
