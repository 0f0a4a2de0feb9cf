"""Where an audit starts: a bundle zip, a staged bundle folder, or prepare's review of what it staged.

* ``audit_zip``: the zip loaded as the trainer loads it (unpacked read-only, imported as a package);
* ``audit_staged``: a staged ``bundle/`` folder packed exactly as ``pack`` packs it (into a
  temporary zip), then audited as a zip;
* ``review``: what ``prepare`` calls on the bundle it staged: the audit, as a section of the
  summary, and with ``--drop-hackable`` the rl rows to leave out (harness.prepare.job.Review).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from bundle.bundle_index import normalize_gold
from harness.audit import rewrites, run
from harness.common.bundle_loader import load_bundle
from harness.common.errors import InputError
from harness.prepare import pack
from harness.prepare.job import Review
from harness.prepare.neighbours.separate import Hole

Say = Callable[[str], None]
# Fields of the audit document that depend on the run, not on the bundle: left out of prepare's summary.
RUN_FIELDS = ("zip", "seconds")


def audit_zip(zip_path: Path, splits: tuple[str, ...] = run.DEFAULT_SPLITS, *, threads: int = 4,
              say: Say = lambda line: None) -> dict:
    """The audit document of the bundle zip at ``zip_path`` (harness.audit.run)."""
    with tempfile.TemporaryDirectory(prefix="audit-") as work, load_bundle(zip_path, work) as loaded:
        return run.audit(loaded, splits, threads=threads, say=say)


def audit_staged(staged: Path, splits: tuple[str, ...] = run.DEFAULT_SPLITS, *, threads: int = 4,
                 say: Say = lambda line: None) -> dict:
    """The audit document of a staged bundle folder, packed first as ``pack`` would pack it."""
    with tempfile.TemporaryDirectory(prefix="audit-zip-") as tmp:
        zip_path = Path(tmp) / "staged.zip"
        pack.pack(staged, zip_path)
        return audit_zip(zip_path, splits, threads=threads, say=say)


def _renumbered(entry: dict, dropped: list[int]) -> dict:
    """``entry`` with its rl row id as it reads once the ``dropped`` rl positions are left out."""
    split, _, number = entry["id"].partition("-")
    if split != "rl":
        return entry
    position = int(number)
    return {**entry, "id": f"rl-{position - sum(1 for d in dropped if d < position):05d}"}


def summary_section(doc: dict, dropped: list[int]) -> dict:
    """The audit document as prepare's summary holds it: without the run's fields, rl ids as
    written once ``dropped`` (positions in rl) are left out, those rows listed under ``dropped``
    with the ids they had while audited."""
    section = {k: v for k, v in doc.items() if k not in RUN_FIELDS}
    gone = {f"rl-{d:05d}" for d in dropped}
    section["dropped"] = [e for e in doc["hackable"] if e["id"] in gone]
    section["hackable"] = [_renumbered(e, dropped) for e in doc["hackable"] if e["id"] not in gone]
    section["set_aside"] = [_renumbered(e, dropped) for e in doc["set_aside"]]
    section["unscored"] = [_renumbered(e, dropped) for e in doc["unscored"] if e["id"] not in gone]
    return section


def review(staged: Path, *, drop_hackable: bool, threads: int = 4, say: Say = lambda line: None) -> Review:
    """Audit the staged bundle of ``prepare`` (rl and eval); with ``drop_hackable``, the hackable rl
    rows to leave out. Refuses to leave the rl split empty."""
    doc = audit_staged(staged, run.DEFAULT_SPLITS, threads=threads, say=say)
    dropped = sorted(int(e["id"].split("-")[1]) for e in doc["hackable"] if e["split"] == "rl") if drop_hackable else []
    rl_rows = doc["splits"]["rl"]["rows"]
    if rl_rows and len(dropped) == rl_rows:
        raise InputError(f"every one of the {rl_rows} rl rows is hackable, so --drop-hackable would leave rl empty: "
                         "build neighbour databases for rl (--neighbours eval,rl) or leave out --drop-hackable")
    return Review(summary_section(doc, dropped), frozenset(dropped), holes(doc), fair_answers(doc))


def holes(doc: dict) -> tuple[Hole, ...]:
    """Every (database, gold, answer) the audit found paid and shown wrong, each once, in order."""
    return tuple(sorted({Hole(e["db_id"], e["gold"], p["sql"], p["policy"]) for e in doc["hackable"] for p in e["paid"]}))


def fair_answers(doc: dict) -> dict[tuple[str, str], tuple[str, ...]]:
    """(db_id, gold) -> the corpus's equivalent rewrites of it, for the golds of the audit's holes:
    the separation must keep paying them."""
    wanted = {(e["db_id"], normalize_gold(e["gold"])): e["gold"] for e in doc["hackable"]}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for item in rewrites.load():
        gold = wanted.get((item["db_id"], normalize_gold(item["gold"])))
        if gold is not None:
            out[(item["db_id"], gold)] = out.get((item["db_id"], gold), ()) + (item["rewrite"],)
    return out
