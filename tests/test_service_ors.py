"""The grader service as an Open Reward Standard environment (harness/service/ors.py): the rl and eval
splits, a session per task, one ``submit`` tool whose reward is the bundle's.

The protocol tests speak HTTP as the ORS client does (``X-API-Key``, ``X-Session-ID``, server-sent
events); the integration test drives TRL's own ``trl.experimental.openreward.OpenRewardSpec`` (PyPI
``openreward`` underneath) against the served sample and compares every reward with ``grade``'s.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import require_modules
from harness.common.bundle_loader import load_bundle
from harness.common.completions import read_completions
from harness.common.rows import read_split
from harness.emulator.grader_job import grade_rows
from harness.loadtest.local_server import LocalServer
from harness.service import ors
from harness.service.settings import ServiceSettings
from test_service import SAMPLE_COMPLETIONS


@pytest.fixture(scope="module")
def server(sample_zip, prepared_sample):
    with LocalServer(sample_zip, ServiceSettings(workers=2), tasks=prepared_sample / "data") as running:
        yield running


def events(body: bytes) -> list[tuple[str, str]]:
    """A server-sent event stream as the ORS client reads it: (event, data) pairs."""
    out = []
    for block in body.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line]
        if not lines:
            continue
        assert all(":" in line for line in lines), block  # the client's parser needs a ':' on every line
        name = next(line[len("event: "):] for line in lines if line.startswith("event: "))
        data = "\n".join(line[len("data: "):] for line in lines if line.startswith("data: "))
        out.append((name, data))
    return out


def ors_request(server, method: str, path: str, body=None, sid: str | None = None, key: str | None = None):
    headers = {"Authorization": "", "X-API-Key": server.token if key is None else key}
    if sid is not None:
        headers["X-Session-ID"] = sid
    return server.request(method, path, body, headers=headers)


def open_session(server, split: str, index: int) -> str:
    reply = ors_request(server, "POST", "/create_session", {})
    assert reply.status == 200 and reply.headers.get("content-type") == ors.STREAM_TYPE
    found = events(reply.text.encode())
    assert [name for name, _ in found] == ["task_id", "end"]
    sid = found[0][1]
    created = ors_request(server, "POST", "/create", {"split": split, "index": index}, sid=sid)
    assert created.status == 200, created.text
    return sid


def submit(server, sid: str, sql, name: str = "submit") -> dict:
    reply = ors_request(server, "POST", "/call", {"name": name, "input": {"sql": sql} if sql is not None else {}}, sid=sid)
    assert reply.status == 200 and reply.headers.get("content-type") == ors.STREAM_TYPE, reply.text
    found = events(reply.text.encode())
    assert [n for n, _ in found] == ["task_id", "end"]
    return json.loads(found[-1][1])


def test_discovery_lists_the_splits_the_tool_and_the_tasks_without_their_gold(server, prepared_sample):
    rows = {s: read_split(prepared_sample / "data" / f"{s}.jsonl", s) for s in ("rl", "eval")}
    assert ors_request(server, "GET", "/splits").json == [{"name": "train", "type": "train"}, {"name": "eval", "type": "test"}]
    tools = ors_request(server, "GET", "/tools").json["tools"]
    assert [t["name"] for t in tools] == ["query", "submit"]  # the sample's bundle has the multi-turn episode
    assert all(set(t) == {"name", "description", "input_schema"} for t in tools)
    assert ors_request(server, "POST", "/num_tasks", {"split": "train"}).json == {"num_tasks": len(rows["rl"])}
    listed = ors_request(server, "POST", "/tasks", {"split": "eval"}).json
    assert [t["row_id"] for t in listed["tasks"]] == [r.id for r in rows["eval"]] and listed["env_name"] == "spider"
    assert all(set(t) == {"row_id", "split", "db_id"} for t in listed["tasks"])  # never the gold
    one = ors_request(server, "POST", "/spider/task", {"split": "train", "index": 1}).json  # the prefixed form too
    assert one == {"task": listed["tasks"][0] | {"row_id": rows["rl"][1].id, "split": "rl",
                                                  "db_id": one["task"]["db_id"]}, "env_name": "spider"}


def test_a_session_gives_the_row_s_prompt_and_one_submit_ends_it_with_the_bundle_s_reward(server, prepared_sample):
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    sid = open_session(server, "eval", 0)
    prompt = ors_request(server, "GET", "/prompt", sid=sid).json
    assert len(prompt) == 1 and prompt[0]["type"] == "text"
    assert all(str(m["content"]) in prompt[0]["text"] for m in row.prompt) and row.gold not in prompt[0]["text"]
    assert ors_request(server, "POST", "/ping", sid=sid).json == {"status": "ok"}
    done = submit(server, sid, row.gold)
    assert done["ok"] is True and done["output"]["reward"] == 1.0 and done["output"]["finished"] is True
    assert done["output"]["metadata"]["outcome"] == "match" and done["output"]["metadata"]["match"] == 1.0
    again = submit(server, sid, row.gold)
    assert again == {"ok": False, "error": "the episode is over: one submit a session", "reason": "episode_finished"}
    assert ors_request(server, "POST", "/delete", sid=sid).status == 200
    assert ors_request(server, "GET", "/prompt", sid=sid).status == 404


def test_a_wrong_answer_ends_with_zero_and_says_why(server):
    done = submit(server, open_session(server, "eval", 1), "SELECT 1")
    assert done["output"]["reward"] == 0.0 and done["output"]["metadata"]["outcome"] == "mismatch"
    assert done["output"]["blocks"][0]["text"].startswith("Graded: mismatch")


def test_a_tool_call_that_cannot_run_is_the_call_s_own_error_and_the_episode_goes_on(server, prepared_sample):
    sid = open_session(server, "train", 0)
    assert submit(server, sid, "SELECT 1", name="explore")["reason"] == "not_found"
    assert submit(server, sid, None, name="query")["reason"] == "input_validation"
    assert submit(server, sid, None)["reason"] == "input_validation"
    row = read_split(prepared_sample / "data" / "rl.jsonl", "rl")[0]
    assert submit(server, sid, row.gold)["output"]["reward"] == 1.0  # still open after both


@pytest.mark.parametrize("body, status, says", [
    ({"split": "test", "index": 0}, 400, "Invalid split"),
    ({"split": "eval", "index": 10_000}, 400, "Invalid index"),
    ({"split": "eval", "index": "0"}, 400, "Invalid index"),
])
def test_a_bad_create_is_an_http_error_with_detail(server, body, status, says):
    sid = events(ors_request(server, "POST", "/create_session", {}).text.encode())[0][1]
    reply = ors_request(server, "POST", "/create", body, sid=sid)
    assert reply.status == status and says in reply.json["detail"]


def test_an_unknown_session_is_a_404_and_the_token_is_needed(server):
    assert ors_request(server, "GET", "/prompt", sid="no-such-session").status == 404
    assert ors_request(server, "GET", "/tools", key="wrong-" + "x" * 40).status == 401
    assert ors_request(server, "GET", "/tools", key="").status == 401
    assert server.request("GET", "/tools").status == 200  # the Bearer header works as everywhere


def test_sessions_are_shared_by_the_worker_processes(server, prepared_sample):
    rows = read_split(prepared_sample / "data" / "rl.jsonl", "rl")
    rewards = [submit(server, open_session(server, "train", i % len(rows)), rows[i % len(rows)].gold)["output"]["reward"]
               for i in range(12)]  # each request may land on either worker
    assert rewards == [1.0] * 12


def test_a_row_the_bundle_cannot_score_ends_without_a_reward(sample_zip, prepared_sample, tmp_path, monkeypatch):
    tasks = tmp_path / "data"
    tasks.mkdir()
    lines = (prepared_sample / "data" / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["messages"][-1]["content"] = "SELECT 'a gold this bundle never saw'"
    (tasks / "eval.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    with LocalServer(sample_zip, ServiceSettings(workers=1), tasks=tasks) as running:
        done = submit(running, open_session(running, "eval", 0), "SELECT 1")
        assert done["ok"] is True and done["output"]["reward"] is None and done["output"]["finished"] is True
        assert done["output"]["metadata"]["unscored"] == "stale_bundle"
        assert ors_request(running, "GET", "/splits").json == [{"name": "eval", "type": "test"}]  # no rl split given
        if importlib.util.find_spec("openreward") is not None:  # and TRL's client reads it as no reward
            _client_environment(monkeypatch, running)
            second_gold = json.loads(lines[1])["messages"][-1]["content"]
            assert _rewards_through_trl(running, "eval", ["SELECT 1", second_gold], [0, 1]) == [None, 1.0]


def test_without_the_splits_the_routes_say_how_to_serve_them(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=1)) as running:
        reply = ors_request(running, "GET", "/tools")
        assert reply.status == 404 and "--tasks" in reply.json["detail"]


def _client_environment(monkeypatch, server) -> None:
    monkeypatch.setenv("OPENREWARD_SESSION_URL", server.url)  # else the client prefixes the host with "sessions."
    monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _rewards_through_trl(server, split: str, answers: list[str], indices: list[int]) -> list:
    """Each answer submitted through TRL's OpenRewardSpec environment on the task of its index; the rewards."""
    from trl.experimental.openreward import OpenRewardSpec
    spec = OpenRewardSpec(server.url, split=split, api_key=server.token, discover_task_tools=False)
    rewards = []
    for answer, index in zip(answers, indices):
        env = spec.environment_factory()
        try:
            env.reset(task_index=index)
            env.submit(sql=answer)
            rewards += spec.reward_funcs(environments=[env])
        finally:
            env._close()
    return rewards


