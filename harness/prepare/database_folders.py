"""The databases of ``--databases``: folders of SQLite files in Spider's layout, or of DDL files.

Each folder given is one of:

* SQLite files in Spider's layout, ``<db_id>/<db_id>.sqlite``, or flat ``<db_id>.sqlite``
  (Spider's ``database/``, Spider-DK's, a company's own);
* else DDL files, ``<db_id>.sql`` at its top (BIRD mini-dev's ``bird_evaluation/data/schemas``:
  CREATE TABLE statements with ``--`` comments), each built here into an SQLite database under
  ``build``, at prepare time. Those databases hold the tables and no rows: every gold on them returns
  nothing, and prepare's rules for empty golds apply (left out of rl unless --keep-empty-gold).

Several folders are read as one (Spider's databases and Spider-DK's three new ones); a db_id found in
two of them is an InputError naming both files. A DDL file SQLite refuses is an InputError naming the
file and SQLite's message. Standard library only: prepare runs as a script.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from harness.common.errors import InputError
from harness.prepare import bundle_data


def sqlite_files(folder: Path) -> dict[str, Path]:
    """``<folder>/<db_id>/<db_id>.sqlite`` and flat ``<folder>/<db_id>.sqlite``, by db_id."""
    files = {p.stem: p for p in folder.glob("*.sqlite")}
    files.update({p.parent.name: p for p in folder.glob("*/*.sqlite") if p.stem == p.parent.name})
    return files


def build_ddl(sql: Path, dest: Path) -> Path:
    """The DDL file ``sql`` built into the SQLite database ``dest``; InputError when SQLite refuses it."""
    try:
        return bundle_data.build_sqlite(sql, dest)
    except sqlite3.Error as exc:
        raise InputError(f"DDL file {sql}: SQLite refuses it ({exc}): fix the statement, or move the file out of "
                         "the --databases folder to leave that database out") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"DDL file {sql} cannot be read as UTF-8 text ({exc}): replace it") from None


def find(folders: Sequence[Path], build: Path) -> dict[str, Path]:
    """Every database of ``folders`` by db_id (module docstring); DDL files built under ``build``."""
    found: dict[str, Path] = {}
    for k, folder in enumerate(folders):
        if not folder.is_dir():
            raise InputError(f"--databases {folder} is not a folder: give a folder of databases "
                             "(<db_id>/<db_id>.sqlite, as Spider's database/, or <db_id>.sql DDL files)")
        files = sqlite_files(folder)
        if not files:
            files = {sql.stem: build_ddl(sql, build / str(k) / sql.stem / f"{sql.stem}.sqlite")
                     for sql in sorted(folder.glob("*.sql"))}
        if not files:
            raise InputError(f"--databases {folder} holds no databases (no <db_id>/<db_id>.sqlite, <db_id>.sqlite "
                             "nor <db_id>.sql): point it at Spider's database folder or a folder of DDL files")
        for db_id, path in sorted(files.items()):
            if db_id in found:
                raise InputError(f"database {db_id!r} is in two --databases folders ({found[db_id]} and {path}): "
                                 "give each database once (remove one of them)")
            found[db_id] = path
    return found
