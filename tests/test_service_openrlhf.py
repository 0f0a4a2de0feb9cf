"""The grader service as OpenRLHF's remote reward (``--remote_rm_url http://HOST:PORT/t/TOKEN/openrlhf``).

The requests are made the way OpenRLHF's own clients make them: 0.11's
``SingleTurnAgentExecutor._fetch_rewards_via_http`` (aiohttp, ``session.post(url, json=payload)``,
one query a request) and 0.9's ``remote_rm_utils.request_api_wrapper`` (requests, ``json=data`` and
``Content-Type: application/json``, a micro-batch a request); neither sends an authorization header.
A query is the decoded prompt and response with the template's special tokens kept, a prompt the
chat-templated prompt, a label the TRL export's ``ground_truth`` (``--label_key ground_truth``).
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from conftest import require_modules
from harness.common.rows import read_split
from harness.loadtest.local_server import LocalServer
from harness.service import openrlhf
from harness.service.settings import ServiceSettings


def qwen_prompt(messages: list[dict]) -> str:
    """What ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` gives for Qwen2.5."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def server(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=2)) as running:
        yield running


@pytest.fixture(scope="module")
def payload(prepared_sample):
    """Four rollouts: the gold, a wrong query, the gold in a fence with prose, and a label no row has."""
    rows = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[:4]
    responses = [rows[0].gold, "SELECT 1", f"Here it is:\n```sql\n{rows[2].gold}\n```", rows[3].gold]
    prompts = [qwen_prompt(list(r.prompt)) for r in rows]
    labels = [r.gold for r in rows[:3]] + ["SELECT 'a gold this bundle never saw'"]
    return {"query": [p + r + "<|im_end|>" for p, r in zip(prompts, responses)], "prompts": prompts, "labels": labels}


def post_like_openrlhf_0_11(url: str, payload: dict) -> dict:
    require_modules("aiohttp")  # OpenRLHF 0.11's client (Ray and verl bring it)
    import aiohttp

    async def post() -> dict:
        timeout = aiohttp.ClientTimeout(total=180)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.post(url, json=payload) as response:
                response.raise_for_status()
                return await response.json()
    return asyncio.run(post())


def post_like_openrlhf_0_9(url: str, payload: dict) -> dict:
    require_modules("requests")  # OpenRLHF 0.9's client
    import requests
    response = requests.post(url=url, json=payload, headers={"Content-Type": "application/json"}, timeout=180)
    response.raise_for_status()
    return response.json()


def one_item(payload: dict, i: int) -> dict:
    return {key: values[i:i + 1] for key, values in payload.items()}


@pytest.mark.integration
def test_openrlhf_0_11_gets_one_reward_per_query_with_the_bundle_s_own_verdicts(server, payload):
    url = f"{server.url}/t/{server.token}/openrlhf"
    answers = [post_like_openrlhf_0_11(url, one_item(payload, i)) for i in range(4)]
    assert [a["rewards"][:1] for a in answers[:3]] == [[1.0], [0.0], [1.0]] and math.isnan(answers[3]["rewards"][0])
    assert [a["scores"] for a in answers[:3]] == [a["rewards"] for a in answers[:3]] and math.isnan(answers[3]["scores"][0])
    assert [a["outcomes"] for a in answers] == [["match"], ["mismatch"], ["match"], ["infrastructure_error"]]
    assert answers[3]["unscored"] == 1 and "not stored in this bundle" in answers[3]["explanations"][0]
    for answer in answers:  # numbers only, one per query, the same keys: OpenRLHF turns each into a tensor
        assert all(isinstance(v, list) and len(v) == 1 and v[0] in (0.0, 1.0) for v in answer["extra_logs"].values())
        assert answer["extra_logs"].keys() == answers[0]["extra_logs"].keys()
    assert answers[0]["extra_logs"]["spider/match"] == [1.0] and answers[1]["extra_logs"]["spider/mismatch"] == [1.0]
    assert answers[3]["extra_logs"]["spider/unscored/stale_bundle"] == [1.0] == answers[3]["extra_logs"]["spider/unscored"]


def test_openrlhf_0_9_sends_a_micro_batch_and_gets_the_same_answers_in_order(server, payload):
    url = f"{server.url}/t/{server.token}/openrlhf"
    answer = post_like_openrlhf_0_9(url, payload)
    assert answer["rewards"][:3] == answer["scores"][:3] == [1.0, 0.0, 1.0] and math.isnan(answer["rewards"][3])
    assert answer["extra_logs"]["spider/match"] == [1.0, 0.0, 1.0, 0.0]
    assert answer["extra_logs"]["spider/infrastructure_error"] == [0.0, 0.0, 0.0, 1.0]
    assert "not stored in this bundle" in answer["explanations"][3] and answer["unscored"] == 1
    for i, prompt in enumerate(payload["prompts"][:3]):  # the response is what follows the prompt
        alone = server.request("POST", "/grade", {"input": prompt, "output": payload["query"][i][len(prompt):],
                                                  "expected": payload["labels"][i]})
        assert alone.json["score"] == answer["rewards"][i]


def test_without_the_token_in_its_path_openrlhf_is_refused(server, payload):
    reply = server.request("POST", "/openrlhf", payload, headers={"Authorization": ""})
    assert reply.status == 401 and "rewards" not in reply.json
    wrong = server.request("POST", "/t/" + "x" * 43 + "/openrlhf", payload, headers={"Authorization": ""})
    assert wrong.status == 401


@pytest.mark.parametrize("body", [
    {"query": ["a"], "prompts": ["a", "b"], "labels": ["x"]},
    {"envelopes": []},
], ids=["prompts not one per query", "another endpoint's body"])
def test_a_request_of_another_shape_is_refused_whole(server, body):
    reply = server.request("POST", "/openrlhf", body)
    assert reply.status == 400 and reply.json["error"] == "InvalidOpenRLHFRequest" and "rewards" not in reply.json


def test_a_query_that_does_not_start_with_its_prompt_answers_for_itself(server, payload):
    body = {"query": ["Q: x A: SELECT 1", payload["query"][0]], "prompts": ["another prompt", payload["prompts"][0]],
            "labels": ["SELECT 1", payload["labels"][0]]}
    reply = server.request("POST", "/openrlhf", body)
    assert reply.status == 200 and math.isnan(reply.json["rewards"][0]) and reply.json["rewards"][1] == 1.0
    assert reply.json["outcomes"] == ["request_error", "match"] and "cannot be cut out" in reply.json["explanations"][0]
    assert reply.json["reasons"] == ["invalid_item", ""]
    assert reply.json["extra_logs"]["spider/unscored/invalid_item"] == [1.0, 0.0]


# -- what OpenRLHF does with the answer (openrlhf/utils/agent.py and trainer/ppo_utils/samples_generator.py,
# read in its 0.11 sources): it keeps `rewards`, `scores` and `extra_logs` of each answer, makes a tensor of
# each (one query a request), merges the experiences' extra_logs key by key and logs each key's mean; with
# dynamic filtering it drops a prompt whose group's mean score is not strictly inside its range. ------------

def test_an_unscored_row_is_masked_by_dynamic_filtering_and_its_reason_is_logged(server, payload):
    reply = server.request("POST", "/openrlhf", payload)
    assert reply.status == 200 and "NaN" in reply.text
    answer = json.loads(reply.text)  # as aiohttp's and requests' .json() read it: json.loads, which takes NaN
    scores = answer["scores"]
    assert all(isinstance(v, float) for v in scores)  # every entry a number: a tensor can be made of it
    assert math.isnan(scores[3]) and scores[:3] == [1.0, 0.0, 1.0]
    group_mean = sum(scores) / len(scores)
    for low, high in ((0.0, 1.0), (-0.01, 1.01)):  # DAPO's default range, and one that keeps every scored group
        assert not low < group_mean < high  # the group with the unscored answer is dropped: never paid
        assert low < sum(scores[:3]) / 3 < high  # the same group without it would be kept
    means = {key: sum(values) / len(values) for key, values in answer["extra_logs"].items()}
    assert means["spider/unscored"] == 0.25 and means["spider/unscored/stale_bundle"] == 0.25
    assert means["spider/infrastructure_error"] == 0.25 and means["spider/match"] == 0.5


def test_every_answer_has_the_same_extra_logs_keys(server, payload):
    """OpenRLHF merges extra_logs key by key over the batch and splits them by sample again: a key
    missing from one answer would make the lengths differ."""
    keys = {tuple(openrlhf.answer(results, server_outcomes).get("extra_logs")) for results, server_outcomes in [
        ([{"score": 1.0, "outcome": "match"}], ("match", "mismatch")),
        ([{"error": "WorkerTimeout", "outcome": "infrastructure_error", "message": "x"}], ("match", "mismatch")),
        ([{"error": "InvalidOpenRLHFItem", "outcome": "request_error", "message": "x"}], ("match", "mismatch")),
        ([{"score": 0.0, "outcome": "an outcome of a newer bundle"}], ("match", "mismatch")),
    ]}
    assert len(keys) == 1
    assert {f"spider/unscored/{code}" for code in openrlhf.REASONS} <= set(next(iter(keys)))


@pytest.mark.integration
def test_openrlhf_s_tensors_can_be_made_of_every_answer(server, payload):
    require_modules("torch")
    import torch
    url = f"{server.url}/t/{server.token}/openrlhf"
    for i in range(4):
        answer = post_like_openrlhf_0_11(url, one_item(payload, i))
        reward, score = torch.tensor([answer["rewards"]]), torch.tensor([answer["scores"]])  # as OpenRLHF does
        logs = {key: torch.tensor([value]) for key, value in answer["extra_logs"].items()}
        assert reward.shape == score.shape == (1, 1) and all(t.shape == (1, 1) for t in logs.values())
        assert bool(torch.isnan(score).any()) == (i == 3)
