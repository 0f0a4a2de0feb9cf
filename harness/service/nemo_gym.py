"""NeMo Gym's resources-server contract: its ``/verify`` body in, one grader envelope, its answer out.

NeMo Gym (PyPI ``nemo-gym`` 0.7; it feeds NeMo RL) runs a rollout as: POST the task row to the
resources server's ``/seed_session``, generate from the row's ``responses_create_params``, then POST
the row with the model's ``response`` (an OpenAI Responses object) to ``/verify``, which answers the
body echoed back with ``reward``. The task rows are ``export --format nemo-gym``'s (``expected``
the gold, ``row_id``, ``split``, ``db_id``: harness.common.trainer_rows).

* The answer's text is what OpenAI's ``Response.output_text`` gives: every ``output_text`` part of
  every ``message`` item of ``response.output``, joined. No text is the bundle's ``no_query``.
* ``reward`` is what the bundle's reward shape pays for the grader's outcome (the score itself
  under ``binary``), ``spider_match`` the verdict (1.0 or 0.0, numeric so that NeMo Gym's
  ``/aggregate_metrics`` averages it: the accuracy whatever the shape), ``spider_outcome``,
  ``spider_explanation`` and ``spider_sql`` what was decided and on what.
* A row the bundle cannot score is a failure, never a score: ``mask_sample`` true (NeMo Gym leaves
  the sample out of training and metrics), ``failure_kind`` ``spider:<reason>`` (a server-scoped
  kind, the reason as ``/openrlhf`` names it), ``failure_reason`` the message, ``spider_match``
  absent. ``reward`` is 0.0 there only because NeMo Gym's response model requires a number.
* ``/aggregate_metrics`` groups the verified rollouts by task (``_ng_task_index``), leaves masked
  ones out (counted as ``coverage``), and gives per task and overall the mean reward and accuracy,
  pass@k (the unbiased estimate from n rollouts with c matches) and majority@k (the most frequent
  SQL among the first k, ties to the earliest) on a 0-100 scale, as NeMo Gym's own helpers report.
* ``/reverify_mode`` is ``"stateless"``: a verdict is a function of (answer, row, bundle), so NeMo
  Gym may post a saved rollout again. ``/seed_session`` and ``/close_session`` keep nothing.

>>> text_of({"output": [{"type": "message", "content": [{"type": "output_text", "text": "SELECT 1"}]}]})
'SELECT 1'
>>> envelope({"responses_create_params": {"input": "q"}, "expected": "SELECT 2", "db_id": "d",
...           "response": {"output": []}})
{'output': '', 'expected': 'SELECT 2', 'input': 'q', 'db_id': 'd'}
>>> round(pass_at_k(4, 1, 2), 4), majority([" SELECT 1", "SELECT 2", "select 1"])
(0.5, 'select 1')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from harness.service import openrlhf
from harness.service.bundle import GradeError

VERIFY_PATH = "/verify"
SEED_PATH = "/seed_session"
CLOSE_PATH = "/close_session"
AGGREGATE_PATH = "/aggregate_metrics"
REVERIFY_PATH = "/reverify_mode"
REVERIFY_MODE = "stateless"
FAILURE_PREFIX = "spider:"
GOLD_FIELDS = ("expected", "ground_truth", "gold", "gt_sql")  # ours first; bird_sql's name last
HINT_FIELDS = ("db_id", "row_id")


class RequestShapeError(ValueError):
    """The body is not NeMo Gym's; the message says what is wrong."""


def text_of(response: Any) -> str:
    """The model's text, as OpenAI's ``Response.output_text`` reads it; RequestShapeError when
    ``response`` is not a Responses object."""
    if not isinstance(response, dict) or not isinstance(response.get("output", []), list):
        raise RequestShapeError("'response' must be the model's OpenAI Responses object, with an 'output' list")
    parts = []
    for item in response.get("output", []):
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
            parts += [c["text"] for c in item["content"]
                      if isinstance(c, dict) and c.get("type") == "output_text" and isinstance(c.get("text"), str)]
    return "".join(parts)


def envelope(body: Any) -> dict[str, Any]:
    """The grader envelope of a ``/verify`` body: the text, the task's gold, its prompt and hints."""
    if not isinstance(body, dict):
        raise RequestShapeError("send NeMo Gym's verify request: the task row's fields, "
                                "'responses_create_params' and the model's 'response'")
    if "response" not in body:
        raise RequestShapeError("the body has no 'response': post the task row with the model's Responses object")
    params = body.get("responses_create_params")
    if not isinstance(params, dict) or "input" not in params:
        raise RequestShapeError("'responses_create_params' with its 'input' is missing: post the task row as exported "
                                "(export --format nemo-gym)")
    gold = next((body[k] for k in GOLD_FIELDS if isinstance(body.get(k), str)), None)
    if gold is None:
        raise RequestShapeError(f"the task row holds no gold query (one of {', '.join(GOLD_FIELDS)}): "
                                "export the split with `export --format nemo-gym`")
    out = {"output": text_of(body["response"]), "expected": gold, "input": params["input"]}
    out.update({k: body[k] for k in HINT_FIELDS if isinstance(body.get(k), str)})
    return out


