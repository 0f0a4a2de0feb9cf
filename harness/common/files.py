"""Files written whole or not at all, and their hashes. Standard library only.

A command checks its outputs before its work (``check_writable_file``, ``check_writable_folder``):
a read-only folder fails in a second with OutputError, not after an hour of grading.

>>> from pathlib import Path
>>> atomic_write_bytes("out/example.txt", b"hello")
>>> Path("out/example.txt").read_bytes(), sha256_file("out/example.txt")[:12]
(b'hello', '2cf24dba5fb0')
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

from harness.common.errors import OutputError

WRITE_ELSEWHERE = "make it writable, or write elsewhere (the command's --output or --data; OUT=DIR with make)"


FULL = (errno.ENOSPC, errno.EDQUOT)  # no space left on the device, or the user's quota spent


def is_full(exc: OSError) -> bool:
    """The write failed because the disk (or the quota) is full, not for want of permission."""
    return exc.errno in FULL


def _cannot_write(subject: str, exc: OSError) -> OutputError:
    reason = exc.strerror or str(exc)
    if exc.errno is not None and exc.errno in errno.errorcode:
        reason += f" ({errno.errorcode[exc.errno]})"
    if is_full(exc):
        return OutputError(f"cannot write {subject}: the disk is full: {reason}; free space on it, or write "
                           "elsewhere (the command's --output or --data; OUT=DIR with make)")
    return OutputError(f"cannot write {subject}: {reason}; {WRITE_ELSEWHERE}")


def check_writable_folder(folder: str | os.PathLike, what: str = "") -> Path:
    """``folder`` once a file could be created in it, or in the nearest folder that exists on its way
    when it does not exist yet (nothing is left behind); OutputError naming it (``what``: what goes
    there) otherwise. Root passes a folder's mode bits, so the test is a real write, not a look at them.

    >>> check_writable_folder("out/results/new") == Path("out/results/new")
    True
    """
    folder = Path(folder)
    subject = f"{what} into {folder}" if what else f"into {folder}"
    existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise OutputError(f"cannot write {subject}: {existing} is a file, not a folder; {WRITE_ELSEWHERE}")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _cannot_write(subject, exc) from None
    return folder


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` once ``atomic_write_bytes`` could write it (its folder writable, or makable, and
    ``path`` not itself a folder); OutputError naming it (``what``: e.g. "the results") otherwise."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {what} to {path}: it is a folder; give a file name")
    check_writable_folder(path.parent, f"{what} ({path.name})")
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` (its folders made), then rename it over ``path``.

    OutputError naming ``path`` when that fails (what was there before is left as it was).
    """
    path = Path(path)
    try:
        _write_and_rename(path, data)
    except OSError as exc:
        raise _cannot_write(str(path), exc) from None


def _write_and_rename(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary readable files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (databases, the zip, the files `submit` sends)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
