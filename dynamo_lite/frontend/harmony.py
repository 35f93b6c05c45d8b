"""gpt-oss's Harmony format, as vLLM 0.32 serves a model whose config says `model_type: gpt_oss`.

vLLM does not use such a model's chat template: it writes the conversation with the `openai_harmony`
library (a system message with the date and reasoning effort, a developer message with the
instructions and function tools, then the turns), and reads the output's tokens with Harmony's
streaming parser. The output is messages on channels: `analysis` is reasoning, `final` (or
`commentary` to no one) is content, and a message to `functions.NAME` is a call of NAME whose
text is its arguments.

`render` writes the prompt's tokens; `HarmonyReader` reads one choice's output tokens, as vLLM's
`HarmonyParser` does with `--reasoning-parser openai_gptoss` and `--tool-call-parser openai`.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Sequence
from typing import Any

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.messages import ChatMessage, Tool
from dynamo_lite.frontend.tools import ParsedCall

TOOL_PARSER, REASONING_PARSER = "openai", "openai_gptoss"  # vLLM's names of Harmony's parsers
PARSERS = frozenset((TOOL_PARSER, REASONING_PARSER))
EFFORTS = ("low", "medium", "high")
_BUILTIN = ("python", "browser", "container")  # Harmony's own tools: never function calls


def mismatch(tool_parser: str | None, reasoning_parser: str | None, is_harmony: bool) -> str | None:
    """Why a model's parsers cannot read its output (None: they can): Harmony's are for gpt-oss only, and gpt-oss
    takes no others (vLLM refuses them too)."""
    for key, name, harmony_name in (("tool_call_parser", tool_parser, TOOL_PARSER),
                                    ("reasoning_parser", reasoning_parser, REASONING_PARSER)):  # fmt: skip
        if name is not None and (name == harmony_name) != is_harmony:
            return (f"{key}: {name!r} is not gpt-oss's Harmony ({harmony_name!r}), and this model is gpt-oss"
                    if is_harmony else f"{key}: {name!r} is gpt-oss's Harmony, and this model's config.json does "
                    "not say model_type gpt_oss")  # fmt: skip
    return None


@functools.cache
def encoding() -> Any:
    """The gpt-oss encoding (its vocabulary ships inside the library: nothing is downloaded)."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def render(messages: Sequence[ChatMessage], tools: Sequence[Tool] | None, reasoning_effort: str | None,
           today: datetime.date | None = None) -> list[int]:  # fmt: skip
    """The prompt's tokens, up to the assistant's turn, as vLLM renders a chat request for gpt-oss."""
    from openai_harmony import (
        Conversation,
        DeveloperContent,
        Message,
        ReasoningEffort,
        RenderConversationConfig,
        Role,
        SystemContent,
        ToolDescription,
    )

    if reasoning_effort == "none":
        raise ApiError(400, f"Harmony does not support {reasoning_effort=}", param="reasoning_effort")
    if reasoning_effort is not None and reasoning_effort not in EFFORTS:
        raise ApiError(400, f"{reasoning_effort=} is not supported by Harmony. Supported values are: "
                            f"{', '.join(EFFORTS)}.", param="reasoning_effort")  # fmt: skip
    system = SystemContent.new().with_conversation_start_date((today or datetime.date.today()).isoformat())
    if reasoning_effort is not None:
        system = system.with_reasoning_effort(ReasoningEffort(reasoning_effort.capitalize()))
    out = [Message.from_role_and_content(Role.SYSTEM, system)]
    turns = list(messages)
    instructions = turns.pop(0).text() if turns and turns[0].role in ("system", "developer") else None
    if instructions or tools:
        developer = DeveloperContent.new()
        if instructions is not None:
            developer = developer.with_instructions(instructions)
        if tools:
            developer = developer.with_function_tools([
                ToolDescription.new(name=t.function.name, description=t.function.description or "",
                                    parameters=t.function.parameters) for t in tools])  # fmt: skip
        out.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    names = {c.id: c.function.name for m in turns for c in m.tool_calls or ()}
    for m in turns:
        out.extend(_messages(m, names))
    last_final = max((i for i, m in enumerate(out) if m.author.role == Role.ASSISTANT and m.channel == "final"),
                     default=-1)  # fmt: skip
    out = [m for i, m in enumerate(out) if not (i < last_final and m.channel == "analysis")]
    ids = encoding().render_conversation_for_completion(Conversation.from_messages(out), Role.ASSISTANT,
                                                        config=RenderConversationConfig(auto_drop_analysis=False))
    return _legacy_call_headers(list(ids))


