"""OpenRLHF's remote reward (``--remote_rm_url``): its request in, envelopes to grade, its answer out.

OpenRLHF (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor._fetch_rewards_via_http``; older
releases ``remote_rm_utils.request_api_wrapper``) POSTs JSON ``{"query": [...], "prompts": [...],
"labels": [...]}`` with no authorization header, where a query is the decoded prompt and response
(special tokens kept) and a label the dataset's ``--label_key`` column: here the gold query (or an
object holding it and a ``db_id`` hint). It reads ``rewards`` (and, in newer releases, ``scores``
for dynamic filtering and ``extra_logs``, each a list it logs beside its own metrics).

Each item becomes one grader envelope: ``output`` is the query's text after its prompt, with a
trailing end-of-sequence marker of another template removed (``<|...|>`` tokens the bundle removes
itself), ``input`` the prompt, ``expected`` the label. The answer, one entry per item:

* ``rewards`` and ``scores``: the score; for an item the bundle cannot score, NaN (JSON ``NaN``,
  which OpenRLHF's clients parse). OpenRLHF turns every entry into a tensor, so ``null`` stops it
  ("Could not infer dtype of NoneType") and the reason is never seen. NaN is no score it could train
  on as one: with its dynamic filtering on, a prompt whose group's mean score is not inside the range
  is dropped and replaced, and NaN is inside no range, so the group is masked, never paid. Without
  dynamic filtering the NaN reaches the advantages and the step's loss: docs/service.md says which
  flags to give OpenRLHF, and what that costs (the group's other answers go with it).
* ``extra_logs``: the same keys in every answer (OpenRLHF merges them across the batch and logs each
  key's mean beside its own metrics): ``spider/<outcome>`` one-hot per outcome, ``spider/unscored``
  and ``spider/unscored/<reason>`` one-hot per cause (``REASONS``: the bundle's error codes and the
  service's own), so OpenRLHF's step log says how many answers went unscored and why.
* ``outcomes``, ``reasons``, ``explanations`` and ``unscored`` for a reader (OpenRLHF ignores them).

>>> envelopes({"query": ["<s>Q: how many?\\nA: SELECT 1</s>"], "prompts": ["<s>Q: how many?\\nA:"], "labels": ["SELECT 2"]})
[{'input': '<s>Q: how many?\\nA:', 'output': ' SELECT 1', 'expected': 'SELECT 2'}]
>>> logs = answer([{"score": 1.0, "outcome": "match", "explanation": ""}], ("match", "mismatch"))["extra_logs"]
>>> logs["spider/match"], logs["spider/mismatch"], logs["spider/unscored"], logs["spider/unscored/stale_bundle"]
([1.0], [0.0], [0.0], [0.0])
"""

from __future__ import annotations

import math
from typing import Any

from harness.common.outcomes import BUNDLE_ERRORS, UNSCORED_OUTCOMES
from harness.service.bundle import GradeError

PATH = "/openrlhf"
END_MARKERS = ("</s>", "<eos>", "<end_of_turn>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>")


class RequestShapeError(ValueError):
    """The body is not OpenRLHF's request; the message says what is wrong."""


def envelopes(data: Any) -> list[dict[str, Any] | GradeError]:
    """One grader envelope per item (or that item's error); RequestShapeError for a body of another shape."""
    if not isinstance(data, dict) or not isinstance(data.get("query"), list):
        raise RequestShapeError('send OpenRLHF\'s request {"query": [...], "prompts": [...], "labels": [...]}')
    queries = data["query"]
    prompts, labels = data.get("prompts"), data.get("labels")
    for name, values in (("prompts", prompts), ("labels", labels)):
        if not isinstance(values, list) or len(values) != len(queries):
            raise RequestShapeError(f"{name!r} must be a list with one item per query ({len(queries)})")
    return [_envelope(i, q, p, g) for i, (q, p, g) in enumerate(zip(queries, prompts, labels))]  # type: ignore[arg-type]


