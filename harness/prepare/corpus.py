"""Question files in Spider's or BIRD's shape as prepare's row source: any corpus, offline.

A question file is a JSON list of objects, one a question. Two shapes are known:

* ``spider``: ``question``, ``query`` (the gold), ``db_id`` (Spider, Spider-DK, Spider-Realistic);
* ``bird``: ``question``, ``SQL`` (the gold), ``db_id`` and ``evidence``, the external knowledge BIRD
  gives with each question (BIRD's train and dev files, its mini-dev).

The shape is found from the first entry's fields (the first shape whose fields it holds), or named
(``--shape``); any field can be renamed (``--question-field`` and the others): Spider-Syn's files
hold the question in ``SpiderSynQuestion``. BIRD's evidence goes into the user message as BIRD's own
baselines put it in their prompt (mini_dev's ``llm/src/prompt.py``): after the question, on a line of
its own, labelled ``External Knowledge:``; an entry with empty evidence gets the question alone.

Which question goes to which split: with an eval file given (``--eval-file``: the corpus names its
own split, as Spider-Syn's ``dev.json`` does), its questions are the validation rows and the
questions file's the train rows; with the questions file alone, its databases are split instead
(``hold_out``): the last databases to appear in it hold the validation rows, so that eval is on
databases no training question uses, as with Spider's own files. Entries are checked when read: a
file that is not a JSON list, or an entry without a non-empty text in a field of its shape, is an
InputError naming the file, the entry, the fields it holds and the option naming each field.
Standard library only: prepare runs as a script.

>>> user_message("How many cards?", "card means a row of cards")
'How many cards?\\nExternal Knowledge: card means a row of cards'
>>> user_message("How many cards?", "")
'How many cards?'
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from harness.common.errors import InputError
from harness.common.jsonl import read_json_list
from harness.prepare.fetch_rows import FetchStats

EVIDENCE_LABEL = "External Knowledge:"  # BIRD's baselines' label for the evidence (mini_dev llm/src/prompt.py)


@dataclasses.dataclass(frozen=True)
class Fields:
    """Which field of an entry holds what; ``evidence`` None: the shape has none."""

    question: str
    gold: str
    db_id: str
    evidence: str | None = None

    def required(self) -> tuple[str, ...]:
        return (self.question, self.gold, self.db_id)


SHAPES: dict[str, Fields] = {
    "spider": Fields(question="question", gold="query", db_id="db_id"),
    "bird": Fields(question="question", gold="SQL", db_id="db_id", evidence="evidence"),
}
# The option of `prepare` that names each field (for the messages).
FIELD_OPTIONS = {"question": "--question-field", "gold": "--gold-field", "db_id": "--db-field",
                 "evidence": "--evidence-field"}


def user_message(question: str, evidence: str | None) -> str:
    """The question, and BIRD's evidence after it when there is some (module docstring)."""
    if evidence is None or not evidence.strip():
        return question
    return f"{question}\n{EVIDENCE_LABEL} {evidence.strip()}"


def fields_for(path: Path, first: Mapping, shape: str | None, renamed: Mapping[str, str]) -> tuple[str, Fields]:
    """The shape's name and fields for a file whose first entry is ``first``: ``shape`` when named,
    else the first of SHAPES whose fields (``renamed`` applied) the entry holds.

    >>> fields_for(Path("f.json"), {"question": "q", "SQL": "s", "db_id": "d"}, None, {})
    ('bird', Fields(question='question', gold='SQL', db_id='db_id', evidence='evidence'))
    >>> fields_for(Path("f.json"), {"SpiderSynQuestion": "q", "query": "s", "db_id": "d"}, None,
    ...            {"question": "SpiderSynQuestion"})[1].question
    'SpiderSynQuestion'
    """
    names = [shape] if shape is not None else list(SHAPES)
    for name in names:
        fields = dataclasses.replace(SHAPES[name], **renamed)
        if shape is not None or all(field in first for field in fields.required()):
            return name, fields
    found = ", ".join(sorted(map(str, first))) or "none"
    known = "; ".join(f"{name}: {', '.join(f for f in (*f.required(), f.evidence) if f)}" for name, f in SHAPES.items())
    raise InputError(f"{path}: the entries are in no known shape (fields found: {found}; known shapes: {known}). "
                     "Name the fields with " + ", ".join(f"{option} NAME" for option in FIELD_OPTIONS.values())
                     + " (e.g. --question-field SpiderSynQuestion), or the shape with --shape spider|bird")


