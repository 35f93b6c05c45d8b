"""Reasoning streamed as vLLM 0.32's chat server streams it, where its stream is not its whole answer: a request
that forces content (nemotron_v3, granite_thinking_parser: the reasoning of a stream whose reasoning never ended
comes again as content at the end), and Granite 3's phrases, which vLLM's stream reads only where the output
starts with one. Each output goes token by token through vLLM's composed parser of that name, with the markers
as the tokens the model has; ours is fed the same text in pieces of several sizes (test_tool_parsers_vllm.py
holds the same parsers to vLLM's whole answers)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dynamo_lite.frontend.tools import new_reasoning_parser

OUTPUTS = {
    "granite": ["Here is my thought process: A Here is my response: B", "Here is my answer.", "Hello",
                "Here's my thought process:\nA\nHere's my response:\nB",
                "Here is my thought process: A. Here we go. Here is my response: B Here is my response: C",
                "Hello Here is my thought process: A Here is my response: B", "Here is my thought process: cut"],
    "nemotron_v3": ["Cut short", "Plan.</think>", "Plan.</think>\n\n", "Plan.\n</think>\nAns", "Plan.<tool_call>x"],
    "granite_thinking_parser": ["Cut short", "Plan.</think>", "Plan.</think>\n\n", "Plan.\n</think>\nAns",
                                "Plan.\n</think>\n\n<tool_call>x"],
}  # fmt: skip
WORD = re.compile(r"'s|\s?\w+|\s|[^\w\s]")  # a word is a token, as in the models' vocabularies
FORCING = [{"force_nonempty_content": True}, {"enable_thinking": False}, {}]


def vllm_stream(tok: Any, name: str, kwargs: dict[str, Any], text: str) -> tuple[str, str]:
    """The reasoning and content vLLM's chat server streams for `text`, one token a step: the family's markers, and
    each word (as `WORD`), which vLLM's Granite machine needs (it looks for its phrases at a token that starts
    with `Here`)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    marks = {t: tok.convert_tokens_to_ids(t) for t in tok.get_added_vocab()}
    plain = tok.convert_tokens_to_ids("a")
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    chat_template_kwargs=kwargs)  # fmt: skip
    parser = ParserManager.get_parser(reasoning_parser_name=name)(tok, None, chat_template_kwargs=kwargs)
    steps, i = [], 0
    while i < len(text):
        mark = max((m for m in marks if text.startswith(m, i)), key=len, default=None) or WORD.match(text, i)[0]
        steps.append((mark, [marks.get(mark, plain)]))
        i += len(mark)
    reasoning, content = "", ""
    for n, (piece, ids) in enumerate(steps):
        delta = parser.parse_delta(piece, ids, request, prompt_token_ids=[plain], finished=n == len(steps) - 1)
        reasoning += (delta.reasoning or "") if delta else ""
        content += (delta.content or "") if delta else ""
    return reasoning, content


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from dynamo_lite.engines.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tiny-reasoning")
    train_tokenizer(out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])
    return tok


@pytest.mark.parametrize("name", list(OUTPUTS))
@pytest.mark.parametrize("kwargs", FORCING, ids=str)
def test_the_same_reasoning_as_vllm_s_stream(tok: Any, name: str, kwargs: dict[str, Any]) -> None:
    for text in OUTPUTS[name]:
        expected = vllm_stream(tok, name, kwargs, text)
        for size in (len(text), 1, 4):
            parser, got = new_reasoning_parser(name, kwargs), ("", "")
            for piece in [*(text[i:i + size] for i in range(0, len(text), size)), None]:
                r, c = parser.feed(piece) if piece is not None else parser.finish()
                got = (got[0] + r, got[1] + c)
            assert (got[0], got[1] + parser.promoted()) == expected, (text, size)



@pytest.mark.parametrize("name", ["nemotron_v3", "granite_thinking_parser"])
def test_a_forced_answer_through_a_chat_choice(tok: Any, name: str) -> None:
    """A chat choice of a request that forces content: its whole message as vLLM's whole answer (reasoning and
    content swapped), its stream as vLLM's stream (the reasoning again as content in the last chunk)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    from dynamo_lite.frontend.choice import ChatChoice, ChatOptions
    from dynamo_lite.frontend.request import Outcome, Piece

    kwargs = {"force_nonempty_content": True}
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    chat_template_kwargs=kwargs)  # fmt: skip
    for text in ("Cut short", "Plan.</think>", "Plan.</think>The answer."):
        parser = ParserManager.get_parser(reasoning_parser_name=name)(tok, None, chat_template_kwargs=kwargs)
        reasoning, content, _ = parser.parse(text, request, enable_auto_tools=False)
        opts = ChatOptions(reasoning_parser=name, template_kwargs=kwargs)
        whole, stream = ChatChoice(0, opts, str), ChatChoice(0, opts, str)
        whole.delta(Piece(text, [], None))
        message = whole.message(Outcome(1, None, "stop", (), 0))["message"]
        assert (message["reasoning"], message["content"] or None) == (reasoning, content), text
        chunks = [stream.delta(Piece(c, [], None)) for c in text] + [stream.last(Outcome(1, None, "stop", (), 0))]
        said = ["".join(c["delta"].get(k) or "" for c in chunks if c) for k in ("reasoning", "content")]
        assert tuple(said) == vllm_stream(tok, name, kwargs, text), text
