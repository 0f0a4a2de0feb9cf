"""`pack`: the scoring bundle as a reproducible zip, from an explicit file list.

The zip holds, and nothing else:

* the bundle modules named in ``BUNDLE_MODULES``, at its root (the trainer's entry files) and in
  the bundle's subpackages (never "every .py in the folder": a stray file would change the hash
  the trainer identifies the bundle by);
* ``data/index.json``;
* ``data/databases/<db_id>.sqlite`` for exactly the databases the index lists.

Entries are sorted, stamped 1980-01-01 00:00:00, mode 0644, deflated at level 9, so the same
inputs give the same bytes (with the same zlib: a different zlib may compress differently).
Anything the trainer refuses (unsafe path, symlink, no Python) and anything over ``CAPS`` is a
PackError naming the file and what to do.

Standard library only: the emulated trainer (inside the container) reuses ``check_entries``.

>>> sorted(BUNDLE_MODULES)[:3]
['__init__.py', 'bundle_package.py', 'contract/__init__.py']
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from pathlib import Path

from harness.common.bundle_zip import CAPS, DATABASE_DIR, INDEX_ENTRY, NEIGHBOUR_DIR, Caps, ZipSummary, check_entries, summarize, unsafe_reason
from harness.common.errors import PackError
from harness.common.files import atomic_write_bytes, sha256_file
from harness.prepare.staging import MARK

# The bundle's modules, listed by hand on purpose (see the module docstring), as paths relative to
# the bundle's folder. A test checks this list against bundle/**/*.py, so adding a module to the
# bundle means adding it here too.
BUNDLE_MODULES: tuple[str, ...] = (
    "__init__.py",
    "bundle_package.py",
    "contract/__init__.py",
    "contract/errors.py",
    "contract/limits.py",
    "contract/shapes.py",
    "environment.py",
    "grader.py",
    "neighbours/__init__.py",
    "neighbours/fuzz.py",
    "neighbours/invariants.py",
    "neighbours/keep.py",
    "neighbours/links.py",
    "neighbours/mining.py",
    "neighbours/plan.py",
    "neighbours/proof.py",
    "neighbours/source.py",
    "neighbours/thin.py",
    "neighbours/values.py",
    "openrlhf_agent.py",
    "reward.py",
    "scoring/__init__.py",
    "scoring/batch.py",
    "scoring/disputed.py",
    "scoring/entry.py",
    "scoring/episode.py",
    "scoring/index.py",
    "scoring/thin_rows.py",
    "search/__init__.py",
    "search/cache.py",
    "search/counterexample.py",
    "search/difference.py",
    "search/disk.py",
    "search/edits.py",
    "search/folder.py",
    "skyrl_env.py",
    "sql/__init__.py",
    "sql/compare.py",
    "sql/connection.py",
    "sql/expansion.py",
    "sql/extract.py",
    "sql/functions.py",
    "sql/gold_results.py",
    "sql/guard.py",
    "sql/leaderboard.py",
    "sql/planner.py",
    "sql/reading.py",
    "sql/sandbox.py",
    "sql/text.py",
    "sql/verdict.py",
    "sql/watchdog.py",
    "verify.py",
)
SOURCE = Path(__file__).resolve().parents[2] / "bundle"  # the bundle's code in this checkout
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold: no build time leaks in
FILE_MODE = 0o100644  # regular file, rw-r--r--


def python_files(folder: str | os.PathLike) -> list[str]:
    """Every ``*.py`` under a bundle folder, as '/'-separated paths relative to it, sorted; nothing
    under ``data/`` nor a ``__pycache__``."""
    folder = Path(folder)
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py")
                  if not {"data", "__pycache__"} & set(p.relative_to(folder).parts[:-1]))


def stage_modules(dest: str | os.PathLike, source: str | os.PathLike = SOURCE) -> None:
    """Copy the bundle's modules (``BUNDLE_MODULES``) from ``source`` into the folder ``dest``,
    subpackages included, each written atomically."""
    for name in BUNDLE_MODULES:
        atomic_write_bytes(Path(dest) / name, (Path(source) / name).read_bytes())


def _read_index(staged: Path) -> dict:
    path = staged / INDEX_ENTRY
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PackError(f"{path} is missing: stage the bundle first with `make bundle` "
                        "or `make sample-bundle` (python3 -m harness prepare), or point --data at a prepared folder") from None
    except (OSError, ValueError) as exc:
        raise PackError(f"cannot read {path}: {exc}; rebuild it with `make bundle`") from None
    if not isinstance(index, dict) or not isinstance(index.get("databases"), dict):
        raise PackError(f"{path} is not a bundle index (no 'databases'); rebuild it with `make bundle`")
    return index


def _regular_file(path: Path, what: str) -> Path:
    """``path`` if it is a regular file (not a symlink); PackError otherwise."""
    if path.is_symlink():
        raise PackError(f"{what} {path} is a symlink; the trainer refuses symlinks: copy the real file there")
    if not path.is_file():
        raise PackError(f"{what} {path} is missing; stage the bundle again (`make bundle`)")
    return path


def file_list(staged: str | os.PathLike) -> tuple[dict[str, Path], list[str]]:
    """The zip's entries (name -> source file) and the notes about files left out.

    PackError when a listed file is missing or a symlink, a module is not in BUNDLE_MODULES, or a
    database does not have the SHA-256 the index records.
    """
    staged = Path(staged)
    if not staged.is_dir():
        raise PackError(f"staged bundle folder {staged} does not exist: stage it first with `make bundle` "
                        "(Spider) or `make sample-bundle` (the embedded sample)")
    unknown = sorted(name for name in python_files(staged) if name not in BUNDLE_MODULES)
    if unknown:
        raise PackError(f"module(s) {', '.join(unknown)} in {staged} are not in harness.prepare.pack.BUNDLE_MODULES: "
                        "add them to that list if the bundle needs them, else delete them")
    entries = {name: _regular_file(staged / name, "bundle module") for name in BUNDLE_MODULES}
    entries[INDEX_ENTRY] = _regular_file(staged / INDEX_ENTRY, "index")
    index = _read_index(staged)
    for db_id, entry in sorted(index["databases"].items()):
        name = f"data/{entry.get('file', '')}"
        if unsafe_reason(name) or not name.startswith(DATABASE_DIR + "/"):
            raise PackError(f"index entry for database {db_id!r} names file {entry.get('file')!r}, "
                            f"not under databases/: rebuild the index with `make bundle`")
        entries[name] = _indexed_file(staged, name, entry, f"database {db_id!r}")
        for k, neighbour in enumerate(entry.get("neighbours") or []):
            name = f"data/{neighbour.get('file', '')}"
            if unsafe_reason(name) or not name.startswith(NEIGHBOUR_DIR + "/"):
                raise PackError(f"index entry for neighbour {k + 1} of {db_id!r} names file {neighbour.get('file')!r}, "
                                f"not under neighbours/: rebuild the index with `make bundle`")
            entries[name] = _indexed_file(staged, name, neighbour, f"neighbour {k + 1} of {db_id!r}")
    left_out = sorted(str(p.relative_to(staged)) for p in staged.rglob("*")
                      if p.is_file() and p.relative_to(staged).as_posix() not in (*entries, MARK))
    return dict(sorted(entries.items())), left_out


def _indexed_file(staged: Path, name: str, entry: dict, what: str) -> Path:
    source = _regular_file(staged / name, what)
    digest = sha256_file(source)
    if digest != entry.get("sha256"):
        raise PackError(f"{what} at {source} has SHA-256 {digest[:12]}..., the index "
                        f"records {str(entry.get('sha256'))[:12]}...: rebuild with `make bundle`")
    return source


def zip_bytes(entries: dict[str, Path]) -> bytes:
    """The archive's bytes: sorted entries, fixed date and mode, deflate level 9."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.external_attr = FILE_MODE << 16
            info.create_system = 3  # Unix, so the mode bits mean the same everywhere
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entries[name].read_bytes(), compresslevel=9)
    return buffer.getvalue()


def _infos(data: bytes) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.infolist()


def pack(staged: str | os.PathLike, output: str | os.PathLike, caps: Caps = CAPS) -> tuple[ZipSummary, list[str]]:
    """Build ``output`` from the staged folder; returns its summary and the files left out.

    Checked before it is written, then written to a temporary file beside ``output`` and renamed:
    a refused or interrupted build never replaces a good zip.
    """
    entries, left_out = file_list(staged)
    data = zip_bytes(entries)
    problems = check_entries(_infos(data), caps)
    if len(data) > caps.archive_bytes:
        problems.append(f"archive is {len(data):,} bytes, over the cap of {caps.archive_bytes:,}")
    if problems:
        raise PackError(f"the zip built from {staged} would be refused: " + "; ".join(problems))
    atomic_write_bytes(output, data)  # readable by the container's unprivileged user; a refused build never replaces a good zip
    summary = summarize(output, caps)
    return dataclasses.replace(summary, path=str(output)), left_out
