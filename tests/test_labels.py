"""The labelled set of published Spider dev predictions (fixtures/labels) and the bench figures drawn from it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from bundle.scoring import entry as scoring_entry
from harness.bench import labels as bench_labels
from harness.bench import neighbours as bench_neighbours
from harness.bench.labels import ARTEFACT, RIGHT, WRONG, Judged
from harness.common.errors import InputError

RAW = json.loads(bench_labels.LABELS.read_text(encoding="utf-8"))
PAIRS = bench_labels.load()


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.strip().rstrip(";").lower())


def test_the_set_holds_at_least_100_overturns_and_50_accepted_wrong_answers():
    overturns = [p for p in PAIRS if p.stratum == "overturn"]
    accepted_wrong = [p for p in PAIRS if p.stratum in bench_labels.RECALL_STRATA and p.label == WRONG]
    assert len(overturns) >= 100
    assert len(accepted_wrong) >= 50


def test_the_overturns_are_sampled_across_systems_and_databases():
    overturns = [p for p in PAIRS if p.stratum == "overturn"]
    assert len({p.system for p in overturns}) >= 10
    assert len({p.db_id for p in overturns}) >= 12
    assert max(sum(p.db_id == db for p in overturns) for db in {p.db_id for p in overturns}) <= len(overturns) // 5


def test_every_pair_names_its_published_source_and_a_one_line_reason():
    for pair in PAIRS:
        assert pair.source.repo in bench_labels.SOURCES
        assert re.fullmatch(r"[0-9a-f]{40}", pair.source.commit)
        assert pair.source.path.startswith(("data/predict/spider_dev/", "results/"))
        assert pair.source.line == pair.dev_index + 1
        assert pair.reason.strip() and "\n" not in pair.reason


def test_a_pair_predicted_twice_gets_the_same_label_wherever_it_was_drawn():
    labels: dict[tuple[int, str], set[bool]] = {}
    for pair in PAIRS:
        labels.setdefault((pair.dev_index, _norm(pair.prediction)), set()).add(pair.wrong)
    assert all(len(v) == 1 for v in labels.values())


def test_the_file_states_its_labelling_rules_and_sampling():
    assert {"literal case and spelling (borderline)", "values the question does not give (borderline)",
            "values that repeat in the original", "duplicates"} <= set(RAW["rules"])
    assert set(RAW["sampling"]) >= {"corpus", *bench_labels.STRATA}


def _broken(change) -> dict:
    data = copy.deepcopy(RAW)
    data["pairs"] = data["pairs"][:3]
    change(data["pairs"][1])
    return data


@pytest.mark.parametrize("change, problem", [
    (lambda p: p.pop("gold"), "missing or malformed field"),
    (lambda p: p.update(label="probably wrong"), "is not allowed in stratum"),
    (lambda p: p.update(stratum="reading", label=ARTEFACT), "is not allowed in stratum"),
    (lambda p: p.update(stratum="overturn", label=RIGHT), "is not allowed in stratum"),
    (lambda p: p.update(stratum="elsewhere"), "stratum 'elsewhere'"),
    (lambda p: p["source"].update(commit="689bdfa"), "40-hex commit"),
    (lambda p: p["source"].update(repo="someone/else"), "known repository"),
    (lambda p: p["source"].update(line=p["dev_index"] + 7), "dev_index + 1"),
    (lambda p: p.update(reason="two\nlines"), "one non-empty line"),
    (lambda p: p.update(prediction="  "), "non-empty text"),
], ids=["a missing field", "an unknown label", "an artefact outside the overturns", "a plain right answer among "
        "the overturns", "an unknown stratum", "a short commit", "an unknown repository", "a line that is not the "
        "dev row's", "a reason on two lines", "an empty prediction"])
def test_a_malformed_pair_is_refused_naming_it(tmp_path, change, problem):
    path = tmp_path / "labels.json"
    data = _broken(change)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(problem)) as raised:
        bench_labels.load(path)
    assert repr(data["pairs"][1]["id"]) in str(raised.value)


def test_a_repeated_id_is_refused(tmp_path):
    data = copy.deepcopy(RAW)
    data["pairs"] = [data["pairs"][0], data["pairs"][0]]
    (tmp_path / "l.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match="the id repeats"):
        bench_labels.load(tmp_path / "l.json")


@pytest.mark.parametrize("k, n, low, high", [
    (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (5, 10, 0.2366, 0.7634), (73, 120, 0.5189, 0.6910),
], ids=["none of ten", "all of ten", "half of ten", "73 of 120"])
def test_the_wilson_interval_matches_hand_computed_bounds(k, n, low, high):
    got = bench_labels.wilson(k, n)
    assert got == pytest.approx((low, high), abs=1e-4)


def _judged(pair, original: float, score: float) -> Judged:
    return Judged(pair, original, score, "neighbour 1 of x" if score != original else "test suite")


def test_the_figures_count_precision_on_sampled_overturns_and_recall_on_accepted_wrong_answers():
    over_wrong, over_right = (next(p for p in PAIRS if p.stratum == "overturn" and p.label == lab)
                              for lab in (WRONG, ARTEFACT))
    search_wrong = next(p for p in PAIRS if p.stratum == "search" and p.wrong)
    reading_wrong = [p for p in PAIRS if p.stratum == "reading" and p.wrong][:2]
    reading_right = next(p for p in PAIRS if p.stratum == "reading" and not p.wrong)
    judged = [_judged(over_wrong, 1.0, 0.0), _judged(over_right, 1.0, 0.0),
              _judged(search_wrong, 1.0, 1.0), _judged(reading_wrong[0], 1.0, 0.0),
              _judged(reading_wrong[1], 0.0, 0.0), _judged(reading_right, 1.0, 0.0)]
    f = bench_labels._figures(judged)
    assert (f["precision"]["k"], f["precision"]["n"]) == (1, 2)  # only the sampled overturns
    assert f["artefacts"] == [over_right.id]
    assert (f["precision_all_labelled"]["k"], f["precision_all_labelled"]["n"]) == (2, 4)
    assert (f["recall"]["k"], f["recall"]["n"]) == (1, 2)  # one the original no longer accepts is left out
    assert f["missed"] == [search_wrong.id]
    assert f["not_accepted"] == [reading_wrong[1].id]
    assert (f["recall_undisputed"]["k"], f["recall_undisputed"]["n"]) == (1, 2)


def test_recall_where_the_gold_is_not_disputed_leaves_out_what_only_the_original_judges():
    wrong = [p for p in PAIRS if p.stratum == "reading" and p.wrong][:3]
    judged = [Judged(wrong[0], 1.0, 1.0, "original (disputed gold: car_1-x)"), _judged(wrong[1], 1.0, 1.0),
              _judged(wrong[2], 1.0, 0.0)]
    f = bench_labels._figures(judged)
    assert (f["recall"]["k"], f["recall"]["n"]) == (1, 3)
    assert (f["recall_undisputed"]["k"], f["recall_undisputed"]["n"]) == (1, 2)


def test_a_third_of_the_dev_questions_is_held_out_with_every_pair_of_a_question_on_one_side():
    by_question: dict[int, set[str]] = {}
    for pair in PAIRS:
        by_question.setdefault(pair.dev_index, set()).add(bench_labels.part(pair))
    assert all(len(parts) == 1 for parts in by_question.values())
    held = sum(parts == {bench_labels.HELD_OUT} for parts in by_question.values())
    assert 0.25 < held / len(by_question) < 0.42
    for stratum in bench_labels.STRATA:  # each stratum is represented on both sides
        assert {bench_labels.part(p) for p in PAIRS if p.stratum == stratum} == {bench_labels.TUNING,
                                                                                  bench_labels.HELD_OUT}


def test_the_figures_give_each_part_and_name_no_held_out_pair():
    judged = [_judged(p, 1.0, 0.0 if p.stratum == "overturn" else 1.0) for p in PAIRS]
    f = bench_labels.figures(judged)
    tuning, held = f["parts"][bench_labels.TUNING], f["parts"][bench_labels.HELD_OUT]
    assert tuning["pairs"] + held["pairs"] == f["pairs"] == len(PAIRS)
    assert tuning["precision"]["n"] + held["precision"]["n"] == f["precision"]["n"]
    assert tuning["recall"]["n"] + held["recall"]["n"] == f["recall"]["n"]
    held_ids = {p.id for p in PAIRS if bench_labels.part(p) == bench_labels.HELD_OUT}
    assert held["artefacts"] > 0 and held["missed"] > 0  # counts only
    assert isinstance(f["artefacts"], int) and isinstance(f["missed"], int)
    assert not held_ids & set(tuning["artefacts"] + tuning["missed"])
    assert held_ids.isdisjoint(json.dumps(f).replace('"', " ").split())


@pytest.fixture(scope="module")
def dev_rows(spider_dir) -> list[dict]:
    return json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))


@pytest.mark.real_data
def test_every_pair_is_the_dev_row_it_names(dev_rows):
    for pair in PAIRS:
        row = dev_rows[pair.dev_index]
        assert (row["db_id"], row["query"], row["question"]) == (pair.db_id, pair.gold, pair.question), pair.id


@pytest.mark.real_data
@pytest.mark.slow
def test_the_bench_judges_a_slice_of_the_set_on_a_bundle_it_stages_now(spider_dir, tmp_path):
    chosen = [p for p in PAIRS if p.db_id in ("battle_death", "pets_1")]
    f = bench_labels.run(spider_dir, tmp_path, chosen)
    judged = bench_labels.judge(chosen, tmp_path / "labels-staged")
    assert f["pairs"] == len(chosen) and f["databases"] == 2
    assert f == {**bench_labels.figures(judged), "build_seconds": f["build_seconds"],
                 "judge_seconds": f["judge_seconds"]}
    assert not f["not_accepted"]  # every labelled pair still matches on its original database (a count)
    assert f["precision"]["n"] > 0 and f["recall"]["n"] > 0


@pytest.mark.real_data
@pytest.mark.slow
def test_every_labelled_pair_matches_its_gold_on_the_original_database(spider_dir, tmp_path):
    # The set's premise, on all of it: the original database alone accepts every pair (the full
    # figures, with neighbours and the search, are `make bench`'s: several minutes).
    plain = tmp_path / "plain"
    plain.mkdir()
    bench_neighbours.stage_dev_bundle(spider_dir, plain, databases={p.db_id for p in PAIRS})
    refused = []
    for pair in PAIRS:
        call = scoring_entry.read_call({"solution_str": pair.prediction, "ground_truth": pair.gold,
                                        "extra_info": {"db_id": pair.db_id}})
        if scoring_entry.score_call(call, root=str(plain)).original_score != 1.0:
            refused.append(pair.id)
    assert len(PAIRS) >= 150 and refused == []


def test_the_labelled_set_is_in_the_fixtures_folder_and_small():
    assert bench_labels.LABELS.parent == Path(__file__).resolve().parents[1] / "fixtures" / "labels"
    assert bench_labels.LABELS.stat().st_size < 1_000_000
