"""`prepare`: Spider questions and databases to three chat-JSONL splits and the bundle's staged data.

Reads the questions from any RowSource: Spider's own files (harness.prepare.spider_files), the
datasets-server ``/rows`` API (cached, rate limited; harness.prepare.fetch_rows) or, with
``--sample``, the embedded sample under fixtures/ (harness.commands.prepare picks one); reads the
schemas from the SQLite files; writes, under ``--out``:

* ``data/train.jsonl``, ``data/rl.jsonl``, ``data/eval.jsonl`` (harness/splits.py says which rows);
* ``bundle/``: bundle/**/*.py and ``bundle/data/`` (the databases the splits use, index.json with the
  gold results precomputed, and the neighbour databases of the databases of ``--neighbours``
  splits, harness.prepare.neighbours), ready to pack; built whole in a folder beside it and then
  put in place, so an interrupted prepare never leaves it half-built (harness.prepare.staging);
* ``prepare-summary.json``: what the printed summary says, machine-readable.

The same inputs give byte-identical JSONL, index and databases. Standard library only (plus
bundle, harness.prepare.bundle_data, harness.common.errors), so it also runs in a bare ``python3 -I -S -m harness prepare``.

Example, offline: ``python3 -m harness prepare --sample --out out``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import bundle as bundle_package
from bundle.contract import shapes as reward_shapes
from bundle.scoring import episode as scoring_episode
from harness.common import prompts
from harness.common.errors import InputError, OutputError
from harness.common.files import atomic_write_bytes, is_full
from harness.common.memo import Memo
from harness.prepare import bundle_data, pack, splits, staging
from harness.prepare import disputed as disputed_golds
from harness.prepare import summary as prepare_summary
from harness.prepare.api_cache import PageCache
from harness.prepare.fetch_rows import CONFIG, DATASET, DEFAULT_API_URL, FetchPolicy, FilePages, RowFetcher, RowSource
from harness.prepare.neighbours import attach, distil, separate

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DATABASES = ROOT / "fixtures" / "databases"
SAMPLE_ROWS = ROOT / "fixtures" / "sample"
API_SPLITS = {"train": "train", "eval": "validation"}  # our source -> the API's split name
DEFAULT_SIZES = splits.Sizes(train=2000, rl=600, eval=300)
# The sample has 48 train questions on 4 databases and 22 validation ones on 2: these sizes use
# all of it with no split short (5 rows are left out: 3 share a gold across databases, 2 golds
# return no rows and would fall in rl).
SAMPLE_SIZES = splits.Sizes(train=28, rl=17, eval=20)
DEFAULT_MAX_SCHEMA = 1000
DEFAULT_CACHE = Path(".cache") / "datasets-server"
DEFAULT_BUILD_CACHE = Path(".cache") / "prepare"
REVIEW_FOLDER = "review"  # in the build cache: the review's per-database parts (harness.common.memo)


def build_sample_databases(dest: Path) -> dict[str, Path]:
    """The sample's databases (kept as SQL text) built into ``dest/<db_id>/<db_id>.sqlite``."""
    sources = sorted(SAMPLE_DATABASES.glob("*.sql"))
    if not sources:
        raise InputError(f"no sample databases in {SAMPLE_DATABASES}: the checkout is incomplete")
    return {sql.stem: bundle_data.build_sqlite(sql, dest / sql.stem / f"{sql.stem}.sqlite")
            for sql in sources}


def sample_source() -> FilePages:
    """The embedded sample's rows, in the API's page shape (no network)."""
    return FilePages({api: SAMPLE_ROWS / f"rows-{api}.json" for api in API_SPLITS.values()})


def api_source(api_url: str, cache_dir: Path, request_interval: float) -> RowFetcher:
    """The datasets-server's rows, cached in ``cache_dir`` and rate limited."""
    policy = FetchPolicy(interval_s=request_interval)
    return RowFetcher(api_url, PageCache(cache_dir, DATASET, CONFIG), policy=policy)


