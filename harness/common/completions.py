"""Files of model completions, as the emulator, the grade command and the report read them.

Accepted JSONL line shapes (README, "Completions files"), one object per line:

* ``{"row_id": "eval-00003", "completion": "SELECT ..."}``;
* ``{"row_id": "rl-00007", "completions": ["...", "..."]}`` (a GRPO group);
* ``{"completion": "..."}`` or a bare JSON string: positional, line i is row i;
* a trainer-exported evaluation row: ``{"output": "...", ...}`` (also ``prediction``,
  ``response``, ``generated``), with ``row_id``/``id`` when present, else positional; ``output``
  may be a list of chat messages (the last assistant message counts).

Either every line names its row or none does.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from harness.common.errors import InputError
from harness.common.jsonl import read_jsonl

_TEXT_KEYS = ("completion", "output", "prediction", "response", "generated")
_ID_KEYS = ("row_id", "id")


MAX_NESTING = 8  # as the bundle's scoring_entry.MAX_NESTING

# What to do when a file does not answer the split's rows (the sample's file given for a real bundle).
OTHER_ROWS_FIX = ("Give a file with one completion per row of this split: --completions FILE (in Make: "
                  "GRADER_COMPLETIONS=FILE for test-grader and check-cpu, COMPLETIONS=FILE for grade), or, to check "
                  "the grader path alone, `emulate --gold-completions` (what test-grader and check-cpu run when "
                  "GRADER_COMPLETIONS is not set)")


def message_text(value: object) -> str | None:
    """Text of a completion given as a string, a message dict (``content``, a string or a list of
    parts ``{"type": "text", "text": ...}`` joined with newlines) or a list of chat messages (the
    last assistant message counts); None when it holds no text. The bundle reads its arguments the
    same way (scoring_entry.message_text; tests/test_vocabulary.py holds them equal). Nesting deeper
    than ``MAX_NESTING`` (or a list holding itself) is an InputError.

    >>> message_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "SELECT 1"}])
    'SELECT 1'
    """
    for _depth in range(MAX_NESTING + 1):
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            content = value.get("content")
            return _parts_text(content) if isinstance(content, list) else content if isinstance(content, str) else None
        if not isinstance(value, list) or not value:
            return None
        if all(isinstance(m, dict) and "type" in m and "role" not in m for m in value):
            return _parts_text(value)
        assistant = [m for m in value if isinstance(m, dict) and m.get("role") == "assistant"]
        value = assistant[-1] if assistant else value[-1]
    raise InputError(f"a completion is nested more than {MAX_NESTING} lists or messages deep (or holds itself): "
                     "write a string, a message {\"role\", \"content\"} or a list of them")


def _parts_text(parts: list) -> str | None:
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type", "text") == "text"
             and isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else None


@dataclasses.dataclass(frozen=True)
class Completions:
    path: str
    by_row: dict[str, list[str]] | None  # when lines carry row ids
    positional: list[list[str]] | None  # otherwise

    def for_rows(self, row_ids: list[str], *, every_row: bool = True) -> list[list[str]]:
        """Completions per row, in ``row_ids`` order. InputError on unknown or missing rows."""
        if self.by_row is not None:
            unknown = sorted(set(self.by_row) - set(row_ids))
            if unknown:
                raise InputError(f"{self.path}: completions for rows not in the split: {', '.join(unknown[:5])}"
                                 f"{' ...' if len(unknown) > 5 else ''}; was it made for another split or bundle? "
                                 + OTHER_ROWS_FIX)
            missing = [r for r in row_ids if r not in self.by_row]
            if every_row and missing:
                twice = [r for r in row_ids if len(self.by_row.get(r, ())) > 1]
                if twice:  # as many lines as rows, one row written twice: a duplicate, not a file for other rows
                    raise InputError(f"{self.path}: row {twice[0]} has {len(self.by_row[twice[0]])} completions and "
                                     f"{len(missing)} row(s) none (first {missing[0]}): a row_id written twice? Give "
                                     "each row its own line, with its own row_id")
                raise InputError(f"{self.path}: no completion for {len(missing)} of the split's {len(row_ids)} rows "
                                 f"(first {missing[0]}): was it made for another split or bundle? " + OTHER_ROWS_FIX)
            return [self.by_row.get(r, []) for r in row_ids]
        assert self.positional is not None
        if every_row and len(self.positional) != len(row_ids):
            raise InputError(f"{self.path}: {len(self.positional)} positional completions for "
                             f"{len(row_ids)} rows; give one line per row or add row_id fields. " + OTHER_ROWS_FIX)
        return [self.positional[i] if i < len(self.positional) else [] for i in range(len(row_ids))]

    def samples_per_row(self, row_ids: list[str]) -> list[list[str]]:
        """The same number of completions for every row (one, or n sampled), in ``row_ids`` order."""
        groups = self.for_rows(row_ids)
        for row, group in zip(row_ids, groups):
            if len(group) != len(groups[0]):
                raise InputError(f"{self.path}: row {row_ids[0]} has {len(groups[0])} completions and row {row} "
                                 f"{len(group)}; give every eval row the same number (one, or the n samples drawn "
                                 "for each)")
        return groups

    def one_per_row(self, row_ids: list[str]) -> list[str]:
        """Exactly one completion per row, in ``row_ids`` order (an evaluation answers each row once)."""
        groups = self.for_rows(row_ids)
        for row, group in zip(row_ids, groups):
            if len(group) != 1:
                raise InputError(f"{self.path}: row {row} has {len(group)} completions; an evaluation "
                                 "takes exactly one per eval row")
        return [group[0] for group in groups]


def row_id_of(data: dict) -> str | None:
    """The row id a JSONL object names (``row_id``, else ``id``; text or a number), or None.

    >>> row_id_of({"id": 3, "completion": "..."}), row_id_of({"completion": "..."})
    ('3', None)
    """
    return next((str(data[k]) for k in _ID_KEYS if isinstance(data.get(k), (str, int))), None)


def _parse_line(path: Path, number: int, data: object) -> tuple[str | None, list[str]]:
    if isinstance(data, str):
        return None, [data]
    if not isinstance(data, dict):
        raise InputError(f"{path}:{number}: expected a JSON object or string")
    row_id = row_id_of(data)
    if isinstance(data.get("completions"), list):
        texts = [message_text(v) for v in data["completions"]]
        if any(t is None for t in texts):
            raise InputError(f"{path}:{number}: every entry of 'completions' must be text")
        return row_id, [t for t in texts if t is not None]
    for key in _TEXT_KEYS:
        if key in data:
            text = message_text(data[key])
            if text is None:
                raise InputError(f"{path}:{number}: {key!r} is not text or chat messages")
            return row_id, [text]
    raise InputError(f"{path}:{number}: no completion field (one of {', '.join(_TEXT_KEYS)}, completions)")


def read_completions(path: str | os.PathLike) -> Completions:
    path = Path(path)
    by_row: dict[str, list[str]] = {}
    positional: list[list[str]] = []
    with_ids = without_ids = 0
    for number, data in read_jsonl(path, "completions file"):
        row_id, texts = _parse_line(path, number, data)
        if row_id is None:
            without_ids += 1
            positional.append(texts)
        else:
            with_ids += 1
            by_row.setdefault(row_id, []).extend(texts)
    if with_ids and without_ids:
        raise InputError(f"{path}: {with_ids} lines name their row and {without_ids} do not; use one style")
    if with_ids:
        return Completions(str(path), by_row, None)
    return Completions(str(path), None, positional)
