"""The counterexample search's databases, built once per gold and kept per process (``search.counterexample``).

A search database depends on the original, the gold, the search settings and its place in its
set, never on the prediction judged on it; a prediction's own set depends on what the prediction
adds to the gold's focus (literals the gold lacks, columns only it sorts by or takes an extreme
of), not on its text. So each set is built once, lazily, one database at a time as a search first
needs it, with the gold's result there, and every later search of that gold only runs its
prediction on them.

* ``Store``: the sets of one process, least recently used out first, within ``max_bytes`` of files
  and ``max_sets`` sets; a set a search holds (``lease``) is never removed under it; a removed set's
  files go with it, and the folder at exit.
* ``SearchSet``: one set; ``database(i, build)`` is its database ``i`` (built by ``build(i)`` when no
  search has needed it yet, databases before it first), a ``SearchDatabase`` or None (an attempt
  that gives no database the gold may be judged on: it is spent all the same).

What a set holds is a function of its key alone: whoever builds a database, whenever, and whatever
the store removed meanwhile, it is the same database with the same gold result. The store saves
time, never changes a verdict. Where no folder is writable the search is an infrastructure error,
never a score.

>>> store = Store(max_bytes=10**6, max_sets=1)
>>> with store.lease(("a",)) as first:
...     first.database(0, lambda i: None) is None
True
>>> with store.lease(("b",)) as second:
...     pass
>>> store.keys()
[('b',)]
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Hashable, Iterator

from ..contract.errors import ScoringInfrastructureError
from ..sql import connection as sql_connection
from ..sql import gold_results
from . import folder as search_folder

MAX_BYTES = 256 * 1024 * 1024  # the files of every set kept, together (a Spider gold's 24: about 0.4 to 2 MB)
MAX_SETS = 1_024  # sets kept (a gold's, and each set of what a prediction adds to it)


class SearchDatabase:
    """One database of a set: its file, the gold's result there (None: the gold took more than the
    search's whole budget there) and the index of its plan (``search.counterexample.PLANS``).

    ``facts`` remembers what a search read of the database (``search.counterexample``'s fairness
    checks): a function of the file, whoever asks first.
    """

    __slots__ = ("path", "gold", "plan", "facts", "owned")

    def __init__(self, path: str, gold: gold_results.GoldResult | None, plan: int, owned: bool = True) -> None:
        self.path, self.gold, self.plan = path, gold, plan
        self.owned = owned  # False: read where a disk folder keeps it (``search.disk``): never removed here
        self.facts: dict[Hashable, object] = {}


Build = Callable[[int], "SearchDatabase | None"]


class SearchSet:
    """The databases of one key, built in order as searches need them (module docstring)."""

    def __init__(self, store: Store, key: Hashable, keep: object) -> None:
        self.key, self._store, self._keep = key, store, keep  # ``keep``: what the key names by identity
        self._databases: list[SearchDatabase | None] = []
        self._lock = threading.Lock()
        self.users = 0
        self.bytes = 0
        self.removed = False

    def __len__(self) -> int:
        return len(self._databases)

    def database(self, i: int, build: Build) -> SearchDatabase | None:
        """Database ``i`` of the set, building those not built yet (one build at a time per set)."""
        if i < len(self._databases):
            return self._databases[i]
        with self._lock:
            while len(self._databases) <= i:
                made = build(len(self._databases))
                if made is not None and made.gold is not None and made.owned:
                    self._store._grew(self, os.path.getsize(made.path))
                self._databases.append(made)
            return self._databases[i]

    def paths(self) -> list[str]:
        """The files of the set's databases the store removes with it (not those a disk folder keeps)."""
        return [d.path for d in self._databases if d is not None and d.gold is not None and d.owned]


