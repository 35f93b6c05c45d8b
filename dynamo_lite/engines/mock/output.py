"""What the mock writes, beyond its deterministic word tokens: scripted completions, JSON that a
structured-output schema holds it to, plausible logprobs, and vLLM's text-level stop strings.

- Scripted completion: `vllm_xargs: {"mock_output": "<text>"}` (vLLM's field for extension
  arguments) makes the mock emit that text, a word or punctuation mark per token, then EOS
  (unless ignore_eos): a tool call in a model's format reaches the frontend's parsers as a
  model would write it. `structured_outputs` json / json_object / choice (or a json_schema
  `response_format`) script a value that satisfies them, and so does a structural tag (a call in the first of
  its tags, its arguments in JSON or the XML style of the format: every format vLLM 0.32 holds tool calls
  to but Kimi-K3's); regex (but a call index, `\\d+`) and grammar are not simulated.
- Logprobs: the sampled token is the most likely (greedy-consistent), its probability and the
  alternatives' a pure function of (request key, position), so P and D and reruns agree.
- Stop strings are matched on the output text, as vLLM's detokenizer does (not before
  min_tokens); the text stops before the string unless include_stop_str_in_output.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import xxhash

from dynamo_lite.engines.mock.tokenizer import WordTokenizer

_PIECES = re.compile(r"\s*[A-Za-z0-9_]+|\s*[^\sA-Za-z0-9_]|\s+")


def script_pieces(text: str) -> list[str]:
    """The text cut into the tokens the mock emits for it."""
    return _PIECES.findall(text)


def script_for(xargs: dict[str, Any] | None, structured: dict[str, Any] | None, key: int) -> str | None:
    """The text a request is scripted to produce, if any."""
    if xargs and isinstance(xargs.get("mock_output"), str):
        return xargs["mock_output"]
    if not structured:
        return None
    if structured.get("json") is not None:
        schema = structured["json"]
        if isinstance(schema, str):
            schema = json.loads(schema)
        return json.dumps(instance(schema, schema, key))
    if structured.get("json_object"):
        return json.dumps({"mock": f"t{key % 1000}"})
    if structured.get("choice"):
        return str(structured["choice"][key % len(structured["choice"])])
    if structured.get("structural_tag"):
        tag = json.loads(structured["structural_tag"])
        return tagged(tag.get("format"), key) if isinstance(tag, dict) else None
    return None


def tagged(shape: Any, key: int) -> str | None:
    """Text a structural tag's format holds (None: a part the mock does not simulate): the first of each choice,
    none of what is optional, a call where calls may start, any JSON as `{}`."""
    kind = shape.get("type") if isinstance(shape, dict) else None
    parts: list[Any]
    if kind == "const_string":
        return shape["value"]
    if kind == "any_text":
        return "Mock text."
    if kind == "json_schema":
        schema = shape["json_schema"]
        value = instance(schema, schema, key) if schema is not True else {}
        return _styled(value, shape.get("style", "json"))
    if kind == "regex":
        return "0" if shape["pattern"] == r"\d+" else None
    if kind == "tag":
        end = shape["end"][0] if isinstance(shape["end"], list) else shape["end"]
        parts = [shape["begin"], tagged(shape["content"], key), end]
    elif kind == "sequence":
        parts = [tagged(s, key) for s in shape["elements"]]
    elif kind == "or":
        parts = [tagged(shape["elements"][0], key)]
    elif kind in ("optional", "star"):
        return ""
    elif kind == "plus":
        parts = [tagged(shape["content"], key)]
    elif kind in ("tags_with_separator", "triggered_tags"):
        parts = [tagged(shape["tags"][0], key)]
    else:
        return None
    return None if None in parts else "".join(parts)


_XML = {  # xgrammar's XML argument styles: how one argument is written (`{s}`: whether its value is a string)
    "qwen_xml": "<parameter={k}>{v}</parameter>",  # (as MiMo writes it; Qwen3-Coder's newlines its parser drops)
    "minimax_xml": '<parameter name="{k}">{v}</parameter>\n',
    "glm_xml": "<arg_key>{k}</arg_key><arg_value>{v}</arg_value>",
    "deepseek_xml": '<｜DSML｜parameter name="{k}" string="{s}">{v}</｜DSML｜parameter>\n',
    "deepseek_v4_1_xml": '<｜DSML｜ parameter name="{k}" string="{s}">{v}</｜DSML｜ parameter>\n',
}


def _styled(value: Any, style: str) -> str | None:
    """Arguments written in a structural tag's style: JSON, or one XML element per argument (a string raw,
    other values as JSON); None: a style the mock does not write."""
    if style == "json":
        return json.dumps(value)
    if style not in _XML or not isinstance(value, dict):
        return None
    return "".join(_XML[style].format(k=k, v=v if isinstance(v, str) else json.dumps(v),
                                      s=str(isinstance(v, str)).lower()) for k, v in value.items())  # fmt: skip


def instance(schema: Any, root: Any, key: int, depth: int = 0) -> Any:
    """A value valid under `schema` (the JSON Schema subset tool and pydantic schemas use)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return instance(target, root, key, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][key % len(schema["enum"])]
    for union in ("anyOf", "oneOf", "allOf"):
        if schema.get(union):
            return instance(schema[union][0], root, key, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(sub, root, key + i, depth + 1) for i, (name, sub) in enumerate(props.items())}
    if kind == "array":
        count = max(1, schema.get("minItems", 1))
        return [instance(schema.get("items", {}), root, key + i, depth + 1) for i in range(count)]
    if kind == "integer":
        return max(int(schema.get("minimum", 0)), key % 100)
    if kind == "number":
        return float(max(schema.get("minimum", 0), key % 100)) + 0.5
    if kind == "boolean":
        return key % 2 == 0
    if kind == "null":
        return None
    return f"t{key % 1000}"


