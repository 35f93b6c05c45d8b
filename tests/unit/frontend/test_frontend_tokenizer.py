"""The frontend's tokenizer calls the Rust tokenizer directly: the same ids as transformers' `encode`."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from dynamo_lite.engines.models.words import build_mock_words
from dynamo_lite.frontend.messages import ChatMessage
from dynamo_lite.frontend.tokenizer import ModelTokenizer, developer_as_system

TEXTS = ["The quick brown fox", " jumps\n\nover the  lazy dog. ", "<|im_start|>user\nhi<|im_end|>", "naïve café 東京 🙂",
         "def f(x):\n    return x ** 2  # tabs\tand spaces", "t5 t17 t128255 t0", "   ", "a" * 500]


def corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pieces = [w for t in TEXTS for w in t.split(" ")] + ["\n", "\t", " ", "<s>", "</s>", "<|endoftext|>"]
    return TEXTS + ["".join(rng.choice(pieces) + rng.choice(["", " ", "  "]) for _ in range(rng.randrange(1, 60)))
                    for _ in range(300)]


def same_ids(tok: ModelTokenizer) -> None:
    assert tok._rust is not None, "the direct path should be taken for a plain fast tokenizer"
    for text in corpus():
        for special in (True, False):
            assert tok.encode_prompt(text, special) == list(tok._tok.encode(text, add_special_tokens=special)), text


def test_the_tiny_models_tokenizer(tokenizer: ModelTokenizer) -> None:
    same_ids(tokenizer)


def test_the_mock_word_tokenizer(tmp_path: Path) -> None:
    build_mock_words(tmp_path)
    same_ids(ModelTokenizer(tmp_path))


def test_a_long_prompt_tokenizes_in_a_thread_while_the_loop_keeps_running(tokenizer: ModelTokenizer) -> None:
    """`_off_loop_if_long` hands a long prompt to a thread: the tokenizer must let go of the GIL there, or
    the event loop stops for the whole tokenization (transformers' and tokenizers' `encode` do not)."""
    from dynamo_lite.frontend.handlers import LONG_INPUT_CHARS, _off_loop_if_long

    prompt = " ".join(TEXTS) * 1500  # about 230k characters
    assert len(prompt) >= LONG_INPUT_CHARS

    async def run() -> tuple[list[int], int]:
        ticks = 0
        done = asyncio.Event()

        async def count() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count())
        try:
            ids = await _off_loop_if_long(len(prompt), lambda t: tokenizer.encode_prompt(t, True), prompt)
        finally:
            done.set()
            await counter
        return ids, ticks

    ids, ticks = asyncio.run(run())
    assert ids == list(tokenizer._tok.encode(prompt, add_special_tokens=True))
    # Tens of thousands of loop turns with the GIL free (an idle loop turns in microseconds); a few with it held.
    assert ticks >= 200, ticks


def test_developer_messages_become_system_ones_where_the_template_knows_no_developer(
        tokenizer: ModelTokenizer) -> None:  # fmt: skip
    """As vLLM renders them: developer -> system, then all system messages as one at the start."""
    assert developer_as_system([{"role": "developer", "content": "a"}, {"role": "user", "content": "b"}]) == [
        {"role": "system", "content": "a"}, {"role": "user", "content": "b"}]  # fmt: skip
    merged = developer_as_system([{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
                                  {"role": "developer", "content": "c"}])  # fmt: skip
    assert merged == [{"role": "system", "content": "a\n\nc"}, {"role": "user", "content": "b"}]
    assert not tokenizer.renders_developer
    as_developer = [ChatMessage(role="developer", content="Be brief."), ChatMessage(role="user", content="Hi")]
    as_system = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Hi")]
    assert tokenizer.render_chat(as_developer) == tokenizer.render_chat(as_system)
