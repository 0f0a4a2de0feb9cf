"""Where an audit starts: a bundle zip, a staged bundle folder, or prepare's review of what it staged.

* ``audit_zip``: the zip loaded as the trainer loads it (unpacked read-only, imported as a package);
* ``audit_staged``: a staged ``bundle/`` folder packed exactly as ``pack`` packs it (into a
  temporary zip), then audited as a zip;
* ``review``: what ``prepare`` calls on the bundle it staged: the audit, as a section of the
  summary, and with ``--drop-hackable`` the rl rows to leave out (harness.prepare.job.Review); its
  holes, for the separation: the degenerate answers paid and shown wrong, and (with the build's
  seeds) the near misses the oracle shows wrong, each with its witness database.

Each runs the audit (harness.audit.run) and, unless told not to, the near-miss measurement
(harness.audit.nearmiss.measure) on the same loaded bundle; the audit document holds it as ``near_misses``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from bundle.scoring.index import normalize_gold
from harness.audit import rewrites, run
from harness.audit.nearmiss import measure as nearmiss
from harness.audit.nearmiss import oracle
from harness.common.bundle_loader import load_bundle
from harness.common.errors import InputError
from harness.common.memo import Memo
from harness.prepare import pack
from harness.prepare.job import Review
from harness.prepare.neighbours.separate import Hole

Say = Callable[[str], None]
# Fields of the audit document that depend on the run, not on the bundle: left out of prepare's summary.
RUN_FIELDS = ("zip", "seconds")


def audit_zip(zip_path: Path, splits: tuple[str, ...] = run.DEFAULT_SPLITS, *, threads: int = 4,
              near_misses: NearMisses | None = None, say: Say = lambda line: None) -> dict:
    """The audit document of the bundle zip at ``zip_path`` (harness.audit.run), with its near misses
    measured as ``near_misses`` says (by default: every family, the measurement's seeds)."""
    return _audited(zip_path, splits, threads, near_misses or NearMisses(), say).doc


@dataclasses.dataclass(frozen=True)
class NearMisses:
    """How the near misses are measured: ``which`` families (all, tuning, held_out, or None: not at
    all), the oracle's ``settings``, ``work``: where its witness databases are kept for the caller,
    ``families``: the generator (default harness.audit.nearmiss.families)."""

    which: str | None = "all"
    settings: oracle.Settings = oracle.MEASURE
    work: Path | None = None
    families: nearmiss.Families | None = None


class _Audited(NamedTuple):
    doc: dict
    measured: nearmiss.Measured | None  # None: the near misses were not measured


def _audited(zip_path: Path, splits: tuple[str, ...], threads: int, near: NearMisses,
             say: Say, memo: Memo = run.NO_MEMO) -> _Audited:
    with tempfile.TemporaryDirectory(prefix="audit-") as work, load_bundle(zip_path, work) as loaded:
        made = run.catalogue_of(loaded, run.index_rows(loaded, splits), memo)
        doc = run.audit(loaded, splits, threads=threads, memo=memo, say=say, made=made)
        if near.which is None:
            return _Audited(doc, None)
        try:
            if near.families is None:
                nearmiss.default_families()  # the generator's imports
        except ImportError as exc:
            doc["near_misses"] = {"not_run": f"the near-miss generator is not importable ({exc})"}
            return _Audited(doc, None)
        measured = nearmiss.measure(loaded, splits, families=near.families, which=near.which, settings=near.settings,
                                    threads=threads, work=near.work, memo=memo, say=say)
        doc["near_misses"] = measured.doc
        return _Audited(doc, measured)


def audit_staged(staged: Path, splits: tuple[str, ...] = run.DEFAULT_SPLITS, *, threads: int = 4,
                 near_misses: NearMisses | None = None, say: Say = lambda line: None) -> dict:
    """The audit document of a staged bundle folder, packed first as ``pack`` would pack it."""
    return _staged(staged, splits, threads, near_misses or NearMisses(), say).doc


def _staged(staged: Path, splits: tuple[str, ...], threads: int, near: NearMisses,
            say: Say, memo: Memo = run.NO_MEMO) -> _Audited:
    with tempfile.TemporaryDirectory(prefix="audit-zip-") as tmp:
        zip_path = Path(tmp) / "staged.zip"
        pack.pack(staged, zip_path)
        return _audited(zip_path, splits, threads, near, say, memo)


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
    with the ids they had while audited (the near misses' lists too; their counts are as audited)."""
    section = {k: v for k, v in doc.items() if k not in RUN_FIELDS}
    gone = {f"rl-{d:05d}" for d in dropped}
    section["dropped"] = [e for e in doc["hackable"] if e["id"] in gone]
    section["hackable"] = [_renumbered(e, dropped) for e in doc["hackable"] if e["id"] not in gone]
    section["set_aside"] = [_renumbered(e, dropped) for e in doc["set_aside"]]
    section["unscored"] = [_renumbered(e, dropped) for e in doc["unscored"] if e["id"] not in gone]
    near = doc.get("near_misses")
    if near and "not_run" not in near:
        section["near_misses"] = {**{k: v for k, v in near.items() if k not in RUN_FIELDS}, **{
            key: [_renumbered(e, dropped) for e in near[key] if e["id"] not in gone]
            for key in ("missed", "blocked", "unscored")}}
    return section


# What a review is for: "build" (its holes are closed: the oracle's build seeds, the families asked
# for) or "measure" (the figures reported: the measurement's seeds, every family).
PURPOSES = ("build", "measure")


def review(staged: Path, *, drop_hackable: bool, purpose: str = "measure", work: Path | None = None,
           near_miss_families: str | None = "all", families: nearmiss.Families | None = None, threads: int = 4,
           memo: Memo = run.NO_MEMO, say: Say = lambda line: None) -> Review:
    """Audit the staged bundle of ``prepare`` (rl and eval) with its near misses; with
    ``drop_hackable``, the hackable rl rows to leave out. Refuses to leave the rl split empty.

    ``purpose`` (PURPOSES): for ``build``, the near misses of ``near_miss_families`` (all, tuning;
    None: none) are measured with the oracle's build seeds, and each one missed is a hole whose
    witness database is kept under ``work`` for the separation; for ``measure``, every family
    with the measurement's seeds (none when ``near_miss_families`` is None). ``families``: the
    generator (default harness.audit.nearmiss.families). ``memo``: where each database's parts are kept for the
    next review (harness.common.memo): the same review, the work done once."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose {purpose!r}: one of {', '.join(PURPOSES)}")
    build = purpose == "build"
    which = near_miss_families if build or near_miss_families is None else "all"
    scratch = Path(tempfile.mkdtemp(prefix="review-oracle-", dir=work)) if which is not None else None
    try:
        doc, measured = _staged(staged, run.DEFAULT_SPLITS, threads, NearMisses(
            which, oracle.BUILD if build else oracle.MEASURE, scratch, families), say, memo)
        near_holes = _near_miss_holes(measured, work) if build and measured is not None and work is not None else ()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    dropped = sorted(int(e["id"].split("-")[1]) for e in doc["hackable"] if e["split"] == "rl") if drop_hackable else []
    rl_rows = doc["splits"]["rl"]["rows"]
    if rl_rows and len(dropped) == rl_rows:
        raise InputError(f"every one of the {rl_rows} rl rows is hackable, so --drop-hackable would leave rl empty: "
                         "build neighbour databases for rl (--neighbours eval,rl) or leave out --drop-hackable")
    return Review(summary_section(doc, dropped), frozenset(dropped), tuple(sorted(set(holes(doc)) | set(near_holes))),
                  fair_answers(doc))


def holes(doc: dict) -> tuple[Hole, ...]:
    """Every (database, gold, answer) the audit found paid and shown wrong, each once, in order."""
    return tuple(sorted({Hole(e["db_id"], e["gold"], p["sql"], p["policy"]) for e in doc["hackable"] for p in e["paid"]}))


def _near_miss_holes(measured: nearmiss.Measured, work: Path) -> tuple[Hole, ...]:
    """Every missed near miss as a hole, with its witness database copied under ``work`` (the
    oracle's own folder goes once the review is done)."""
    out: dict[tuple[str, str, str], Hole] = {}
    kept: dict[Path, Path] = {}
    for item in measured.missed():
        key = (item.row.db_id, item.row.gold, item.sql)
        if key in out or item.found is None or item.found.path is None:
            continue
        source = item.found.path
        if source not in kept:
            kept[source] = work / "witnesses" / f"{item.row.db_id}-{len(kept) + 1:05d}.sqlite"
            kept[source].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, kept[source])
        out[key] = Hole(*key, f"near miss: {item.family}", str(kept[source]), item.found.witness)
    return tuple(sorted(out.values()))


def fair_answers(doc: dict) -> dict[tuple[str, str], tuple[str, ...]]:
    """(db_id, gold) -> the corpus's equivalent rewrites of it, for the golds of the audit's holes and
    of the near misses missed: the separation must keep paying them."""
    near = doc.get("near_misses") or {}
    wanted = {(e["db_id"], normalize_gold(e["gold"])): e["gold"] for e in [*doc["hackable"], *near.get("missed", [])]}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for item in rewrites.load():
        gold = wanted.get((item["db_id"], normalize_gold(item["gold"])))
        if gold is not None:
            out[(item["db_id"], gold)] = out.get((item["db_id"], gold), ()) + (item["rewrite"],)
    return out
