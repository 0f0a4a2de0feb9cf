"""The multi-turn episode (bundle/scoring/episode.py, bundle/environment.py): exploration through the
guarded executor within its budgets, and a final answer scored exactly as the one-shot reward and
grader score the same text."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from bundle import environment, grader, reward
from bundle.contract.errors import CallArgumentsError
from bundle.contract.limits import DEFAULT_LIMITS
from bundle.scoring import episode as scoring_episode
from conftest import sample_rows

GOLD = "SELECT count(*) FROM Owner"
ROW = {"ground_truth": GOLD, "db_id": "pets_club"}


def _database(root: Path, db_id: str = "pets_club") -> Path:
    return root / "data" / "databases" / f"{db_id}.sqlite"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_query_shows_its_count_columns_and_first_rows(bundle_env):
    ep = scoring_episode.Episode(ROW)
    seen = ep.explore("SELECT * FROM Owner ORDER BY 1")
    with sqlite3.connect(_database(bundle_env)) as conn:
        cursor = conn.execute("SELECT * FROM Owner ORDER BY 1")
        rows, columns = cursor.fetchall(), [d[0] for d in cursor.description]
    lines = seen.splitlines()
    assert lines[0].startswith(f"{len(rows):,} rows") and lines[1] == " | ".join(columns)
    shown = min(len(rows), DEFAULT_LIMITS.explore_rows)
    assert lines[2:2 + shown] == [" | ".join(scoring_episode._cell(v) for v in r) for r in rows[:shown]]
    assert lines[-1] == (f"(queries left: {DEFAULT_LIMITS.explore_calls - 1} of {DEFAULT_LIMITS.explore_calls}; "
                         f"work left: {DEFAULT_LIMITS.episode_steps - ep.steps:,} of {DEFAULT_LIMITS.episode_steps:,} units)")
    assert 0 < ep.steps <= DEFAULT_LIMITS.explore_steps and ep.calls == 1


@pytest.mark.parametrize("text, shown", [
    ("SELECT nope FROM Owner", "error: OperationalError: no such column: nope"),
    ("DROP TABLE Owner", "forbidden:"),
    ("SELECT 1; DROP TABLE Owner", "forbidden: one statement at a time"),
    ("ATTACH DATABASE '/etc/passwd' AS x", "forbidden:"),
    ("PRAGMA table_info(Owner)", "forbidden:"),
    ("the owners, please", "error: no SQL query found"),
    ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "over budget:"),
])
def test_what_the_model_may_not_do_is_shown_and_nothing_is_written(bundle_env, text, shown):
    before = _sha(_database(bundle_env))
    ep = scoring_episode.Episode(ROW)
    seen = ep.explore(text)
    assert seen.startswith(shown), seen
    assert _sha(_database(bundle_env)) == before and ep.steps <= DEFAULT_LIMITS.explore_steps


def test_the_episode_s_budgets_of_calls_and_work_hold(bundle_env):
    tight = DEFAULT_LIMITS.replace(explore_calls=3, explore_steps=2_000_000, episode_steps=3_000_000)
    ep = scoring_episode.Episode(ROW, limits=tight)
    loop = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    first = ep.explore(loop)
    assert first.startswith("over budget:") and ep.steps == 2_000_000
    second = ep.explore(loop)  # what is left of the episode's work, not a call's
    assert second.startswith("over budget:") and ep.steps == 3_000_000
    assert ep.explore("SELECT 1").startswith("no query run: this episode's 3,000,000 units of work are used")
    calls = scoring_episode.Episode(ROW, limits=tight)
    for _ in range(3):
        assert calls.explore("SELECT 1").startswith("1 row")
    assert calls.explore("SELECT 1").startswith("no query run: this episode's 3 queries are used")


def test_a_long_result_is_cut_to_its_rows_and_characters(bundle_env):
    small = DEFAULT_LIMITS.replace(explore_rows=2, explore_chars=60)
    seen = scoring_episode.Episode(ROW, limits=small).explore(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50) SELECT x, 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy' FROM c")
    head = seen.split("\n(")[0]
    assert seen.startswith("50 rows (the first 2 shown)") and "... (cut at 60 characters)" in head
    assert len(head) <= 60 + len("\n... (cut at 60 characters)")


def _episode_texts(root: str) -> list[str]:
    import os
    os.environ["TRAINER_BUNDLE_ROOT"] = root
    from bundle.scoring import episode
    ep = episode.Episode(ROW)
    texts = [ep.explore(q) for q in ("SELECT * FROM Owner", "SELECT name FROM sqlite_master", "SELECT nope",
                                      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c")]
    answer = ep.submit(GOLD + " ")
    return texts + [repr((answer.value, answer.verdict.outcome, answer.verdict.detail, ep.steps))]


def test_the_same_episode_gives_the_same_observations_in_another_process(bundle_env):
    here = _episode_texts(str(bundle_env))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply(_episode_texts, (str(bundle_env),))
    assert here == there and "over budget" in here[3]


def test_the_answer_is_scored_as_the_one_shot_reward_and_grader_score_it(prepared_sample, monkeypatch):
    """Every eval row of the prepared sample (its neighbours, its searches): the gold, a near miss,
    a wrong answer and an empty one; the reward's episode pays what ``reward.compute_score`` pays,
    the grader's episode what ``grader.compute_score`` gives, after exploring or not."""
    root = prepared_sample / "bundle"
    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(root))
    rows = [json.loads(line) for line in (prepared_sample / "data" / "eval.jsonl").read_text().splitlines()]
    checked = 0
    for n, row in enumerate(rows):
        gold = row["messages"][-1]["content"]
        trainer_row = {"prompt": row["messages"][:-1], "ground_truth": gold}
        for answer in (gold, gold.rstrip(";") + " LIMIT 1", "SELECT 1", ""):
            one_shot = reward.compute_score(solution_str=answer, ground_truth=gold, extra_info={"prompt": row["messages"][:-1]})
            graded = grader.compute_score(solution_str=answer, ground_truth=gold, extra_info={"prompt": row["messages"][:-1]})
            ep = scoring_episode.Episode(trainer_row)
            if n % 2:
                ep.explore(gold)
            assert ep.submit(answer).value == one_shot, (row, answer)
            as_grader = scoring_episode.Episode(trainer_row, caller="grader")
            assert as_grader.submit(answer).value == graded, (row, answer)
            checked += 1
    assert checked == 4 * len(rows) >= 40


