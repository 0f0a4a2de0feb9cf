"""Put distilled neighbour databases into a staged bundle: files under data/neighbours/, and the index.

Index additions (README, "Bundle data layout"; ``bundle/scoring/index.py`` reads them)::

    "databases": {"<db_id>": {..., "neighbours": [{"file": "neighbours/<db_id>-1.sqlite",
                                                   "sha256": "...", "bytes": 12288}, ...]}}
        a neighbour that relaxes an invariant for golds a kept one hides (``relax``) also has
        "relaxed": [{"kind": "total link", "subject": "Reservations(Room) -> Rooms(RoomId)",
                     "golds": ["<gold text>", ...]}]
    "neighbour_results": {"<db_id>": {"<gold text>": [<result on neighbour 1> | null, ...]}}
    "invariants": {"<db_id>": {"profile": {...}, "repeats_allowed": ["hometown", ...]}}
    "neighbours": {"seed": 0, "candidates": 24, "max_keep": 3, "max_rows": 60, "splits": ["eval", "rl"]}

A result is the same JSON as ``gold_results`` (rows, order segments, steps, the rows with a tie
its LIMIT cuts); ``null`` where the gold is not judged on that neighbour (it failed there, or a key
it sorts by is NULL there and not on the original). ``invariants`` holds what every neighbour of
the database keeps (``bundle/neighbours/invariants.py``), proved on the files written
(``bundle/neighbours/proof.py``): a bundle whose neighbours break one is not written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import proof as neighbour_proof
from bundle.sql import gold_results
from harness.common import processes
from harness.common.errors import HarnessError
from harness.prepare.neighbours import build_cache, relax
from harness.prepare.neighbours.distil import Distilled, Settings, distil

FOLDER = "neighbours"


DEFAULT_SETTINGS = Settings()
DEFAULT_RELAXATION = relax.Settings()


def build(golds_by_db: Mapping[str, Iterable[str]], databases: Mapping[str, Path], work: Path,
          settings: Settings = DEFAULT_SETTINGS, say=lambda message: None,
          relaxation: relax.Settings | None = DEFAULT_RELAXATION, *, workers: int = 1,
          cache: Path | None = None) -> dict[str, Distilled]:
    """Distil the neighbours of each database with that database's golds; then, unless ``relaxation``
    is None, add a relaxed neighbour where a kept invariant hides golds (``relax``).

    Each database is independent (its own seeded draws), so ``workers`` processes share them and the
    result, and the lines ``say`` gets, are in db_id order whatever the number of workers.
    ``cache``: a folder where each database's result is kept for the next build and taken from it
    when everything it depends on is the same (``build_cache``); None: none.
    """
    done: dict[str, tuple[Distilled, list[str]]] = {}
    missing = []
    for db_id in sorted(golds_by_db):
        original, golds = Path(databases[db_id]), sorted(set(golds_by_db[db_id]))
        name = None if cache is None else build_cache.key(db_id, original, golds, settings, relaxation)
        stored = None if cache is None or name is None else build_cache.load(cache, name, work / db_id / "cached")
        if stored is not None:
            done[db_id] = stored, [f"neighbours {db_id}: {len(stored.files)} taken from the build cache ({cache})"]
        else:
            missing.append((db_id, original, golds, work / db_id, settings, relaxation, cache, name))
    done.update(zip((job[0] for job in missing), processes.map_in_processes(_one, missing, workers)))
    out = {}
    for db_id, (found, lines) in sorted(done.items()):
        for line in lines:
            say(line)
        out[db_id] = found
    return out


def _one(job: tuple) -> tuple[Distilled, list[str]]:
    """One database's neighbours, stored in the cache when one is given, and the lines that say what was done."""
    db_id, original, golds, work, settings, relaxation, cache, name = job
    found = distil(db_id, original, golds, work, settings)
    lines = [f"neighbours {db_id}: {len(found.files)} kept of {found.candidates_built}; separate "
             f"{found.separated} of {found.targets} look-alike queries and {found.constants_separated} of "
             f"{found.constants} constant answers"]
    if relaxation is not None:
        found = relax.relax(found, original, work / "relax", relaxation)
        for k, items in sorted(found.relaxed.items()):
            lines.append(f"neighbours {db_id}: neighbour {k + 1} relaxes " + "; ".join(
                f"{r.kind} {r.subject} for {len(r.golds)} golds" for r in items))
    if cache is not None and name is not None:
        build_cache.store(cache, name, found)
    return found, lines


def attach(data_dir: Path, index: dict, distilled: Mapping[str, Distilled], settings: Settings,
           splits: Iterable[str]) -> dict:
    """Prove the kept files, then copy them under ``data_dir/neighbours`` and record them in ``index``.

    Nothing is written when a neighbour breaks an invariant (NeighbourInvariantError).
    """
    invariants = {db_id: {"profile": neighbour_invariants.to_json(found.profile),
                          "repeats_allowed": sorted(found.repeats_allowed)} for db_id, found in distilled.items()}
    results = {db_id: {gold: [None if r is None else gold_results.to_json(r) for r in per]
                       for gold, per in sorted(found.results.items())} for db_id, found in distilled.items()}
    for db_id, found in sorted(distilled.items()):
        _prove(db_id, invariants[db_id], found, results[db_id])
    folder = data_dir / FOLDER
    wanted = {f"{db_id}-{k + 1}.sqlite" for db_id, d in distilled.items() for k in range(len(d.files))}
    if folder.exists():
        for stale in folder.iterdir():
            if stale.name not in wanted:
                stale.unlink()
    for db_id, found in sorted(distilled.items()):
        entries = []
        for k, source in enumerate(found.files):
            target = folder / f"{db_id}-{k + 1}.sqlite"
            target.parent.mkdir(parents=True, exist_ok=True)
            data = source.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                shutil.copyfile(source, target)
            entry = {"file": f"{FOLDER}/{target.name}", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            if found.relaxed.get(k):
                entry["relaxed"] = [r.to_json() for r in found.relaxed[k]]
            entries.append(entry)
        if db_id in index["databases"]:
            index["databases"][db_id]["neighbours"] = entries
    index["neighbour_results"] = dict(sorted(results.items()))
    index["invariants"] = dict(sorted(invariants.items()))
    index["neighbours"] = {**dataclasses.asdict(settings), "splits": sorted(set(splits))}
    return index


def _prove(db_id: str, invariants: dict, found: Distilled, results: dict) -> None:
    """The check in ``prepare``: every neighbour kept keeps every invariant, before anything is written."""
    originals = {gold: gold_results.to_json(r) for gold, r in found.originals.items()}
    relaxed = [[r.to_json() for r in found.relaxed.get(k, ())] for k in range(len(found.files))]
    broken = neighbour_proof.prove_database(db_id, invariants, [str(f) for f in found.files], results, originals,
                                            relaxed)
    if broken:
        raise NeighbourInvariantError(f"{len(broken)} invariants of {db_id} are broken on its neighbour databases "
                                      f"(first: {broken[0]}); this is a bug of the generator: report it, and "
                                      "prepare with --neighbours none meanwhile")


class NeighbourInvariantError(HarnessError):
    """A neighbour database built breaks an invariant of its original's data: never written into a bundle."""
