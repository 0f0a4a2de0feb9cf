"""The fewest neighbours each gold is judged on: a check costs the reward a run on every match.

A gold is judged on a neighbour database to tell it from the answers that only look like it. Once
the separation has added neighbours for the review's holes (``separate``), a gold may be judged on
more of them than it needs: a neighbour added for one of its near misses often tells the gold from
the look-alikes a distilled one was judged there for. ``prune`` keeps, for each gold, the fewest of
its neighbours that together still tell it from every answer any of them does, among

* its look-alikes and constant answers the original accepts (``Distilled.look_alikes``),
* the answers the review judged for it that the original accepts (its near misses, its holes),

so no answer the reward rejected before is paid after: only runs that told nothing new are left
out. Deterministic: the same neighbours and answers give the same choice (``harness.common.cover``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from bundle import gold_results, neighbour_search
from bundle.scoring_limits import Limits
from bundle.verify import MATCH, judge
from harness.common.cover import fewest
from harness.prepare.neighbours.distil import Distilled


def prune(found: Distilled, original: Path, answers: Mapping[str, Sequence[str]], limits: Limits,
          max_steps: int) -> tuple[Distilled, dict[tuple[str, str], int]]:
    """``found`` (the neighbours of the database at ``original``) with each gold judged on the fewest
    of its neighbours that tell it from every answer (module docstring) any of them tells it from;
    ``answers``: gold -> the review's answers for it (those the original rejects are left aside).
    A gold none of its neighbours tells from anything keeps its first. Also: (gold, answer) -> the
    first neighbour kept for that gold that tells it (0-based), for the golds whose checks changed."""
    results = dict(found.results)
    first: dict[tuple[str, str], int] = {}
    for gold, per in found.results.items():
        judged = [(k, result) for k, result in enumerate(per) if result is not None]
        if len(judged) < 2 or gold not in found.originals:
            continue
        accepted = [sql for sql in dict.fromkeys(answers.get(gold, ()))
                    if judge(str(original), sql, found.originals[gold], limits, max_steps=max_steps).outcome == MATCH]
        tried = list(dict.fromkeys([*found.look_alikes.get(gold, ()), *accepted]))
        told = [_told(found.files[k], here, tried, limits, max_steps) for k, here in judged]
        chosen = fewest(told) or (0,)
        results[gold] = [None] * len(per)
        for i in chosen:
            k, here = judged[i]
            results[gold][k] = here
            for sql in sorted(told[i]):
                first.setdefault((gold, sql), k)
    return dataclasses.replace(found, results=results), first


def without_unused(found: Distilled, since: int) -> tuple[Distilled, list[int | None]]:
    """``found`` without the neighbours from position ``since`` on that no gold is judged on any more,
    and each old position's new one (None: left out)."""
    used = [k < since or any(per[k] is not None for per in found.results.values()) for k in range(len(found.files))]
    where: list[int | None] = [sum(used[:k]) if used[k] else None for k in range(len(found.files))]
    results = {gold: [r for r, keep in zip(per, used) if keep] for gold, per in found.results.items()}
    return dataclasses.replace(found, files=[f for f, keep in zip(found.files, used) if keep], results=results), where


def _told(path: Path, here: gold_results.GoldResult, answers: list[str], limits: Limits, max_steps: int) -> set[str]:
    """The answers the reward tells from the gold on the neighbour at ``path`` (the gold's result there: ``here``)."""
    return {sql for sql in answers
            if judge(str(path), sql, here, limits, neighbour=True, max_steps=max_steps).outcome in neighbour_search.DECISIVE}