@dataclasses.dataclass(frozen=True)
class NeighbourPlan:
    """Which splits' databases get neighbour databases, and how they are distilled."""

    splits: tuple[str, ...] = ("eval", "rl")
    settings: distil.Settings = distil.Settings()
    separation: separate.Settings | None = separate.Settings()  # close the review's holes (None: leave them)
    workers: int = 1  # processes building the neighbours (one database each)
    cache: Path | None = None  # where each database's neighbours are kept for the next build (build_cache)

    def memo(self) -> Memo:
        """Where the review's and the separation's per-database parts are kept (harness.common.memo):
        ``review`` in the build cache; nothing without one."""
        return Memo(self.cache / REVIEW_FOLDER if self.cache is not None else None)


# A review of the staged bundle (harness.audit.entry.review): called with the staged folder, what it is
# for ("build": its holes are to be closed; "measure": its figures are reported) and a work folder
# that lives until the separation is done (the near misses' witness databases).
Reviewer = Callable[[Path, str, Path], "Review"]


@dataclasses.dataclass(frozen=True)
class Review:
    """What a review of the staged bundle found (harness.audit.entry.review): a section for the
    summary, and the positions of the rl rows to leave out (``--drop-hackable``)."""

    section: dict
    drop_rl: frozenset[int] = frozenset()
    holes: tuple[separate.Hole, ...] = ()  # the degenerate answers paid and shown wrong
    rewrites: dict[tuple[str, str], tuple[str, ...]] = dataclasses.field(default_factory=dict)  # (db_id, gold) -> fair answers


def prepare(source: RowSource, rules: splits.Rules, sizes: splits.Sizes, out: Path, *,
            origin: str = DEFAULT_API_URL, neighbours: NeighbourPlan = NeighbourPlan(),
            say: Callable[[str], None] = lambda line: None, review: Reviewer | None = None,
            reward_shape: reward_shapes.Shape | None = None, multi_turn: str | None = None) -> dict:
    """Select the splits, write them and the staged bundle under ``out``; return the summary.

    ``review``: called on the staged bundle before the splits are written; where the separation
    runs, first for its holes ("build"), then again for the figures reported ("measure"); the rl
    rows the last names are left out (the bundle staged again without them, the neighbour
    databases kept as built).
    ``reward_shape``: what the bundle's reward pays per outcome (bundle.contract.shapes; default binary).
    ``multi_turn``: the rl split's prompts in the multi-turn form, ``tools`` or ``tags`` (MULTI_TURN).
    """
    selection = splits.select(source.rows(API_SPLITS["train"]), source.rows(API_SPLITS["eval"]),
                              sizes, rules)
    prepare_summary.check_not_empty(selection, sizes)
    say(f"rows selected: {', '.join(f'{name} {len(selection.split(name))}' for name in splits.SPLITS)}")
    try:
        with staging.building(out / "bundle") as stage, tempfile.TemporaryDirectory(prefix="spider-review-") as tmp:
            index = stage_bundle(stage, selection, rules.catalog, rules.disputed, reward_shape)
            say(f"bundle staged: {len(index['databases'])} databases, every gold's result stored")
            built = stage_neighbours(stage, index, selection, neighbours, say)
            separating = bool(neighbours.separation and built)
            reviewed = review(stage, "build" if separating else "measure", Path(tmp)) if review is not None else None
            if review is not None and reviewed is not None and separating and (reviewed.holes or measured(reviewed)):
                built, reviewed = close_holes(stage, index, built, reviewed, neighbours,
                                              lambda staged: review(staged, "measure", Path(tmp)), say)
            if reviewed is not None and reviewed.drop_rl:
                selection = dataclasses.replace(selection, rl=[r for i, r in enumerate(selection.rl)
                                                               if i not in reviewed.drop_rl])
                index, built = restage(stage, selection, rules, built, neighbours, reward_shape)
        rows = {name: [_chat(rules.catalog, row, multi_turn if name == "rl" else None) for row in selection.split(name)]
                for name in splits.SPLITS}
        for name in splits.SPLITS:
            atomic_write_bytes(out / "data" / f"{name}.jsonl", prompts.jsonl_bytes(rows[name]))
        summary = prepare_summary.build(selection, sizes, rules, rows, index,
                                        fetch=source.stats.as_dict(), origin=origin,
                                        neighbours=prepare_summary.neighbours(built, index, neighbours.splits),
                                        audit=reviewed.section if reviewed is not None else None)
        if multi_turn is not None:
            summary["multi_turn"] = {"splits": ["rl"], "form": multi_turn}
        atomic_write_bytes(out / "prepare-summary.json", prepare_summary.dumps(summary))
    except OSError as exc:  # every input was read above: this is the output folder
        if is_full(exc):
            raise OutputError(f"cannot write the outputs under {out}: the disk is full ({exc}); free space on it, or "
                              "give --output on another disk (nothing half-written was kept)") from None
        raise OutputError(f"cannot write the outputs under {out} ({exc}): give --output a writable folder") from None
    return summary


