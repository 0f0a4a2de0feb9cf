"""Results kept on disk from one run for the next, under a key naming everything they depend on.

``prepare`` reviews its staged bundle twice (harness.audit.entry.review: the audit of degenerate
answers, the near misses and their oracle, then the separation's neighbours, then the review
again), and most of that work is per database: the candidates of its golds, the bundle's calls on
them, the witnesses and the oracle's verdicts. Each of those parts is a pure function of what its
key names (the database's bytes, its golds, the part of the bundle that scores them, the settings)
and of the code (``code_digest``: every Python file of ``bundle/`` and ``harness/``). So a part is
kept under ``FOLDER/<kind>/<key>/`` and the next review (the second one of the same prepare, for
the databases the separation left as they were; every one of a rerun) reads it instead of doing the
work again: the same values, so the same summary.

An entry is a pickle (``entry.pickle``) and, where the part holds files (witness databases, added
neighbours), copies of them beside it, each with its SHA-256 checked on load; it is written into a temporary folder and
renamed into place, so a reader never sees half of one and two runs storing the same key do not
clash. A damaged or unreadable entry is a miss; a folder that cannot be written is not an error
(the work is done, nothing kept). The entries are pickles written by this code: keep the folder as
private as the checkout (``.cache/prepare`` by default).

Example::

    memo = Memo(Path(".cache/prepare/review"))
    key = memo.key("calls", database_print, tasks)
    kept = memo.get("calls", key)
    found = kept.value if kept is not None else work(...)
    if kept is None:
        memo.put("calls", key, found)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pickle
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from harness.common.files import sha256_file

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "entry.pickle"
FORMAT = 1  # bump when an entry's layout changes


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 over every Python file of ``bundle/`` and ``harness/`` (path and bytes), sorted."""
    digest = hashlib.sha256()
    for folder in ("bundle", "harness"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def plain(value: object) -> object:
    """``value`` as JSON can hold it, the same in every process: dataclasses as dicts, sets sorted,
    paths and other leaves by ``repr`` (a key must not depend on hash order)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__, **{f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, Mapping):
        return [[plain(k), plain(v)] for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return repr(value)


class Memo:
    """Kept results under ``folder`` (None: nothing kept, every ``get`` a miss)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.hits = self.misses = 0

    def __bool__(self) -> bool:
        return self.folder is not None

    def key(self, kind: str, *parts: object) -> str:
        """The key of ``parts`` for ``kind``: with the code, the format, Python's and SQLite's versions."""
        named = [FORMAT, code_digest(), sys.version_info[:3], sqlite3.sqlite_version, kind, plain(parts)]
        return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()

    def _place(self, kind: str, key: str) -> Path:
        assert self.folder is not None
        return self.folder / kind / key[:2] / key

    def get(self, kind: str, key: str) -> Entry | None:
        """The entry kept under ``key`` (its files where they are kept, in ``put``'s order); None when
        none is kept or it cannot be used."""
        if self.folder is None:
            return None
        found = read_entry(self._place(kind, key))
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return found

    def put(self, kind: str, key: str, value: object, files: Sequence[Path] = ()) -> None:
        """Keep ``value`` under ``key``, with copies of ``files`` beside it (``get`` gives their paths);
        an entry kept there before (one ``get`` could not use) is replaced."""
        if self.folder is not None:
            write_entry(self._place(kind, key), value, files)


def read_entry(place: Path, suffix: str = ".file") -> Entry | None:
    """The entry ``write_entry`` wrote at ``place``; None when there is none, or it is damaged (a
    file that does not hash as recorded, a pickle that does not load)."""
    try:
        with open(place / ENTRY, "rb") as f:
            value, hashes = pickle.load(f)  # noqa: S301 - written by write_entry() below, in the user's own cache
        files = [place / f"{n}{suffix}" for n in range(len(hashes))]
        for path, expected in zip(files, hashes):
            if sha256_file(path) != expected:
                raise ValueError(f"{path} differs from the digest kept")
    except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
        return None
    return Entry(value, files)


def write_entry(place: Path, value: object, files: Sequence[Path] = (), suffix: str = ".file") -> bool:
    """Write ``value`` and copies of ``files`` (``<n><suffix>``, with their SHA-256) into a temporary
    folder beside ``place`` and rename it into place; an entry there before is moved aside first,
    so a reader sees the old entry or the new one. False when nothing could be written (an entry
    another run stored there meanwhile counts as written)."""
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=".partial-", dir=place.parent))
    except OSError:
        return False
    try:
        hashes = []
        for n, source in enumerate(files):
            shutil.copyfile(source, temp / f"{n}{suffix}")
            hashes.append(sha256_file(temp / f"{n}{suffix}"))
        with open(temp / ENTRY, "wb") as f:
            pickle.dump((value, hashes), f, protocol=4)
        if place.exists():
            stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=place.parent))
            os.rename(place, stale / "entry")
            shutil.rmtree(stale, ignore_errors=True)
        os.rename(temp, place)
    except OSError:  # unwritable, or another run stored it meanwhile
        shutil.rmtree(temp, ignore_errors=True)
        return (place / ENTRY).is_file()
    return True


class Entry(NamedTuple):
    """A kept value, and the files kept with it (paths in the memo's folder, read-only to the caller)."""

    value: Any
    files: list[Path]
