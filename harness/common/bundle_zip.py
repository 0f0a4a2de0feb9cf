"""A bundle zip's rules, shared by the packer that writes it and every loader that reads it.

What the trainer refuses (an unsafe path, a symlink, no Python at the root, a root module that
shadows the standard library) and the size caps; ``summarize`` reads a zip's hash, sizes and
counts, refusing one that breaks a rule. Standard library only: the emulated trainer (in its
container) and the grader service (in its image) check entries with the same code.

>>> unsafe_reason("data/index.json") is None
True
>>> unsafe_reason("../evil.py")
'a parent-folder component'
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import stat
import sys
import zipfile
import zlib
from pathlib import Path

from harness.common.errors import PackError

# What reading a damaged entry raises: a CRC-32 or local header that does not match (BadZipFile), a
# broken deflate stream (zlib.error), a stream cut short (EOFError).
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError)
INDEX_ENTRY = "data/index.json"
DATABASE_DIR = "data/databases"
NEIGHBOUR_DIR = "data/neighbours"


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
    neighbours: int = 0

    def lines(self) -> list[str]:
        return [f"zip        {self.path}",
                f"sha256     {self.sha256}",
                f"archive    {self.archive_bytes:,} bytes",
                f"unpacked   {self.unpacked_bytes:,} bytes",
                f"entries    {self.entries} ({self.modules} modules, {self.databases} databases, "
                f"{self.neighbours} neighbour databases, index)"]


def unsafe_reason(name: str) -> str | None:
    """Why an entry name is refused (None when it is acceptable)."""
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


def damaged(zip_path: str | os.PathLike, name: str, exc: BaseException) -> PackError:
    """The error for an entry that cannot be read back: the zip changed after it was packed."""
    return PackError(f"{zip_path}: entry {name!r} is damaged ({exc}): the zip changed after it was packed "
                     "(a broken copy or download); pack it again (`make pack`) or copy it again")


def check_contents(archive: zipfile.ZipFile, path: str | os.PathLike) -> None:
    """Read every entry whole, as the trainer unpacks it: PackError (``damaged``) on the first whose
    bytes do not match their CRC-32 or do not decompress. Reads no more than the sizes declared,
    which ``check_entries`` holds within the caps."""
    for info in archive.infolist():
        try:
            with archive.open(info) as entry:
                while entry.read(1 << 20):
                    pass
        except DAMAGED as exc:
            raise damaged(path, info.filename, exc) from None


def summarize(path: str | os.PathLike, caps: Caps = CAPS) -> ZipSummary:
    """Hash, sizes and entry counts of a zip; PackError listing every problem the trainer would
    refuse, or naming a damaged entry (every entry is read back)."""
    path = Path(path)
    try:
        data = path.read_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            problems = check_entries(infos, caps)
            if not problems:
                check_contents(archive, path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise PackError(f"cannot read {path} as a zip ({exc}): rebuild it with `make pack`") from None
    if len(data) > caps.archive_bytes:
        problems.append(f"archive is {len(data):,} bytes, over the cap of {caps.archive_bytes:,}")
    if problems:
        raise PackError(f"{path} would be refused: " + "; ".join(problems))
    names = [i.filename for i in infos]
    return ZipSummary(str(path), hashlib.sha256(data).hexdigest(), len(data), sum(i.file_size for i in infos),
                      len(infos), sum(1 for n in names if n.endswith(".py") and not n.startswith("data/")),
                      sum(1 for n in names if n.startswith(DATABASE_DIR + "/")),
                      sum(1 for n in names if n.startswith(NEIGHBOUR_DIR + "/")))
