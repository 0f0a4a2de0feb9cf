"""The neighbour databases' figures for `bench` (docs/bundle.md, "Neighbour databases").

1. the default splits (2,000 / 600 / 300 rows, read from the Spider copy's JSON files): prepared
   without neighbours and with the default ``--neighbours eval,rl``: neighbour databases, bytes,
   build time, the zip's size both ways;
2. every dev database, with its dev golds: neighbours per database, bytes, build time; the golds'
   mechanical mutations (harness.common.mutate) that return the gold's rows on the original and the
   share the neighbours separate; the constant and empty answers the original accepts and the
   share the neighbours refuse; a seeded sample of separated mutations to read by hand;
3. every real gold of train and dev against itself, with the neighbours of its database (built
   with all of that database's golds): all must score 1.0;
4. reward throughput on the dev pairs (each gold as its own completion: every call a match, the
   most expensive case) with ``semantics=neighbours`` against ``original``, in one run (target:
   at least half); and the same with half the answers wrong (only matches pay for neighbours);
5. precision: fixtures/neighbours/rewrites.json, rewrites of real golds that answer the same
   question: how many a neighbour rejects (target under 2%).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import random
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator
from pathlib import Path

from bundle import scoring_entry
from bundle.verify import Neighbour, verify
from harness.commands.bench_budget import spider_golds
from harness.common import mutate
from harness.common.files import atomic_write_bytes
from harness.prepare import bundle_data, job, pack, splits
from harness.prepare.fetch_rows import FetchStats
from harness.prepare.neighbours import attach, distil

ROOT = Path(__file__).resolve().parents[2]
REWRITES = ROOT / "fixtures" / "neighbours" / "rewrites.json"


class SpiderFiles:
    """Spider's own JSON files as prepare's row source (train_spider.json as train, dev.json as validation)."""

    def __init__(self, spider: Path) -> None:
        self.spider = spider
        self.stats = FetchStats()

    def rows(self, split: str) -> Iterator[dict]:
        name = "train_spider.json" if split == "train" else "dev.json"
        self.stats.files_read += 1
        yield from json.loads((self.spider / name).read_text(encoding="utf-8"))


def stage_dev_bundle(spider: Path, dest: Path, limit: int | None = None,
                     databases: Collection[str] | None = None) -> list[dict]:
    """Stage a bundle (no neighbours) over the first ``limit`` dev rows whose database is present
    (only those of ``databases`` when given); return those rows."""
    rows = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    keep = [r for r in rows if (spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite").is_file()
            and (databases is None or r["db_id"] in databases)][:limit]
    for src in (ROOT / "bundle").glob("*.py"):
        shutil.copy2(src, dest / src.name)
    index_rows = [bundle_data.IndexRow(f"eval-{i:05d}", "eval", r["db_id"], r["query"]) for i, r in enumerate(keep)]
    dbs = {r["db_id"]: spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite" for r in keep}
    bundle_data.write_bundle_data(dest, index_rows, dbs)
    return keep


def default_splits(spider: Path, work: Path) -> dict:
    out = {}
    for name, plan in (("without", job.NeighbourPlan(())), ("with", job.NeighbourPlan())):
        catalog = splits.Catalog.from_folder(spider / "database", job.DEFAULT_MAX_SCHEMA)
        rules = splits.Rules(catalog, splits.GoldChecker(), False, False)
        started = time.monotonic()
        summary = job.prepare(SpiderFiles(spider), rules, job.DEFAULT_SIZES, work / name, origin=str(spider),
                              neighbours=plan)
        seconds = time.monotonic() - started
        zipped, _ = pack.pack(work / name / "bundle", work / name / "spider-scoring.zip")
        out[name] = {"seconds": seconds, "zip_bytes": zipped.archive_bytes, "unpacked_bytes": zipped.unpacked_bytes,
                     "neighbours": summary["neighbours"]["total"], "databases": len(summary["neighbours"]["databases"])}
    return out


def _golds(spider: Path, names: tuple[str, ...]) -> dict[str, list[str]]:
    """db_id -> its distinct golds in the files ``names``, in the order they first appear."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for db_id, gold, _path in spider_golds(spider, names):
        found[db_id].append(gold)
    return dict(sorted(found.items()))


def _neighbours(built: distil.Distilled, gold: str) -> list[Neighbour]:
    return [Neighbour(f"neighbour {i + 1}", str(path), result)
            for i, (path, result) in enumerate(zip(built.files, built.results[gold])) if result is not None]


