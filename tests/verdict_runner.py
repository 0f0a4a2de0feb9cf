"""Score a list of items with a staged bundle, in a process of its own, and write the verdicts as JSON.

Usage: python verdict_runner.py BUNDLE_ROOT ITEMS_JSON OUT_JSON

Each item is ``{"completion", "gold", "db_id"}`` (scored as the trainer scores a row, through the
bundle's index) or ``{"completion", "gold", "database", "is_sql", "limits"}`` (``verify`` on a
database file with those limit overrides). The verdict of each is ``[outcome, score, steps]``; an
infrastructure error is ``[its outcome, null, null]``. The bundle is imported as a package, the
way the trainer does.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(root: str, items_path: str, out: str) -> None:
    root_path = Path(root)
    sys.path.insert(0, str(root_path.parent))
    package = root_path.name
    entry = importlib.import_module(f"{package}.scoring.entry")
    verify = importlib.import_module(f"{package}.verify")
    errors = importlib.import_module(f"{package}.contract.errors")
    limits_mod = importlib.import_module(f"{package}.contract.limits")
    verdicts = []
    for item in json.loads(Path(items_path).read_text(encoding="utf-8")):
        if "database" in item:
            limits = limits_mod.DEFAULT_LIMITS.replace(**item.get("limits", {}))
            v = verify.verify(item["completion"], item["gold"], item["database"], limits=limits,
                              is_sql=item.get("is_sql", False))
            verdicts.append([v.outcome, v.score, v.steps])
            continue
        call = entry.RowCall(item["completion"], item["gold"], item["db_id"])
        try:
            v = entry.score_call(call, root=str(root_path))
            verdicts.append([v.outcome, v.score, v.steps])
        except errors.ScoringInfrastructureError as exc:
            verdicts.append([exc.outcome, None, None])
    Path(out).write_text(json.dumps(verdicts), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:4])