def stage_neighbours(dest: Path, index: dict, selection: splits.Selection, plan: NeighbourPlan,
                     say: Callable[[str], None]) -> dict[str, distil.Distilled]:
    """Distil the neighbours of the databases of ``plan.splits`` (with those splits' golds) into the
    staged bundle, and rewrite its index with them. No split: none, and none left from before."""
    golds: dict[str, list[str]] = {}
    for name in plan.splits:
        for row in selection.split(name):
            golds.setdefault(row.db_id, []).append(row.gold)
    data = dest / "data"
    paths = {db_id: data / index["databases"][db_id]["file"] for db_id in golds}
    with tempfile.TemporaryDirectory(prefix="spider-neighbours-") as work:
        built = attach.build(golds, paths, Path(work), plan.settings, say=say, workers=plan.workers, cache=plan.cache)
        attach_neighbours(dest, index, built, plan)
    # The work folder is gone: the kept files are the staged copies now (a review may attach them again).
    return _staged_files(built, data)


def close_holes(stage: Path, index: dict, built: dict[str, distil.Distilled], reviewed: Review, plan: NeighbourPlan,
                review: Callable[[Path], Review], say: Callable[[str], None]) -> tuple[dict[str, distil.Distilled], Review]:
    """Add the neighbours that close the review's holes (harness.prepare.neighbours.separate) to the
    staged bundle, and review it again (``review``: for the figures reported); its section says what
    the separation did, and what the first review found (``before``)."""
    data = stage / "data"
    originals = {db_id: data / index["databases"][db_id]["file"] for db_id in built}
    with tempfile.TemporaryDirectory(prefix="spider-separate-") as work:
        closed, outcomes = separate.close(built, originals, list(reviewed.holes), reviewed.rewrites, Path(work),
                                          plan.separation or separate.Settings(), plan.memo(), plan.workers)
        attach_neighbours(stage, index, closed, plan)
    closed = _staged_files(closed, data)
    added = {db_id: len(found.files) - len(built[db_id].files) for db_id, found in sorted(closed.items())
             if len(found.files) > len(built[db_id].files)}
    say(f"separation: {sum(o.neighbour is not None for o in outcomes)} of {len(outcomes)} holes closed, "
        f"{sum(added.values())} neighbours added to {len(added)} databases")
    # The build's review drew its near misses' databases with the build's seeds: the figures reported are
    # measured again with the measurement's (and where none was measured and nothing added, it stands).
    again = review(stage) if added or measured(reviewed) else reviewed
    section = {**again.section, "separation": {
        "holes": len(outcomes), "closed": sum(o.neighbour is not None for o in outcomes), "added": added,
        "before": {split: {k: part[k] for k in ("rows", "hackable", "hackable_first_seven")}
                   for split, part in sorted(reviewed.section.get("splits", {}).items())},
        "near_misses_before": _near_misses_before(reviewed.section),
        "outcomes": [{"db_id": o.hole.db_id, "gold": o.hole.gold, "policy": o.hole.policy, "sql": o.hole.sql,
                      "neighbour": o.neighbour, "how": o.how} for o in outcomes]}}
    return closed, dataclasses.replace(again, section=section)


def measured(reviewed: Review) -> bool:
    """Whether the review measured the near misses (with the build's seeds, where it is the first)."""
    return "splits" in (reviewed.section.get("near_misses") or {})


def _near_misses_before(section: dict) -> dict:
    """What the build's review found of the near misses, per split (the oracle's build seeds)."""
    near = section.get("near_misses") or {}
    return {split: {key: part["groups"]["all"][key] for key in ("killed", "missed", "blocked", "equivalent", "kill_rate")}
            | {"rows_with_missed": part["rows_with_missed"]} for split, part in sorted(near.get("splits", {}).items())}


