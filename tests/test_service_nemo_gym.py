"""The grader service as a NeMo Gym resources server (harness/service/nemo_gym.py).

The bodies are NeMo Gym 0.7's: a task row of ``export --format nemo-gym`` with the model's OpenAI
Responses object, posted to ``/verify`` the way its ``ServerClient`` posts (aiohttp, ``json=``), with
the token in the path form; then ``/aggregate_metrics`` on the answers, as its rollout collection
does. NeMo Gym's own client and models make the same round trip in its venv (``make setup-nemo-gym``).
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
from pathlib import Path

import pytest

from conftest import _unavailable, require_modules
from harness.common.bundle_loader import load_bundle
from harness.common.completions import read_completions
from harness.common.rows import read_split
from harness.common.trainer_rows import nemo_gym_row
from harness.emulator.grader_job import grade_rows, grade_split
from harness.loadtest.local_server import LocalServer
from harness.service import nemo_gym
from harness.service.settings import ServiceSettings
from test_service import SAMPLE_COMPLETIONS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=2)) as running:
        yield running


@pytest.fixture(scope="module")
def eval_rows(prepared_sample):
    return read_split(prepared_sample / "data" / "eval.jsonl", "eval")


def responses_object(text: str, i: int = 0) -> dict:
    """What NeMo Gym's policy model server returns: an OpenAI Responses object holding ``text``."""
    return {"id": f"resp_{i}", "created_at": 0, "model": "policy", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "output": [{"type": "reasoning", "id": f"rs_{i}", "summary": []},
                       {"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def verify_body(row, text: str, task: int = 0, rollout: int = 0, db_ids=None) -> dict:
    return {**nemo_gym_row(row, db_ids), "response": responses_object(text, rollout),
            "_ng_task_index": task, "_ng_rollout_index": rollout}


def post_like_nemo_gym(url: str, body: dict) -> dict:
    """NeMo Gym's ServerClient.post: aiohttp, ``json=``, ``raise_for_status``."""
    require_modules("aiohttp")
    import aiohttp

    async def post() -> dict:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
            async with session.post(url, json=body) as response:
                response.raise_for_status()
                return await response.json()
    return asyncio.run(post())


def test_every_eval_row_is_verified_exactly_as_grade_grades_it(server, eval_rows, sample_zip, tmp_path):
    completions = read_completions(SAMPLE_COMPLETIONS).one_per_row([r.id for r in eval_rows])
    with load_bundle(sample_zip, tmp_path) as loaded:  # in-process, the grading path of `grade`
        expected = grade_split(loaded, eval_rows, completions)
    url = f"{server.url}/t/{server.token}/verify"
    answers = [post_like_nemo_gym(url, verify_body(row, text, i)) for i, (row, text) in enumerate(zip(eval_rows, completions))]
    got = [(a["reward"], a["spider_match"], a["spider_outcome"], a["spider_explanation"], a["spider_sql"]) for a in answers]
    assert got == [(e.score, e.score, e.outcome, e.detail, e.sql) for e in expected]
    assert 0 < [a["reward"] for a in answers].count(1.0) < len(answers)  # right and wrong answers both went through
    for row, answer in zip(eval_rows, answers):  # the body comes back with the verdict added
        assert answer["row_id"] == row.id and answer["expected"] == row.gold and answer["mask_sample"] is False
        assert answer["responses_create_params"] == {"input": list(row.prompt)}


def test_the_text_is_the_response_s_output_text(server, eval_rows):
    row = eval_rows[0]
    parts = verify_body(row, "")
    parts["response"]["output"][1]["content"] = [{"type": "output_text", "text": "```sql\n" + row.gold[:10]},
                                                 {"type": "refusal", "refusal": "no"},
                                                 {"type": "output_text", "text": row.gold[10:] + "\n```"}]
    answer = server.request("POST", "/verify", parts).json
    assert (answer["reward"], answer["spider_outcome"]) == (1.0, "match")
    empty = server.request("POST", "/verify", verify_body(row, "")).json
    assert (empty["reward"], empty["spider_outcome"], empty["mask_sample"]) == (0.0, "no_query", False)


def test_a_row_the_bundle_cannot_score_is_a_failure_never_a_score(server, eval_rows):
    body = verify_body(eval_rows[0], eval_rows[0].gold)
    body["expected"] = "SELECT 'a gold this bundle never saw'"
    answer = server.request("POST", "/verify", body)
    assert answer.status == 200
    got = answer.json
    assert got["mask_sample"] is True and got["failure_kind"] == "spider:stale_bundle"
    assert "not stored in this bundle" in got["failure_reason"] and "spider_match" not in got


@pytest.mark.parametrize("body, says", [
    ({"responses_create_params": {"input": "q"}, "expected": "SELECT 1"}, "no 'response'"),
    ({"response": {"output": []}, "expected": "SELECT 1"}, "'responses_create_params'"),
    ({"responses_create_params": {"input": "q"}, "response": {"output": []}}, "no gold query"),
    ({"responses_create_params": {"input": "q"}, "response": {"output": "text"}, "expected": "SELECT 1"}, "Responses object"),
    ([1, 2], "verify request"),
])
def test_a_body_of_another_shape_is_a_422_naming_what_is_missing(server, body, says):
    answer = server.request("POST", "/verify", body)
    assert answer.status == 422 and answer.json["error"] == "InvalidNeMoGymRequest" and says in answer.json["message"]
    assert "reward" not in answer.json and "score" not in answer.json


def test_the_token_rules_hold_on_the_new_routes(server, eval_rows):
    body = verify_body(eval_rows[0], eval_rows[0].gold)
    for path in ("/verify", "/aggregate_metrics", "/seed_session", "/reverify_mode"):
        method = "GET" if path == "/reverify_mode" else "POST"
        refused = server.request(method, path, body if method == "POST" else None, headers={"Authorization": ""})
        assert refused.status == 401, path
    assert server.request("POST", f"/t/{server.token}/verify", body, headers={"Authorization": ""}).json["reward"] == 1.0


def test_session_calls_keep_nothing_and_reverify_is_stateless(server, eval_rows):
    assert server.request("GET", "/reverify_mode").json == "stateless"
    assert server.request("POST", "/seed_session", nemo_gym_row(eval_rows[0])).json == {}
    closed = server.request("POST", "/close_session", {"resources_session_id": "s1", "episode_id": "e1"})
    assert closed.json == {"resources_session_id": "s1"}


def test_aggregate_metrics_give_accuracy_pass_at_k_and_majority_at_k(server, eval_rows):
    # Two tasks, four rollouts each: task 0 right 1 of 4 (the right one last), task 1 right 3 of 4.
    rows = eval_rows[:2]
    texts = [["SELECT 1", "SELECT 2", "SELECT 1", rows[0].gold], [rows[1].gold, "SELECT 9", rows[1].gold, rows[1].gold]]
    answers = [server.request("POST", "/verify", verify_body(row, text, t, r)).json
               for t, row in enumerate(rows) for r, text in enumerate(texts[t])]
    unscored = verify_body(rows[0], rows[0].gold, 0, 4)
    unscored["expected"] = "SELECT 'not in the bundle'"
    answers.append(server.request("POST", "/verify", unscored).json)
    stripped = [{k: v for k, v in a.items() if k not in ("response", "responses_create_params")} for a in answers]
    metrics = post_like_nemo_gym(f"{server.url}/t/{server.token}/aggregate_metrics", {"verify_responses": stripped})
    groups = {g["_ng_task_index"]: g for g in metrics["group_level_metrics"]}
    assert groups[0]["mean/spider_match"] == 0.25 and groups[1]["mean/spider_match"] == 0.75
    assert groups[0]["coverage"] == 0.8 and groups[0]["num_scored"] == 4
    assert groups[0]["pass@1/spider_match"] == 25.0 and groups[0]["pass@4/spider_match"] == 100.0
    assert math.isclose(groups[0]["pass@2/spider_match"], 50.0) and math.isclose(groups[1]["pass@2/spider_match"], 100.0)
    assert groups[0]["majority@4/spider_match"] == 0.0  # "SELECT 1" twice outvotes the gold once
    assert groups[1]["majority@4/spider_match"] == 100.0 and groups[1]["majority@1/spider_match"] == 100.0
    overall = metrics["agent_metrics"]
    assert overall["mean/spider_match"] == 0.5 and overall["failures/spider:stale_bundle"] == 1
    assert overall["num_rollouts"] == 9 and overall["num_scored"] == 8
    assert metrics["key_metrics"]["mean/spider_match"] == 0.5


def test_pass_at_k_is_the_unbiased_estimate():
    assert nemo_gym.pass_at_k(4, 0, 2) == 0.0 and nemo_gym.pass_at_k(4, 4, 1) == 1.0
    assert math.isclose(nemo_gym.pass_at_k(5, 2, 2), 1 - math.comb(3, 2) / math.comb(5, 2))


def test_export_writes_nemo_gym_task_rows(prepared_sample, tmp_path, capsys):
    from harness.cli import main
    target = tmp_path / "tasks.jsonl"
    assert main(["export", "--format", "nemo-gym", "--split", "eval", "--data", str(prepared_sample),
                 "--output", str(target)]) == 0
    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    rows = read_split(prepared_sample / "data" / "eval.jsonl", "eval")
    assert [line["row_id"] for line in lines] == [r.id for r in rows]
    assert all(line["responses_create_params"]["input"] == list(r.prompt) and line["expected"] == r.gold
               for line, r in zip(lines, rows))
    assert all(line["db_id"] for line in lines) and "nemo-gym rows of the eval split" in capsys.readouterr().out


NEMO_GYM_PYTHON = ROOT / ".venv-nemo-gym" / "bin" / "python"


@pytest.mark.integration
def test_nemo_gym_s_own_client_and_models_get_grade_s_verdicts(server, eval_rows, prepared_sample, sample_zip, tmp_path):
    # NeMo Gym 0.7 declares Python 3.13.14 or later; `make setup-nemo-gym` installs it from PyPI past that
    # check into .venv-nemo-gym (its /verify path runs on 3.11), where tests/nemo_gym_runner.py runs.
    if not NEMO_GYM_PYTHON.is_file():
        _unavailable("NeMo Gym is not installed: `make setup-nemo-gym` makes .venv-nemo-gym")
    from harness.cli import main
    tasks = tmp_path / "tasks.jsonl"
    assert main(["export", "--format", "nemo-gym", "--split", "eval", "--data", str(prepared_sample),
                 "--output", str(tasks)]) == 0
    completions = read_completions(SAMPLE_COMPLETIONS).one_per_row([r.id for r in eval_rows])
    (tmp_path / "answers.json").write_text(json.dumps({r.id: c for r, c in zip(eval_rows, completions)}))
    with load_bundle(sample_zip, tmp_path) as loaded:
        expected = grade_split(loaded, eval_rows, completions)
    lines = tasks.read_text(encoding="utf-8").splitlines()  # one more task: a gold this bundle never saw
    stale = {**json.loads(lines[0]), "row_id": "stale-row", "expected": "SELECT 'a gold this bundle never saw'"}
    tasks.write_text("\n".join([*lines, json.dumps(stale)]) + "\n", encoding="utf-8")
    (tmp_path / "answers.json").write_text(json.dumps({"stale-row": "SELECT 1",
                                                       **{r.id: c for r, c in zip(eval_rows, completions)}}))
    done = subprocess.run([str(NEMO_GYM_PYTHON), str(ROOT / "tests" / "nemo_gym_runner.py"), server.url, server.token,
                           str(tasks), str(tmp_path / "answers.json"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads((tmp_path / "out.json").read_text())
    *scored, unscored = found["verified"]
    got = [(v["row_id"], v["reward"], v["spider_outcome"], v["spider_explanation"], v["spider_sql"]) for v in scored]
    assert got == [(r.id, e.score, e.outcome, e.detail, e.sql) for r, e in zip(eval_rows, expected)]
    assert unscored["mask_sample"] is True and unscored["failure_kind"] == "spider:stale_bundle"
    assert found["metrics"]["agent_metrics"]["failures/spider:stale_bundle"] == 1
    accuracy = sum(e.score for e in expected) / len(expected)
    assert math.isclose(found["metrics"]["key_metrics"]["mean/spider_match"], accuracy)
    assert math.isclose(found["metrics"]["key_metrics"]["pass@1/spider_match"], 100 * accuracy)


# -- the Gymnasium routes: the multi-turn episode (service.gymnasium) -------------------------------------------

def _gym(server, path: str, body, cookie: str | None = None):
    headers = {"Cookie": f"spider_episode={cookie}"} if cookie else {}
    return server.request("POST", path, body, headers=headers)


def _turn(*items) -> dict:
    return {"response": {"output": list(items)}}


def _query(sql: str, n: int = 1) -> dict:
    return {"type": "function_call", "name": "query", "arguments": json.dumps({"sql": sql}), "call_id": f"c{n}"}


def test_reset_names_the_episode_in_a_cookie_and_steps_keep_its_budget(server, eval_rows):
    row = eval_rows[0]
    task = nemo_gym_row(row)
    reset = _gym(server, "/reset", task)
    assert reset.status == 200 and reset.json["observation"] is None
    cookie = reset.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert cookie == reset.json["info"]["spider_episode"]
    loop = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    seen = [_gym(server, "/step", {**task, **_turn(_query(loop, n))}, cookie).json for n in range(5)]
    outputs = [json.loads(s["info"]["tool_outputs"][0]["output"]) for s in seen]
    assert [o.split(":")[0] for o in outputs] == ["over budget"] * 4 + ["no query run"]
    assert all(s["terminated"] is False and s["reward"] == 0.0 for s in seen)
    wrong = _gym(server, "/step", {**task, **_turn({"type": "function_call", "name": "submit",
                                                     "arguments": json.dumps({"sql": "SELECT 'x'"}), "call_id": "s"})},
                 cookie).json
    assert wrong["terminated"] is True and wrong["reward"] == 0.0 and wrong["info"]["spider_outcome"] == "mismatch"
    again = _gym(server, "/step", {**task, **_turn(_query("SELECT 1"))}, cookie).json
    assert again["terminated"] is True and "already answered" in again["info"]["spider_over"]


def test_a_step_without_its_episode_or_a_reset_without_a_gold_is_refused(server, eval_rows):
    task = nemo_gym_row(eval_rows[0])
    assert _gym(server, "/step", {**task, **_turn(_query("SELECT 1"))}).status == 404
    assert _gym(server, "/step", {**task, **_turn(_query("SELECT 1"))}, "0" * 32).status == 404
    refused = _gym(server, "/reset", {k: v for k, v in task.items() if k != "expected"})
    assert refused.status == 422 and "no gold" in refused.json["message"]


@pytest.mark.integration
def test_nemo_gym_s_gymnasium_agent_runs_episodes_whose_rewards_are_grade_s(server, eval_rows, prepared_sample,
                                                                             sample_zip, tmp_path):
    if not NEMO_GYM_PYTHON.is_file():
        _unavailable("NeMo Gym is not installed: `make setup-nemo-gym` makes .venv-nemo-gym")
    rows = eval_rows[:4]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(nemo_gym_row(r)) + "\n" for r in rows), encoding="utf-8")
    done = subprocess.run([str(NEMO_GYM_PYTHON), str(ROOT / "tests" / "nemo_gym_gymnasium_runner.py"), server.url,
                           server.token, str(tasks), str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = json.loads((tmp_path / "out.json").read_text())["episodes"]
    answers = {"tools": lambda r: r.gold, "tags": lambda r: "SELECT 'no such answer'", "bare": lambda r: r.gold}
    with load_bundle(sample_zip, tmp_path) as loaded:
        finals = [answers[e["kind"]](r) for r in rows for e in episodes if e["row_id"] == r.id]
        expected = grade_rows(loaded, [r for r in rows for _ in answers], finals)
        episode = loaded.module("scoring.episode")
        first_look = [episode.Episode({"expected": r.gold, "input": list(r.prompt)}, root=str(loaded.root)).explore(r.gold)
                      for r in rows]
    assert [e["reward"] for e in episodes] == [v.score for v in expected] and len(episodes) == 12
    assert all(e["terminated"] for e in episodes) and {v.outcome for v in expected} == {"match", "mismatch"}
    assert [e["tool_outputs"] for e in episodes if e["kind"] == "tools"] == [[t] for t in first_look]
    assert all(e["observations"][0].startswith("<result>\n1 row\n1\n1\n") for e in episodes if e["kind"] == "tags")
