"""What every tool-call parser shares: its output types, and the streaming machine that finds
the format's start marker in content, holds back text that may be the start of one, and hands
the text after it to the format's own `take`, which cuts complete calls off the front.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dynamo_lite.frontend.tools.coerce import coerce_arguments


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A call, or (streaming) a piece of one: `open` starts a call whose arguments come in pieces, `more` is the next
    piece of the call opened last (its `name` repeated), `void` says the call opened last never became one (the
    output ended inside it, or its section proved no call): a whole answer leaves it out, as vLLM's; a stream
    cannot take it back."""

    name: str
    arguments: str  # JSON text of the arguments object (of `open` / `more`: a piece of it)
    part: Literal["whole", "open", "more", "void"] = "whole"


@dataclass(slots=True)
class Parsed:
    """What a piece of output turned into: content text and the tool calls completed in it."""

    content: str = ""
    calls: list[ParsedCall] = field(default_factory=list)

    def add(self, other: Parsed) -> Parsed:
        self.content += other.content
        self.calls.extend(other.calls)
        return self


class ToolParser:
    """Base of the formats. `feed(text)` per output delta, `finish()` once at the end.

    Subclasses set `markers` (what starts tool calls), `only_at_start` (the format is tool
    calls only when the output begins with a marker: llama3_json, pythonic) and implement
    `take(buffer, final)`: (calls, characters consumed), or None when no call can be cut off
    yet; with `final`, what cannot be a call is returned as None and becomes content.

    `tools` are the request's function tools (name -> the `properties` of its parameters): the
    formats vLLM parses with its parser engine (`typed`) type each argument by them. `defs` (set by
    `new_tool_parser`): each function's parameter `$defs`, which the formats that follow a `$ref` read (dots).
    """

    markers: tuple[str, ...] = ()
    TAGS: tuple[str, ...] = ()  # the format's other literal tags (`tags`)
    only_at_start = False
    typed = False  # arguments coerced to their schema types, as vLLM's parser engine does
    # When vLLM's parser asks the engine to keep special tokens in its text (some formats' markers are special
    # tokens): never; for a request with tools whose tool_choice is not none; or whenever the parsers run
    # (the formats of vLLM's parser engine).
    keeps_special_tokens: Literal["never", "with tools", "always"] = "never"
    engine = False  # vLLM parses the format with its parser engine, which drops other special tokens' text
    keeps_text_after_calls = False  # vLLM drops the text after the first call, but for granite4

    @classmethod
    def tags(cls) -> frozenset[str]:
        """Every literal tag of the format: kept where the text of other special tokens is dropped."""
        return frozenset((*cls.markers, *cls.TAGS))

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.tools = tools or {}
        self.defs: Mapping[str, Mapping[str, Any]] = {}
        self._held = ""  # content that may be the start of a marker
        self._buf = ""  # text after a marker, not yet cut into calls
        self._in_calls = False
        self._started = False  # any non-space output seen (only_at_start formats decide then)
        self._plain = False  # decided: no tool calls in this output
        self._called = False  # a call was taken: what follows that is not a call is dropped, as vLLM does
        self._streamed: str | None = None  # the arguments sent of the call opened in the stream (`partial`)

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        while text:
            if self._plain:
                self._say(out, text)
                return out
            if self._in_calls:
                self._buf += text
                text = ""
                self._cut(out, final=False)
                if not self._in_calls:  # back to content after the calls: the rest goes through again
                    text, self._buf = self._buf, ""
                continue
            text = self._scan_content(self._held + text, out)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        if self._in_calls:
            self._cut(out, final=True)
            self._say(out, self._buf)  # what never became a call is content, as in vLLM's parsers
            self._buf = ""
            if self._streamed is not None:  # the output ended inside the call opened
                out.calls.append(ParsedCall("", "", "void"))
                self._streamed = None
        self._say(out, self._held)
        self._held = ""
        return out

    def _say(self, out: Parsed, content: str) -> None:
        if not self._called or self.keeps_text_after_calls:
            out.content += content

    # --- internals -----------------------------------------------------------------------
    def _scan_content(self, text: str, out: Parsed) -> str:
        """Emit content up to a marker; returns the text from the marker on (entering calls), else ''."""
        self._held = ""
        if self.only_at_start and not self._started:
            stripped = text.lstrip()
            if not stripped:
                self._held = text
                return ""
            self._started = True
            if any(stripped.startswith(m) for m in self.markers):
                self._in_calls = True
                return stripped
            if any(m.startswith(stripped) for m in self.markers):
                self._started = False
                self._held = text
                return ""
            self._plain = True
            self._say(out, text)
            return ""
        if self.only_at_start:
            self._say(out, text)
            return ""
        hit = min(((i, m) for m in self.markers if (i := text.find(m)) >= 0), default=None)
        if hit is not None:
            self._say(out, text[: hit[0]])
            self._in_calls = True
            return text[hit[0]:]
        keep = partial_marker(text, self.markers)
        self._say(out, text[: len(text) - keep])
        self._held = text[len(text) - keep:]
        return ""

    def _cut(self, out: Parsed, final: bool) -> None:
        while self._buf:
            rest = self._buf.lstrip()
            if rest and (not self.only_at_start or self.keeps_text_after_calls) \
                    and not any(rest.startswith(m) or m.startswith(rest) for m in self.markers):  # fmt: skip
                self._in_calls = False  # content again after the calls
                return
            taken = self.take(self._buf, final)
            if taken is None:
                if not final and self.dead(self._buf):  # what the end of the output would say of it, said now
                    self._say(out, self._buf)
                    if self._streamed is not None:
                        out.calls.append(ParsedCall("", "", "void"))
                    self._buf, self._in_calls, self._plain, self._streamed = "", False, True, None
                elif not final:
                    self._stream(out)
                return
            calls, used = taken
            if self._streamed is not None and calls:  # the call opened in the stream ends: the rest of its arguments
                whole = self.partial(self._buf[:used])
                rest = whole[1][len(self._streamed):] if whole and whole[1].startswith(self._streamed) else ""
                calls, self._streamed = [ParsedCall(calls[0].name, rest, "more"), *calls[1:]], None
            out.calls.extend(calls)
            self._called = self._called or bool(calls)
            self._buf = self._buf[used:]

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        raise NotImplementedError

    def dead(self, buffer: str) -> bool:
        """Whether the section at the front of `buffer`, which `take` could not cut into calls, never will: it is
        closed, and the format's vLLM parser then makes all of the output content (hermes's family). Such a
        section and all that follows is content at once, where it would be held to the end of the output."""
        return False

    def partial(self, buffer: str) -> tuple[str, str] | None:
        """The call at the front of `buffer`, not complete yet, for a stream: its name and the text of its arguments
        so far, which only grows (the formats whose arguments are JSON as written); None: not known yet, or a format
        whose calls come whole."""
        return None

    def _stream(self, out: Parsed) -> None:
        """The call under way, as far as `partial` reads it: opened once its name is known, then its arguments as
        they grow."""
        got = self.partial(self._buf)
        if got is None:
            return
        name, arguments = got
        if self._streamed is None:
            out.calls.append(ParsedCall(name, arguments, "open"))
        elif len(arguments) > len(self._streamed) and arguments.startswith(self._streamed):
            out.calls.append(ParsedCall(name, arguments[len(self._streamed):], "more"))
        else:
            return
        self._streamed = arguments

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        """One call as the format writes it (for prompts whose template cannot write tool calls)."""
        raise NotImplementedError

    def call(self, name: str, args: dict[str, Any]) -> ParsedCall:
        """A call of `name` with `args`, typed by the tool's schema where the format is `typed`."""
        if self.typed and name in self.tools:
            args = coerce_arguments(args, self.tools[name])
        return ParsedCall(name, json.dumps(args, ensure_ascii=False))


