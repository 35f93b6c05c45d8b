"""One choice of a response, built from its pieces: the same code streams deltas and assembles
the whole answer, so both agree.

A chat choice runs the output through the model's reasoning parser (if configured), then by
tool_choice: `auto` through the tool-call parser, a named tool as the arguments of that call
(the engine held to its parameters' schema), `required` as a JSON list of calls (the engine
held to that list's schema), `none` as content. For the formats vLLM 0.32 reads in the model's
own format (tool_tags.py), named and required go through the tool-call parser too, as auto. A
completion choice adds echo and logprobs.
Parsers and state are made once per choice; each piece is handled once.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynamo_lite.frontend.harmony import HarmonyReader
from dynamo_lite.frontend.logprobs import CompletionLogprobs, chat_content
from dynamo_lite.frontend.request import Outcome, Piece
from dynamo_lite.frontend.tools import ParsedCall, ToolParser, new_reasoning_parser, new_tool_parser
from dynamo_lite.frontend.tools.reasoning_count import TokenMarks, counter_of


@dataclass(frozen=True)
class ChatOptions:
    """What a chat request asks of each choice's output (handlers.py derives it from the body)."""

    tool_mode: str = "none"  # none | auto | named | required
    tool_name: str | None = None  # named
    tool_parser: str | None = None  # the model's format, for auto
    native_calls: bool = False  # named / required read by the tool-call parser too (tool_tags.NATIVE)
    reasoning_parser: str | None = None
    include_reasoning: bool = True
    parallel_tool_calls: bool = True
    top_logprobs: int | None = None  # None: no logprobs
    echo: str = ""  # chat echo: the last message's content when its role is the answer's
    return_token_ids: bool = False
    role: str = "assistant"  # the answer's role: without add_generation_prompt, the last message's (as vLLM)
    logprobs_listed: bool = False  # the alternatives as the engine listed them (logprobs.py)
    beam_search: bool = False  # ... as vLLM writes a beam's
    tool_properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # each tool's, by name
    tool_defs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # each tool's parameter `$defs`, by name
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # the chat template's (thinking or not)
    reasoning_open: bool = False  # the prompt leaves the reasoning open (the output starts inside it)
    unthinking: bool = False  # the engine holds the output to its structured output from the first token
    drop_special: re.Pattern[str] | None = None  # special tokens' text that vLLM's parser engine drops
    harmony: bool = False  # a gpt-oss answer: its tokens read as Harmony messages (harmony.py), not its text
    reasoning_marks: TokenMarks = TokenMarks()  # the model's ids the reasoning count reads


def _tool_call(index: int, name: str, arguments: str) -> dict[str, Any]:
    return {"index": index, "id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
            "function": {"name": name, "arguments": arguments}}  # fmt: skip