def dev_build(spider: Path, work: Path, show: int) -> dict:
    tally: collections.Counter = collections.Counter()
    kept, separated_examples = [], []
    started = time.monotonic()
    for db_id, golds in _golds(spider, ("dev.json",)).items():
        original = str(spider / "database" / db_id / f"{db_id}.sqlite")
        built = distil.distil(db_id, Path(original), golds, work / db_id)
        kept.append((db_id, len(built.files), sum(f.stat().st_size for f in built.files)))
        for gold in golds:
            nbs = _neighbours(built, gold)
            tally["golds"] += 1
            tally["golds_match"] += verify(gold, gold, original, is_sql=True, neighbours=nbs).outcome == "match"
            for m in mutate.sorted_mutations(gold, original)[1]:
                tally["same_on_original"] += 1
                verdict = verify(m.sql, gold, original, is_sql=True, neighbours=nbs)
                if verdict.outcome != "match" and verdict.original_score == 1.0:
                    tally["separated"] += 1
                    separated_examples.append((db_id, m.kind, gold, m.sql, verdict.detail))
        tally["constants"] += built.constants
        tally["constants_separated"] += built.constants_separated
    sample = random.Random(0).sample(separated_examples, min(show, len(separated_examples)))
    return {"seconds": time.monotonic() - started, "kept": kept, **tally, "sample": sample}


def all_golds(spider: Path, work: Path) -> dict:
    tally: collections.Counter = collections.Counter()
    started = time.monotonic()
    failures = []
    for db_id, golds in _golds(spider, ("train_spider.json", "dev.json")).items():
        original = str(spider / "database" / db_id / f"{db_id}.sqlite")
        built = distil.distil(db_id, Path(original), golds, work / db_id)
        tally["neighbours"] += len(built.files)
        for gold in golds:
            verdict = verify(gold, gold, original, is_sql=True, neighbours=_neighbours(built, gold))
            if verdict.outcome in ("gold_error",):
                tally["broken_golds"] += 1  # Spider's own broken golds: prepare leaves them out
                continue
            tally["golds"] += 1
            tally["checked"] += verdict.neighbours_checked
            if verdict.score != 1.0:
                failures.append((db_id, gold, verdict.outcome, verdict.detail))
    return {"seconds": time.monotonic() - started, **tally, "failures": failures[:10], "failed": len(failures)}


def throughput(root: Path, rows: list[dict], repeat: int, wrong_share: float = 0.0) -> dict:
    """Calls per second with and without the neighbours, on a staged dev bundle that has them.

    Each row's gold is its completion; with ``wrong_share``, that share of the calls answer with a
    query that runs and returns other rows instead (as most rollouts of a GRPO group do).
    """
    every = round(1 / wrong_share) if wrong_share else 0
    calls = [scoring_entry.read_call({"solution_str": "SELECT 'wrong'" if every and i % every == 0 else r["query"],
                                      "ground_truth": r["query"], "extra_info": {"db_id": r["db_id"]}})
             for i, r in enumerate(rows)]
    limits = scoring_entry.current_limits()
    rates, checked = {}, 0
    for semantics in ("original", "neighbours"):
        lim = limits.replace(semantics=semantics)
        for call in calls:
            checked += scoring_entry.score_call(call, lim, root=str(root)).neighbours_checked
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            for call in calls:
                scoring_entry.score_call(call, lim, root=str(root))
            best = min(best, time.perf_counter() - started)
        rates[semantics] = len(calls) / best
    return {"pairs": len(calls), **rates, "ratio": rates["neighbours"] / rates["original"],
            "mean_checked": checked / len(calls)}


def precision(spider: Path, work: Path) -> dict:
    corpus = json.loads(REWRITES.read_text(encoding="utf-8"))["rewrites"]
    by_db: dict[str, list[dict]] = collections.defaultdict(list)
    for item in corpus:
        by_db[item["db_id"]].append(item)
    others = _golds(spider, ("dev.json", "train_spider.json"))
    rejected = []
    for db_id, items in sorted(by_db.items()):
        original = spider / "database" / db_id / f"{db_id}.sqlite"
        golds = sorted({i["gold"] for i in items})
        golds += [g for g in others.get(db_id, []) if g not in golds][:40]  # the database's other golds, as in a build
        built = distil.distil(db_id, original, golds, work / db_id)
        for item in items:
            verdict = verify(item["rewrite"], item["gold"], str(original), is_sql=True,
                             neighbours=_neighbours(built, item["gold"]))
            if verdict.outcome != "match":
                rejected.append((item["kind"], db_id, item["gold"], item["rewrite"], verdict.detail))
    return {"rewrites": len(corpus), "rejected": len(rejected), "examples": rejected,
            "kinds": dict(collections.Counter(i["kind"] for i in corpus))}


