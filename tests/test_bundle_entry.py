"""Entry points (reward.py, grader.py, scoring/entry.py) and row -> database resolution (scoring/index.py)."""

from __future__ import annotations

import collections
import importlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from bundle import grader, reward
from bundle.contract.errors import (
    HINT_IGNORED_WARNING,
    BundleDataError,
    CallArgumentsError,
    DatabaseUnavailableError,
    GoldQueryError,
    RowResolutionError,
    ScoringInfrastructureError,
    StaleBundleError,
)
from bundle.scoring import entry as scoring_entry
from bundle.scoring import index as bundle_index
from conftest import stage_bundle
from harness.prepare.bundle_data import IndexRow

GOLD = "SELECT count(*) FROM Owner"
SHARED_GOLD = "SELECT count(*) FROM Customers"  # stored under music_shop and bakery in the sample
BAKERY_PROMPT = ("You answer questions about a database with one SQLite query.\n"
                 "Reply with the query and nothing else.\n"
                 "Product(product_id, name, category, price)\nCustomers(customer_id, name, town)\n"
                 "Orders(order_id, customer_id, product_id, quantity, order_day)")


def test_verl_keywords(bundle_env):
    assert reward.compute_score(data_source="spider", solution_str=GOLD, ground_truth=GOLD, extra_info={}) == 1.0
    assert reward.compute_score("spider", "SELECT count(*) FROM Pet", GOLD, None) == 0.0


def test_envelope_keywords(bundle_env):
    assert grader.compute_score(input="How many owners?", output=f"```sql\n{GOLD}\n```", expected=GOLD) == 1.0
    assert grader.compute_score(input="How many owners?", output="no idea", expected=GOLD) == 0.0