def verified(body: dict[str, Any], result: dict[str, Any], shaped: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """The ``/verify`` answer: the body echoed, with the reward and the verdict's fields (module docstring).

    ``result`` is the grader's answer or an error body; ``shaped`` what the reward shape pays for a
    grader answer.
    """
    out = dict(body)
    score = result.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        out.update(reward=float(shaped(result)), spider_match=float(score), mask_sample=False,
                   spider_outcome=result.get("outcome"), spider_explanation=result.get("explanation", ""),
                   spider_sql=result.get("sql"))
        return out
    out.update(reward=0.0, mask_sample=True, failure_kind=FAILURE_PREFIX + openrlhf.reason(result),
               failure_reason=str(result.get("message") or result.get("explanation") or ""),
               spider_outcome=result.get("outcome"))
    return out


def refused(body: Any, error: GradeError) -> dict[str, Any]:
    """The answer for a body that cannot be graded at all: a failure of kind ``spider:invalid_item``."""
    out = dict(body) if isinstance(body, dict) else {}
    out.update(reward=0.0, mask_sample=True, failure_kind=FAILURE_PREFIX + "invalid_item",
               failure_reason=error.message, spider_outcome=error.outcome)
    return out


# -- /aggregate_metrics ---------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of n samples with c right (1 - C(n-c, k) / C(n, k))."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _answer_key(sql: Any) -> str:
    return " ".join(str(sql or "").split()).rstrip(";").strip().lower()


def majority(answers: Sequence[Any]) -> str:
    """The most frequent answer (whitespace, case and a final ';' aside); ties go to the earliest."""
    keys = [_answer_key(a) for a in answers]
    return max(dict.fromkeys(keys), key=lambda k: (keys.count(k), -keys.index(k)))


def _ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n else []


def _task_metrics(rollouts: list[dict[str, Any]]) -> dict[str, Any]:
    """One task's metrics over its scored rollouts (in rollout order)."""
    scored = [r for r in rollouts if not r.get("mask_sample")]
    n, right = len(scored), [float(r.get("spider_match") or 0.0) == 1.0 for r in scored]
    metrics: dict[str, Any] = {"num_rollouts": len(rollouts), "num_scored": n, "coverage": n / len(rollouts)}
    if not n:
        return metrics
    metrics["mean/reward"] = sum(float(r.get("reward", 0.0)) for r in scored) / n
    metrics["mean/spider_match"] = sum(right) / n
    for k in _ks(n):
        metrics[f"pass@{k}/spider_match"] = 100.0 * pass_at_k(n, sum(right), k)
        first = scored[:k]
        chosen = majority([r.get("spider_sql") for r in first])
        metrics[f"majority@{k}/spider_match"] = 100.0 * float(
            next(m for r, m in zip(first, right) if _answer_key(r.get("spider_sql")) == chosen))
    return metrics


def aggregate(body: Any) -> dict[str, Any]:
    """The ``/aggregate_metrics`` answer for ``{"verify_responses": [...]}`` (module docstring)."""
    if not isinstance(body, dict) or not isinstance(body.get("verify_responses"), list):
        raise RequestShapeError('send {"verify_responses": [verify answer, ...]} as NeMo Gym does')
    responses = [r for r in body["verify_responses"] if isinstance(r, dict)]
    tasks: dict[Any, list[dict[str, Any]]] = {}
    for r in sorted(responses, key=lambda r: (_order(r.get("_ng_task_index")), _index(r.get("_ng_rollout_index")))):
        tasks.setdefault(r.get("_ng_task_index"), []).append(r)
    groups = [{"_ng_task_index": task, **_task_metrics(rollouts)} for task, rollouts in tasks.items()]
    overall: dict[str, Any] = {"num_tasks": len(groups), "num_rollouts": len(responses),
                               "num_scored": sum(g["num_scored"] for g in groups)}
    overall["coverage"] = overall["num_scored"] / len(responses) if responses else 0.0
    kinds: dict[str, int] = {}
    for r in responses:
        if r.get("mask_sample"):
            kind = str(r.get("failure_kind") or "unknown")
            kinds[kind] = kinds.get(kind, 0) + 1
    overall.update({f"failures/{kind}": count for kind, count in sorted(kinds.items())})
    names = sorted({k for g in groups for k in g if k.startswith(("mean/", "pass@", "majority@"))})
    for name in names:
        values = [g[name] for g in groups if name in g]
        overall[name] = sum(values) / len(values)
    key = {k: v for k, v in overall.items() if k.startswith(("mean/", "pass@1/", "majority@")) or k == "coverage"}
    return {"group_level_metrics": groups, "agent_metrics": overall, "key_metrics": key,
            "repeat_level_metrics": [], "perf_summary": None}


def _order(task: Any) -> tuple[int, int, str]:
    """Tasks by their index (numbers first, in numeric order), others by their text."""
    return (0, _index(task), "") if isinstance(task, int) and not isinstance(task, bool) else (1, 0, str(task))


def _index(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
