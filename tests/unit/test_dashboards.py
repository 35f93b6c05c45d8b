"""Every dashboard panel has queries, none repeated (tests/unit/test_docs.py keeps the JSON current)."""

from __future__ import annotations

import json

from dynamo_lite.docs.dashboards import DASHBOARDS, all_queries, rendered_files


def test_every_panel_queries_something_and_ids_are_unique() -> None:
    for dashboard in DASHBOARDS:
        rendered = json.loads(rendered_files()[f"{dashboard.uid}.json"])
        assert [p["id"] for p in rendered["panels"]] == list(range(1, len(dashboard.panels) + 1))
        assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in rendered["panels"])
    exprs = [e for _, _, e in all_queries()]
    assert len(exprs) == len(set(exprs)), "no query repeated across panels"
