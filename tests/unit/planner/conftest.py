from __future__ import annotations

import pytest

from planner import Limits, PoolLimits


@pytest.fixture
def limits() -> Limits:
    return Limits(prefill=PoolLimits(1, 4), decode=PoolLimits(1, 4), max_total=8, max_step=1, max_step_up=1, cooldown_s=60.0,
                  scale_down_after=3)
