"""Load predictors on synthetic series with known answers."""

from __future__ import annotations

import math
import random

import pytest

from planner.predict import ForecastErrors, KalmanConfig, KalmanPredictor, LastValue, SeasonalConfig, SeasonalPredictor


def feed(p, f, until: float, every: float = 10.0, noise: float = 0.0, seed: int = 0) -> None:
    rng = random.Random(seed)
    t = 0.0
    while t <= until:
        p.observe(t, f(t) + rng.gauss(0, noise), noise * noise if noise else None)
        t += every


def test_kalman_settles_on_a_constant_and_ignores_noise():
    p = KalmanPredictor(KalmanConfig(accel_noise=1e-10))  # a slope that barely moves: smooth hard
    feed(p, lambda t: 5.0, 1200, noise=0.5)
    assert p.predict(1230) == pytest.approx(5.0, abs=0.15)
    assert abs(p.slope) < 0.005


def test_kalman_learns_a_ramp_and_extrapolates_it():
    p = KalmanPredictor()
    feed(p, lambda t: 1.0 + 0.01 * t, 600)
    assert p.slope == pytest.approx(0.01, rel=0.05)
    assert p.predict(630) == pytest.approx(1.0 + 0.01 * 630, rel=0.02)


def test_kalman_ahead_of_a_rising_sine_beats_the_last_value():
    f = lambda t: 3.0 * (1 + 0.6 * math.sin(2 * math.pi * t / 240))  # noqa: E731
    k, last = KalmanPredictor(KalmanConfig(accel_noise=1e-4)), LastValue()  # noise-free: follow the samples
    err_k = err_last = 0.0
    for i in range(0, 97):
        t = i * 10.0
        k.observe(t, f(t))
        last.observe(t, f(t))
        if t >= 240:
            err_k += abs(k.predict(t + 30) - f(t + 30))
            err_last += abs(last.predict(t + 30) - f(t + 30))
    assert err_k < 0.6 * err_last


def test_seasonal_recovers_trend_plus_sine_exactly():
    f = lambda t: 2.0 + 0.001 * t + 1.2 * math.sin(2 * math.pi * t / 240 + 0.7)  # noqa: E731
    p = SeasonalPredictor(SeasonalConfig(period_s=240))
    feed(p, f, 480)
    for ahead in (10, 30, 60):
        assert p.predict(480 + ahead) == pytest.approx(f(480 + ahead), abs=1e-6)


def test_seasonal_with_noise_predicts_the_peak_one_startup_ahead():
    f = lambda t: 3.0 * (1 + 0.6 * math.sin(2 * math.pi * t / 240))  # noqa: E731
    p = SeasonalPredictor(SeasonalConfig(period_s=240))
    feed(p, f, 270, noise=0.3)  # the next peak is at t = 300
    assert p.predict(300) == pytest.approx(4.8, abs=0.4)


def burst_train(t: float) -> float:  # x2.2 of 3 req/s for the first 60 s of every 240, x0.6 between
    return 6.6 if t % 240 < 60 else 1.8


@pytest.mark.parametrize("seed", range(5))
def test_seasonal_sees_a_burst_coming_one_startup_ahead(seed):
    rng = random.Random(seed)
    sine, harmonics = SeasonalPredictor(SeasonalConfig(240, max_harmonics=1)), SeasonalPredictor(SeasonalConfig(240))
    for i in range(46):  # to t = 450; the next burst is 480-540
        t = i * 10.0
        value = burst_train(t) * (1 + rng.gauss(0, 0.15))  # about Poisson's noise at 3 req/s counted over 10 s
        sine.observe(t, value)
        harmonics.observe(t, value)
    assert harmonics.harmonics > 1  # the edges are worth their parameters
    assert harmonics.predict(510) == pytest.approx(6.6, rel=0.2)  # mid-burst, 60 s ahead
    assert harmonics.predict(450) == pytest.approx(1.8, abs=0.5)  # the trough it is in
    assert sine.predict(510) < 0.8 * 6.6  # one harmonic flattens the burst
    assert sine.predict(450) > 1.8 + 0.9  # and fills the trough


