"""The reasoning parsers with machinery of their own (reasoning.py has the rest): gemma4's label, Kimi K3's
channels, MiniMax M3's closer, Step3's single `</think>`, MiniMax M2's reasoning kept in the content; and the
table of every reasoning parser by vLLM 0.32's name (`REASONING_PARSERS`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dynamo_lite.frontend.tools.kimi_k3 import Unwrapper
from dynamo_lite.frontend.tools.reasoning import (DeepSeekV3ReasoningParser, DeepSeekV4ReasoningParser,
                                                  DeepSeekV41ReasoningParser, Glm45ReasoningParser,
                                                  GraniteThinkingReasoningParser,
                                                  Holo2ReasoningParser, KimiK2ReasoningParser,
                                                  MiniMaxM2ReasoningParser, MistralReasoningParser,
                                                  NemotronV3ReasoningParser, Olmo3ReasoningParser,
                                                  Qwen3ReasoningParser, ReasoningParser, SeedOssReasoningParser,
                                                  Step3p5ReasoningParser, EngineReasoningParser)  # fmt: skip
from dynamo_lite.frontend.tools.reasoning_text import (Ernie45ReasoningParser, GraniteReasoningParser,
                                                       HunyuanA13BReasoningParser)  # fmt: skip


class Gemma4ReasoningParser(EngineReasoningParser):
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
        self._began: bool | None = True if opened else None

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
            self._began = text.startswith(self.LABEL) or (self.END in text and self.START not in text)
            if self._began:
                text = self.START + text
        reasoning, content = super().feed(text)
        return self._unlabel(reasoning, ended=self._state != "reasoning"), content

    @property
    def reasoning_now(self) -> bool | None:
        return None if self._first is not None else super().reasoning_now

    @property
    def began(self) -> bool | None:
        return self._began

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
    COUNT, COUNT_INSIDE, COUNT_ONLY_THINKING = "kimi_k3", True, True
    COUNT_TAGS = (START, END, "<|open|>response<|sep|>")
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


class Step3ReasoningParser(ReasoningParser):
    """Step3: reasoning up to the first `</think>` (a `<think>` is text), the rest content, whatever the kwargs."""

    COUNT, COUNT_INSIDE, COUNT_TAGS = "until", True, ("</think>",)

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking=True, opened=True)


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    """MiniMax M2 with its reasoning kept in the content: all of the output is content, after a `<think>` (which
    the template wrote in the prompt), as vLLM's minimax_m2_append_think gives it."""

    COUNT = "none"

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking=False, opened=False)
        self._first = True

    def feed(self, text: str) -> tuple[str, str]:
        first, self._first = self._first, False
        return "", "<think>" + text if first else text


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
    "step3": Step3ReasoningParser,
    "minimax_m2_append_think": MiniMaxM2AppendThinkReasoningParser,
    "holo2": Holo2ReasoningParser,
    "poolside_v1": DeepSeekV3ReasoningParser,  # (vLLM's differs in reading the prompt only)
    "granite_thinking_parser": GraniteThinkingReasoningParser,
    "granite": GraniteReasoningParser,
    "hunyuan_a13b": HunyuanA13BReasoningParser,
    "ernie45": Ernie45ReasoningParser,
}


# The tokens vLLM 0.32's reasoning parser of each name looks up in the model's vocabulary when it is built without
# a request's kwargs, as the engine builds it for its structured-output gate; the others look up none.
NEEDS: dict[str, tuple[str, ...]] = {
    "deepseek_r1": ("<think>", "</think>"), "holo2": ("<think>", "</think>"), "ernie45": ("<think>", "</think>"),
    "step3": ("</think>",), "minimax_m3": ("<mm:think>", "</mm:think>"), "mistral": ("[TOOL_CALLS]",),
    "poolside_v1": ("<assistant>",), "olmo3": ("Ġ</", "</", "think", ">"),
}  # fmt: skip


def unreadable(name: str, vocab_id: Callable[[str], int | None]) -> str | None:
    """Why vLLM's reasoning parser `name` cannot be built for a model whose vocabulary `vocab_id` reads (None: it
    can): the tokens it looks up and the vocabulary lacks. vLLM refuses to start with it (its engine's config
    builds the parser from the model's tokenizer)."""
    missing = [t for t in NEEDS.get(name, ()) if vocab_id(t) is None]
    if not missing:
        return None
    return (f"reasoning_parser: {name!r} looks up {', '.join(map(repr, missing))} in the model's vocabulary, "
            "which has no such token")


def new_reasoning_parser(name: str, chat_template_kwargs: Mapping[str, Any] | None = None,
                         opened: bool = False, unthinking: bool = False) -> ReasoningParser:  # fmt: skip
    """A fresh parser (one per choice of a request), thinking or not as the request's kwargs say (`unthinking`:
    not thinking, whatever they say); `opened`: the prompt left the reasoning open (`opened_by`)."""
    kind, kwargs = REASONING_PARSERS[name], chat_template_kwargs or {}
    parser = kind(kind.thinks(kwargs) and not unthinking, opened)
    parser.forced = kind.forces(kwargs)
    return parser
