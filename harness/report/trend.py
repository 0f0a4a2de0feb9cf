"""Is a reward curve's trend larger than its spread? An ordinary least-squares line over the steps.

A reward log's mean reward per step is noisy: each step scores a new batch of questions. The line
``reward = intercept + slope * step`` fitted by least squares gives

* the **slope** with its two-sided ``1 - alpha`` interval, ``slope ± t(1 - alpha/2, n - 2) * se``,
  ``se = s / sqrt(sum((step - mean step)^2))``, Student's t with n - 2 degrees of freedom;
* the **rise** over the run, ``slope * (last step - first step)``, the fitted line's climb;
* the **residual spread** ``s = sqrt(sum(residual^2) / (n - 2))``, how far a step's reward strays
  from the line.

The verdict: the curve **rises beyond its spread** when the rise exceeds the residual spread and the
slope's interval lies above 0, **falls beyond its spread** for the mirror case, and stays **inside
its spread** otherwise: then the curve does not show the run improving, whatever its last points do,
and the run is judged by its held-out evaluation.

>>> trend = fit_trend([1, 2, 3, 4, 5], [0.30, 0.42, 0.38, 0.52, 0.58])
>>> round(trend.slope, 3), [round(x, 3) for x in trend.slope_interval], round(trend.residual_sd, 3)
(0.066, [0.021, 0.111], 0.045)
>>> round(trend.rise, 3), trend.verdict
(0.264, 'rises beyond its spread')
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Literal

Verdict = Literal["rises beyond its spread", "falls beyond its spread", "inside its spread"]
RISES: Verdict = "rises beyond its spread"
FALLS: Verdict = "falls beyond its spread"
INSIDE: Verdict = "inside its spread"


class TrendError(ValueError):
    """Too few points, or every point at one step: no line, or no spread, to judge."""


@dataclasses.dataclass(frozen=True)
class Trend:
    n: int
    first_step: float
    last_step: float
    intercept: float
    slope: float
    slope_interval: tuple[float, float]
    residual_sd: float
    confidence: float  # 1 - alpha

    @property
    def rise(self) -> float:
        """The fitted line's climb from the first step to the last."""
        return self.slope * (self.last_step - self.first_step)

    @property
    def rise_interval(self) -> tuple[float, float]:
        span = self.last_step - self.first_step
        return self.slope_interval[0] * span, self.slope_interval[1] * span

    def fitted(self, step: float) -> float:
        return self.intercept + self.slope * step

    @property
    def verdict(self) -> Verdict:
        low, high = self.slope_interval
        if low > 0 and self.rise > self.residual_sd:
            return RISES
        if high < 0 and -self.rise > self.residual_sd:
            return FALLS
        return INSIDE


def fit_trend(steps: Sequence[float], rewards: Sequence[float], *, alpha: float = 0.05) -> Trend:
    """The least-squares line through (step, reward) with its slope interval (module docstring)."""
    n = len(steps)
    if n != len(rewards):
        raise TrendError(f"{n} steps but {len(rewards)} rewards")
    if n < 3:
        raise TrendError(f"{n} logged step(s): a line and its spread need at least 3")
    mean_x, mean_y = math.fsum(steps) / n, math.fsum(rewards) / n
    sxx = math.fsum((x - mean_x) ** 2 for x in steps)
    if sxx == 0:
        raise TrendError(f"every value is logged at step {steps[0]:g}: a trend needs several steps")
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(steps, rewards)) / sxx
    intercept = mean_y - slope * mean_x
    ssr = math.fsum((y - intercept - slope * x) ** 2 for x, y in zip(steps, rewards))
    sd = math.sqrt(ssr / (n - 2))
    half = t_quantile(1 - alpha / 2, n - 2) * sd / math.sqrt(sxx)
    return Trend(n, min(steps), max(steps), intercept, slope, (slope - half, slope + half), sd, 1 - alpha)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF).

    >>> round(t_quantile(0.975, 1), 4), round(t_quantile(0.975, 10), 4), round(t_quantile(0.975, 1000), 4)
    (12.7062, 2.2281, 1.9623)
    """
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    while True:  # halve the bracket until floating point cannot split it further
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t: ``1 - I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)``, for t >= 0."""
    tail = incomplete_beta(df / (df + t * t), df / 2, 0.5) / 2
    return 1 - tail if t >= 0 else tail


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction.

    >>> round(incomplete_beta(0.5, 2, 2), 12), round(incomplete_beta(0.3, 1, 1), 12)
    (0.5, 0.3)
    """
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1 - incomplete_beta(1 - x, b, a)
    log_front = a * math.log(x) + b * math.log1p(-x) - math.log(a) - _log_beta(a, b)
    return math.exp(log_front) * _beta_fraction(x, a, b)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _beta_fraction(x: float, a: float, b: float) -> float:
    """1 / (1 + d1 / (1 + d2 / (1 + ...))) evaluated by the modified Lentz method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    value = d
    for m in range(1, 10_000):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for term in (even, odd):
            d = 1 + term * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + term / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return value
