"""builtin:mock-words: the frontend tokenizes text as the mock engine does."""

from __future__ import annotations

import subprocess
import sys
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
