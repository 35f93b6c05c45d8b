"""Tools and tool turns written into the messages, for chat templates that do not render them.

A template without `tools` / `tool_calls` would drop them silently, which corrupts an agent's
conversation. Instead: the tool list goes into the system message with instructions in the
model's tool-call format, an assistant turn's calls are appended to its content in that
format, and a tool result keeps its role with the call id it answers.
"""

from __future__ import annotations

import json
from typing import Any

from dynamo_lite.frontend.tools.formats import PARSERS


def render_call(name: str, arguments: object, fmt: str) -> str:
    """One call as the format writes it."""
    args = arguments if isinstance(arguments, dict) else _loads(arguments)
    return PARSERS[fmt].render(name, args)


def instructions(tools: list[dict[str, Any]], fmt: str) -> str:
    example = render_call("<function-name>", {"<parameter>": "<value>"}, fmt)
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (f"You may call one or more functions to assist with the user query. The functions are:\n<tools>\n{listed}"
            f"\n</tools>\nTo call a function, answer with the call, in this form:\n{example}")


def render_into_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                         fmt: str) -> list[dict[str, Any]]:  # fmt: skip
    """New message dicts: `tools` (if given) in the system message, tool calls in assistant content."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = "\n".join(render_call(c["function"]["name"], c["function"]["arguments"], fmt)
                              for c in m.pop("tool_calls"))  # fmt: skip
            m["content"] = f"{m['content']}\n{calls}" if m.get("content") else calls
        if m["role"] == "tool" and m.get("tool_call_id"):
            m["content"] = f"<tool_response id={m['tool_call_id']}>\n{m['content']}\n</tool_response>"
        out.append(m)
    if tools:
        text = instructions(tools, fmt)
        if out and out[0]["role"] in ("system", "developer"):
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}"}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _loads(text: object) -> object:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text
