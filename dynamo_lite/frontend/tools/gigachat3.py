"""GigaChat 3's tool call, as vLLM 0.32's gigachat3 parser reads it.

One call, a JSON object that is the rest of the output, after `function call<|role_sep|>\\n` (GigaChat 3, which
ends its text with `<|message_sep|>` first) or `<|function_call|>` (GigaChat 3.1):

    Let me check.<|message_sep|>

    function call<|role_sep|>
    {"name": "get_weather", "arguments": {"city": "Paris"}}

The content is the text before the first `<|message_sep|>` or call; a `</s>` that ends the output is left out.
The object must be all that follows (JSON, control characters allowed in its strings) with `name` and
`arguments` an object: when it is not JSON, there is no call and all of the output is content (what followed a
`<|message_sep|>` is held back till then); when it is JSON but no call, there is no call and the content stays the
text before. The arguments stream as they are written, once the name is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dynamo_lite.frontend.tools.base import JsonArguments, Parsed, ParsedCall, ToolParser, partial_marker, skip_space

FUNCTION_CALL, HEADER = "<|function_call|>", "function call<|role_sep|>\n"
SEP, EOS = "<|message_sep|>", "</s>"
_EOS_AT_END = re.compile(rf"{re.escape(EOS)}\s*\Z")


def _without_eos(text: str) -> str:
    """`text` without a `</s>` that ends it (and the spaces after), as vLLM reads the output."""
    return text[:text.rfind(EOS)] if text.rstrip().endswith(EOS) else text


class _Escaped:
    """JSON text as it grows, the raw control characters in its strings (which vLLM reads, as `strict=False`)
    written as escapes: strict JSON of the same value, each piece the same however the text is cut."""

    def __init__(self) -> None:
        self.text = ""
        self._seen = 0
        self._quote = self._escape = False

    def feed(self, raw: str) -> str:
        """`raw`: all of the text so far (it only grows)."""
        piece = []
        for c in raw[self._seen:]:
            if self._quote:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._quote = False
                elif c < " ":
                    c = json.dumps(c)[1:-1]
            elif c == '"':
                self._quote = True
            piece.append(c)
        self._seen = len(raw)
        self.text += "".join(piece)
        return self.text


class GigaChat3Parser(ToolParser):
    markers = (FUNCTION_CALL, HEADER)
    TAGS = (SEP,)
    keeps_special_tokens = "with tools"

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._arguments = JsonArguments()
        self._escaped = _Escaped()
        self._tail = ""  # content held back: a `</s>` that may end the output, or the start of one or of a SEP
        self._hidden: str | None = None  # the output from the first SEP on, no content unless the call is no JSON
        self._failed = False  # the call proved not JSON: all of the output is content

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return FUNCTION_CALL + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)

    def _marker_end(self, buffer: str) -> int:
        i = skip_space(buffer, 0)
        marker = next((m for m in self.markers if buffer.startswith(m, i)), None)
        return -1 if marker is None else i + len(marker)

    def partial(self, buffer: str) -> tuple[str, str] | None:
        """The call's name and its arguments as written so far (control characters in strings escaped)."""
        at = self._marker_end(buffer)
        got = None if at < 0 else self._arguments.read(buffer, at, self._streamed is None)
        if got is None:
            return None
        if self._streamed is None:
            self._escaped = _Escaped()
        return got[0], self._escaped.feed(got[1])

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        """Only at the end of the output: the call is all that follows its marker."""
        at = self._marker_end(buffer)
        if not final or at < 0:
            return None
        try:
            obj = json.loads(_without_eos(buffer[at:]), strict=False)
        except ValueError:
            self._failed = True
            return None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict):
            return [ParsedCall(obj["name"], json.dumps(obj["arguments"], ensure_ascii=False))], len(buffer)
        return [], len(buffer)  # JSON, but no call: dropped

    def _say(self, out: Parsed, content: str) -> None:
        if self._hidden is not None:
            self._hidden += content
            return
        text = self._tail + content
        cut = text.find(SEP)
        if cut >= 0:  # the content ends
            self._tail, self._hidden = "", text[cut:]
            super()._say(out, text[:cut])
            return
        eos = _EOS_AT_END.search(text)
        keep = max(partial_marker(text, (SEP, EOS)), len(text) - eos.start() if eos else 0)
        self._tail = text[len(text) - keep:]
        super()._say(out, text[:len(text) - keep])

    def _scan_content(self, text: str, out: Parsed) -> str:
        rest = super()._scan_content(text, out)
        if self._in_calls and self._tail:  # a call follows what was held back: it is content
            tail, self._tail = self._tail, ""
            super()._say(out, tail)
        return rest

    def finish(self) -> Parsed:
        out = super().finish()
        if self._hidden is not None and self._failed:
            super()._say(out, _without_eos(self._hidden))
        elif self._hidden is None:
            super()._say(out, _without_eos(self._tail))
        self._tail, self._hidden = "", None
        return out