def _staged_files(built: dict[str, distil.Distilled], data: Path) -> dict[str, distil.Distilled]:
    """``built`` with its files named as staged (the work folder they were built in goes)."""
    return {db_id: dataclasses.replace(found, files=[data / attach.FOLDER / f"{db_id}-{k + 1}.sqlite"
                                                     for k in range(len(found.files))])
            for db_id, found in built.items()}


def restage(stage: Path, selection: splits.Selection, rules: splits.Rules, built: dict[str, distil.Distilled],
            plan: NeighbourPlan, reward_shape: reward_shapes.Shape | None = None) -> tuple[dict, dict[str, distil.Distilled]]:
    """Stage ``selection`` again in a fresh folder, with the neighbours already built for the databases
    it still uses, and put it in ``stage``'s place (what a review that left rows out asks for)."""
    fresh = stage.with_name(stage.name + "-again")
    fresh.mkdir()
    index = stage_bundle(fresh, selection, rules.catalog, rules.disputed, reward_shape)
    kept = {db_id: found for db_id, found in built.items() if db_id in index["databases"]}
    attach_neighbours(fresh, index, kept, plan)  # copies the files out of ``stage`` before it goes
    shutil.rmtree(stage)
    os.rename(fresh, stage)  # the neighbours' files are back at the paths ``kept`` names
    return index, kept


def attach_neighbours(dest: Path, index: dict, built: dict[str, distil.Distilled], plan: NeighbourPlan) -> None:
    """Put ``built`` into the staged bundle ``dest`` and write its index."""
    attach.attach(dest / "data", index, built, plan.settings, plan.splits)
    atomic_write_bytes(dest / "data" / "index.json", bundle_data.dumps_canonical(index))


# The multi-turn prompts (docs/multi-turn.md): the model calls tools, or writes tags in its text.
MULTI_TURN = {"tools": scoring_episode.TOOL_INSTRUCTIONS, "tags": scoring_episode.TAG_INSTRUCTIONS}


def _chat(catalog: splits.Catalog, row: splits.SourceRow, multi_turn: str | None = None) -> dict:
    if multi_turn is None:
        return prompts.chat_row(catalog.schema(row.db_id), row.question, row.gold)
    return prompts.chat_row(catalog.schema(row.db_id), row.question, row.gold,
                            prompts.multi_turn_instructions(MULTI_TURN[multi_turn]))


def index_rows(selection: splits.Selection,
               disputed: disputed_golds.DisputedList = disputed_golds.EMPTY) -> list[bundle_data.IndexRow]:
    """Every row of the three splits, id ``<split>-<line number>``, in split and line order; a row whose
    gold ``disputed`` names carries the entry's id."""
    def mark(row: splits.SourceRow) -> str | None:
        found = disputed.match(row.db_id, row.gold)
        return None if found is None else found.id
    return [bundle_data.IndexRow(f"{name}-{i:05d}", name, row.db_id, row.gold, mark(row))
            for name in splits.SPLITS for i, row in enumerate(selection.split(name))]


def stage_bundle(dest: Path, selection: splits.Selection, catalog: splits.Catalog,
                 disputed: disputed_golds.DisputedList = disputed_golds.EMPTY,
                 reward_shape: reward_shapes.Shape | None = None) -> dict:
    """The empty folder ``dest`` as the zip will hold it: the bundle's modules, then data/ (used databases + index)."""
    pack.stage_modules(dest, Path(bundle_package.__file__).resolve().parent)
    databases = {db_id: catalog.files[db_id] for db_id in selection.used_databases()}
    rows = index_rows(selection, disputed)
    reasons = disputed.summaries(r.disputed for r in rows if r.disputed)
    try:
        return bundle_data.write_bundle_data(dest, rows, databases, precompute=True, disputed=reasons,
                                             reward_shape=reward_shape)
    except bundle_data.GoldFailed as exc:  # every selected gold ran once already: a changed file?
        raise InputError(f"{exc}; it ran during selection, so a database changed meanwhile: "
                         "run again") from None
