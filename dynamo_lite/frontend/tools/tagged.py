"""The tag-delimited tool-call formats of newer model families, as vLLM's parsers of the same names read them.

- qwen3_xml (qwen3_coder): `<tool_call><function=name><parameter=key>value</parameter></function></tool_call>`
  (Qwen3-Coder, Qwen3.5); seed_oss: the same inside `<seed:tool_call>`.
- glm45 (glm47): `<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value></tool_call>`.
- minimax_m2: `<minimax:tool_call><invoke name="name"><parameter name="key">value</parameter></invoke>...`.
- kimi_k2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}
  <|tool_call_end|>...<|tool_calls_section_end|>`.
- deepseek_v3: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name` + a ```json block +
  `<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>`; deepseek_v31: `...<｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}...`.
- deepseek_v32 (DSML): `<｜DSML｜function_calls><｜DSML｜invoke name="f"><｜DSML｜parameter name="x"
  string="true">v</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>`; deepseek_v4: in `<｜DSML｜tool_calls>`.
- step3p5 is qwen3_xml's format; mimo is too, its values not trimmed.
- step3: `<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">...` (Step 3).

Arguments written as text (the XML-like formats, DSML) are typed by the tool's schema, as vLLM's
parser engine types them (`typed`); so are kimi_k2's, which that engine parses too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, items, skip_space, wrapped


def _value_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _after_closing(buffer: str, pos: int, closing: str, final: bool) -> int:
    """Where a call ending at `pos` ends once its closing tag (optional, after spaces) is taken; -1: not known
    yet (what follows may still become the closing tag)."""
    k = skip_space(buffer, pos)
    if buffer.startswith(closing, k):
        return k + len(closing)
    return -1 if not final and closing.startswith(buffer[k:]) else pos


class Qwen3XmlParser(ToolParser):
    START, END = "<tool_call>", "</tool_call>"
    FUNCTION, FUNCTION_END = "<function=", "</function>"
    markers = (START, FUNCTION)  # vLLM takes a `<function=` without its wrapper too
    TAGS = (END, FUNCTION_END)
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True
    TRIMS = True  # a value's leading and trailing newline are the template's layout
    PARAM = re.compile(r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.S)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if buffer.startswith(self.START, i):
            i = skip_space(buffer, i + len(self.START))
        if not buffer.startswith(self.FUNCTION, i):
            return None
        close, end = buffer.find(">", i), buffer.find(self.FUNCTION_END, i)
        if close < 0 or (end < close and not final):
            return None
        if end < close:  # the output ended inside the call: vLLM takes its name and complete parameters
            end = len(buffer)
        args = dict(self.param(m.group(1), m.group(2)) for m in self.PARAM.finditer(buffer, close + 1, end))
        used = _after_closing(buffer, min(end + len(self.FUNCTION_END), len(buffer)), self.END, final)
        return None if used < 0 else ([self.call(buffer[i + len(self.FUNCTION):close].strip(), args)], used)

    @classmethod
    def param(cls, key: str, value: str) -> tuple[str, str]:
        """A parameter as vLLM reads it: with TRIMS, one leading and one trailing newline off (the template's
        layout)."""
        return (key.strip(), value.removeprefix("\n").removesuffix("\n")) if cls.TRIMS else (key, value)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        around = "\n" if cls.TRIMS else ""
        params = "".join(f"<parameter={k}>{around}{_value_text(v)}{around}</parameter>\n" for k, v in items(args))
        return f"{cls.START}\n{cls.FUNCTION}{name}>\n{params}{cls.FUNCTION_END}\n{cls.END}"


class MiMoParser(Qwen3XmlParser):
    """MiMo: qwen3_xml's format, each value taken as it is written, newlines and all, then typed by the schema."""

    TRIMS = False


class SeedOssParser(Qwen3XmlParser):
    START, END = "<seed:tool_call>", "</seed:tool_call>"
    markers = (START, Qwen3XmlParser.FUNCTION)
    TAGS = (END, Qwen3XmlParser.FUNCTION_END)


class Glm45Parser(ToolParser):
    START, END = "<tool_call>", "</tool_call>"
    markers = (START,)
    TAGS = (END, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True
    ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.START, self.END, final)  # (unclosed at the end: as vLLM, the name and the
        if piece is None:  # complete arguments)
            return None
        body, used = piece
        name = body.split("<arg_key>", 1)[0].strip()
        if not name or "<" in name:
            return None
        return [self.call(name, {k.strip(): v for k, v in self.ARG.findall(body)})], used

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_value_text(v)}</arg_value>\n"
                        for k, v in items(args))
        return f"{cls.START}{name}\n{pairs}{cls.END}"


