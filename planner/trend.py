"""A signal's recent level and slope: scale before a growing queue crosses its threshold,
but not on one noisy sample (the level is a least-squares fit, not the last value)."""

from __future__ import annotations

from collections import deque


class Trend:
    """Least-squares slope (units per second) over the last `window` samples."""

    def __init__(self, window: int = 6) -> None:
        if window < 2:
            raise ValueError("a trend needs a window of at least 2 samples")
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)

    def add(self, t: float, value: float) -> None:
        self._samples.append((t, value))

    def slope(self) -> float:
        """0 until the window is full: a slope fitted to a few samples is mostly noise."""
        n = len(self._samples)
        if n < (self._samples.maxlen or 2):
            return 0.0
        mean_t = sum(t for t, _ in self._samples) / n
        mean_v = sum(v for _, v in self._samples) / n
        var = sum((t - mean_t) ** 2 for t, _ in self._samples)
        if var == 0:
            return 0.0
        return sum((t - mean_t) * (v - mean_v) for t, v in self._samples) / var

    def level(self) -> float:
        """The fitted line at the newest sample: the signal with its noise averaged out."""
        n = len(self._samples)
        if n == 0:
            return 0.0
        mean_t = sum(t for t, _ in self._samples) / n
        mean_v = sum(v for _, v in self._samples) / n
        return mean_v + self.slope() * (self._samples[-1][0] - mean_t)

    def projected(self, horizon_s: float) -> float:
        """The fitted level moved `horizon_s` ahead along a rising slope; a falling slope is
        ignored (scaling down waits for the signal itself, so noise cannot hurry it)."""
        return max(0.0, self.level() + max(0.0, self.slope()) * horizon_s)
