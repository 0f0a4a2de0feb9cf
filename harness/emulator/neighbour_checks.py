"""The pre-push check of a bundle's neighbour databases (docs/bundle.md, "Neighbour databases").

``neighbour databases``: every distinct gold matches itself on the original database and on every
neighbour it is judged on (through the bundle's ``grader.grade``, as the trainer scores); and the
mechanical mutations of the golds that the original database cannot tell from their gold
(harness.common.mutate: they return the gold's rows there) are counted, with the share the
neighbours separate. Counting never fails the check: separating is the neighbours' purpose, not a
promise. A bundle built without neighbours passes, saying so.

Standard library only: it runs inside the trainer container too.
"""

from __future__ import annotations

import collections

from harness.common import mutate
from harness.common.bundle_loader import LoadedBundle
from harness.emulator.check_result import Check, _check

NAME = "neighbour databases"


def check_neighbours(loaded: LoadedBundle, max_golds: int | None = None) -> Check:
    index = loaded.index()
    databases = index.get("databases", {})
    count = sum(len(entry.get("neighbours") or []) for entry in databases.values())
    if not count:
        return Check(NAME, True, "no neighbour databases in this bundle (prepared with --neighbours none): "
                                 "completions are judged on the original databases only")
    grade = loaded.function("grader:grade")
    files = loaded.database_files()
    pairs = sorted({(r["db_id"], r["gold"]) for r in index.get("rows", [])
                    if databases.get(r["db_id"], {}).get("neighbours")})[:max_golds]
    failures: list[str] = []
    runs = 0
    tally: collections.Counter = collections.Counter()
    for db_id, gold in pairs:
        try:
            info = grade(output=gold, expected=gold, extra_info={"db_id": db_id})
        except Exception as exc:  # noqa: BLE001 - reported as this gold's failure, as the golds check does
            failures.append(f"{db_id}: gold {gold[:90]!r}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(info, dict) or info.get("outcome") != "match":
            failures.append(f"{db_id}: gold {gold[:90]!r} does not match itself: {info}")
            continue
        runs += int(info.get("neighbours_checked") or 0)
        for mutation in mutate.sorted_mutations(gold, files[db_id])[1]:
            tally["look-alike"] += 1
            verdict = grade(output=mutation.sql, expected=gold, extra_info={"db_id": db_id})
            tally["separated"] += verdict.get("score") == 0.0 and verdict.get("original_score") == 1.0
    share = f"{tally['separated'] / tally['look-alike']:.0%}" if tally["look-alike"] else "none to separate"
    return _check(NAME, failures,
                  f"{count} neighbour databases of {sum(1 for e in databases.values() if e.get('neighbours'))} "
                  f"databases; {len(pairs)} golds match on the original and on their neighbours ({runs} neighbour "
                  f"runs); {tally['separated']} of {tally['look-alike']} mutated golds the original cannot tell "
                  f"from their gold are separated by the neighbours ({share})",
                  f"{len(failures)} of {len(pairs)} golds do not match themselves on their neighbours")
