"""Which question goes in which split: usable rows, skip reasons, shared golds, unseen eval databases.

* ``train``: the first ``train`` usable rows of the API's train split, in order;
* ``rl``: the next ``rl`` usable train rows (questions SFT never saw); rows whose gold returns no
  rows are left out (any query returning nothing would match them: a free reward) unless kept or
  on a thin database (its neighbours give the gold rows; where none does, the bundle never pays
  an empty answer: docs/neighbours.md, "Thin databases"), and
  so are rows whose gold is disputed (harness.prepare.disputed: the reward would pay its mistake)
  unless kept;
* ``eval``: the first ``eval`` usable validation rows, on databases no train or rl row uses; a
  validation row on such a database is an error, not a skip (the release would be mixed up).

A row is usable when its database is in the catalog, that database's schema is at most
``max_schema`` characters (the database is skipped whole), and its gold runs under the scorer's
own limits (bundle.verify.gold_shape). By default a row is also left out when its gold text
(normalized as the scorer matches it) is selected under another database too: the scorer could
not tell from the gold alone which database the row means. Leaving rows out can let new rows in,
which could share a gold in turn, so selection repeats with the shared golds excluded until none
is left (a few passes; gold results are memoized, so a pass costs little).

Standard library only (plus bundle, harness.prepare.bundle_data / disputed / errors): prepare runs as a script.
"""

from __future__ import annotations

import collections
import dataclasses
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bundle import verify as bundle_verify
from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import thin as neighbour_thin
from bundle.scoring.index import normalize_gold
from bundle.sql import guard as sql_guard
from bundle.sql.compare import ResultShape
from harness.common.errors import InputError
from harness.prepare import disputed as disputed_golds
from harness.prepare.bundle_data import schema_lines

SKIP_DATABASE_MISSING = "database missing"
SKIP_SCHEMA_TOO_LONG = "schema too long"
SKIP_GOLD_FAILS = "gold query fails"
SKIP_GOLD_SHARED = "gold shared with another database"
SKIP_GOLD_EMPTY = "gold returns no rows (kept out of rl)"
SKIP_GOLD_DISPUTED = "gold disputed (kept out of rl)"
SKIP_REASONS = (SKIP_DATABASE_MISSING, SKIP_SCHEMA_TOO_LONG, SKIP_GOLD_FAILS, SKIP_GOLD_SHARED,
                SKIP_GOLD_EMPTY, SKIP_GOLD_DISPUTED)
SPLITS = ("train", "rl", "eval")


@dataclasses.dataclass(frozen=True)
class SourceRow:
    """One question as the API gave it: ``source`` is the API split, ``index`` its row number there."""

    source: str
    index: int
    db_id: str
    question: str
    gold: str


@dataclasses.dataclass(frozen=True)
class Sizes:
    train: int
    rl: int
    eval: int


@dataclasses.dataclass(frozen=True)
class Database:
    db_id: str
    path: Path
    schema: tuple[str, ...]

    @property
    def schema_chars(self) -> int:
        """Characters of the schema as the prompt states it (one line per table)."""
        return len("\n".join(self.schema))


