"""Reward shapes: each preset pays its source's value for one case of every outcome, through the bundle.

The expected values are written out from each project's reward code (docs/reward-shapes.md cites
the commits): SkyRL-SQL's ``calculate_reward_single`` (-1 when no solution can be read, 1 for the
gold's rows, 0 otherwise), Arctic-Text2SQL-R1's 1 / 0.1 / 0 (a match, a query that runs, anything
else), SQL-R1's ``compute_score`` (format +-1, execution +-2, result +-3, length on a match).
Where this bundle has an outcome its source lacks (forbidden, over budget, over cap), the value
docs/reward-shapes.md argues for. Every case is scored by a bundle built with that preset, as the
trainer calls it, and the verdict (outcome, grader score) must be the same under every shape.
"""

from __future__ import annotations

import json
import warnings

import pytest

from bundle import grader as bundle_grader
from bundle import reward, verify
from bundle.contract import shapes as reward_shapes
from bundle.contract.errors import BundleDataError
from bundle.scoring import batch as scoring_batch
from bundle.scoring import index as bundle_index
from conftest import stage_bundle
from harness.cli import main as cli_main
from harness.common.errors import InputError
from harness.common.outcomes import SCORED_OUTCOMES
from harness.common.reward_shape import declared

GOLD = "SELECT count(*) FROM Owner"
HINT = {"db_id": "pets_club"}
# One completion per scored outcome on pets_club (no neighbour databases in this bundle).
CASES = {
    "match": GOLD,
    "mismatch": "SELECT count(*) + 1 FROM Owner",
    "no_query": "I cannot answer that.",
    "prediction_error": "SELECT nope FROM no_such_table",
    "forbidden": "DELETE FROM Owner",
    "prediction_over_budget": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
    "prediction_over_cap": "SELECT zeroblob(1000000000)",
}
# SQL-R1's length part of the gold alone as a completion: the query is the whole answer (share 1),
# no think text, and half the answer's share of its 2048-character limit.
SQL_R1_GOLD_LENGTH = 1 + len(GOLD) / 2048 * 0.5
SOURCE_VALUES = {
    "binary": {"match": 1, "mismatch": 0, "no_query": 0, "prediction_error": 0, "forbidden": 0,
               "prediction_over_budget": 0, "prediction_over_cap": 0},
    "skyrl-sql": {"match": 1, "mismatch": 0, "no_query": -1, "prediction_error": 0, "forbidden": 0,
                  "prediction_over_budget": 0, "prediction_over_cap": 0},
    "arctic-text2sql-r1": {"match": 1, "mismatch": 0.1, "no_query": 0, "prediction_error": 0, "forbidden": 0,
                           "prediction_over_budget": 0, "prediction_over_cap": 0},
    # format + execution + result (+ length on a match)
    "sql-r1": {"match": 1 + 2 + 3 + SQL_R1_GOLD_LENGTH, "mismatch": 1 + 2 - 3, "no_query": -1 + 0 + 0,
               "prediction_error": 1 - 2 + 0, "forbidden": 1 - 2 + 0, "prediction_over_budget": 1 - 2 + 0,
               "prediction_over_cap": 1 - 2 + 0},
}


@pytest.fixture(scope="module")
def shaped_roots(fixture_dbs, tmp_path_factory) -> dict[str, str]:
    """One sample bundle per preset: {preset: root}."""
    return {name: str(stage_bundle(tmp_path_factory.mktemp(f"shape-{name}"), fixture_dbs,
                                   reward_shape=reward_shapes.preset(name)))
            for name in reward_shapes.PRESETS}


def test_the_table_covers_every_preset_and_every_scored_outcome():
    assert set(SOURCE_VALUES) == set(reward_shapes.PRESETS)
    assert all(set(table) == set(SCORED_OUTCOMES) for table in SOURCE_VALUES.values())
    assert set(CASES) == set(SCORED_OUTCOMES) == set(reward_shapes.SCORED)
    assert set(reward_shapes.SCORED) == set(verify.OUTCOMES) - verify.UNSCORED


@pytest.mark.parametrize("outcome", list(CASES))
@pytest.mark.parametrize("shape", list(SOURCE_VALUES))
def test_each_preset_pays_its_sources_value_for_each_outcome(shaped_roots, monkeypatch, shape, outcome):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots[shape])
    kwargs = {"data_source": "spider", "solution_str": CASES[outcome], "ground_truth": GOLD, "extra_info": HINT}
    fields = reward.compute_score(**kwargs, outcome_fields=True)
    assert fields["outcome"] == outcome  # the case does exercise that outcome, under every shape
    assert reward.compute_score(**kwargs) == pytest.approx(SOURCE_VALUES[shape][outcome], abs=1e-12)
    assert fields["acc"] == bundle_grader.compute_score(**kwargs) == (1.0 if outcome == "match" else 0.0)


