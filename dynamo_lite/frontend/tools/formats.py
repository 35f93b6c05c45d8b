"""The tool-call formats, as vLLM's parsers of the same names read them.

- hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, anywhere, repeated
  (Hermes, Qwen 2.5/3 ...); longcat: the same in `<longcat_tool_call>`.
- granite: `<|tool_call|>` (or `<tool_call>`) then a JSON list of calls (Granite 3.0 / 3.1); granite4:
  hermes's format, the text between and after the calls kept; granite-20b-fc: `<function_call> {...}` per call.
- llama3_json: the output is `{"name": ..., "parameters": {...}}` objects (`arguments`
  too), optionally after `<|python_tag|>`, separated by `;` (Llama 3.1-3.3).
- mistral: `[TOOL_CALLS]` then a JSON list of `{"name", "arguments"}`, or (tokenizer v11+)
  `[TOOL_CALLS]name{...}` per call, optionally `name[ARGS]{...}`.

The formats of Python calls (pythonic, olmo3, lfm2) are in `pythonic.py`, JSON in other wrappers (phi4_mini_json,
jamba, hunyuan_a13b, internlm) in `wrapped_json.py`, the tag-delimited formats of newer families in `tagged.py`,
Gemma's in `gemma4.py`, Kimi K3's in `kimi_k3.py`, GigaChat 3's in `gigachat3.py`, dots.llm's in `dots.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dynamo_lite.frontend.tools.base import (
    JsonArguments,
    Parsed,
    ParsedCall,
    ToolParser,
    balanced_end,
    json_call,
    skip_space,
)  # fmt: skip
from dynamo_lite.frontend.tools.dots import DotsParser
from dynamo_lite.frontend.tools.gemma4 import FunctionGemmaParser, Gemma4Parser
from dynamo_lite.frontend.tools.gigachat3 import GigaChat3Parser
from dynamo_lite.frontend.tools.kimi_k3 import KimiK3Parser
from dynamo_lite.frontend.tools.minimax_m3 import MiniMaxM3Parser
from dynamo_lite.frontend.tools.poolside import PoolsideV1Parser
from dynamo_lite.frontend.tools.pythonic import Lfm2Parser, Olmo3Parser, PythonicParser
from dynamo_lite.frontend.tools.wrapped_json import (
    ApertusParser,
    HunyuanA13BParser,
    InternLMParser,
    JambaParser,
    Phi4MiniJsonParser,
    XLamParser,
)
from dynamo_lite.frontend.tools.tagged import (
    DeepSeekV3Parser,
    DeepSeekV31Parser,
    DeepSeekV32Parser,
    DeepSeekV4Parser,
    DeepSeekV41Parser,
    Glm45Parser,
    KimiK2Parser,
    MiMoParser,
    MiniMaxM2Parser,
    Qwen3XmlParser,
    SeedOssParser,
    Step3Parser,
)


class HermesParser(ToolParser):
    markers = ("<tool_call>",)
    END = "</tool_call>"
    TAGS = (END,)
    keeps_special_tokens = "with tools"
    takes_unclosed = True  # a call never closed at the end of the output is taken if its JSON parses

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._arguments = JsonArguments()

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{cls.END}"

    def partial(self, buffer: str) -> tuple[str, str] | None:
        """`<tool_call>{"name": "f", "arguments": ` read: the arguments streamed as written (not where a call never
        closed is content, which a stream could not take back)."""
        i = skip_space(buffer, 0)
        if not self.takes_unclosed or not buffer.startswith(self.markers[0], i):
            return None
        return self._arguments.read(buffer, i + len(self.markers[0]), self._streamed is None)

    def dead(self, buffer: str) -> bool:
        start = skip_space(buffer, 0)
        return buffer.startswith(self.markers[0], start) and buffer.find(self.END, start) >= 0

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        start = skip_space(buffer, 0)
        if not buffer.startswith(self.markers[0], start):
            return None
        end = buffer.find(self.END, start)
        if end < 0:
            if not (final and self.takes_unclosed):
                return None
            end = len(buffer)
        try:
            obj = json.loads(buffer[start + len(self.markers[0]): end])
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        call = json_call(obj.get("name"), obj.get("arguments", obj.get("parameters")))
        if call is None:
            return None
        return [call], min(end + len(self.END), len(buffer))


class LongcatParser(HermesParser):
    markers = ("<longcat_tool_call>",)
    END = "</longcat_tool_call>"
    TAGS = (END,)


class Granite4Parser(HermesParser):
    """Granite 4: hermes's `<tool_call>{...}</tool_call>`; the text around and between the calls is content, and a
    call never closed is content too, as vLLM's granite4 parser reads them."""

    keeps_text_after_calls = True
    takes_unclosed = False


