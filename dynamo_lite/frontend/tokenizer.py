"""The model's tokenizer and chat template, loaded once per served model (local files only).

The frontend tokenizes every request exactly once; workers receive token ids.
Output text is the engine's own detokenization (see `upstream.py`), so this class
only encodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynamo_lite.frontend.schemas import ChatMessage


class ModelTokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self.model_dir = model_dir
        self._tok: Any = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        if not getattr(self._tok, "chat_template", None):
            raise ValueError(f"{model_dir}: the tokenizer has no chat template; /v1/chat/completions needs one")

    def encode_chat(self, messages: list[ChatMessage]) -> list[int]:
        """The chat template with the generation prompt, tokenized (the template adds any BOS itself)."""
        text = self._tok.apply_chat_template(
            [{"role": m.role, "content": m.text()} for m in messages], tokenize=False, add_generation_prompt=True
        )
        return list(self._tok.encode(text, add_special_tokens=False))

    def encode_prompt(self, prompt: str) -> list[int]:
        return list(self._tok.encode(prompt, add_special_tokens=True))

    def encode_text(self, text: str) -> list[int]:
        """Plain text, no special tokens (for engine text that came without token ids)."""
        return list(self._tok.encode(text, add_special_tokens=False))


def load_tokenizer(model_path: str, cache_dir: Path) -> ModelTokenizer:
    """`models[].path` (a directory or `builtin:*`, built on first use) -> its tokenizer."""
    from dynamo_lite.engines.models import resolve_model

    return ModelTokenizer(resolve_model(model_path, cache_dir))
