"""The folder where grading keeps the counterexample search's databases for later stages
(bundle/search_disk.py, named to the bundle by ``SPIDER_SCORING_SEARCH_CACHE``).

``keeping(folder)`` names it for the ``with`` block: the bundle loaded in this process and every
worker process started inside read and keep the search's databases there. ``None``: nothing kept.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

ENV = "SPIDER_SCORING_SEARCH_CACHE"  # bundle/search_disk.py's ENV (common imports nothing of the bundle)
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