class ChatChoice:
    def __init__(self, index: int, opts: ChatOptions, token_text: Callable[[int], str]) -> None:
        self.index = index
        self.opts = opts
        self.token_text = token_text
        self.harmony = HarmonyReader(opts.reasoning_parser is not None, opts.tool_mode != "none"
                                     and opts.tool_parser is not None) if opts.harmony else None  # fmt: skip
        self.reasoner = new_reasoning_parser(opts.reasoning_parser, opts.template_kwargs, opts.reasoning_open,
                                             opts.unthinking) if opts.reasoning_parser and not opts.harmony else None
        self._counted = counter_of(self.reasoner, opts.reasoning_marks) if self.reasoner else None
        self.parser: ToolParser | None = new_tool_parser(opts.tool_parser, opts.tool_properties, opts.tool_defs,
                                                         opts.tool_mode in ("named", "required")) \
            if opts.tool_parser and not opts.harmony and (opts.tool_mode == "auto" or opts.native_calls
                                                          and opts.tool_mode in ("named", "required")) else None
        self.content: list[str] = []
        self._echo = opts.echo
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.logprobs: list[dict[str, Any]] = []
        self.token_ids: list[int] = []
        self._raw: list[str] = []  # named / required: the JSON the engine was held to
        self._named_open = False
        self._dropping = False  # the call under way is left out (parallel_tool_calls false, a call taken before)
        self._void: set[int] = set()  # calls streamed that never became calls: a whole answer leaves them out

    def delta(self, piece: Piece) -> dict[str, Any] | None:
        """The stream choice for `piece` (None: nothing to send yet)."""
        calls: list[ParsedCall] = []
        if self.harmony is not None:
            reasoning, content, calls = self.harmony.feed(piece.token_ids or ())
        else:
            text = piece.text if self.opts.drop_special is None else self.opts.drop_special.sub("", piece.text)
            if self.reasoner is not None and self._counted is not None:
                before = self.reasoner.reasoning_now
                reasoning, content = self.reasoner.feed(text)
                before = self.reasoner.began if before is None else before
                share = len(reasoning) / (len(reasoning) + len(content)) if reasoning or content else 1.0
                self._counted.add(piece.token_ids or (), before, self.reasoner.reasoning_now, share)
            else:
                reasoning, content = "", text
        if self._echo:  # the continued assistant message comes first, as part of the answer
            content, self._echo = self._echo + content, ""
        return self._emit(reasoning, content, piece, None, found=calls)

    @property
    def reasoning_tokens(self) -> int:
        """The output tokens read so far that are reasoning, as vLLM counts them (0 without a reasoning parser)."""
        if self.harmony is not None:
            return self.harmony.reasoning_tokens
        return self._counted.count if self._counted is not None else 0

    def echo_delta(self) -> dict[str, Any] | None:
        """The stream choice of chat echo, sent after the role (as vLLM sends it): the continued message."""
        if not self._echo:
            return None
        echo, self._echo = self._echo, ""
        self.content.append(echo)
        return {"index": self.index, "delta": {"content": echo}, "logprobs": None, "finish_reason": None}

    def empty_delta(self, piece: Piece) -> dict[str, Any]:
        """The stream choice of a token that ends no character yet (vLLM sends one per token, empty)."""
        choice = {"index": self.index, "delta": {"content": ""}, "logprobs": None, "finish_reason": None}
        if self.opts.return_token_ids:
            choice["token_ids"] = piece.token_ids
        return choice

    @property
    def holds_back(self) -> bool:
        """Whether a parser may hold output back until the end, so that the finish needs a chunk of its own."""
        return self.opts.reasoning_parser is not None or self.opts.tool_mode != "none" or self.harmony is not None

    def closing_delta(self, piece: Piece) -> dict[str, Any]:
        """The stream choice for the engine's last piece (its finish reason set) when nothing is held back:
        its content and the finish in one chunk, as vLLM sends them (then `last` is not sent)."""
        choice = self.delta(piece) or {"index": self.index, "delta": {}, "logprobs": None}
        choice["delta"].setdefault("content", "")
        choice["finish_reason"], choice["stop_reason"] = piece.finish_reason, piece.stop_reason
        if self.opts.return_token_ids:
            choice["token_ids"] = piece.token_ids
        return choice

    def last(self, outcome: Outcome, whole: bool = False) -> dict[str, Any]:
        """The final stream choice: what the parsers held back, and the finish reason (`whole`: of a
        non-streamed answer, which gets no content promoted from the reasoning but may swap them, `message`)."""
        calls: list[ParsedCall] = []
        if self.harmony is not None:
            reasoning, content, calls = self.harmony.finish()
        else:
            reasoning, content = self.reasoner.finish() if self.reasoner else ("", "")
            if self.reasoner is not None and not whole:
                content += self.reasoner.promoted()
            if self._counted is not None:
                self._counted.finish()
        choice = self._emit(reasoning, content, None, outcome, final=True, found=calls)
        assert choice is not None
        return choice

    def message(self, outcome: Outcome) -> dict[str, Any]:
        """The whole choice of a non-streamed answer (after every piece went through `delta`)."""
        self.last(outcome, whole=True)
        text, reasoning = "".join(self.content), "".join(self.reasoning)
        if self.reasoner is not None and (swapped := self.reasoner.swapped()) is not None:
            text, reasoning = swapped, text  # (a request that forces content, with none: vLLM swaps them)
        held = self.opts.tool_mode in ("named", "required")  # vLLM's content is then text, if empty
        calls = [c for i, c in enumerate(self.calls) if i not in self._void]
        if (calls or held) and not text.strip():
            text = ""  # (white space beside calls, or instead of them, is no content, as vLLM reads a whole answer)
        message: dict[str, Any] = {"role": self.opts.role, "content": text if text or not calls or held else None,
                                   "refusal": None}  # fmt: skip
        if calls:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
        if self.opts.reasoning_parser is not None and self.opts.include_reasoning:
            message["reasoning"] = message["reasoning_content"] = reasoning or None
        choice = {"index": self.index, "message": message,
                  "logprobs": {"content": self.logprobs} if self.opts.top_logprobs is not None else None,
                  "finish_reason": self._finish_reason(outcome, bool(calls), whole=True),
                  "stop_reason": outcome.stop_reason}  # fmt: skip
        if self.opts.return_token_ids:
            choice["token_ids"] = self.token_ids
        return choice

    # --- internals -----------------------------------------------------------------------
    def _emit(self, reasoning: str, content: str, piece: Piece | None, outcome: Outcome | None,
              final: bool = False, found: Sequence[ParsedCall] = ()) -> dict[str, Any] | None:  # fmt: skip
        """`found`: the calls Harmony read (the other formats' are read from the content here)."""
        delta: dict[str, Any] = {}
        calls = self._route(content, delta, final) + [d for c in found if (d := self._call_delta(c)) is not None]
        if reasoning and self.opts.include_reasoning and self.opts.reasoning_parser is not None:
            self.reasoning.append(reasoning)
            delta["reasoning"] = delta["reasoning_content"] = reasoning
        if calls:
            delta["tool_calls"] = calls
        logprobs = None
        if piece is not None:
            self.token_ids.extend(piece.token_ids or ())
            if self.opts.top_logprobs is not None and piece.logprobs:
                entries = chat_content(piece.logprobs, self.opts.top_logprobs, self.token_text,
                                       self.opts.logprobs_listed, self.opts.beam_search)
                self.logprobs.extend(entries)
                logprobs = {"content": entries}
        if not delta and logprobs is None and outcome is None:
            return None
        choice: dict[str, Any] = {"index": self.index, "delta": delta, "logprobs": logprobs,
                                  "finish_reason": self._finish_reason(outcome) if outcome else None}  # fmt: skip
        if outcome is not None:
            choice["stop_reason"] = outcome.stop_reason
        if self.opts.return_token_ids and piece is not None:
            choice["token_ids"] = piece.token_ids
        return choice

    def _route(self, content: str, delta: dict[str, Any], final: bool) -> list[dict[str, Any]]:
        """Content to `delta["content"]`, tool calls returned as deltas."""
        mode = self.opts.tool_mode
        out: list[dict[str, Any]] = []
        if self.harmony is not None:  # (its calls come from its messages, whatever the tool_choice)
            self._content(content, delta)
            return out
        if mode == "named" and self.parser is None:
            if content:
                self._raw.append(content)
                if not self._named_open:
                    self._named_open = True
                    self.calls.append(_tool_call(0, self.opts.tool_name or "", ""))
                    out.append(dict(self.calls[0], function={"name": self.opts.tool_name, "arguments": content}))
                else:
                    out.append({"index": 0, "function": {"arguments": content}})
                self.calls[0]["function"]["arguments"] += content
            return out
        if mode == "required" and self.parser is None:
            self._raw.append(content)
            if final:
                out = [self._add_call(c) for c in _required_calls("".join(self._raw))]
                if not out:  # not the JSON it was held to (an engine without structured output): content
                    self._content("".join(self._raw), delta)
            return out
        if self.parser is None:
            self._content(content, delta)
            return out
        parsed = self.parser.feed(content) if content else None
        if final:
            parsed = self.parser.finish() if parsed is None else parsed.add(self.parser.finish())
        if parsed is not None:
            self._content(parsed.content, delta)
            out = [d for c in parsed.calls if (d := self._call_delta(c)) is not None]
        return out

    def _content(self, text: str, delta: dict[str, Any]) -> None:
        if text:
            self.content.append(text)
            delta["content"] = delta.get("content", "") + text

    def _call_delta(self, call: ParsedCall) -> dict[str, Any] | None:
        """A call, or a piece of one (a call whose arguments stream: `open`, then `more`), as a stream delta; None:
        nothing to send (a later call with parallel_tool_calls false, an empty piece)."""
        if call.part == "void":
            if not self._dropping and self.calls:
                self._void.add(len(self.calls) - 1)
            return None
        if call.part == "more":
            if self._dropping or not call.arguments:
                return None
            self.calls[-1]["function"]["arguments"] += call.arguments
            return {"index": len(self.calls) - 1, "function": {"arguments": call.arguments}}
        self._dropping = bool(self.calls) and not self.opts.parallel_tool_calls
        return None if self._dropping else self._add_call(call)

    def _add_call(self, call: ParsedCall) -> dict[str, Any]:
        entry = _tool_call(len(self.calls), call.name, call.arguments)
        self.calls.append(entry)
        return entry

    def _finish_reason(self, outcome: Outcome, called: bool | None = None, whole: bool = False) -> str | None:
        """vLLM's: `tool_calls` for a stop after calls (`called`: whether the answer has any), but for a named tool;
        a whole answer to required, always."""
        called = bool(self.calls) if called is None else called
        if outcome.finish_reason == "stop" and (called or whole) and (
                self.opts.tool_mode == "required" or called and self.opts.tool_mode == "auto"):  # fmt: skip
            return "tool_calls"
        return outcome.finish_reason