class Catalog:
    """The databases a run may use: db_id -> file, each schema read once (a corrupt file is an error)."""

    def __init__(self, files: dict[str, Path], max_schema: int) -> None:
        self.files = dict(files)
        self.max_schema = max_schema
        self._loaded: dict[str, Database] = {}
        self._thin: dict[str, bool] = {}

    @classmethod
    def from_folder(cls, folder: str | Path, max_schema: int) -> Catalog:
        """Spider's layout ``<folder>/<db_id>/<db_id>.sqlite``, or flat ``<folder>/<db_id>.sqlite``."""
        folder = Path(folder)
        if not folder.is_dir():
            raise InputError(f"--databases {folder} is not a folder: give Spider's database folder "
                             "(the one holding <db_id>/<db_id>.sqlite), e.g. spider/database")
        files = {p.stem: p for p in folder.glob("*.sqlite")}
        files.update({p.parent.name: p for p in folder.glob("*/*.sqlite") if p.stem == p.parent.name})
        if not files:
            raise InputError(f"--databases {folder} holds no databases (no <db_id>/<db_id>.sqlite nor "
                             "<db_id>.sqlite): point it at Spider's database folder")
        return cls(files, max_schema)

    def get(self, db_id: str) -> Database | None:
        """The database, or None when the folder lacks it."""
        found = self._loaded.get(db_id)
        if found is None and db_id in self.files:
            path = self.files[db_id]
            try:
                found = Database(db_id, path, tuple(schema_lines(path)))
            except sqlite3.DatabaseError as exc:
                raise InputError(f"database {db_id!r} at {path} is not a readable SQLite file ({exc}): "
                                 "replace it with the file from the Spider archive") from None
            self._loaded[db_id] = found
        return found

    def thin(self, db_id: str) -> bool:
        """Whether a database known to be there is thin (``bundle.neighbours.thin``: no table above a
        few rows), read once."""
        found = self._thin.get(db_id)
        if found is None:
            conn = neighbour_invariants.open_read_only(str(self.files[db_id]))
            try:
                found = neighbour_thin.is_thin(conn.execute(f"SELECT count(*) FROM {neighbour_invariants.quote(t)}")
                                               .fetchone()[0] for t in neighbour_invariants.table_names(conn))
            finally:
                conn.close()
            self._thin[db_id] = found
        return found

    def schema(self, db_id: str) -> tuple[str, ...]:
        """The schema lines of a database known to be there (a selected row's)."""
        database = self.get(db_id)
        if database is None:
            raise KeyError(db_id)
        return database.schema


class GoldChecker:
    """Runs each (database, gold) once with the scorer's limits: "ok", "empty" or "fails"."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS,
                 run: Callable[[str, str, Limits], ResultShape] = bundle_verify.gold_shape) -> None:
        self.limits = limits
        self.run = run  # (gold, database path, limits) -> ResultShape; injectable for tests
        self._status: dict[tuple[str, str], str] = {}
        self.failures: dict[tuple[str, str], str] = {}  # (db_id, gold) -> why, for the summary

    def check(self, database: Database, gold: str) -> str:
        key = (database.db_id, gold)
        status = self._status.get(key)
        if status is None:
            try:
                shape = self.run(gold, str(database.path), self.limits)
                status = "ok" if shape.rows else "empty"
            except sql_guard.QueryFailed as failed:
                if failed.kind == sql_guard.INFRASTRUCTURE:
                    raise InputError(f"database {database.db_id!r} at {database.path} cannot be read by "
                                     f"SQLite ({failed.detail}): replace the file") from None
                status = "fails"
                self.failures[key] = f"{failed.kind}: {failed.detail}"
            self._status[key] = status
        return status


class LazyRows:
    """A row stream read at most once, replayable: later passes reuse the rows already read."""

    def __init__(self, source: str, rows: Iterable[dict]) -> None:
        self.source = source
        self._iter = iter(rows)
        self._seen: list[SourceRow] = []

    def __iter__(self) -> Iterator[SourceRow]:
        i = 0
        while True:
            if i == len(self._seen):
                raw = next(self._iter, None)
                if raw is None:
                    return
                self._seen.append(SourceRow(self.source, i, raw["db_id"], raw["question"], raw["query"]))
            yield self._seen[i]
            i += 1

    @property
    def read(self) -> int:
        return len(self._seen)


@dataclasses.dataclass
class Selection:
    """The rows of each split, and what was left out (per API split and reason) on the way."""

    train: list[SourceRow] = dataclasses.field(default_factory=list)
    rl: list[SourceRow] = dataclasses.field(default_factory=list)
    eval: list[SourceRow] = dataclasses.field(default_factory=list)
    skips: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
    skipped_databases: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    # Normalized golds selected under several databases: left out (default) or kept (on request).
    shared_golds: frozenset[str] = frozenset()
    passes: int = 1
    left_out_disputed: list[SourceRow] = dataclasses.field(default_factory=list)  # train rows kept out of rl
    rows_read: dict[str, int] = dataclasses.field(default_factory=dict)  # per API split

    def split(self, name: str) -> list[SourceRow]:
        return getattr(self, name)

    def skip(self, row: SourceRow, reason: str) -> None:
        self.skips.setdefault(row.source, collections.Counter())[reason] += 1
        if reason == SKIP_GOLD_DISPUTED:
            self.left_out_disputed.append(row)
        if reason in (SKIP_DATABASE_MISSING, SKIP_SCHEMA_TOO_LONG):
            self.skipped_databases.setdefault(reason, set()).add(row.db_id)

    def used_databases(self) -> list[str]:
        return sorted({r.db_id for name in SPLITS for r in self.split(name)})


@dataclasses.dataclass(frozen=True)
class Rules:
    catalog: Catalog
    golds: GoldChecker
    keep_empty_gold: bool = False
    keep_shared_golds: bool = False
    disputed: disputed_golds.DisputedList = disputed_golds.EMPTY
    keep_disputed: bool = False

    def disputed_id(self, row: SourceRow) -> str | None:
        """The id of the entry disputing ``row``'s gold on its database, or None."""
        found = self.disputed.match(row.db_id, row.gold)
        return None if found is None else found.id

    def skip_reason(self, row: SourceRow, excluded: frozenset[str], rl: bool) -> str | None:
        """Why ``row`` is not usable (for rl when ``rl``), or None; cheapest checks first."""
        database = self.catalog.get(row.db_id)
        if database is None:
            return SKIP_DATABASE_MISSING
        if database.schema_chars > self.catalog.max_schema:
            return SKIP_SCHEMA_TOO_LONG
        if normalize_gold(row.gold) in excluded:
            return SKIP_GOLD_SHARED
        status = self.golds.check(database, row.gold)
        if status == "fails":
            return SKIP_GOLD_FAILS
        if status == "empty" and rl and not self.keep_empty_gold and not self.catalog.thin(row.db_id):
            return SKIP_GOLD_EMPTY  # on a thin database the neighbours give it rows (or it is never paid)
        if rl and not self.keep_disputed and self.disputed_id(row) is not None:
            return SKIP_GOLD_DISPUTED
        return None


