"""benchmarks/arena_report.py: the plot of repeats whose figures are all equal (a real run's goodput:
15.70 req/s three times, whose mean rounds below 15.70 and once made a negative error bar)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.arena_refs import Reference  # noqa: E402
from benchmarks.arena_report import Entry, error_bar, plot  # noqa: E402


def summary(hits: float, p99: float) -> dict:
    return {"sent": 1000, "completed": 1000, "prefix_hit_ratio": hits, "ttft_ms": {"p50": 40.0, "p99": p99},
            "goodput_rps": 15.7}


def test_error_bars_of_equal_repeats_are_zero_not_negative() -> None:
    mean, below, above = error_bar([15.7, 15.7, 15.7])
    assert abs(mean - 15.7) < 1e-12
    assert 0.0 <= below < 1e-12 and 0.0 <= above < 1e-12
    assert error_bar([1.0, 2.0, 6.0]) == (3.0, 2.0, 3.0)
    assert error_bar([]) == (0.0, 0.0, 0.0)


def test_plot_of_repeats_with_equal_goodput(tmp_path: Path) -> None:
    entries = [Entry(router, i, 9.0, summary(hits, p99), [])
               for router, hits, p99 in (("dynamo_lite:ttft", 0.603, 66.0), ("dynamo_lite:blocks", 0.452, 58.0))
               for i in range(3)]  # fmt: skip
    out = tmp_path / "arena.png"
    plot(entries, [Reference("sticky", 0.613)], "equal goodput", out)
    assert out.stat().st_size > 10_000
