"""The bundle's data: where it is, what it holds, and which database a row belongs to.

Layout (written by the harness's ``prepare``; README, "Bundle data layout")::

    data/index.json                 the index below
    data/databases/<db_id>.sqlite   exactly the databases the splits use

``index.json``::

    {"format": "spider-scoring-index", "version": 1, "sqlite_version": "3.40.1", "digits": 12,
     "cost_model": {"version": 2, "max_cell_bytes": 512, ...},
     "databases": {"<db_id>": {"file": "databases/<db_id>.sqlite", "sha256": "...",
                               "bytes": 12345, "schema": ["singer(Singer_ID, Name)", ...]}},
     "rows": [{"id": "train-00000", "split": "train", "db_id": "<db_id>", "gold": "SELECT ...",
               "disputed": "<id>"}],           # "disputed" only on rows whose gold is disputed
     "disputed_golds": {"<id>": {"kind": "wrong bound", "reason": "...", "accepted": ["SELECT ..."]}},  # when some row is
     "gold_results": {"<db_id>": {"<gold text>": {"ncols": 1, "rows": [[3]], "ordered": false,
                                                  "segments": null, "steps": 2000}}}}

A row whose gold is disputed (wrong or narrower than its question: docs/disputed-golds.md) names the
entry; every row with that (database, gold) is judged against the gold and each of the entry's
``accepted`` answers (``disputed``, ``scoring.disputed``).

``reward_shape`` (optional) is the shape the reward pays by (``contract.shapes``: ``name``, ``values``
per outcome, ``bounds``, and for ``sql-r1`` its ``bonus`` and ``parts``); without it the reward is
binary. ``gold_results`` is optional: without it each gold runs once per process. ``steps`` is the number
of SQLite VM steps the gold took under ``sqlite_version``; a predicted query's step budget is
derived from it. A stored result is used only under the same SQLite version, ``digits`` and
``cost_model`` (what a step means: which functions are charged, and how much), and when it has
``steps`` (bundles built before step budgets lack it); otherwise the gold runs once per process to
learn its rows and steps again.

Row -> database rule (README, "Which database a row is scored on"):

1. ``db_id`` given by the caller (``extra_info``, a column, or the row of a ``row_id``): that
   database, when its stored golds include the row's gold. A hint that disagrees (another
   database, or one not in the bundle) is set aside with a UserWarning (``HINT_IGNORED_WARNING``)
   and the rules below decide, as if no hint had been passed.
2. Otherwise the gold text (whitespace-insensitive, trailing ``;`` ignored) names the databases
   it is stored under. One: that one. None: the row is stale (StaleBundleError).
3. Several (Spider repeats a few gold texts across databases): the database whose every schema
   line appears in the prompt, when the caller passed the prompt and exactly one fits.
4. Still several: RowResolutionError. The scorer never guesses; ``prepare`` leaves such rows out
   of the splits by default so that the least the trainer may pass (completion + gold) suffices.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Mapping

from ..contract import shapes as reward_shapes
from ..contract.errors import HINT_IGNORED_WARNING, BundleDataError, DatabaseUnavailableError, RowResolutionError, StaleBundleError
from ..contract.limits import DEFAULT_LIMITS, Limits
from ..neighbours import invariants as neighbour_invariants
from ..neighbours import source as neighbour_source
from ..search import disk as search_disk
from ..sql import functions as sql_functions
from ..sql import gold_results

INDEX_FORMAT = "spider-scoring-index"
INDEX_VERSION = 1
INDEX_PATH = os.path.join("data", "index.json")


def normalize_gold(text: str) -> str:
    """The form golds are matched in: whitespace collapsed, trailing semicolons dropped.

    >>> normalize_gold("SELECT  a\\nFROM t ;")
    'SELECT a FROM t'
    """
    return " ".join(text.split()).rstrip(";").rstrip()

BUNDLE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bundle/scoring/index.py -> bundle/


def find_root(environ: Mapping | None = None) -> str:
    """The bundle root: $TRAINER_BUNDLE_ROOT when it holds data/index.json, else the folder above this
    file's subpackage (the bundle's own)."""
    environ = os.environ if environ is None else environ
    tried = []
    for root in (environ.get("TRAINER_BUNDLE_ROOT"), BUNDLE_FOLDER):
        if root:
            tried.append(root)
            if os.path.isfile(os.path.join(root, INDEX_PATH)):
                return os.path.abspath(root)
    raise BundleDataError(
        f"no {INDEX_PATH} under {' or '.join(tried)}: the bundle has no data. Build it with "
        "`make bundle` (harness prepare + pack) and push the zip that holds data/."
    )


@dataclasses.dataclass(frozen=True)
class Resolved:
    db_id: str
    gold: str  # the gold text stored in the bundle (the one that runs)
    path: str
    sha256: str


class BundleData:
    """A loaded index. Build with ``load(root)``; safe to share between threads."""

    def __init__(self, root: str, index: dict) -> None:
        self.root = root
        self.sqlite_version = str(index.get("sqlite_version", ""))
        self.digits = int(index.get("digits", DEFAULT_LIMITS.float_digits))
        self.databases: dict[str, dict] = index["databases"]
        self._golds_by_db: dict[str, dict[str, str]] = {}
        self._dbs_by_gold: dict[str, list[str]] = {}
        self._disputed: dict[tuple[str, str], str] = {}  # (db_id, normalized gold) -> the entry's id
        self.disputed_golds: dict[str, dict] = index.get("disputed_golds") or {}
        self.rows_by_id: dict[str, dict] = {}
        for row in index["rows"]:
            db_id, gold = row["db_id"], row["gold"]
            if db_id not in self.databases:
                raise BundleDataError(f"index row {row.get('id')!r} names database {db_id!r}, "
                                      "which the index does not list: rebuild the bundle")
            key = normalize_gold(gold)
            self._golds_by_db.setdefault(db_id, {})[key] = gold
            dbs = self._dbs_by_gold.setdefault(key, [])
            if db_id not in dbs:
                dbs.append(db_id)
            if row.get("disputed"):
                self._disputed.setdefault((db_id, key), str(row["disputed"]))
            self.rows_by_id[str(row["id"])] = row
        self._stored_results = index.get("gold_results") or {}
        self._neighbour_results = index.get("neighbour_results") or {}
        self._invariants = index.get("invariants") or {}
        self._search_sources: dict[str, tuple] = {}
        self._profiles: dict[str, neighbour_invariants.Profile] = {}
        self._search_fingerprints: dict[str, str] = {}
        self.cost_model = index.get("cost_model")
        self.reward_shape = _reward_shape(index)  # None: binary, the reward pays the verdict's score
        self.stored_results_usable = self.sqlite_version == sqlite3.sqlite_version
        self._checked: dict[str, str] = {}
        self._lock = threading.Lock()
        self.cache = gold_results.GoldCache()
        self.neighbour_cache: dict[tuple, tuple] = {}  # (db_id, gold, digits) -> the row's neighbours, built once
        self.plans: dict[tuple, object] = {}  # scoring_entry's per-row plans: what a call needs besides its completion

    # -- databases ---------------------------------------------------------------------------
    def database_path(self, db_id: str) -> str:
        """The checked path of a database: present and with the SHA-256 recorded at build time."""
        entry = self.databases.get(db_id)
        if entry is None:
            raise StaleBundleError(f"database {db_id!r} is not in this bundle: the row comes from "
                                   "another dataset build; rebuild and push the bundle with the splits")
        return self._checked_path(f"database {db_id!r}", entry)

    def _checked_path(self, label: str, entry: dict) -> str:
        found = self._checked.get(entry["file"])
        if found is not None:
            return found
        path = os.path.join(self.root, "data", entry["file"])
        try:
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        except OSError as exc:
            raise DatabaseUnavailableError(f"{label} cannot be read at {path}: {exc}; "
                                           "the bundle is incomplete, rebuild it") from None
        if digest != entry.get("sha256"):
            raise DatabaseUnavailableError(f"{label} at {path} differs from the one indexed "
                                           "(SHA-256 mismatch): the bundle is corrupt, rebuild it")
        with self._lock:
            self._checked[entry["file"]] = path
        return path

    def neighbour_entries(self, resolved: Resolved, limits: Limits) -> list[tuple[str, str, str, dict | None]]:
        """(name, checked path, SHA-256, stored result or None) of each neighbour the row's gold uses.

        Empty under ``semantics = original`` or for a database built without neighbours. A
        neighbour on which the gold was refused at build time (its LIMIT cut a tie there) is left
        out for that gold. A stored result is given only where this process may use it (same
        SQLite version and digits as the build); otherwise the caller runs the gold there once.
        """
        if limits.semantics != "neighbours":
            return []
        entries = self.databases[resolved.db_id].get("neighbours") or []
        stored = self._neighbour_results.get(resolved.db_id, {}).get(resolved.gold)
        if not entries or stored is None:
            return []
        usable = self._stored_usable(limits)
        out = []
        for i, (entry, result) in enumerate(zip(entries, stored)):
            if result is None:
                continue
            name = f"neighbour {i + 1} of {resolved.db_id}"
            out.append((name, self._checked_path(name, entry), entry["sha256"], result if usable else None))
        return out

    def disputed(self, resolved: Resolved) -> tuple[str, str, tuple[str, ...]] | None:
        """(id, reason, accepted answers) when the row's gold is disputed on its database (any row
        with it says so), else None (docs/disputed-golds.md: the row is judged against the gold and
        each accepted answer)."""
        found = self._disputed.get((resolved.db_id, normalize_gold(resolved.gold))) if self._disputed else None
        if found is None:
            return None
        entry = self.disputed_golds.get(found) or {}
        return (found, str(entry.get("reason", "listed as disputed")),
                tuple(str(a) for a in entry.get("accepted", ()) if isinstance(a, str) and a.strip()))

    def neighbour_files(self, db_id: str) -> list[tuple[str, str, str, bool]]:
        """(name, checked path, SHA-256, relaxed for named golds) of every neighbour of ``db_id``."""
        out = []
        for i, entry in enumerate(self.databases[db_id].get("neighbours") or []):
            name = f"neighbour {i + 1} of {db_id}"
            out.append((name, self._checked_path(name, entry), entry["sha256"], bool(entry.get("relaxed"))))
        return out

    def invariants(self, db_id: str) -> dict | None:
        """What every neighbour of ``db_id`` keeps (``neighbours.invariants``), or None: built without neighbours."""
        return self._invariants.get(db_id)

    def profile(self, db_id: str, stored: dict) -> neighbour_invariants.Profile:
        """The invariants of ``db_id`` (``stored``: ``invariants(db_id)``), read once per process."""
        found = self._profiles.get(db_id)
        if found is None:
            found = self._profiles[db_id] = neighbour_invariants.from_json(stored["profile"])
        return found

    def database_bytes(self, db_id: str) -> int:
        """The size of a database's file (checked first: ``database_path``)."""
        return os.path.getsize(self.database_path(db_id))

    def search_source(self, db_id: str, stored: dict) -> tuple:
        """(invariants, sample of the original) for the search's generator, read once per process."""
        found = self._search_sources.get(db_id)
        if found is None:
            conn = neighbour_invariants.open_read_only(self.database_path(db_id))
            try:
                found = (self.profile(db_id, stored), neighbour_source.read_original(conn))
            finally:
                conn.close()
            self._search_sources[db_id] = found
        return found

    def search_fingerprint(self, db_id: str, stored: dict) -> str:
        """``search.disk.fingerprint`` of a database, once per process; empty (nothing kept on disk)
        unless ``SPIDER_SCORING_SEARCH_CACHE`` names a folder."""
        if search_disk.from_env() is None:
            return ""
        found = self._search_fingerprints.get(db_id)
        if found is None:
            found = self._search_fingerprints[db_id] = search_disk.fingerprint(self.databases[db_id]["sha256"], stored)
        return found

    def gold_result(self, resolved: Resolved, limits: Limits) -> gold_results.GoldResult | None:
        """The gold's result and step count stored at build time, when this process may use it.

        Stored results are used only under the SQLite version and the number rounding that computed
        them, and only when they carry the gold's step count; otherwise None, and the caller runs
        the gold once per process (``self.cache``, keyed by database hash, gold text and digits).
        """
        key = (resolved.sha256, resolved.gold, limits.float_digits)
        found = self.cache.peek(key)
        if found is not None or not self._stored_usable(limits):
            return found
        data = self._stored_results.get(resolved.db_id, {}).get(resolved.gold)
        found = gold_results.from_json(data) if data is not None else None
        if found is not None:
            self.cache.put(key, found)
        return found

    def _stored_usable(self, limits: Limits) -> bool:
        """Whether results stored at build time hold here: same SQLite version, same number rounding,
        and the same cost model (what a step count means: ``sql.functions.cost_model``)."""
        return (self.stored_results_usable and limits.float_digits == self.digits
                and self.cost_model == sql_functions.cost_model(limits))

    # -- rows --------------------------------------------------------------------------------
    def resolve(self, gold: str, db_id: str | None = None, row_id: str | None = None,
                prompt: str | None = None) -> Resolved:
        """The database and stored gold for a row (module docstring, "Row -> database rule")."""
        return self.resolve_by_hints(gold, db_id, row_id) or self.resolve_by_gold(gold, db_id, row_id, prompt)

    def resolve_by_gold(self, gold: str, db_id: str | None = None, row_id: str | None = None,
                        prompt: str | None = None) -> Resolved:
        """``resolve`` where the hints named no database that stores the gold: by the gold's text,
        then the prompt's schema lines."""
        if row_id is not None and str(row_id) in self.rows_by_id:
            db_id = db_id or self.rows_by_id[str(row_id)]["db_id"]
        key = normalize_gold(gold)
        candidates = self._dbs_by_gold.get(key)
        if not candidates:
            where = "anywhere" if db_id is None else f"under database {db_id!r} nor any other"
            raise StaleBundleError(_stale_message(gold, where))
        if len(candidates) > 1 and prompt:
            lines = {" ".join(line.split()) for line in prompt.splitlines()}
            fitting = [d for d in candidates
                       if all(" ".join(s.split()) in lines for s in self.databases[d].get("schema", []))]
            if len(fitting) == 1:
                candidates = fitting
        if len(candidates) > 1:
            raise RowResolutionError(
                f"gold {_short(gold)!r} is stored under {len(candidates)} databases ({', '.join(candidates)}) "
                f"and nothing passed tells them apart{_hint_note(db_id)}: pass extra_info={{'db_id': ...}} or the "
                "prompt with its schema lines, or rebuild the splits with prepare's default (shared golds left out)"
            )
        if db_id is not None:
            warnings.warn(f"{HINT_IGNORED_WARNING} {db_id!r} does not hold gold {_short(gold)!r}; scored on "
                          f"{candidates[0]!r}, the database that stores it. Fix the dataset's db_id column (a hint "
                          "is only a hint)", UserWarning, stacklevel=2)
        return self._resolved(candidates[0], self._golds_by_db[candidates[0]][key])

    def describe(self) -> dict:
        """What a health check reports: where the data is and which SQLite built and runs it."""
        return {"root": self.root, "databases": len(self.databases), "rows": len(self.rows_by_id),
                "disputed_golds": len(set(self._disputed.values())),
                "neighbour_databases": sum(len(d.get("neighbours") or []) for d in self.databases.values()),
                "sqlite_version_built": self.sqlite_version, "sqlite_version_runtime": sqlite3.sqlite_version,
                "cost_model_built": self.cost_model,
                "reward_shape": self.reward_shape.name if self.reward_shape is not None else reward_shapes.DEFAULT,
                "stored_gold_results_used": self.stored_results_usable and bool(self._stored_results)}

    def resolve_by_hints(self, gold: str, db_id: str | None = None, row_id: str | None = None) -> Resolved | None:
        """The row's database when its hints name one that stores the gold, else None (``resolve``
        then looks the gold up everywhere). A function of the three arguments: callers may keep it."""
        if row_id is not None and str(row_id) in self.rows_by_id:
            db_id = db_id or self.rows_by_id[str(row_id)]["db_id"]
        if db_id is None:
            return None
        stored = self._golds_by_db.get(db_id, {}).get(normalize_gold(gold))
        return None if stored is None else self._resolved(db_id, stored)

    def _resolved(self, db_id: str, stored_gold: str) -> Resolved:
        path = self.database_path(db_id)
        return Resolved(db_id, stored_gold, path, self.databases[db_id]["sha256"])


