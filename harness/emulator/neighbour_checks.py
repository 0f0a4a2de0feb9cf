"""The pre-push check of a bundle's neighbour databases (docs/neighbours.md, "Checks").

``neighbour databases``:

* every neighbour keeps every invariant of its original's data that the index records (a relaxed
  one every invariant but the one its entry names), and every gold judged on a neighbour finds
  there what it presupposes (the bundle's own
  ``neighbours.proof.prove_bundle``, run on the unpacked zip: the proof ``prepare`` made, again);
* every distinct gold matches itself on the original database and on every neighbour it is judged
  on (through the bundle's ``grader.grade``, as the trainer scores);
* a sample of golds, given as a prediction in another text (so that the search cannot tell it is
  the gold's), matches itself under the grader's counterexample search too;
* the mechanical mutations of the golds that the original database cannot tell from their gold
  (harness.common.mutate: they return the gold's rows there) are counted, with the share the
  neighbours and the search separate. Counting never fails the check: separating is their
  purpose, not a promise.

A bundle built without neighbours passes, saying so. Standard library only: it runs inside the
trainer container too.
"""

from __future__ import annotations

import collections

from harness.common import mutate
from harness.common.bundle_loader import LoadedBundle
from harness.emulator.check_result import Check, _check

NAME = "neighbour databases"
SEARCHED_GOLDS = 20  # golds checked against themselves under the search (each searches its whole budget)
OTHER_TEXT = "\n-- the gold, as a prediction"  # another text, the same query: the search does not skip it


def check_neighbours(loaded: LoadedBundle, max_golds: int | None = None) -> Check:
    index = loaded.index()
    databases = index.get("databases", {})
    count = sum(len(entry.get("neighbours") or []) for entry in databases.values())
    if not count:
        return Check(NAME, True, "no neighbour databases in this bundle (prepared with --neighbours none): "
                                 "completions are judged on the original databases only")
    failures = [f"invariant: {v}" for v in loaded.module("neighbours.proof").prove_bundle(index, str(loaded.root / "data"))]
    grade = loaded.function("grader:grade")
    pairs = sorted({(r["db_id"], r["gold"]) for r in index.get("rows", [])
                    if databases.get(r["db_id"], {}).get("neighbours")})[:max_golds]
    runs, searched = 0, 0
    for k, (db_id, gold) in enumerate(pairs):
        text = gold + OTHER_TEXT if k < SEARCHED_GOLDS else gold
        try:
            info = grade(output=text, expected=gold, extra_info={"db_id": db_id})
        except Exception as exc:  # noqa: BLE001 - reported as this gold's failure, as the golds check does
            failures.append(f"{db_id}: gold {gold[:90]!r}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(info, dict) or info.get("outcome") != "match":
            failures.append(f"{db_id}: gold {gold[:90]!r} does not match itself: {info}")
            continue
        runs += int(info.get("neighbours_checked") or 0)
        searched += int(info.get("searched") or 0)
    disputed = {(r["db_id"], r["gold"]) for r in index.get("rows", []) if r.get("disputed")}
    # a disputed gold's mutation may be its accepted answer (`>` made `>=`): counted apart
    tally = _separated(loaded, grade, [p for p in pairs if p not in disputed])
    share = f"{tally['separated'] / tally['look-alike']:.0%}" if tally["look-alike"] else "none to separate"
    return _check(NAME, failures,
                  f"{count} neighbour databases of {sum(1 for e in databases.values() if e.get('neighbours'))} "
                  f"databases keep every invariant of their originals{_relaxed(databases)}; {len(pairs)} golds match on the original "
                  f"and on their neighbours ({runs} neighbour runs), {min(len(pairs), SEARCHED_GOLDS)} under the "
                  f"search too ({searched} databases searched); {tally['separated']} of {tally['look-alike']} "
                  f"mutated golds the original cannot tell from their gold are separated ({share})"
                  + (f"; {sum(p in disputed for p in pairs)} disputed golds left out of that count (a mutation may be "
                     "an accepted answer)" if disputed else ""),
                  f"{len(failures)} failures: invariants broken, or golds that do not match themselves")


def _relaxed(databases: dict) -> str:
    """How many neighbours relax an invariant for the golds their index entry names (docs/neighbours.md)."""
    n = sum(1 for e in databases.values() for item in e.get("neighbours") or [] if item.get("relaxed"))
    return f" ({n} each but the one it relaxes for the golds it names)" if n else ""


def _separated(loaded: LoadedBundle, grade, pairs: list[tuple[str, str]]) -> collections.Counter:
    """Mutated golds the original cannot tell from their gold, and how many the grader separates."""
    files = loaded.database_files()
    tally: collections.Counter = collections.Counter()
    for db_id, gold in pairs:
        for mutation in mutate.sorted_mutations(gold, files[db_id])[1]:
            tally["look-alike"] += 1
            verdict = grade(output=mutation.sql, expected=gold, extra_info={"db_id": db_id})
            tally["separated"] += verdict.get("score") == 0.0 and verdict.get("original_score") == 1.0
    return tally
