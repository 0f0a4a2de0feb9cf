"""What reward.py and grader.py share: read the trainer's arguments, find the row, score it.

The trainer's exact arguments are not documented, so every known convention is accepted:

* verl: ``data_source, solution_str, ground_truth, extra_info``;
* the grader envelope: ``input, output, expected``;
* TRL: ``completions`` plus one list per dataset column (``reward.trl_reward``). There the
  completion TRL passes is the only thing scored: a dataset column is never read as a completion.

The completion and the gold may each be a string, a message dict (``content``) or a list of chat
messages (the last assistant message counts). The gold is the first of ``GOLD_KEYS`` given, else
the last assistant message of ``messages``. ``extra_info``, the gold dict or a top-level argument
may carry ``db_id`` and a row id; the prompt helps tell databases apart.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..contract.errors import CallArgumentsError, DatabaseUnavailableError, GoldQueryError, ScoringTimeoutError
from ..contract.limits import Limits, limits_from_env
from ..search import counterexample as neighbour_search
from ..search import difference as difference_search
from ..sql import gold_results, leaderboard
from ..sql import guard as sql_guard
from ..sql import verdict as verify_mod
from . import disputed as scoring_disputed
from . import index as bundle_index
from . import thin_rows

COMPLETION_KEYS = ("solution_str", "output", "completion", "response")
GOLD_KEYS = ("ground_truth", "expected", "gold", "reference", "solution", "answer", "query", "sql")
PROMPT_KEYS = ("prompt", "input", "messages", "question", "schema", "raw_prompt")
DB_KEYS = ("db_id", "database", "db")
ROW_KEYS = ("row_id", "id")


class RowCall(NamedTuple):
    """One call's completion, gold and hints (a named tuple: made once per call, on the per-rollout path)."""

    completion: str
    gold: str
    db_id: str | None = None
    row_id: str | None = None
    prompt: str | None = None


MAX_NESTING = 8  # lists and messages a completion or gold may be wrapped in (a chat is 2: list, message)


def message_text(value: object) -> str | None:
    """Text of a completion or gold given as a string, a message dict or a list of messages.

    A message's ``content`` may be a list of parts (``{"type": "text", "text": ...}``, as TRL and
    OpenAI-style clients send): its text parts are joined with newlines, other parts ignored.
    Nesting deeper than ``MAX_NESTING`` (or a list that contains itself) is CallArgumentsError.

    >>> message_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "SELECT 1"}])
    'SELECT 1'
    >>> message_text([{"role": "assistant", "content": [{"type": "text", "text": "SELECT 2"}]}])
    'SELECT 2'
    """
    for _depth in range(MAX_NESTING + 1):
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            content = value.get("content")
            if isinstance(content, (list, tuple)):
                return _parts_text(content)
            for key in ("content", "text") + GOLD_KEYS:
                if isinstance(value.get(key), str):
                    return value[key]
            return None
        if not isinstance(value, (list, tuple)) or not value:
            return None
        if all(isinstance(m, dict) and "type" in m and "role" not in m for m in value):
            return _parts_text(value)
        assistant = [m for m in value if isinstance(m, dict) and m.get("role") == "assistant"]
        value = assistant[-1] if assistant else value[-1]
    raise CallArgumentsError(f"a completion or gold is nested more than {MAX_NESTING} lists or messages deep "
                             "(or contains itself): pass a string, a message {'role', 'content'} or a list of them")


def _parts_text(parts: list | tuple) -> str | None:
    """The text parts of a message's content, joined with newlines (None when it has none)."""
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type", "text") == "text"
             and isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else None


def _assistant_text(messages: object) -> str | None:
    if isinstance(messages, (list, tuple)):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "assistant":
                return message_text(message)
    return None


def _gold(source: Mapping) -> tuple[str | None, object]:
    """The gold text in ``source`` and the value it came from (rule in the module docstring)."""
    for key in GOLD_KEYS:
        value = source.get(key)
        if value is not None:
            return message_text(value), value
    return _assistant_text(source.get("messages")), None


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