def test_chat_message_shapes(bundle_env):
    completion = [{"role": "assistant", "content": GOLD}]
    expected = [{"role": "system", "content": "..."}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": GOLD}]
    assert grader.compute_score(output=completion, expected=expected) == 1.0
    assert reward.compute_score(solution_str=GOLD, ground_truth={"ground_truth": GOLD, "db_id": "pets_club"}) == 1.0


def test_scores_are_floats_in_range(bundle_env):
    for completion in (GOLD, "SELECT 1", "", "DROP TABLE Owner"):
        score = reward.compute_score(solution_str=completion, ground_truth=GOLD)
        assert type(score) is float and score in (0.0, 1.0)


def test_grade_explains(bundle_env):
    graded = grader.grade(output="Answer: SELECT name FROM Owner", expected=GOLD)
    assert graded == {"score": 0.0, "outcome": "mismatch", "explanation": "gold has 1 rows, prediction 6",
                      "sql": "SELECT name FROM Owner", "original_score": 0.0, "decided_on": "original",
                      "neighbours_checked": 0, "searched": 0, "disputed": None, "accepted": None,
                      "official_score": 0.0, "bird_score": 0.0, "official_differs": None, "bird_differs": None,
                      "answer": graded["answer"]}
    assert len(graded["answer"]) == 16


def test_trl_batch(bundle_env):
    scores = reward.trl_reward(
        completions=[[{"role": "assistant", "content": GOLD}], "SELECT 1", "x"],
        prompts=["p1", "p2", "p3"],
        ground_truth=[GOLD, GOLD, None],
        completion_ids=[[1], [2], [3]],
    )
    assert scores == [1.0, 0.0, None]


def test_trl_reads_gold_from_messages_column(bundle_env):
    messages = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": GOLD}]]
    assert reward.trl_reward([GOLD], messages=messages) == [1.0]


def test_missing_arguments_are_typed_errors(bundle_env):
    with pytest.raises(CallArgumentsError, match="no completion"):
        reward.compute_score(ground_truth=GOLD)
    with pytest.raises(CallArgumentsError, match="no gold"):
        reward.compute_score(solution_str=GOLD)


def test_stale_gold_is_rejected(bundle_env):
    with pytest.raises(StaleBundleError, match="different prepare runs"):
        reward.compute_score(solution_str=GOLD, ground_truth="SELECT count(*) FROM Owner WHERE age > 3")


def test_gold_matched_whitespace_insensitively(bundle_env):
    assert reward.compute_score(solution_str=GOLD, ground_truth="SELECT  count(*)\nFROM Owner ;") == 1.0


@pytest.mark.parametrize("hint", ["library", "no_such_db"], ids=["another database of the bundle", "a database not in it"])
def test_a_db_id_hint_that_disagrees_gives_way_to_the_gold_s_own_database_with_a_warning(bundle_env, hint):
    assert reward.compute_score(solution_str=GOLD, ground_truth=GOLD, extra_info={"db_id": "pets_club"}) == 1.0
    with pytest.warns(UserWarning, match=f"hint {hint!r} does not hold gold .* scored on 'pets_club'"):
        assert reward.compute_score(solution_str=GOLD, ground_truth=GOLD, extra_info={"db_id": hint}) == 1.0
    with pytest.warns(UserWarning, match=HINT_IGNORED_WARNING):
        assert reward.trl_reward([GOLD, "SELECT 1"], ground_truth=[GOLD] * 2, db_id=[hint] * 2) == [1.0, 0.0]


def test_a_gold_stored_nowhere_is_stale_whatever_the_hint(bundle_env):
    with pytest.raises(StaleBundleError, match="under database 'pets_club' nor any other"):
        reward.compute_score(solution_str=GOLD, ground_truth=GOLD + " WHERE 1", extra_info={"db_id": "pets_club"})


def test_a_wrong_hint_on_a_shared_gold_still_needs_the_prompt(bundle_env):
    with pytest.raises(RowResolutionError, match="the db_id hint 'library' holds no such gold"):
        grader.compute_score(output="SELECT 4", expected=SHARED_GOLD, db_id="library")
    with pytest.warns(UserWarning, match="scored on 'bakery'"):
        assert grader.compute_score(input=BAKERY_PROMPT, output="SELECT 4", expected=SHARED_GOLD, db_id="library") == 1.0


def test_shared_gold_needs_a_hint(bundle_env):
    with pytest.raises(RowResolutionError, match="music_shop, bakery"):
        grader.compute_score(output="SELECT 4", expected=SHARED_GOLD)


def test_shared_gold_resolved_by_the_prompt_schema(bundle_env):
    # bakery has 4 customers, music_shop 3: the prompt decides which one is scored.
    assert grader.compute_score(input=BAKERY_PROMPT, output="SELECT 4", expected=SHARED_GOLD) == 1.0
    assert grader.compute_score(input=BAKERY_PROMPT, output="SELECT 3", expected=SHARED_GOLD) == 0.0
    messages = [{"role": "system", "content": BAKERY_PROMPT}, {"role": "user", "content": "How many?"}]
    assert reward.compute_score(solution_str="SELECT 4", ground_truth=SHARED_GOLD,
                                extra_info={"prompt": messages}) == 1.0


def test_shared_gold_resolved_by_db_id(bundle_env):
    assert reward.compute_score(solution_str="SELECT 3", ground_truth=SHARED_GOLD,
                                extra_info={"db_id": "music_shop"}) == 1.0


def test_row_id_hint(bundle_env):
    index = json.loads((bundle_env / "data" / "index.json").read_text())
    row = next(r for r in index["rows"] if r["gold"] == SHARED_GOLD and r["db_id"] == "bakery")
    assert reward.compute_score(solution_str="SELECT 4", ground_truth=SHARED_GOLD,
                                extra_info={"row_id": row["id"]}) == 1.0


def test_empty_gold_is_reported(bundle_env):
    call = scoring_entry.read_call({"output": "SELECT name FROM Pet WHERE 0", "expected":
                                    "SELECT name FROM Pet WHERE weight > 100"})
    verdict = scoring_entry.score_call(call)
    assert verdict.gold_empty and verdict.outcome == "match"


def test_gold_results_come_from_the_index(bundle_env):
    verdict = scoring_entry.score_call(scoring_entry.read_call({"output": GOLD, "expected": GOLD}))
    assert verdict.gold_cached and verdict.gold_s == 0.0


def _verdict_proper(verdict) -> dict:
    """A verdict without its wall-clock telemetry (the ``*_s`` fields) and the gold's cache state."""
    return {k: v for k, v in verdict.as_dict().items() if not k.endswith("_s") and k != "gold_cached"}


PLANNED_CALLS = [
    {"output": GOLD, "expected": GOLD, "db_id": "pets_club"},
    {"output": "SELECT count(*) + 1 FROM Owner", "expected": GOLD, "db_id": "pets_club"},
    {"output": "SELECT 4", "expected": SHARED_GOLD, "db_id": "bakery"},
    {"output": "SELECT 4", "expected": SHARED_GOLD, "db_id": "music_shop"},
    {"output": "DROP TABLE Owner", "expected": GOLD, "db_id": "pets_club"},
    {"output": "no query here", "expected": GOLD, "db_id": "pets_club"},
]


def test_a_row_seen_before_is_scored_from_its_plan_with_the_same_verdict(bundle_env):
    data = bundle_index.load()
    data.plans.clear()
    first = [_verdict_proper(scoring_entry.score_call(scoring_entry.read_call(kw))) for kw in PLANNED_CALLS]
    kept = {(key[0], key[1]) for key in data.plans}
    assert kept == {(GOLD, "pets_club"), (SHARED_GOLD, "bakery"), (SHARED_GOLD, "music_shop")}
    again = [_verdict_proper(scoring_entry.score_call(scoring_entry.read_call(kw))) for kw in PLANNED_CALLS]
    assert again == first
    assert [v["outcome"] for v in first] == ["match", "mismatch", "match", "mismatch", "forbidden", "no_query"]


def test_a_resolution_that_needed_the_prompt_is_redone_on_every_call(bundle_env):
    data = bundle_index.load()
    data.plans.clear()
    assert grader.compute_score(input=BAKERY_PROMPT, output="SELECT 4", expected=SHARED_GOLD) == 1.0
    assert not data.plans  # no plan kept: the same gold without the prompt must not find one
    with pytest.raises(RowResolutionError, match="music_shop, bakery"):
        grader.compute_score(output="SELECT 4", expected=SHARED_GOLD)


def test_a_plan_serves_only_the_limits_it_was_made_with(bundle_env):
    data = bundle_index.load()
    call = scoring_entry.read_call({"output": "SELECT count(*) FROM Owner", "expected": GOLD, "db_id": "pets_club"})
    default = scoring_entry.current_limits()
    tight = default.replace(budget_floor_steps=1, budget_gold_multiple=1)
    assert scoring_entry.score_call(call, default).outcome == "match"
    assert scoring_entry.score_call(call, tight).budget_steps == \
        tight.budget_steps(scoring_entry.score_call(call, default).gold_steps)
    assert {key[4] for key in data.plans if key[0] == GOLD} >= {id(default), id(tight)}


def test_verdicts_built_on_the_per_call_path_equal_the_dataclass_s_own(bundle_env):
    import dataclasses

    from bundle import verify
    fields = {f.name for f in dataclasses.fields(verify.Verdict)}
    for kw in PLANNED_CALLS:
        verdict = scoring_entry.score_call(scoring_entry.read_call(kw))
        assert set(vars(verdict)) == fields
        assert verdict == verify.Verdict(**{name: getattr(verdict, name) for name in fields})


@pytest.fixture
def private_bundle(tmp_path, fixture_dbs, monkeypatch):
    """A bundle this test may damage; gold results not precomputed."""
    rows = [IndexRow("train-00000", "train", "pets_club", GOLD),
            IndexRow("train-00001", "train", "pets_club", "SELECT nope FROM Owner"),
            IndexRow("train-00002", "train", "library", "SELECT count(*) FROM Book")]
    root = tmp_path / "bundle_copy"
    stage_bundle(root, fixture_dbs, precompute=False, rows=rows)
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(root))
    return root


