"""The committed Grafana dashboards are the rendered definitions, and every panel has queries."""

from __future__ import annotations

import json

from dynamo_lite.observability.dashboards import DASHBOARDS, OUT, all_queries, main, rendered_files


def test_committed_dashboards_are_current() -> None:
    assert main(["--check"]) == 0, "run `python -m dynamo_lite.observability.dashboards` and commit the result"
    assert sorted(p.name for p in OUT.glob("*.json")) == sorted(rendered_files())


def test_every_panel_queries_something_and_ids_are_unique() -> None:
    for dashboard in DASHBOARDS:
        rendered = json.loads(rendered_files()[f"{dashboard.uid}.json"])
        assert [p["id"] for p in rendered["panels"]] == list(range(1, len(dashboard.panels) + 1))
        assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in rendered["panels"])
    exprs = [e for _, _, e in all_queries()]
    assert len(exprs) == len(set(exprs)), "no query repeated across panels"


def test_readme_metric_table_is_current() -> None:
    from pathlib import Path

    from dynamo_lite.observability.catalog import catalog_markdown

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert catalog_markdown() in readme, "paste `python -m dynamo_lite.observability.catalog` into README.md"