@pytest.mark.parametrize("shape", [s for s in SOURCE_VALUES if s != "binary"])
def test_trl_and_verls_batch_form_pay_the_shape_as_the_single_form_does(shaped_roots, monkeypatch, shape):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots[shape])
    logged: dict = {}
    completions = list(CASES.values())
    rewards = reward.trl_reward(completions, ground_truth=[GOLD] * len(completions), db_id=["pets_club"] * len(completions),
                                log_extra=lambda name, values: logged.setdefault(name, values))
    assert rewards == pytest.approx([SOURCE_VALUES[shape][o] for o in CASES], abs=1e-12)
    assert logged["spider_outcome"] == list(CASES) and logged["spider_reward_shape"] == [shape] * len(CASES)
    batch = reward.compute_score(solution_strs=completions, ground_truths=[GOLD] * len(completions),
                                 extra_infos=[HINT] * len(completions))
    assert batch == rewards


def test_sql_r1_pays_its_length_part_on_a_match_from_the_think_and_answer_texts(shaped_roots, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots["sql-r1"])
    think, answer = "count the owners", f"```sql\n{GOLD}\n```"
    tagged = f"<think>{think}</think>\n<answer>{answer}</answer>"
    long_think = "x" * 3000  # beyond SQL-R1's 2048 characters: the length share stops at 0.5
    cases = {tagged: 6 + len(GOLD) / len(answer) + (len(think) + len(answer)) / 2048 * 0.5,
             f"<think>{long_think}</think><answer>{answer}</answer>": 6 + len(GOLD) / len(answer) + 0.5,
             f"<think>{think}</think>\n<answer>{answer.replace(GOLD, CASES['mismatch'])}</answer>": 0.0}  # no match: no length
    for completion, expected in cases.items():
        got = reward.compute_score(solution_str=completion, ground_truth=GOLD, extra_info=HINT)
        assert got == pytest.approx(expected, abs=1e-12), completion[:60]


def test_shaped_outcome_fields_name_the_shape_and_keep_acc_the_verdicts(shaped_roots, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots["skyrl-sql"])
    fields = reward.compute_score(solution_str="no query here", ground_truth=GOLD, outcome_fields=True)
    assert (fields["score"], fields["acc"], fields["reward_shape"]) == (-1.0, 0.0, "skyrl-sql")
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots["binary"])
    plain = reward.compute_score(solution_str="no query here", ground_truth=GOLD, outcome_fields=True)
    assert set(plain) == {"score", "acc", "outcome", "explanation", "decided_on", "decided_on_neighbour"}


def test_a_binary_bundle_is_the_same_bytes_as_one_built_without_a_shape(fixture_dbs, tmp_path):
    plain = stage_bundle(tmp_path / "plain", fixture_dbs)
    named = stage_bundle(tmp_path / "named", fixture_dbs, reward_shape=reward_shapes.preset("binary"))
    shaped = stage_bundle(tmp_path / "shaped", fixture_dbs, reward_shape=reward_shapes.preset("skyrl-sql"))
    index = (plain / "data" / "index.json").read_bytes()
    assert (named / "data" / "index.json").read_bytes() == index and b"reward_shape" not in index
    assert json.loads((shaped / "data" / "index.json").read_text())["reward_shape"]["name"] == "skyrl-sql"


@pytest.mark.parametrize("name", list(reward_shapes.PRESETS))
def test_the_harness_reads_what_each_preset_records(name):
    shape = reward_shapes.preset(name)
    seen = declared({"reward_shape": shape.entry()} if not shape.binary else {})
    assert seen.values == dict(shape.values) and seen.bounds == shape.bounds and seen.name == name
    assert seen.pays("match", shape.value("match", GOLD, GOLD))
    assert all(seen.pays(o, shape.value(o, "x", "x")) and seen.wrong(shape.value(o, "x", "x"))
               for o in SCORED_OUTCOMES if o != "match")


CUSTOM_ERRORS = [
    ({"match": 1, "mismatch": 0}, "no value for no_query"),
    ({**SOURCE_VALUES["binary"], "gold_error": 0}, "gold_error cannot be paid"),
    ({**SOURCE_VALUES["binary"], "mismatch": 1}, "a right answer must pay more than every wrong one"),
    ({**SOURCE_VALUES["binary"], "mismatch": "0.5"}, "is not a finite number"),
    ({**SOURCE_VALUES["binary"], "mismatch": float("nan")}, "is not a finite number"),
]


