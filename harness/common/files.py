"""Files written whole or not at all, and their hashes. Standard library only.

>>> from pathlib import Path
>>> atomic_write_bytes("out/example.txt", b"hello")
>>> Path("out/example.txt").read_bytes(), sha256_file("out/example.txt")[:12]
(b'hello', '2cf24dba5fb0')
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` (its folders made), then rename it over ``path``."""
    path = Path(path)
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
