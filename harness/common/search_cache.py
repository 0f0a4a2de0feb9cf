"""The folder where grading keeps the counterexample search's databases for later stages
(bundle/search/disk.py, named to the bundle by ``SPIDER_SCORING_SEARCH_CACHE``).

``keeping(folder)`` names it for the ``with`` block: the bundle loaded in this process and every
worker process started inside read and keep the search's databases there. ``None``: nothing kept.
``folder_for(base, index_sha256)``: one subfolder per bundle index under ``base``
(``DATA/cache/search``), so that ``prepare`` (which draws the eval golds' sets there) and ``grade``
meet in the same one, and ``sweep`` removes those of bundles built before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

ENV = "SPIDER_SCORING_SEARCH_CACHE"  # bundle/search/disk.py's ENV (common imports nothing of the bundle)
OFF = "off"  # ``--search-cache off``: nothing kept


@contextlib.contextmanager
def keeping(folder: Path | str | None) -> Iterator[None]:
    """``SPIDER_SCORING_SEARCH_CACHE`` set to ``folder`` (unset: None) inside, as it was after."""
    before = os.environ.get(ENV)
    if folder is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def size(folder: Path) -> tuple[int, int]:
    """(search databases kept, bytes) in ``folder`` (0, 0 when there is none)."""
    entries = total = 0
    if folder.is_dir():
        for path in folder.rglob("*"):
            if path.suffix == ".json":
                entries += 1
            if path.is_file():
                total += path.stat().st_size
    return entries, total


def folder_for(base: Path, index_sha256: str) -> Path:
    """The subfolder of ``base`` for the bundle whose index has this SHA-256."""
    return base / index_sha256[:16]


def zip_index_sha256(zip_path: Path) -> str | None:
    """SHA-256 of the index a bundle zip holds (``data/index.json``, as staged); None where it holds
    none or cannot be read (the grading job refuses such a zip with its own error)."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            return hashlib.sha256(archive.read("data/index.json")).hexdigest()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def bundle_folders(base: Path) -> list[Path]:
    """The subfolders of ``base`` named as ``folder_for`` names them."""
    if not base.is_dir():
        return []
    return [p for p in sorted(base.iterdir()) if p.is_dir() and re.fullmatch(r"[0-9a-f]{16}", p.name)]


def sweep(base: Path, keep: Path) -> list[Path]:
    """Remove the subfolders of ``base`` named as ``folder_for`` names them, but ``keep``; those removed."""
    gone = [p for p in bundle_folders(base) if p != keep]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone
