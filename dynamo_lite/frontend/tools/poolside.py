"""poolside_v1's tool calls, as vLLM 0.32's parser of that name reads them.

The calls are GLM-4's, `<tool_call>NAME\\n<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`, read
otherwise than glm45's: each closed call is taken (one that does not read so is skipped), and a value is kept
verbatim where the tool's parameter is a string, else read as JSON, then as a Python literal, else kept as its
text, stripped. vLLM's parser is not its parser engine: the answer's special tokens are kept for a request with
tools, and it holds no answer (required and named are read as auto).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, skip_space
from dynamo_lite.frontend.tools.tagged import Glm45Parser


class PoolsideV1Parser(Glm45Parser):
    typed = False
    keeps_special_tokens = "with tools"
    engine = False
    DETAIL = re.compile(r"<tool_call>\s*([^\n<]+?)\s*\n?\s*(<arg_key>.*?)?</tool_call>", re.S)

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        i = skip_space(buffer, 0)
        if not buffer.startswith(self.START, i):
            return None
        end = buffer.find(self.END, i)
        if end < 0:
            return None  # (a call never closed is no call, as vLLM's)
        used = end + len(self.END)
        detail = self.DETAIL.search(buffer, i, used)
        if detail is None:
            return [], used
        name = detail.group(1).strip()
        args = {key.strip(): value if self._string(name, key.strip()) else _literal(value.strip())
                for key, value in self.ARG.findall(detail.group(2) or "")}  # fmt: skip
        return [ParsedCall(name, json.dumps(args, ensure_ascii=False))], used

    def _string(self, name: str, key: str) -> bool:
        return (self.tools.get(name) or {}).get(key, {}).get("type") == "string"


def _literal(text: str) -> Any:
    """A value read as JSON, else as a Python literal, else the text itself (vLLM's `_deserialize`)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