class _Section(ToolParser):
    """Calls inside one section, `START` ... `END`; each call a match of `CALL`. At the end of the output, the
    calls complete in a section never closed are taken."""

    START = END = ""
    CALL: re.Pattern[str]

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.START, i):
            return None
        end = buffer.find(self.END, i)
        if end < 0 and not final:
            return None
        stop = end if end >= 0 else len(buffer)
        calls = [self.read(m) for m in self.CALL.finditer(buffer, i, stop)]
        if not calls or None in calls:
            return None
        return calls, stop + len(self.END) if end >= 0 else stop  # type: ignore[return-value]

    def read(self, match: re.Match[str]) -> ParsedCall | None:
        raise NotImplementedError

    def json_call(self, name: str, arguments: str) -> ParsedCall | None:
        try:
            args = json.loads(arguments)
        except ValueError:
            return None
        return self.call(name, args) if name and isinstance(args, dict) else None


class MiniMaxM2Parser(_Section):
    START, END = "<minimax:tool_call>", "</minimax:tool_call>"
    markers = (START,)
    TAGS = (END,)
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True
    CALL = re.compile(r'<invoke name="([^"]*)">(.*?)</invoke>', re.S)
    PARAM = re.compile(r'<parameter name="([^"]*)">(.*?)</parameter>', re.S)

    def read(self, match: re.Match[str]) -> ParsedCall | None:
        name = match.group(1).strip()
        return self.call(name, dict(self.PARAM.findall(match.group(2)))) if name else None

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        params = "".join(f'<parameter name="{k}">{_value_text(v)}</parameter>\n' for k, v in items(args))
        return f'{cls.START}\n<invoke name="{name}">\n{params}</invoke>\n{cls.END}'


class KimiK2Parser(_Section):
    START, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    markers = (START,)
    TAGS = (END, "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")
    engine = True
    typed = True
    keeps_special_tokens = "with tools"
    CALL = re.compile(r"<\|tool_call_begin\|>\s*([^<]*?)\s*<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>",
                      re.S)  # fmt: skip

    def read(self, match: re.Match[str]) -> ParsedCall | None:
        name = match.group(1).split(":")[0].split(".")[-1].strip()  # functions.get_weather:0
        return self.json_call(name, match.group(2))

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return (f"{cls.START}<|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>"
                f"{json.dumps(args, ensure_ascii=False)}<|tool_call_end|>{cls.END}")


class DeepSeekV3Parser(_Section):
    START, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    markers = (START,)
    TAGS = (END, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>")
    CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)\n```json\n(.*?)\n```\s*<｜tool▁call▁end｜>", re.S)
    NAME, ARGS = 2, 3  # CALL's groups
    WRITE = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"

    def read(self, match: re.Match[str]) -> ParsedCall | None:
        return self.json_call(match.group(self.NAME).strip(), match.group(self.ARGS))

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return cls.START + cls.WRITE.format(name=name, args=json.dumps(args, ensure_ascii=False)) + cls.END


class DeepSeekV31Parser(DeepSeekV3Parser):
    CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)<｜tool▁call▁end｜>", re.S)
    NAME, ARGS = 1, 2
    WRITE = "<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"


_DSML = "｜DSML｜"


def _dsml_param(tag: str) -> re.Pattern[str]:
    """A parameter, closed or cut off by the next one: (name, the `string` attribute, value)."""
    t = re.escape(tag)
    return re.compile(rf'<{t}parameter\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>(.*?)'
                      rf"(?:</{t}parameter>|(?=<{t}parameter\s+name=))", re.S)


