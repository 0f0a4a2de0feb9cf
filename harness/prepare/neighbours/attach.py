"""Put distilled neighbour databases into a staged bundle: files under data/neighbours/, and the index.

Index additions (README, "Bundle data layout"; ``bundle/bundle_index.py`` reads them)::

    "databases": {"<db_id>": {..., "neighbours": [{"file": "neighbours/<db_id>-1.sqlite",
                                                   "sha256": "...", "bytes": 12288}, ...]}}
    "neighbour_results": {"<db_id>": {"<gold text>": [<result on neighbour 1> | null, ...]}}
    "neighbours": {"seed": 0, "candidates": 24, "max_keep": 3, "max_rows": 60, "splits": ["eval", "rl"]}

A result is the same JSON as ``gold_results`` (rows, order segments, steps); ``null`` where the
gold is not judged on that neighbour (its ORDER BY ... LIMIT cut a tie there, or it failed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from bundle import gold_results
from harness.prepare.neighbours.distil import Distilled, Settings, distil

FOLDER = "neighbours"


DEFAULT_SETTINGS = Settings()


def build(golds_by_db: Mapping[str, Iterable[str]], databases: Mapping[str, Path], work: Path,
          settings: Settings = DEFAULT_SETTINGS, say=lambda message: None) -> dict[str, Distilled]:
    """Distil the neighbours of each database, in db_id order, with that database's golds."""
    out = {}
    for db_id in sorted(golds_by_db):
        golds = sorted(set(golds_by_db[db_id]))
        out[db_id] = distil(db_id, Path(databases[db_id]), golds, work / db_id, settings)
        found = out[db_id]
        say(f"neighbours {db_id}: {len(found.files)} kept of {found.candidates_built}; separate "
            f"{found.separated} of {found.targets} look-alike queries and {found.constants_separated} of "
            f"{found.constants} constant answers")
    return out


def attach(data_dir: Path, index: dict, distilled: Mapping[str, Distilled], settings: Settings,
           splits: Iterable[str]) -> dict:
    """Copy the kept files under ``data_dir/neighbours`` and record them and the results in ``index``."""
    folder = data_dir / FOLDER
    wanted = {f"{db_id}-{k + 1}.sqlite" for db_id, d in distilled.items() for k in range(len(d.files))}
    if folder.exists():
        for stale in folder.iterdir():
            if stale.name not in wanted:
                stale.unlink()
    results: dict[str, dict] = {}
    for db_id, found in sorted(distilled.items()):
        entries = []
        for k, source in enumerate(found.files):
            target = folder / f"{db_id}-{k + 1}.sqlite"
            target.parent.mkdir(parents=True, exist_ok=True)
            data = source.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                shutil.copyfile(source, target)
            entries.append({"file": f"{FOLDER}/{target.name}", "sha256": hashlib.sha256(data).hexdigest(),
                            "bytes": len(data)})
        if db_id in index["databases"]:
            index["databases"][db_id]["neighbours"] = entries
        results[db_id] = {gold: [None if r is None else gold_results.to_json(r) for r in per]
                          for gold, per in sorted(found.results.items())}
    index["neighbour_results"] = results
    index["neighbours"] = {**dataclasses.asdict(settings), "splits": sorted(set(splits))}
    return index
