"""The formats that write tool calls as Python calls, as vLLM's parsers of the same names read them.

- pythonic (llama4_pythonic): the output is a Python list of calls, `[get_weather(city="Paris"), f(x=1)]`
  (Llama 3.2 / 4, optionally inside `<|python_start|>` ... `<|python_end|>`).
- olmo3: `<function_calls>` then one call per line, `get_weather(city="Paris")`, then `</function_calls>` (OLMo 3).
- lfm2: `<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`, the text around it kept (LFM2).

Argument values are Python literals, or JSON's `true`, `false` and `null`; tuples and sets become lists, as
vLLM reads them.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, balanced_end, items, skip_space, wrapped

_JSON_NAMES = {"null": None, "true": True, "false": False}


class PythonicParser(ToolParser):
    markers = ("<|python_start|>", "[")
    only_at_start = True
    END = "<|python_end|>"
    TAGS = (END,)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"[{name}({', '.join(f'{k}={v!r}' for k, v in items(args))})]"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if buffer.startswith(self.END, i):  # closing the list taken before
            return [], i + len(self.END)
        if self.END.startswith(buffer[i:]) and not final:
            return None
        if buffer.startswith("<|python_start|>", i):
            i = skip_space(buffer, i + len("<|python_start|>"))
        if i >= len(buffer) or buffer[i] != "[":
            return None
        end = balanced_end(buffer, i, quotes="\"'")
        if end < 0:
            return None
        calls = python_calls(buffer[i:end])
        if calls is None:
            return None
        return calls, end


class Olmo3Parser(ToolParser):
    """OLMo 3: the calls one per line inside `<function_calls>` ... `</function_calls>`, at the start of the
    output (where vLLM's stream looks for them)."""

    markers = ("<function_calls>",)
    END = "</function_calls>"
    TAGS = (END,)
    only_at_start = True

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}\n{PythonicParser.render(name, args)[1:-1]}\n{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.markers[0], self.END, final)
        if piece is None:
            return None
        lines = [line.strip() for line in piece[0].splitlines() if line.strip()]
        calls = python_calls(f"[{', '.join(lines)}]")
        return (calls, piece[1]) if calls else None


class Lfm2Parser(ToolParser):
    """LFM2: a Python list of calls between `<|tool_call_start|>` and `<|tool_call_end|>`; the text before and
    after is content. The calls may be dotted names (`a.b(...)`), and positional arguments are left out, as
    vLLM takes them."""

    markers = ("<|tool_call_start|>",)
    END = "<|tool_call_end|>"
    TAGS = (END,)
    keeps_special_tokens = "with tools"
    keeps_text_after_calls = True

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        return f"{cls.markers[0]}{PythonicParser.render(name, args)}{cls.END}"

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.markers[0], self.END, final)
        if piece is None:
            return None
        source = piece[0].strip()
        calls = python_calls(source, loose=True) if source.startswith("[") and source.endswith("]") else None
        return (calls, piece[1]) if calls else None


def python_calls(source: str, loose: bool = False) -> list[ParsedCall] | None:
    """The calls of a Python list of calls, or None if `source` is not one. `loose` (lfm2): dotted names are
    taken and positional arguments left out; otherwise (the formats vLLM first matches with a pattern of plain
    names and keyword arguments) either makes the list no calls."""
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not isinstance(tree, ast.List):
        return None
    calls = []
    for node in tree.elts:
        if not isinstance(node, ast.Call) or (node.args and not loose):
            return None
        name = _dotted(node.func) if loose else node.func.id if isinstance(node.func, ast.Name) else None
        if name is None:
            return None
        try:
            arguments = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg is not None}
        except (ValueError, RecursionError):
            return None
        calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
    return calls


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _literal(node: ast.expr) -> Any:
    """A JSON value from a Python literal, as vLLM's `get_parameter_value` reads one; ValueError if it is none."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values)}  # type: ignore[union-attr]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not a literal")
