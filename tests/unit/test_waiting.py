"""tests.waiting: eventually() retries until a check passes, and says what it waited for when it does not."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.waiting import eventually, eventually_async


def flaky(failures: int, value: object = "ok") -> tuple[Callable[[], object], list[int]]:
    """A check that fails `failures` times (raising, then returning falsy), then returns `value`."""
    calls = []

    def check() -> object:
        calls.append(1)
        if len(calls) <= failures:
            assert len(calls) % 2 == 0, f"attempt {len(calls)} not yet"
            return None
        return value

    return check, calls


def test_retries_falsy_and_failed_assertions_and_returns_the_value() -> None:
    check, calls = flaky(3, value={"n": 1})
    assert eventually(check, timeout=5, interval=0.001, what="the value") == {"n": 1}
    assert len(calls) == 4


def test_times_out_naming_what_and_the_last_failure() -> None:
    def never() -> None:
        raise AssertionError("not yet")

    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the moon; "
                                             r"last: AssertionError: not yet") as e:
        eventually(never, timeout=0.2, interval=0.01, what="the moon")
    assert 0.2 <= time.monotonic() - started < 2
    assert isinstance(e.value.__cause__, AssertionError)
    with pytest.raises(AssertionError, match=r"waiting for zero; last: the check returned 0"):
        eventually(lambda: 0, timeout=0.05, interval=0.01, what="zero")


def test_other_exceptions_end_the_wait_at_once() -> None:
    calls = []

    def check() -> bool:
        calls.append(1)
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="the process exited"):
        eventually(check, timeout=5, what="never")
    assert calls == [1]


async def test_async_form_awaits_coroutine_checks_and_takes_plain_ones() -> None:
    check, calls = flaky(2)

    async def async_check() -> object:
        return check()

    assert await eventually_async(async_check, timeout=5, interval=0.001, what="async") == "ok"
    assert len(calls) == 3
    assert await eventually_async(lambda: 7, timeout=1, what="sync") == 7
    with pytest.raises(AssertionError, match=r"waiting for nothing; last: the check returned \[\]"):
        await eventually_async(list, timeout=0.05, interval=0.01, what="nothing")
