"""Bad input never gets a 5xx nor takes the frontend down.

schemathesis drives the live frontend (one aggregated mock worker, real NATS and etcd)
from the frontend's own /openapi.json: documented examples, the coverage phase
(boundaries, wrong types, missing and unknown keys) and hypothesis-generated bodies, valid
and invalid. Then hand-written hostile input: oversized, deeply nested, non-UTF-8, non-JSON
bodies, huge numbers, a 10^6-token prompt, a client that dribbles its body, and thousands of
idle connections; after each, the frontend still serves a normal request.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
import schemathesis
from schemathesis.engine import Status, events, from_schema
from schemathesis.engine.recorder import CheckNode, ScenarioRecorder

from tests.integration.fleet import Fleet, start_fleet, stop_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]
AGG_ONLY = "  - {name: agg, role: aggregated, engine: mock, model: agg, mock: {speedup_ratio: 100}}\n"
MAX_BODY = 4 * 1024 * 1024  # frontend.max_body_bytes (the default)
# Generated valid requests get at most 4 output tokens (more: a 400): this is about input.
FRONTEND = f"{{max_body_bytes: {MAX_BODY}, max_tokens_limit: 4}}"
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance", "response_headers_conformance",
          "response_schema_conformance", "negative_data_rejection", "unsupported_method", "allow_header_conformance")  # fmt: skip
# The schemathesis run, as in a schemathesis.toml: reproducible (fixed seed, derandomized),
# valid and invalid bodies, a bounded number of generated examples per operation and mode.
FUZZ_CONFIG = {
    "seed": 20240601,
    "request-timeout": 30,
    "generation": {"mode": "all", "max-examples": 100, "deterministic": True, "database": "none"},
    "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True},
               "stateful": {"enabled": False}},
    "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS},
               # 503 is what models m and empty answer (no worker): test_openapi_fuzz checks each one
               "not_a_server_error": {"enabled": True, "expected-statuses": ["2xx", "3xx", "4xx", "503"]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path,
          agent_processes: SimpleNamespace) -> Iterator[Fleet]:  # fmt: skip
    """Models m and empty have no worker (503s), agg has one aggregated mock worker."""
    f = start_fleet(tmp_path_factory.mktemp("fuzz"), tiny_model, agent_processes, {"a0": "agg"}, AGG_ONLY, FRONTEND,
                    {"agg": {"aggregated": 1}})
    yield f
    stop_fleet(f, agent_processes)


def test_openapi_fuzz(fleet: Fleet) -> None:
    """schemathesis's examples, coverage and fuzzing phases against /openapi.json: no check fails."""
    config = schemathesis.Config.from_dict(FUZZ_CONFIG)
    schema = schemathesis.openapi.from_url(f"{fleet.url}/openapi.json", config=config)
    failures: list[str] = []
    errors: list[str] = []
    statuses = Counter[int]()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            for case_id, checks in recorder.checks.items():
                failures += [_failed(recorder, case_id, c) for c in checks if c.status == Status.FAILURE]
            for case_id, interaction in recorder.interactions.items():
                statuses[interaction.response.status_code if interaction.response is not None else 0] += 1
                if unexpected := _unexpected_503(recorder, case_id):
                    failures.append(unexpected)
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.value!r}")
        elif isinstance(event, events.FatalError):
            errors.append(repr(event.exception))
    assert not errors, errors
    assert not failures, "\n\n".join(failures[:10])
    assert statuses[200] >= 20 and statuses[400] >= 100, statuses  # it reached the engine, and mostly did not
    assert fleet.frontend.poll() is None, "the frontend died"
    assert_serving(fleet)


def _failed(recorder: ScenarioRecorder, case_id: str, check: CheckNode) -> str:
    title = check.failure_info.failure.title if check.failure_info else ""
    return f"{check.name}: {title}\n{_exchange(recorder, case_id)}"


