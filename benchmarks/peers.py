"""Peer routers that benchmarks compare against: vllm-router and sglang-router.

Both are Rust routers shipped as PyPI wheels. They are installed into their own
virtual environment, `benchmarks/.peers-venv` (git-ignored), never into the
project's dependencies; both pinned versions coexist in that one venv.

    python benchmarks/peers.py install     # create the venv, pip install the pins (~15 s); idempotent
    python benchmarks/peers.py list        # the peers (router:policy)
    python benchmarks/peers.py command vllm-router:kv_aware --port 9000 \\
        --worker-url http://127.0.0.1:8001 --kv-event-endpoint tcp://127.0.0.1:5557 ...

From a benchmark (run from the repo root, after `sys.path.insert(0, repo_root)`):

    from benchmarks.peers import PEERS, ensure_installed, router_command, wait_ready
    env = ensure_installed()
    for peer in PEERS:
        argv = router_command(peer, env, "127.0.0.1", port, worker_urls, kv_event_endpoints)
        proc = subprocess.Popen(argv, ...)
        wait_ready(f"http://127.0.0.1:{port}", len(worker_urls), proc=proc)   # ~1 s

What the peers need from the engines (checked against the mock, vllm-router 0.1.17,
sglang-router 0.3.2):

- Both proxy /v1/completions and /v1/chat/completions, streaming or not, and
  /v1/models; both add sampling defaults to the body they forward (`echo`,
  `ignore_eos`, `skip_special_tokens`, `no_stop_trim`, `return_hidden_states` ...).
- Readiness: GET /readiness -> {"status":"ready","healthy_workers":N,...}. Use it
  rather than /health: sglang-router answers /health 200 before any worker is
  registered (it registers them in the background after probing each for gRPC).
- vllm-router `cache_aware` and `kv_aware` do not tokenize themselves. For every
  request they ask every worker for token ids: POST /v1/completions/render (or
  /v1/chat/completions/render), then POST /tokenize ({"model","prompt"} or
  {"model","messages"}; vLLM's reply {"count","max_model_len","tokens",...}).
  Without /tokenize on the engine, kv_aware routes on load alone (decision
  outcome "missing_tokens") and cache_aware makes no prefix decision.
- vllm-router `kv_aware` connects one ZMQ SUB per worker to the engine's PUB
  (`--kv-event-source URL=tcp://HOST:PORT`, tcp only) and, on a sequence gap, a
  DEALER to its replay ROUTER (`--kv-event-replay-source`). It applies only
  batches published on the empty topic: engines must use "topic": "" (see
  `mock_kv_events_config`). It indexes blocks by the `token_ids` in BlockStored
  (sha256 per block), so engine block-hash algorithms do not matter; it needs no
  tokenizer files or model download.
- sglang-router `cache_aware` keeps a radix tree over the prompt *text* (no
  tokenizer: it finds no model path on the mock and loads none), so "t12 t7 ..."
  prompts work as they are.
- Both cache-aware policies send a prefix that matches nothing (below
  --cache-threshold, 0.3) to the least-loaded worker, ties to the first: with one
  request at a time, every new prefix lands on the first worker.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".peers-venv"
PINS: dict[str, str] = {"vllm-router": "0.1.17", "sglang-router": "0.3.2"}
KV_EVENTS_TOPIC = ""  # the only topic vllm-router's static KV event sources apply

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PeerEnv:
    """The peers' virtual environment."""

    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def executable(self, router: str) -> Path:
        """The console script of a router package: `vllm-router` or `sglang-router`."""
        return self.venv / "bin" / router


@dataclass(frozen=True, slots=True)
class PeerRouter:
    """One router package and one of its routing policies."""

    name: str  # "vllm-router" | "sglang-router"
    policy: str

    @property
    def label(self) -> str:
        return f"{self.name}:{self.policy}"

    @property
    def needs_kv_events(self) -> bool:
        return self.policy == "kv_aware"


