"""Batches of completions: one fault costs only its completion, duplicates are scored once, TRL's
telemetry hooks get the outcomes, verl's batch form and outcome fields, and completions given as
message parts or nested beyond reason."""

from __future__ import annotations

import sys
import warnings

import pytest

from bundle import reward, verify
from bundle.contract.errors import UNSCORED_WARNING, CallArgumentsError, StaleBundleError
from bundle.scoring import batch as scoring_batch
from harness.common.completions import message_text as harness_message_text

GOLD = "SELECT count(*) FROM Owner"
STALE = "SELECT count(*) FROM Owner WHERE age > 3"  # in no database of the sample bundle
PARTS = [{"type": "text", "text": "```sql\n"}, {"type": "image"}, {"type": "text", "text": GOLD + "\n```"}]


def deep(levels: int) -> list:
    value: object = GOLD
    for _ in range(levels):
        value = [value]
    return value  # type: ignore[return-value]


def cyclic() -> list:
    loop: list = [{"role": "user", "content": "How many owners?"}]
    loop.append(loop)
    return loop


class Recorder:
    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}
        self.extra: dict[str, list] = {}

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)

    def log_extra(self, column: str, values: list) -> None:
        self.extra.setdefault(column, []).extend(values)


def test_an_unscorable_completion_gets_none_and_a_warning_and_the_others_are_scored(bundle_env):
    with pytest.warns(RuntimeWarning, match=UNSCORED_WARNING + r" \(infrastructure_error, stale_bundle\)"):
        scores = reward.trl_reward([GOLD, GOLD, "SELECT 1"], ground_truth=[GOLD, STALE, GOLD])
    assert scores == [1.0, None, 0.0]


@pytest.mark.parametrize("completion", [deep(100_000), cyclic()], ids=["100,000 lists deep", "a list holding itself"])
def test_a_completion_nested_beyond_reason_is_a_typed_error_never_a_recursion_error(bundle_env, completion):
    with pytest.raises(CallArgumentsError, match="nested more than 8 lists or messages deep"):
        reward.compute_score(solution_str=completion, ground_truth=GOLD)
    with pytest.warns(RuntimeWarning, match=UNSCORED_WARNING + ".*call_arguments"):
        assert reward.trl_reward([completion, GOLD], ground_truth=[GOLD, GOLD]) == [None, 1.0]
    assert sys.getrecursionlimit() < 100_000  # the deep case would have overflowed a recursive reader


@pytest.mark.parametrize("completion", [
    PARTS,
    [{"role": "assistant", "content": PARTS}],
    {"role": "assistant", "content": PARTS},
], ids=["a list of parts", "a chat whose message content is parts", "a message whose content is parts"])
def test_message_content_given_as_parts_is_read_as_its_text(bundle_env, completion):
    assert reward.compute_score(solution_str=completion, ground_truth=GOLD) == 1.0
    assert reward.trl_reward([completion], ground_truth=[GOLD]) == [1.0]
    assert harness_message_text(completion) == "```sql\n\n" + GOLD + "\n```"  # the harness reads it alike


def test_trl_gets_the_share_of_each_outcome_and_each_completion_s_explanation(bundle_env):
    seen = Recorder()
    with pytest.warns(RuntimeWarning, match=UNSCORED_WARNING):
        scores = reward.trl_reward([GOLD, "no sql here", "DROP TABLE Owner", GOLD, "SELECT name FROM Owner"],
                                   ground_truth=[GOLD, GOLD, GOLD, STALE, GOLD],
                                   log_metric=seen.log_metric, log_extra=seen.log_extra)
    assert scores == [1.0, 0.0, 0.0, None, 0.0]
    shares = {name: values[0] for name, values in seen.metrics.items()}
    assert shares["spider/match"] == shares["spider/no_query"] == shares["spider/forbidden"] == 0.2
    assert shares["spider/infrastructure_error"] == shares["spider/mismatch"] == 0.2
    assert shares["spider/prediction_over_budget"] == 0.0  # zeros are logged too
    assert set(shares) == {f"spider/{o}" for o in verify.OUTCOMES} | {"spider/no_gold", "spider/decided_on_neighbour",
                                                                       "spider/reused"}
    assert seen.extra["spider_outcome"] == ["match", "no_query", "forbidden", "infrastructure_error", "mismatch"]
    assert seen.extra["spider_explanation"][1] == "no SQL query found in the completion"
    assert seen.extra["spider_explanation"][3].startswith("StaleBundleError: gold")


