"""Tool calls written as JSON inside a family's own wrapper, as vLLM's parsers of the same names read them.

- phi4_mini_json: `functools[{"name": "f", "arguments": {...}}, ...]` (Phi-4-mini).
- jamba, hunyuan_a13b: `<tool_calls>[{"name": "f", "arguments": {...}}, ...]</tool_calls>` (Jamba, Hunyuan-A13B).
- internlm: `<|action_start|><|plugin|>{"name": "f", "parameters": {...}}<|action_end|>`, one call (InternLM 2.5).
- apertus: `<|tools_prefix|>[{"f": {...}}, ...]<|tools_suffix|>`, each call an object of one key (Apertus).
- xlam: the output starts with a JSON list of `{"name", "arguments"}` (xLAM), bare, in a ``` code block, after
  `[TOOL_CALLS]` (to the end of the line) or in `<tool_call>` ... `</tool_call>`.

The text before the calls is content; vLLM drops what follows them (but apertus's, and xlam's around a wrapped
list).
"""

from __future__ import annotations

import json
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, balanced_end, json_call, skip_space, wrapped


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _listed(text: str, keys: tuple[str, ...], skips_bad: bool = False) -> list[ParsedCall] | None:
    """The calls of a JSON list of `{"name", <one of keys>}` objects: None if `text` is not one, or (unless
    `skips_bad`, when the others are taken) if any entry is not a call."""
    listed = _loads(text)
    if not isinstance(listed, list):
        return None
    calls = []
    for entry in listed:
        key = next((k for k in keys if isinstance(entry, dict) and k in entry), None)
        call = json_call(entry.get("name"), entry[key]) if key is not None else None
        if call is None and not skips_bad:
            return None
        calls += [call] if call is not None else []
    return calls or None


class Phi4MiniJsonParser(ToolParser):
    """Phi-4-mini: `functools` and a JSON list of calls, their arguments under `arguments` or `parameters`."""

    markers = ("functools[",)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return "functools" + json.dumps([{"name": name, "arguments": args}], ensure_ascii=False)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.markers[0], i):
            return None
        end = balanced_end(buffer, i + len("functools"))
        calls = _listed(buffer[i + len("functools"):end], ("arguments", "parameters")) if end > 0 else None
        return (calls, end) if calls else None


class JambaParser(ToolParser):
    """Jamba: a JSON list of calls between `<tool_calls>` and `</tool_calls>`, each with `name` and `arguments`."""

    markers = ("<tool_calls>",)
    END = "</tool_calls>"
    TAGS = (END,)
    keeps_special_tokens = "with tools"
    skips_bad = False  # an entry that is not a call makes the list no calls

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}{json.dumps([{'name': name, 'arguments': args}], ensure_ascii=False)}{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.markers[0], self.END, final=False)  # a list never closed is content
        calls = _listed(piece[0], ("arguments",), self.skips_bad) if piece else None
        return (calls, piece[1]) if calls and piece else None


class HunyuanA13BParser(JambaParser):
    """Hunyuan-A13B: Jamba's format; entries that are not calls are left out, and special tokens go as the request
    says."""

    keeps_special_tokens = "never"
    skips_bad = True


class InternLMParser(ToolParser):
    """InternLM 2.5: one call, a JSON object after `<|action_start|><|plugin|>`, up to `<|action_end|>`."""

    markers = ("<|action_start|><|plugin|>",)
    END = "<|action_end|>"
    TAGS = (END,)
    keeps_special_tokens = "with tools"

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}\n{json.dumps({'name': name, 'parameters': args}, ensure_ascii=False)}{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.markers[0], self.END, final)
        obj = _loads(piece[0][piece[0].find("{"):]) if piece and "{" in piece[0] else None
        if not isinstance(obj, dict):
            return None
        call = json_call(obj.get("name"), obj.get("parameters", obj.get("arguments", {})))
        return ([call], piece[1]) if call and piece else None


class XLamParser(ToolParser):
    """xLAM: a JSON list of calls at the start of the output, bare or wrapped; entries that are not calls are left
    out. vLLM also looks for a wrapped list after other text; here the list must come first."""

    WRAPS = {"```": "```", "[TOOL_CALLS]": "\n", "<tool_call>": "</tool_call>"}  # opening -> closing
    markers = ("[", *WRAPS)
    only_at_start = True
    keeps_text_after_calls = True  # the text after a wrapped list is content, as vLLM keeps it

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return json.dumps([{"name": name, "arguments": args}], ensure_ascii=False)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        opening = next((m for m in self.WRAPS if buffer.startswith(m, i)), None)
        if opening is None:  # a bare list
            end = balanced_end(buffer, i) if buffer.startswith("[", i) else -1
            calls = _listed(buffer[i:end], ("arguments",), skips_bad=True) if end > 0 else None
            return (calls, end) if calls else None
        start = i + len(opening)
        stop = buffer.find(self.WRAPS[opening], start)
        if stop < 0 and not final:
            return None
        inner = buffer[start:] if stop < 0 else buffer[start:stop]
        if opening == "```":
            inner = inner.removeprefix("json")
        calls = _listed(inner.strip(), ("arguments",), skips_bad=True)
        used = len(buffer) if stop < 0 else stop + (0 if opening == "[TOOL_CALLS]" else len(self.WRAPS[opening]))
        return (calls, used) if calls else None


class ApertusParser(ToolParser):
    """Apertus: a JSON list of `{"name": {arguments}}` between `<|tools_prefix|>` and `<|tools_suffix|>` (or the end
    of the output); the text after it is content."""

    markers = ("<|tools_prefix|>",)
    END = "<|tools_suffix|>"
    TAGS = (END,)
    keeps_special_tokens = "with tools"
    keeps_text_after_calls = True

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}{json.dumps([{name: args}], ensure_ascii=False)}{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.markers[0], i):
            return None
        start = skip_space(buffer, i + len(self.markers[0]))
        end = balanced_end(buffer, start) if buffer.startswith(("[", "{"), start) else -1
        listed = _loads(buffer[start:end]) if end > 0 else None
        listed = [listed] if isinstance(listed, dict) else listed
        if not isinstance(listed, list):
            return None
        calls = []
        for entry in listed:
            if isinstance(entry, dict) and entry:
                name, args = next(iter(entry.items()))
                calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
        stop = skip_space(buffer, end)
        if buffer.startswith(self.END, stop):
            return calls, stop + len(self.END)
        return (calls, end) if final or not self.END.startswith(buffer[stop:]) else None
