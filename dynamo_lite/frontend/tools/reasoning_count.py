"""Counting the reasoning tokens of an output, as vLLM 0.32 counts them for
`usage.completion_tokens_details.reasoning_tokens`: per family of reasoning parser (its `COUNT`,
reasoning.py), on the output's token ids, as its pieces come."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynamo_lite.frontend.tools.reasoning import ReasoningParser


@dataclass(frozen=True)
class TokenMarks:
    """A model's token ids that the reasoning count reads: its special tokens, its reasoning family's tags that are
    one token each (`tags`), and the tags the family's count walks as token sequences (`walked`)."""

    special: frozenset[int] = frozenset()
    tags: frozenset[int] = frozenset()
    opens: frozenset[int] = frozenset()  # of `tags`: the opening one
    closes: frozenset[int] = frozenset()  # ... the closing one and the tool-call openings that end the reasoning
    walked: tuple[tuple[int, ...], ...] = ()


class ReasoningTokens:
    """The output tokens of one choice that are reasoning, as vLLM 0.32 counts them for
    `usage.completion_tokens_details.reasoning_tokens`, by the family's `COUNT`:

    - "read" (the families of vLLM's parser engine): each token read in reasoning, but the family's tags and the
      other special tokens. Within a piece, the tokens go by the state before it, changed by each tag the piece
      holds (its last tag: to the state after the piece); while the state is not known (gemma4's first piece), the
      tokens wait. A piece of several tokens whose state changes with no tag among its ids (the engine's tag is
      not one of the vocabulary's tokens: the mock's) counts the reasoning's share of its text.
    - "between" (deepseek_r1, deepseek_v3 when thinking, minimax_m3): each token between the opening and the
      closing tags (`COUNT_TAGS`, token sequences), nested. The depth starts at 1 only where vLLM's parser starts
      it there (minimax_m3 with `thinking_mode` enabled): R1's template opens `<think>` in the prompt, and vLLM
      counts none of an output that does not open it again.
    - "until" (step3): each token before the first closing tag (all of them without one).
    - "kimi_k3": as "between" without nesting, starting inside, and a response channel opened before any thinking
      one also ends it.
    - "none" (olmo3, minimax_m2_append_think; deepseek_v3 and kimi_k3 when not thinking): none.

    `add` takes each piece's ids and whether the output was in reasoning before and after it (None: not known)."""

    def __init__(self, rule: str, marks: TokenMarks, inside: bool = False, reenters: bool = False) -> None:
        self.rule, self.marks, self.reenters = rule, marks, reenters
        self.count = 0
        self._depth = int(inside)
        self._opened = False  # kimi_k3: a thinking channel was opened
        self._waiting = 0  # "read": tokens read while the state is not known
        self._held: list[int] = []  # "between", "kimi_k3": tokens that may begin a tag

    def add(self, ids: Sequence[int], before: bool | None, after: bool | None, share: float = 1.0) -> None:
        """`share`: of the text the piece gave, the part that was reasoning."""
        if self.rule == "read":
            self._read(ids, before, after, share)
        elif self.rule != "none":
            self._held.extend(ids)
            self._walk(final=False)

    def finish(self) -> None:
        """At the end of the output: a tag cut short is counted as tokens, as vLLM's walk counts it."""
        if self._held:
            self._walk(final=True)

    def _read(self, ids: Sequence[int], before: bool | None, after: bool | None, share: float) -> None:
        tags, special = self.marks.tags, self.marks.special
        state = after if before is None else before  # where the piece began
        if state is None:
            self._waiting += sum(1 for t in ids if t not in special)
            return
        if self._waiting:
            self.count += self._waiting if state else 0
            self._waiting = 0
        last = max((k for k, t in enumerate(ids) if t in tags), default=-1)
        if last < 0 and state != after and len(ids) > 1:  # a tag that is not one of the vocabulary's tokens
            self.count += round(share * sum(1 for t in ids if t not in special))
            return
        for k, token in enumerate(ids):
            if k == last:
                state = after
            elif token in tags:
                opens, closes = token in self.marks.opens, token in self.marks.closes
                state = (state or self.reenters) if opens else False if closes else state
            elif state and token not in special:
                self.count += 1

    def _walk(self, final: bool) -> None:
        held, walked = self._held, self.marks.walked
        i = 0
        while i < len(held):
            tag = next((k for k, t in enumerate(walked) if t and tuple(held[i:i + len(t)]) == t), None)
            left = len(held) - i
            if tag is None and not final and any(left < len(t) and t[:left] == tuple(held[i:]) for t in walked):
                break  # may be the start of a tag
            if tag is None:
                self.count += self._depth > 0
                i += 1
                continue
            i += len(walked[tag])
            self._tag(tag)
        del held[:i]

    def _tag(self, tag: int) -> None:
        if self.rule == "until":  # the end: no more reasoning
            self._depth = 0
        elif self.rule == "kimi_k3":  # open, close, response (a close while no thinking channel was opened)
            if tag == 0:
                self._depth, self._opened = 1, True
            elif tag == 1 or not self._opened:
                self._depth = 0
        else:  # open, close
            self._depth = self._depth + 1 if tag == 0 else max(self._depth - 1, 0)


def counter_of(parser: ReasoningParser, marks: TokenMarks) -> ReasoningTokens:
    """The count of a parser's reasoning tokens, as vLLM's parser of its family counts them."""
    rule = "none" if parser.COUNT_ONLY_THINKING and not parser.thinking else parser.COUNT
    parses = parser.thinking or parser.OFF_STILL_PARSES  # (else the output passes as it is)
    return ReasoningTokens(rule, marks, inside=parser.thinking and parser.COUNT_INSIDE,
                           reenters=parser.REENTERS and parses)  # fmt: skip


def count_tags(kind: type[ReasoningParser]) -> tuple[str, ...]:
    """The tags the "between" and "kimi_k3" counts walk, in the order they try them."""
    return kind.COUNT_TAGS or (kind.START, kind.END)