def test_identical_completions_of_one_row_are_scored_once(bundle_env):
    group = [GOLD, "SELECT 1", GOLD, GOLD, "SELECT 1", "select count(*) from Owner", GOLD, "SELECT 1"]
    seen = Recorder()
    verify.reset_outcome_counts()
    scores = reward.trl_reward(group, ground_truth=[GOLD] * 8, log_metric=seen.log_metric)
    assert sum(verify.outcome_counts().values()) == 3  # three distinct completions: three verdicts
    assert scores == [reward.compute_score(solution_str=c, ground_truth=GOLD) for c in group]
    assert seen.metrics["spider/reused"] == [0.625]
    verify.reset_outcome_counts()
    reward.trl_reward([GOLD, GOLD], ground_truth=[GOLD, GOLD], db_id=["pets_club", None])  # other hints: another row
    assert sum(verify.outcome_counts().values()) == 2


def test_verls_batch_form_returns_one_score_per_item(bundle_env):
    items = {"data_sources": ["spider"] * 3, "solution_strs": [GOLD, "SELECT 1", GOLD],
             "ground_truths": [GOLD, GOLD, "SELECT count(*) FROM Customers"],
             "extra_infos": [{}, {"db_id": "pets_club"}, {"db_id": "bakery"}]}
    assert reward.compute_score(**items) == [1.0, 0.0, 0.0]
    detailed = reward.compute_score(**items, outcome_fields=True)
    assert [d["outcome"] for d in detailed] == ["match", "mismatch", "prediction_error"]
    with pytest.raises(CallArgumentsError, match="lists of one length"):
        reward.compute_score(solution_strs=[GOLD], ground_truths=[GOLD, GOLD])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNSCORED_WARNING)
        with pytest.raises(StaleBundleError):  # verl's interface takes only numbers: a fault raises
            reward.compute_score(solution_strs=[GOLD, GOLD], ground_truths=[GOLD, STALE])


def test_outcome_fields_make_compute_score_a_dict_and_the_default_stays_a_float(bundle_env):
    assert type(reward.compute_score(solution_str=GOLD, ground_truth=GOLD)) is float
    fields = reward.compute_score(solution_str="SELECT name FROM Owner", ground_truth=GOLD, outcome_fields=True)
    assert fields == {"score": 0.0, "acc": 0.0, "outcome": "mismatch", "explanation": "gold has 1 rows, prediction 6",
                      "decided_on": "original", "decided_on_neighbour": 0.0}


def test_compute_score_warns_before_it_raises_so_a_manager_that_swallows_errors_still_shows_them(bundle_env):
    with pytest.warns(RuntimeWarning, match=UNSCORED_WARNING + ".*stale_bundle"), pytest.raises(StaleBundleError):
        reward.compute_score(solution_str=GOLD, ground_truth=STALE)


def test_shares_cover_every_outcome_and_sum_to_one():
    scored = [scoring_batch.Scored(1.0, "match", "", "neighbour 1 of x"), scoring_batch.Scored(None, "no_gold", "")]
    shares = scoring_batch.shares(scored)
    assert sum(v for k, v in shares.items() if k[len("spider/"):] in scoring_batch.OUTCOMES) == 1.0
    assert shares["spider/decided_on_neighbour"] == 0.5