def _first(sources: tuple[Mapping, ...], keys: tuple[str, ...], types: tuple[type, ...]) -> str | None:
    """The first of ``keys`` (in that order) holding a value of ``types``, in the first source that has one."""
    for hints in sources:
        if hints:
            for key in keys:
                value = hints.get(key)
                if isinstance(value, types):
                    return str(value)
    return None


def _row_call(completion: object, source: Mapping, limits: Limits, extra_prompt: object = None) -> RowCall | None:
    """The RowCall for ``completion`` with gold and hints from ``source``; None when it has no gold."""
    gold, gold_value = _gold(source)
    if not gold or not gold.strip():
        return None
    extra = source.get("extra_info")
    hint_sources: tuple[Mapping, ...] = (extra if isinstance(extra, dict) else {}, source,
                                         gold_value if isinstance(gold_value, dict) else {})
    texts: list[str] = []
    budget = [limits.max_prompt_chars]
    for hints in hint_sources:
        if hints:
            for key in PROMPT_KEYS:
                value = hints.get(key)
                if value is not None:
                    _flatten_text(value, texts, budget)
    if extra_prompt is not None:
        _flatten_text(extra_prompt, texts, budget)
    text = message_text(completion)
    return RowCall(text if text is not None else "", gold, _first(hint_sources, DB_KEYS, (str,)),
                   _first(hint_sources, ROW_KEYS, (str, int)), "\n".join(texts) or None)


def read_call(kwargs: Mapping, limits: Limits | None = None) -> RowCall:
    """The completion, gold and hints in a call's keyword arguments. Raises CallArgumentsError."""
    completion = next((kwargs[k] for k in COMPLETION_KEYS if kwargs.get(k) is not None), None)
    if completion is None:
        raise CallArgumentsError("no completion passed: give solution_str= (verl) or output= (envelope)")
    call = _row_call(completion, kwargs, limits or current_limits())
    if call is None:
        raise CallArgumentsError("no gold query passed: give ground_truth= (verl) or expected= (envelope), "
                                 "the row's final assistant message")
    return call


def read_trl_row(completion: object, columns: Mapping, prompt: object = None) -> RowCall | None:
    """The RowCall for one TRL completion and its dataset row; None when the row has no gold.

    Only ``completion`` is scored: columns named like completions (``output``...) are ignored.
    """
    return _row_call(completion, columns, current_limits(), prompt)


def read_episode_row(row: Mapping, limits: Limits | None = None) -> RowCall:
    """The gold and hints of a multi-turn episode's row (``scoring.episode``); its answer comes later.
    Raises CallArgumentsError when the row carries no gold."""
    if not isinstance(row, Mapping):
        raise CallArgumentsError(f"an episode's row must be a mapping of its columns, got {type(row).__name__}")
    call = _row_call("", row, limits or current_limits())
    if call is None:
        raise CallArgumentsError("no gold query in the episode's row: give ground_truth= (or expected=, or the row's "
                                 "messages ending with the gold), as `export` writes the rows")
    return call


_limits: list[Limits] = []
_limits_lock = threading.Lock()


def current_limits() -> Limits:
    """Limits for bundle calls: the defaults with SPIDER_SCORING_* overrides, read once."""
    if not _limits:
        with _limits_lock:
            if not _limits:
                _limits.append(limits_from_env())
    return _limits[0]


def score_call(call: RowCall, limits: Limits | None = None, root: str | None = None, *,
               caller: str = "reward") -> verify_mod.Verdict:
    """Resolve the row, score it, and raise on anything that is not the model's doing.

    ``caller``: ``reward`` or ``grader``; the ``search`` setting says which of them search for a
    counterexample after a match (docs/neighbours.md).
    """
    return _verdict(call, limits or current_limits(), bundle_index.load(root), caller)