def test_before_a_whole_period_a_burst_seen_once_is_predicted_again():
    p = SeasonalPredictor(SeasonalConfig(240))
    feed(p, burst_train, 210)  # one burst seen, at 0-60 s; the next is at 240-300 s
    assert p.harmonics == 1
    assert p.predict(260) == pytest.approx(6.6, rel=0.1)  # what was seen at 20 s
    assert p.predict(220) == pytest.approx(1.8, abs=0.6)  # and the trough before it stays a trough
    fit_only = SeasonalPredictor(SeasonalConfig(240, window_s=100))  # no phase a period back is held
    feed(fit_only, burst_train, 210)
    assert fit_only.predict(260) < 0.8 * 6.6


def test_seasonal_keeps_one_harmonic_for_a_noisy_sine():
    f = lambda t: 3.0 * (1 + 0.6 * math.sin(2 * math.pi * t / 240))  # noqa: E731
    for seed in range(5):
        p = SeasonalPredictor(SeasonalConfig(period_s=240))
        feed(p, f, 470, noise=0.3, seed=seed)
        assert p.harmonics == 1  # noise alone does not buy a harmonic


def test_a_daily_cycle_sampled_every_ten_seconds_is_fitted_on_bins():
    f = lambda t: 50.0 + 20.0 * math.sin(2 * math.pi * t / 86400 + 0.3)  # noqa: E731
    p = SeasonalPredictor(SeasonalConfig(period_s=86400))
    feed(p, f, 2 * 86400, noise=1.0)
    assert len(p._samples) <= 2 * 240 + 1  # not 17,280 rows per fit
    for ahead in (30, 3600):
        assert p.predict(2 * 86400 + ahead) == pytest.approx(f(2 * 86400 + ahead), abs=0.5)


def test_seasonal_fits_only_the_trend_before_a_quarter_period():
    p = SeasonalPredictor(SeasonalConfig(period_s=1000))
    feed(p, lambda t: 1.0 + 0.02 * t, 200)
    assert p.predict(230) == pytest.approx(1.0 + 0.02 * 230, rel=1e-6)


@pytest.mark.parametrize("make", [LastValue, KalmanPredictor, lambda: SeasonalPredictor(SeasonalConfig(120))])
def test_zero_load_predicts_zero_and_never_nan(make):
    p = make()
    assert p.predict(0) == 0.0
    feed(p, lambda t: 0.0, 600)
    for ahead in (0, 30, 1e6):
        v = p.predict(600 + ahead)
        assert v == 0.0 and not math.isnan(v)


@pytest.mark.parametrize("make", [KalmanPredictor, lambda: SeasonalPredictor(SeasonalConfig(120))])
def test_a_falling_signal_never_predicts_below_zero(make):
    p = make()
    feed(p, lambda t: max(0.0, 5 - 0.05 * t), 100)
    assert p.predict(1000) >= 0.0
    p.observe(110, float("nan"))  # a broken sample counts as 0, not as NaN
    assert math.isfinite(p.predict(140))


def test_kalman_restarts_when_a_load_starts_from_nothing():
    """A planner started before its traffic sees zeros (a quiet night does too). Smoothed against noise, the
    filter would take minutes to climb from 0 to 4 req/s: at 1 s ticks, 4 requests a second are 2 standard
    deviations of their own Poisson noise. Three such samples in a row on the same side restart it there."""
    p = KalmanPredictor()
    for t in range(60):
        p.observe(float(t), 0.0, 0.1)  # the SLA policy's variance for a zero count over 1 s
    for t in range(60, 63):
        p.observe(float(t), 3.94, 3.94)
    assert p.predict(65.0) == pytest.approx(3.94, rel=0.05)


