"""Conditional P/D under the frontend's two disaggregation rules, side by side, from two planner_sim.py results.

One results file from a run with `--decision threshold` (the default; a file written before the option
existed is that), one from a run with `--decision predicted`, of the same trace and settings otherwise.
The simulation is deterministic, so two runs compare as one: the aggregated fleets and the clairvoyant
reference come out the same in both. Prints, per rate profile, the attainment (and the share of
prompts prefilled remotely) of every conditional P/D split of the largest sizes and of the SLA
planners with conditional P/D, under each rule; draws `<out>`: attainment against the prefill workers
of each split, one line per rule and size, the aggregated fleet of that size dashed.

    .venv/bin/python benchmarks/planner_sim_rules.py benchmarks/results/planner_sim.json \\
        benchmarks/results/planner_sim_predicted.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.paths import RESULTS  # noqa: E402
from benchmarks.rate_profile import RateProfile  # noqa: E402

RULES = ("threshold", "predicted")
IGNORED = {"decision", "out", "jobs", "from_json", "planners_only"}  # settings that may differ between the two


def load(path: Path, rule: str) -> dict[str, Any]:
    report = json.loads(path.read_text())
    got = report["settings"].get("decision", "threshold")
    if got != rule:
        raise SystemExit(f"{path}: a --decision {got} run, where the {rule} run was expected")
    return report


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The settings both runs recorded that differ (an option added since the older run is not compared)."""
    keys = (set(a) & set(b)) - IGNORED
    return [f"{k}: {a.get(k)!r} against {b.get(k)!r}" for k in sorted(keys) if a.get(k) != b.get(k)]


def splits(results: list[dict[str, Any]], size: int) -> dict[int, dict[str, Any]]:
    """The conditional P/D fleets of `size` workers, by prefill workers."""
    return {r["prefill"]: r for r in results if r["kind"] == "conditional" and r["size"] == size}


def table(profile: str, by_rule: dict[str, list[dict[str, Any]]], sizes: list[int]) -> list[str]:
    head = "| run | " + " | ".join(f"{rule}: attainment (remote)" for rule in RULES) + " | difference |"
    lines = [f"**{RateProfile.parse(profile).describe()}**", "", head, "|---|---|---|---|"]

    def row(name: str, pair: list[dict[str, Any]]) -> None:
        cells = [f"{r['attainment']:.1%} ({r['remote_prefill_share']:.0%})" for r in pair]
        lines.append(f"| {name} | {' | '.join(cells)} | {(pair[1]['attainment'] - pair[0]['attainment']) * 100:+.1f} |")

    named = [{r["name"]: r for r in by_rule[rule]} for rule in RULES]
    for name in named[0]:
        if name in named[1] and named[0][name]["kind"] == "planner" and "conditional" in name:
            row(name, [n[name] for n in named])
    for size in sizes:
        agg = named[0].get(f"aggregated x{size}")
        if agg is not None:
            lines.append(f"| aggregated x{size} (either rule) | {agg['attainment']:.1%} | | |")
        pairs = [splits(by_rule[rule], size) for rule in RULES]
        for p in sorted(pairs[0]):
            if p in pairs[1]:
                row(f"conditional {p}P:{size - p}D", [pairs[0][p], pairs[1][p]])
    return lines


def plot(profiles: list[str], by_profile: dict[str, dict[str, list[dict[str, Any]]]], sizes: list[int],
         path: Path, title: str) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 4.2), sharey=True, squeeze=False)
    for ax, profile in zip(axes[0], profiles):
        by_rule = by_profile[profile]
        for size, color in zip(sizes, ("C0", "C1", "C2", "C3")):
            for rule, style in zip(RULES, (":", "-")):
                fleets = splits(by_rule[rule], size)
                xs = sorted(fleets)
                ax.plot(xs, [fleets[x]["attainment"] * 100 for x in xs], style, marker="o", ms=3, color=color,
                        label=f"{size} workers, {rule}")
            agg = next((r for r in by_rule[RULES[0]] if r["name"] == f"aggregated x{size}"), None)
            if agg is not None:
                ax.axhline(agg["attainment"] * 100, color=color, ls="--", lw=0.8, label=f"aggregated x{size}")
        ax.set_title(RateProfile.parse(profile).describe(), fontsize=9)
        ax.set_xlabel("prefill workers of the fleet (the rest decode)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("SLO attainment, %")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("threshold", type=Path, help="planner_sim.py results of a --decision threshold run")
    p.add_argument("predicted", type=Path, help="planner_sim.py results of a --decision predicted run")
    p.add_argument("--sizes", default="6,8", help="conditional P/D fleet sizes to show, ','-separated")
    p.add_argument("--out", type=Path, default=RESULTS / "planner_sim_rules.png", help="the plot")
    args = p.parse_args(argv)
    reports = [load(path, rule) for path, rule in zip((args.threshold, args.predicted), RULES)]
    for line in differences(reports[0]["settings"], reports[1]["settings"]):
        print(f"warning: the two runs' settings differ: {line}")
    profiles = [prof for prof in reports[0]["profiles"] if prof in reports[1]["profiles"]]
    if not profiles:
        raise SystemExit("the two results files have no rate profile in common")
    sizes = [int(s) for s in args.sizes.split(",")]
    by_profile = {prof: {rule: rep["profiles"][prof]["results"] for rule, rep in zip(RULES, reports)}
                  for prof in profiles}
    for prof in profiles:
        print("\n".join(["", *table(prof, by_profile[prof], sizes)]))
    s = reports[1]["settings"]
    title = (f"Conditional P/D by the disaggregation rule (dotted: threshold, solid: predicted); TTFT <= "
             f"{s['ttft_ms']:.0f} ms, ITL <= {s['itl_ms']:.0f} ms")
    plot(profiles, by_profile, sizes, args.out, title)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