def comparable_call(call: RowCall, verdict: verify_mod.Verdict, root: str | None = None) -> leaderboard.Comparable:
    """The leaderboards' verdicts (``sql.leaderboard``) on the answer ``verdict`` judged for ``call``
    (the grader's, scored): Spider's official execution match and BIRD's, on the row's original
    database against its gold. A guard that fires leaves both None (``not run``), the verdict standing."""
    limits = current_limits()
    plan = _plan(bundle_index.load(root), call, limits, "grader")
    steps = plan.gold.steps if plan.gold is not None else verdict.gold_steps
    try:
        return leaderboard.comparable(verdict.sql, plan.resolved.gold, plan.resolved.path, limits,
                                      gold_steps=steps or 0, score=float(verdict.score or 0.0),
                                      original_score=verdict.original_score, decided_on=verdict.decided_on,
                                      outcome=verdict.outcome, accepted=verdict.accepted is not None)
    except sql_guard.QueryFailed:
        return leaderboard.Comparable(None, None, leaderboard.NOT_RUN, leaderboard.NOT_RUN)


class Reward(NamedTuple):
    """The reward's answer for one call: the verdict, what the bundle's shape pays for it, and the
    shape's name (None: binary, ``value`` is the verdict's own score)."""

    verdict: verify_mod.Verdict
    value: float | None
    shape: str | None = None


def reward_call(call: RowCall, root: str | None = None) -> Reward:
    """``score_call`` for the reward, with what the bundle's reward shape pays for the verdict
    (``contract.shapes``; the grader never goes through here: it stays binary)."""
    data = bundle_index.load(root)
    verdict = _verdict(call, current_limits(), data, "reward")
    shape = data.reward_shape
    if shape is None or verdict.score is None:
        return Reward(verdict, verdict.score)
    return Reward(verdict, shape.value(verdict.outcome, call.completion, verdict.sql), shape.name)


def _verdict(call: RowCall, limits: Limits, data: bundle_index.BundleData, caller: str) -> verify_mod.Verdict:
    plan = _plan(data, call, limits, caller)
    resolved = plan.resolved
    verdict = thin_rows.unpaid(_checked(_verify(call, plan, limits, data), resolved), resolved.db_id, resolved.path,
                               resolved.sha256, plan.neighbours)
    for number, other in enumerate(plan.alternatives, 1):
        if verdict.outcome == verify_mod.MATCH or verdict.score is None:
            break
        found = thin_rows.unpaid(_checked(_verify(call, other, limits, data), other.resolved), resolved.db_id,
                                 resolved.path, resolved.sha256, other.neighbours)
        if found.outcome == verify_mod.MATCH:
            return dataclasses.replace(found, accepted=other.resolved.gold, detail=(
                f"{found.detail}; it matches accepted answer {number} of the disputed gold, not the gold: "
                f"{' '.join(other.resolved.gold.split())}"))
    return verdict


def _verify(call: RowCall, plan: _Plan, limits: Limits, data: bundle_index.BundleData) -> verify_mod.Verdict:
    resolved = plan.resolved
    return verify_mod.verify(call.completion, resolved.gold, resolved.path, limits=limits, known_gold=plan.gold,
                             cache=data.cache, database_key=resolved.sha256, neighbours=plan.neighbours,
                             search=plan.search, disputed=plan.disputed)


def _checked(verdict: verify_mod.Verdict, resolved: bundle_index.Resolved) -> verify_mod.Verdict:
    """``verdict``, or the typed error its unscored outcome is (never a score)."""
    outcome = verdict.outcome
    if outcome == verify_mod.GOLD_ERROR:
        raise GoldQueryError(f"the gold of this row failed on database {resolved.db_id!r} ({verdict.detail}); "
                             "the row cannot be scored: fix or drop it, then rebuild the bundle")
    if outcome == verify_mod.INFRASTRUCTURE_ERROR:
        raise DatabaseUnavailableError(f"database {resolved.db_id!r} failed while scoring ({verdict.detail}); "
                                       "the bundle's data is damaged: rebuild and push it")
    if outcome == verify_mod.INFRASTRUCTURE_TIMEOUT:
        raise ScoringTimeoutError(f"scoring on database {resolved.db_id!r} stopped: {verdict.detail}. The row is "
                                  "unscored, not wrong: give the scorer more CPU (fewer workers per core), or raise "
                                  "the guard that fired (SPIDER_SCORING_CPU_GUARD_S, SPIDER_SCORING_WALL_GUARD_S)")
    return verdict