def _episode(loaded, row):
    """The row's episode in this process, as the bundle's environment runs it."""
    return loaded.module("scoring.episode").Episode({"input": list(row.prompt), "expected": row.gold, "row_id": row.id},
                                                    root=str(loaded.root))


QUERIES = ("SELECT * FROM sqlite_master", "SELECT nope", "DROP TABLE x",
           "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c")


def test_the_query_tool_shows_what_the_episode_shows_in_one_process_and_keeps_its_budgets(server, prepared_sample,
                                                                                          sample_zip, tmp_path):
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[2]
    sid = open_session(server, "eval", 2)
    with load_bundle(sample_zip, tmp_path) as loaded:
        here = _episode(loaded, row)
        expected = [here.explore(q) for q in QUERIES + (row.gold,) * 5]  # 9 calls: the 9th is refused
    seen = []
    for query in QUERIES + (row.gold,) * 5:
        done = submit(server, sid, query, name="query")
        assert done["ok"] and done["output"]["finished"] is False and done["output"]["reward"] is None
        seen.append(done["output"]["blocks"][0]["text"])
    assert seen == expected and seen[-1].startswith("no query run: this episode's 8 queries are used")
    assert "over budget" in seen[3] and submit(server, sid, row.gold)["output"]["reward"] == 1.0
    assert submit(server, sid, row.gold, name="query")["reason"] == "episode_finished"