def json_call(name: object, arguments: object) -> ParsedCall | None:
    """A call written in JSON: a name, and arguments as an object (or JSON text of one, as some models write
    them; none is an empty object); None if either is not so."""
    if not isinstance(name, str) or not name:
        return None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def json_or_text(value: str) -> Any:
    """`value` read as JSON, or the text itself where it is not JSON."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def items(args: Any) -> list[tuple[str, Any]]:
    """The arguments of a call from history, by name (none if they are not an object)."""
    return list(args.items()) if isinstance(args, dict) else []


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def wrapped(buffer: str, start: str, end: str, final: bool) -> tuple[str, int] | None:
    """The text between `start` (after spaces) and `end` at the front of `buffer`, and where the piece ends;
    at the end of the output (`final`) an unclosed piece runs to the end. None: no such piece (yet)."""
    i = skip_space(buffer, 0)
    stop = buffer.find(end, i)
    if not buffer.startswith(start, i) or (stop < 0 and not final):
        return None
    return (buffer[i + len(start):], len(buffer)) if stop < 0 else (buffer[i + len(start):stop], stop + len(end))


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that a marker starts with."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def balanced_end(text: str, start: int, quotes: str = '"') -> int:
    """Index after the bracketed value opening at text[start] ({ or [), or -1 if it is not closed yet."""
    depth = 0
    quote = ""
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = ""
        elif c in quotes:
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


class JsonEnd:
    """Where the JSON value opening at the start of the text fed ends, found as the text grows: each character is
    looked at once (a call's arguments streamed a token at a time are not scanned again and again)."""

    def __init__(self) -> None:
        self.seen = 0  # characters looked at
        self.end = -1  # where the value ends (after its closing bracket), once it has
        self._depth = 0
        self._quote = False
        self._escaped = False

    def feed(self, text: str) -> int:
        """`text`: all of it so far (it only grows). Where the value ends, or -1."""
        for i in range(self.seen, len(text) if self.end < 0 else self.seen):
            c = text[i]
            if self._quote:
                self._escaped, self._quote = (False, True) if self._escaped else (c == "\\", c != '"')
            elif c == '"':
                self._quote = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.end = i + 1
                    break
        self.seen = len(text) if self.end < 0 else self.end
        return self.end


_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


class JsonArguments:
    """A call written as JSON, `{"name": "f", "arguments": {...}` read as it streams: its name and the text of its
    arguments so far (each character scanned once for where they end)."""

    def __init__(self) -> None:
        self._end = JsonEnd()

    def read(self, buffer: str, at: int, fresh: bool) -> tuple[str, str] | None:
        """The call whose object opens at `at` (after spaces); `fresh`: a new call, scanned from its start."""
        head = _HEAD.match(buffer, at)
        if head is None or not buffer.startswith("{", head.end()):
            return None
        try:
            name = json.loads(f'"{head.group(1)}"')
        except ValueError:  # not a JSON string after all (a bad escape): the call comes whole, or as content
            return None
        if fresh:
            self._end = JsonEnd()
        end = self._end.feed(buffer[head.end():])
        return name, buffer[head.end():head.end() + end if end > 0 else len(buffer)]