class _Plan(NamedTuple):
    """What scoring a row needs besides the completion: its database, the gold's result there, its
    neighbours and its search. Kept per (gold, db_id, row_id, caller, limits) in the bundle's
    ``plans`` once the gold's result is known and the hints alone named the database (a
    resolution that needed the prompt is redone per call), so a call to a row seen before goes
    straight to ``verify``. A disputed gold (docs/disputed-golds.md) carries a plan of the same
    kind for each of its accepted answers (``alternatives``, ``scoring.disputed``)."""

    limits: Limits
    resolved: bundle_index.Resolved
    gold: gold_results.GoldResult | None
    neighbours: tuple[verify_mod.Neighbour, ...]
    search: Callable[[str, gold_results.GoldResult], verify_mod.Searched] | None
    disputed: verify_mod.Disputed | None = None
    alternatives: tuple[_Plan, ...] = ()


_MAX_PLANS = 65_536  # rows kept per bundle; past it the plans start again (a dataset has a few thousand)


def score_arguments(kwargs: Mapping, caller: str = "reward") -> verify_mod.Verdict:
    """``score_call`` of what ``read_call`` reads in ``kwargs``: one call's whole path, read to verdict."""
    return score_call(read_call(kwargs), caller=caller)


def reward_arguments(kwargs: Mapping) -> Reward:
    """``reward_call`` of what ``read_call`` reads in ``kwargs``: the reward's whole path, read to value."""
    return reward_call(read_call(kwargs))


def _plan(data: bundle_index.BundleData, call: RowCall, limits: Limits, caller: str) -> _Plan:
    key = (call.gold, call.db_id, call.row_id, caller, id(limits))
    found = data.plans.get(key)
    if found is not None and found.limits is limits:  # type: ignore[attr-defined]
        return found  # type: ignore[return-value]
    by_hints = data.resolve_by_hints(call.gold, call.db_id, call.row_id)
    resolved = by_hints or data.resolve_by_gold(call.gold, call.db_id, call.row_id, call.prompt)
    found = data.disputed(resolved)
    disputed = verify_mod.Disputed(*found) if found is not None else None
    plan = _Plan(limits, resolved, data.gold_result(resolved, limits), _neighbours(data, resolved, limits),
                 _search(data, resolved, limits, caller), disputed,
                 tuple(_accepted(data, resolved, answer, limits, caller, disputed) for answer in disputed.accepted)
                 if disputed is not None else ())
    if by_hints is not None and plan.gold is not None:
        if len(data.plans) >= _MAX_PLANS:
            data.plans.clear()
        data.plans[key] = plan
    return plan


def _accepted(data: bundle_index.BundleData, resolved: bundle_index.Resolved, answer: str, limits: Limits,
              caller: str, disputed: verify_mod.Disputed) -> _Plan:
    """The plan of a disputed gold's accepted answer, judged as a gold of its own (``scoring.disputed``)."""
    accepted = bundle_index.Resolved(resolved.db_id, answer, resolved.path, resolved.sha256)
    try:
        original = scoring_disputed.original_result(data, accepted, limits)
    except sql_guard.QueryFailed as failed:
        raise GoldQueryError(f"accepted answer {answer!r} of the disputed gold {disputed.id!r} failed on database "
                             f"{resolved.db_id!r} ({failed.detail}): fix it in the list of disputed golds, then rebuild "
                             "the bundle") from None
    return _Plan(limits, accepted, original, scoring_disputed.neighbours(data, accepted, original, limits),
                 _search(data, accepted, limits, caller), disputed)


def prebuild_search(gold: str, db_id: str, root: str | None = None, limits: Limits | None = None) -> int:
    """Build the grader's search databases of a row's gold ahead of its predictions
    (``search.counterexample.prebuild``): 0 where the grader would not search that row (a database
    without neighbours, the search off), else the databases built or read."""
    limits = current_limits() if limits is None else limits
    data = bundle_index.load(root)
    resolved = data.resolve_by_hints(gold, db_id, None) or data.resolve_by_gold(gold, db_id, None, None)
    task = _search_task(data, resolved, limits, "grader")
    if task is None:
        return 0
    original = data.gold_result(resolved, limits)
    if original is None:
        original, _cached = data.cache.get((resolved.sha256, resolved.gold, limits.float_digits),
                                           lambda: verify_mod.gold_result(resolved.gold, resolved.path, limits))
    return neighbour_search.prebuild(task, original, limits)


