"""A tiny random-weight Llama with a byte-level BPE tokenizer trained here, for fast tests.

The weights are random (seeded), so outputs are gibberish but deterministic; what
matters is that vLLM serves it like any model: same tokenizer contract, chat
template, KV cache layout and events. Head size 32 is the smallest vLLM's CPU
attention supports.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from pathlib import Path

from dynamo_lite.engines.models._atomic import building

VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    """Local text to train the tokenizer on: the docstrings of Python's builtins."""
    texts = [getattr(builtins, name).__doc__ or "" for name in sorted(dir(builtins))]
    return [t for t in texts if t] * 4


def train_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_tiny_llama(target: Path, seed: int = 0) -> Path:
    with building(target) as out:
        train_tokenizer(out)
        vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
        _save_random_llama(out, max(VOCAB_SIZE, len(vocab)), vocab["<|endoftext|>"], vocab["<|im_end|>"], seed)
    return target


def build_tiny_thinking(target: Path, seed: int = 0) -> Path:
    """The tiny Llama with a thinking model's tags, `<think>` and `</think>` (what vLLM's reasoning parsers look
    up), as tokens of its vocabulary."""
    return build_tiny_tagged(target, ("<think>", "</think>"), seed)


def build_tiny_tagged(target: Path, tags: Sequence[str], seed: int = 0) -> Path:
    """The tiny Llama with `tags` (a format's markers, which vLLM's parsers look up in the vocabulary) as tokens of
    its vocabulary, and room for them in its weights."""
    from transformers import AutoTokenizer

    with building(target) as out:
        train_tokenizer(out)
        tok = AutoTokenizer.from_pretrained(str(out))
        tok.add_tokens(list(tags))
        tok.save_pretrained(str(out))
        _save_random_llama(out, len(tok), tok.convert_tokens_to_ids("<|endoftext|>"),
                           tok.convert_tokens_to_ids("<|im_end|>"), seed)  # fmt: skip
    return target


def build_tiny_words(target: Path, seed: int = 0) -> Path:
    """The same tiny Llama with the mock engine's word tokenizer (`t<N>` is token N, words.py): a text
    benchmark's prompts become the same token ids on it as on a mock engine, block for block."""
    from dynamo_lite.engines.models.words import write_words_tokenizer

    with building(target) as out:
        unk = write_words_tokenizer(out)
        _save_random_llama(out, unk + 1, unk, unk, seed)
    return target


def _save_random_llama(out: Path, vocab_size: int, bos: int, eos: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
