"""The restart policy: doubling backoff, a crash-loop limit within a window, a fresh start after a quiet window."""

from __future__ import annotations

from dynamo_lite.orchestrator.restarts import PartState, RestartPolicy, RestartTracker

POLICY = RestartPolicy(backoff_s=1.0, max_backoff_s=5.0, limit=3, window_s=60.0)


def test_backoff_doubles_up_to_its_cap_then_gives_up() -> None:
    t = RestartTracker("etcd", POLICY)
    assert [t.failed(now, "exited") for now in (0.0, 1.0, 3.0)] == [1.0, 2.0, 4.0]
    assert t.health.state is PartState.RESTARTING
    assert t.failed(7.0, "exited with code 1") is None  # a 4th failure within 60 s: crash loop
    assert t.health.state is PartState.FAILED
    assert t.health.reason == "exited with code 1"


def test_the_cap_holds_for_long_loops() -> None:
    t = RestartTracker("frontend", RestartPolicy(backoff_s=1.0, max_backoff_s=5.0, limit=10, window_s=60.0))
    delays = [t.failed(float(i), "x") for i in range(6)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_failures_older_than_the_window_are_forgotten() -> None:
    t = RestartTracker("pool decode", POLICY)
    for now in (0.0, 1.0, 2.0):
        t.failed(now, "x")
        t.restarted(wall_time=1000.0 + now)
    assert t.failed(100.0, "x") == 1.0  # the three earlier ones are out of the window: back to the first delay
    assert t.health.restarts == 3


def test_restarted_counts_and_stamps() -> None:
    t = RestartTracker("nats-server", POLICY)
    t.failed(0.0, "killed")
    t.restarted(wall_time=1234.5)
    assert (t.health.state, t.health.restarts, t.health.last_restart) == (PartState.RUNNING, 1, 1234.5)


def test_limit_zero_never_restarts() -> None:
    t = RestartTracker("prometheus", RestartPolicy(limit=0))
    assert t.failed(0.0, "x") is None
    assert t.health.state is PartState.FAILED
