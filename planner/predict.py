"""Load predictors: what a signal (the request rate) will be some seconds from now.

The SLA policy sizes pools for the rate predicted one worker start-up ahead (to
the next tick after that), so that a worker asked for now is serving when the
load it was asked for arrives.
Two models, chosen by `planner.predictor` in cluster.yaml:
- `KalmanPredictor`: a local linear trend (level and slope) tracked by a Kalman
  filter. It needs no knowledge of the load's shape; it extrapolates the slope,
  so it lags a turning point by about its own smoothing time. A sample far off
  its prediction (5 standard deviations, or 1.5 three times in a row on the same
  side) restarts it from that sample: a load that starts or steps is a new
  level, not a trend to follow.
- `SeasonalPredictor`: trend plus seasonality, a least-squares fit of
  level + slope * t + sum over k of a_k sin(k w t) + b_k cos(k w t) over the
  last `window_s`, for a load whose period is known (a daily cycle, a batch
  job every hour): Prophet's Fourier seasonality. One harmonic is a sine; a
  burst that comes at the same time every period needs more. The number of
  harmonics is chosen at every fit by the Bayesian information criterion
  (BIC), up to `max_harmonics`, once a whole period has been seen: a smooth
  cycle keeps one, a square one takes what its edges need, and noise alone
  does not buy a harmonic. With less than a whole period it fits one
  harmonic (with less than a quarter period, the trend only), and predicts
  at least what it saw one period before: a burst seen once comes again.
`LastValue` predicts what it saw (no prediction: the reactive baseline).
`ForecastErrors` measures how far the load came above what a predictor said one
start-up before: the margin the SLA policy sizes for on top of the prediction.
All are pure: time is passed in. Every prediction is finite and >= 0 (a signal
that was always 0 predicts 0: the planner then sits at its minimum).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol


class Predictor(Protocol):
    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        """A sample at time `t` (seconds, increasing); `variance`: its noise, when the caller knows it
        (a rate counted over an interval: Poisson, rate / interval)."""
        ...

    def predict(self, t: float) -> float:
        """The expected value at time `t` (>= the last sample's); 0 before any sample."""
        ...

    @property
    def warm(self) -> bool:
        """Whether the model has what it needs to forecast (a seasonal one: a whole period). `ForecastErrors`
        does not hold a cold model's misses against the warm one."""
        ...


class LastValue:
    warm = True

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
    jump_sigmas: float = 5.0  # a sample this many standard deviations off the prediction: the level changed
    drift_sigmas: float = 1.5  # ... or `drift_samples` in a row this far off, on the same side
    drift_samples: int = 3


class KalmanPredictor:
    """Constant-velocity Kalman filter; prediction = level + slope * (t - t_last)."""

    warm = True  # a restart on a new level is part of the model: its misses there are the load's, kept

    def __init__(self, config: KalmanConfig = KalmanConfig()) -> None:
        self.config = config
        self._t: float | None = None
        self.level = 0.0
        self.slope = 0.0
        self._p = [[1.0, 0.0], [0.0, 1.0]]  # state covariance
        self._off = 0  # samples in a row beyond drift_sigmas, signed by side

    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        value = _clean(value)
        scale = max(abs(self.level), abs(value), self.config.floor)
        r = variance if variance is not None and variance > 0 else (self.config.observation_noise * scale) ** 2
        if self._t is None:
            self._start(t, value, r)
            return
        dt = max(t - self._t, 1e-9)
        self._t = t
        # Predict: x = F x, P = F P F' + Q (white-noise acceleration).
        level, slope = self.level + self.slope * dt, self.slope
        (p00, p01), (p10, p11) = self._p
        q = self.config.accel_noise * scale * scale
        p00, p01, p11 = (p00 + dt * (p01 + p10) + dt * dt * p11 + q * dt ** 3 / 3,
                         p01 + dt * p11 + q * dt * dt / 2, p11 + q * dt)
        # Update with the sample, unless it says the level changed: a load that starts (from nothing, after a
        # quiet night) or steps is not a trend the smoothed slope may take minutes to follow.
        s = p00 + r
        innovation = value - level
        if self._changed(innovation / math.sqrt(s)):
            self._start(t, value, r)
            return
        k0, k1 = p00 / s, p01 / s
        self.level, self.slope = level + k0 * innovation, slope + k1 * innovation
        self._p = [[(1 - k0) * p00, (1 - k0) * p01], [p01 - k1 * p00, p11 - k1 * p01]]

    def predict(self, t: float) -> float:
        if self._t is None:
            return 0.0
        return _clean(self.level + self.slope * max(0.0, t - self._t))

    def _start(self, t: float, value: float, r: float) -> None:
        self._t, self.level, self.slope, self._off = t, value, 0.0, 0
        self._p = [[r, 0.0], [0.0, r / 100.0]]

    def _changed(self, z: float) -> bool:
        """Whether a sample `z` standard deviations off the prediction ends the current level."""
        c = self.config
        side = 1 if z > c.drift_sigmas else -1 if z < -c.drift_sigmas else 0
        self._off = self._off + side if side and self._off * side >= 0 else side
        return abs(z) > c.jump_sigmas or abs(self._off) >= c.drift_samples


@dataclass(frozen=True, slots=True)
class SeasonalConfig:
    period_s: float  # the load's period (seconds)
    window_s: float = 0.0  # samples fitted over; 0: two periods
    max_harmonics: int = 4  # most harmonics of the period fitted (chosen by BIC); 1: a sine

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError("a seasonal predictor needs period_s > 0")
        if self.max_harmonics < 1:
            raise ValueError("a seasonal predictor needs max_harmonics >= 1")


BINS_PER_PERIOD = 240


class SeasonalPredictor:
    """Least squares of level + slope*t + harmonics of the period over a sliding window."""

    def __init__(self, config: SeasonalConfig) -> None:
        self.config = config
        self.window_s = config.window_s or 2 * config.period_s
        self._samples: deque[tuple[float, float, float]] = deque()  # (t, value, weight)
        # Samples within one bin of period / BINS_PER_PERIOD are fitted as one, their weighted mean: a day's
        # cycle sampled every 10 s fits 480 rows, not 17,280, and a tick's fit takes milliseconds.
        self._bin_s = config.period_s / BINS_PER_PERIOD
        self._bin_start = -math.inf
        self._coef: list[float] = [0.0, 0.0]  # level, slope, then (a_k, b_k) per harmonic; time from the newest sample
        self._t: float | None = None
        self._harmonics = 0  # in the last fit
        self._fitted = True  # the fit is of the samples held (it is made when a prediction asks for it)

    def observe(self, t: float, value: float, variance: float | None = None) -> None:
        weight, value = (1.0 / variance if variance is not None and variance > 0 else 1.0), _clean(value)
        if self._samples and t - self._bin_start < self._bin_s:
            t0, v0, w0 = self._samples.pop()
            w = w0 + weight
            self._samples.append(((t0 * w0 + t * weight) / w, (v0 * w0 + value * weight) / w, w))
        else:
            self._bin_start = t
            self._samples.append((t, value, weight))
        while self._samples and self._samples[0][0] < t - self.window_s:
            self._samples.popleft()
        self._t, self._fitted = t, False

    @property
    def warm(self) -> bool:
        """A whole period held: the harmonics are fitted, not guessed from part of one."""
        return len(self._samples) >= 2 and self._samples[-1][0] - self._samples[0][0] >= self.config.period_s

    @property
    def harmonics(self) -> int:
        """How many harmonics the fit of the samples held took."""
        self._fit()
        return self._harmonics

    def _features(self, dt: float, harmonics: int) -> list[float]:
        w = 2 * math.pi / self.config.period_s
        t = dt + (self._t or 0.0)  # the phase is absolute: the season does not move with the window
        return [1.0, dt] + [f(k * w * t) for k in range(1, harmonics + 1) for f in (math.sin, math.cos)]

    def _fit(self) -> None:
        if self._fitted or self._t is None:
            return
        self._fitted = True
        n = len(self._samples)
        if n < 3:
            self._coef, self._harmonics = [sum(v for _, v, _ in self._samples) / n, 0.0], 0
            return
        span, period = self._samples[-1][0] - self._samples[0][0], self.config.period_s
        if span < period / 4 or n < 6:
            most = 0  # the trend only
        elif span < period:
            most = 1  # more harmonics fitted to part of a period extrapolate wildly beyond it
        else:
            most = min(self.config.max_harmonics, (n - 5) // 2)  # BIC chooses among 1..most
        # The normal equations of the largest model; each smaller one is their leading block (features nest).
        rows = [(self._features(t - self._t, most), v, w) for t, v, w in self._samples]
        k = 2 + 2 * most
        a = [[sum(w * x[i] * x[j] for x, _, w in rows) for j in range(k)] for i in range(k)]
        b = [sum(w * x[i] * v for x, v, w in rows) for i in range(k)]
        vv = sum(w * v * v for _, v, w in rows)
        for i in range(k):
            a[i][i] *= 1 + 1e-12  # a hair of ridge: a degenerate window (equal samples) stays solvable
        best: tuple[float, list[float], int] | None = None
        for h in range(1, most + 1) if most > 1 else (most,):  # below a whole period: no choice
            m = 2 + 2 * h
            coef = _solve([row[:m] for row in a[:m]], b[:m])
            if coef is None:
                continue
            rss = max(vv - sum(c * bi for c, bi in zip(coef, b[:m])), 1e-12)  # at the solution c'Ac = c'b
            bic = n * math.log(rss / n) + m * math.log(n)
            if best is None or bic < best[0]:
                best = (bic, coef, h)
        if best is not None:
            self._coef, self._harmonics = best[1], best[2]

    def predict(self, t: float) -> float:
        if self._t is None:
            return 0.0
        x = self._features(max(0.0, t - self._t), self.harmonics)  # fits the samples, if new ones came
        fit = _clean(sum(c * f for c, f in zip(self._coef, x)))
        seen = self._one_period_before(t)
        return fit if seen is None else max(fit, seen)

    def _one_period_before(self, t: float) -> float | None:
        """Before a whole period is held: the mean of the samples one period before `t`, if any are held there.
        One harmonic fitted to part of a period flattens what it has seen once (a burst at the period's
        start); the period is known, so what was seen at that phase comes again."""
        if self.warm or len(self._samples) < 2:
            return None
        first, last = self._samples[0][0], self._samples[-1][0]
        back, spacing = t - self.config.period_s, (last - first) / (len(self._samples) - 1)
        near = [v for s, v, _ in self._samples if abs(s - back) <= spacing * (1 + 1e-9)]
        return sum(near) / len(near) if near else None


class ForecastErrors:
    """How far the load came above its forecast: the `quantile` of the errors (measured minus predicted
    rate) of the forecasts settled over the last `window_s` (the SLA policy forecasts one start-up ahead).
    A predictor that cannot know a burst (kalman, last value) misses it by the burst's height every time
    one comes; this is what lets the planner carry that much more ahead of the next one, and no more once
    its forecasts come true.
    A rate counted over an interval misses by its counting noise alone (Poisson: variance rate /
    interval), which the queueing model already sizes for: that share, at the same quantile, is taken
    off in quadrature. 0 until `min_errors` forecasts are settled; never negative, never NaN.
    Forecasts made by a cold model (`Predictor.warm`: a seasonal one before it holds a whole period, which
    may forecast 0 where the whole load comes) count only until `min_errors` warm ones are settled: a
    model's first guesses would otherwise widen the margin for a whole window after it knows the load."""

    def __init__(self, quantile: float, window_s: float, min_errors: int = 6) -> None:
        if not 0.0 < quantile < 1.0:
            raise ValueError("a forecast-error quantile is in (0, 1)")
        self.quantile, self.window_s, self.min_errors = quantile, window_s, min_errors
        self._z = NormalDist().inv_cdf(quantile)
        self._forecasts: deque[tuple[float, float, bool]] = deque()  # (for time, predicted, warm), in time order
        self._errors: deque[tuple[float, float, float, bool]] = deque()  # (settled at, error, counting variance,
        # warm)

    def forecast(self, for_t: float, predicted: float, warm: bool = True) -> None:
        """A forecast of the rate at `for_t`, settled by the first rate measured at or after it; `warm`: made
        by a model that had what it needs (`Predictor.warm`)."""
        self._forecasts.append((for_t, _clean(predicted), warm))

    def measured(self, now: float, rate: float, interval_s: float | None) -> None:
        """The rate measured over the interval that ends at `now`."""
        variance = max(rate, 0.1) / interval_s if interval_s else 0.0
        while self._forecasts and self._forecasts[0][0] <= now:
            _, predicted, warm = self._forecasts.popleft()
            error = _clean(rate) - predicted
            if math.isfinite(error):
                self._errors.append((now, error, variance, warm))
        while self._errors and self._errors[0][0] < now - self.window_s:
            self._errors.popleft()

    def margin(self) -> float:
        """The rate to carry above the forecast (requests/s)."""
        held = [e for e in self._errors if e[3]]
        if len(held) < self.min_errors:
            held = list(self._errors)
        if len(held) < self.min_errors:
            return 0.0
        errors = sorted(e for _, e, _, _ in held)
        high = errors[min(len(errors) - 1, int(self.quantile * len(errors)))]
        noise = self._z * math.sqrt(sum(v for _, _, v, _ in held) / len(held))
        return math.sqrt(high * high - noise * noise) if high > noise else 0.0


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