class Store:
    """The sets of one process (module docstring). Thread-safe; a forked child starts empty."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_sets: int = MAX_SETS, folder: str | None = None) -> None:
        self.max_bytes, self.max_sets = max_bytes, max_sets
        self._folder = folder
        self._sets: collections.OrderedDict[Hashable, SearchSet] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._pid = os.getpid()
        self.built = 0  # databases built in this process (telemetry: a warm search builds none)

    @contextlib.contextmanager
    def lease(self, key: Hashable, keep: object = None) -> Iterator[SearchSet]:
        """The set of ``key`` (made empty when the store has none), held for the ``with`` block.

        ``keep``: objects the key names by identity (``id``), held as long as the set is kept so
        that no other object can take their identity meanwhile.
        """
        with self._lock:
            self._after_fork()
            found = self._sets.get(key)
            if found is None:
                found = self._sets[key] = SearchSet(self, key, keep)
            self._sets.move_to_end(key)
            found.users += 1
        try:
            yield found
        finally:
            with self._lock:
                found.users -= 1
                if found.removed and not found.users:
                    _remove_files(found)
                self._evict()

    def path(self, tag: str) -> str:
        """A new file name in the store's folder (never one used before in this process)."""
        digest = hashlib.sha256(tag.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return os.path.join(self.folder(), f"{os.getpid()}-{next(_numbers)}-{digest}.sqlite")

    def folder(self) -> str:
        """The folder the store's files are written to (the process's private one unless given)."""
        return self._folder if self._folder is not None else private_folder()

    def keys(self) -> list[Hashable]:
        """The keys of the sets kept, least recently used first."""
        with self._lock:
            return list(self._sets)

    def forget(self) -> None:
        """Remove every set (a set in use goes when its last search ends)."""
        with self._lock:
            for found in self._sets.values():
                self._drop(found)
            self._sets.clear()

    def make_room(self) -> None:
        """Remove every set no search holds (the folder is full)."""
        with self._lock:
            for key in [k for k, found in self._sets.items() if not found.users]:
                self._drop(self._sets.pop(key))

    def _grew(self, found: SearchSet, size: int) -> None:
        with self._lock:
            self.built += 1
            found.bytes += size
            if not found.removed:
                self._bytes += size

    def _evict(self) -> None:
        """Remove sets no search holds, least recently used first, while over either bound."""
        for key in list(self._sets):
            if self._bytes <= self.max_bytes and len(self._sets) <= self.max_sets:
                return
            found = self._sets[key]
            if not found.users:
                del self._sets[key]
                self._drop(found)

    def _drop(self, found: SearchSet) -> None:
        found.removed = True
        self._bytes -= found.bytes
        if not found.users:
            _remove_files(found)

    def _after_fork(self) -> None:
        """A forked child forgets its parent's sets (their files are the parent's to remove)."""
        if self._pid != os.getpid():
            self._pid, self._sets, self._bytes = os.getpid(), collections.OrderedDict(), 0


def _remove_files(found: SearchSet) -> None:
    for path in found.paths():
        remove(path)


def remove(path: str) -> None:
    """Remove a search database's file, and close this thread's connection to it (its page cache and
    prepared statements with it; another thread's closes when its cache lets it go)."""
    sql_connection.forget_path(path)
    try:
        os.remove(path)
    except OSError:
        pass  # never written (the build failed before the rename), or removed already


_numbers = itertools.count()


def private_folder() -> str:
    """The process's private folder for search databases (``search.folder``: made once per process,
    removed at exit, swept by a later process when this one ends without its exit handlers)."""
    try:
        return search_folder.folder()
    except search_folder.FolderUnavailable as exc:
        raise SearchUnavailable(f"the counterexample search needs a writable temporary folder ({exc}): set "
                                "TMPDIR to one, or turn the search off (SPIDER_SCORING_SEARCH=off)") from None


class SearchUnavailable(ScoringInfrastructureError):
    """No temporary folder can hold the search's databases: an infrastructure fault, never a score."""


STORE = Store()  # the process's store, used unless a caller passes its own
