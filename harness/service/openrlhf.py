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
``rewards`` and ``scores`` (the score; ``null`` for a row the bundle cannot score: OpenRLHF takes
numbers only, so it stops on it, as verl does on the bundle's error, instead of training on a 0),
``extra_logs`` ``{"spider/<outcome>": [1.0 or 0.0, ...]}`` (OpenRLHF logs each key's mean: the
share of each outcome), and ``outcomes`` / ``explanations`` for a reader.

>>> envelopes({"query": ["<s>Q: how many?\\nA: SELECT 1</s>"], "prompts": ["<s>Q: how many?\\nA:"], "labels": ["SELECT 2"]})
[{'input': '<s>Q: how many?\\nA:', 'output': ' SELECT 1', 'expected': 'SELECT 2'}]
>>> answer([{"score": 1.0, "outcome": "match", "explanation": ""}], ("match", "mismatch"))["extra_logs"]
{'spider/match': [1.0], 'spider/mismatch': [0.0]}
"""

from __future__ import annotations

from typing import Any

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


def answer(results: list[dict[str, Any]], outcomes: tuple[str, ...]) -> dict[str, Any]:
    """OpenRLHF's answer for the items' results (grader answers or error bodies), in order."""
    rewards = [r.get("score") for r in results]
    names = tuple(outcomes) + tuple(sorted({r["outcome"] for r in results} - set(outcomes)))
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {f"spider/{name}": [float(r["outcome"] == name) for r in results] for name in names},
            "outcomes": [r["outcome"] for r in results],
            "explanations": [r.get("explanation", r.get("message", "")) for r in results],
            "unscored": sum(1 for r in rewards if r is None)}
