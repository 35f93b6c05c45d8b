"""`builtin:mock-words`: the mock engine's word tokenizer as a Hugging Face tokenizer (no weights).

The mock engine maps the word `t<N>` to token N. A frontend serving a mock fleet with
this tokenizer sends the same token ids for a text prompt as the mock would compute
itself, so a text benchmark (trace_replay) puts equal tokens on an engine whether it
comes through this project's frontend or through a router that forwards text. Its chat
template is the mock's: one "role: content" line per message, then "assistant:".
Words that are not `t<N>` become <unk>, where the mock hashes them: chat prompts differ
from the mock's own tokenization in their role words ("user:") only.
"""

from __future__ import annotations

import json
from pathlib import Path

from dynamo_lite.engines.models._atomic import building

VOCAB_SIZE = 128256  # the mock engine's default --vocab-size
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def write_words_tokenizer(out: Path) -> int:
    """The tokenizer files into ``out``; returns the id of ``<unk>``, also its end-of-sequence token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB_SIZE)} | {"<unk>": VOCAB_SIZE}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return VOCAB_SIZE


def build_mock_words(target: Path) -> Path:
    import transformers

    with building(target) as out:
        write_words_tokenizer(out)
        # transformers_version: without it, transformers takes the directory for an old Mistral one and
        # warns, at every load, that its regex is wrong.
        (out / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": VOCAB_SIZE + 1,
                                                     "transformers_version": transformers.__version__}))
    return target
