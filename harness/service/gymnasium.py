"""NeMo Gym's Gymnasium contract: the multi-turn episode behind ``/reset`` and ``/step``.

NeMo Gym 0.7's ``gymnasium_agent`` (resources_servers/gymnasium) runs an episode as: POST the task row
to ``/reset`` (the row's fields and ``responses_create_params``), then for each model turn POST the
row with the model's ``response`` (an OpenAI Responses object) to ``/step``, until the answer says
``terminated``; the episode's reward is the sum of the steps' rewards. The rows are
``export --format nemo-gym``'s. Here:

* ``/reset`` opens an episode (service.sessions) holding the row's gold and hints, and names it in
  a cookie (``spider_episode``; the agent sends the cookies ``/reset`` set with every ``/step``);
  no observation is added to the prompt;
* a turn's ``function_call`` items named ``query`` run on the row's database (the bundle's
  ``scoring.episode``, its budgets kept in the session) and come back as ``info.tool_outputs``, as
  the agent feeds tool outputs back; a ``submit`` call, or a turn with no call (its text, read with
  the tags ``<query>`` / ``<answer>`` as ``scoring.episode.read_action`` reads them: a query tag is
  explored and its result is the next observation), is the answer;
* the answer is graded as ``/verify`` grades the same text: ``reward`` what the bundle's reward
  shape pays for the grader's outcome, ``terminated`` true, ``info`` holding ``spider_match``,
  ``spider_outcome``, ``spider_explanation``, ``spider_sql``. A row the bundle cannot score ends the
  episode with reward 0.0 and ``info.mask_sample`` true, ``failure_kind`` ``spider:<reason>``.

>>> calls_of({"output": [{"type": "function_call", "name": "query", "arguments": '{"sql": "SELECT 1"}',
...                       "call_id": "c1"}]})
[('query', 'SELECT 1', 'c1')]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

from harness.service import nemo_gym, openrlhf

RESET_PATH = "/reset"
STEP_PATH = "/step"
COOKIE = "spider_episode"
QUERY, SUBMIT = "query", "submit"


def episode_row(body: Any) -> dict[str, Any]:
    """The row an episode is scored on: the gold (``expected``...), its hints and the prompt;
    RequestShapeError when the body has no gold."""
    if not isinstance(body, dict):
        raise nemo_gym.RequestShapeError("the body must be a JSON object: the task row")
    gold = next((body[f] for f in nemo_gym.GOLD_FIELDS if isinstance(body.get(f), str) and body[f].strip()), None)
    if gold is None:
        raise nemo_gym.RequestShapeError(f"the row has no gold: give one of {', '.join(nemo_gym.GOLD_FIELDS)}")
    row: dict[str, Any] = {"expected": gold}
    params = body.get("responses_create_params")
    if isinstance(params, dict) and params.get("input") is not None:
        row["input"] = params["input"]
    row.update({k: body[k] for k in nemo_gym.HINT_FIELDS if isinstance(body.get(k), (str, int))})
    return row


def cookie_of(environ: dict) -> str | None:
    """The episode named by the request's ``spider_episode`` cookie."""
    try:
        jar = SimpleCookie(environ.get("HTTP_COOKIE", ""))
    except CookieError:
        return None
    found = jar.get(COOKIE)
    return found.value if found is not None else None


def set_cookie(sid: str) -> str:
    return f"{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict"


def calls_of(response: Any) -> list[tuple[str, Any, str]]:
    """(name, sql or None, call id) of each function call in a Responses object's output."""
    out = []
    items = response.get("output") if isinstance(response, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            try:
                args = json.loads(item.get("arguments") or "{}")
            except ValueError:
                args = {}
            sql = args.get("sql") if isinstance(args, dict) else None
            out.append((str(item.get("name")), sql, str(item.get("call_id", ""))))
    return out


def step(body: dict[str, Any], row: dict[str, Any], finished: bool, read_action: Callable[[str], tuple[str, str]],
         explore: Callable[[Any], tuple[str | None, dict[str, Any]]],
         finish: Callable[[], bool], grade: Callable[[dict[str, Any]], tuple[dict[str, Any], float | None]]) -> dict[str, Any]:
    """One ``/step``: EnvStepResponse's fields (observation, reward, terminated, truncated, info)."""
    if finished:
        return _over()
    response = body.get("response")
    calls = calls_of(response)
    answer: Any = next((sql for name, sql, _id in calls if name == SUBMIT), None)
    if answer is None and not any(name == SUBMIT for name, _sql, _id in calls):
        queries = [(sql, call_id) for name, sql, call_id in calls if name == QUERY]
        if queries:
            outputs = []
            for sql, call_id in queries:
                shown, error = explore(sql)
                if shown is None:
                    return _unscored(error, finish)
                outputs.append({"call_id": call_id, "output": json.dumps(shown)})
            return {"observation": None, "reward": 0.0, "terminated": False, "truncated": False,
                    "info": {"tool_outputs": outputs}}
        kind, text = read_action(nemo_gym.text_of(response))
        if kind == QUERY:
            shown, error = explore(text)
            if shown is None:
                return _unscored(error, finish)
            return {"observation": f"<result>\n{shown}\n</result>", "reward": 0.0, "terminated": False,
                    "truncated": False, "info": {}}
        answer = text
    if not finish():
        return _over()
    result, reward = grade({**row, "output": answer if isinstance(answer, str) else ""})
    if reward is None:
        return _unscored(result, lambda: True)
    return {"observation": None, "reward": reward, "terminated": True, "truncated": False,
            "info": {"spider_match": float(result["score"]), "spider_outcome": result.get("outcome"),
                     "spider_explanation": result.get("explanation", ""), "spider_sql": result.get("sql")}}


def _over() -> dict[str, Any]:
    return {"observation": None, "reward": 0.0, "terminated": True, "truncated": False,
            "info": {"spider_over": "the episode was already answered"}}


def _unscored(error: dict[str, Any], finish: Callable[[], bool]) -> dict[str, Any]:
    finish()
    return {"observation": None, "reward": 0.0, "terminated": True, "truncated": False,
            "info": {"mask_sample": True, "failure_kind": nemo_gym.FAILURE_PREFIX + openrlhf.reason(error),
                     "failure_reason": str(error.get("message") or error.get("explanation") or "")}}
