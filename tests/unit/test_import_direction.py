"""Imports run one way: router/, planner/ and connectors/ are libraries; dynamo_lite wires them. No cycles."""

from __future__ import annotations

from dynamo_lite.docs import REPO
from dynamo_lite.docs.packages import LIBRARIES, cycles, import_graph, package_graph, package_of

MODULES = import_graph(REPO)
PACKAGES = package_graph(MODULES)


def test_the_graph_sees_the_project() -> None:
    # Known edges, so that a graph that reads nothing cannot pass the tests below.
    assert "router" in MODULES["dynamo_lite.frontend.prefill"]
    assert "dynamo_lite.frontend.request" in MODULES["dynamo_lite.frontend.flow"]
    assert "router.types" in MODULES["dynamo_lite.protocol"]
    assert {"router", "planner", "connectors"} <= set().union(*PACKAGES.values())


def test_libraries_import_nothing_of_dynamo_lite() -> None:
    wrong = sorted((module, target) for module, targets in MODULES.items() if package_of(module) in LIBRARIES
                   for target in targets if target.split(".")[0] == "dynamo_lite")  # fmt: skip
    assert wrong == [], "router/, planner/ and connectors/ must not import dynamo_lite: " + ", ".join(
        f"{m} -> {t}" for m, t in wrong)


def test_libraries_do_not_import_each_other() -> None:
    for library in LIBRARIES:
        others = {t.split(".")[0] for m, ts in MODULES.items() if m.split(".")[0] == library for t in ts} - {library}
        assert others == set(), f"{library} imports {sorted(others)}"


def test_no_import_cycle_between_modules() -> None:
    assert cycles(MODULES) == []


def test_no_import_cycle_between_packages() -> None:
    assert cycles(PACKAGES) == []


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