def _required_calls(text: str) -> list[ParsedCall]:
    """tool_choice required: the output is `[{"name": ..., "parameters": {...}}, ...]` (vLLM's schema)."""
    try:
        items = json.loads(text)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [ParsedCall(i["name"], json.dumps(i.get("parameters", {}), ensure_ascii=False)) for i in items
            if isinstance(i, dict) and isinstance(i.get("name"), str)]  # fmt: skip


class CompletionChoice:
    def __init__(self, index: int, echo: str | None, prompt_ids: list[int], logprobs: CompletionLogprobs | None,
                 return_token_ids: bool) -> None:  # fmt: skip
        self.index = index
        self.echo = echo  # the prompt's text, once, before the first output
        self.prompt_ids = prompt_ids
        self.lp = logprobs
        self.return_token_ids = return_token_ids
        self.text: list[str] = []
        self.logprobs: dict[str, list[Any]] | None = None if logprobs is None else {
            "text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        self.token_ids: list[int] = []
        self.prompt_entries: list[Any] | None = None
        self._prompt_ids_sent = not (echo is not None or return_token_ids)  # vLLM's first chunk carries them

    def delta(self, piece: Piece, drop_output: bool = False) -> dict[str, Any] | None:
        text = "" if drop_output else piece.text
        ids = [] if drop_output else list(piece.token_ids or ())
        entries = [] if drop_output else list(piece.logprobs or ())
        if piece.prompt_logprobs is not None:
            self.prompt_entries = piece.prompt_logprobs
        if self.echo is not None:
            text = self.echo + text
            if piece.prompt_logprobs is not None and self.lp is not None:
                entries = [*piece.prompt_logprobs, *entries]
                ids = [*self.prompt_ids, *ids]
            self.echo = None
        logprobs = None
        if self.lp is not None and entries:
            logprobs = self.lp.body(entries, ids)
            for key, values in logprobs.items():
                self.logprobs[key].extend(values)  # type: ignore[index]
        self.token_ids.extend(piece.token_ids or ())
        if not text and not ids and logprobs is None and piece.finish_reason is None:
            return None  # (a token that ends no character yet is sent, empty, as vLLM does)
        self.text.append(text)
        choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": piece.finish_reason,
                  "stop_reason": piece.stop_reason}  # fmt: skip
        if not self._prompt_ids_sent:
            choice["prompt_token_ids"], self._prompt_ids_sent = self.prompt_ids, True
        if self.return_token_ids:
            choice["token_ids"] = piece.token_ids
        return choice

    def whole(self, outcome: Outcome) -> dict[str, Any]:
        choice = {"index": self.index, "text": "".join(self.text), "logprobs": self.logprobs,
                  "finish_reason": outcome.finish_reason, "stop_reason": outcome.stop_reason}  # fmt: skip
        if self.return_token_ids:
            choice["prompt_token_ids"], choice["token_ids"] = self.prompt_ids, self.token_ids
        return choice
