"""What a review's per-database parts are keyed by (harness.common.memo keeps them).

A call of the bundle on a row of database D depends on the bundle's code, the index's settings, and
D's part of the index: its original and neighbours (by SHA-256), the gold results stored for it, its
invariants, and the golds of its rows (which are disputed, and why). ``database_prints`` digests
exactly that per database, so a part keyed by it is reused wherever D is scored the same, and done
again wherever anything of D changed (the separation added a neighbour to it, a row moved in or out).
The parts that never run the bundle on D's neighbours (candidates, near misses, witnesses, the
oracle) are keyed by the original's SHA-256 and the bundle's modules (``original_print``), with the
golds and what else each depends on.
"""

from __future__ import annotations

import hashlib
import json
import os

from bundle.search.disk import ENV as SEARCH_CACHE_ENV
from bundle.search.disk import folder_digest
from harness.common.bundle_loader import LoadedBundle
from harness.common.memo import plain

PER_DATABASE = ("databases", "gold_results", "invariants", "neighbour_results")


def _scoring_environment() -> dict[str, str]:
    """The SPIDER_SCORING_* settings a call reads (its limits), but the search cache's folder (the same
    verdicts with or without it)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("SPIDER_SCORING") and k != SEARCH_CACHE_ENV}


_PRINTS: dict[str, dict[str, str]] = {}  # the zip's SHA-256 and settings -> its prints (one bundle's worth at a time)
_ZIPS: dict[str, tuple[str, dict[str, str]]] = {}  # the zip's SHA-256 -> its modules' digest and originals' SHA-256


def database_prints(loaded: LoadedBundle) -> dict[str, str]:
    """db_id -> the digest of everything a call on its rows depends on (module docstring), once a zip."""
    name = loaded.sha256 + json.dumps(_scoring_environment())
    found = _PRINTS.get(name)
    if found is None:
        _PRINTS.clear()
        found = _PRINTS[name] = _prints(loaded)
    return found


def _zip(loaded: LoadedBundle) -> tuple[str, dict[str, str]]:
    """The loaded bundle's modules' digest (``search.disk.folder_digest``) and its originals' SHA-256, once a zip."""
    found = _ZIPS.get(loaded.sha256)
    if found is None:
        originals = {db_id: str(e["sha256"]) for db_id, e in loaded.index()["databases"].items()}
        found = _ZIPS[loaded.sha256] = (folder_digest(str(loaded.root)), originals)
    return found


def _prints(loaded: LoadedBundle) -> dict[str, str]:
    index = loaded.index()
    shared = {k: v for k, v in index.items() if k not in (*PER_DATABASE, "rows", "disputed_golds")}
    disputed = index.get("disputed_golds") or {}
    golds: dict[str, set[tuple[str, str]]] = {}
    for row in index.get("rows", []):
        reason = row.get("disputed") or ""
        golds.setdefault(row["db_id"], set()).add((row["gold"], reason and json.dumps([reason, disputed.get(reason)])))
    out = {}
    for db_id in index["databases"]:
        parts = [_zip(loaded)[0], shared, _scoring_environment(), sorted(golds.get(db_id, ())),
                 [index.get(k, {}).get(db_id) for k in PER_DATABASE]]
        out[db_id] = hashlib.sha256(json.dumps(plain(parts), sort_keys=True).encode()).hexdigest()
    return out


def original_print(loaded: LoadedBundle, db_id: str) -> str:
    """The SHA-256 of ``db_id``'s original database, as the index records it (checked when loaded),
    with the bundle's modules' (the witnesses and the oracle judge with its ``verify``)."""
    code, originals = _zip(loaded)
    return f"{originals[db_id]}:{code}"
