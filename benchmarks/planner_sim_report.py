"""The planner benchmark's figures: per-run summary, the comparison with static fleets, table and plot."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

Result = dict[str, Any]  # one simulation's summary, as written to the JSON
COLORS = tuple(f"C{i}" for i in range(10))  # matplotlib's default cycle: one per planner


def summarise(run: Any, args: argparse.Namespace, reqs: list, fleet: Any, end: float, horizon: float,
              wall_s: float) -> Result:
    """Goodput over the slice; replica-seconds over [0, last arrival] (the same window for every run)."""
    done = [r for r in reqs if r.done_at is not None]
    good = [r for r in done if r.first_token_at - r.arrival <= args.ttft_ms / 1000 and r.itl_s <= args.itl_ms / 1000]
    ttfts = sorted(r.first_token_at - r.arrival for r in done)
    replica_s = sum(max(0.0, min(w.stopped_at if w.stopped_at is not None else end, horizon) - w.requested_at)
                    for w in fleet.workers)
    reasons = Counter(r.reason.value for r in reqs if r.reason is not None)
    return {
        "name": run.name, "kind": run.kind, "static": run.static, "prefill": run.prefill, "decode": run.decode,
        "size": run.prefill + run.decode, "requests": len(reqs), "finished": len(done), "good": len(good),
        "horizon_s": round(horizon, 1), "goodput_rps": round(len(good) / horizon, 3),
        "attainment": round(len(good) / max(1, len(reqs)), 4), "replica_seconds": round(replica_s, 1),
        "mean_replicas": round(replica_s / horizon, 2),
        "good_per_replica_hour": round(len(good) / replica_s * 3600, 1) if replica_s else 0.0,
        "ttft_p90_s": round(ttfts[int(0.9 * len(ttfts))], 3) if ttfts else None,
        "remote_prefill_share": round(reasons["remote"] / max(1, len(reqs)), 3),
        "prefill_reasons": dict(sorted(reasons.items())), "migrations": fleet.migrations,
        "sim_end_s": round(end, 1), "wall_s": round(wall_s, 1),
    }


def peak(r: Result) -> int:
    return max((s["prefill"] + s["decode"] for s in r["series"]), default=r["size"])


def _best(rows: list[Result]) -> Result | None:
    return max(rows, key=lambda r: (r["attainment"], -r["replica_seconds"])) if rows else None


def _largest(static: list[Result]) -> Result | None:
    """The best static fleet of the largest size (the budget): what the clairvoyant is held against."""
    return _best([s for s in static if s["size"] == max((x["size"] for x in static), default=0)])


def verdict(results: list[Result]) -> tuple[list[dict[str, Any]], list[str]]:
    """The table rows (planners, then the static fleets they are compared with) and the done-when checks."""
    static = [r for r in results if r["static"]]
    planners = [r for r in results if r["kind"] == "planner"]
    rows, checks, seen = [], [], set()

    def row(r: Result, note: str) -> None:
        key = (r["name"], note)
        if key not in seen:
            seen.add(key)
            rows.append({**{k: r[k] for k in ("name", "goodput_rps", "attainment", "replica_seconds",
                                                 "good_per_replica_hour", "ttft_p90_s", "remote_prefill_share")},
                         "peak": peak(r), "note": note})

    best = _best(static)
    for p in planners:
        row(p, f"peak {peak(p)}")
    if best is not None:
        row(best, "best static (any size)")
    for p in planners:
        same = _best([s for s in static if s["size"] == peak(p)])
        reach = [s for s in static if s["attainment"] >= p["attainment"]]
        smallest = min(reach, key=lambda s: (s["size"], -s["attainment"])) if reach else None
        thrifty = max(reach, key=lambda s: s["good_per_replica_hour"]) if reach else None
        if same is not None:
            row(same, f"best static of {p['name']}'s peak size")
        if smallest is not None:
            row(smallest, f"smallest static reaching {p['name']}'s attainment")
        parts = [f"{p['name']}: attainment {p['attainment']:.1%}, {p['replica_seconds']:.0f} replica-s"]
        if same is not None:
            ok1, ratio = p["attainment"] >= same["attainment"], p["replica_seconds"] / same["replica_seconds"]
            parts.append(f"vs best static at its peak size {peak(p)} ({same['name']}, {same['attainment']:.1%}): "
                         f"attainment {'>=' if ok1 else '<'} [{'met' if ok1 else 'NOT met'}], "
                         f"replica-s x{ratio:.2f} [{'met' if ratio <= 0.7 else 'NOT met'}: <= 0.7]")
        if thrifty is not None:
            g = p["good_per_replica_hour"] / thrifty["good_per_replica_hour"]
            parts.append(f"good/replica-h x{g:.2f} the best static at >= its attainment ({thrifty['name']}) "
                         f"[{'met' if g >= 1.3 else 'NOT met'}: >= 1.3]")
        else:
            parts.append("no static fleet reaches its attainment")
        parts.append(f"smallest static reaching it: {smallest['name'] if smallest else 'none'}")
        checks.append("; ".join(parts))
    seer = [r for r in results if r["kind"] == "clairvoyant"]
    full = _largest(static)
    if seer and full is not None:
        line, within, reach = clairvoyant_check(seer, static, full)
        checks.append(line)
        for r, note in ((within, "clairvoyant: most attainment within 0.7x"), (reach, "clairvoyant: cheapest at "
                        f"{full['name']}'s attainment")):
            if r is not None:
                row(r, note)
    return rows, checks


def clairvoyant_check(seer: list[Result], static: list[Result], full: Result,
                      ) -> tuple[str, Result | None, Result | None]:  # fmt: skip
    """What the clairvoyant frontier says about the targets against the full-size static fleet `full`: its best
    attainment within 0.7x of `full`'s replica-seconds, its cheapest run reaching `full`'s attainment, and its
    best good requests per replica-hour over the best static fleet's at equal or better attainment."""
    within = _best([r for r in seer if r["replica_seconds"] <= 0.7 * full["replica_seconds"]])
    reaching = [r for r in seer if r["attainment"] >= full["attainment"]]
    reach = min(reaching, key=lambda r: r["replica_seconds"]) if reaching else None
    line = (f"clairvoyant reference (knows the true rate, aggregated) against {full['name']} "
            f"({full['attainment']:.1%}, {full['replica_seconds']:.0f} replica-s): ")
    line += (f"within 0.7x of its replica-s at most {within['attainment']:.1%} ({within['name']})"
             if within else "no run within 0.7x of its replica-s")
    line += (f"; reaching its attainment takes x{reach['replica_seconds'] / full['replica_seconds']:.2f} "
             f"({reach['name']})" if reach else "; no run reaches its attainment")
    ratios = []
    for r in seer:
        rivals = [s["good_per_replica_hour"] for s in static if s["attainment"] >= r["attainment"]]
        if rivals and max(rivals) > 0:
            ratios.append((r["good_per_replica_hour"] / max(rivals), r["name"]))
    if ratios:
        g, name = max(ratios)
        line += f"; good/replica-h at most x{g:.2f} the best static at >= its attainment ({name})"
    return line, within, reach


