"""Is a reward curve's trend larger than its spread? An ordinary least-squares line over the steps.

A reward log's mean reward per step is noisy: each step scores a new batch of questions. The line
``reward = intercept + slope * step`` fitted by least squares gives

* the **slope** with its two-sided ``1 - alpha`` interval, ``slope ± t(1 - alpha/2, n - 2) * se``,
  ``se = s / sqrt(sum((step - mean step)^2))``, Student's t with n - 2 degrees of freedom;
* the **rise** over the run, ``slope * (last step - first step)``, the fitted line's climb;
* the **residual spread** ``s = sqrt(sum(residual^2) / (n - 2))``, how far a step's reward strays
  from the line.

The line's interval assumes that a step's residual does not depend on the step before. A reward
curve's can: a policy changes a little a step, so a curve may wander like a random walk, and a
random walk fitted by a line looks like a trend (18 of 20 driftless walks of 100 steps passed the
line's test alone). So the curve must first show that it does not wander: the Dickey-Fuller test,
``Δreward = a + b * step + c * previous reward``, whose ``c`` is 0 for a random walk (with or
without drift) and negative for a line with noise around it; its t statistic must lie below the
``alpha`` critical value with constant and trend (MacKinnon's response surface:
``tau = c_inf + c_1 / n + c_2 / n^2``, ``dickey_fuller_critical``). A curve that may be a random
walk **wanders** (``Trend.wanders``) and shows no trend, whatever its line does. With fewer than
``MIN_WANDER_STEPS`` steps the test cannot tell, and the verdict rests on the line alone.

The verdict: the curve **rises beyond its spread** when it does not wander, the rise exceeds the
residual spread and the slope's interval lies above 0, **falls beyond its spread** for the mirror
case, and stays **inside its spread** otherwise: then the curve does not show the run improving,
whatever its last points do, and the run is judged by its held-out evaluation.

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
    unit_root_tau: float | None = None  # the Dickey-Fuller t statistic (None: too few steps to test)
    unit_root_critical: float | None = None  # its alpha critical value

    @property
    def wanders(self) -> bool:
        """A random walk cannot be ruled out: its Dickey-Fuller statistic is not below the critical value."""
        return self.unit_root_tau is not None and self.unit_root_tau >= (self.unit_root_critical or 0.0)

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
        if self.wanders:
            return INSIDE
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
    tau = dickey_fuller_tau(steps, rewards) if n >= MIN_WANDER_STEPS else None
    return Trend(n, min(steps), max(steps), intercept, slope, (slope - half, slope + half), sd, 1 - alpha,
                 tau, dickey_fuller_critical(n - 1, alpha) if tau is not None else None)


MIN_WANDER_STEPS = 8  # fewer: too few differences to fit a, b and c with any left to judge them
# MacKinnon (2010), Table 1, the test with constant and trend: (level, c_inf, c_1, c_2).
_DF_CRITICAL = ((0.01, -3.95877, -9.0531, -28.428), (0.05, -3.41049, -4.3904, -9.036), (0.10, -3.12705, -2.5856, -3.925))


def dickey_fuller_critical(n: int, alpha: float = 0.05) -> float:
    """The Dickey-Fuller critical value with constant and trend for ``n`` differences at level
    ``alpha`` (the nearest of 1%, 5% and 10%).

    >>> round(dickey_fuller_critical(99), 2), round(dickey_fuller_critical(99, 0.01), 2)
    (-3.46, -4.05)
    """
    _level, c_inf, c_1, c_2 = min(_DF_CRITICAL, key=lambda row: abs(row[0] - alpha))
    return c_inf + c_1 / n + c_2 / (n * n)


def dickey_fuller_tau(steps: Sequence[float], rewards: Sequence[float]) -> float:
    """t statistic of ``c`` in ``reward[i] - reward[i-1] = a + b * step[i] + c * reward[i-1]`` (module docstring);
    +inf when the fit leaves no residual spread (the curve is exactly its line or a constant)."""
    diffs = [y - p for p, y in zip(rewards, rewards[1:])]
    columns = ([1.0] * len(diffs), [float(x) for x in steps[1:]], [float(p) for p in rewards[:-1]])
    coef, se = _least_squares(columns, diffs)
    return coef[-1] / se[-1] if se[-1] > 0 else math.inf


def _least_squares(columns: Sequence[Sequence[float]], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Coefficients and standard errors of ``ys`` on ``columns`` (normal equations, Gauss-Jordan with
    pivoting); a column the others determine gets a zero coefficient and standard error."""
    k, n = len(columns), len(ys)
    gram = [[math.fsum(a * b for a, b in zip(columns[i], columns[j])) for j in range(k)] for i in range(k)]
    rhs = [math.fsum(a * y for a, y in zip(columns[i], ys)) for i in range(k)]
    rows = [gram[i] + [rhs[i]] + [1.0 if i == j else 0.0 for j in range(k)] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        if abs(rows[col][col]) < 1e-12 * max(1.0, abs(gram[col][col])):
            return [0.0] * k, [0.0] * k
        lead = rows[col][col]
        rows[col] = [v / lead for v in rows[col]]
        for r in range(k):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [v - factor * w for v, w in zip(rows[r], rows[col])]
    coef = [rows[i][k] for i in range(k)]
    residual = math.fsum((y - math.fsum(c * col[t] for c, col in zip(coef, columns))) ** 2 for t, y in enumerate(ys))
    variance = residual / max(n - k, 1)
    return coef, [math.sqrt(max(variance * rows[i][k + 1 + i], 0.0)) for i in range(k)]


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
