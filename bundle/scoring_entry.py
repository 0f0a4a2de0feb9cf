"""What reward.py and grader.py share: read the trainer's arguments, find the row, score it.

The trainer's exact arguments are not documented, so every known convention is accepted:

* verl: ``data_source, solution_str, ground_truth, extra_info``;
* the grader envelope: ``input, output, expected``;
* TRL columns: ``prompts, completions`` and dataset columns (see ``reward.trl_reward``).

The completion and the gold may each be a string, a message dict (``content``) or a list of chat
messages (the last assistant message counts). ``extra_info`` may carry ``db_id`` and the prompt.
"""

from __future__ import annotations

import dataclasses
import threading

try:
    from . import bundle_index, verify as verify_mod
    from .scoring_errors import CallArgumentsError, DatabaseUnavailableError, GoldQueryError
    from .scoring_limits import Limits, limits_from_env
except ImportError:  # run as a standalone file
    import bundle_index  # type: ignore[no-redef]
    import verify as verify_mod  # type: ignore[no-redef]
    from scoring_errors import CallArgumentsError, DatabaseUnavailableError, GoldQueryError  # type: ignore[no-redef]
    from scoring_limits import Limits, limits_from_env  # type: ignore[no-redef]

COMPLETION_KEYS = ("solution_str", "output", "completion", "response")
GOLD_KEYS = ("ground_truth", "expected", "gold", "reference", "solution", "answer", "query", "sql")
PROMPT_KEYS = ("prompt", "input", "messages", "question", "schema", "raw_prompt")
DB_KEYS = ("db_id", "database", "db")
ROW_KEYS = ("row_id", "id")


@dataclasses.dataclass(frozen=True)
class RowCall:
    completion: str
    gold: str
    db_id: str | None = None
    row_id: str | None = None
    prompt: str | None = None


def message_text(value: object) -> str | None:
    """Text of a completion or gold given as a string, a message dict or a list of messages."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("content", "text") + GOLD_KEYS:
            if isinstance(value.get(key), str):
                return value[key]
        return None
    if isinstance(value, (list, tuple)) and value:
        assistant = [m for m in value if isinstance(m, dict) and m.get("role") == "assistant"]
        return message_text(assistant[-1] if assistant else value[-1])
    return None


def _flatten_text(value: object, out: list[str], budget: list[int], depth: int = 0) -> None:
    if depth > 6 or budget[0] <= 0:
        return
    if isinstance(value, str):
        out.append(value)
        budget[0] -= len(value)
    elif isinstance(value, dict):
        for item in value.values():
            _flatten_text(item, out, budget, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _flatten_text(item, out, budget, depth + 1)


def read_call(kwargs: dict) -> RowCall:
    """The completion, gold and hints in a call's keyword arguments. Raises CallArgumentsError."""
    completion = next((kwargs[k] for k in COMPLETION_KEYS if kwargs.get(k) is not None), None)
    if completion is None:
        raise CallArgumentsError("no completion passed: give solution_str= (verl) or output= (envelope)")
    completion_text = message_text(completion)
    gold_value = next((kwargs[k] for k in GOLD_KEYS if kwargs.get(k) is not None), None)
    gold = message_text(gold_value)
    if not gold or not gold.strip():
        raise CallArgumentsError("no gold query passed: give ground_truth= (verl) or expected= (envelope), "
                                 "the row's final assistant message")
    extra = kwargs.get("extra_info") if isinstance(kwargs.get("extra_info"), dict) else {}
    hints = dict(gold_value) if isinstance(gold_value, dict) else {}
    hints.update(extra)
    db_id = next((str(hints[k]) for k in DB_KEYS if isinstance(hints.get(k), str)), None)
    row_id = next((str(hints[k]) for k in ROW_KEYS if isinstance(hints.get(k), (str, int))), None)
    texts: list[str] = []
    budget = [200_000]
    for source in (hints, kwargs):
        for key in PROMPT_KEYS:
            if source.get(key) is not None:
                _flatten_text(source[key], texts, budget)
    return RowCall(completion_text if completion_text is not None else "", gold, db_id, row_id,
                   "\n".join(texts) or None)


_limits: list[Limits] = []
_limits_lock = threading.Lock()


def current_limits() -> Limits:
    """Limits for bundle calls: the defaults with SPIDER_SCORING_* overrides, read once."""
    if not _limits:
        with _limits_lock:
            if not _limits:
                _limits.append(limits_from_env())
    return _limits[0]


def score_call(call: RowCall, limits: Limits | None = None, root: str | None = None) -> "verify_mod.Verdict":
    """Resolve the row, score it, and raise on anything that is not the model's doing."""
    limits = limits or current_limits()
    data = bundle_index.load(root)
    resolved = data.resolve(call.gold, call.db_id, call.row_id, call.prompt)
    data.prime(resolved)
    verdict = verify_mod.verify(call.completion, resolved.gold, resolved.path, limits=limits,
                                cache=data.cache, database_key=resolved.sha256)
    if verdict.outcome == verify_mod.GOLD_ERROR:
        raise GoldQueryError(f"the gold of this row failed on database {resolved.db_id!r} ({verdict.detail}); "
                             "the row cannot be scored: fix or drop it, then rebuild the bundle")
    if verdict.outcome == verify_mod.INFRASTRUCTURE_ERROR:
        raise DatabaseUnavailableError(f"database {resolved.db_id!r} failed while scoring ({verdict.detail}); "
                                       "the bundle's data is damaged: rebuild and push it")
    return verdict


def score_kwargs(kwargs: dict) -> float:
    """compute_score's body: a float in [0, 1] for the model's answer, or a typed error."""
    return float(score_call(read_call(kwargs)).score)  # type: ignore[arg-type]