PEERS: list[PeerRouter] = [
    PeerRouter("vllm-router", "cache_aware"),
    PeerRouter("vllm-router", "kv_aware"),
    PeerRouter("vllm-router", "round_robin"),
    PeerRouter("sglang-router", "cache_aware"),
]


def find_peer(label: str) -> PeerRouter:
    """The peer named `router:policy`, e.g. "vllm-router:kv_aware"."""
    for peer in PEERS:
        if peer.label == label:
            return peer
    raise ValueError(f"unknown peer {label!r}; one of {[p.label for p in PEERS]}")


def installed_versions(env: PeerEnv) -> dict[str, str | None]:
    """Installed version of each pinned package in the venv (None: missing)."""
    if not env.python.exists():
        return dict.fromkeys(PINS)
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try: out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: out[name] = None\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run([str(env.python), "-c", code, *PINS], check=False, capture_output=True, text=True)
    if result.returncode != 0:
        return dict.fromkeys(PINS)
    return json.loads(result.stdout)


def ensure_installed(progress: Progress = print, venv: Path = VENV) -> PeerEnv:
    """Create the venv and install the pinned routers, unless already there."""
    env = PeerEnv(venv)
    versions = installed_versions(env)
    scripts_ok = all(env.executable(name).exists() for name in PINS)
    if versions == PINS and scripts_ok:
        progress(f"peers: {', '.join(f'{n}=={v}' for n, v in PINS.items())} already in {venv}")
        return env
    start = time.monotonic()
    if not env.python.exists():
        progress(f"peers: creating venv {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    specs = [f"{name}=={version}" for name, version in PINS.items()]
    progress(f"peers: pip install {' '.join(specs)}")
    cmd = [str(env.python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *specs]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
        assert pip.stdout is not None
        lines: list[str] = []
        for line in pip.stdout:
            lines.append(line)
            if line.startswith(("Collecting", "Downloading", "Installing", "Successfully", "ERROR")):
                progress("  " + line.rstrip())
    if pip.returncode != 0:
        raise RuntimeError(f"pip install failed ({pip.returncode}):\n{''.join(lines[-30:])}")
    versions = installed_versions(env)
    if versions != PINS:
        raise RuntimeError(f"peers: expected {PINS}, venv has {versions}")
    progress(f"peers: installed in {time.monotonic() - start:.1f} s")
    return env


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"peer routers bind loopback addresses only, not {host!r}")


def mock_kv_events_config(pub_port: int, replay_port: int | None = None) -> str:
    """The mock engine's (and vLLM's) --kv-events-config JSON that vllm-router kv_aware can consume.

    `tcp://*:P` makes the engine's PUB bind (vLLM's rule; on all interfaces: the router
    accepts tcp endpoints only and always connects), so the router's SUB connects to
    tcp://127.0.0.1:P. The topic must be empty.
    """
    config: dict[str, object] = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{pub_port}",
        "topic": KV_EVENTS_TOPIC,
    }
    if replay_port is not None:
        config["replay_endpoint"] = f"tcp://*:{replay_port}"
    return json.dumps(config)


