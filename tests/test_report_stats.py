"""The report's statistics: the reference's p-values, and exact figures worked out by hand."""

from __future__ import annotations

import math

import pytest

from harness.report import stats as rs


# The reference table (300 eval rows, SFT as baseline): gained, lost -> published p.
@pytest.mark.parametrize("gained, lost, published", [
    pytest.param(7, 3, "0.34", id="GRPO 4 steps: 7 gained, 3 lost, p 0.34 (inside noise)"),
    pytest.param(17, 6, "0.037", id="GRPO 12 steps: 17 gained, 6 lost, p 0.037"),
    pytest.param(26, 8, "0.0036", id="GRPO 24 steps: 26 gained, 8 lost, p 0.0036"),
])
def test_reference_p_values_are_mcnemar_chi_squared_with_continuity_correction(gained, lost, published):
    assert rs.format_p(rs.mcnemar_chi2(gained, lost).p_value) == published


@pytest.mark.parametrize("gained, lost, statistic", [
    pytest.param(7, 3, 0.9, id="(|7-3|-1)^2/10 = 9/10"),
    pytest.param(17, 6, 100 / 23, id="(|17-6|-1)^2/23 = 100/23"),
    pytest.param(26, 8, 8.5, id="(|26-8|-1)^2/34 = 289/34"),
    pytest.param(5, 5, 0.0, id="equal counts give zero, not a negative correction"),
    pytest.param(3, 2, 0.0, id="a difference of one is absorbed by the correction"),
])
def test_chi_squared_statistic_by_hand(gained, lost, statistic):
    assert rs.mcnemar_chi2(gained, lost).statistic == pytest.approx(statistic, rel=1e-12)


def test_chi_squared_p_is_the_one_degree_of_freedom_tail():
    # chi2 = 3.841458820694124 is the 95th percentile of chi-squared(1): the tail beyond it is 0.05.
    # (|b-c|-1)^2/(b+c) cannot hit it exactly, so check the tail function through a known statistic:
    # (|9-1|-1)^2/10 = 4.9 -> p = erfc(sqrt(2.45)) = 0.026857...
    assert rs.mcnemar_chi2(9, 1).p_value == pytest.approx(0.0268566, abs=1e-6)


def test_no_changed_rows_gives_p_one():
    assert rs.mcnemar_chi2(0, 0) == rs.ChiSquared(0.0, 1.0)
    assert rs.mcnemar_exact(0, 0) == 1.0


@pytest.mark.parametrize("gained, lost, p", [
    pytest.param(3, 0, 2 * 1 / 8, id="3 vs 0: 2 x 1/8"),
    pytest.param(5, 1, 2 * (1 + 6) / 64, id="5 vs 1: 2 x (C(6,0)+C(6,1))/64"),
    pytest.param(1, 5, 2 * (1 + 6) / 64, id="symmetric in gained and lost"),
    pytest.param(7, 3, 2 * (1 + 10 + 45 + 120) / 1024, id="7 vs 3: 2 x 176/1024"),
    pytest.param(2, 2, 1.0, id="2 vs 2: doubled tail above one is capped at one"),
    pytest.param(6, 0, 2 / 64, id="6 vs 0: 1/32"),
    # larger cases: the figures scipy.stats.binomtest(gained, gained + lost).pvalue gives
    pytest.param(17, 6, 0.03468966484069824, id="17 vs 6 (reference row): 0.0347"),
    pytest.param(26, 8, 0.0029350556433200836, id="26 vs 8 (reference row): 0.00294"),
])
def test_exact_mcnemar_by_hand(gained, lost, p):
    assert rs.mcnemar_exact(gained, lost) == pytest.approx(p, rel=1e-12)


def test_exact_and_chi_squared_differ_on_the_reference_rows():
    # the exact test is labelled separately because it is not the published figure
    assert rs.mcnemar_exact(17, 6) != pytest.approx(rs.mcnemar_chi2(17, 6).p_value, abs=1e-3)