def _text(path: Path, i: int, entry: Mapping, role: str, field: str) -> str:
    value = entry.get(field)
    if not isinstance(value, str) or not value.strip():
        found = ", ".join(sorted(map(str, entry))) or "none"
        raise InputError(f"{path}: entry {i} lacks a non-empty text field {field!r} (the {role}; fields found: "
                         f"{found}): name the field that holds it with {FIELD_OPTIONS[role]} NAME, or fix the entry")
    return value


def _row(path: Path, i: int, entry: object, fields: Fields) -> dict:
    if not isinstance(entry, dict):
        raise InputError(f"{path}: entry {i} is {type(entry).__name__}, not an object: give a JSON list of "
                         "questions in Spider's or BIRD's shape")
    evidence = entry.get(fields.evidence) if fields.evidence is not None else None
    if evidence is not None and not isinstance(evidence, str):
        raise InputError(f"{path}: entry {i}'s {fields.evidence!r} is {type(evidence).__name__}, not text: fix the "
                         f"entry, or name the evidence's field with {FIELD_OPTIONS['evidence']} NAME")
    question = _text(path, i, entry, "question", fields.question)
    return {"db_id": _text(path, i, entry, "db_id", fields.db_id),
            "question": user_message(question, evidence),
            "query": _text(path, i, entry, "gold", fields.gold)}


def read_questions(path: Path, shape: str | None = None, renamed: Mapping[str, str] | None = None) -> tuple[str, list[dict]]:
    """The shape found (or named) and every question of ``path``, in order, as dicts of db_id,
    question (the user message) and query."""
    data = read_json_list(path, "question file", "give a JSON list of questions in Spider's or BIRD's shape")
    if not data:
        raise InputError(f"question file {path} holds an empty list, not a list of questions in Spider's or BIRD's shape")
    first = data[0] if isinstance(data[0], dict) else {}
    name, fields = fields_for(path, first, shape, renamed or {})
    return name, [_row(path, i, entry, fields) for i, entry in enumerate(data)]


def hold_out(rows: Sequence[dict], eval_rows: int, usable: Callable[[str], bool]) -> tuple[str, ...]:
    """The databases whose questions are the eval split when one file holds the whole corpus: the
    usable ones from the last to appear backwards, until they hold ``eval_rows`` questions; never the
    first usable one (training needs a database).

    >>> rows = [{"db_id": d} for d in "aabbbcc"]
    >>> hold_out(rows, 3, lambda db: True), hold_out(rows, 2, lambda db: db != "c"), hold_out(rows, 0, bool)
    (('b', 'c'), ('b',), ())
    """
    order = [db for db in dict.fromkeys(row["db_id"] for row in rows) if usable(db)]
    counts = collections.Counter(row["db_id"] for row in rows)
    held: list[str] = []
    for db_id in reversed(order[1:]):
        if sum(counts[d] for d in held) >= eval_rows:
            break
        held.append(db_id)
    return tuple(reversed(held))


class QuestionFiles:
    """The train and validation rows of a corpus's files (a RowSource; module docstring).

    ``usable``: whether a database can hold eval rows (in --databases, its schema short enough);
    used only when there is no eval file.
    """

    def __init__(self, questions: Path, eval_file: Path | None, *, eval_rows: int, usable: Callable[[str], bool],
                 shape: str | None = None, renamed: Mapping[str, str] | None = None) -> None:
        self.files = (questions, eval_file)
        self.stats = FetchStats(files_read=1 if eval_file is None else 2)
        self.shape, rows = read_questions(questions, shape, renamed)
        self.held_out: tuple[str, ...] = ()
        if eval_file is not None:
            # The eval file is read in the questions file's shape (the same fields renamed).
            self._rows = {"train": rows, "validation": read_questions(eval_file, self.shape, renamed)[1]}
        else:
            self.held_out = hold_out(rows, eval_rows, usable)
            held = set(self.held_out)
            self._rows = {"train": [r for r in rows if r["db_id"] not in held],
                          "validation": [r for r in rows if r["db_id"] in held]}

    def describe(self) -> str:
        """Where the questions come from, for the summary."""
        questions, eval_file = self.files
        if eval_file is not None:
            return f"question file {questions} and eval file {eval_file} ({self.shape} shape, no network)"
        held = ", ".join(self.held_out) or "none"
        return (f"question file {questions} ({self.shape} shape, no network); eval on the databases held out: "
                f"{held}")

    def rows(self, split: str) -> Iterator[dict]:
        rows = self._rows.get(split)
        if rows is None:
            raise InputError(f"no question file for split {split!r}: give one of {sorted(self._rows)}")
        yield from rows