def _envelope(i: int, query: Any, prompt: Any, label: Any) -> dict[str, Any] | GradeError:
    if not isinstance(query, str) or not isinstance(prompt, str):
        return _item_error(i, "its query and prompt must be strings")
    if query.startswith(prompt):
        rest = query[len(prompt):]
    elif query.lstrip().startswith(prompt.lstrip()):  # a tokenizer round trip may change leading blanks
        rest = query.lstrip()[len(prompt.lstrip()):]
    else:
        return _item_error(i, "its query does not start with its prompt, so the response cannot be cut out: "
                              "send the decoded prompt + response as OpenRLHF does")
    return {"input": prompt, "output": _strip_end(rest), "expected": label}


def _strip_end(text: str) -> str:
    """The response without the end-of-sequence markers that close it (possibly several, with blanks)."""
    while True:
        trimmed = text.rstrip()
        for marker in END_MARKERS:
            if trimmed.endswith(marker):
                trimmed = trimmed[: -len(marker)]
                break
        else:
            return text
        text = trimmed


def _item_error(i: int, why: str) -> GradeError:
    return GradeError(422, "InvalidOpenRLHFItem", "request_error", f"item {i} cannot be graded: {why}")


# Why an item is unscored, a closed set (the keys of extra_logs must be the same in every answer): the
# bundle's error codes, then the service's own errors; "other" for any cause outside them.
SERVICE_REASONS = {"WorkerTimeout": "worker_timeout", "WorkerStopped": "worker_stopped",
                   "WorkerMemoryLimit": "worker_memory_limit", "RequestDeadline": "request_deadline",
                   "InternalError": "internal_error", "InvalidOpenRLHFItem": "invalid_item"}
REASONS: tuple[str, ...] = (*BUNDLE_ERRORS, *SERVICE_REASONS.values(), "other")
_BUNDLE_CODE = {e.name: code for code, e in BUNDLE_ERRORS.items()}
_BUNDLE_EXIT = {e.exit_code: code for code, e in BUNDLE_ERRORS.items()}
_OUTCOME_REASON = {"infrastructure_timeout": "scoring_timeout", "gold_error": "gold_query"}


def reason(result: dict[str, Any]) -> str:
    """Why an item has no score, from the REASONS (its error body names the cause, or its outcome does).

    >>> reason({"error": "StaleBundleError", "outcome": "infrastructure_error"}), reason({"error": "WorkerTimeout"})
    ('stale_bundle', 'worker_timeout')
    """
    error, exit_code, outcome = str(result.get("error")), result.get("exit_code"), str(result.get("outcome"))
    found = _BUNDLE_CODE.get(error) or SERVICE_REASONS.get(error)
    if found is None and isinstance(exit_code, int):
        found = _BUNDLE_EXIT.get(exit_code)
    return found or _OUTCOME_REASON.get(outcome, "other")


def _score(result: dict[str, Any]) -> float | None:
    score = result.get("score")
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None


def answer(results: list[dict[str, Any]], outcomes: tuple[str, ...]) -> dict[str, Any]:
    """OpenRLHF's answer for the items' results (grader answers or error bodies), in order (module docstring)."""
    names = tuple(dict.fromkeys((*outcomes, *UNSCORED_OUTCOMES, "request_error", "other")))
    scores = [_score(r) for r in results]
    seen = [r.get("outcome") if r.get("outcome") in names else "other" for r in results]
    why = ["" if score is not None else reason(r) for r, score in zip(results, scores)]
    logs = {f"spider/{name}": [float(o == name) for o in seen] for name in names}
    logs["spider/unscored"] = [float(score is None) for score in scores]
    logs.update({f"spider/unscored/{code}": [float(w == code) for w in why] for code in REASONS})
    rewards = [math.nan if score is None else score for score in scores]
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs, "outcomes": seen, "reasons": why,
            "explanations": [r.get("explanation", r.get("message", "")) for r in results],
            "unscored": sum(score is None for score in scores)}