def _messages(m: ChatMessage, names: dict[str, str]) -> list[Any]:
    """One chat message as Harmony messages, as vLLM converts it."""
    from openai_harmony import Author, DeveloperContent, Message, Role, TextContent

    reasoning = m.reasoning or m.reasoning_content
    if m.role == "assistant":
        out = []
        if m.tool_calls and m.text():
            out.append(Message.from_role_and_content(Role.ASSISTANT, m.text()).with_channel("commentary"))
        if reasoning:
            out.append(Message.from_role_and_content(Role.ASSISTANT, reasoning).with_channel("analysis"))
        for call in m.tool_calls or ():
            out.append(Message.from_role_and_content(Role.ASSISTANT, call.function.arguments or "")
                       .with_channel("commentary").with_recipient(f"functions.{call.function.name}")
                       .with_content_type("json"))  # fmt: skip
        if not m.tool_calls and m.text():
            out.append(Message.from_role_and_content(Role.ASSISTANT, m.text()).with_channel("final"))
        return out
    if m.role == "tool":
        author = Author.new(Role.TOOL, f"functions.{names.get(m.tool_call_id or '', '')}")
        message = Message.from_author_and_content(author, m.text())
        return [message.with_channel("commentary").with_recipient("assistant")]
    if m.role in ("system", "developer"):  # a later one: a developer message of its own
        return [Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new().with_instructions(m.text()))]
    try:
        role = Role(m.role)
    except ValueError:
        raise ApiError(400, f"Harmony has no {m.role!r} role.", param="messages") from None
    texts = [p.text for p in m.content] if isinstance(m.content, list) else [m.text()]  # each part its own content
    return [Message.from_role_and_contents(role, [TextContent(text=t) for t in texts])]


