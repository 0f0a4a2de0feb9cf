"""Per-row evaluation results: one JSON object per eval row, written by grading, read by reports.

Format (README, "Per-row results"), one line per row, in eval order::

    {"row_id": "eval-00000", "db_id": "concert_singer", "question": "...", "gold": "SELECT ...",
     "completion": "...", "sql": "SELECT ..." | null, "score": 1.0 | 0.0 | null,
     "outcome": "match", "detail": "same rows", "original_score": 1.0 | 0.0 | null,
     "decided_on": "test suite", "official_score": 1.0 | 0.0 | null, "bird_score": 1.0 | 0.0 | null,
     "official_differs": null | "DISTINCT", "bird_differs": null | "duplicates", "answer": "3f0c..." | null,
     "sample": 0}

``score`` is null exactly when the row is unscored (a gold or infrastructure error), as the trainer
excludes such rows from its mean. It is the verdict under the bundle's semantics: with neighbour
databases, a match on the original database that differs on a neighbour is 0.0; ``original_score``
is the original database's verdict alone, and ``decided_on`` names the database that decided
(``original``, a neighbour, an edit or a search database, or ``test suite`` when all agreed;
`` (disputed gold: <id>)`` follows it on a row whose gold is disputed: ``RowResult.disputed``). Files
written before neighbours lack the last two fields: read as ``original_score = score`` and
``decided_on = "original"``.
``official_score`` and ``bird_score`` are the verdicts of Spider's official execution match and of
BIRD's rule on the original database, computed by the bundle's grader (``bundle/sql/leaderboard.py``),
and ``official_differs``/``bird_differs`` the reason each differs from ``score`` (null when it does
not); files from before them, or graded by a bundle without them, read as null. ``answer`` names the
answer's rows on the original database (the key majority voting groups by). ``sample`` numbers
a row's completions when a stage was graded with several a row (``grade`` keeps them in
``<stage>.samples.jsonl``; 0 otherwise).
``outcome`` is one of harness.common.outcomes.OUTCOMES. A stage's results live at
``results/<stage>.jsonl`` in the prepared folder (harness.common.layout).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes
from harness.common.jsonl import read_jsonl
from harness.common.outcomes import OUTCOMES, Outcome

DISPUTED_MARK = " (disputed gold: "  # the bundle's verify.DISPUTED_MARK (a test holds them equal)


@dataclasses.dataclass(frozen=True)
class RowResult:
    row_id: str
    db_id: str
    question: str
    gold: str
    completion: str
    sql: str | None
    score: float | None
    outcome: Outcome
    detail: str
    original_score: float | None = None
    decided_on: str = "original"
    official_score: float | None = None
    bird_score: float | None = None
    official_differs: str | None = None
    bird_differs: str | None = None
    answer: str | None = None
    sample: int = 0

    @property
    def scored(self) -> bool:
        return self.score is not None

    @property
    def disputed(self) -> str | None:
        """The id of the disputed gold the row was judged by, or None.

        >>> RowResult("eval-00000", "pets_1", "q", "g", "c", None, 0.0, "mismatch", "",
        ...           decided_on="neighbour 2 of pets_1 (disputed gold: pets_1-youngest-dog)").disputed
        'pets_1-youngest-dog'
        """
        at = self.decided_on.rfind(DISPUTED_MARK)
        if at < 0 or not self.decided_on.endswith(")"):
            return None
        return self.decided_on[at + len(DISPUTED_MARK):-1]

    @property
    def decided_place(self) -> str:
        """``decided_on`` without a disputed gold's mark: the database that decided, or ``test suite``."""
        return self.decided_on[:self.decided_on.rfind(DISPUTED_MARK)] if self.disputed is not None else self.decided_on

    @property
    def beyond_original(self) -> bool:
        """Whether a database beyond the original took part (a neighbour, a search database, the test suite)."""
        return self.decided_place != "original"


# The fields every line of a results file carries; the others have defaults (files from before
# neighbour databases lack them).
FIELDS = tuple(f.name for f in dataclasses.fields(RowResult) if f.default is dataclasses.MISSING)


def write_results(path: str | os.PathLike, results: Iterable[RowResult]) -> None:
    lines = [json.dumps(dataclasses.asdict(r), ensure_ascii=False, sort_keys=True) for r in results]
    atomic_write_bytes(path, ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8"))


def samples_path(results: str | os.PathLike) -> Path:
    """Where ``grade`` keeps every sample of a stage graded with several completions a row:
    ``STAGE.samples.jsonl`` beside ``STAGE.jsonl`` (which holds each row's first)."""
    results = Path(results)
    return results.with_name(results.stem + ".samples.jsonl")


def meta_path(results: str | os.PathLike) -> Path:
    """Where ``grade`` notes what a results file was graded with: ``STAGE.meta.json`` beside ``STAGE.jsonl``."""
    results = Path(results)
    return results.with_name(results.stem + ".meta.json")


def write_results_meta(results: str | os.PathLike, zip_sha256: str, eval_sha256: str, rows: int) -> None:
    """The bundle and the eval split a results file was graded with (``report`` never mixes them)."""
    body = {"zip_sha256": zip_sha256, "eval_sha256": eval_sha256, "rows": rows}
    atomic_write_bytes(meta_path(results), (json.dumps(body, sort_keys=True) + "\n").encode("utf-8"))


def read_results_meta(results: str | os.PathLike) -> dict | None:
    """What ``write_results_meta`` wrote beside ``results``; None when nothing was (results from
    before it, or made elsewhere) or it cannot be read."""
    try:
        found = json.loads(meta_path(results).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def read_results(path: str | os.PathLike) -> list[RowResult]:
    """Read and validate a per-row results file; InputError names the file, line and problem. A row
    appears once, or once a sample (``sample`` 0, 1, ...: a samples file)."""
    path = Path(path)
    out, seen = [], set()
    for number, data in read_jsonl(path, "results file", "; regenerate it with `make grade STAGE=<stage>`"):
        if not isinstance(data, dict):
            raise InputError(f"{path}:{number}: expected a JSON object per line")
        missing = [f for f in FIELDS if f not in data]
        if missing:
            raise InputError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        score = _score(data["score"], "score", path, number)
        if data["outcome"] not in OUTCOMES:
            raise InputError(f"{path}:{number}: outcome {data['outcome']!r} is not one of {', '.join(OUTCOMES)}")
        sample = data.get("sample", 0)
        if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
            raise InputError(f"{path}:{number}: sample {sample!r} is not a whole number from 0")
        if (data["row_id"], sample) in seen:
            raise InputError(f"{path}:{number}: row {data['row_id']!r}{f' sample {sample}' if sample else ''} "
                             "appears twice")
        seen.add((data["row_id"], sample))
        original = _score(data.get("original_score", score), "original_score", path, number)
        others: dict[str, Any] = {name: _score(data.get(name), name, path, number) for name in ("official_score", "bird_score")}
        reasons: dict[str, Any] = {name: str(data[name]) if data.get(name) is not None else None
                   for name in ("official_differs", "bird_differs", "answer")}
        out.append(RowResult(**{f: data[f] for f in FIELDS}, original_score=original,
                             decided_on=str(data.get("decided_on", "original")), sample=sample, **others, **reasons))
    return out


def _score(value: object, name: str, path: Path, number: int) -> float | None:
    """``value`` when it is null or a number in [0, 1]; else InputError naming the line."""
    if value is not None and (not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0):
        raise InputError(f"{path}:{number}: {name} {value!r} is not null or a number in [0, 1]")
    return value
