"""`pack`: the scoring bundle as a reproducible zip, from an explicit file list.

The zip holds, at its root and nothing else:

* the bundle modules named in ``BUNDLE_MODULES`` (never "every .py in the folder": a stray file
  would change the hash the trainer identifies the bundle by);
* ``data/index.json``;
* ``data/databases/<db_id>.sqlite`` for exactly the databases the index lists.

Entries are sorted, stamped 1980-01-01 00:00:00, mode 0644, deflated at level 9, so the same
inputs give the same bytes (with the same zlib: a different zlib may compress differently).
Anything the trainer refuses (unsafe path, symlink, no Python) and anything over ``CAPS`` is a
PackError naming the file and what to do.

Standard library only: the emulated trainer (inside the container) reuses ``check_entries``.

>>> sorted(BUNDLE_MODULES)[:2]
['__init__.py', 'bundle_index.py']
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.errors import PackError

# The bundle's modules, listed by hand on purpose (see the module docstring). A test checks this
# list against bundle/*.py, so adding a module to the bundle means adding it here too.
BUNDLE_MODULES: tuple[str, ...] = (
    "__init__.py",
    "bundle_index.py",
    "bundle_package.py",
    "gold_results.py",
    "grader.py",
    "reward.py",
    "scoring_entry.py",
    "scoring_errors.py",
    "scoring_limits.py",
    "sql_compare.py",
    "sql_extract.py",
    "sql_guard.py",
    "sql_text.py",
    "verify.py",
)
INDEX_ENTRY = "data/index.json"
DATABASE_DIR = "data/databases"
NEIGHBOUR_DIR = "data/neighbours"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold: no build time leaks in
FILE_MODE = 0o100644  # regular file, rw-r--r--


@dataclasses.dataclass(frozen=True)
class Caps:
    """Size caps, conservative because the trainer's own limits are not published.

    The reference bundle (63 Spider databases) is about 8 MB unpacked and 2 MB zipped; the whole
    Spider database folder is 22 MB. These caps leave room for that many times over and stay
    well under common upload limits, so a bundle that passes here is unlikely to be refused.
    """

    archive_bytes: int = 32 * 1024 * 1024
    unpacked_bytes: int = 128 * 1024 * 1024
    entry_bytes: int = 64 * 1024 * 1024
    entries: int = 512


CAPS = Caps()


@dataclasses.dataclass(frozen=True)
class ZipSummary:
    """What a zip holds: its hash and sizes, as printed after packing and before verifying."""

    path: str
    sha256: str
    archive_bytes: int
    unpacked_bytes: int
    entries: int
    modules: int
    databases: int

    def lines(self) -> list[str]:
        return [f"zip        {self.path}",
                f"sha256     {self.sha256}",
                f"archive    {self.archive_bytes:,} bytes",
                f"unpacked   {self.unpacked_bytes:,} bytes",
                f"entries    {self.entries} ({self.modules} modules, {self.databases} databases, index)"]


def unsafe_reason(name: str) -> str | None:
    """Why an entry name is refused (None when it is acceptable).

    >>> unsafe_reason("data/index.json") is None
    True
    >>> unsafe_reason("../evil.py")
    'a parent-folder component'
    """
    if not name or "\\" in name or "\x00" in name:
        return "a backslash, NUL or empty name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    parts = name.rstrip("/").split("/")
    if any(p == ".." for p in parts):
        return "a parent-folder component"
    if any(p in ("", ".") for p in parts):
        return "an empty or '.' component"
    if any(p.startswith(".") for p in parts):
        return "a hidden file or folder"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "compiled Python (__pycache__, .pyc)"
    return None


def check_entries(infos: list[zipfile.ZipInfo], caps: Caps = CAPS) -> list[str]:
    """Every reason the trainer would refuse a zip with these entries (empty list: acceptable)."""
    problems = []
    names = [i.filename for i in infos]
    if len(infos) > caps.entries:
        problems.append(f"{len(infos)} entries, over the cap of {caps.entries}")
    if len(set(names)) != len(names):
        problems.append("duplicate entry names")
    total = 0
    for info in infos:
        reason = unsafe_reason(info.filename)
        if reason:
            problems.append(f"entry {info.filename!r}: {reason}")
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            problems.append(f"entry {info.filename!r} is a symlink")
        if info.file_size > caps.entry_bytes:
            problems.append(f"entry {info.filename!r} is {info.file_size:,} bytes, over {caps.entry_bytes:,}")
        total += info.file_size
        root_module = "/" not in info.filename and info.filename.endswith(".py")
        if root_module and info.filename[:-3] in getattr(sys, "stdlib_module_names", ()):
            problems.append(f"entry {info.filename!r} shadows the standard library module "
                            f"{info.filename[:-3]!r} (a reserved top-level name): rename it")
    if total > caps.unpacked_bytes:
        problems.append(f"unpacked size {total:,} bytes, over the cap of {caps.unpacked_bytes:,}")
    if not any("/" not in n and n.endswith(".py") for n in names):
        problems.append("no Python module at the zip root")
    return problems


def _read_index(staged: Path) -> dict:
    path = staged / INDEX_ENTRY
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PackError(f"{path} is missing: stage the bundle first with `make bundle` "
                        "(harness prepare) or point --staged at a prepared bundle folder") from None
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
    unknown = sorted(p.name for p in staged.glob("*.py") if p.name not in BUNDLE_MODULES)
    if unknown:
        raise PackError(f"module(s) {', '.join(unknown)} in {staged} are not in harness.pack.BUNDLE_MODULES: "
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
                      if p.is_file() and p.relative_to(staged).as_posix() not in entries)
    return dict(sorted(entries.items())), left_out


def _indexed_file(staged: Path, name: str, entry: dict, what: str) -> Path:
    source = _regular_file(staged / name, what)
    digest = sha256_file(source)
    if digest != entry.get("sha256"):
        raise PackError(f"{what} at {source} has SHA-256 {digest[:12]}..., the index "
                        f"records {str(entry.get('sha256'))[:12]}...: rebuild with `make bundle`")
    return source


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (databases, the zip, the files `submit` sends)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def summarize(path: str | os.PathLike, caps: Caps = CAPS) -> ZipSummary:
    """Hash, sizes and entry counts of a zip; PackError listing every problem the trainer would refuse."""
    path = Path(path)
    try:
        data = path.read_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise PackError(f"cannot read {path} as a zip ({exc}): rebuild it with `make pack`") from None
    problems = check_entries(infos, caps)
    if len(data) > caps.archive_bytes:
        problems.append(f"archive is {len(data):,} bytes, over the cap of {caps.archive_bytes:,}")
    if problems:
        raise PackError(f"{path} would be refused: " + "; ".join(problems))
    names = [i.filename for i in infos]
    return ZipSummary(str(path), hashlib.sha256(data).hexdigest(), len(data), sum(i.file_size for i in infos),
                      len(infos), sum(1 for n in names if "/" not in n and n.endswith(".py")),
                      sum(1 for n in names if n.startswith(DATABASE_DIR + "/")))


def pack(staged: str | os.PathLike, output: str | os.PathLike, caps: Caps = CAPS) -> tuple[ZipSummary, list[str]]:
    """Build ``output`` from the staged folder; returns its summary and the files left out.

    Written to a temporary file beside ``output``, checked, then renamed: a refused or interrupted
    build never replaces a good zip.
    """
    entries, left_out = file_list(staged)
    data = zip_bytes(entries)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix="." + output.name + ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # readable by the container's unprivileged user
        summary = summarize(tmp, caps)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dataclasses.replace(summary, path=str(output)), left_out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options: the staged folder and the zip to write."""
    from harness.names import BUNDLE_ZIP
    parser.add_argument("--out", type=Path, default=Path("out"),
                        help="prepare's output folder; the staged bundle is OUT/bundle (default: out)")
    parser.add_argument("--staged", type=Path, help="the staged bundle folder (default: OUT/bundle)")
    parser.add_argument("--output", "--zip", dest="output", type=Path, default=BUNDLE_ZIP,
                        help=f"the zip to write (default: {BUNDLE_ZIP})")


def run(args: argparse.Namespace) -> int:
    staged = args.staged or args.out / "bundle"
    summary, left_out = pack(staged, args.output)
    for name in left_out:
        print(f"left out (not in the file list): {name}")
    print("\n".join(summary.lines()))
    return 0