class DeepSeekV32Parser(ToolParser):
    """DeepSeek V3.2's DSML: `<｜DSML｜function_calls>` + `<｜DSML｜invoke name="f">` + parameters, each
    `<｜DSML｜parameter name="x" string="true|false">value</｜DSML｜parameter>` (a string as written, else JSON);
    an invoke may come without the wrapper."""

    TAG = _DSML  # what opens each DSML tag
    STARTS: tuple[str, ...] = (f"<{_DSML}function_calls>",)
    END = f"</{_DSML}function_calls>"
    INVOKE, INVOKE_END = f'<{_DSML}invoke name="', f"</{_DSML}invoke>"
    markers = (*STARTS, INVOKE)
    TAGS = (END, INVOKE_END)
    typed = True
    keeps_special_tokens = "always"  # as vLLM's parser engine
    engine = True
    PARAM = _dsml_param(_DSML)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        start = next((s for s in self.STARTS if buffer.startswith(s, i)), None)
        if start is not None:
            return [], i + len(start)  # the wrapper opens: the invokes follow (its closing ends the calls)
        name_end, end = buffer.find('">', i), buffer.find(self.INVOKE_END, i)
        if not buffer.startswith(self.INVOKE, i) or name_end < 0 or (end < 0 and not final):
            return None
        stop = end if end >= 0 else len(buffer)  # cut short at the end: the name and the parameters closed
        args = {m.group(1): _dsml_value(m.group(2), m.group(3)) for m in self.PARAM.finditer(buffer, name_end, stop)}
        return [self.call(buffer[i + len(self.INVOKE):name_end], args)], stop + len(self.INVOKE_END) * (end >= 0)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        params = "".join(f'<{cls.TAG}parameter name="{k}" string="{str(isinstance(v, str)).lower()}">'
                         f"{_value_text(v)}</{cls.TAG}parameter>\n" for k, v in items(args))  # fmt: skip
        return f'{cls.STARTS[0]}\n{cls.INVOKE}{name}">\n{params}{cls.INVOKE_END}\n{cls.END}'


def _dsml_value(string: str | None, text: str) -> Any:
    if string == "true":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


class DeepSeekV4Parser(DeepSeekV32Parser):
    """DeepSeek V4: the same inside `<｜DSML｜tool_calls>` (or the spellings `toolcalls`, `tool` seen from it)."""

    STARTS = (f"<{_DSML}tool_calls>", f"<{_DSML}toolcalls>", f"<{_DSML}tool>")
    END = f"</{_DSML}tool_calls>"
    markers = (*STARTS, DeepSeekV32Parser.INVOKE)
    TAGS = (END, DeepSeekV32Parser.INVOKE_END)


class DeepSeekV41Parser(DeepSeekV32Parser):
    """DeepSeek V4.1: DSML with a space after the marker, `<｜DSML｜ calls>` + `<｜DSML｜ invoke name="f">` ..."""

    TAG = f"{_DSML} "
    STARTS = (f"<{TAG}calls>",)
    END = f"</{TAG}calls>"
    INVOKE, INVOKE_END = f'<{TAG}invoke name="', f"</{TAG}invoke>"
    markers = (*STARTS, INVOKE)
    TAGS = (END, INVOKE_END)
    PARAM = _dsml_param(TAG)


class Step3Parser(ToolParser):
    """Step 3: `<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">
    <steptml:parameter name="x">v</steptml:parameter></steptml:invoke><｜tool_call_end｜>...<｜tool_calls_end｜>`; the
    section must close, the text after it is content, and values are cast by the tool's schema as vLLM's step3
    parser casts them (a string, integer, number, boolean or null type; anything else stays text)."""

    START, END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
    CALL, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"
    markers = (START,)
    TAGS = (END, CALL, CALL_END, SEP)
    keeps_special_tokens = "with tools"
    keeps_text_after_calls = True
    INVOKE = re.compile(r'<steptml:invoke name="([^"]+)">')
    PARAM = re.compile(r'<steptml:parameter name="([^"]+)">([^<]*)</steptml:parameter>')

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        params = "".join(f'<steptml:parameter name="{k}">{_value_text(v)}</steptml:parameter>' for k, v in items(args))
        return (f'{cls.START}{cls.CALL}function{cls.SEP}<steptml:invoke name="{name}">{params}</steptml:invoke>'
                f"{cls.CALL_END}{cls.END}")  # fmt: skip

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.START, self.END, final=False)  # a section never closed is content
        if piece is None:
            return None
        calls = []
        for part in piece[0].split(self.CALL):
            kind, sep, invoke = part.partition(self.CALL_END)[0].partition(self.SEP)
            head = self.INVOKE.search(invoke)
            if self.CALL_END in part and sep and kind.strip() == "function" and head:
                args = {k: v.strip() for k, v in self.PARAM.findall(invoke)}
                calls.append(ParsedCall(head.group(1), json.dumps(self._cast(head.group(1), args), ensure_ascii=False)))
        return (calls, piece[1]) if calls else None

    def _cast(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        types = {k: p.get("type") for k, p in self.tools.get(name, {}).items() if isinstance(p, dict)}
        for key, value in args.items():
            kind = types.get(key)
            if kind in ("integer", "number"):
                try:
                    args[key] = int(value) if kind == "integer" else float(value)
                except ValueError:
                    pass
            elif kind == "boolean" and value.lower() in ("true", "false"):
                args[key] = value.lower() == "true"
            elif kind == "null" and value.lower() == "null":
                args[key] = None
        return args
