"""The statistics of the report: accuracy with a 95% interval and the paired test of two stages.

* **Execution accuracy** is the share of scored rows whose score is 1. Its 95% interval is
  Wilson's score interval, which stays inside [0, 1] and keeps its coverage near 0 and 1 and for
  small n, where the textbook normal interval does not.
* **Paired comparison** against a baseline on the rows both scored: *gained* rows are right in the
  candidate and wrong in the baseline, *lost* rows the reverse; rows both got right or both got
  wrong say nothing about the difference.
* **McNemar's chi-squared test with continuity correction**, the test behind the reference's
  published p-values: ``chi2 = (max(|gained - lost| - 1, 0))^2 / (gained + lost)``, one degree of
  freedom, ``p = erfc(sqrt(chi2 / 2))``. With no changed rows p is 1.
* **The exact (binomial) McNemar test**: under "no difference" each changed row is a fair coin, so
  ``p = min(1, 2 * P(X <= min(gained, lost)))`` with ``X ~ Binomial(gained + lost, 1/2)``. Prefer it
  when few rows changed (under about 25), where the chi-squared approximation is rough.
* **Verdict**: "significant" when the chosen test's p is below alpha, else "inside noise".

>>> round(mcnemar_chi2(17, 6).p_value, 3)
0.037
>>> mcnemar_exact(7, 3)
0.34375
>>> verdict(0.0036, alpha=0.05)
'significant'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction

Z_95 = 1.959963984540054  # two-sided 95% normal quantile
SIGNIFICANT = "significant"
INSIDE_NOISE = "inside noise"
TESTS = ("chi2", "exact")


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """Correct rows out of n scored rows, with the 95% Wilson interval."""

    correct: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.correct / self.n if self.n else float("nan")


@dataclasses.dataclass(frozen=True)
class ChiSquared:
    statistic: float
    p_value: float


@dataclasses.dataclass(frozen=True)
class Paired:
    """A candidate against the baseline, on the rows both scored."""

    n: int
    gained: int
    lost: int
    both_right: int
    both_wrong: int
    chi2: ChiSquared
    p_exact: float
    alpha: float
    test: str  # which p the verdict reads: "chi2" or "exact"

    @property
    def p_value(self) -> float:
        """The p-value the verdict is based on."""
        return self.chi2.p_value if self.test == "chi2" else self.p_exact

    @property
    def verdict(self) -> str:
        return verdict(self.p_value, self.alpha)

    @property
    def delta(self) -> float:
        """Candidate's accuracy minus the baseline's on these rows."""
        return (self.gained - self.lost) / self.n if self.n else 0.0


def wilson_interval(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for ``correct`` successes out of ``n``.

    >>> [round(x, 4) for x in wilson_interval(5, 10)]
    [0.2366, 0.7634]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    _check_counts(correct, n)
    if n == 0:
        return 0.0, 1.0
    p, z2 = correct / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at 0 or n correct the bound is exactly 0 or 1; floating point would leave it a hair off
    low = 0.0 if correct == 0 else max(0.0, centre - half)
    high = 1.0 if correct == n else min(1.0, centre + half)
    return low, high


def accuracy(correct: int, n: int) -> Accuracy:
    """Accuracy with its 95% interval.

    >>> accuracy(118, 300).value
    0.3933333333333333
    """
    low, high = wilson_interval(correct, n)
    return Accuracy(correct, n, low, high)


def mcnemar_chi2(gained: int, lost: int) -> ChiSquared:
    """McNemar's chi-squared statistic with continuity correction and its p-value (1 df).

    >>> [round(mcnemar_chi2(g, l).p_value, 4) for g, l in [(7, 3), (26, 8)]]
    [0.3428, 0.0036]
    """
    _check_counts(gained, lost + gained)
    changed = gained + lost
    if changed == 0:
        return ChiSquared(0.0, 1.0)
    statistic = max(abs(gained - lost) - 1, 0) ** 2 / changed
    # survival function of chi-squared with one degree of freedom
    return ChiSquared(statistic, math.erfc(math.sqrt(statistic / 2)))


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value (binomial test of gained vs lost at 1/2), computed exactly.

    >>> mcnemar_exact(3, 0), mcnemar_exact(0, 0), mcnemar_exact(1, 1)
    (0.25, 1.0, 1.0)
    """
    _check_counts(gained, lost + gained)
    n = gained + lost
    tail = sum(Fraction(math.comb(n, k), 2 ** n) for k in range(min(gained, lost) + 1))
    return float(min(Fraction(1), 2 * tail))


def verdict(p_value: float, alpha: float = 0.05) -> str:
    """"significant" when ``p_value < alpha``, else "inside noise"."""
    check_alpha(alpha)
    return SIGNIFICANT if p_value < alpha else INSIDE_NOISE


def check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")


def paired(baseline: Sequence[bool], candidate: Sequence[bool], *, alpha: float = 0.05,
           test: str = "chi2") -> Paired:
    """Compare two equally long sequences of per-row correctness (same rows, same order).

    >>> result = paired([True, False, False, True], [True, True, True, False])
    >>> result.gained, result.lost, result.both_right, result.both_wrong
    (2, 1, 1, 0)
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"paired comparison needs the same rows: {len(baseline)} vs {len(candidate)}")
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}: use one of {', '.join(TESTS)}")
    check_alpha(alpha)
    pairs = list(zip(baseline, candidate))
    gained = sum(1 for b, c in pairs if c and not b)
    lost = sum(1 for b, c in pairs if b and not c)
    both_right = sum(1 for b, c in pairs if b and c)
    return Paired(n=len(pairs), gained=gained, lost=lost, both_right=both_right,
                  both_wrong=len(pairs) - gained - lost - both_right, chi2=mcnemar_chi2(gained, lost),
                  p_exact=mcnemar_exact(gained, lost), alpha=alpha, test=test)


def format_p(p_value: float) -> str:
    """Two significant digits, as the reference prints p; tiny values as a bound.

    >>> format_p(0.3428), format_p(0.03709), format_p(0.003551), format_p(1.0), format_p(2e-9)
    ('0.34', '0.037', '0.0036', '1', '< 0.0001')
    """
    if p_value < 1e-4:
        return "< 0.0001"
    return f"{p_value:.2g}"


def _check_counts(part: int, whole: int) -> None:
    if part < 0 or whole < part:
        raise ValueError(f"counts must satisfy 0 <= {part} <= {whole}")
