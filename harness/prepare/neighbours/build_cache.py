"""The neighbours of one database, kept from one build for the next: ``prepare``'s build cache.

Distilling a database's neighbours is most of what ``prepare`` spends before its audit, and it
depends only on the database's bytes, the golds asked of it, the distillation's and the
relaxation's settings, and the code that does it. So each database's result (``Distilled``: the
kept files, every gold's result on them, the invariants) is stored under a key made of exactly
those: the SHA-256 of the original file, the sorted golds, both settings, and a digest of every
Python file of ``bundle/`` and ``harness/`` (any change to the code is a new key). A build that
asks the same of a database (the same golds, as when only another database's rows changed, or the
same command again) copies the stored files instead of distilling them: the same bytes, so the
same bundle and the same SHA-256.

Layout: ``CACHE/<key>/entry.pickle`` (the ``Distilled``, its files named by position) and
``CACHE/<key>/<n>.sqlite``, written into a temporary folder beside it and renamed into place, so a
reader never sees half an entry and two builds storing the same key do not clash. An entry whose
files do not hash as recorded is ignored (and built again). The entries are pickles written by
this code: keep the folder as private as the checkout (it holds nothing the bundle does not).
A folder that cannot be written is not an error: the build goes on without storing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from harness.common.files import sha256_file
from harness.common.memo import ENTRY, code_digest, read_entry, write_entry
from harness.prepare.neighbours.distil import Distilled

FORMAT = 1  # bump when the entry's layout changes


def key(db_id: str, original: Path, golds: Iterable[str], settings: object, relaxation: object | None) -> str:
    """The entry's name: what the result depends on, hashed."""
    parts = {"format": FORMAT, "code": code_digest(), "db_id": db_id, "original": sha256_file(original),
             "golds": sorted(set(golds)), "settings": _plain(settings), "relaxation": _plain(relaxation)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _plain(settings: object | None) -> object:
    return None if settings is None else repr(dataclasses.asdict(settings))  # type: ignore[call-overload]


def load(cache: Path, name: str, work: Path) -> Distilled | None:
    """The stored result of ``name`` with its files copied under ``work`` (None: not stored, or damaged)."""
    found = read_entry(cache / name, ".sqlite")
    if found is None:
        return None
    stored = found.value
    if not isinstance(stored, Distilled) or len(found.files) != len(stored.files):
        return None
    files = [work / f"{stored.db_id}-{n + 1}.sqlite" for n in range(len(found.files))]
    try:
        work.mkdir(parents=True, exist_ok=True)
        for source, target in zip(found.files, files):
            shutil.copyfile(source, target)
    except OSError:
        return None
    return dataclasses.replace(stored, files=files)


def store(cache: Path, name: str, found: Distilled) -> bool:
    """Keep ``found`` under ``name``; False when the folder cannot be written (the build goes on)."""
    if (cache / name / ENTRY).is_file():
        return True
    named = dataclasses.replace(found, files=[Path(f"{n}.sqlite") for n in range(len(found.files))])
    return write_entry(cache / name, named, found.files, ".sqlite")