def test_gold_computed_once_per_process_without_stored_results(private_bundle):
    first = scoring_entry.score_call(scoring_entry.read_call({"output": GOLD, "expected": GOLD}))
    second = scoring_entry.score_call(scoring_entry.read_call({"output": "SELECT 1", "expected": GOLD}))
    assert not first.gold_cached and second.gold_cached


def test_failing_gold_raises(private_bundle):
    with pytest.raises(GoldQueryError, match="no such column"):
        reward.compute_score(solution_str="SELECT 1", ground_truth="SELECT nope FROM Owner")


def test_missing_database_raises(private_bundle):
    (private_bundle / "data" / "databases" / "library.sqlite").unlink()
    with pytest.raises(DatabaseUnavailableError, match="library"):
        reward.compute_score(solution_str="SELECT 1", ground_truth="SELECT count(*) FROM Book")


def test_modified_database_raises(private_bundle):
    path = private_bundle / "data" / "databases" / "library.sqlite"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(DatabaseUnavailableError, match="SHA-256"):
        reward.compute_score(solution_str="SELECT 1", ground_truth="SELECT count(*) FROM Book")


def test_infrastructure_errors_share_a_base(private_bundle):
    (private_bundle / "data" / "databases" / "library.sqlite").unlink()
    with pytest.raises(ScoringInfrastructureError) as raised:
        reward.compute_score(solution_str="SELECT 1", ground_truth="SELECT count(*) FROM Book")
    assert (raised.value.code, raised.value.exit_code) == ("database_unavailable", 22)


