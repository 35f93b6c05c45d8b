"""SSE framing, the once-per-response chunk frame, and choices built from pieces."""

from __future__ import annotations

import json

from dynamo_lite.frontend.choice import ChatChoice, ChatOptions, CompletionChoice
from dynamo_lite.frontend.logprobs import CompletionLogprobs, chat_content
from dynamo_lite.frontend.request import Outcome, Piece, TokenLogprob
from dynamo_lite.frontend.sse import DONE, Shape, sse, usage_body


def event(frame: bytes) -> dict:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    return json.loads(frame[6:])


def test_sse_frame() -> None:
    assert sse({"a": 1, "b": "é"}) == b'data: {"a":1,"b":"\xc3\xa9"}\n\n'
    assert DONE == b"data: [DONE]\n\n"


def test_chat_chunks() -> None:
    shape = Shape("chatcmpl-1", "m", 123, chat=True, include_usage=True)
    assert event(shape.role_chunk(1))["choices"][0] == {"index": 1, "delta": {"role": "assistant", "content": ""},
                                                        "logprobs": None, "finish_reason": None}
    choice = ChatChoice(0, ChatOptions(), str)
    hi = event(shape.frame(choice.delta(Piece("Hi", [5], None))))
    assert hi["object"] == "chat.completion.chunk" and hi["usage"] is None and hi["choices"][0]["delta"] == {
        "content": "Hi"}
    assert choice.delta(Piece("", [], None)) is None
    last = event(shape.frame(choice.last(Outcome(1, 0, "stop", (), 0))))["choices"][0]
    assert last["delta"] == {} and last["finish_reason"] == "stop"
    use = event(shape.usage_chunk(usage_body(5, 2, 3)))
    assert use["choices"] == [] and use["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                                                      "prompt_tokens_details": {"cached_tokens": 3}}
    continuous = event(shape.frame({"index": 0}, usage_body(5, 1)))
    assert continuous["usage"] == {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}


def test_completion_chunks_and_full() -> None:
    shape = Shape("cmpl-1", "m", 123, chat=False)
    choice = CompletionChoice(0, None, [], None, False)
    chunk = event(shape.frame(choice.delta(Piece(" x", [1], None))))
    assert "usage" not in chunk and chunk["choices"][0]["text"] == " x"
    choice.delta(Piece("y", [2], "length"))
    full = shape.full([choice.whole(Outcome(2, 0, "length", (), 0))], usage_body(1, 2, 0))
    assert full["object"] == "text_completion" and full["choices"][0]["text"] == " xy"
    assert full["choices"][0]["finish_reason"] == "length"


def test_echo_and_logprobs_of_a_completion() -> None:
    texts = {1: "a", 2: "bb", 3: "c", 9: "z"}
    lp = CompletionLogprobs(1, texts.__getitem__)
    choice = CompletionChoice(0, "abb", [1, 2], lp, False)
    prompt = [None, TokenLogprob(2, -0.5, ((9, -0.1), (2, -0.5)))]
    first = choice.delta(Piece("c", [3], None, [TokenLogprob(3, -0.2, ((3, -0.2), (9, -2.0)))], prompt))
    assert first["text"] == "abbc"
    assert first["logprobs"] == {"text_offset": [0, 1, 3], "token_logprobs": [None, -0.5, -0.2],
                                 "tokens": ["a", "bb", "c"], "top_logprobs": [None, {"bb": -0.5, "z": -0.1},
                                                                              {"c": -0.2}]}  # fmt: skip
    second = choice.delta(Piece("z", [9], "length", [TokenLogprob(9, -1.0, ((3, -0.3),))]))
    assert second["logprobs"]["text_offset"] == [4]  # carried on from the first chunk
    whole = choice.whole(Outcome(2, 0, "length", (), 0))
    assert whole["text"] == "abbcz" and whole["logprobs"]["tokens"] == ["a", "bb", "c", "z"]


def test_chat_logprobs_content() -> None:
    choice = ChatChoice(0, ChatOptions(top_logprobs=1), {4: "é", 5: "x"}.__getitem__)
    delta = choice.delta(Piece("é", [4], None, [TokenLogprob(4, -0.1, ((4, -0.1), (5, -3.0)))]))
    assert delta["logprobs"] == {"content": [{"token": "é", "logprob": -0.1, "bytes": [195, 169],
                                              "top_logprobs": [{"token": "é", "logprob": -0.1, "bytes": [195, 169]}]}]}
    message = choice.message(Outcome(1, 0, "stop", (), 0))
    assert message["logprobs"]["content"][0]["token"] == "é" and message["message"]["content"] == "é"


def test_chat_top_logprobs_list_the_sampled_token_first() -> None:
    """As vLLM lists them: a sampled token that is not the most likely comes first, then the most likely."""
    texts = {4: "a", 5: "b", 6: "c"}.__getitem__
    entry = TokenLogprob(5, -2.0, ((4, -0.5), (6, -1.0), (5, -2.0)))
    for k, listed in ((1, ["b"]), (2, ["b", "a"]), (3, ["b", "a", "c"]), (0, [])):
        (content,) = chat_content([entry], k, texts)
        assert [t["token"] for t in content["top_logprobs"]] == listed


def test_logprobs_listed_as_the_engine_listed_them() -> None:
    """Where vLLM writes the engine's list as it is: a beam step's (its first alternatives whichever token the beam
    took, here the second best; in chat no bytes of the token itself), and logprob_token_ids' (the token sampled,
    then the tokens named, in that order and not by likelihood)."""
    texts = {4: "a", 5: "b", 6: "c"}.__getitem__
    step = TokenLogprob(5, -1.0, ((4, -0.5), (5, -1.0), (6, -2.0)))  # a beam step's k + 1 = 3, for k = 2
    assert CompletionLogprobs(2, texts, listed=True).body([step], [5])["top_logprobs"] == [
        {"a": -0.5, "b": -1.0, "c": -2.0}]
    narrow = TokenLogprob(6, -2.0, ((4, -0.5), (5, -1.0)))  # k = 1: the token taken is not among them
    assert CompletionLogprobs(1, texts, listed=True).body([narrow], [6])["top_logprobs"] == [{"a": -0.5, "b": -1.0}]
    [beam] = chat_content([step], 1, texts, listed=True, beam_search=True)
    assert beam["bytes"] is None and [t["token"] for t in beam["top_logprobs"]] == ["a"]
    named = TokenLogprob(4, -0.5, ((4, -0.5), (6, -9.0), (5, -3.0)))  # sampled a; named c then b
    [chat] = chat_content([named], -1, texts, listed=True)
    assert chat["bytes"] == [97] and [t["token"] for t in chat["top_logprobs"]] == ["a", "c", "b"]
    assert list(CompletionLogprobs(0, texts, listed=True).body([named], [4])["top_logprobs"][0]) == ["a", "c", "b"]
