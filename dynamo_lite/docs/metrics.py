"""docs/reference/metrics.md: every metric dynamo_lite exports, built from the live registries."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase


def _registries() -> list[tuple[str, Callable[[CollectorRegistry], object]]]:
    from dynamo_lite.frontend.load_share import LoadShareMetrics
    from dynamo_lite.frontend.metrics import FrontendMetrics
    from dynamo_lite.frontend.snapshot import SnapshotMetrics
    from dynamo_lite.orchestrator.reconciler import SupervisorMetrics
    from dynamo_lite.planning.metrics import PlannerMetrics
    from dynamo_lite.worker.metrics import WorkerMetrics

    return [("frontend", FrontendMetrics), ("frontend", SnapshotMetrics), ("frontend", LoadShareMetrics),
            ("worker agent", WorkerMetrics), ("planner", PlannerMetrics),
            ("supervisor (admin API)", SupervisorMetrics)]


PAGE_HEAD = """# Metrics reference

Every metric the frontend, the worker agents, the planner and the supervisor of
`orchestrator up` (on its admin API) export on `/metrics`.
The engines' own `vllm:*` metrics come beside them; see
[operations/observability.md](../operations/observability.md). Generated from the
metric definitions by `python -m dynamo_lite.docs`; a test keeps it current.

Several frontend processes (`frontend.processes`) each export their own series; each is
scraped at its own metrics port, with a `process` label. Sum over `process` for counters,
histograms and gauges of work (requests in flight); the prefill queue depth and the worker
counts are each process's view of one thing (take the max).

"""


def page() -> str:
    return PAGE_HEAD + catalog_markdown() + "\n"


def catalog_markdown() -> str:
    rows = ["| metric | type | labels | component | meaning |", "|---|---|---|---|---|"]
    for component, make in _registries():
        metrics = make(CollectorRegistry())
        for metric in vars(metrics).values():
            if not isinstance(metric, MetricWrapperBase):
                continue
            # prometheus-client keeps label names only on the wrapper (no public accessor).
            kind = metric._type  # noqa: SLF001
            name = metric._name + ("_total" if kind == "counter" else "")  # noqa: SLF001
            labels = ", ".join(metric._labelnames) or "-"  # noqa: SLF001
            doc = metric._documentation.replace("|", "/")  # noqa: SLF001
            rows.append(f"| `{name}` | {kind} | {labels} | {component} | {doc} |")
    return "\n".join(rows)