def sweep_table(results: list[Result]) -> list[tuple[int, str, str, str]]:
    """Per fleet size: the best attainment of each static family (with its P:D)."""
    out = []
    for n in sorted({r["size"] for r in results if r["static"]}):
        cells = []
        for kind in ("aggregated", "disaggregated", "conditional"):
            b = _best([r for r in results if r["static"] and r["size"] == n and r["kind"] == kind])
            cells.append("-" if b is None else f"{b['attainment']:.1%}" + (f" {b['prefill']}P:{b['decode']}D"
                                                                              if kind != "aggregated" else ""))
        out.append((n, *cells))
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'run':<36}{'goodput':>9}{'attain':>8}{'replica-s':>10}{'good/rep-h':>11}{'TTFT p90':>9}{'peak':>5}  note")
    for r in rows:
        print(f"{r['name']:<36}{r['goodput_rps']:>9.2f}{r['attainment']:>8.1%}{r['replica_seconds']:>10.0f}"
              f"{r['good_per_replica_hour']:>11.0f}{r['ttft_p90_s'] or 0:>8.2f}s{r['peak']:>5}  {r['note']}")


def plot_frontier(results: list[Result], path: Any, title: str) -> None:
    """Attainment against replica-seconds: every static fleet, the clairvoyant frontier, the planners, and the
    region the targets ask for (at least the full static fleet's attainment on at most 0.7x its replica-s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 6))
    marks = {"aggregated": "s", "disaggregated": "v", "conditional": "^"}
    for kind, mark in marks.items():
        rs = [r for r in results if r["kind"] == kind]
        ax.scatter([r["replica_seconds"] for r in rs], [r["attainment"] * 100 for r in rs], marker=mark, s=14,
                   color="gray", alpha=0.6, label=f"static {kind}")
    seer = sorted((r for r in results if r["kind"] == "clairvoyant"), key=lambda r: r["replica_seconds"])
    frontier, top = [], -1.0
    for r in seer:
        if r["attainment"] > top:
            frontier.append(r)
            top = r["attainment"]
    ax.plot([r["replica_seconds"] for r in frontier], [r["attainment"] * 100 for r in frontier], "k.-", lw=1,
            label="clairvoyant (knows the true rate): frontier")
    for r, color in zip((r for r in results if r["kind"] == "planner"), COLORS):
        ax.scatter([r["replica_seconds"]], [r["attainment"] * 100], s=60, color=color, label=r["name"], zorder=3)
    static = [r for r in results if r["static"]]
    full = _largest(static)
    if full is not None:
        ax.fill_between([0, 0.7 * full["replica_seconds"]], full["attainment"] * 100, 100, color="tab:green",
                        alpha=0.12, label=f"target: >= {full['name']}'s attainment on <= 0.7x its replica-s")
    ax.set_xlim(left=0)
    shown = [r["attainment"] for r in results if r["kind"] == "planner"] + [r["attainment"] for r in frontier]
    ax.set_ylim(bottom=max(0.0, min(shown, default=0.0) * 100 - 10), top=100)  # fleets far below: off the plot
    ax.set_xlabel("replica-seconds")
    ax.set_ylabel("SLO attainment, %")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"{title}\nevery run within the budget; clairvoyant: ceil(k x m(t) + base) workers", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(planners: list[Result], rows: list[dict[str, Any]], path: Any, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_l) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for r, color in zip(planners, COLORS):
        ts = [s["t"] for s in r["series"]]
        ax_r.step(ts, [s["prefill"] + s["decode"] for s in r["series"]], where="post", color=color,
                  label=f"{r['name']}: total ({r['attainment']:.0%} good, {r['replica_seconds']:.0f} replica-s)")
        ax_r.step(ts, [s["prefill"] for s in r["series"]], where="post", color=color, ls=":", lw=1)
    best = next((x for x in rows if x["note"] == "best static (any size)"), None)
    if best is not None:
        ax_r.axhline(best["peak"], color="gray", ls="--",
                     label=f"best static: {best['name']} ({best['attainment']:.0%} good)")
    ax_r.set_ylabel("replicas (dotted: prefill)")
    ax_r.legend(fontsize=7, loc="upper left")
    if planners:
        s = planners[0]["series"]
        ax_l.plot([x["t"] for x in s], [x["rate"] for x in s], color="black", lw=1)
    ax_l.set_ylabel("arriving requests/s")
    ax_l.set_xlabel("simulated seconds")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
