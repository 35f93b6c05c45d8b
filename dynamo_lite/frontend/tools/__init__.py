"""Tool-call and reasoning parsers of model output, and how tools are written into a prompt.

A parser is made once per choice of a request (`new_tool_parser`), fed the output text as it
streams, and flushed at the end; fed the whole text at once, it gives the non-streamed answer,
so both paths are one code. The formats (`formats.py`, `tagged.py`) and the reasoning parsers
(`reasoning.py`, `reasoning_own.py`) are vLLM 0.32's of the same names; `PARSERS` and `REASONING_PARSERS` list them.
"""

from __future__ import annotations

from dynamo_lite.frontend.tools.base import Parsed, ParsedCall, ToolParser
from dynamo_lite.frontend.tools.formats import PARSERS, new_tool_parser
from dynamo_lite.frontend.tools.reasoning import ReasoningParser
from dynamo_lite.frontend.tools.reasoning_own import REASONING_PARSERS, new_reasoning_parser

TOOL_PARSER_NAMES = tuple(PARSERS)
REASONING_PARSER_NAMES = tuple(REASONING_PARSERS)

__all__ = ["Parsed", "ParsedCall", "ToolParser", "ReasoningParser", "new_tool_parser", "new_reasoning_parser",
           "TOOL_PARSER_NAMES", "REASONING_PARSER_NAMES"]
