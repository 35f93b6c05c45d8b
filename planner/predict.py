"""Load predictors: what a signal (the request rate) will be some seconds from now.

The SLA policy sizes pools for the rate predicted one worker start-up ahead, so
that a worker asked for now is serving when the load it was asked for arrives.
Two models, chosen by `planner.predictor` in cluster.yaml:
- `KalmanPredictor`: a local linear trend (level and slope) tracked by a Kalman
  filter. It needs no knowledge of the load's shape; it extrapolates the slope,
  so it lags a turning point by about its own smoothing time.
- `SeasonalPredictor`: trend plus seasonality, a least-squares fit of
  level + slope * t + a * sin(w t) + b * cos(w t) over the last `window_s`,
  for a load whose period is known (a daily cycle, a batch job every hour).
  With less than a quarter period of samples it fits the trend only.
`LastValue` predicts what it saw (no prediction: the reactive baseline).
All are pure: time is passed in. Every prediction is finite and >= 0 (a signal
that was always 0 predicts 0: the planner then sits at its minimum).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol


class Predictor(Protocol):
    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        """A sample at time `t` (seconds, increasing); `variance`: its noise, when the caller knows it
        (a rate counted over an interval: Poisson, rate / interval)."""
        ...

    def predict(self, t: float) -> float:
        """The expected value at time `t` (>= the last sample's); 0 before any sample."""
        ...


class LastValue:
    def __init__(self) -> None:
        self._v = 0.0

    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        self._v = _clean(value)

    def predict(self, t: float) -> float:
        return self._v


@dataclass(frozen=True, slots=True)
class KalmanConfig:
    accel_noise: float = 3e-7  # spectral density of the slope's random walk, relative to the level squared (1/s^3)
    observation_noise: float = 0.05  # relative noise of a sample when the caller gives no variance (std / level)
    floor: float = 0.1  # level below which the relative noises are taken at this level (a quiet signal)


class KalmanPredictor:
    """Constant-velocity Kalman filter; prediction = level + slope * (t - t_last)."""

    def __init__(self, config: KalmanConfig = KalmanConfig()) -> None:
        self.config = config
        self._t: float | None = None
        self.level = 0.0
        self.slope = 0.0
        self._p = [[1.0, 0.0], [0.0, 1.0]]  # state covariance

    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        value = _clean(value)
        scale = max(abs(self.level), abs(value), self.config.floor)
        r = variance if variance is not None and variance > 0 else (self.config.observation_noise * scale) ** 2
        if self._t is None:
            self._t, self.level, self.slope = t, value, 0.0
            self._p = [[r, 0.0], [0.0, r / 100.0]]
            return
        dt = max(t - self._t, 1e-9)
        self._t = t
        # Predict: x = F x, P = F P F' + Q (white-noise acceleration).
        level, slope = self.level + self.slope * dt, self.slope
        (p00, p01), (p10, p11) = self._p
        q = self.config.accel_noise * scale * scale
        p00, p01, p11 = (p00 + dt * (p01 + p10) + dt * dt * p11 + q * dt ** 3 / 3,
                         p01 + dt * p11 + q * dt * dt / 2, p11 + q * dt)
        # Update with the sample.
        s = p00 + r
        k0, k1 = p00 / s, p01 / s
        innovation = value - level
        self.level, self.slope = level + k0 * innovation, slope + k1 * innovation
        self._p = [[(1 - k0) * p00, (1 - k0) * p01], [p01 - k1 * p00, p11 - k1 * p01]]

    def predict(self, t: float) -> float:
        if self._t is None:
            return 0.0
        return _clean(self.level + self.slope * max(0.0, t - self._t))


@dataclass(frozen=True, slots=True)
class SeasonalConfig:
    period_s: float  # the load's period (seconds)
    window_s: float = 0.0  # samples fitted over; 0: two periods

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError("a seasonal predictor needs period_s > 0")


class SeasonalPredictor:
    """Least squares of level + slope*t + a*sin(wt) + b*cos(wt) over a sliding window."""

    def __init__(self, config: SeasonalConfig) -> None:
        self.config = config
        self.window_s = config.window_s or 2 * config.period_s
        self._samples: deque[tuple[float, float, float]] = deque()  # (t, value, weight)
        self._coef: list[float] = [0.0, 0.0, 0.0, 0.0]  # level, slope, a, b (time relative to the newest sample)
        self._t: float | None = None
        self._seasonal = False  # whether the last fit included the season

    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        weight = 1.0 / variance if variance is not None and variance > 0 else 1.0
        self._samples.append((t, _clean(value), weight))
        while self._samples and self._samples[0][0] < t - self.window_s:
            self._samples.popleft()
        self._t = t
        self._fit()

    def _features(self, dt: float, seasonal: bool) -> list[float]:
        if not seasonal:
            return [1.0, dt]
        w = 2 * math.pi / self.config.period_s
        t = dt + (self._t or 0.0)  # the phase is absolute: the season does not move with the window
        return [1.0, dt, math.sin(w * t), math.cos(w * t)]

    def _fit(self) -> None:
        assert self._t is not None
        span = self._samples[-1][0] - self._samples[0][0]
        seasonal = span >= self.config.period_s / 4 and len(self._samples) >= 6
        if len(self._samples) < 3:
            mean = sum(v for _, v, _ in self._samples) / len(self._samples)
            self._coef, self._seasonal = [mean, 0.0, 0.0, 0.0], False
            return
        rows = [(self._features(t - self._t, seasonal), v, w) for t, v, w in self._samples]
        k = len(rows[0][0])
        a = [[sum(w * x[i] * x[j] for x, _, w in rows) for j in range(k)] for i in range(k)]
        b = [sum(w * x[i] * v for x, v, w in rows) for i in range(k)]
        for i in range(k):
            a[i][i] *= 1 + 1e-12  # a hair of ridge: a degenerate window (equal samples) stays solvable
        coef = _solve(a, b)
        self._coef = coef + [0.0] * (4 - k) if coef is not None else self._coef
        self._seasonal = seasonal

    def predict(self, t: float) -> float:
        if self._t is None:
            return 0.0
        x = self._features(max(0.0, t - self._t), self._seasonal)
        return _clean(sum(c * f for c, f in zip(self._coef, x)))


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None if singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def _clean(v: float) -> float:
    """Finite and >= 0: a rate is never negative, and a NaN must never reach a replica count."""
    return v if math.isfinite(v) and v > 0 else 0.0
