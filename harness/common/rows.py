"""The splits' chat rows: the one row type, the one row-id rule, and how a split must match its bundle.

A split file (``train.jsonl``, ``rl.jsonl``, ``eval.jsonl``) holds one chat row per line,
``{"messages": [system, user, assistant]}``: the final assistant message is the gold, the last
user message the question, and every message but the gold the prompt. Line ``i`` of split ``s``
(counting from 0) is row ``s-{i:05d}``: the id prepare stores in the bundle's index, by which the
emulator, `grade`, `verify` and completions files all name rows.

>>> row_id("eval", 3)
'eval-00003'
>>> row = SplitRow("eval-00000", "eval", ({"role": "user", "content": "How many?"},
...                                        {"role": "assistant", "content": "SELECT 1"}))
>>> row.gold, row.question, row.prompt_text
('SELECT 1', 'How many?', 'How many?')
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from harness.common.errors import InputError

ROLES = ("system", "user", "assistant")
REGENERATE = "regenerate the splits with `make bundle` (or `make sample-bundle`)"


def row_id(split: str, index: int) -> str:
    """The id of row ``index`` (from 0) of ``split``."""
    return f"{split}-{index:05d}"


@dataclasses.dataclass(frozen=True)
class SplitRow:
    """One chat row of a split."""

    id: str
    split: str
    messages: tuple[dict, ...]

    @property
    def gold(self) -> str:
        return str(self.messages[-1]["content"])

    @property
    def question(self) -> str:
        return next((str(m["content"]) for m in reversed(self.messages) if m["role"] == "user"), "")

    @property
    def prompt(self) -> list[dict]:
        """The messages the model is given (all but the gold), as the trainer passes them."""
        return [dict(m) for m in self.messages[:-1]]

    @property
    def prompt_text(self) -> str:
        """The prompt's text, one message a paragraph (its schema lines name the database)."""
        return "\n".join(str(m["content"]) for m in self.messages[:-1])


def row_problem(data: object) -> str | None:
    """Why a parsed JSONL line is not a well-formed chat row (None when it is)."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list) or not data["messages"]:
        return "not an object with a non-empty 'messages' list"
    for message in data["messages"]:
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            return "a message without a role in system/user/assistant and a text content"
    if data["messages"][-1]["role"] != "assistant" or not data["messages"][-1]["content"].strip():
        return "does not end with a non-empty assistant message (the gold)"
    if not any(m["role"] == "user" for m in data["messages"]):
        return "no user message (the question)"
    return None


def read_split_lenient(path: str | os.PathLike, split: str) -> tuple[list[SplitRow], list[str]]:
    """The rows of a split and a problem per malformed line ("file:line: why"); rows keep their line's id."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {split} split {path}: {exc}; {REGENERATE}") from None
    rows, problems = [], []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except ValueError as exc:
            problems.append(f"{path}:{number}: not JSON ({exc})")
            continue
        problem = row_problem(data)
        if problem:
            problems.append(f"{path}:{number}: {problem}")
            continue
        rows.append(SplitRow(row_id(split, number - 1), split, tuple(data["messages"])))
    return rows, problems


def read_split(path: str | os.PathLike, split: str) -> list[SplitRow]:
    """The rows of a split; InputError naming the first malformed line, or an empty split."""
    rows, problems = read_split_lenient(path, split)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{problems[0]}{more}; {REGENERATE}")
    if not rows:
        raise InputError(f"the {split} split {path} has no rows; {REGENERATE}")
    return rows


def _norm(text: str) -> str:
    return " ".join(text.split())


def index_mismatches(rows: list[SplitRow], index: dict, splits: tuple[str, ...]) -> list[str]:
    """Why these rows are not the ones the bundle's index stores for ``splits`` (empty: they are).

    Each row must be in the index under its id with the same gold (whitespace aside), and the index
    must hold no other row of those splits.
    """
    by_id = {str(r.get("id")): r for r in index.get("rows", [])}
    problems, seen = [], set()
    for row in rows:
        stored = by_id.get(row.id)
        seen.add(row.id)
        if stored is None:
            problems.append(f"{row.id}: not in the bundle's index (dataset and bundle from different builds)")
        elif _norm(str(stored.get("gold", ""))) != _norm(row.gold):
            problems.append(f"{row.id}: gold {row.gold[:60]!r} differs from the bundle's {str(stored.get('gold', ''))[:60]!r}")
    extra = sorted(i for i, r in by_id.items() if r.get("split") in splits and i not in seen)
    problems += [f"{i}: in the bundle's index but not in the split" for i in extra]
    return problems
