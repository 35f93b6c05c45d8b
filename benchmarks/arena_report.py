"""The arena's results: one `Entry` per router run, the table (mean and min-max over repeats) and the plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.arena_refs import Reference

BASE = "dynamo_lite:blocks"  # ratios are to Dynamo's formula


@dataclass
class Entry:
    router: str
    repeat: int  # 0-based
    startup_s: float
    summary: dict
    error_samples: list[str]  # a few distinct error messages, to say why requests failed
    busy: list[float] | None = None  # per engine: share of the replay's simulated time spent in engine steps
    served_per_engine: dict[str, float] | None = None  # requests each engine finished, by engine URL
    routed_per_process: list[float] | None = None  # ours: requests each frontend process routed
    preempted_per_engine: dict[str, float] | None = None  # requests each engine preempted for KV space
    ttft_prediction: dict[str, float] | None = None  # ours, ttft: measured / predicted TTFT, p10 p50 p90


def balance(per_worker: dict[str, float] | None, workers: int) -> tuple[float, float] | None:
    """(max/mean, coefficient of variation) of the requests per worker; a worker given none counts 0."""
    if not per_worker:
        return None
    counts = [*per_worker.values(), *[0.0] * max(0, workers - len(per_worker))]
    mean = sum(counts) / len(counts)
    sd = (sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5
    return (max(counts) / mean, sd / mean) if mean else None


def by_router(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for e in entries:
        out.setdefault(e.router, []).append(e)
    return out


def error_bar(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, mean - min, max - mean) of repeats, the two spans never below 0: the mean of equal values
    can land a rounding error outside them (fmean of 15.7 three times is 15.699999999999998), and
    matplotlib refuses a negative error bar."""
    if not values:
        return 0.0, 0.0, 0.0
    mean = statistics.fmean(values)
    return mean, max(0.0, mean - min(values)), max(0.0, max(values) - mean)


def _values(runs: Sequence[Entry], get: Callable[[dict], float | None]) -> list[float]:
    return [v for v in (get(e.summary) for e in runs) if v is not None]


def _hits(s: dict) -> float | None:
    return s["prefix_hit_ratio"]


def _ttft(q: str) -> Callable[[dict], float | None]:
    return lambda s: (s["ttft_ms"] or {}).get(q)


