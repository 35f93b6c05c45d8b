"""Kimi K3's XTML channels, as vLLM's kimi_k3 parsers read them.

The output is channels, each opened and closed by special tokens: `<|open|>think<|sep|>` ...
`<|close|>think<|sep|>` (reasoning; the template usually opens it in the prompt), then
`<|open|>response<|sep|>` ... `<|close|>response<|sep|>` (the answer), then
`<|open|>tools<|sep|>` with the calls:
`<|open|>call tool="f" index="1"<|sep|><|open|>argument key="x" type="string"<|sep|>v<|close|>argument<|sep|>
<|close|>call<|sep|>`, then `<|close|>tools<|sep|>`. An argument whose type is not string is JSON. The
content is the response channel's text, without its markers (`WRAPPERS`).

vLLM reads the markers only written together (`spaces_between_special_tokens` false, as the frontend asks
of the engine for these parsers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dynamo_lite.frontend.tools.base import Parsed, ParsedCall, ToolParser, items, json_or_text, partial_marker, wrapped

WRAPPERS = ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")
_CALL = re.compile(r"<\|open\|>call (?P<attrs>(?:(?!<\|sep\|>).)*?)<\|sep\|>(?P<body>.*?)<\|close\|>call<\|sep\|>",
                   re.S)  # fmt: skip
_ARGUMENT = re.compile(r"<\|open\|>argument (?P<attrs>(?:(?!<\|sep\|>).)*?)<\|sep\|>(?P<value>.*?)"
                       r"<\|close\|>argument<\|sep\|>", re.S)  # fmt: skip
_ATTR = re.compile(r'(\w+)="([^"]*)"')


class Unwrapper:
    """Drops the response channel's markers from streamed content, holding back what may be the start of one."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        text, self._held = self._held + text, ""
        for marker in WRAPPERS:
            text = text.replace(marker, "")
        keep = partial_marker(text, WRAPPERS)
        self._held = text[len(text) - keep:]
        return text[: len(text) - keep]

    def finish(self) -> str:
        held, self._held = self._held, ""
        return held


class KimiK3Parser(ToolParser):
    START, END = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
    markers = (START,)
    TAGS = (END,)
    keeps_special_tokens = "always"

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._unwrap = Unwrapper()

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        def argument(key: str, value: Any) -> str:
            kind, text = ("string", value) if isinstance(value, str) else ("object", json.dumps(value))
            return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{text}<|close|>argument<|sep|>'

        body = "".join(argument(k, v) for k, v in items(args))
        return f'{cls.START}<|open|>call tool="{name}" index="1"<|sep|>{body}<|close|>call<|sep|>{cls.END}'

    def finish(self) -> Parsed:
        out = super().finish()
        ToolParser._say(self, out, self._unwrap.finish())
        return out

    def _say(self, out: Parsed, content: str) -> None:
        super()._say(out, self._unwrap.feed(content))

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.START, self.END, final)
        if piece is None:
            return None
        calls = []
        for call in _CALL.finditer(piece[0]):
            name = _attrs(call["attrs"]).get("tool", "")
            args = {}
            for argument in _ARGUMENT.finditer(call["body"]):
                attrs = _attrs(argument["attrs"])
                value = argument["value"]  # a type other than string is JSON
                args[attrs.get("key", "")] = value if attrs.get("type", "string") == "string" else json_or_text(value)
            if name:
                calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
        return calls, piece[1]  # a section without calls is dropped too, as vLLM drops it


def _attrs(text: str) -> dict[str, str]:
    return {k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in _ATTR.findall(text)}
