"""Gemma's tool calls, as vLLM's parsers of the same names read them.

- gemma4: `<|tool_call>call:name{key:<|"|>text<|"|>,n:42,list:[...],obj:{...}}<tool_call|>`. Strings stand
  between `<|"|>` delimiters; other values are bare text, typed by the tool's schema as vLLM's parser engine
  types them.
- functiongemma (FunctionGemma): `<start_function_call>call:name{key:<escape>value<escape>,...}<end_function_call>`;
  each value between `<escape>`s is JSON, or else text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, items, json_or_text, skip_space, wrapped

_GEMMA_QUOTE = '<|"|>'


class Gemma4Parser(ToolParser):
    """Gemma 4: `<|tool_call>call:name{key:<|"|>text<|"|>,n:42,list:[...],obj:{...}}<tool_call|>`; strings
    between `<|"|>`, other values bare (typed by the tool's schema, as vLLM's parser engine types them)."""

    START, END = "<|tool_call>", "<tool_call|>"
    markers = (START,)
    TAGS = (END, _GEMMA_QUOTE)
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True
    HEAD = re.compile(r"\s*(?:call)?:([^{(]*)[{(]?", re.S)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.START, self.END, final)
        if piece is None:
            return None
        body, used = piece
        head = self.HEAD.match(body)
        if head is None or not head.group(1).strip():
            return None
        raw = body[head.end():].strip()
        if raw.endswith(("}", ")")):
            raw = raw[:-1]
        return [self.call(head.group(1).strip(), _gemma_object(raw))], used

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.START}call:{name}{_gemma_write(args if isinstance(args, dict) else {})}{cls.END}"


def _gemma_object(text: str) -> dict[str, Any]:
    """The inside of a Gemma 4 `{...}`: `key:value` pairs."""
    out: dict[str, Any] = {}
    i = 0
    while True:
        i = _skip(text, i, " ,\n\t")
        colon = text.find(":", i)
        if i >= len(text) or colon < 0:
            return out
        key = text[i:colon].strip()
        if len(key) >= 2 * len(_GEMMA_QUOTE) and key.startswith(_GEMMA_QUOTE) and key.endswith(_GEMMA_QUOTE):
            key = key[len(_GEMMA_QUOTE):-len(_GEMMA_QUOTE)]
        value, i = _gemma_value(text, _skip(text, colon + 1, " \n\t"), ",}]")
        if i < 0:
            return out
        out[key] = value


def _gemma_list(text: str) -> list[Any]:
    out: list[Any] = []
    i = 0
    while (i := _skip(text, i, " ,\n\t")) < len(text):
        value, i = _gemma_value(text, i, ",]")
        if i < 0:
            break
        out.append(value)
    return out


def _gemma_value(text: str, i: int, stops: str) -> tuple[Any, int]:
    """The value at `i` and where it ends; -1: none could be read there."""
    if i >= len(text):
        return "", len(text)
    if text.startswith(_GEMMA_QUOTE, i):
        start = i + len(_GEMMA_QUOTE)
        end = text.find(_GEMMA_QUOTE, start)
        return (text[start:], len(text)) if end < 0 else (text[start:end], end + len(_GEMMA_QUOTE))
    if text[i] in "{[":
        end = _gemma_close(text, i)
        inner = text[i + 1:end - 1] if end <= len(text) else text[i + 1:]
        return (_gemma_object(inner) if text[i] == "{" else _gemma_list(inner)), min(end, len(text))
    j = i
    while j < len(text) and text[j] not in stops:
        j += 1
    return (text[i:j].strip(), j) if j > i else (None, -1)


def _gemma_close(text: str, i: int) -> int:
    """Index after the bracket that closes the one at `i` (quoted strings skipped); past the end if unclosed."""
    depth = 0
    while i < len(text):
        if text.startswith(_GEMMA_QUOTE, i):
            end = text.find(_GEMMA_QUOTE, i + len(_GEMMA_QUOTE))
            i = len(text) if end < 0 else end + len(_GEMMA_QUOTE)
            continue
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    return len(text) + 1


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _gemma_write(value: Any) -> str:
    if isinstance(value, str):
        return f"{_GEMMA_QUOTE}{value}{_GEMMA_QUOTE}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_write(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_write(v) for v in value) + "]"
    return json.dumps(value)


class FunctionGemmaParser(ToolParser):
    """FunctionGemma: `<start_function_call>call:name{key:<escape>value<escape>,...}<end_function_call>`, the values
    between `<escape>`s read as JSON where they are (else as text), and nothing else; a call cut short at the end of
    the output is read to its end."""

    START, END, ESCAPE = "<start_function_call>", "<end_function_call>", "<escape>"
    markers = (START,)
    TAGS = (END, ESCAPE)
    keeps_special_tokens = "with tools"
    HEAD = re.compile(r"call:(\w+)\{")
    ARG = re.compile(r"(\w+):<escape>(.*?)<escape>", re.S)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        values = ",".join(f"{k}:{cls.ESCAPE}{_escaped(v)}{cls.ESCAPE}" for k, v in items(args))
        return f"{cls.START}call:{name}{{{values}}}{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        head = self.HEAD.match(buffer, i + len(self.START)) if buffer.startswith(self.START, i) else None
        if head is None:
            return None
        stop = buffer.find("}" + self.END, head.end())
        if stop < 0 and not final:
            return None
        body, used = (buffer[head.end():], len(buffer)) if stop < 0 else \
            (buffer[head.end():stop], stop + 1 + len(self.END))  # fmt: skip
        return [self.call(head.group(1), {k: json_or_text(v) for k, v in self.ARG.findall(body)})], used


def _escaped(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
