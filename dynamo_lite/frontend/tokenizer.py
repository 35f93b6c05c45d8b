"""The model's tokenizer and chat template, loaded once per served model (local files only).

The frontend tokenizes every request exactly once; workers receive token ids.
Output text is the engine's own detokenization (see `upstream.py`); this class
decodes only for /detokenize, echo of token-id prompts and logprob tokens (one
string per token id, cached).

Tools, assistant tool calls and tool results are rendered by the chat template when
it knows them (it mentions `tools` / `tool_calls`); a template that does not (SmolLM2's,
the tiny test model's) would drop them silently, so they are written into the messages
in the model's tool-call format instead (tools/render.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynamo_lite.frontend import harmony
from dynamo_lite.frontend.messages import ChatMessage, Tool
from dynamo_lite.frontend.tools.render import render_into_messages


@dataclass(frozen=True)
class ChatInput:
    """What the chat template is given besides the messages."""

    tools: list[Tool] | None = None
    tool_format: str = "hermes"  # how calls are written when the template does not render them
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, str]] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs, reasoning_effort
    reasoning_effort: str | None = None  # the request's own (a Harmony prompt takes it, not the kwargs)


class ModelTokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self.model_dir = model_dir
        self._tok: Any = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        template = getattr(self._tok, "chat_template", None)
        if not template:
            raise ValueError(f"{model_dir}: the tokenizer has no chat template; /v1/chat/completions needs one")
        source = template if isinstance(template, str) else " ".join(map(str, dict(template).values()))
        self.chat_template: str = template if isinstance(template, str) else ""  # the default one (as vLLM reads)
        self.renders_tools = "tools" in source
        self.renders_tool_calls = "tool_calls" in source
        self.renders_developer = '"developer"' in source or "'developer'" in source
        self.eos_token_id: int | None = self._tok.eos_token_id
        self.special_tokens: tuple[str, ...] = tuple(str(t) for t in self._tok.all_special_tokens)
        self.special_ids: frozenset[int] = frozenset(self._tok.all_special_ids) | frozenset(
            i for i, t in self._tok.added_tokens_decoder.items() if t.special)  # fmt: skip
        self.vocab_size = len(self._tok)
        self._rust = _rust_encoder(self._tok)
        # gpt-oss: vLLM writes its prompts in Harmony, not with its chat template (harmony.py)
        self.harmony = _model_type(model_dir) == "gpt_oss"

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if self._rust is not None:
            return self._rust(text, add_special_tokens)  # type: ignore[no-any-return]
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def render_chat(self, messages: list[ChatMessage], chat: ChatInput = ChatInput()) -> str:
        """The chat template's text for `messages` (with the generation prompt unless told otherwise)."""
        dicts = [m.template_dict() for m in messages]
        if not self.renders_developer and any(d["role"] == "developer" for d in dicts):
            dicts = developer_as_system(dicts)
        tools = [t.model_dump(exclude_none=True) for t in chat.tools] if chat.tools else None
        if (tools and not self.renders_tools) or (not self.renders_tool_calls and _has_tool_turns(dicts)):
            dicts = render_into_messages(dicts, tools if not self.renders_tools else None, chat.tool_format)
            if not self.renders_tools:
                tools = None
        extra: dict[str, Any] = dict(chat.kwargs)
        if tools:
            extra["tools"] = tools
        if chat.documents:
            extra["documents"] = chat.documents
        return self._tok.apply_chat_template(dicts, tokenize=False, add_generation_prompt=chat.add_generation_prompt,
                                             continue_final_message=chat.continue_final_message, **extra)

    def encode_chat(self, messages: list[ChatMessage], chat: ChatInput = ChatInput()) -> tuple[str, list[int]]:
        """The chat template with the generation prompt, and its tokens (the template adds any BOS itself); a
        gpt-oss model's prompt in Harmony."""
        if self.harmony:
            ids = harmony.render(messages, chat.tools, chat.reasoning_effort)
            return harmony.encoding().decode(ids), ids
        text = self.render_chat(messages, chat)
        return text, self._encode(text, False)

    def encode_prompt(self, prompt: str, add_special_tokens: bool = True) -> list[int]:
        return self._encode(prompt, add_special_tokens)

    def encode_text(self, text: str) -> list[int]:
        """Plain text, no special tokens (for engine text that came without token ids)."""
        return self._encode(text, False)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))

    def token_strs(self, ids: list[int]) -> list[str]:
        """Each id's token as the tokenizer writes it (`Ġthe`), as vLLM's /tokenize returns them."""
        return [str(t) for t in self._tok.convert_ids_to_tokens(ids)]

    def vocab_id(self, token: str) -> int | None:
        """The id of a token of the vocabulary, written as the vocabulary writes it (None: not one token)."""
        found = self._tok.convert_tokens_to_ids(token)
        return found if isinstance(found, int) and found != self._tok.unk_token_id else None

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one tokenizer per served model, for its lifetime
    def token_text(self, token_id: int) -> str:
        """One token's text, as vLLM's logprobs show it."""
        return str(self._tok.decode([token_id]))