def with_neighbours(root: Path, dest: Path, work: Path) -> Path:
    """A copy of the staged bundle ``root`` with neighbours for every database its rows use."""
    shutil.copytree(root, dest)
    index = json.loads((dest / "data" / "index.json").read_text(encoding="utf-8"))
    golds: dict[str, list[str]] = {}
    for row in index["rows"]:
        golds.setdefault(row["db_id"], []).append(row["gold"])
    built = attach.build(golds, {d: dest / "data" / index["databases"][d]["file"] for d in golds}, work)
    attach.attach(dest / "data", index, built, distil.Settings(), ["eval"])
    atomic_write_bytes(dest / "data" / "index.json", bundle_data.dumps_canonical(index))
    return dest


def run(spider: Path, root: Path, rows: list[dict], repeat: int, *, quick: bool, show: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="spider-bench-neighbours-") as tmp:
        work = Path(tmp)
        staged = with_neighbours(root, work / "staged", work / "staged-work")
        with contextlib.redirect_stdout(io.StringIO()):
            figures = {"default_splits": default_splits(spider, work / "splits"),
                       "dev": dev_build(spider, work / "dev", show),
                       "throughput": throughput(staged, rows, repeat),
                       "throughput_half_wrong": throughput(staged, rows, repeat, wrong_share=0.5)}
        if not quick:
            figures["all_golds"] = all_golds(spider, work / "all")
            figures["precision"] = precision(spider, work / "precision")
    return figures


def print_figures(f: dict) -> None:
    s, d, t = f["default_splits"], f["dev"], f["throughput"]
    w, n = s["without"], s["with"]
    print(f"neighbours, default splits: {n['neighbours']['kept']} neighbour databases for {n['databases']} databases "
          f"of eval+rl, {n['neighbours']['bytes']:,} bytes; prepare {n['seconds']:.0f} s with them, "
          f"{w['seconds']:.0f} s without; zip {n['zip_bytes']:,} bytes with, {w['zip_bytes']:,} without")
    print(f"  dev databases ({len(d['kept'])}): {sum(k for _d, k, _b in d['kept'])} neighbours, "
          f"{sum(b for _d, _k, b in d['kept']):,} bytes, built in {d['seconds']:.0f} s; per database "
          + ", ".join(f"{db} {k}" for db, k, _b in d["kept"]))
    print(f"  mutated golds the original cannot tell from their gold: {d['same_on_original']}; separated by the "
          f"neighbours {d['separated']} ({d['separated'] / max(d['same_on_original'], 1):.0%})")
    print(f"  constant and empty answers the original accepts: {d['constants']}; refused by the neighbours "
          f"{d['constants_separated']} ({d['constants_separated'] / max(d['constants'], 1):.0%}); dev golds matching "
          f"themselves {d['golds_match']}/{d['golds']}")
    print(f"  reward throughput, {t['pairs']} dev pairs (every call a match, {t['mean_checked']:.2f} neighbours "
          f"checked each): {t['neighbours']:.0f} calls/s with neighbours, {t['original']:.0f} without: "
          f"ratio {t['ratio']:.2f} (target >= 0.5)")
    h = f["throughput_half_wrong"]
    print(f"  with half the answers wrong (as in a GRPO group): {h['neighbours']:.0f} calls/s with neighbours, "
          f"{h['original']:.0f} without: ratio {h['ratio']:.2f}")
    if "all_golds" in f:
        a = f["all_golds"]
        print(f"  every real gold of train and dev against itself: {a['golds'] - a['failed']}/{a['golds']} score 1.0 "
              f"on their {a['neighbours']} neighbour databases ({a['checked']} neighbour runs, {a['seconds']:.0f} s)")
    if "precision" in f:
        p = f["precision"]
        print(f"  precision: {p['rejected']} of {p['rewrites']} equivalent rewrites rejected by a neighbour "
              f"({p['rejected'] / p['rewrites']:.1%}; target < 2%)")
        for kind, db_id, _gold, rewrite, detail in p["examples"]:
            print(f"    rejected [{kind}] {db_id}: {rewrite}  ({detail[:80]})")
    for db_id, kind, gold, sql, detail in d["sample"]:
        print(f"  separated [{kind}] {db_id}: {' '.join(gold.split())}\n      -> {sql}  ({detail[:80]})")