def _fill_training(selection: Selection, rows: LazyRows, sizes: Sizes, rules: Rules,
                   excluded: frozenset[str]) -> None:
    if sizes.train + sizes.rl == 0:
        return
    for row in rows:
        target = selection.train if len(selection.train) < sizes.train else selection.rl
        reason = rules.skip_reason(row, excluded, rl=target is selection.rl)
        if reason:
            selection.skip(row, reason)
            continue
        target.append(row)
        if len(selection.train) >= sizes.train and len(selection.rl) >= sizes.rl:
            return  # checked after appending: never read (and fetch) a row past the last one needed


def _fill_eval(selection: Selection, rows: LazyRows, sizes: Sizes, rules: Rules,
               excluded: frozenset[str]) -> None:
    if sizes.eval == 0:
        return
    training = {r.db_id for r in selection.train + selection.rl}
    for row in rows:
        reason = rules.skip_reason(row, excluded, rl=False)
        if reason:
            selection.skip(row, reason)
            continue
        if row.db_id in training:
            raise InputError(
                f"validation row {row.index} ({row.question!r}) is on database {row.db_id!r}, which train "
                "or rl rows use too: eval must be on databases no training row saw. Use the train and "
                "validation splits of the same Spider release")
        selection.eval.append(row)
        if len(selection.eval) >= sizes.eval:
            return


def shared_golds(selection: Selection) -> frozenset[str]:
    """Normalized gold texts selected under more than one database."""
    where: dict[str, set[str]] = {}
    for name in SPLITS:
        for row in selection.split(name):
            where.setdefault(normalize_gold(row.gold), set()).add(row.db_id)
    return frozenset(gold for gold, dbs in where.items() if len(dbs) > 1)


def select(train_rows: Iterable[dict], validation_rows: Iterable[dict], sizes: Sizes,
           rules: Rules) -> Selection:
    """The three splits (module docstring). Rows are dicts with db_id, question and query."""
    train = train_rows if isinstance(train_rows, LazyRows) else LazyRows("train", train_rows)
    validation = (validation_rows if isinstance(validation_rows, LazyRows)
                  else LazyRows("validation", validation_rows))
    excluded: frozenset[str] = frozenset()
    passes = 0
    while True:
        passes += 1
        selection = Selection(shared_golds=excluded, passes=passes)
        _fill_training(selection, train, sizes, rules, excluded)
        _fill_eval(selection, validation, sizes, rules, excluded)
        shared = shared_golds(selection)
        if rules.keep_shared_golds:
            selection.shared_golds = shared  # kept on request: the summary lists them
        if rules.keep_shared_golds or not shared:
            selection.rows_read = {"train": train.read, "validation": validation.read}
            return selection
        excluded = excluded | shared  # grows every pass and golds are finite: the loop ends