def _reward_shape(index: dict) -> reward_shapes.Shape | None:
    try:
        return reward_shapes.from_index(index.get("reward_shape"))
    except reward_shapes.ShapeError as exc:
        raise BundleDataError(f"data/index.json's reward_shape cannot be used ({exc}); rebuild the bundle") from None


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _hint_note(db_id: str | None) -> str:
    return "" if db_id is None else f" (the db_id hint {db_id!r} holds no such gold)"


def _stale_message(gold: str, where: str) -> str:
    return (f"gold {_short(gold)!r} is not stored in this bundle {where}: the dataset and the bundle come "
            "from different prepare runs. Rebuild both with one `make bundle` and push them together")


_loaded: dict[str, BundleData] = {}
_load_lock = threading.Lock()


def load(root: str | None = None) -> BundleData:
    """The bundle data under ``root`` (default: ``find_root()``), loaded once per process.

    The default root is looked up once per value of TRAINER_BUNDLE_ROOT (no file-system calls on
    the per-rollout path once loaded).
    """
    key = root if root is not None else "env:" + os.environ.get("TRAINER_BUNDLE_ROOT", "")
    found = _loaded.get(key)
    if found is not None:
        return found
    with _load_lock:
        found = _loaded.get(key)
        if found is None:
            real = os.path.realpath(root or find_root())
            found = _loaded.get(real) or BundleData(real, _read_index(real))
            _loaded[real] = _loaded[key] = found
    return found


def _read_index(root: str) -> dict:
    path = os.path.join(root, INDEX_PATH)
    try:
        with open(path, encoding="utf-8") as handle:
            index = json.load(handle)
    except (OSError, ValueError) as exc:
        raise BundleDataError(f"cannot read {path}: {exc}; rebuild the bundle with `make bundle`") from None
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise BundleDataError(f"{path} is not a {INDEX_FORMAT} file; rebuild the bundle")
    if index.get("version") != INDEX_VERSION:
        raise BundleDataError(f"{path} has index version {index.get('version')!r}, this scorer reads "
                              f"version {INDEX_VERSION}: rebuild the bundle with this harness")
    for key in ("databases", "rows"):
        if not isinstance(index.get(key), (dict if key == "databases" else list)):
            raise BundleDataError(f"{path} lacks {key!r}; rebuild the bundle")
    return index