def test_no_data_folder_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(tmp_path))
    with pytest.raises(BundleDataError, match="make bundle"):
        bundle_index.find_root({"TRAINER_BUNDLE_ROOT": str(tmp_path)})


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read"),
    ('{"format": "other"}', "not a spider-scoring-index"),
    ('{"format": "spider-scoring-index", "version": 99}', "version 99"),
])
def test_bad_index_files(tmp_path, content, message):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "index.json").write_text(content)
    with pytest.raises(BundleDataError, match=message):
        bundle_index.load(str(tmp_path))


def test_root_found_through_file_when_env_unset(sample_bundle, monkeypatch, tmp_path):
    # Import the staged copy as a package with TRAINER_BUNDLE_ROOT unset: data is found next to the modules.
    monkeypatch.delenv("TRAINER_BUNDLE_ROOT", raising=False)
    parent = tmp_path / "pkgs"
    shutil.copytree(sample_bundle, parent / "staged_copy")
    monkeypatch.syspath_prepend(str(parent))
    monkeypatch.chdir(tmp_path)  # never the working directory
    module = importlib.import_module("staged_copy.reward")
    try:
        assert module.compute_score(solution_str=GOLD, ground_truth=GOLD) == 1.0
    finally:
        for name in [n for n in sys.modules if n.startswith("staged_copy")]:
            del sys.modules[name]


def test_stored_results_ignored_under_another_sqlite_version(tmp_path, fixture_dbs, monkeypatch):
    root = tmp_path / "other_version"
    stage_bundle(root, fixture_dbs, rows=[IndexRow("train-00000", "train", "pets_club", GOLD)])
    index = json.loads((root / "data" / "index.json").read_text())
    index["sqlite_version"] = "3.0.0"
    (root / "data" / "index.json").write_text(json.dumps(index))
    data = bundle_index.load(str(root))
    assert not data.describe()["stored_gold_results_used"]
    verdict = scoring_entry.score_call(scoring_entry.read_call({"output": GOLD, "expected": GOLD}), root=str(root))
    assert verdict.outcome == "match" and not verdict.gold_cached  # computed here, not read from the index


# --- defects that gave a wrong score without any error -------------------------------------------

@pytest.mark.parametrize("column", ["output", "solution_str", "completion", "response"])
def test_a_dataset_column_never_replaces_the_completion_trl_passes(bundle_env, column):
    # TRL passes every dataset column; one holding the gold under a completion-like name must not
    # be scored in place of the model's completion.
    assert reward.trl_reward(["SELECT 1"], ground_truth=[GOLD], **{column: [GOLD]}) == [0.0]
    assert reward.trl_reward([GOLD], ground_truth=[GOLD], **{column: ["SELECT 1"]}) == [1.0]


def test_trl_columns_may_be_any_sequence_and_db_id_is_a_hint(bundle_env):
    # Spider repeats SHARED_GOLD in two databases: a top-level db_id column tells them apart.
    assert reward.trl_reward(("SELECT 3", "SELECT 3"), ground_truth=(SHARED_GOLD, SHARED_GOLD),
                             db_id=("music_shop", "bakery")) == [1.0, 0.0]
    assert reward.trl_reward(["SELECT 3"], ground_truth=[SHARED_GOLD], db_id=["music_shop"]) == [1.0]