class Ernie45Parser(HermesParser):
    """ERNIE 4.5: hermes's format; a call never closed is dropped, and the special tokens go as the request says."""

    keeps_special_tokens = "never"
    takes_unclosed = False

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        if final and self.END not in buffer:
            return [], len(buffer)
        return super().take(buffer, final)


class GraniteParser(ToolParser):
    """Granite 3.0 / 3.1: `<|tool_call|>` (or `<tool_call>`) then a JSON list of `{"name", "arguments"}`."""

    markers = ("<|tool_call|>", "<tool_call>")
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}{json.dumps([{'name': name, 'arguments': args}], ensure_ascii=False)}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        marker = next((m for m in self.markers if buffer.startswith(m, i)), None)
        if marker is None:
            return None
        i = skip_space(buffer, i + len(marker))
        end = balanced_end(buffer, i) if buffer.startswith("[", i) else -1
        if end < 0:
            return None
        try:
            listed = json.loads(buffer[i:end])
        except ValueError:
            return None
        calls = [self.call(c["name"], c.get("arguments") or {}) for c in listed
                 if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)]
        return (calls, end) if calls and len(calls) == len(listed) else None


class Granite20bFcParser(ToolParser):
    """granite-20b-functioncalling: `<function_call> {"name": ..., "arguments": {...}}` per call."""

    markers = ("<function_call>",)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]} {json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.markers[0], i):
            return None
        i = skip_space(buffer, i + len(self.markers[0]))
        end = balanced_end(buffer, i) if buffer.startswith("{", i) else -1
        try:
            obj = json.loads(buffer[i:end]) if end > 0 else None
        except ValueError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
            return None
        return [ParsedCall(obj["name"], json.dumps(obj["arguments"], ensure_ascii=False))], end


class Llama3JsonParser(ToolParser):
    markers = ("<|python_tag|>", "{")
    only_at_start = True

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._arguments = JsonArguments()

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return json.dumps({"name": name, "parameters": args}, ensure_ascii=False)

    def partial(self, buffer: str) -> tuple[str, str] | None:
        """`{"name": "f", "parameters": ` read: the arguments streamed as written."""
        return self._arguments.read(buffer, self._object_at(buffer), self._streamed is None)

    @staticmethod
    def _object_at(buffer: str) -> int:
        """Where the call's object opens: after `<|python_tag|>` and a `;` between calls, and spaces."""
        i = skip_space(buffer, 0)
        if buffer.startswith("<|python_tag|>", i):
            i = skip_space(buffer, i + len("<|python_tag|>"))
        if i < len(buffer) and buffer[i] == ";":
            i = skip_space(buffer, i + 1)
        return i

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = self._object_at(buffer)
        if i >= len(buffer) or buffer[i] != "{":
            return None
        end = balanced_end(buffer, i)
        if end < 0:
            return None
        try:
            obj = json.loads(buffer[i:end])
        except ValueError:
            return None
        call = json_call(obj.get("name"), obj.get("parameters", obj.get("arguments"))) \
            if isinstance(obj, dict) else None  # fmt: skip
        return ([call], end) if call is not None else None


class MistralParser(ToolParser):
    markers = ("[TOOL_CALLS]",)
    TAGS = ("[ARGS]",)
    engine = True
    keeps_special_tokens = "always"

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return "[TOOL_CALLS]" + json.dumps([{"name": name, "arguments": args}], ensure_ascii=False)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.markers[0], i):
            return None
        i = skip_space(buffer, i + len(self.markers[0]))
        if i >= len(buffer):
            return None
        if buffer[i] == "[":  # a JSON list of calls
            end = balanced_end(buffer, i)
            if end < 0:
                return None
            try:
                items = json.loads(buffer[i:end])
            except ValueError:
                return None
            calls = [json_call(o.get("name"), o.get("arguments")) for o in items if isinstance(o, dict)]
            if not calls or None in calls:
                return None
            return calls, end  # type: ignore[return-value]
        brace = buffer.find("{", i)  # name{...} or name[ARGS]{...}
        if brace < 0:
            return None
        name = buffer[i:brace].removesuffix("[ARGS]").strip()
        end = balanced_end(buffer, brace)
        if end < 0 or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            return None
        try:
            call = json_call(name, json.loads(buffer[brace:end]))
        except ValueError:
            return None
        return ([call], end) if call is not None else None