def router_command(
    peer: PeerRouter,
    env: PeerEnv,
    host: str,
    port: int,
    worker_urls: Sequence[str],
    kv_event_endpoints: Sequence[str] = (),
    *,
    kv_replay_endpoints: Sequence[str] = (),
    model: str = "bench",
    block_size: int = 16,
    metrics_port: int | None = None,
    request_timeout_s: int = 600,
    startup_timeout_s: int = 120,
    log_level: str = "warning",
) -> list[str]:
    """The argv that starts `peer` on host:port in front of `worker_urls`.

    kv_event_endpoints (kv_aware only, one per worker, in order): the engines' ZMQ PUB
    endpoints as the router connects to them, e.g. "tcp://127.0.0.1:5557";
    kv_replay_endpoints likewise for their replay ROUTER sockets (optional).
    metrics_port: the router's Prometheus port on 127.0.0.1 (default port + 1; both
    routers default to 29000, which clashes when two run at once).
    log_level: debug, info, warning or error.
    """
    _check_loopback(host)
    if not worker_urls:
        raise ValueError("no worker URLs")
    metrics_port = port + 1 if metrics_port is None else metrics_port
    common = [
        "--host", host,
        "--port", str(port),
        "--worker-urls", *worker_urls,
        "--policy", peer.policy,
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", str(metrics_port),
        "--request-timeout-secs", str(request_timeout_s),
        "--worker-startup-timeout-secs", str(startup_timeout_s),
        "--worker-startup-check-interval", "1",  # default 30 s between checks of workers not up yet
    ]  # fmt: skip
    if peer.name == "sglang-router":
        level = "warn" if log_level == "warning" else log_level
        return [str(env.executable(peer.name)), "launch", *common, "--log-level", level]
    if peer.name != "vllm-router":
        raise ValueError(f"unknown router {peer.name!r}")
    argv = [str(env.executable(peer.name)), *common, "--log-level", log_level]
    if peer.needs_kv_events:
        if len(kv_event_endpoints) != len(worker_urls):
            raise ValueError("kv_aware needs one KV event endpoint per worker URL")
        if kv_replay_endpoints and len(kv_replay_endpoints) != len(worker_urls):
            raise ValueError("kv_replay_endpoints: one per worker URL, or none")
        for url, endpoint in zip(worker_urls, kv_event_endpoints, strict=True):
            argv += ["--kv-event-source", f"{url}={endpoint}"]
        for url, endpoint in zip(worker_urls, kv_replay_endpoints, strict=False):
            argv += ["--kv-event-replay-source", f"{url}={endpoint}"]
        argv += ["--kv-event-block-size", str(block_size), "--kv-event-model", model]
    return argv


def wait_ready(
    base_url: str,
    n_workers: int,
    timeout_s: float = 60.0,
    proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
) -> float:
    """Poll GET /readiness until the router reports `n_workers` healthy workers.

    Returns the seconds waited. Raises RuntimeError if `proc` exits first,
    TimeoutError past `timeout_s`.
    """
    start = time.monotonic()
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"router exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"{base_url}/readiness", timeout=2) as resp:
                body = json.loads(resp.read() or b"{}")
            if body.get("healthy_workers", 0) >= n_workers:
                return time.monotonic() - start
            last = json.dumps(body)
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as exc:
            last = repr(exc)
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{base_url} not ready after {timeout_s} s: {last}")
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/peers.py",
        description="Install and launch the peer routers (vllm-router, sglang-router) in benchmarks/.peers-venv.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    pins = " ".join(f"{name}=={version}" for name, version in PINS.items())
    sub.add_parser("install", help=f"create the venv and pip install {pins} (skipped when present)")
    sub.add_parser("list", help="print the peers as router:policy")
    cmd = sub.add_parser("command", help="print the argv that launches one peer")
    cmd.add_argument("peer", choices=[p.label for p in PEERS])
    cmd.add_argument("--host", default="127.0.0.1")
    cmd.add_argument("--port", type=int, required=True)
    cmd.add_argument("--worker-url", action="append", required=True, help="repeat per worker")
    cmd.add_argument("--kv-event-endpoint", action="append", default=[], help="kv_aware: repeat per worker")
    cmd.add_argument("--kv-replay-endpoint", action="append", default=[], help="kv_aware: repeat per worker")
    cmd.add_argument("--model", default="bench")
    cmd.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args(argv)

    if args.cmd == "install":
        ensure_installed()
    elif args.cmd == "list":
        for peer in PEERS:
            print(peer.label)
    else:
        command = router_command(
            find_peer(args.peer),
            PeerEnv(VENV),
            args.host,
            args.port,
            args.worker_url,
            args.kv_event_endpoint,
            kv_replay_endpoints=args.kv_replay_endpoint,
            model=args.model,
            block_size=args.block_size,
        )
        print(shlex.join(command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
