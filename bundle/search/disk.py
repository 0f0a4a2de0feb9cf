"""The counterexample search's databases kept on disk, for later processes and runs (opt-in).

A search database is a function of its set's key and its place in the set (``search.counterexample``):
the bundle's code, the original database, the invariants stored for it, the gold's text, the
limits, what a prediction adds to the gold's focus, the attempt's number, and the SQLite and
Python that drew it. Grading a second stage or checkpoint of the same eval rows meets the same
golds, so a folder named by ``SPIDER_SCORING_SEARCH_CACHE`` keeps each database built, with the
gold's result there, and a later process reads it there instead of drawing it again. An attempt
that gave no database the gold may be judged on is kept too (it is spent all the same).

* ``fingerprint(...)``: the part of a key that names the bundle and the database (``Task.fingerprint``).
* ``Disk(folder)``: ``load(name, attempt, entry)`` gives a kept attempt's entry, made by ``entry``
  from its record and its database's path, or ``MISSING``; ``save(name, attempt, record, path)``
  keeps one.

What is read back is what was built: each entry is written to a temporary name and renamed into
place, its database first and the record naming the database's SHA-256 last; a record whose
database is gone or has another digest is a miss, and the database is drawn again. The folder
saves time and never changes a verdict: a folder that cannot be read or written is a miss, never
an error. Nothing is removed from it; delete it between runs to reclaim the space (a Spider gold's databases
take about 0.4 to 2 MB).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable

ENV = "SPIDER_SCORING_SEARCH_CACHE"  # the folder; unset or empty: nothing kept across processes
FORMAT = 1  # bumped when what an entry holds changes

MISSING = object()  # ``Disk.load``: nothing kept for this attempt


def code_digest() -> str:
    """``folder_digest`` of the bundle's own folder (the one above this subpackage), read once per
    process; empty where it cannot be listed (imported from a zip): then nothing is kept."""
    if not _code:
        try:
            _code.append(folder_digest(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        except OSError:
            _code.append("")
    return _code[0]


def folder_digest(folder: str) -> str:
    """SHA-256 of a bundle folder's Python files (``*.py`` at its root and in its subpackages, not under
    ``data/``: relative paths and bytes, in path order)."""
    digest = hashlib.sha256()
    for name in _python_files(folder):
        with open(os.path.join(folder, name), "rb") as handle:
            body = handle.read()
        digest.update(f"{name}\0{len(body)}\0".encode())
        digest.update(body)
    return digest.hexdigest()


def _python_files(folder: str) -> list[str]:
    """The ``*.py`` files of a bundle folder, as '/'-separated paths relative to it, sorted; the
    subfolders walked are Python packages (with an ``__init__.py``), never ``data/``."""
    found = []
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(".py") and os.path.isfile(path):
            found.append(name)
        elif name != "data" and os.path.isfile(os.path.join(path, "__init__.py")):
            found += [name + "/" + inner for inner in _python_files(path)]
    return sorted(found)


_code: list[str] = []


def fingerprint(database_sha256: str, invariants: dict) -> str:
    """What, besides the gold, the limits and the prediction's additions, decides a search database:
    the bundle's code, the original's SHA-256, its stored invariants, SQLite's and Python's versions
    (empty where the code cannot be read: nothing is kept)."""
    if not code_digest():
        return ""
    text = json.dumps([FORMAT, code_digest(), database_sha256, invariants, sqlite3.sqlite_version,
                       list(sys.version_info[:2])], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def set_name(parts: tuple) -> str:
    """A set's file-name stem from its key's parts (each with a stable ``repr``)."""
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).hexdigest()


class Disk:
    """One cache folder (module docstring). Thread-safe; counts what it served and kept."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.hits = self.saved = 0
        self._lock = threading.Lock()

    def _stem(self, name: str, attempt: int) -> str:
        return os.path.join(self.folder, name[:2], f"{name}-{attempt}")

    def load(self, name: str, attempt: int, entry: Callable[[dict, str | None], object]) -> object:
        """Attempt ``attempt`` of set ``name``: ``entry(record, path)`` with the path of its kept database
        (None: it gave none) once the database is checked, or ``MISSING``. The database is read where
        it is kept: whoever uses it must neither write nor remove it."""
        stem = self._stem(name, attempt)
        try:
            with open(stem + ".json", encoding="utf-8") as handle:
                record = json.load(handle)
            if not isinstance(record, dict) or record.get("format") != FORMAT:
                return MISSING
            digest, path = record.get("sha256"), None
            if digest is not None:
                path = stem + ".sqlite"
                with open(path, "rb") as handle:
                    if hashlib.sha256(handle.read()).hexdigest() != digest:
                        return MISSING
            found = entry(record, path)
        except (OSError, ValueError, KeyError, TypeError):
            return MISSING
        with self._lock:
            self.hits += 1
        return found

    def save(self, name: str, attempt: int, record: dict, path: str | None) -> None:
        """Keep ``record`` (JSON) for attempt ``attempt`` of set ``name``, with the database at ``path``
        (None: the attempt gave none). A folder that refuses it is left as it is."""
        stem = self._stem(name, attempt)
        try:
            os.makedirs(os.path.dirname(stem), exist_ok=True)
            record = {"format": FORMAT, **record}
            if path is not None:
                with open(path, "rb") as handle:
                    body = handle.read()
                _write_atomic(stem + ".sqlite", body)
                record["sha256"] = hashlib.sha256(body).hexdigest()
            _write_atomic(stem + ".json", json.dumps(record, sort_keys=True).encode("utf-8"))
        except OSError:
            return
        with self._lock:
            self.saved += 1


_numbers = itertools.count()


def _write_atomic(path: str, body: bytes) -> None:
    """``body`` at ``path``, written under a name of this process's and renamed into place."""
    temp = f"{path}.{os.getpid()}-{threading.get_ident()}-{next(_numbers)}.tmp"
    try:
        with open(temp, "wb") as handle:
            handle.write(body)
        os.replace(temp, path)
    except OSError:
        try:
            os.remove(temp)
        except OSError:
            pass
        raise


_disks: dict[str, Disk] = {}
_disks_lock = threading.Lock()


def from_env(environ: dict | None = None) -> Disk | None:
    """The folder ``SPIDER_SCORING_SEARCH_CACHE`` names (one ``Disk`` per folder per process), or None."""
    folder = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not folder:
        return None
    found = _disks.get(folder)
    if found is None:
        with _disks_lock:
            found = _disks.setdefault(folder, Disk(os.path.abspath(folder)))
    return found

