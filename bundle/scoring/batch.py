"""Batches of completions (TRL's reward call, verl's batch form) and verl's outcome fields.

* **Duplicates are scored once.** A verdict is a pure function of (completion, row, bundle), and
  a GRPO group often repeats a completion: identical ``RowCall``s (completion text, gold, hints,
  prompt) within one batch share one verdict.
* **One call's fault never costs the others.** A completion the bundle cannot score (a typed
  ``ScoringInfrastructureError``: stale row, missing database, failing gold, the wall guard) gets
  ``None`` and a RuntimeWarning naming the outcome (``UNSCORED_WARNING``); the rest of the batch is scored. Only
  an interface that can take nothing but a number (verl's ``compute_score``) raises instead.
* **Telemetry.** ``shares`` gives, per batch, the share of each outcome (``spider/no_query``...),
  of completions decided on a neighbour database and of duplicates; ``trl_reward`` hands them to
  TRL's ``log_metric`` and each completion's outcome and explanation to ``log_extra``.
* **verl.** ``compute_score`` takes the single form (``solution_str=``...) or the batch form of
  verl's ``batch`` reward manager (``solution_strs=[...]``...: one score per item). With
  ``outcome_fields=True`` (verl: ``reward.custom_reward_function.reward_kwargs``) each score is a
  dict ``{"score", "acc", "outcome", "explanation", "decided_on", "decided_on_neighbour"}`` that
  verl puts in ``reward_extra_info``; the default stays a float.
* **Reward shapes.** The reward pays what the bundle's shape pays for each verdict
  (``contract.shapes``, ``scoring.entry.reward_call``): the verdict's own score under ``binary``,
  the default. Under another shape ``score`` is the shape's value, ``acc`` stays the verdict's
  (1.0 or 0.0), and the outcome fields and TRL's ``log_extra`` name the shape (``reward_shape``).
  The grader is binary under every shape.

>>> scored = [Scored(1.0, "match", ""), Scored(None, "no_gold", ""), Scored(0.0, "no_query", "", reused=True)]
>>> shares(scored)["spider/no_query"], shares(scored)["spider/reused"]
(0.333333, 0.333333)
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence

from ..contract.errors import UNSCORED_WARNING, CallArgumentsError, ScoringInfrastructureError
from ..sql import verdict as verify_mod
from . import entry as scoring_entry

NO_GOLD = "no_gold"  # the row carries no gold: None, and not the bundle's outcome
OUTCOMES = verify_mod.OUTCOMES + (NO_GOLD,)
METRIC_PREFIX = "spider/"
BATCH_KEYS = ("data_sources", "solution_strs", "ground_truths", "extra_infos")  # verl's batch reward manager
DETAIL_SETTING = "outcome_fields"


@dataclasses.dataclass(frozen=True)
class Scored:
    """One completion's answer in a batch: ``score`` None when unscored (``outcome`` says why)."""

    score: float | None
    outcome: str
    explanation: str
    decided_on: str = "original"
    reused: bool = False  # a duplicate of an earlier completion of the batch: its verdict reused
    error: ScoringInfrastructureError | None = None
    acc: float | None = None  # the verdict's own score, where a reward shape pays ``score`` for it
    shape: str | None = None  # the reward shape that paid ``score`` (None: binary, the verdict's score)

    @property
    def on_neighbour(self) -> bool:
        return not (verify_mod.decided_on_original(self.decided_on) or self.decided_on == "test suite")

    def fields(self) -> dict:
        """The dict verl's managers put in ``reward_extra_info`` (the same keys for every item of a
        bundle: ``reward_shape`` too when the bundle's reward is shaped)."""
        out = {"score": self.score, "acc": self.score if self.shape is None else self.acc, "outcome": self.outcome,
               "explanation": self.explanation, "decided_on": self.decided_on,
               "decided_on_neighbour": float(self.on_neighbour)}
        if self.shape is not None:
            out["reward_shape"] = self.shape
        return out


def read_or_fault(read: Callable[..., scoring_entry.RowCall | None], *args: object) -> scoring_entry.RowCall | Scored | None:
    """What ``read(*args)`` gives, or the unscored answer for arguments it cannot read."""
    try:
        return read(*args)
    except ScoringInfrastructureError as exc:
        return _fault(exc)


def score_calls(calls: Sequence[scoring_entry.RowCall | Scored | None], caller: str = "reward") -> list[Scored]:
    """One ``Scored`` per call (None: no gold), each distinct call scored once; faults unscored.

    ``caller`` (``reward`` or ``grader``) decides, with the bundle's ``search`` setting, whether a
    match is put to the counterexample search."""
    seen: dict[scoring_entry.RowCall, Scored] = {}
    out: list[Scored] = []
    for call in calls:
        if call is None:
            out.append(Scored(None, NO_GOLD, "the row carries no gold query"))
        elif isinstance(call, Scored):
            out.append(call)
        elif call in seen:
            out.append(dataclasses.replace(seen[call], reused=True))
        else:
            seen[call] = found = _score(call, caller)
            out.append(found)
    return out


