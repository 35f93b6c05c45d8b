"""The mock engine as a pooling model (`--runner pooling`): vLLM's /v1/embeddings.

Each input is run through the scheduler as a prompt with one output step, so that it takes a prefill's time and
KV, and its embedding is a function of its token ids (and the seed): a unit vector of `--embedding-size` floats
drawn from them. The answer has vLLM's shape: `data` of `{index, object: embedding, embedding}` (floats, or
`encoding_format: base64`: the float32 little-endian bytes in base64, as OpenAI's clients decode them) and
`usage` counting the prompt tokens. vLLM's other pooling endpoints are not simulated (a 404, as a vLLM embedding
server answers /classify).
"""

from __future__ import annotations

import base64
import math
import random
import struct
from collections.abc import Sequence
from typing import Any, Literal

from dynamo_lite.engines.mock.openai_api import _Body


class EmbeddingRequest(_Body):
    """POST /v1/embeddings, as vLLM's: one input or a list, as text or token ids."""

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    request_id: str | None = None

    def prompts(self, encode: Any) -> list[list[int]]:
        """Each input's token ids (`encode`: text to ids)."""
        given = self.input
        if isinstance(given, str):
            return [encode(given)]
        if given and all(isinstance(t, int) for t in given):
            return [list(given)]  # type: ignore[arg-type]
        return [encode(x) if isinstance(x, str) else list(x) for x in given]  # type: ignore[union-attr]


def embedding(token_ids: Sequence[int], size: int, seed: int) -> list[float]:
    """A unit vector of `size` floats, a function of the token ids and the seed."""
    rng = random.Random(f"{seed}/{','.join(map(str, token_ids))}")
    vector = [rng.gauss(0.0, 1.0) for _ in range(size)]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def answer(rid: str, model: str, created: int, vectors: list[list[float]], encoding: str,
           prompt_tokens: int) -> dict[str, Any]:  # fmt: skip
    data = [{"index": i, "object": "embedding", "embedding": encoded(v, encoding)} for i, v in enumerate(vectors)]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
             "prompt_tokens_details": None}  # fmt: skip
    return {"id": rid, "object": "list", "created": created, "model": model, "data": data, "usage": usage}
