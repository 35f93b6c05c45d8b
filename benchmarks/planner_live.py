"""The planner live: `orchestrator up` of a mock fleet with the SLA planner, a time-compressed replay of
the Mooncake trace with a rate profile through the real frontend, beside the simulation of the same run.

Live: the frontend, NATS, etcd, the planner and mock workers as processes (`speedup_ratio` below 1: the
engines run slower than an H200, so that the 2-core machine carries the load); workers are really
started and drained by the planner. Replica-seconds: worker engine processes alive, sampled every 0.5 s.
The same run simulated: planner_sim.py's fleet and planner with the same trace slice, prompt scaling,
rate profile, planner settings, SLOs and speedup, and the worker start-up measured live.

    .venv/bin/python benchmarks/planner_live.py     # ~6 min
    .venv/bin/python benchmarks/planner_live.py --decision predicted --out benchmarks/results/planner_live_predicted.json
Writes benchmarks/results/planner_live.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks import planner_sim, trace_replay  # noqa: E402
from benchmarks.cluster import counter_by_label, orchestrator_up  # noqa: E402
from benchmarks.paths import MOONCAKE_TRACE, RESULTS  # noqa: E402
from benchmarks.rate_profile import RateProfile  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402

SPEEDUP, TPH, MAX_OUT, TIME_SCALE, TRACE_S = 0.25, 64, 32, 0.5, 480.0
PROFILE = "sine:period=120,amplitude=0.6"
TTFT_MS, ITL_MS, BUDGET, INTERVAL_S, STARTUP_S = 2000.0, 200.0, 6, 5.0, 5.0


def spec_text(state: Path, port: int, prefill_min: int, decision: str) -> str:
    mock = f"{{speedup_ratio: {SPEEDUP}}}"
    return (f"namespace: plive\nstate_dir: {state}\n"
            "models: [{name: mock-8b, path: 'builtin:mock-words', block_size: 16, max_model_len: 32768}]\n"
            f"frontend: {{port: {port}, router: {{copy_weight: 1.0}},"  # the simulation's (planner_sim_fleet)
            f" disaggregation: {{decision: {decision}}}}}\n"
            f"pools:\n  - {{name: prefill, role: prefill, engine: mock, replicas: 2, mock: {mock}}}\n"
            f"  - {{name: decode, role: decode, engine: mock, replicas: 1, mock: {mock}}}\n"
            # the planner's own defaults otherwise, as the simulation's (planner_sim takes them from cluster.yaml's)
            f"planner: {{enabled: true, policy: sla, predictor: kalman, interval_s: {INTERVAL_S},\n"
            f"  max_total_replicas: {BUDGET}, worker_startup_s: {STARTUP_S},\n"
            f"  ttft_target_ms: {TTFT_MS}, itl_target_ms: {ITL_MS},\n"
            f"  prefill: {{min_replicas: {prefill_min}, max_replicas: {BUDGET - 1}}},"
            f" decode: {{min_replicas: 1, max_replicas: {BUDGET - 1}}}}}\n")


class EngineCounter(threading.Thread):
    """Samples the mock engine processes under this process every 0.5 s: replica-seconds and a series."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.series: list[tuple[float, int]] = []
        self.t0 = time.monotonic()

    def run(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(0.5):
            n = 0
            for p in me.children(recursive=True):
                try:
                    if "dynamo_lite.engines.mock" in " ".join(p.cmdline()):
                        n += 1
                except psutil.Error:
                    continue
            self.series.append((time.monotonic() - self.t0, n))

    def replica_seconds(self, start: float, end: float) -> float:
        pts = [(t, n) for t, n in self.series if start <= t <= end]
        return sum(n * 0.5 for _, n in pts)


def live(out_dir: Path, prefill_min: int, decision: str) -> dict:
    port = free_port()
    spec = out_dir / "cluster.yaml"
    spec.write_text(spec_text(out_dir / "state", port, prefill_min, decision))
    reqs = trace_replay.load_trace(MOONCAKE_TRACE, None, TPH, max_output=MAX_OUT)
    reqs = [r for r in reqs if r.at_s < TRACE_S]
    reqs = trace_replay.warp(reqs, RateProfile.parse(PROFILE), TIME_SCALE)
    counter = EngineCounter()
    counter.start()
    with orchestrator_up(spec, out_dir / "up.log") as url:
        begin = time.monotonic() - counter.t0
        result = asyncio.run(trace_replay.replay(url, "mock-8b", reqs, time_scale=TIME_SCALE, timeout_s=120))
        end = begin + max(r.at_s for r in reqs) * TIME_SCALE
        reasons = counter_by_label([url], "dynamo_lite_frontend_disaggregation_decisions", "reason")
    counter.stop.set()
    summary = trace_replay.summarize(result.records, result.wall_s, slo_ttft_ms=TTFT_MS, slo_itl_ms=ITL_MS)
    horizon = max(r.at_s for r in reqs) * TIME_SCALE
    log = (out_dir / "up.log").read_text(errors="replace")
    scaled = [line for line in log.splitlines() if "planner: scaling" in line or "pool now has" in line]
    return {"requests": len(reqs), "good": summary.good, "errors": summary.errors,
            "goodput_rps": round(summary.good / horizon, 3), "attainment": round(summary.good / len(reqs), 4),
            "replica_seconds": round(counter.replica_seconds(begin, end), 1), "horizon_s": round(horizon, 1),
            "prefill_reasons": {k: int(v) for k, v in sorted(reasons.items())},
            "engines": [(round(t - begin, 1), n) for t, n in counter.series if begin <= t <= end],
            "scaling_log": scaled[-60:]}


def simulated(startup_s: float, prefill_min: int, decision: str) -> dict:
    args = planner_sim.parse(["--duration-s", str(TRACE_S), "--time-scale", str(TIME_SCALE), "--tokens-per-hash",
                              str(TPH), "--max-output", str(MAX_OUT), "--speedup", str(SPEEDUP), "--ttft-ms",
                              str(TTFT_MS), "--itl-ms", str(ITL_MS), "--budget", str(BUDGET), "--startup-s",
                              str(startup_s), "--interval-s", str(INTERVAL_S), "--planner-start", "2:1",
                              "--decision", decision,
                              "--choose-layout" if prefill_min == 0 else "--no-choose-layout"])
    run = planner_sim.Run("SLA planner (kalman), conditional P/D", "planner", policy="sla", predictor="kalman")
    r = planner_sim.simulate((run, args, PROFILE))
    keys = ("requests", "good", "goodput_rps", "attainment", "replica_seconds", "horizon_s", "prefill_reasons")
    return {k: r[k] for k in keys}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefill-min", type=int, choices=(0, 1), default=1, help="planner.prefill.min_replicas: 0 lets "
                   "the planner drop the prefill pool while the decode workers alone need no more workers")
    p.add_argument("--decision", choices=("threshold", "predicted"), default="threshold",
                   help="frontend.disaggregation.decision, live and simulated (default: cluster.yaml's, threshold)")
    p.add_argument("--out", type=Path, default=RESULTS / "planner_live.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lv = live(Path(tmp), args.prefill_min, args.decision)
    sim = simulated(STARTUP_S, args.prefill_min, args.decision)
    err = {k: round((lv[k] - sim[k]) / sim[k], 3) if sim[k] else None for k in ("goodput_rps", "replica_seconds")}
    out = {"settings": {"profile": PROFILE, "speedup_ratio": SPEEDUP, "tokens_per_hash": TPH, "max_output": MAX_OUT,
                        "time_scale": TIME_SCALE, "trace_s": TRACE_S, "ttft_ms": TTFT_MS, "itl_ms": ITL_MS,
                        "budget": BUDGET, "interval_s": INTERVAL_S, "startup_s": STARTUP_S,
                        "prefill_min_replicas": args.prefill_min, "decision": args.decision},
           "live": lv, "simulated": sim, "relative_error": err}
    path = args.out
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"live: {lv['good']}/{lv['requests']} good ({lv['attainment']:.1%}), goodput {lv['goodput_rps']:.2f} req/s, "
          f"{lv['replica_seconds']:.0f} replica-s, {lv['errors']} errors")
    print(f"sim : {sim['good']}/{sim['requests']} good ({sim['attainment']:.1%}), goodput {sim['goodput_rps']:.2f} "
          f"req/s, {sim['replica_seconds']:.0f} replica-s")
    print(f"where prefill ran: live {lv['prefill_reasons']}, sim {sim['prefill_reasons']}")
    print(f"error (live - sim) / sim: goodput {err['goodput_rps']}, replica-seconds {err['replica_seconds']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