def _legacy_call_headers(ids: list[int]) -> list[int]:
    """Past tool calls' headers as gpt-oss writes them, `assistant to=functions.f<|channel|>commentary json`, where
    the library now writes `assistant<|channel|>commentary to=functions.f <|constrain|>json` (as vLLM rewrites them)."""
    enc = encoding()
    start, channel, constrain, message = (enc.encode(t, allowed_special="all")[0]
                                          for t in ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>"))
    i = 0
    while i < len(ids):
        if ids[i] != start or message not in ids[i + 1:]:
            i += 1
            continue
        end = ids.index(message, i + 1)
        header = ids[i + 1:end]
        if channel not in header or constrain not in header[header.index(channel):]:
            i += 1
            continue
        c = header.index(channel)
        k = header.index(constrain, c)
        author, where, kind = enc.decode(header[:c]), enc.decode(header[c + 1:k]), enc.decode(header[k + 1:])
        name, _, recipient = where[:-1].partition(" to=")
        if author != "assistant" or " to=" not in where or not where.endswith(" ") or not (name and recipient and kind):
            i = end + 1
            continue
        legacy = [start, *enc.encode(f"assistant to={recipient}"), channel, *enc.encode(f"{name} {kind}"), message]
        ids[i:end + 1] = legacy
        i += len(legacy)
    return ids


def _is_function(recipient: str) -> bool:
    if not recipient or recipient.startswith("<|") or recipient == "assistant":
        return False
    if recipient.startswith("functions."):
        return len(recipient) > len("functions.")
    return recipient.split(".", 1)[0] not in _BUILTIN and recipient not in _BUILTIN


def _recipient(recipient: str | None) -> str | None:
    """Without a content type an older Harmony read into the recipient."""
    if recipient is None or "<|constrain|>" not in recipient:
        return recipient
    return recipient[:recipient.find("<|constrain|>")].rstrip() or None


class HarmonyReader:
    """One choice's output tokens as (reasoning, content, calls) per piece, as vLLM's HarmonyParser reads a whole
    answer: the reasoning (with `reasons`) and the content of several messages each joined by a newline; a call
    (with `calls`) whole when its message ends, its JSON arguments written again compactly as vLLM writes them."""

    def __init__(self, reasons: bool, calls: bool) -> None:
        from openai_harmony import Role, StreamableParser

        self._parser = StreamableParser(encoding(), role=Role.ASSISTANT)
        self._reasons, self._calls = reasons, calls
        self._done = 0  # messages completed and handled
        self._said: dict[str, int] = {}  # the last message each kind ("reasoning", "content") had text from
        self._open: list[int] = []  # tokens of the message not completed yet (for an answer cut inside it)
        self.reasoning_tokens = 0  # as vLLM counts them: in `analysis`, or to a recipient in `commentary` (calls)

    def feed(self, token_ids: Sequence[int]) -> tuple[str, str, list[ParsedCall]]:
        from openai_harmony import HarmonyError

        out: dict[str, str] = {"reasoning": "", "content": ""}
        calls: list[ParsedCall] = []
        for token in token_ids:
            try:
                self._parser.process(token)
            except HarmonyError:
                continue  # as vLLM: a token the parser refuses is skipped
            self._open.append(token)
            channel, recipient = self._parser.current_channel, _recipient(self._parser.current_recipient)
            if (channel == "analysis" or (channel == "commentary" and recipient is not None)) and \
                    not encoding().is_special_token(token):  # fmt: skip
                self.reasoning_tokens += 1
            kind = self._kind(channel, recipient)
            if kind in out and self._parser.last_content_delta:
                out[kind] += self._text(kind, self._parser.last_content_delta)
            calls += self._completed()
        return out["reasoning"], out["content"], calls

    def finish(self) -> tuple[str, str, list[ParsedCall]]:
        """At the end of the output: the message it ends in. A message the parser cannot end is content, as
        vLLM recovers it."""
        from openai_harmony import HarmonyError

        try:
            self._parser.process_eos()
        except HarmonyError:
            return "", self._text("content", encoding().decode(self._open)) if self._open else "", []
        return "", "", self._completed()

    def _kind(self, channel: str | None, recipient: str | None) -> str | None:
        if recipient and _is_function(recipient):
            return "call" if self._calls else None
        if channel == "analysis":
            return "reasoning" if self._reasons else None
        return "content" if channel == "final" or (channel == "commentary" and recipient is None) else None

    def _text(self, kind: str, delta: str) -> str:
        """A newline before the first text of a message when an earlier message of the same kind had text."""
        first = kind in self._said and self._said[kind] != self._done
        self._said[kind] = self._done
        return "\n" + delta if first else delta

    def _completed(self) -> list[ParsedCall]:
        calls = []
        for message in self._parser.messages[self._done:]:
            self._done += 1
            self._open.clear()
            recipient = _recipient(message.recipient)
            if message.author.role.value != "assistant" or not message.content or not recipient \
                    or self._kind(message.channel, recipient) != "call":  # fmt: skip
                continue
            text = message.content[0].text
            calls.append(ParsedCall(recipient.removeprefix("functions."), _arguments(text, message.content_type)))
        return calls


def _arguments(text: str, content_type: str | None) -> str:
    if content_type is not None and "json" not in content_type:
        return text
    try:
        return json.dumps(json.loads(text))
    except ValueError:
        return text