def test_concurrent_queries_of_one_episode_never_pass_its_budgets(server):
    from concurrent.futures import ThreadPoolExecutor
    sid = open_session(server, "eval", 0)
    loop = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    with ThreadPoolExecutor(6) as pool:
        done = list(pool.map(lambda _: submit(server, sid, loop, name="query"), range(12)))
    texts = [d["output"]["blocks"][0]["text"] for d in done]
    ran = [t for t in texts if t.startswith("over budget")]
    assert len(ran) == 4 and all(t.startswith("no query run") for t in texts if t not in ran)  # 4 x 5M = the 20M
    assert max(d["output"]["metadata"]["units"] for d in done) == 20_000_000


@pytest.mark.integration
def test_trl_s_open_reward_spec_scores_every_row_as_grade_does(server, prepared_sample, sample_zip, tmp_path, monkeypatch):
    require_modules("openreward", "trl", "datasets")
    _client_environment(monkeypatch, server)
    from trl.experimental.openreward import OpenRewardSpec
    for split, name in (("eval", "eval"), ("rl", "train")):
        rows = read_split(prepared_sample / "data" / f"{split}.jsonl", split)
        if split == "eval":
            answers = read_completions(SAMPLE_COMPLETIONS).one_per_row([r.id for r in rows])
        else:  # the gold, a wrong query, the gold in prose, in turns
            answers = [[r.gold, "SELECT 1", f"It is:\n```sql\n{r.gold}\n```"][i % 3] for i, r in enumerate(rows)]
        (tmp_path / split).mkdir()
        with load_bundle(sample_zip, tmp_path / split) as loaded:
            expected = grade_rows(loaded, rows, answers)  # the rows of `grade` (any split)
        spec = OpenRewardSpec(server.url, split=name, api_key=server.token, discover_task_tools=False)
        dataset = spec.train_dataset
        assert [d["row_id"] for d in dataset] == [r.id for r in rows]
        rewards, finished = [], []
        for i, answer in enumerate(answers):
            env = spec.environment_factory()
            try:
                prompt = env.reset(task_index=i)
                assert str(rows[i].prompt[-1]["content"]) in prompt
                if i % 2:  # a look at the data first: TRL binds the query tool too
                    assert env.query(sql=rows[i].gold).split("\n")[0].endswith(("row", "rows", "shown)"))
                env.submit(sql=answer)
                rewards += spec.reward_funcs(environments=[env])
                finished.append(env.finished)
            finally:
                env._close()
        assert rewards == [e.score for e in expected] and all(finished)
        assert 0 < rewards.count(1.0) < len(rewards) or split == "rl"
