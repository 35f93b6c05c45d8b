"""Response formats that vLLM turns into xgrammar formats inside its structural tags (`structured_outputs_to_format`),
for the tests that hold the frontend's tags to vLLM's: grammars in EBNF and in Lark, and the legacy structural tag."""

from __future__ import annotations

from typing import Any

GRAMMARS: list[dict[str, Any]] = [
    {"structured_outputs": {"grammar": 'root ::= "yes" | "no"'}},  # EBNF: passed as it is
    {"structured_outputs": {"grammar": '# a Lark grammar\nstart: answer\nanswer: "yes" | "no"'}},  # Lark: converted
]
LEGACY: dict[str, Any] = {"response_format": {  # triggers and JSON structures
    "type": "structural_tag", "triggers": ["<fn="],
    "structures": [{"begin": "<fn=a>", "schema": {"type": "object"}, "end": "</fn>"}]}}  # fmt: skip
