"""No prompt text and no API key in any log: frontend, agents and engines, after good and bad requests.

The frontend runs with API keys from an environment variable; requests carry canary strings in
their prompts and keys (accepted and refused, streaming and not, a malformed body, a prompt too
long for the context); then every log file of the fleet is searched for the canaries.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from tests.integration.fleet import start_fleet, stop_fleet

pytestmark = pytest.mark.integration
POOLS = "  - {name: agg, role: aggregated, engine: mock, model: agg, mock: {speedup_ratio: 50}}\n"
KEY = "sk-canary-key-4f1d9a"
WRONG_KEY = "sk-canary-wrong-77c2"
PROMPT = "canaryprompt 8e41 tell me a secret"


def test_prompts_and_keys_stay_out_of_the_logs(tmp_path: Path, tiny_model: Path,
                                               agent_processes: SimpleNamespace,
                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("DL_TEST_API_KEYS", f"other-key,{KEY}")
    f = start_fleet(tmp_path, tiny_model, agent_processes, {"a0": "agg"}, POOLS,
                    "{api_keys: {env: DL_TEST_API_KEYS}, max_body_bytes: 65536}", {"agg": {"aggregated": 1}})
    try:
        good = openai.OpenAI(base_url=f"{f.url}/v1", api_key=KEY, max_retries=0, timeout=30)
        bad = openai.OpenAI(base_url=f"{f.url}/v1", api_key=WRONG_KEY, max_retries=0, timeout=30)
        messages = [{"role": "user", "content": PROMPT}]
        assert good.chat.completions.create(model="agg", messages=messages, max_tokens=5).choices[0].message
        chunks = list(good.completions.create(model="agg", prompt=PROMPT, max_tokens=5, stream=True))
        assert chunks[-1].choices[0].finish_reason == "length"
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model="agg", messages=messages, max_tokens=5)
        with pytest.raises(openai.BadRequestError):  # too long for agg's 1024-token context
            good.completions.create(model="agg", prompt=(PROMPT + " ") * 400, max_tokens=5)
        # A key the API does not know is accepted and logged as ignored, without its name (client input).
        assert good.chat.completions.create(model="agg", messages=messages, max_tokens=5,
                                            extra_body={"canaryprompt_field": PROMPT}).choices[0].message
    finally:
        stop_fleet(f, agent_processes)
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert all(any(kind in p.name for p in logs) for kind in ("frontend", "agent", "engine")), logs
    for path in logs:
        text = path.read_text(errors="replace")
        for canary in (KEY, WRONG_KEY, "canaryprompt", "8e41 tell me"):
            assert canary not in text, f"{canary!r} in {path}"
