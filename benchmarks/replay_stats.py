"""The records and summary of a trace replay (`trace_replay.py`): per-request records, percentiles, goodput,
prefix hits, the JSON form of a record, the printed table and the plot.

A record is what one request did; `summarize` turns a replay's records into a `Summary` (p50/p90/p99 of
TTFT, ITL pooled over requests and E2E; requests/s; prefix-hit ratio over the requests that report cached
tokens; goodput within both SLOs). Pure but for `plot`, which writes a PNG.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path


# --- records and the summary --------------------------------------------------------------------------------
@dataclass(slots=True)
class RequestRecord:
    """What one request did. ``*_s`` instants are seconds since the replay start; durations are seconds."""

    index: int  # trace line
    scheduled_s: float  # when the trace says to send it (at_s * time_scale)
    input_tokens: int  # prompt tokens sent
    max_tokens: int
    sent_s: float | None = None  # when the POST went out: after scheduled_s under --max-inflight or client lag
    ttft_s: float | None = None  # send to the first chunk with content
    itl_s: list[float] = field(default_factory=list)  # gaps between content chunks
    e2e_s: float | None = None  # send to the end of the answer (or the failure); None while in flight
    prompt_tokens: int | None = None  # usage.prompt_tokens
    completion_tokens: int | None = None  # usage.completion_tokens, else content chunks
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens; None: not reported
    status: int | None = None  # HTTP status; None: no response
    error: str | None = None  # None: completed

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    @property
    def mean_itl_s(self) -> float | None:
        """Decode time per token after the first; 0 for a one-token answer."""
        if not self.ok or self.ttft_s is None or self.e2e_s is None:
            return None
        tokens = self.completion_tokens or 0
        return (self.e2e_s - self.ttft_s) / (tokens - 1) if tokens > 1 else 0.0


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(*(round(percentile(ordered, q), 3) for q in (50, 90, 99)))


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted values."""
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Summary:
    sent: int
    completed: int
    errors: int
    errors_by_kind: dict[str, int]  # "HTTP 400", "timeout", "ClientConnectorError" ...
    wall_s: float  # replay start to the last answer
    requests_per_s: float  # completed / wall
    output_tokens_per_s: float  # completion tokens of completed requests / wall
    ttft_ms: Percentiles | None
    itl_ms: Percentiles | None  # pooled gaps between content chunks
    e2e_ms: Percentiles | None
    prefix_hit_ratio: float | None  # cached / prompt tokens over requests that report cached tokens; None: none do
    slo_ttft_ms: float
    slo_itl_ms: float
    good: int  # completed with TTFT <= slo_ttft_ms and mean ITL <= slo_itl_ms
    goodput_rps: float  # good / wall


def summarize(records: Sequence[RequestRecord], wall_s: float, *, slo_ttft_ms: float,
              slo_itl_ms: float) -> Summary:  # fmt: skip
    ok = [r for r in records if r.ok]
    failed = [r for r in records if r.error is not None]
    reported = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    good = [r for r in ok if r.ttft_s is not None and r.ttft_s * 1000 <= slo_ttft_ms
            and (r.mean_itl_s or 0.0) * 1000 <= slo_itl_ms]  # fmt: skip
    wall = max(wall_s, 1e-9)
    return Summary(
        sent=sum(r.sent_s is not None for r in records),
        completed=len(ok),
        errors=len(failed),
        errors_by_kind=dict(Counter(r.error.split(":")[0] for r in failed if r.error)),
        wall_s=round(wall_s, 3),
        requests_per_s=round(len(ok) / wall, 3),
        output_tokens_per_s=round(sum(r.completion_tokens or 0 for r in ok) / wall, 1),
        ttft_ms=Percentiles.of([r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
        itl_ms=Percentiles.of([g * 1000 for r in ok for g in r.itl_s]),
        e2e_ms=Percentiles.of([r.e2e_s * 1000 for r in ok if r.e2e_s is not None]),
        prefix_hit_ratio=_hit_ratio(reported),
        slo_ttft_ms=slo_ttft_ms,
        slo_itl_ms=slo_itl_ms,
        good=len(good),
        goodput_rps=round(len(good) / wall, 3),
    )


def _hit_ratio(reported: Sequence[RequestRecord]) -> float | None:
    prompt = sum(r.prompt_tokens or 0 for r in reported)
    return round(sum(r.cached_tokens or 0 for r in reported) / prompt, 6) if prompt else None


# --- output -------------------------------------------------------------------------------------------------
def plot(records: Sequence[RequestRecord], path: Path, ceiling: float | None = None, window: int = 50) -> None:
    """TTFT by send time (errors as red crosses on the axis), and prefix hits over the last ``window`` requests."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6.5))
    ok = [r for r in records if r.ok and r.ttft_s is not None and r.sent_s is not None]
    top.scatter([r.sent_s for r in ok], [r.ttft_s for r in ok], s=6, label=f"TTFT ({len(ok)} requests)")
    bad = [r for r in records if r.error is not None and r.sent_s is not None]
    if bad:
        top.scatter([r.sent_s for r in bad], [0.0] * len(bad), marker="x", color="red", label=f"errors ({len(bad)})")
    top.set_ylabel("TTFT (s)")
    top.legend(loc="upper left")
    reported = sorted((r for r in records if r.ok and r.cached_tokens is not None and r.prompt_tokens),
                      key=lambda r: r.sent_s or 0.0)  # fmt: skip
    if reported:
        xs, ys = [], []
        for i in range(len(reported)):
            span = reported[max(0, i - window + 1) : i + 1]
            xs.append(reported[i].sent_s)
            ys.append(sum(r.cached_tokens or 0 for r in span) / sum(r.prompt_tokens or 0 for r in span))
        bottom.plot(xs, ys, label=f"prefix hits, last {window} requests")
    else:
        bottom.text(0.5, 0.5, "no cached_tokens reported", ha="center", transform=bottom.transAxes)
    if ceiling is not None:
        bottom.axhline(ceiling, ls="--", color="gray", label=f"shared-cache ceiling {ceiling:.1%}")
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("cached / prompt tokens")
    bottom.set_xlabel("send time (s since start)")
    bottom.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def record_json(r: RequestRecord) -> dict[str, object]:
    out = asdict(r)
    for k in ("scheduled_s", "sent_s", "ttft_s", "e2e_s"):
        out[k] = None if out[k] is None else round(out[k], 6)
    out["itl_s"] = [round(g, 6) for g in r.itl_s]
    return out


def print_table(s: Summary, ceiling: float) -> None:
    print(f"sent {s.sent}  completed {s.completed}  errors {s.errors} {s.errors_by_kind or ''}  wall {s.wall_s:.1f}s  "
          f"{s.requests_per_s:.2f} req/s  {s.output_tokens_per_s:.0f} output tok/s")  # fmt: skip
    print(f"{'ms':<6} {'p50':>10} {'p90':>10} {'p99':>10}")
    for name, p in (("TTFT", s.ttft_ms), ("ITL", s.itl_ms), ("E2E", s.e2e_ms)):
        print(f"{name:<6} " + (f"{p.p50:>10.1f} {p.p90:>10.1f} {p.p99:>10.1f}" if p else f"{'-':>10}"))
    hits = "not reported" if s.prefix_hit_ratio is None else f"{s.prefix_hit_ratio:.1%}"
    print(f"prefix hits {hits} (shared-cache ceiling {ceiling:.1%});  goodput {s.goodput_rps:.2f} req/s "
          f"({s.good}/{s.sent}) at TTFT <= {s.slo_ttft_ms:g} ms, mean ITL <= {s.slo_itl_ms:g} ms")  # fmt: skip