def _rust_encoder(tok: Any) -> Callable[[str, bool], list[int]] | None:
    """``(text, add_special_tokens) -> ids`` straight from the Rust tokenizer under a Hugging Face fast
    tokenizer, when that gives the same ids as `tok.encode`.

    transformers' `encode` wraps one Rust call in about 20 us of Python per prompt. The call is
    `encode_batch_fast` of one text where the tokenizers package has it: it skips the character offsets
    and takes 0.70-0.83x the time of `encode` (SmolLM2's tokenizer, 64 to 60,000 words;
    benchmarks/tokenize_bench.py). It also lets go of the GIL, which the thread that tokenizes long
    prompts needs (`encode` holds it). A tokenizer class
    that overrides encoding (or one that is not Rust-backed) keeps the Python path; so does one whose
    direct call differs on any probe text, special tokens included.
    """
    from transformers import PreTrainedTokenizerFast

    rust = getattr(tok, "_tokenizer", None)
    if not isinstance(tok, PreTrainedTokenizerFast) or rust is None or type(tok).encode is not \
            PreTrainedTokenizerFast.encode or type(tok)._encode_plus is not PreTrainedTokenizerFast._encode_plus:
        return None
    rust.encode_special_tokens = bool(tok.split_special_tokens)
    specials = " ".join(str(t) for t in tok.all_special_tokens[:4])
    probes = ["Hello world", "  leading and trailing  ", "multi\nline\ttabs", "héllo 世界 🙂 ñ", "t1 t22 t333",
              f"{specials} inside {specials}text", "", "1234567890 3.14159 -42"]
    if hasattr(rust, "encode_batch_fast"):
        def encode(text: str, special: bool) -> list[int]:
            return rust.encode_batch_fast([text], add_special_tokens=special)[0].ids  # type: ignore[no-any-return]
    else:
        def encode(text: str, special: bool) -> list[int]:
            return rust.encode(text, add_special_tokens=special).ids  # type: ignore[no-any-return]
    for text in probes:
        for special in (True, False):
            if encode(text, special) != list(tok.encode(text, add_special_tokens=special)):
                return None
    return encode


def developer_as_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For a template that knows no `developer` role, as vLLM renders it: developer messages become system
    ones, and when a system message is then not alone at the start, all of them become one there (their
    contents joined by a blank line)."""
    messages = [dict(m, role="system") if m["role"] == "developer" else m for m in messages]
    systems = [i for i, m in enumerate(messages) if m["role"] == "system"]
    if systems in ([], [0]):
        return messages
    text = "\n\n".join(m["content"] for m in messages if m["role"] == "system" and m["content"])
    return [{"role": "system", "content": text}, *(m for m in messages if m["role"] != "system")]


def _model_type(model_dir: Path) -> str | None:
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config.get("model_type") if isinstance(config, dict) else None


def _has_tool_turns(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("tool_calls") or m["role"] == "tool" for m in messages)


def load_tokenizer(model_path: str, cache_dir: Path) -> ModelTokenizer:
    """`models[].path` (a directory or `builtin:*`, built on first use) -> its tokenizer."""
    from dynamo_lite.engines.models import resolve_model

    return ModelTokenizer(resolve_model(model_path, cache_dir))
