"""A trivial deterministic tokenizer for text prompts (the mock has no model).

Whitespace-separated words map to ids: the word `t<N>` with N < vocab_size is
token N, any other word is xxh64(word) % vocab_size. Token N decodes to " t<N>",
so generated text tokenizes back to the same ids.
"""

from __future__ import annotations

import xxhash


class WordTokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [self._word_id(word) for word in text.split()]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(f" t{t}" for t in token_ids)

    def _word_id(self, word: str) -> int:
        if word.startswith("t") and word[1:].isdigit() and int(word[1:]) < self.vocab_size:
            return int(word[1:])
        return xxhash.xxh64_intdigest(word.encode()) % self.vocab_size


def render_chat(messages: list[tuple[str, str]]) -> str:
    """The mock's chat template: one "role: content" line per message, then "assistant:"."""
    return "".join(f"{role}: {content}\n" for role, content in messages) + "assistant:"
