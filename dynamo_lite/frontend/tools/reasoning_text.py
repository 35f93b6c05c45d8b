"""The reasoning parsers whose markers are text: IBM Granite 3's "Here is my thought process:" ... "Here is my
response:", Hunyuan-A13B's `<think>` ... `<answer>` ... `</answer>`, and ERNIE 4.5's `</think>` with its
`<response>` tags. vLLM 0.32 reads a whole answer of these families with regular expressions, and a stream
otherwise (Granite's with a machine of its own, Hunyuan's and ERNIE's as it is once the reasoning ends). The
frontend reads both one way: as vLLM's whole answer, as far as a stream can without taking back what it sent.
Where it cannot (a phrase or tag that is known to be one only later), ours is Granite's stream, or reads the tags
as they come. docs/reference/openai-api.md lists the differences."""

from __future__ import annotations

from typing import ClassVar

from dynamo_lite.frontend.tools.base import partial_marker
from dynamo_lite.frontend.tools.reasoning import ReasoningParser


class MarkedReasoningParser(ReasoningParser):
    """In each state, the markers that move the output to another state, each dropped from the output; the
    states in `REASONS` are reasoning, the others content. An `ANCHORED` state looks for its markers only at
    the start of the output, and is left for `ELSE` at the first text that cannot begin one; the text of a state
    in `DROPS` leaves the output."""

    FIRST, ELSE = "idle", "plain"
    MOVES: ClassVar[dict[str, dict[str, str]]] = {}
    REASONS: ClassVar[frozenset[str]] = frozenset()
    ANCHORED: ClassVar[frozenset[str]] = frozenset()
    DROPS: ClassVar[frozenset[str]] = frozenset()
    COUNT = "none"  # (vLLM's parsers of Granite and Hunyuan count no reasoning tokens)

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._state = self.FIRST

    @classmethod
    def tags(cls) -> frozenset[str]:
        return frozenset(m for moves in cls.MOVES.values() for m in moves)

    @property
    def reasoning_now(self) -> bool | None:
        return None if self._state in self.ANCHORED else self._state in self.REASONS

    def feed(self, text: str) -> tuple[str, str]:
        text, self._held = self._held + text, ""
        out = ["", ""]  # reasoning, content
        while text:
            moves = self.MOVES.get(self._state, {})
            if self._state in self.ANCHORED:
                marker = next((m for m in moves if text.startswith(m)), None)
                if marker is None and any(m.startswith(text) for m in moves):
                    self._held = text
                    break
                self._state = moves[marker] if marker else self.ELSE
                text = text[len(marker):] if marker else text
                continue
            hit = min(((i, m) for m in moves if (i := text.find(m)) >= 0), default=None)
            if hit is None:
                keep = partial_marker(text, tuple(moves))
                self._held, text = text[len(text) - keep:], text[: len(text) - keep]
                self._out(out, text)
                break
            at, marker = hit
            self._out(out, text[:at])
            self._state = moves[marker]
            text = text[at + len(marker):]
        return out[0], out[1]

    def finish(self) -> tuple[str, str]:
        out = ["", ""]
        held, self._held = self._held, ""
        if self._state in self.ANCHORED:
            self._state = self.ELSE
        self._out(out, held)
        return out[0], out[1]

    def _out(self, out: list[str], text: str) -> None:
        if self._state not in self.DROPS:
            out[0 if self._state in self.REASONS else 1] += text


_THOUGHT, _RESPONSE = ("Here is my thought process:", "Here's my thought process:"), \
    ("Here is my response:", "Here's my response:")  # fmt: skip


class GraniteReasoningParser(MarkedReasoningParser):
    """IBM Granite 3: an output that starts with "Here is my thought process:" (or "Here's") is reasoning up to
    "Here is my response:" (or "Here's"), then content; any other output is all content. Both phrases leave the
    output, whatever the kwargs (Granite's template writes the instruction to think when `thinking` is true)."""

    FIRST = "first"
    MOVES = {"first": dict.fromkeys(_THOUGHT, "reasoning"), "reasoning": dict.fromkeys(_RESPONSE, "content")}
    REASONS, ANCHORED = frozenset({"reasoning"}), frozenset({"first"})


class HunyuanA13BReasoningParser(MarkedReasoningParser):
    """Hunyuan-A13B: an output that opens with `<think>\\n` is reasoning up to `\\n</think>\\n<answer>\\n`; the answer
    (or an output that does not open so) is content up to `\\n</answer>`, and what follows that is dropped, as vLLM's
    whole answer gives it. The markers leave the output, whatever the kwargs (its template thinks unless the
    prompt says `/no_think`, and then the model writes an empty `<think>`)."""

    FIRST, ELSE = "first", "answer"
    MOVES = {"first": {"<think>\n": "think"}, "think": {"\n</think>\n<answer>\n": "answer"},
             "answer": {"\n</answer>": "after"}}  # fmt: skip
    REASONS, ANCHORED, DROPS = frozenset({"think"}), frozenset({"first"}), frozenset({"after"})


class Ernie45ReasoningParser(ReasoningParser):
    """ERNIE 4.5 thinking: deepseek_r1's machine (the template opens `<think>`), and a content opened by `<response>`
    (after white space) ends at its last `</response>`; both tags and the white space before them leave it, as vLLM's
    whole answer reads them (its stream passes the content as it is)."""

    OPEN, CLOSE = "<response>", "</response>"

    def __init__(self, thinking: bool = True, opened: bool = False) -> None:
        super().__init__(thinking, opened)
        self._answer = "open"  # open (white space so far), inside (a <response>), plain
        self._tail = ""  # content held back: white space that may open a <response>, or from the last </response>

    @classmethod
    def tags(cls) -> frozenset[str]:
        return super().tags() | {cls.OPEN, cls.CLOSE}

    def feed(self, text: str) -> tuple[str, str]:
        reasoning, content = super().feed(text)
        return reasoning, self._framed(content) if content else ""

    def finish(self) -> tuple[str, str]:
        reasoning, content = super().finish()
        content = self._framed(content) if content else ""
        tail, self._tail = self._tail, ""
        return reasoning, content + ("" if self._answer == "inside" and tail.startswith(self.CLOSE) else tail)

    def _framed(self, text: str) -> str:
        text, self._tail = self._tail + text, ""
        if self._answer == "open":
            body = text.lstrip()
            if not body or (self.OPEN.startswith(body) and body != self.OPEN):
                self._tail = text
                return ""
            self._answer = "inside" if body.startswith(self.OPEN) else "plain"
            text = body[len(self.OPEN):] if self._answer == "inside" else text
        if self._answer == "plain":
            return text
        at = text.rfind(self.CLOSE)
        at = at if at >= 0 else len(text) - partial_marker(text, (self.CLOSE,))
        self._tail = text[at:]
        return text[:at]