@pytest.mark.parametrize("correct, n, low, high", [
    pytest.param(5, 10, 0.236593, 0.763407, id="5 of 10: the textbook Wilson interval"),
    pytest.param(0, 10, 0.0, 3.841459 / (10 + 3.841459), id="0 of 10: upper bound z^2/(n+z^2)"),
    pytest.param(10, 10, 10 / (10 + 3.841459), 1.0, id="10 of 10: lower bound n/(n+z^2)"),
    pytest.param(0, 0, 0.0, 1.0, id="no rows: the whole range"),
])
def test_wilson_interval_by_hand(correct, n, low, high):
    got = rs.wilson_interval(correct, n)
    assert got == (pytest.approx(low, abs=1e-6), pytest.approx(high, abs=1e-6))


def test_wilson_interval_contains_the_estimate_and_stays_in_range():
    for n in (1, 7, 300):
        for correct in range(n + 1):
            low, high = rs.wilson_interval(correct, n)
            assert 0.0 <= low <= correct / n <= high <= 1.0


def test_accuracy_of_the_reference_sft_stage():
    acc = rs.accuracy(118, 300)
    assert round(acc.value, 3) == 0.393
    assert (round(acc.low, 3), round(acc.high, 3)) == (0.340, 0.450)


def test_paired_counts_on_a_hand_made_table():
    baseline = [True, True, False, False, False, True]
    candidate = [True, False, True, True, False, True]
    result = rs.paired(baseline, candidate, alpha=0.05)
    assert (result.gained, result.lost, result.both_right, result.both_wrong, result.n) == (2, 1, 2, 1, 6)
    assert result.delta == pytest.approx(1 / 6)
    assert result.p_exact == 1.0  # 2 vs 1 of 3: 2 x (1 + 3)/8 capped
    assert result.verdict == rs.INSIDE_NOISE


@pytest.mark.parametrize("test, gained, lost, word", [
    pytest.param("chi2", 17, 6, rs.SIGNIFICANT, id="chi2 p 0.037 < 0.05"),
    pytest.param("chi2", 7, 3, rs.INSIDE_NOISE, id="chi2 p 0.34 >= 0.05"),
    pytest.param("exact", 6, 0, rs.SIGNIFICANT, id="exact p 1/32 < 0.05"),
    pytest.param("exact", 5, 0, rs.INSIDE_NOISE, id="exact p 1/16 >= 0.05"),
])
def test_verdict_reads_the_chosen_test(test, gained, lost, word):
    result = rs.paired([False] * gained + [True] * lost, [True] * gained + [False] * lost, test=test)
    assert result.verdict == word
    assert result.p_value == (result.chi2.p_value if test == "chi2" else result.p_exact)


def test_verdict_at_a_stated_alpha_is_strict():
    assert rs.verdict(0.037, alpha=0.01) == rs.INSIDE_NOISE
    assert rs.verdict(0.0036, alpha=0.01) == rs.SIGNIFICANT
    assert rs.verdict(0.05, alpha=0.05) == rs.INSIDE_NOISE


@pytest.mark.parametrize("call", [
    pytest.param(lambda: rs.paired([True], [True, False]), id="sequences of different lengths"),
    pytest.param(lambda: rs.paired([True], [False], test="fisher"), id="unknown test"),
    pytest.param(lambda: rs.verdict(0.1, alpha=0.0), id="alpha of zero"),
    pytest.param(lambda: rs.verdict(0.1, alpha=1.5), id="alpha above one"),
    pytest.param(lambda: rs.wilson_interval(4, 3), id="more correct than rows"),
    pytest.param(lambda: rs.mcnemar_exact(-1, 2), id="negative count"),
])
def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_format_p():
    assert [rs.format_p(p) for p in (0.3427, 0.04, 0.00355, 1.0, 5e-5)] == ["0.34", "0.04", "0.0036", "1", "< 0.0001"]
    assert not math.isnan(rs.mcnemar_chi2(1000, 0).p_value)
