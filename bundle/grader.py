"""Evaluation grader: execution match of the model's answer against the row's gold, once per example.

``compute_score(...)`` takes the envelope (``input, output, expected``) or the verl keywords and
returns 1.0 or 0.0; ``grade(...)`` returns the same score with the outcome and an explanation
(the shape an ``http:`` grader answers with). Infrastructure faults raise a typed error: the
example is unscored, never a silent 0.0 or 1.0. Both survive pickling (bundle_package.EntryPoint).
"""

from __future__ import annotations

try:
    from . import bundle_package
    from .scoring import batch as scoring_batch
    from .scoring import entry as scoring_entry
except ImportError:  # loaded as a file with no parent package (verl's custom_reward_function.path)
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    bundle_package = _loader.sibling(__file__, "bundle_package")
    scoring_batch = _loader.sibling(__file__, "scoring.batch")
    scoring_entry = _loader.sibling(__file__, "scoring.entry")

_entry_point = bundle_package.entry_point(__file__)


@_entry_point
def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs):
    """Score one evaluation example; see the module docstring."""
    kwargs.update(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                  extra_info=extra_info)
    return scoring_batch.compute_score(kwargs, caller="grader")


@_entry_point
def grade(**kwargs) -> dict:
    """``{"score", "outcome", "explanation", "sql", "original_score", "decided_on", "neighbours_checked", "searched",
    "disputed", "accepted", "official_score", "bird_score", "official_differs", "bird_differs", "answer"}``.

    ``score`` is the verdict under the bundle's semantics (with neighbour databases when it has
    them, and the counterexample search); ``original_score`` the verdict of the original database
    alone; ``decided_on`` names the database whose result decided (``original``, a neighbour, a
    search database, an edit of the original, or ``test suite`` when all agreed; followed by
    `` (disputed gold: <id>)`` on a row whose gold is disputed); ``searched`` counts the databases the
    searches judged; ``disputed`` is that gold's id, or None; ``accepted`` the disputed gold's
    accepted answer the completion matched (None: the gold itself, or none). ``official_score`` and
    ``bird_score`` are the verdicts of Spider's official execution match and of BIRD's rule on the
    original database (``sql.leaderboard``; None when their gold did not run), ``official_differs``
    and ``bird_differs`` why each differs from ``score`` (None when it does not); ``answer`` names the
    answer's rows on the original database (16 hex digits; None when it did not run), the key
    majority voting over sampled answers groups by.
    """
    call = scoring_entry.read_call(kwargs)
    verdict = scoring_entry.score_call(call, caller="grader")
    other = scoring_entry.comparable_call(call, verdict)
    return {"score": verdict.score, "outcome": verdict.outcome, "explanation": verdict.detail,
            "sql": verdict.sql, "original_score": verdict.original_score, "decided_on": verdict.decided_on,
            "neighbours_checked": verdict.neighbours_checked, "searched": verdict.searched,
            "disputed": verdict.disputed, "accepted": verdict.accepted, "official_score": other.official,
            "bird_score": other.bird, "official_differs": other.official_reason, "bird_differs": other.bird_reason,
            "answer": other.answer}