def _unit(key: int, pos: int, salt: int) -> float:
    return xxhash.xxh64_intdigest(pos.to_bytes(8, "little") + salt.to_bytes(2, "little"), key) / 2**64


def logprobs_at(key: int, pos: int, token: int, k: int, vocab: int) -> tuple[float, list[tuple[int, float]]]:
    """(the token's logprob, the top-k (token, logprob) best first) at a position; the token is the top one."""
    p = 0.3 + 0.65 * _unit(key, pos, 1)  # the sampled token's probability
    ratio = 0.2 + 0.6 * _unit(key, pos, 2)  # each next alternative has this share of the previous one
    top = [(token, math.log(p))]
    rest = 1 - p
    for r in range(1, k):
        share = rest * (1 - ratio)
        alt = xxhash.xxh64_intdigest(pos.to_bytes(8, "little") + r.to_bytes(2, "little"), key) % vocab
        if alt == token:
            alt = (alt + 1) % vocab
        top.append((alt, math.log(max(share, 1e-30))))
        rest -= share
    return top[0][1], top[:k]


def logprob_of(key: int, pos: int, token: int, sampled: int, vocab: int) -> float:
    """A named token's logprob at a position (logprob_token_ids): as `logprobs_at` gives it among the top 20, else a
    small one of its own."""
    found = dict(logprobs_at(key, pos, sampled, 20, vocab)[1]).get(token)
    return found if found is not None else math.log(1e-4 * (0.5 + _unit(key ^ token, pos, 3)))


@dataclass
class OutputText:
    """A request's output text as it streams: scripted pieces or word tokens, and stop strings."""

    words: WordTokenizer
    script: list[str] = field(default_factory=list)
    eos_id: int = -1
    stops: tuple[str, ...] = ()
    include_stop: bool = False
    min_tokens: int = 0
    text: str = ""
    emitted: int = 0  # tokens turned into text so far
    stopped: str | None = None  # the stop string that ended it

    def add(self, ids: list[int]) -> str:
        """The text of the next tokens (cut at a stop string: then `stopped` is set)."""
        parts = []
        for t in ids:
            if t == self.eos_id:
                parts.append("")
            elif self.emitted < len(self.script):
                parts.append(self.script[self.emitted])
            else:
                parts.append(self.words.decode([t]))
            self.emitted += 1
        new = "".join(parts)
        if not self.stops or self.emitted < self.min_tokens:
            self.text += new
            return new
        start = max(0, len(self.text) - max(map(len, self.stops)) + 1)
        joined = self.text + new
        hits = [(i, s) for s in self.stops if (i := joined.find(s, start)) >= 0]
        if not hits:
            self.text = joined
            return new
        at, stop = min(hits)
        end = at + len(stop) if self.include_stop else at
        before = len(self.text)
        self.text, self.stopped = joined[:end], stop
        return self.text[before:] if end >= before else ""