class MistralListParser(ToolParser):
    """mistral under tool_choice required or named, where the engine is held to a bare JSON list of
    `{"name", "arguments"}` (`tool_tags.mistral_held`), read as vLLM 0.32's pre-v11 reading does
    (`_legacy_extract_tool_calls`): the first JSON value of the output is the calls (an object: one call), what
    follows it is dropped; output that is no such value is content, stripped. Each call comes whole."""

    TAGS = ("[TOOL_CALLS]", "[ARGS]")
    keeps_special_tokens = "always"
    engine = True

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._text = ""
        self._read = False  # the calls were taken

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        if not self._read:
            self._text += text
            if text.rstrip().endswith(("]", "}")):  # (a list or an object can only have ended so)
                self._take(out)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        if not self._read and not self._take(out):
            out.content = self._text.strip()
        return out

    def _take(self, out: Parsed) -> bool:
        try:
            value, _ = json.JSONDecoder().raw_decode(self._text, skip_space(self._text, 0))
        except ValueError:
            return False
        items = [value] if isinstance(value, dict) else value if isinstance(value, list) else []
        calls = [c for o in items if isinstance(o, dict) and (c := json_call(o.get("name"), o.get("arguments")))]
        out.calls.extend(calls)
        self._read = bool(calls)
        return self._read


PARSERS: dict[str, type[ToolParser]] = {  # vLLM's --tool-call-parser names (several name one format)
    "hermes": HermesParser,
    "qwen3_json": HermesParser,
    "llama3_json": Llama3JsonParser,
    "llama4_json": Llama3JsonParser,
    "mistral": MistralParser,
    "pythonic": PythonicParser,
    "llama4_pythonic": PythonicParser,
    "qwen3_xml": Qwen3XmlParser,
    "qwen3_coder": Qwen3XmlParser,
    "seed_oss": SeedOssParser,
    "glm45": Glm45Parser,
    "glm47": Glm45Parser,
    "poolside_v1": PoolsideV1Parser,
    "minimax_m2": MiniMaxM2Parser,
    "kimi_k2": KimiK2Parser,
    "deepseek_v3": DeepSeekV3Parser,
    "deepseek_v31": DeepSeekV31Parser,
    "deepseek_v32": DeepSeekV32Parser,
    "deepseek_v4": DeepSeekV4Parser,
    "deepseek_v41": DeepSeekV41Parser,
    "longcat": LongcatParser,
    "granite": GraniteParser,
    "granite4": Granite4Parser,
    "gemma4": Gemma4Parser,
    "step3p5": Qwen3XmlParser,
    "mimo": MiMoParser,
    "ernie45": Ernie45Parser,
    "olmo3": Olmo3Parser,
    "lfm2": Lfm2Parser,
    "phi4_mini_json": Phi4MiniJsonParser,
    "jamba": JambaParser,
    "hunyuan_a13b": HunyuanA13BParser,
    "internlm": InternLMParser,
    "functiongemma": FunctionGemmaParser,
    "xlam": XLamParser,
    "step3": Step3Parser,
    "apertus": ApertusParser,
    "ling3": Glm45Parser,
    "granite-20b-fc": Granite20bFcParser,
    "kimi_k3": KimiK3Parser,
    "minimax_m3": MiniMaxM3Parser,
    "gigachat3": GigaChat3Parser,
    "dots": DotsParser,
}


# The formats read otherwise when tool_choice is required or named (the engine holds those answers to a form of
# the format's own)
HELD_PARSERS: dict[str, type[ToolParser]] = {"mistral": MistralListParser}


def new_tool_parser(name: str, tools: Mapping[str, Mapping[str, Any]] | None = None,
                    defs: Mapping[str, Mapping[str, Any]] | None = None, held: bool = False) -> ToolParser:
    """A fresh parser of format `name` (one per choice of a request); `tools`: each function's parameter
    properties, by name; `defs`: each function's parameter `$defs`, by name; `held`: tool_choice is required or
    named."""
    parser = (HELD_PARSERS.get(name, PARSERS[name]) if held else PARSERS[name])(tools)
    parser.defs = defs or {}
    return parser
