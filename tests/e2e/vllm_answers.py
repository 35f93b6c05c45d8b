"""The requests `test_vllm_frontend.py` sends both to the frontend and to vLLM's own server on the decode
engine, and how their answers are made comparable: chat and completions, whole and streamed, with logprobs,
echo, stop strings, seeded sampling, n, batches, beam search, tool history, refusals, /tokenize and
/detokenize.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"], "additionalProperties": False}}}  # fmt: skip


def _chat(content: str, **fields: object) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": content}], "max_tokens": 6,
            "temperature": 0, **fields}  # fmt: skip


def _completion(prompt: object, **fields: object) -> dict:
    return {"model": "smollm2", "prompt": prompt, "max_tokens": 4, "temperature": 0, **fields}


CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"
SAME_ANSWERS = {
    "chat": (CHAT_PATH, _chat("Name a fruit.")),
    "chat, no model": (CHAT_PATH, {k: v for k, v in _chat("Name a fruit.").items() if k != "model"}),
    "chat, logprobs": (CHAT_PATH, _chat("Name a fruit.", logprobs=True, top_logprobs=2)),
    "chat, stop": (CHAT_PATH, _chat("Count: one, two, three,", stop=[","], include_stop_str_in_output=True)),
    "chat, n=2 seeded": (CHAT_PATH, _chat("Name a fruit.", n=2, temperature=0.8, seed=5)),
    "chat, n=2 seeded, logprobs": (CHAT_PATH, _chat("Name a fruit.", n=2, temperature=0.8, seed=1, logprobs=True,
                                                    top_logprobs=2)),
    "chat, a custom role": (CHAT_PATH, {**_chat(""), "messages": [{"role": "narrator", "content": "Once upon"}]}),
    "chat, return_token_ids": (CHAT_PATH, _chat("Name a fruit.", return_token_ids=True)),
    "chat, a session id": (CHAT_PATH, _chat("Name a fruit.", session_id="conversation-1")),
    "chat, sampling seeded": (CHAT_PATH, _chat("Name a fruit.", temperature=0.7, seed=3, top_k=5, min_p=0.1,
                                               repetition_penalty=1.2, presence_penalty=0.5)),
    "chat, a developer message": (CHAT_PATH, {**_chat(""), "messages": [{"role": "developer", "content": "Be brief."},
                                                                        {"role": "user", "content": "Hi"}]}),
    "chat, a tool call and its result": (CHAT_PATH, {**_chat(""), "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}),  # fmt: skip
    "chat, max_tokens past what the context leaves": (CHAT_PATH, _chat("Say hi.", max_tokens=4090)),
    "chat, no generation prompt": (CHAT_PATH, {**_chat("Hello"), "add_generation_prompt": False}),
    "chat, stream, echo": (CHAT_PATH, {**_chat(""), "messages": [{"role": "user", "content": "Name a fruit."},
                                                                 {"role": "assistant", "content": "An"}],
                                       "echo": True, "add_generation_prompt": False,
                                       "continue_final_message": True, "stream": True}),
    "chat, stream, characters over several tokens": (CHAT_PATH, _chat("Write the word café and an emoji.",
                                                                     max_tokens=20, stream=True)),
    "chat, stream, n=2 seeded": (CHAT_PATH, _chat("Name a fruit.", n=2, temperature=0.8, seed=4, stream=True)),
    "chat, stream": (CHAT_PATH, _chat("Name a fruit.", stream=True, stream_options={"include_usage": True})),
    "chat, stream to the end": (CHAT_PATH, _chat("Say hi.", max_tokens=40, stream=True)),
    "chat, stream, logprobs": (CHAT_PATH, _chat("Name a fruit.", stream=True, logprobs=True, top_logprobs=1)),
    "chat, stream, continuous usage": (CHAT_PATH, _chat("Name a fruit.", stream=True, stream_options={
        "include_usage": True, "continuous_usage_stats": True})),  # fmt: skip
    "chat, stream, return_token_ids": (CHAT_PATH, _chat("Name a fruit.", stream=True, return_token_ids=True)),
    "completion": (COMPLETIONS_PATH, _completion("The capital of France is")),
    "completion, echo and logprobs": (COMPLETIONS_PATH, _completion("The capital of France is", echo=True,
                                                                    logprobs=2)),
    "completion, a batch": (COMPLETIONS_PATH, _completion(["The capital of France is", "One plus one is"])),
    "completion, return_token_ids and echo": (COMPLETIONS_PATH, _completion("Hello there", return_token_ids=True,
                                                                            echo=True)),
    "completion, stream, echo": (COMPLETIONS_PATH, _completion("The capital of France is", stream=True, echo=True,
                                                               stream_options={"include_usage": True})),
    "completion, stream, a batch": (COMPLETIONS_PATH, _completion(["A", "B"], stream=True)),
    "completion, stream, logprobs": (COMPLETIONS_PATH, _completion("Hello", logprobs=2, stream=True)),
    "completion, token ids, n=2 seeded": (COMPLETIONS_PATH, _completion([[504, 3575], [1, 2, 3]], n=2,
                                                                        temperature=0.9, seed=2)),
    "completion, best_of (ignored by both)": (COMPLETIONS_PATH, _completion("The capital of France is", best_of=3)),
    "completion, max_tokens null": (COMPLETIONS_PATH, {**_completion("Hi"), "max_tokens": None}),
    "completion, echo and logprobs, no output (lm-eval's loglikelihood)": (COMPLETIONS_PATH, _completion(
        "The capital of France is Paris", echo=True, logprobs=1, max_tokens=0)),  # fmt: skip
    "completion, beam search": (COMPLETIONS_PATH, _completion("The capital of France is", use_beam_search=True, n=2)),
    "completion, beam search, a batch, logprobs, token ids": (COMPLETIONS_PATH, _completion(
        ["The capital of France is", "One plus one is"], use_beam_search=True, n=3, logprobs=2, return_token_ids=True,
        length_penalty=0.5)),  # fmt: skip
    "completion, beam search, echo, no output": (COMPLETIONS_PATH, _completion(
        ["The capital of France is", "Hi"], use_beam_search=True, n=2, echo=True, max_tokens=0)),  # fmt: skip
    "chat, beam search": (CHAT_PATH, _chat("Name a fruit.", use_beam_search=True, n=2, logprobs=True, top_logprobs=1)),
    "chat, stream, beam search": (CHAT_PATH, _chat("Name a fruit.", use_beam_search=True, n=2, stream=True)),
    "completion, logprob_token_ids": (COMPLETIONS_PATH, _completion("The capital of France is", logprobs=1,
                                                                    logprob_token_ids=[7042, 378])),
    "completion, echo, logprobs and logprob_token_ids": (COMPLETIONS_PATH, _completion(
        "The capital of France is", echo=True, logprobs=1, logprob_token_ids=[378, 7042])),  # fmt: skip
    "chat, logprob_token_ids": (CHAT_PATH, _chat("Name a fruit.", logprobs=True, logprob_token_ids=[7042, 378])),
    "chat, stream, logprob_token_ids": (CHAT_PATH, _chat("Name a fruit.", stream=True, logprobs=True, top_logprobs=2,
                                                         logprob_token_ids=[378])),
    "chat, return_prompt_text": (CHAT_PATH, _chat("Name a fruit.", return_prompt_text=True)),
    "chat, stream, return_prompt_text, n=2 seeded": (CHAT_PATH, _chat("Name a fruit.", stream=True, n=2, seed=3,
                                                                      temperature=0.8, return_prompt_text=True)),
    "chat, stream, stream_interval": (CHAT_PATH, _chat("Say hi.", max_tokens=12, stream=True, stream_interval=4)),
    "completion, stream, stream_interval": (COMPLETIONS_PATH, _completion("The capital of France is", max_tokens=9,
                                                                          stream=True, stream_interval=3)),
    "chat, watermarking off": (CHAT_PATH, _chat("Name a fruit.", watermarking=False)),
    "refused: logprob_token_ids without logprobs": (CHAT_PATH, _chat("x", logprob_token_ids=[378])),
    "refused by the engine: logprob_token_ids past the vocabulary": (COMPLETIONS_PATH, _completion(
        "x", logprobs=1, logprob_token_ids=[99999999])),  # fmt: skip
    "refused: completion, stream, beam search": (COMPLETIONS_PATH, _completion("x", use_beam_search=True, stream=True)),
    "refused: beam search, echo and logprobs": (COMPLETIONS_PATH, _completion("x", use_beam_search=True, echo=True,
                                                                              logprobs=1)),
    "refused by the engine: logprobs -1": (COMPLETIONS_PATH, _completion("x", logprobs=-1)),
    "tokenize a prompt": ("/tokenize", {"model": "smollm2", "prompt": "Hello world", "return_token_strs": True}),
    "tokenize messages": ("/tokenize", {"model": "smollm2", "messages": [
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}),  # fmt: skip
    "detokenize": ("/detokenize", {"model": "smollm2", "tokens": [504, 3575, 282, 4649, 314]}),
    "refused: top_logprobs without logprobs": (CHAT_PATH, _chat("x", top_logprobs=2)),
    "refused: stream_options without stream": (CHAT_PATH, _chat("x", stream_options={"include_usage": True})),
    "refused: n=0": (CHAT_PATH, _chat("x", n=0)),
    "refused: max_tokens past the context": (CHAT_PATH, _chat("x", max_tokens=5000)),
    "refused: a prompt past the context": (COMPLETIONS_PATH, _completion("hello " * 5000)),
    "SageMaker's invocations, chat": ("/invocations", _chat("Name a fruit.")),
    "SageMaker's invocations, a completion, streamed": ("/invocations", _completion("Hello", stream=True)),
    "refused: SageMaker's invocations, neither": ("/invocations", {"model": "smollm2", "input": "x"}),
    "batch chat": ("/v1/chat/completions/batch", _chat("x", messages=[
        [{"role": "user", "content": "Name a fruit."}], [{"role": "user", "content": "Name a color."}]])),  # fmt: skip
    "batch chat, logprobs, return_token_ids, echo": ("/v1/chat/completions/batch", _chat("x", messages=[
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello,"}], [{"role": "user", "content": "Go"}]],
        logprobs=True, return_token_ids=True, echo=True, add_generation_prompt=False)),  # fmt: skip
    # (not top_logprobs: an alternative that is part of a character is "" with no bytes in vLLM's batch answer, and
    # "\ufffd" in its chat answer, which the frontend's gives in both)
    "refused: batch chat, n=2": ("/v1/chat/completions/batch", _chat("x", messages=[[{"role": "user", "content": "x"}]],
                                                                      n=2)),  # fmt: skip
}
# What the frontend cannot give as vLLM does (docs/reference/openai-api.md, "Differences from vLLM's server").
UNKNOWABLE = ("created_cache_tokens", "rank")


def answer(url: str, body: dict) -> tuple[int, object]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"].get("param")  # a refusal: the field it names
    if not body.get("stream"):
        return status, comparable(json.loads(text))
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert text.rstrip().endswith("data: [DONE]")
    by_choice: dict[int, list] = {}  # a batch's choices interleave as their engine requests run
    for event in events:
        for choice in event.pop("choices"):
            by_choice.setdefault(choice["index"], []).append(comparable(choice))
    return status, (by_choice, [comparable(e) for e in events])


def comparable(value: object) -> object:
    """Without what differs between any two answers (ids, times) or cannot be known (UNKNOWABLE), and without
    keys whose value is null (vLLM writes every field it has; the frontend leaves out those it has no value for)."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()
                if v is not None and k not in ("id", "created", "system_fingerprint", *UNKNOWABLE)}  # fmt: skip
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return round(value, 3) if isinstance(value, float) else value
