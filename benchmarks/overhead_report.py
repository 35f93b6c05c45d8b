"""The report of benchmarks/overhead.py: its markdown table (added latency, requests/s against the direct
runs, CPU per request, streamed TTFT) and its plot (added p50, requests/s ratio, CPU per request)."""

from __future__ import annotations

import statistics
from pathlib import Path


def table(rows: list[dict]) -> str:
    lines = ["| target | conc | p50 / p99 ms | added p50 / p99 ms | req/s | req/s vs direct | CPU ms/request "
             "(target; engine) | stream TTFT p50 (added) |", "|---|---|---|---|---|---|---|---|"]
    for conc in sorted({r["concurrency"] for r in rows}):
        same = [r for r in rows if r["concurrency"] == conc]
        d50 = statistics.median(r["direct"]["p50_ms"] for r in same)
        d99 = statistics.median(r["direct"]["p99_ms"] for r in same)
        drps = statistics.median(r["direct"]["requests_per_s"] for r in same)
        dttft = [r["ttft"]["direct"]["p50_ms"] for r in same if "ttft" in r]
        ttft = f"{statistics.median(dttft):.2f} ms" if dttft else ""
        dcpu = statistics.median(r["cpu_ms_per_request"]["engine_direct"] for r in same)
        lines.append(f"| direct (median of {len(same)}) | {conc} | {d50:.2f} / {d99:.2f} | | {drps:.0f} | 1 | "
                     f"-; {dcpu:.3f} | {ttft} |")
        for r in same:
            v, t, cpu = r["via"], r.get("ttft"), r["cpu_ms_per_request"]
            ttft = f"{t['via']['p50_ms']:.2f} ms (+{t['added_p50_ms']:.2f})" if t else ""
            lines.append(f"| {r['target']} | {conc} | {v['p50_ms']:.2f} / {v['p99_ms']:.2f} | "
                         f"{r['added_p50_ms']:+.2f} / {r['added_p99_ms']:+.2f} | {v['requests_per_s']:.0f} | "
                         f"{r['rps_ratio']:.2f} | {cpu['target']:.3f}; {cpu['engine_via']:.3f} | {ttft} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(r["target"] for r in rows))
    levels = sorted({r["concurrency"] for r in rows})
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    width = 0.8 / len(levels)
    for i, conc in enumerate(levels):
        by = {r["target"]: r for r in rows if r["concurrency"] == conc}
        xs = [k + i * width for k in range(len(targets))]
        axes[0].bar(xs, [by[t]["added_p50_ms"] for t in targets], width, label=f"concurrency {conc}")
        axes[1].bar(xs, [by[t]["rps_ratio"] for t in targets], width, label=f"concurrency {conc}")
        axes[2].bar(xs, [by[t]["cpu_ms_per_request"]["target"] for t in targets], width, label=f"concurrency {conc}")
    titles = ("added p50 latency vs direct (ms)", "requests/s, ratio to direct", "router CPU ms per request")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xticks([k + width * (len(levels) - 1) / 2 for k in range(len(targets))], targets, rotation=20,
                      ha="right", fontsize=8)
        ax.set_title(title)
        ax.legend()
    axes[1].axhline(1.0, color="grey", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
