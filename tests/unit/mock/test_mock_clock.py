"""SimClock: simulated time paced to the wall clock, exact while busy."""

from __future__ import annotations

import pytest

from dynamo_lite.engines.mock.clock import SimClock


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_idle_clock_follows_the_wall_clock_times_the_speedup() -> None:
    wall = FakeTime()
    clock = SimClock(50.0, wall)
    wall.t += 0.1
    assert clock.now() == pytest.approx(5.0) and clock.idle


def test_busy_clock_advances_by_pass_durations_even_when_lagging() -> None:
    wall = FakeTime()
    clock = SimClock(100.0, wall)
    clock.wake()
    clock.advance(0.006)
    wall.t += 0.01  # Python took 10 ms: 1 s simulated, far more than the 6 ms pass
    assert clock.loop_time == pytest.approx(0.006)
    assert clock.lag() == pytest.approx(0.994)
    assert clock.now() == pytest.approx(0.006)  # an arrival now is seen at the end of the pass


def test_arrivals_while_ahead_are_kept_within_the_pass_in_progress() -> None:
    wall = FakeTime()
    clock = SimClock(100.0, wall)
    clock.wake()
    for _ in range(10):
        clock.advance(0.005)  # 50 ms simulated in no wall time: the loop is ahead
    assert clock.now() == pytest.approx(0.045)  # start of the last pass, not wall time 0


def test_waking_jumps_to_the_deadline_or_the_arrival() -> None:
    wall = FakeTime()
    clock = SimClock(10.0, wall)
    wall.t += 1.0
    clock.wake(at_least=3.0)
    assert clock.loop_time == pytest.approx(3.0) and not clock.idle
    clock.idle = True
    clock.wake()
    assert clock.loop_time == pytest.approx(10.0)


def test_rejects_a_non_positive_speedup() -> None:
    with pytest.raises(ValueError):
        SimClock(0.0)