def test_kalman_takes_a_step_at_once_and_smooths_noise_as_before():
    """2 req/s counted over 10 s (Poisson noise, its variance as the SLA policy reports it): the restarts
    (one in a thousand samples) leave the error of the prediction 30 s ahead within 3% of the filter's without
    them. Then a step to 8 req/s is taken at the next sample."""
    def run(config: KalmanConfig) -> tuple[KalmanPredictor, float]:
        rng, p, err = random.Random(3), KalmanPredictor(config), 0.0
        for i in range(1000):
            rate = rng.gauss(2.0, math.sqrt(2.0 / 10))
            p.observe(10.0 * i, rate, max(rate, 0.1) / 10)
            err += abs(p.predict(10.0 * i + 30) - 2.0)
        return p, err

    p, err = run(KalmanConfig())
    assert err < 1.03 * run(KalmanConfig(jump_sigmas=math.inf, drift_samples=1 << 30))[1]
    p.observe(10_000.0, 8.0, 0.8)  # x4: 15 standard deviations off
    assert p.predict(10_030.0) == pytest.approx(8.0, rel=0.05)


def settle(errors: ForecastErrors, measured, until: float, predicted: float = 3.0, every: float = 10.0,
           start: float = 0.0, warm: bool = True) -> None:
    """Forecasts of `predicted` one start-up (30 s) ahead, each settled by the rate measured then."""
    t = start
    while t <= until:
        errors.measured(t, measured(t), every)
        errors.forecast(t + 30.0, predicted, warm)
        t += every


def test_forecast_margin_is_how_far_the_bursts_came_above_the_forecast():
    """A forecast of 3 req/s, and a burst to 6.6 for 60 s in every 240: a quarter of the forecasts miss by
    3.6. At the 0.95 quantile that is the margin, less the counting noise of a 10 s count at that quantile
    (1.645 x the root of the mean variance, (0.75 x 3 + 0.25 x 6.6) / 10 = 0.39): 3.45."""
    errors = ForecastErrors(0.95, window_s=600)
    settle(errors, lambda t: 6.6 if t % 240 < 60 else 3.0, 1200)
    assert errors.margin() == pytest.approx(math.sqrt(3.6 ** 2 - 1.645 ** 2 * 0.39), rel=0.01)
    assert ForecastErrors(0.5, window_s=600).margin() == 0.0  # nothing settled yet


def test_forecast_margin_of_a_forecast_that_comes_true_is_only_counting_noise_taken_off():
    """The right forecast, measured with a count's Poisson noise: the 0.95 quantile of the errors alone would be
    1.645 x sqrt(5 / 10) = 1.16 req/s. Taken off, what is left is the sample quantile's own error (60 errors):
    0.27 req/s on average over 20 series, half of them none."""
    margins = []
    for seed in range(20):
        rng = random.Random(seed)
        errors = ForecastErrors(0.95, window_s=600)
        settle(errors, lambda t: rng.gauss(5.0, math.sqrt(5.0 / 10)), 1200, predicted=5.0)
        margins.append(errors.margin())
    assert sum(margins) / len(margins) < 0.4 and max(margins) < 1.16, margins


def test_forecast_margin_forgets_bursts_after_its_window():
    errors = ForecastErrors(0.95, window_s=300)
    settle(errors, lambda t: 9.0, 300)  # every forecast of 3 missed by 6
    assert errors.margin() > 5.0
    settle(errors, lambda t: 3.0, 620, start=310)  # then they come true
    assert errors.margin() == 0.0
    with pytest.raises(ValueError):
        ForecastErrors(1.0, window_s=60)


def test_forecast_margin_drops_a_cold_models_misses_once_enough_warm_ones_are_settled():
    errors = ForecastErrors(0.95, window_s=600)
    settle(errors, lambda t: 9.0, 300, warm=False)  # a cold model's forecasts of 3 missed by 6
    assert errors.margin() > 5.0
    settle(errors, lambda t: 3.0, 350, start=310)  # warm forecasts, come true: two settled by 350 s
    assert errors.margin() > 5.0  # fewer than min_errors: the cold ones still count
    settle(errors, lambda t: 3.0, 420, start=360)  # nine settled; the cold misses are still in the window
    assert errors.margin() == 0.0


def test_seasonal_is_warm_once_it_holds_a_whole_period():
    p = SeasonalPredictor(SeasonalConfig(period_s=240))
    for t in range(0, 240, 10):
        p.observe(float(t), 5.0)
        assert not p.warm, t
    p.observe(240.0, 5.0)
    assert p.warm
    assert KalmanPredictor().warm and LastValue().warm  # their restarts and lags are the load's: kept
