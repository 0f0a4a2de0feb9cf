"""The reward curve's trend: Student's t quantiles, the least-squares slope and its interval checked
against brute-force computations, the interval's coverage, and the verdict against the spread."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from harness.report.trend import FALLS, INSIDE, RISES, TrendError, dickey_fuller_critical, fit_trend, t_cdf, t_quantile

# Student's t quantiles as printed in statistical tables (two-sided 95% and 99%)
TABLE = [(1, 0.975, 12.7062), (2, 0.975, 4.3027), (3, 0.975, 3.1824), (5, 0.975, 2.5706), (10, 0.975, 2.2281),
         (30, 0.975, 2.0423), (120, 0.975, 1.9799), (1, 0.995, 63.6567), (4, 0.995, 4.6041), (20, 0.995, 2.8453)]


@pytest.mark.parametrize(("df", "p", "value"), TABLE, ids=[f"df {d}, p {p}" for d, p, _ in TABLE])
def test_t_quantiles_match_the_printed_tables(df, p, value):
    assert t_quantile(p, df) == pytest.approx(value, abs=5e-5)
    assert t_quantile(1 - p, df) == pytest.approx(-value, abs=5e-5)


def _t_density(x: float, df: int) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _brute_cdf(t: float, df: int, pieces: int = 20_000) -> float:
    """0.5 + the density's integral from 0 to t by Simpson's rule."""
    h = t / pieces
    total = _t_density(0, df) + _t_density(t, df)
    total += sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, pieces))
    return 0.5 + total * h / 3


@pytest.mark.parametrize("df", [1, 2, 3, 7, 15, 58])
def test_the_t_cdf_agrees_with_integrating_the_density(df):
    for t in (0.3, 1.0, 2.0, 4.5):
        assert t_cdf(t, df) == pytest.approx(_brute_cdf(t, df), abs=1e-9)


def _brute_fit(steps: list[float], rewards: list[float], quantile: float) -> tuple[float, float, float, float]:
    """Slope, intercept, residual SD and the interval's half-width by exact rational arithmetic: the
    normal equations solved by Cramer's rule, the slope's variance from (X'X)^-1."""
    xs, ys = [Fraction(x) for x in steps], [Fraction(y) for y in rewards]
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    det = n * sxx - sx * sx
    slope, intercept = (n * sxy - sx * sy) / det, (sxx * sy - sx * sxy) / det
    ssr = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    variance = ssr / (n - 2)
    slope_variance = variance * n / det  # the (2, 2) entry of (X'X)^-1 is n / det
    return float(slope), float(intercept), math.sqrt(variance), quantile * math.sqrt(slope_variance)


@pytest.mark.parametrize("seed", range(8))
def test_the_fit_agrees_with_a_brute_force_computation(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 90)
    steps = sorted(rng.sample(range(1, 400), n))
    rewards = [round(0.3 + rng.uniform(-0.002, 0.002) * s + rng.gauss(0, 0.08), 4) for s in steps]
    trend = fit_trend(steps, rewards)
    slope, intercept, sd, half = _brute_fit(steps, rewards, t_quantile(0.975, n - 2))
    assert trend.slope == pytest.approx(slope, rel=1e-9, abs=1e-12)
    assert trend.intercept == pytest.approx(intercept, rel=1e-9, abs=1e-12)
    assert trend.residual_sd == pytest.approx(sd, rel=1e-9)
    assert trend.slope_interval == pytest.approx((slope - half, slope + half), rel=1e-9, abs=1e-12)
    assert trend.rise == pytest.approx(slope * (steps[-1] - steps[0]), rel=1e-9, abs=1e-12)


def test_the_interval_covers_the_true_slope_at_its_confidence_on_few_steps():
    # five steps leave 3 degrees of freedom: a normal quantile's interval would cover about 86%
    rng, true_slope, runs = random.Random(2026), 0.01, 4000
    covered = 0
    for _ in range(runs):
        rewards = [0.4 + true_slope * s + rng.gauss(0, 0.05) for s in range(5)]
        low, high = fit_trend(list(range(5)), rewards).slope_interval
        covered += low <= true_slope <= high
    # binomial standard deviation at 0.95 over 4000 runs: 0.0034; the band is about 4 of them
    assert 0.936 <= covered / runs <= 0.964


def _line(slope: float, noise: float, n: int = 40, seed: int = 1) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    steps = [float(s) for s in range(1, n + 1)]
    return steps, [0.4 + slope * s + rng.gauss(0, noise) for s in steps]


VERDICTS = [
    ("a clear climb rises beyond its spread", _line(0.005, 0.03), RISES),
    ("a clear fall falls beyond its spread", _line(-0.005, 0.03), FALLS),
    ("noise around a flat line stays inside", _line(0.0, 0.05), INSIDE),
    ("a slope sure to be above 0 but climbing less than the spread stays inside", _line(0.000005, 0.05, n=4000), INSIDE),
    ("a climb past the spread with an interval across 0 stays inside", ([1.0, 2.0, 3.0], [0.1, 0.5, 0.2]), INSIDE),
]


@pytest.mark.parametrize(("points", "verdict"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_the_verdict_weighs_the_rise_against_the_spread(points, verdict):
    assert fit_trend(*points).verdict == verdict


def test_the_significant_but_small_case_really_is_significant():
    trend = fit_trend(*_line(0.000005, 0.05, n=4000))
    assert trend.slope_interval[0] > 0 and 0 < trend.rise < trend.residual_sd


@pytest.mark.parametrize(("steps", "rewards", "message"), [
    ([1, 2], [0.1, 0.2], "2 logged step"),
    ([5, 5, 5], [0.1, 0.2, 0.3], "every value is logged at step 5"),
    ([1, 2, 3], [0.1, 0.2], "3 steps but 2 rewards"),
], ids=["two points", "one step", "unequal lengths"])
def test_too_little_to_fit_is_refused(steps, rewards, message):
    with pytest.raises(TrendError, match=message):
        fit_trend(steps, rewards)


def test_alpha_sets_the_interval():
    steps, rewards = _line(0.001, 0.05)
    wide, narrow = fit_trend(steps, rewards, alpha=0.01), fit_trend(steps, rewards, alpha=0.2)
    assert wide.confidence == 0.99 and narrow.confidence == pytest.approx(0.8)
    assert wide.slope_interval[0] < narrow.slope_interval[0] < narrow.slope_interval[1] < wide.slope_interval[1]


def _walk(rng: random.Random, n: int = 100) -> tuple[list[float], list[float]]:
    level, out = 0.5, []
    for _ in range(n):
        level += rng.gauss(0, 0.02)
        out.append(level)
    return [float(s) for s in range(1, n + 1)], out


def test_driftless_random_walks_are_not_called_a_trend():
    """A random walk fitted by a line looks like a trend: 18 of these 20 walks pass the line's test
    alone; the curve must first show it does not wander (the Dickey-Fuller test)."""
    rng = random.Random(2026)
    walks = [_walk(rng) for _ in range(20)]
    line_alone = sum(1 for w in walks if _line_verdict(fit_trend(*w)) != INSIDE)
    called = [fit_trend(*w).verdict for w in walks]
    assert line_alone >= 15 and sum(v != INSIDE for v in called) < 2, (line_alone, called)
    assert sum(fit_trend(*w).wanders for w in walks) >= 18


def test_over_two_hundred_walks_about_one_in_thirty_is_called_a_trend():
    rng = random.Random(7)
    called = sum(fit_trend(*_walk(rng)).verdict != INSIDE for _ in range(200))
    assert called <= 10, called  # the unit-root test's 5% times the chance its line is significant


@pytest.mark.parametrize("noise, least", [(0.0, 19), (0.5, 18), (0.8, 12)],
                         ids=["independent noise", "AR(1) 0.5", "AR(1) 0.8 (some power lost)"])
def test_a_line_with_noise_around_it_still_rises(noise, least):
    rng = random.Random(11)
    hits = 0
    for _ in range(20):
        e, ys = 0.0, []
        for s in range(1, 101):
            e = noise * e + rng.gauss(0, 0.03)
            ys.append(0.2 + 0.004 * s + e)
        trend = fit_trend([float(s) for s in range(1, 101)], ys)
        hits += trend.verdict == RISES and not trend.wanders
    assert hits >= least, hits


def test_the_critical_values_are_mackinnon_s():
    # MacKinnon (2010) Table 1 with constant and trend; Fuller's table for n = 100: -4.04, -3.45, -3.15.
    found = [dickey_fuller_critical(100, a) for a in (0.01, 0.05, 0.10)]
    assert all(abs(f - t) < 0.015 for f, t in zip(found, (-4.04, -3.45, -3.15))), found


def test_a_short_curve_is_judged_by_its_line_alone():
    trend = fit_trend([1.0, 2.0, 3.0, 4.0, 5.0], [0.30, 0.42, 0.38, 0.52, 0.58])
    assert trend.unit_root_tau is None and not trend.wanders and trend.verdict == RISES


def _line_verdict(trend) -> str:
    low, high = trend.slope_interval
    if low > 0 and trend.rise > trend.residual_sd:
        return RISES
    if high < 0 and -trend.rise > trend.residual_sd:
        return FALLS
    return INSIDE
