"""`bench`: the scorer's figures on real Spider dev pairs, each against a baseline measured in the same run.

One family of figures a module of this package (docs/benchmark.md), measured one family after the
other; each family's figures are printed as soon as it is measured, and a line says which family
starts and how long the last one took, so a run shows where it is. ``--only NAME`` runs one family.

1. ``calls``: reward calls a second, and a call's time against bare sqlite3 on the same query;
2. ``grader``: the grader with and without its search beside the official evaluator, pairs a second;
   ``published``: the grader beside the evaluator on published systems' dev predictions (``--published``);
   ``leaderboard``: the bundle's official-rule column beside the evaluator on them, pair for pair;
3. ``groups``: GRPO-shaped batches, a group's duplicate completions scored once, and without;
4. ``hardening``: a runaway query, the comparison's worst case, the hostile suite's memory;
5. ``budget``: the step budget's calibration on every real gold, counting overhead;
6. ``cost``: the cost model, CPU per budget unit of hostile and generated queries;
7. ``neighbours``: what the neighbour databases cost and separate, throughput with them, the search;
8. ``labels``: precision and recall of the neighbours on published predictions judged by hand;
   ``difference``: what the search aimed at the difference costs a reward call, beside bare sqlite3;
9. ``prepare`` (only with ``--only prepare``: it takes many minutes): `make bundle`'s prepare, cold and warm.
"""

from __future__ import annotations

import dataclasses
import functools
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.bench import (
    budget,
    calls,
    cost,
    difference,
    grader,
    groups,
    hardening,
    labels,
    leaderboard,
    neighbours,
    prepare_time,
    published,
)
from harness.bench.evaluator import Evaluator
from harness.common.errors import InputError