def test_compute_score_reads_a_top_level_db_id(bundle_env):
    assert reward.compute_score(solution_str="SELECT 3", ground_truth=SHARED_GOLD, db_id="music_shop") == 1.0


def test_one_list_of_gold_keys_for_every_entry_point(bundle_env):
    for key in scoring_entry.GOLD_KEYS:
        assert reward.trl_reward([GOLD], **{key: [GOLD]}) == [1.0], key
        assert grader.compute_score(output=GOLD, **{key: GOLD}) == 1.0, key


@pytest.fixture
def float_bundle(tmp_path, fixture_dbs):
    """A bundle whose gold returns a float with more than six significant digits (18.8125 / 3)."""
    root = tmp_path / "float_bundle"
    stage_bundle(root, fixture_dbs, rows=[IndexRow("train-00000", "train", "pets_club", FLOAT_GOLD)])
    return root


FLOAT_GOLD = "SELECT avg(weight) / 3 FROM Pet WHERE species = 'dog'"


@pytest.mark.parametrize("digits", [6, 12, 15])
def test_a_float_gold_matches_itself_at_any_number_rounding(float_bundle, digits):
    limits = scoring_entry.current_limits().replace(float_digits=digits)
    call = scoring_entry.read_call({"output": FLOAT_GOLD, "expected": FLOAT_GOLD})
    verdict = scoring_entry.score_call(call, limits, root=str(float_bundle))
    assert (verdict.outcome, verdict.score) == ("match", 1.0)
    # The index was built at 12 digits: under another rounding its stored rows are not used.
    assert verdict.gold_cached is (digits == 12)
    near = scoring_entry.read_call({"output": "SELECT 6.270833", "expected": FLOAT_GOLD})
    assert scoring_entry.score_call(near, limits, root=str(float_bundle)).score == (1.0 if digits == 6 else 0.0)


