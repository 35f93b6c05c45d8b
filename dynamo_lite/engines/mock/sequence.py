"""One request inside the simulated engine: its tokens, blocks and timestamps."""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field

import xxhash

from dynamo_lite.engines.mock.blocks import Block, hash_block


class SeqStatus(enum.Enum):
    WAITING = "waiting"  # queued, or preempted and queued again
    WAITING_FOR_KV = "waiting_for_kv"  # blocks held, remote KV transfer in flight
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.StrEnum):
    STOP = "stop"  # a stop token was sampled
    LENGTH = "length"  # max_tokens (or the model length) reached
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class RemoteKv:
    """Decode side of a disaggregated request: KV the prefill instance computed."""

    num_tokens: int  # prompt tokens the prefill instance holds (remote_num_tokens)
    engine_id: str  # remote_engine_id, for logs
    cached_tokens: int | None = None  # remote_prefill_cached_tokens: P's own cache hits


@dataclass(slots=True)
class Sequence:
    """A request's state; mutated only by the scheduler."""

    request_id: str
    prompt: list[int]
    max_tokens: int
    output_key: int  # seeds the deterministic output tokens
    arrival: float  # simulated seconds
    stop_token_ids: frozenset[int] = frozenset()
    vocab_size: int = 32000
    script: tuple[int, ...] = ()  # scripted output tokens, then EOS (output.py)
    eos_token_id: int | None = None  # emitted when the script ends; None: no script, never EOS
    ignore_eos: bool = False
    min_tokens: int = 0  # no EOS nor stop token before this many
    remote_kv: RemoteKv | None = None  # set on a decode instance given do_remote_prefill
    for_remote_decode: bool = False  # prefill instance given do_remote_decode
    prompt_hashes: list[int] = field(default_factory=list)  # hashes of the prompt's full blocks
    # --- state, owned by the scheduler ---
    status: SeqStatus = SeqStatus.WAITING
    output: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in `blocks`
    blocks: list[Block] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # full blocks' hashes (prompt + output)
    num_cached_blocks: int = 0  # leading blocks registered in the prefix cache
    kv_ready_at: float = 0.0  # when the remote KV transfer completes (WAITING_FOR_KV)
    kv_loaded: bool = False  # remote KV arrived; the next pass recomputes the last token only
    finish_reason: FinishReason | None = None
    final_block_ids: list[int] = field(default_factory=list)  # for_remote_decode: blocks at finish
    num_preemptions: int = 0
    # --- accounting for usage and metrics ---
    num_local_cached: int = 0  # prompt tokens hit in the local prefix cache at first admission
    num_external: int = 0  # prompt tokens received by KV transfer
    prefix_queried: bool = False
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens [start, end) of prompt + output, without copying both."""
        n = len(self.prompt)
        if end <= n:
            return self.prompt[start:end]
        if start >= n:
            return self.output[start - n : end - n]
        return self.prompt[start:] + self.output[: end - n]

    def hashes_up_to(self, num_full_blocks: int, block_size: int, seed: int) -> list[int]:
        """Extend `block_hashes` to cover `num_full_blocks` blocks and return it."""
        if not self.block_hashes and self.prompt_hashes:
            self.block_hashes = list(self.prompt_hashes)
        while len(self.block_hashes) < num_full_blocks:
            i = len(self.block_hashes)
            parent = self.block_hashes[-1] if self.block_hashes else None
            tokens = self.token_slice(i * block_size, (i + 1) * block_size)
            self.block_hashes.append(hash_block(parent, tokens, seed))
        return self.block_hashes

    def next_output_token(self) -> int:
        """The token this request samples next: a pure function of its key, script and position."""
        pos = len(self.output)
        if pos < len(self.script):
            token = self.script[pos]
        elif self.eos_token_id is not None and not self.ignore_eos:
            token = self.eos_token_id
        else:
            token = self.random_token(pos)
        if pos < self.min_tokens and (token in self.stop_token_ids or token == self.eos_token_id):
            token = self.random_token(pos)
            while token in self.stop_token_ids:
                token = (token + 1) % self.vocab_size
        return token

    def random_token(self, pos: int) -> int:
        digest = xxhash.xxh64_intdigest(pos.to_bytes(8, "little"), self.output_key & 0xFFFFFFFFFFFFFFFF)
        return digest % self.vocab_size

    def stops_at(self, token: int) -> bool:
        """Whether `token`, just appended to the output, ends the request (EOS unless ignored, a stop token;
        neither before min_tokens others)."""
        if len(self.output) <= self.min_tokens:
            return False
        return token in self.stop_token_ids or (token == self.eos_token_id and not self.ignore_eos)


def output_key(seed: int, prompt: list[int]) -> int:
    """Same seed and prompt: same output tokens, on any instance (P and D agree)."""
    return xxhash.xxh64_intdigest(array("q", prompt).tobytes(), seed & 0xFFFFFFFFFFFFFFFF)
