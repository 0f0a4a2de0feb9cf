"""The staged bundle (``OUT/bundle``), built whole or not at all, and the mark that says it is whole.

``prepare`` builds the staged bundle in a new folder beside it (``OUT/.bundle.building-*``), writes
the mark last (``.staged.json``: the SHA-256 of the index it finished with), and only then puts
the folder in the old one's place. An interrupted prepare (Ctrl-C, a full disk, a failed gold)
leaves the previous staged bundle as it was, or none, never a half-built one; the next prepare
removes the temporary folder it left.

``pack`` packs only a marked staged bundle whose index is the one marked (``check_complete``): a
folder half-built by an older harness, or changed by hand after staging, is refused with what to
do. The mark is a hidden file, which the zip never holds.

>>> root = Path("prepared")
>>> with building(root / "bundle") as stage:
...     (stage / "data").mkdir()
...     _ = (stage / "data" / "index.json").write_text("{}")
>>> check_complete(root / "bundle")
>>> sorted(p.name for p in root.iterdir())
['bundle']
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from harness.common.bundle_zip import INDEX_ENTRY
from harness.common.errors import PackError
from harness.common.files import atomic_write_bytes, sha256_file
from harness.common.layout import PREPARE_HINT

MARK = ".staged.json"


def _leftovers(staged: Path) -> list[Path]:
    """Folders an interrupted prepare left beside ``staged``: one it was building, one it replaced."""
    return sorted(p for pattern in (".{}.building-*", ".{}.replaced-*")
                  for p in staged.parent.glob(pattern.format(staged.name)) if p.is_dir())


@contextlib.contextmanager
def building(staged: str | os.PathLike) -> Iterator[Path]:
    """A new empty folder to build the staged bundle in; when the block ends normally it is marked
    and takes ``staged``'s place (the old one is removed). On any exception it is removed and
    ``staged`` is left as it was."""
    staged = Path(staged)
    staged.parent.mkdir(parents=True, exist_ok=True)
    for old in _leftovers(staged):
        shutil.rmtree(old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f".{staged.name}.building-", dir=staged.parent))
    try:
        yield work
        mark_complete(work)
        _replace(staged, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _replace(staged: Path, work: Path) -> None:
    """Two renames: ``staged`` is never half-built, only absent for the instant between them."""
    old = None
    if staged.exists() or staged.is_symlink():
        old = staged.with_name(f".{staged.name}.replaced-{uuid.uuid4().hex[:8]}")
        os.rename(staged, old)
    os.rename(work, staged)
    os.chmod(staged, 0o755)  # mkdtemp makes 0700; the staged folder is an ordinary output
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def mark_complete(stage: Path) -> None:
    """Write the mark: the staged bundle in ``stage`` is whole, with the index it has now."""
    mark = {"index_sha256": sha256_file(stage / INDEX_ENTRY),
            "note": "written by prepare once this staged bundle was complete; pack refuses one without it"}
    atomic_write_bytes(stage / MARK, (json.dumps(mark, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def check_complete(staged: str | os.PathLike) -> None:
    """PackError saying what to do unless ``staged`` is a staged bundle prepare finished and nobody
    changed the index of since."""
    staged = Path(staged)
    again = f"prepare it again: {PREPARE_HINT}"
    try:
        recorded = json.loads((staged / MARK).read_text(encoding="utf-8")).get("index_sha256")
    except FileNotFoundError:
        raise PackError(f"the staged bundle {staged} is incomplete: it has no {MARK}, which prepare writes when "
                        f"it has finished (a prepare was interrupted, or the folder was staged by hand); {again}") from None
    except (OSError, ValueError, AttributeError) as exc:
        raise PackError(f"the staged bundle's mark {staged / MARK} is unreadable ({exc}); {again}") from None
    index = staged / INDEX_ENTRY
    actual = sha256_file(index) if index.is_file() else None
    if actual != recorded:
        raise PackError(f"the staged bundle {staged} changed after prepare finished: its {INDEX_ENTRY} is "
                        f"{'missing' if actual is None else 'not the one prepare wrote'}; {again}")