@pytest.mark.parametrize("values, message", CUSTOM_ERRORS,
                         ids=["an outcome left out", "an unscored outcome paid", "a wrong answer paid as much as a match",
                              "a value that is text", "a value that is not a number"])
def test_a_custom_table_that_cannot_be_used_is_refused_saying_why(values, message):
    with pytest.raises(reward_shapes.ShapeError, match=message):
        reward_shapes.custom("mine", values)


def test_a_custom_table_is_paid_as_given(fixture_dbs, tmp_path, monkeypatch):
    values = {"match": 2, "mismatch": 0.25, "no_query": -0.5, "prediction_error": -0.25, "forbidden": -1,
              "prediction_over_budget": -0.25, "prediction_over_cap": -0.25}
    root = stage_bundle(tmp_path / "custom", fixture_dbs, reward_shape=reward_shapes.custom("mine", values))
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(root))
    got = {o: reward.compute_score(solution_str=c, ground_truth=GOLD, extra_info=HINT) for o, c in CASES.items()}
    assert got == values
    assert bundle_index.load(str(root)).describe()["reward_shape"] == "mine"


def test_an_index_whose_shape_cannot_be_read_is_a_bundle_data_error(fixture_dbs, tmp_path):
    root = stage_bundle(tmp_path / "broken", fixture_dbs, reward_shape=reward_shapes.preset("skyrl-sql"))
    index = json.loads((root / "data" / "index.json").read_text())
    del index["reward_shape"]["values"]["forbidden"]
    (root / "data" / "index.json").write_text(json.dumps(index))
    with pytest.raises(BundleDataError, match="reward_shape cannot be used.*no value for forbidden"):
        bundle_index.load(str(root))


def _prepare(tmp_path, *args: str) -> int:
    return cli_main(["prepare", "--sample", "--no-audit", "--neighbours", "none", "--output", str(tmp_path / "out"),
                     *args])


def test_prepare_records_the_preset_in_the_index_and_the_summary(tmp_path):
    assert _prepare(tmp_path, "--reward-shape", "arctic-text2sql-r1") == 0
    index = json.loads((tmp_path / "out" / "bundle" / "data" / "index.json").read_text())
    summary = json.loads((tmp_path / "out" / "prepare-summary.json").read_text())
    assert index["reward_shape"]["values"] == dict(reward_shapes.preset("arctic-text2sql-r1").values)
    assert summary["settings"]["reward_shape"] == "arctic-text2sql-r1"


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read the reward values"),
    ('{"values": {"match": 1}}', "no value for mismatch"),
    ('{"name": "sql-r1", "values": {}}', "is a preset's name"),
    ('[1, 2]', "expected a JSON object"),
], ids=["not JSON", "a table missing outcomes", "a preset's name", "not an object"])
def test_prepare_refuses_a_custom_table_it_cannot_use_before_any_work(tmp_path, capsys, content, message):
    table = tmp_path / "values.json"
    table.write_text(content)
    assert _prepare(tmp_path, "--reward-values", str(table)) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_prepare_refuses_a_preset_and_a_custom_table_together(tmp_path, capsys):
    table = tmp_path / "values.json"
    table.write_text(json.dumps({"name": "mine", "values": SOURCE_VALUES["arctic-text2sql-r1"]}))
    assert _prepare(tmp_path, "--reward-shape", "skyrl-sql", "--reward-values", str(table)) != 0
    assert "not both" in capsys.readouterr().err


def test_unscored_rows_stay_unscored_under_a_shape(shaped_roots, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", shaped_roots["sql-r1"])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = reward.trl_reward(["SELECT 1"], ground_truth=["SELECT 'not a gold of this bundle'"])
    assert got == [None]
    assert scoring_batch.NO_GOLD not in reward_shapes.SCORED


@pytest.mark.parametrize("entry, message", [
    ({"name": "x", "values": {"match": 1}}, "without a value for every outcome"),
    ({"name": "x", "values": {**SOURCE_VALUES["binary"], "mismatch": "0"}}, "not a finite number"),
    ("skyrl-sql", "without a value for every outcome"),
], ids=["outcomes missing", "a value that is text", "a name where a table belongs"])
def test_the_harness_refuses_an_index_whose_shape_it_cannot_read(entry, message):
    with pytest.raises(InputError, match=message):
        declared({"reward_shape": entry})