def test_a_second_submission_keeps_the_first(bundle_env):
    ep = scoring_episode.Episode(ROW)
    assert ep.submit(GOLD).value == 1.0 and ep.submit("SELECT 2").value == 1.0
    assert ep.explore("SELECT 1") == "the episode is over: an answer was submitted"


def test_a_row_without_a_gold_is_refused_naming_what_to_pass(bundle_env):
    with pytest.raises(CallArgumentsError, match="no gold query"):
        scoring_episode.Episode({"db_id": "pets_club"})


def test_trl_s_environment_offers_two_tools_and_pays_get_reward(bundle_env):
    env = environment.trl_environment()
    assert env.reset(**ROW, prompt=[{"role": "user", "content": "How many owners?"}]) is None
    assert env.query("SELECT count(*) FROM Owner").startswith("1 row")
    assert env.get_reward() == 0.0  # nothing submitted yet: what no answer is paid
    env.reset(**ROW)
    assert env.submit(GOLD) == "answer recorded; the episode is over" and env.get_reward() == 1.0
    env.reset(**ROW)
    env.submit("SELECT count(*) FROM Owner WHERE 0")
    assert env.get_reward() == 0.0
    import pickle
    again = pickle.loads(pickle.dumps(environment.trl_environment))
    assert type(again()).__name__ == "SpiderSQLEnvironment"


def test_the_reward_function_reads_the_environments_and_a_text_answer(bundle_env):
    envs = [environment.trl_environment() for _ in range(3)]
    for env in envs:
        env.reset(**ROW)
    envs[0].submit(GOLD)
    completions = [[{"role": "assistant", "content": "done"}], [{"role": "assistant", "content": GOLD}],
                   [{"role": "assistant", "content": "no idea"}]]
    assert environment.trl_environment_reward(completions, environments=envs) == [1.0, 1.0, 0.0]
    with pytest.raises(CallArgumentsError):
        environment.trl_environment_reward(completions)


def test_the_rows_of_the_sample_episode_in_their_own_databases(bundle_env):
    for row in sample_rows("validation")[:5]:
        ep = scoring_episode.Episode({"ground_truth": row["query"], "db_id": row["db_id"]})
        assert ep.db_id == row["db_id"] and ep.submit(row["query"]).value == 1.0


def test_prepare_writes_the_rl_prompts_in_the_multi_turn_form_and_the_rest_as_before(prepared_sample, tmp_path):
    from harness.cli import main
    out = tmp_path / "out"
    assert main(["prepare", "--sample", "--multi-turn", "tags", "--output", str(out)]) == 0
    rl = [json.loads(line) for line in (out / "data" / "rl.jsonl").read_text().splitlines()]
    before = [json.loads(line) for line in (prepared_sample / "data" / "rl.jsonl").read_text().splitlines()]
    assert [r["messages"][1:] for r in rl] == [r["messages"][1:] for r in before]  # the question and the gold
    for mine, theirs in zip(rl, before):
        lines, old = mine["messages"][0]["content"].split("\n"), theirs["messages"][0]["content"].split("\n")
        assert lines[1] == scoring_episode.TAG_INSTRUCTIONS and lines[0] == old[0] and lines[2:] == old[2:]
    for split in ("train", "eval"):
        assert (out / "data" / f"{split}.jsonl").read_bytes() == (prepared_sample / "data" / f"{split}.jsonl").read_bytes()
    summary = json.loads((out / "prepare-summary.json").read_text())
    assert summary["multi_turn"] == {"splits": ["rl"], "form": "tags"}
    row = rl[0]
    episode = scoring_episode.Episode({"prompt": row["messages"][:-1], "ground_truth": row["messages"][-1]["content"]},
                                      root=str(out / "bundle"))
    assert episode.explore(row["messages"][-1]["content"]).split("\n")[0].endswith(("row", "rows", "shown)"))
    assert episode.submit(row["messages"][-1]["content"]).value == 1.0
