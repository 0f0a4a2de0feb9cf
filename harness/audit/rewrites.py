"""The other side of the audit: equivalent rewrites of the golds, which the bundle must pay.

Closing a hole must not cost a fair answer. ``fixtures/neighbours/rewrites.json`` holds rewrites of
real Spider golds that answer the same question in other words (join order, aliases, ``IN``
against ``EXISTS``...; docs/neighbours.md); every rewrite of a gold the audited splits hold is
scored like the degenerate answers, and each one not paid 1.0 is a *rejected equivalent rewrite*.
Golds are matched as the bundle matches them (``scoring.index.normalize_gold``).
"""

from __future__ import annotations

import json
from pathlib import Path

from bundle.scoring.index import normalize_gold
from harness.audit.model import AuditRow, paid
from harness.emulator.calls import Call

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "neighbours" / "rewrites.json"

Task = tuple[str, str, str, str]  # (function, db_id, gold, sql), as harness.audit.run scores them


def load(path: Path = CORPUS) -> list[dict]:
    """The corpus's rewrites (``db_id``, ``kind``, ``gold``, ``rewrite``); none when the file is absent."""
    if not path.is_file():
        return []
    return json.loads(path.read_text(encoding="utf-8"))["rewrites"]


def matching(rows: list[AuditRow], corpus: list[dict], function_of: dict[str, str]) -> dict[str, list[tuple[Task, str]]]:
    """Per split, the (task, kind) of every rewrite whose database and gold a row of that split has."""
    by_gold = {(r.db_id, normalize_gold(r.gold)): r for r in rows}
    out: dict[str, list[tuple[Task, str]]] = {}
    for item in corpus:
        row = by_gold.get((item["db_id"], normalize_gold(item["gold"])))
        if row is not None:
            task = (function_of[row.split], row.db_id, row.gold, item["rewrite"])
            out.setdefault(row.split, []).append((task, item["kind"]))
    return out


def section(found: dict[str, list[tuple[Task, str]]], calls: dict[Task, Call], splits: tuple[str, ...]) -> dict:
    """The document's ``rewrites``: per split how many were scored and rejected, and the rejected ones."""
    rejected = [{"split": split, "db_id": task[1], "gold": task[2], "kind": kind, "rewrite": task[3],
                 "detail": calls[task].detail or f"scored {calls[task].score}"}
                for split in splits for task, kind in found.get(split, []) if not paid(calls[task])]
    return {"corpus": "fixtures/neighbours/rewrites.json",
            "splits": {s: {"scored": len(found.get(s, [])), "rejected": sum(1 for r in rejected if r["split"] == s)}
                       for s in splits},
            "rejected": rejected}