def _score(call: scoring_entry.RowCall, caller: str) -> Scored:
    try:
        if caller == "reward":
            return _from_reward(scoring_entry.reward_call(call))
        return _from_verdict(scoring_entry.score_call(call, caller=caller))
    except ScoringInfrastructureError as exc:
        return _fault(exc)


def _from_verdict(verdict: verify_mod.Verdict) -> Scored:
    return Scored(float(verdict.score), verdict.outcome, verdict.detail, verdict.decided_on)  # type: ignore[arg-type]


def _from_reward(reward: scoring_entry.Reward) -> Scored:
    verdict = reward.verdict
    if reward.shape is None:
        return _from_verdict(verdict)
    return Scored(float(reward.value), verdict.outcome, verdict.detail, verdict.decided_on,  # type: ignore[arg-type]
                  acc=float(verdict.score), shape=reward.shape)  # type: ignore[arg-type]


def _fault(exc: ScoringInfrastructureError) -> Scored:
    warnings.warn(f"{UNSCORED_WARNING} ({exc.outcome}, {exc.code}): {exc}", RuntimeWarning, stacklevel=2)
    return Scored(None, exc.outcome, f"{type(exc).__name__}: {exc}", error=exc)


def shares(scored: Sequence[Scored]) -> dict[str, float]:
    """``spider/<outcome>`` for every outcome (zeros included, so averages over steps stay true),
    ``spider/decided_on_neighbour`` and ``spider/reused``: shares of the batch, 6 digits."""
    total = len(scored) or 1
    counts = collections.Counter(s.outcome for s in scored)
    out = {METRIC_PREFIX + name: counts[name] / total for name in OUTCOMES}
    out[METRIC_PREFIX + "decided_on_neighbour"] = sum(s.on_neighbour for s in scored) / total
    out[METRIC_PREFIX + "reused"] = sum(s.reused for s in scored) / total
    return {name: round(value, 6) for name, value in out.items()}


def report(scored: Sequence[Scored], log_metric: object = None, log_extra: object = None) -> None:
    """Hand the batch's telemetry to TRL's ``log_metric`` / ``log_extra`` when it passed them."""
    if callable(log_metric):
        for name, value in shares(scored).items():
            log_metric(name, value)
    if callable(log_extra):
        log_extra("spider_outcome", [s.outcome for s in scored])
        log_extra("spider_explanation", [s.explanation for s in scored])
        if any(s.shape is not None for s in scored):
            log_extra("spider_reward_shape", [s.shape or "" for s in scored])


def compute_score(kwargs: dict, caller: str = "reward") -> object:
    """verl's ``compute_score``: a float (or the outcome fields), one per item in the batch form.

    A fault raises its typed error (after the same RuntimeWarning): verl's interface takes only a
    number, and docs/integrations.md names the managers that would turn the error into 0.0.
    """
    detailed = bool(kwargs.pop(DETAIL_SETTING, False))
    if not _single(kwargs):
        scored = score_calls([scoring_entry.read_call(item) for item in _batch_items(kwargs)], caller)
        for item in scored:
            if item.error is not None:
                raise item.error
        return [item.fields() if detailed else item.score for item in scored]
    try:
        if caller == "reward":
            reward = scoring_entry.reward_arguments(kwargs)
            return _from_reward(reward).fields() if detailed else float(reward.value)  # type: ignore[arg-type]
        verdict = scoring_entry.score_arguments(kwargs, caller)
    except ScoringInfrastructureError as exc:
        _fault(exc)
        raise
    if detailed:
        return _from_verdict(verdict).fields()
    return float(verdict.score)  # type: ignore[arg-type]


def _single(kwargs: Mapping) -> bool:
    """No batch keyword is given (verl's single form: the per-rollout path, so no generator here)."""
    get = kwargs.get
    for key in BATCH_KEYS:
        if get(key) is not None:
            return False
    return True


def _batch_items(kwargs: Mapping) -> list[dict]:
    """verl's plural keyword lists as one keyword dict per item (the other keywords shared)."""
    lists = {key: kwargs[key] for key in BATCH_KEYS if kwargs.get(key) is not None}
    sizes = {key: len(values) for key, values in lists.items()}
    if "solution_strs" not in lists or len(set(sizes.values())) != 1:
        raise CallArgumentsError(f"verl's batch form needs solution_strs and lists of one length, got {sizes}")
    shared = {key: value for key, value in kwargs.items() if key not in BATCH_KEYS and value is not None}
    return [dict(shared, **{key[:-1]: values[i] for key, values in lists.items()}) for i in range(sizes["solution_strs"])]
