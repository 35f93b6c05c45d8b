"""builtin:mock-words (and builtin:tiny-words, a real model with its tokenizer): the frontend tokenizes
text as the mock engine does."""

from __future__ import annotations

import subprocess
import sys
import json
from pathlib import Path

from dynamo_lite.engines.mock.tokenizer import WordTokenizer
from dynamo_lite.engines.models import resolve_model
from dynamo_lite.engines.models.words import VOCAB_SIZE
from dynamo_lite.frontend.tokenizer import ModelTokenizer


def test_text_prompts_give_the_mock_engines_token_ids(tmp_path: Path) -> None:
    tok = ModelTokenizer(resolve_model("builtin:mock-words", tmp_path))
    text = "t5 t6  t128255\nt0 t77"
    assert tok.encode_prompt(text) == WordTokenizer(VOCAB_SIZE).encode(text) == [5, 6, 128255, 0, 77]
    assert tok.encode_prompt("hello t3") == [VOCAB_SIZE, 3]  # not a mock word: <unk>


def test_loading_it_draws_no_warning_from_transformers(tmp_path: Path) -> None:
    """transformers took a config.json without transformers_version for an old Mistral one, and warned
    at every load that the tokenizer's regex was wrong."""
    load = ("import pathlib, sys; from dynamo_lite.frontend.tokenizer import load_tokenizer; "
            "load_tokenizer('builtin:mock-words', pathlib.Path(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", load, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[transformers]" not in done.stderr, done.stderr


def test_tiny_words_is_a_model_with_the_mock_s_token_ids(tmp_path: Path) -> None:
    """The arena's real engines serve it: every word id is in its vocabulary, and <unk> ends a sequence."""
    model = resolve_model("builtin:tiny-words", tmp_path)
    tok = ModelTokenizer(model)
    assert tok.encode_prompt("t5 t6 t128255") == [5, 6, 128255]
    config = json.loads((model / "config.json").read_text())
    assert config["vocab_size"] == VOCAB_SIZE + 1 and config["eos_token_id"] == VOCAB_SIZE
    assert (model / "model.safetensors").stat().st_size > 0