def _unexpected_503(recorder: ScenarioRecorder, case_id: str) -> str | None:
    """A 503 is expected only from a model without workers (m, empty; no model: the first served, m)."""
    response = recorder.find_response(case_id=case_id)
    if response is None or response.status_code != 503:
        return None
    body = recorder.cases[case_id].value.body
    error = response.json()["error"]  # OpenAI's shape, or Anthropic's on /v1/messages (no code, its own type)
    if isinstance(body, dict) and body.get("model") in ("m", "empty", None) and \
            (error.get("code") == "no_worker_available" or error.get("type") == "overloaded_error"):  # fmt: skip
        return None
    return f"unexpected 503\n{_exchange(recorder, case_id)}"


def _exchange(recorder: ScenarioRecorder, case_id: str) -> str:
    case = recorder.cases[case_id].value
    response = recorder.find_response(case_id=case_id)
    answer = f"{response.status_code} {response.content[:300]!r}" if response is not None else "no response"
    return f"  {case.method} {case.path} body={str(case.body)[:300]}\n  -> {answer}"


# --- hand-written hostile input -----------------------------------------------------------------
def request(url: str, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection; status 0 when the server closed it without an answer."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (413) before reading everything; its answer may still be there
        try:
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        except (ConnectionError, http.client.RemoteDisconnected):
            return 0, {}, b""
    finally:
        conn.close()


def assert_openai_error(status: int, headers: dict[str, str], body: bytes, expected: int | tuple[int, ...]) -> dict:
    assert status in ((expected,) if isinstance(expected, int) else expected), (status, body[:300])
    payload = json.loads(body)
    assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
    assert headers.get("Content-Type", "").startswith("application/json")
    return payload["error"]


def assert_serving(fleet: Fleet, timeout: float = 10) -> float:
    """A normal completion succeeds; returns how long it took."""
    assert fleet.frontend.poll() is None, (fleet.log_dir / "frontend.log").read_text()[-3000:]
    started = time.monotonic()
    status, _, body = request(fleet.url, "POST", "/v1/completions",
                              json.dumps({"model": "agg", "prompt": "hello", "max_tokens": 2}).encode(),
                              timeout=timeout)  # fmt: skip
    assert status == 200, body[:300]
    assert json.loads(body)["usage"]["completion_tokens"] == 2
    return time.monotonic() - started


def chat(**extra: object) -> dict:
    return {"model": "agg", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}


HOSTILE_BODIES = {
    "deep_array": b"[" * 100_000,
    "deep_object": b'{"a":' * 100_000,
    "deep_in_field": json.dumps(chat()).encode()[:-1] + b', "stop": ' + b"[" * 900 + b"]" * 900 + b"}",
    "deep_in_messages": b'{"model": "agg", "messages": ' + b"[" * 900 + b"]" * 900 + b"}",
    "invalid_utf8": b'{"model": "agg", "messages": [{"role": "user", "content": "\xff\xfe\xc3("}]}',
    "lone_surrogate": b'{"model": "agg", "messages": [{"role": "user", "content": "\\ud800"}]}',
    "nul_bytes": b'{"model": "agg",\x00 "messages": []}',
    "empty": b"",
    "whitespace": b" \r\n\t ",
    "array": b"[]",
    "string": b'"x"',
    "null": b"null",
    "number": b"1",
    "truncated": json.dumps(chat()).encode()[:-3],
    "trailing_garbage": json.dumps(chat()).encode() + b"}{",
    "nan": json.dumps(chat()).encode()[:-1] + b', "temperature": NaN}',
    "infinity": json.dumps(chat()).encode()[:-1] + b', "temperature": Infinity}',
    "minus_infinity": json.dumps(chat()).encode()[:-1] + b', "presence_penalty": -Infinity}',
    "overflowing_float": json.dumps(chat()).encode()[:-1] + b', "temperature": 1e400}',
    "huge_max_tokens": json.dumps(chat(max_tokens=10**30)).encode(),
    "int64_max_tokens": json.dumps(chat(max_tokens=2**63 - 1)).encode(),
    "huge_seed": json.dumps(chat(seed=10**30)).encode(),
    "uint64_seed": json.dumps(chat(seed=2**64 - 1)).encode(),
    "fractional_max_tokens": json.dumps(chat(max_tokens=2.5)).encode(),
    "bool_stream": json.dumps(chat(stream=1)).encode(),
    "duplicate_keys": b'{"model": "agg", "model": 5, "messages": [{"role": "user", "content": "hi"}]}',
}


@pytest.mark.parametrize("body", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_hostile_body_is_a_clean_400(fleet: Fleet, body: bytes) -> None:
    assert_openai_error(*request(fleet.url, "POST", "/v1/chat/completions", body), 400)
    assert_serving(fleet)


@pytest.mark.parametrize(
    ("prompt", "why"),
    [([[]], "an empty inner token list"), ([-1, 2], "a negative token id"), ([2**32], "a token id over uint32"),
     ([10**30], "a token id over uint64"), ([[1, 2**40]], "a nested huge token id"), ([1.5], "a float token id"),
     ([""], "an empty string in a list")],
)  # fmt: skip
def test_bad_token_prompts(fleet: Fleet, prompt: object, why: str) -> None:
    body = json.dumps({"model": "agg", "prompt": prompt, "max_tokens": 2}).encode()
    assert_openai_error(*request(fleet.url, "POST", "/v1/completions", body), 400)
    assert_serving(fleet)


def test_a_million_token_prompt_is_a_quick_400(fleet: Fleet) -> None:
    body = b'{"model": "agg", "max_tokens": 2, "prompt": [' + b"7," * 999_999 + b"7]}"
    assert len(body) < MAX_BODY
    started = time.monotonic()
    error = assert_openai_error(*request(fleet.url, "POST", "/v1/completions", body), 400)
    assert error["code"] == "context_length_exceeded" and time.monotonic() - started < 10
    assert_serving(fleet)


def test_240k_messages_are_a_quick_400(fleet: Fleet) -> None:
    body = b'{"model": "agg", "max_tokens": 2, "messages": [' + b'{"role": "user"},' * 240_000 + b'{"role": "user"}]}'
    assert len(body) < MAX_BODY
    started = time.monotonic()
    assert_openai_error(*request(fleet.url, "POST", "/v1/chat/completions", body), 400)
    assert time.monotonic() - started < 5
    assert_serving(fleet)


def test_body_over_the_limit_is_a_413(fleet: Fleet) -> None:
    status, headers, body = request(fleet.url, "POST", "/v1/chat/completions", b"x" * (MAX_BODY + 1))
    if status:  # or the server closed the connection before the client finished sending
        assert_openai_error(status, headers, body, 413)
    assert_serving(fleet)


def test_compressed_bodies(fleet: Fleet) -> None:
    """aiohttp inflates Content-Encoding: deflate/gzip; the limit applies to what it inflates to."""
    bomb = zlib.compressobj()
    packed = b"".join(bomb.compress(b" " * (1 << 20)) for _ in range(64)) + bomb.flush()  # 64 MiB of spaces
    assert len(packed) < MAX_BODY // 16
    status, headers, body = request(fleet.url, "POST", "/v1/chat/completions", packed,
                                    {"Content-Encoding": "deflate"})  # fmt: skip
    if status:
        assert_openai_error(status, headers, body, 413)
    status, headers, body = request(fleet.url, "POST", "/v1/chat/completions", b"not deflate at all",
                                    {"Content-Encoding": "deflate"})  # fmt: skip
    assert status == 0 or 400 <= status < 500, (status, body[:300])
    good = zlib.compress(json.dumps(chat()).encode())
    status, _, body = request(fleet.url, "POST", "/v1/chat/completions", good, {"Content-Encoding": "deflate"})
    assert status == 200, body[:300]
    assert_serving(fleet)


@pytest.mark.parametrize(
    ("content_type", "body", "status"),
    [("text/plain", json.dumps(chat()).encode(), 200),  # like vLLM: the body is JSON whatever the header says
     ("application/x-www-form-urlencoded", b"model=agg&max_tokens=2", 400),
     ("multipart/form-data; boundary=xyz",
      b'--xyz\r\nContent-Disposition: form-data; name="model"\r\n\r\nagg\r\n--xyz--\r\n', 400),
     ("application/json; charset=latin-1", b'{"model": "agg", "messages": [{"role": "user", "content": "\xe9"}]}',
      400)],
)  # fmt: skip
def test_content_types(fleet: Fleet, content_type: str, body: bytes, status: int) -> None:
    got, headers, payload = request(fleet.url, "POST", "/v1/chat/completions", body, {"Content-Type": content_type})
    if status == 200:
        assert got == 200, payload[:300]
    else:
        assert_openai_error(got, headers, payload, status)
    assert_serving(fleet)


def test_unknown_route_and_wrong_method(fleet: Fleet) -> None:
    assert_openai_error(*request(fleet.url, "GET", "/v2/whatever"), 404)
    assert_openai_error(*request(fleet.url, "POST", "/v1/chat/completions/extra", b"{}"), 404)
    status, headers, body = request(fleet.url, "GET", "/v1/chat/completions")
    assert_openai_error(status, headers, body, 405)
    assert headers.get("Allow") == "POST"
    status, headers, body = request(fleet.url, "DELETE", "/v1/models")
    assert_openai_error(status, headers, body, 405)
    assert set(headers.get("Allow", "").split(",")) == {"GET", "HEAD"}
    assert_serving(fleet)


def test_oversized_headers_and_garbage_requests(fleet: Fleet) -> None:
    """Refused by aiohttp's HTTP parser (plain-text 400s, no handler runs); the frontend goes on."""
    status, _, _ = request(fleet.url, "GET", "/health", headers={"X-Big": "a" * 100_000})
    assert status in (0, 400, 431)
    status, _, _ = request(fleet.url, "GET", "/health", headers={f"X-H{i}": "v" for i in range(1000)})
    assert status in (0, 400, 431)
    smuggled = b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nzzzzz"
    tls_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64)
    for garbage in (tls_hello, b"GET / HTTP/9.9\r\n\r\n", b"\r\n" * 10_000, smuggled, b"\x00" * 1000):
        with socket.create_connection(_addr(fleet), timeout=10) as s:
            s.sendall(garbage)
            s.shutdown(socket.SHUT_WR)
            reply = _read_all(s)
        assert reply == b"" or re.match(rb"HTTP/1\.[01] 4\d\d ", reply), reply[:200]
    assert_serving(fleet)


def test_slow_client_does_not_stall_others(fleet: Fleet) -> None:
    """A client that sends its headers and then dribbles its body does not hold up anyone else."""
    dribblers = []
    for _ in range(8):
        s = socket.create_connection(_addr(fleet), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"model\": ")
        dribblers.append(s)
    try:
        for i in range(3):
            for s in dribblers:
                s.sendall(b" ")
            assert assert_serving(fleet, timeout=2) < 2
        status, headers, body = request(fleet.url, "POST", "/v1/chat/completions", b"{}",
                                        {"Content-Length": str(10**12)}, timeout=5)  # fmt: skip
        assert_openai_error(status, headers, body, 413)  # a declared length over the limit is refused at once
    finally:
        for s in dribblers:
            s.close()
    assert_serving(fleet)


def test_thousands_of_idle_connections(fleet: Fleet) -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = min(2000, soft - 200)
    idle: list[socket.socket] = []
    try:
        for i in range(n):
            s = socket.create_connection(_addr(fleet), timeout=10)
            if i % 2:  # half of them start a request and stop after the request line
                s.sendall(b"GET /health HTTP/1.1\r\n")
            idle.append(s)
        assert assert_serving(fleet, timeout=5) < 5
        status, _, body = request(fleet.url, "GET", "/health", timeout=5)
        assert status == 200, body
    finally:
        for s in idle:
            s.close()
    assert_serving(fleet)


def _addr(fleet: Fleet) -> tuple[str, int]:
    u = urlsplit(fleet.url)
    return u.hostname or "127.0.0.1", u.port or 80


def _read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out
