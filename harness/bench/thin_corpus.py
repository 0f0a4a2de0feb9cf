"""A "thinned Spider" corpus: Spider's databases cut to a few rows a table, in Spider's layout.

Corpora such as SynSQL-2.5M and DDL-built BIRD databases hold about two rows a table, some none;
this builds such a corpus from real Spider databases, for measuring what a reward pays there
(docs/neighbours.md, "Thin databases") and for the tests:

* ``thin(spider, dest, {"concert_singer": 2, "pets_1": 0})`` copies each database's schema byte
  for byte (every CREATE statement, indexes, views, triggers) into ``dest/<db_id>/<db_id>.sqlite``
  with at most that many rows a table;
* rows are chosen by a seeded draw, parents first, preferring rows whose declared foreign keys
  name a parent row kept (a corpus of two rows a table still holds its links where it can);
* ``dest`` gets Spider's ``train_spider.json`` and ``dev.json`` restricted to those databases, so
  that ``prepare --databases dest --questions dest`` reads a consistent corpus.

Deterministic: the same databases, counts and seed give the same files.

    python -m harness.bench.thin_corpus SPIDER DEST concert_singer=2 pets_1=0 [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from collections.abc import Mapping
from pathlib import Path

QUESTION_FILES = ("train_spider.json", "dev.json")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _keys(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, str | None]]:
    """The declared foreign keys of ``table``: (parent table, column, parent column or None), as texts."""
    def text(v: object) -> str | None:
        return v.decode() if isinstance(v, bytes) else None if v is None else str(v)
    return [(text(fk[2]) or "", text(fk[3]) or "", text(fk[4]))
            for fk in conn.execute(f"PRAGMA foreign_key_list({_quote(table)})")]


def _parents_first(conn: sqlite3.Connection, tables: list[str]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for parent_name, _column, _parent_column in _keys(conn, name):
            parent = next((t for t in tables if t.lower() == parent_name.lower()), None)
            if parent is not None:
                visit(parent)
        order.append(name)

    for table in tables:
        visit(table)
    return order


def _linked(conn: sqlite3.Connection, table: str, row: sqlite3.Row, kept: Mapping[str, list[sqlite3.Row]]) -> bool:
    """Whether every declared foreign key of ``row`` names a parent row kept (or is NULL)."""
    for parent_name, column, parent_column in _keys(conn, table):
        parent = next((t for t in kept if t.lower() == parent_name.lower()), None)
        value = row[column] if column in row.keys() else None
        if parent is None or value is None or not parent_column:
            continue
        if not any(parent_column in r.keys() and r[parent_column] == value for r in kept[parent]):
            return False
    return True


def thin_database(source: Path, dest: Path, rows: int, seed: int = 0) -> None:
    """Copy ``source``'s schema to ``dest`` with at most ``rows`` rows a table (module docstring)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    src.row_factory = sqlite3.Row
    src.text_factory = bytes  # Spider holds a few texts that are not UTF-8: copied as they are
    out = sqlite3.connect(dest, isolation_level=None)
    try:
        entries = src.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
                              "name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
        tables = [e["name"].decode() for e in entries if e["type"] == b"table"]
        out.execute("BEGIN")
        for entry in entries:
            if entry["type"] in (b"table", b"index"):
                out.execute(entry["sql"].decode())
        draw = random.Random(f"thin:{seed}:{source.stem}")
        kept: dict[str, list[sqlite3.Row]] = {}
        for table in _parents_first(src, tables):
            every = src.execute(f"SELECT * FROM {_quote(table)}").fetchall()
            draw.shuffle(every)
            fit = [_linked(src, table, r, kept) for r in every] if rows else []
            chosen = ([r for r, ok in zip(every, fit) if ok] + [r for r, ok in zip(every, fit) if not ok])[:rows]
            kept[table] = chosen
            if chosen:
                marks = ", ".join("?" * len(chosen[0].keys()))
                out.executemany(f"INSERT INTO {_quote(table)} VALUES ({marks})",
                                [tuple(_text(v) for v in r) for r in chosen])
        for entry in entries:
            if entry["type"] not in (b"table", b"index"):
                out.execute(entry["sql"].decode())
        out.execute("COMMIT")
        out.execute("VACUUM")
    finally:
        src.close()
        out.close()


def _text(value: object) -> object:
    """A text read as bytes, back to text (undecodable bytes kept as a blob, as Spider stores them)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def thin(spider: Path, dest: Path, rows_by_db: Mapping[str, int], seed: int = 0) -> dict[str, Path]:
    """The thinned corpus at ``dest`` (module docstring); the databases written, by db_id."""
    databases = spider / "database" if (spider / "database").is_dir() else spider
    written = {}
    for db_id, rows in sorted(rows_by_db.items()):
        target = dest / db_id / f"{db_id}.sqlite"
        thin_database(databases / db_id / f"{db_id}.sqlite", target, rows, seed)
        written[db_id] = target
    for name in QUESTION_FILES:
        found = spider / name
        if found.is_file():
            kept = [r for r in json.loads(found.read_text(encoding="utf-8")) if r.get("db_id") in rows_by_db]
            (dest / name).write_text(json.dumps(kept, indent=1), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spider", type=Path, help="Spider's folder (database/, train_spider.json, dev.json)")
    parser.add_argument("dest", type=Path, help="where the thinned corpus goes")
    parser.add_argument("databases", nargs="+", help="db_id=ROWS: at most ROWS rows a table of db_id")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    wanted = {name: int(rows) for name, _, rows in (d.partition("=") for d in args.databases)}
    for db_id, path in thin(args.spider, args.dest, wanted, args.seed).items():
        print(f"{db_id}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