class Context:
    """What the families share, each made on first use: the staged dev bundle, its copy with
    neighbours, the budget's calibration. A family that does not need one does not pay for it."""

    def __init__(self, spider: Path, work: Path, *, pairs: int = 400, repeat: int = 5, quick: bool = False,
                 show: int = 30, grader_pairs: int = 150, evaluator: Evaluator | None = None,
                 published: Sequence[Path] = (),
                 say: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
        self.spider, self.work, self.pairs, self.repeat, self.quick, self.show = spider, work, pairs, repeat, quick, show
        self.grader_pairs, self.evaluator, self.published, self.say = grader_pairs, evaluator, tuple(published), say

    @functools.cached_property
    def rows(self) -> list[dict]:
        self.root.mkdir(parents=True)
        self.say(f"  staging a bundle over {self.pairs} dev pairs")
        return neighbours.stage_dev_bundle(self.spider, self.root, self.pairs)

    @property
    def root(self) -> Path:
        return self.work / "bench_bundle"

    @functools.cached_property
    def staged(self) -> Path:
        """The staged bundle with neighbours for every database of its rows (search sources included)."""
        self.rows  # noqa: B018  # staged first
        self.say("  building neighbour databases for the staged bundle")
        return neighbours.with_neighbours(self.root, self.work / "staged", self.work / "staged-work")

    @property
    def db(self) -> Path:
        return self.root / "data" / "databases" / f"{self.rows[0]['db_id']}.sqlite"

    def original(self, db_id: str) -> Path:
        return self.spider / "database" / db_id / f"{db_id}.sqlite"

    @functools.cached_property
    def calibrated(self) -> tuple[dict, list]:
        self.say("  calibrating the step budget on every real gold")
        return budget.calibrate(budget.spider_golds(self.spider))


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    what: str
    measure: Callable[[Context], dict]
    show: Callable[[dict, dict], None]  # (its figures, every family's measured so far)
    default: bool = True  # run when no --only names it


def _hardening(c: Context) -> dict:
    return {"runaway": hardening.runaway(c.db), "compare_9x9": hardening.compare_9x9(5.0),
            "hostile_memory": hardening.hostile_memory(c.db, c.rows[0]["query"])}


FAMILIES: tuple[Family, ...] = (
    Family("calls", "reward calls against bare sqlite3", lambda c: calls.run(c.root, c.rows, c.repeat),
           lambda f, _: calls.print_figures(f)),
    Family("grader", "the grader with and without its search beside the official evaluator",
           lambda c: grader.run(c.staged, c.rows, c.original, limit=c.grader_pairs, evaluator=c.evaluator, say=c.say),
           lambda f, _: grader.print_figures(f)),
    Family("published", "the grader beside the official evaluator on published systems' dev predictions",
           lambda c: published.run(c.staged, c.spider, c.rows, c.published, c.evaluator, c.original, say=c.say)
           if c.published else published.run(c.root, c.spider, [], (), None, c.original),
           lambda f, _: published.print_figures(f)),
    Family("leaderboard", "the bundle's official-rule column beside the official evaluator, pair for pair",
           lambda c: leaderboard.run(c.spider, c.published, c.evaluator, c.pairs, say=c.say),
           lambda f, _: leaderboard.print_figures(f)),
    Family("groups", "GRPO-shaped batches", lambda c: groups.run(c.root, c.rows[:groups.ROWS], c.repeat),
           lambda f, _: groups.print_figures(f)),
    Family("hardening", "a runaway query, the worst comparison, the hostile suite's memory", _hardening,
           lambda f, _: hardening.print_figures(f["runaway"], f["compare_9x9"], f["hostile_memory"])),
    Family("budget", "the step budget on every real gold",
           lambda c: budget.run(c.calibrated, [(r["query"], c.root / "data" / "databases" / f"{r['db_id']}.sqlite")
                                               for r in c.rows], c.repeat),
           lambda f, _: budget.print_figures(f)),
    Family("cost", "the cost model", lambda c: cost.run(c.calibrated[1], c.db, c.rows[0]["query"], max(1, c.repeat // 2),
                                                      spider=c.spider),
           lambda f, _: cost.print_figures(f)),
    Family("neighbours", "the neighbour databases and the search",
           lambda c: neighbours.run(c.spider, c.root, c.rows, c.repeat, quick=c.quick, show=c.show, say=c.say),
           lambda f, _: neighbours.print_figures(f)),
    Family("labels", "the neighbours on the labelled set", lambda c: labels.run(c.spider, c.work),
           lambda f, measured: labels.print_figures(f, measured.get("neighbours"))),
    Family("difference", "the search aimed at the difference: a reward call's cost", lambda c: difference.run(c.spider, c.work),
           lambda f, _: difference.print_figures(f)),
    Family("prepare", "make bundle's prepare, cold and warm, at the first-try sizes and the default splits",
           lambda c: prepare_time.run(c.spider, c.work, say=c.say), lambda f, _: prepare_time.print_figures(f),
           default=False),
)


def check_spider(spider: str | Path | None) -> Path:
    """The Spider folder, or InputError saying what to give."""
    if not spider:
        raise InputError("give --spider DIR (or SPIDER_DATA=DIR): a Spider folder with dev.json and database/")
    if not (Path(spider) / "dev.json").is_file():
        raise InputError(f"no Spider data at {spider}: pass --spider FOLDER (with dev.json and database/)")
    return Path(spider)


def chosen(only: Sequence[str] | None, families: Sequence[Family] = FAMILIES) -> list[Family]:
    """The families ``--only`` names (every default one without it); InputError on an unknown name."""
    if not only:
        return [f for f in families if f.default]
    names = {f.name: f for f in families}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise InputError(f"--only {', '.join(unknown)}: no such family of figures; the families are "
                         f"{', '.join(names)}")
    return [f for f in families if f.name in only]


def say(line: str) -> None:
    print(line, flush=True)  # at once, also into a pipe (make bench | tee)


def run(context: Context, families: Sequence[Family]) -> dict:
    """Measure each family in turn and print its figures as soon as they are measured."""
    measured: dict = {}
    began = time.monotonic()
    for number, family in enumerate(families, start=1):
        say(f"[{number}/{len(families)}] {family.name}: {family.what} ...")
        started = time.monotonic()
        measured[family.name] = family.measure(context)
        family.show(measured[family.name], measured)
        say(f"  ({family.name}: {time.monotonic() - started:.0f} s; {time.monotonic() - began:.0f} s so far)")
    return measured


def run_all(spider: Path, only: Sequence[str] | None = None, **options: object) -> dict:
    """``run`` of the chosen families in a scratch folder removed afterwards; skipped ones said."""
    families = chosen(only)
    if not only:
        say("not run by default: prepare (many minutes; python3 -m harness bench --only prepare)")
    if options.get("evaluator") is None and any(f.name == "grader" for f in families):
        say("the official evaluator is not measured: give --evaluator DIR, a checkout of taoyds/test-suite-sql-eval "
            "(outside this repository)")
    work = Path(tempfile.mkdtemp(prefix="spider-bench-"))
    try:
        return run(Context(spider, work, **options), families)  # type: ignore[arg-type]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        say(f"this process        max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
            f"{threading.active_count()} threads")
