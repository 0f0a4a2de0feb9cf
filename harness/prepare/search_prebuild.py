"""The grader's search databases of the eval split's golds, built at prepare time for `grade`.

The counterexample search judges a right answer on up to 24 databases drawn for its gold
(bundle/search/counterexample.py). They depend on the gold and the bundle, never on a prediction, so
``prebuild`` draws each eval gold's set once, after the bundle is staged, one database of the
bundle a task on every usable core, and keeps them in the prepared folder's search cache
(``DATA/cache/search``, bundle/search/disk.py), where `grade` reads them: the first stage graded
pays only for running its answers, as every later one does. The sets of what a prediction adds to
its gold (a literal the gold lacks) are drawn when a prediction first needs them, as before.

The key of a kept database names the bundle's code as the grading process reads it (the zip's
``*.py``); the databases are drawn here by this harness's ``bundle`` package, so they are built
only where its modules are the staged bundle's, byte for byte (otherwise nothing is built and
`grade` draws them as it goes).

The review prepare runs on its staged bundle (harness.audit.entry.review) grades every eval gold
with the same search, twice: ``working`` names one folder for the whole of prepare, so the review
draws each set once, the second review and the draw read it, and ``settle`` gives it the name
`grade` looks for once the bundle is final. Its entries are keyed by everything they depend on, so
the folder a bundle staged here before left is taken over: what still holds is read, not drawn.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bundle.scoring import entry as scoring_entry
from bundle.search import disk as search_disk
from harness.common import search_cache
from harness.common.processes import map_in_processes


def eval_golds(staged: Path) -> dict[str, list[str]]:
    """The eval split's distinct golds per database, in the index's order."""
    index = json.loads((staged / "data" / "index.json").read_text(encoding="utf-8"))
    out: dict[str, list[str]] = {}
    for row in index["rows"]:
        if row.get("split") == "eval" and row["db_id"] in (index.get("invariants") or {}):
            golds = out.setdefault(row["db_id"], [])
            if row["gold"] not in golds:
                golds.append(row["gold"])
    return out


def _build(task: tuple[str, str, list[str]]) -> int:
    root, db_id, golds = task
    return sum(scoring_entry.prebuild_search(gold, db_id, root) for gold in golds)


def prebuild(staged: Path, folder: Path, say: Callable[[str], None] = lambda line: None,
             processes: int | None = None, golds: dict[str, list[str]] | None = None) -> dict:
    """Draw the search sets of the staged bundle's eval golds (or of ``golds``: db_id -> gold texts)
    into ``folder``; what was done."""
    golds = eval_golds(staged) if golds is None else golds
    if not golds:
        return {"skipped": "no eval gold on a database with neighbours"}
    if search_disk.folder_digest(str(staged)) != search_disk.code_digest():
        return {"skipped": "the staged bundle's modules are not this harness's bundle package"}
    started = time.monotonic()
    tasks = [(str(staged), db_id, found) for db_id, found in sorted(golds.items(), key=lambda kv: -len(kv[1]))]
    say(f"search databases: drawing the sets of {sum(len(g) for g in golds.values())} golds on "
        f"{len(golds)} databases into {folder}")
    with search_cache.keeping(folder):
        built = map_in_processes(_build, tasks, processes, spawn=True)
    return {"golds": sum(len(g) for g in golds.values()), "databases": sum(built),
            "seconds": time.monotonic() - started, "folder": str(folder)}


WORKING = "building"  # the subfolder of DATA/cache/search prepare keeps its search databases in until settled


@contextlib.contextmanager
def working(base: Path, keep: bool) -> Iterator[Path]:
    """The folder the search keeps its databases in while prepare runs (``search_cache.keeping``):
    ``base/building`` when they are to be kept (``keep``), made of the newest folder a bundle staged
    here before left, if any; else a temporary folder, removed after."""
    if not keep:
        with tempfile.TemporaryDirectory(prefix="spider-search-") as tmp, search_cache.keeping(tmp):
            yield Path(tmp)
        return
    folder = base / WORKING
    if not folder.is_dir():
        earlier = sorted(search_cache.bundle_folders(base), key=lambda p: p.stat().st_mtime)
        if earlier:
            os.rename(earlier[-1], folder)
    with search_cache.keeping(folder):
        yield folder


def settle(base: Path, index_sha256: str) -> Path:
    """The working folder renamed for the bundle whose index has this SHA-256 (where `grade` looks),
    and the folders of bundles staged before removed; the settled folder."""
    final = search_cache.folder_for(base, index_sha256)
    search_cache.sweep(base, keep=final)
    if (base / WORKING).is_dir():
        shutil.rmtree(final, ignore_errors=True)
        os.rename(base / WORKING, final)
    return final


def describe(done: dict) -> str:
    """One line for the terminal."""
    if "skipped" in done:
        return f"search databases: none drawn ({done['skipped']}); `grade` draws them as it needs them"
    return (f"search databases: {done['databases']:,} drawn for the {done['golds']:,} eval golds in "
            f"{done['seconds']:.0f} s, into {done['folder']} (read by `grade`)")