def test_the_digits_setting_reaches_compute_score_from_the_environment(float_bundle):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import reward; "
            f"print(reward.compute_score(solution_str={FLOAT_GOLD!r}, ground_truth={FLOAT_GOLD!r}))")
    import os
    import subprocess
    env = dict(os.environ, SPIDER_SCORING_FLOAT_DIGITS="6", TRAINER_BUNDLE_ROOT=str(float_bundle))
    done = subprocess.run([sys.executable, "-c", code, str(float_bundle)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1.0"


@pytest.mark.parametrize("completion", [
    "-- SELECT count(*) FROM Owner",
    "/* SELECT count(*) FROM Owner */",
    "/*\n```sql\nSELECT count(*) FROM Owner\n```\n*/",
    "Here it is -- SELECT count(*) FROM Owner",
])
def test_a_query_inside_a_comment_is_never_scored(bundle_env, completion):
    assert grader.grade(output=completion, expected=GOLD)["outcome"] == "no_query"


@pytest.mark.parametrize("completion, outcome", [
    (f"{GOLD}; DROP TABLE Owner", "forbidden"),
    (f"{GOLD};\n-- and then\ndelete from Owner", "forbidden"),
    (f"```sql\n{GOLD};\nSELECT 1;\n```", "forbidden"),
    (f"{GOLD}\n\nPRAGMA query_only = 0", "forbidden"),
    (f"{GOLD}; this counts the owners.", "match"),
    (f"{GOLD}; With this query you get the number of owners.", "match"),
    (f"{GOLD};;  -- done", "match"),
    (f"```sql\n{GOLD};\n```\nSELECT 1 would be wrong.", "match"),
], ids=["drop", "lower-case-after-comment", "two-in-a-fence", "after-blank-line", "prose", "prose-with-keyword",
        "semicolons-and-comment", "prose-after-the-fence"])
def test_a_second_statement_is_forbidden_prose_is_not(bundle_env, completion, outcome):
    assert grader.grade(output=completion, expected=GOLD)["outcome"] == outcome


# --- loaded by file path, as verl's custom_reward_function.path does ------------------------------

LOAD_BY_PATH = r"""
import importlib.util, json, sys
before = set(sys.modules)
results = {}
for entry in ("reward", "grader"):
    spec = importlib.util.spec_from_file_location(f"custom_module_{entry}", sys.argv[1] + f"/{entry}.py")
    module = importlib.util.module_from_spec(spec)  # no parent package, not in sys.modules: verl's way
    spec.loader.exec_module(module)
    gold = "SELECT count(*) FROM Owner"
    results[entry] = [module.compute_score(solution_str=gold, ground_truth=gold),
                      module.compute_score(solution_str="SELECT 1", ground_truth=gold)]
generic = {"verify", "reward", "grader", "scoring_entry", "sql_guard", "bundle_index", "sql_compare", "sql", "scoring",
           "search", "neighbours", "contract"}
results["generic_names"] = sorted(generic & set(sys.modules))
results["private"] = sorted({m.split(".")[0] for m in set(sys.modules) - before if m.startswith("_spider_scoring_")})
print(json.dumps(results))
"""


def test_an_entry_file_loaded_by_path_finds_its_siblings_without_generic_names(sample_bundle, tmp_path):
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_BUNDLE_ROOT"}
    done = subprocess.run([sys.executable, "-I", "-c", LOAD_BY_PATH, str(sample_bundle)], capture_output=True,
                          text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["reward"] == [1.0, 0.0] and result["grader"] == [1.0, 0.0]
    assert result["generic_names"] == [] and len(result["private"]) == 1  # one private package for both files


# -- the per-call path: each bundle module entered once per database judged -------------------------

BUNDLE_DIR = str(Path(reward.__file__).resolve().parent)


def _entered(call):
    """How many times each bundle module is called into from another module (or from outside)
    while ``call()`` runs, and what it returned."""
    entered: collections.Counter = collections.Counter()

    def profile(frame, event, _arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(BUNDLE_DIR + os.sep):
                caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
                if caller != path:  # named as the bundle names it: "reward", "sql.guard"...
                    entered[os.path.relpath(path, BUNDLE_DIR)[:-3].replace(os.sep, ".")] += 1

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return entered, result


def test_a_warm_reward_call_enters_each_bundle_module_once(bundle_env):
    kwargs = {"solution_str": "SELECT count(*) FROM Owner", "ground_truth": GOLD, "extra_info": {"db_id": "pets_club"}}
    reward.compute_score(**kwargs)  # the row's plan made, its connection opened
    entered, score = _entered(lambda: reward.compute_score(**kwargs))
    assert score == 1.0
    assert {"reward", "scoring.batch", "scoring.entry", "sql.verdict", "sql.extract", "sql.guard", "sql.connection",
            "sql.compare"} <= set(entered)
    assert {name: n for name, n in entered.items() if n != PER_DATABASE.get(name, 1)} == {}


# Entered per database judged: the budget, the run (and the watchdog's start and stop), the rows.
PER_DATABASE = {"contract.limits": 1, "sql.guard": 1, "sql.connection": 1, "sql.compare": 1, "sql.watchdog": 2}


def test_with_neighbours_the_query_modules_are_entered_once_per_database(neighbour_bundle, monkeypatch):
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(neighbour_bundle))
    index = json.loads((neighbour_bundle / "data" / "index.json").read_text(encoding="utf-8"))
    checked = 0
    for row in index["rows"][:12]:
        kwargs = {"output": row["gold"] + " ", "expected": row["gold"], "db_id": row["db_id"]}
        scoring_entry.score_arguments(kwargs)
        entered, verdict = _entered(lambda: scoring_entry.score_arguments(kwargs))  # noqa: B023 - called here
        databases = 1 + verdict.neighbours_checked
        checked += verdict.neighbours_checked
        assert verdict.outcome == "match"
        assert {name: entered[name] for name in PER_DATABASE} == {name: n * databases for name, n in PER_DATABASE.items()}, \
            row["gold"]
        assert {name: n for name, n in entered.items() if name not in PER_DATABASE and n != 1} == {}
    assert checked > 0  # the sample's rows do go through neighbours