def _cell(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return fmt(mean)
    return f"{fmt(mean)} ({fmt(min(values))}-{fmt(max(values))})"


def _ratio(value: list[float], ref: list[float]) -> str:
    return f"{statistics.fmean(value) / statistics.fmean(ref):.2f}x" if value and ref and statistics.fmean(ref) else "-"


def table(entries: Sequence[Entry], refs: Sequence[Reference], workers: int) -> str:
    """Per router: mean (min-max over repeats) of hits and TTFT; then the references."""
    groups = by_router(entries)
    sticky = next(r.prefix_hit_ratio for r in refs if r.name == "sticky")
    base = groups.get(BASE, [])
    lines = [("| router | runs | completed | prefix hits | hits / sticky LRU | TTFT p50 ms | TTFT p99 ms | "
              "TTFT p99 vs blocks | goodput req/s | fleet busy | requests/engine max/mean | CV |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pct: Callable[[float], str] = lambda v: f"{v:.1%}"
    ms: Callable[[float], str] = lambda v: f"{v:.0f}"
    for router, runs in groups.items():
        hits = _values(runs, _hits)
        completed = statistics.fmean(e.summary["completed"] for e in runs)
        busy = [statistics.fmean(e.busy) for e in runs if e.busy]
        busiest = max((max(e.busy) for e in runs if e.busy), default=None)
        spreads = [b for b in (balance(e.served_per_engine, workers) for e in runs) if b]
        lines.append(
            f"| {router} | {len(runs)} | {completed:.0f}/{runs[0].summary['sent']} | {_cell(hits, pct)} | "
            f"{f'{statistics.fmean(hits) / sticky:.2f}' if hits and sticky else '-'} | "
            f"{_cell(_values(runs, _ttft('p50')), ms)} | {_cell(_values(runs, _ttft('p99')), ms)} | "
            f"{_ratio(_values(runs, _ttft('p99')), _values(base, _ttft('p99')))} | "
            f"{statistics.fmean(e.summary['goodput_rps'] for e in runs):.2f} | {_cell(busy, pct)}"
            f"{f' (busiest {busiest:.0%})' if busiest is not None else ''} | "
            + (f"{statistics.fmean(b[0] for b in spreads):.2f} | {statistics.fmean(b[1] for b in spreads):.2f} |"
               if spreads else "- | - |"))  # fmt: skip
    for r in refs:
        floor = (f"{r.ttft_floor_ms[0]:.0f} (floor) | {r.ttft_floor_ms[1]:.0f} (floor) | "
                 f"{_ratio([r.ttft_floor_ms[1]], _values(base, _ttft('p99')))} |" if r.ttft_floor_ms else "- | - | - |")
        lines.append(f"| reference: {r.name} | - | - | {r.prefix_hit_ratio:.1%} | "
                     f"{f'{r.prefix_hit_ratio / sticky:.2f}' if sticky else '-'} | {floor} - | - | - | - |")
    return "\n".join(lines)


def plot(entries: Sequence[Entry], refs: Sequence[Reference], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_router(entries)
    names = list(groups)
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))

    def bars(ax, values: list[list[float]], offset: float = 0.0, **kw) -> None:
        spans = [error_bar(v) for v in values]
        ax.barh([i + offset for i in range(len(names))], [m for m, _, _ in spans],
                xerr=[[lo for _, lo, _ in spans], [hi for _, _, hi in spans]], **kw)  # fmt: skip

    bars(axes[0], [[100 * h for h in _values(groups[n], _hits)] for n in names], color="tab:green")
    for r, style in zip(refs, ("--", "-.", ":"), strict=False):
        axes[0].axvline(100 * r.prefix_hit_ratio, color="k", linestyle=style, label=f"{r.name} {r.prefix_hit_ratio:.1%}")
    axes[0].set_yticks(range(len(names)), names)
    axes[0].set_xlabel("prefix hits (% of prompt tokens)")
    axes[0].legend(title="references", fontsize=8, loc="lower right")
    bars(axes[1], [_values(groups[n], _ttft("p99")) for n in names], 0.2, height=0.4, label="p99", color="tab:red")
    bars(axes[1], [_values(groups[n], _ttft("p50")) for n in names], -0.2, height=0.4, label="p50", color="tab:blue")
    axes[1].set_xlabel("TTFT (ms; bars: mean, whiskers: min-max over runs)")
    axes[1].legend()
    bars(axes[2], [[e.summary["goodput_rps"] for e in groups[n]] for n in names], color="tab:purple")
    axes[2].set_xlabel("goodput (req/s within SLOs)")
    for ax in axes[1:]:
        ax.set_yticks(range(len(names)))
        ax.tick_params(labelleft=False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(records: Sequence, engines: Path, title: str, path: Path) -> None:
    """One run over time, to see where a slow request waited: each request's TTFT at its send time (a
    cross at 1 ms: it failed), and each engine's running and waiting requests and KV use (`engines`, the
    arena's `<run>.engines.jsonl`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    rows = [json.loads(line) for line in engines.read_text().splitlines()] if engines.exists() else []
    fig, axes = plt.subplots(3, 1, figsize=(14, 9), sharex=True)
    ok = [r for r in records if r.ttft_s is not None]
    axes[0].scatter([r.sent_s for r in ok], [1000 * r.ttft_s for r in ok], s=6, color="tab:blue")
    failed = [r.sent_s for r in records if r.ttft_s is None]
    axes[0].scatter(failed, [1.0] * len(failed), s=30, marker="x", color="tab:red", label=f"failed ({len(failed)})")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    axes[0].set_ylabel("TTFT (ms, log)")
    if failed:
        axes[0].legend(loc="upper right")
    for engine in sorted({r["engine"] for r in rows}):
        mine = [r for r in rows if r["engine"] == engine]
        t = [r["t_s"] for r in mine]
        line = axes[1].plot(t, [r["running"] for r in mine], label=f"engine {engine} running")[0]
        axes[1].plot(t, [r["waiting"] for r in mine], linestyle=":", color=line.get_color(),
                     label=f"engine {engine} waiting")  # fmt: skip
        axes[2].plot(t, [100 * r["kv_usage"] for r in mine], color=line.get_color(), label=f"engine {engine}")
    axes[1].set_ylabel("requests")
    axes[2].set_ylabel("KV cache in use (%)")
    axes[2].set_xlabel("seconds since the replay began (requests at their send time)")
    for ax in axes[1:]:
        if rows:
            ax.legend(fontsize=7, loc="upper right", ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