def _neighbours(data: bundle_index.BundleData, resolved: bundle_index.Resolved,
                limits: Limits) -> tuple[verify_mod.Neighbour, ...]:
    """The row's neighbour databases with the gold's result on each (stored, or run once per process)."""
    if limits.semantics != "neighbours":
        return ()
    key = (resolved.db_id, resolved.gold, limits.float_digits)
    found_all = data.neighbour_cache.get(key)
    if found_all is None:
        found_all = data.neighbour_cache[key] = _load_neighbours(data, resolved, limits)
    return found_all


def _load_neighbours(data: bundle_index.BundleData, resolved: bundle_index.Resolved,
                     limits: Limits) -> tuple[verify_mod.Neighbour, ...]:
    out = []
    for name, path, sha256, stored in data.neighbour_entries(resolved, limits):
        key = (sha256, resolved.gold, limits.float_digits)
        found = data.cache.peek(key)
        if found is None and stored is not None:
            found = gold_results.from_json(stored)
        if found is None:
            try:
                found, _cached = data.cache.get(key, lambda: verify_mod.gold_result(resolved.gold, path, limits))  # noqa: B023 - called here
            except sql_guard.QueryFailed as failed:
                raise GoldQueryError(f"the gold of this row failed on {name} ({failed.detail}); the row cannot "
                                     "be scored: rebuild the bundle with this SQLite") from None
        else:
            data.cache.put(key, found)
        out.append(verify_mod.Neighbour(name, path, found))
    return tuple(out)


def _search(data: bundle_index.BundleData, resolved: bundle_index.Resolved, limits: Limits,
            caller: str) -> Callable[[str, gold_results.GoldResult], verify_mod.Searched] | None:
    """The row's searches after a match on the original and the neighbours, when the settings want
    them for ``caller`` and the bundle can: first the one aimed at the difference (edits of the
    original), then the counterexample search (databases drawn for the gold)."""
    task = _search_task(data, resolved, limits, caller)
    aimed = _difference_task(data, resolved, limits, caller)
    if task is None and aimed is None:
        return None
    return difference_search.Searches(aimed, task, limits)


def _difference_task(data: bundle_index.BundleData, resolved: bundle_index.Resolved, limits: Limits,
                     caller: str) -> difference_search.Task | None:
    """The row's search aimed at the difference, when the settings want it for ``caller`` and the bundle can."""
    wanted = limits.difference == "always" or (limits.difference == "grader" and caller == "grader")
    if not wanted or limits.semantics != "neighbours":
        return None
    stored = data.invariants(resolved.db_id)
    if stored is None or data.database_bytes(resolved.db_id) > limits.difference_max_bytes:
        return None  # built without neighbours (scored on the original), or too large to copy into memory
    profile = data.profile(resolved.db_id, stored)
    return difference_search.Task(resolved.db_id, resolved.sha256, resolved.path, resolved.gold, profile,
                                  difference_search.grouped(profile, resolved.gold))


def _search_task(data: bundle_index.BundleData, resolved: bundle_index.Resolved, limits: Limits,
                 caller: str) -> neighbour_search.Task | None:
    """The row's search task, when the settings want a search for ``caller`` and the bundle can."""
    wanted = limits.search == "always" or (limits.search == "grader" and caller == "grader")
    if not wanted or limits.semantics != "neighbours":
        return None
    stored = data.invariants(resolved.db_id)
    if stored is None:
        return None  # a database built without neighbours: scored on the original (and nothing more)
    profile, source = data.search_source(resolved.db_id, stored)
    return neighbour_search.Task(resolved.db_id, resolved.sha256, resolved.gold, profile, source,
                                 data.search_fingerprint(resolved.db_id, stored))

