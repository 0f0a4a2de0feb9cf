"""The neighbour databases' figures for `bench` (docs/neighbours.md, "Cost and figures").

1. the default splits (2,000 / 600 / 300 rows, read from the Spider copy's JSON files): prepared
   without neighbours and with the default ``--neighbours eval,rl``: neighbour databases, bytes,
   build time, the zip's size both ways;
2. every dev database, with its dev golds: per database the invariants its neighbours keep, the
   neighbours kept, candidates built, bytes, build time; the look-alike queries and the golds'
   mechanical mutations (harness.common.mutate) that return the gold's rows on the original, and
   the share the neighbours separate, and the search after them; the constant and empty answers
   the original accepts and the share the neighbours refuse; a seeded sample of separated
   mutations to read by hand;
3. reward throughput on the dev pairs (each gold as its own completion: every call a match, the
   most expensive case) with ``semantics=neighbours`` against ``original``, in one run (target: at
   least half); and the same with half the answers wrong (only matches pay for neighbours);
4. the search's figures (``harness.bench.search``): its cost for the grader and the reward, every real gold
   of train and dev against itself under it, the equivalent rewrites it and the neighbours reject.
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
from collections.abc import Callable, Collection
from pathlib import Path

from bundle.scoring import entry as scoring_entry
from bundle.verify import verify
from harness.bench import search as bench_search
from harness.bench.search import golds_by_db, neighbours_of, searcher
from harness.common import mutate
from harness.common.files import atomic_write_bytes
from harness.prepare import bundle_data, job, pack, splits
from harness.prepare import disputed as disputed_golds
from harness.prepare.neighbours import attach, distil
from harness.prepare.spider_files import SpiderFiles

ROOT = Path(__file__).resolve().parents[2]


def stage_dev_bundle(spider: Path, dest: Path, limit: int | None = None,
                     databases: Collection[str] | None = None) -> list[dict]:
    """Stage a bundle (no neighbours) over the first ``limit`` dev rows whose database is present
    (only those of ``databases`` when given), the rows of disputed golds marked as prepare marks
    them (harness.prepare.disputed); return those rows."""
    rows = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    keep = [r for r in rows if (spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite").is_file()
            and (databases is None or r["db_id"] in databases)][:limit]
    pack.stage_modules(dest, ROOT / "bundle")
    listed = disputed_golds.load()
    marks = [listed.match(r["db_id"], r["query"]) for r in keep]
    index_rows = [bundle_data.IndexRow(f"eval-{i:05d}", "eval", r["db_id"], r["query"], m.id if m else None)
                  for i, (r, m) in enumerate(zip(keep, marks))]
    dbs = {r["db_id"]: spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite" for r in keep}
    bundle_data.write_bundle_data(dest, index_rows, dbs, disputed=listed.summaries(m.id for m in marks if m))
    return keep


def default_splits(spider: Path, work: Path) -> dict:
    out = {}
    for name, plan in (("without", job.NeighbourPlan(())), ("with", job.NeighbourPlan())):
        catalog = splits.Catalog.from_folder(spider / "database", job.DEFAULT_MAX_SCHEMA)
        rules = splits.Rules(catalog, splits.GoldChecker(), False, False, disputed_golds.load())
        started = time.monotonic()
        summary = job.prepare(SpiderFiles(spider), rules, job.DEFAULT_SIZES, work / name, origin=str(spider),
                              neighbours=plan)
        seconds = time.monotonic() - started
        zipped, _ = pack.pack(work / name / "bundle", work / name / "spider-scoring.zip")
        out[name] = {"seconds": seconds, "zip_bytes": zipped.archive_bytes, "unpacked_bytes": zipped.unpacked_bytes,
                     "neighbours": summary["neighbours"]["total"], "databases": len(summary["neighbours"]["databases"])}
    return out


def dev_build(spider: Path, work: Path, show: int) -> dict:
    tally: collections.Counter = collections.Counter()
    kept, invariants, separated_examples = [], {}, []
    started = time.monotonic()
    for db_id, golds in golds_by_db(spider, ("dev.json",)).items():
        original = spider / "database" / db_id / f"{db_id}.sqlite"
        built = distil.distil(db_id, original, golds, work / db_id)
        kept.append((db_id, len(built.files), sum(f.stat().st_size for f in built.files), built.candidates_built))
        invariants[db_id] = built.profile.counts()
        for gold in golds:
            nbs = neighbours_of(built, gold)
            tally["golds"] += 1
            tally["golds_match"] += verify(gold, gold, str(original), is_sql=True, neighbours=nbs).outcome == "match"
            for m in mutate.sorted_mutations(gold, original)[1]:
                tally["same_on_original"] += 1
                verdict = verify(m.sql, gold, str(original), is_sql=True, neighbours=nbs,
                                 search=searcher(built, original, gold))
                if verdict.outcome != "match" and verdict.original_score == 1.0:
                    tally["searched" if verdict.decided_on.startswith("search") else "separated"] += 1
                    separated_examples.append((db_id, m.kind, gold, m.sql, verdict.detail))
        for key, value in (("constants", built.constants), ("constants_separated", built.constants_separated),
                           ("look_alikes", built.targets), ("look_alikes_separated", built.separated)):
            tally[key] += value
    sample = random.Random(0).sample(separated_examples, min(show, len(separated_examples)))
    return {"seconds": time.monotonic() - started, "kept": kept, "invariants": invariants, **tally, "sample": sample}


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


def run(spider: Path, root: Path, rows: list[dict], repeat: int, *, quick: bool, show: int,
        say: Callable[[str], None] = lambda line: None) -> dict:
    """Every figure of the family; ``say`` hears which step starts (the steps print nothing themselves)."""
    with tempfile.TemporaryDirectory(prefix="spider-bench-neighbours-") as tmp:
        work = Path(tmp)
        staged = with_neighbours(root, work / "staged", work / "staged-work")
        steps: list[tuple[str, Callable[[], dict]]] = [
            ("default_splits", lambda: default_splits(spider, work / "splits")),
            ("dev", lambda: dev_build(spider, work / "dev", show)),
            ("throughput", lambda: throughput(staged, rows, repeat)),
            ("throughput_half_wrong", lambda: throughput(staged, rows, repeat, wrong_share=0.5)),
            ("search", lambda: {"throughput": bench_search.throughput(staged, rows[:60], 1)})]
        if not quick:
            steps += [("all_golds", lambda: bench_search.all_golds(spider, work / "all")),
                      ("rewrites", lambda: bench_search.rewrites(spider, work / "rewrites"))]
        figures: dict = {}
        for name, step in steps:
            say(f"  neighbours: {name.replace('_', ' ')} ...")
            with contextlib.redirect_stdout(io.StringIO()):
                found = step()
            if name in ("all_golds", "rewrites"):
                figures["search"][name] = found
            else:
                figures[name] = found
    return figures


def print_figures(f: dict) -> None:
    s, d, t = f["default_splits"], f["dev"], f["throughput"]
    w, n = s["without"], s["with"]
    print(f"neighbours, default splits: {n['neighbours']['kept']} neighbour databases for {n['databases']} databases "
          f"of eval+rl, {n['neighbours']['bytes']:,} bytes; prepare {n['seconds']:.0f} s with them, "
          f"{w['seconds']:.0f} s without; zip {n['zip_bytes']:,} bytes with, {w['zip_bytes']:,} without")
    print(f"  dev databases ({len(d['kept'])}): {sum(k[1] for k in d['kept'])} neighbours, "
          f"{sum(k[2] for k in d['kept']):,} bytes, {sum(k[3] for k in d['kept'])} candidates built in "
          f"{d['seconds']:.0f} s; per database (neighbours/candidates) "
          + ", ".join(f"{db} {k}/{c}" for db, k, _b, c in d["kept"]))
    for db_id, counts in d["invariants"].items():
        print(f"    {db_id} keeps: " + ", ".join(f"{v} {what}" for what, v in counts.items() if v))
    print(f"  look-alike queries the original cannot tell from their gold: {d['look_alikes']}; separated by the "
          f"neighbours {d['look_alikes_separated']} ({d['look_alikes_separated'] / max(d['look_alikes'], 1):.0%})")
    print(f"  mutated golds the original cannot tell from their gold: {d['same_on_original']}; separated by the "
          f"neighbours {d['separated']}, by the search after them {d['searched']} "
          f"({(d['separated'] + d['searched']) / max(d['same_on_original'], 1):.0%})")
    print(f"  constant and empty answers the original accepts: {d['constants']}; refused by the neighbours "
          f"{d['constants_separated']} ({d['constants_separated'] / max(d['constants'], 1):.0%}); dev golds matching "
          f"themselves {d['golds_match']}/{d['golds']}")
    print(f"  reward throughput, {t['pairs']} dev pairs (every call a match, {t['mean_checked']:.2f} neighbours "
          f"checked each): {t['neighbours']:.0f} calls/s with neighbours, {t['original']:.0f} without: "
          f"ratio {t['ratio']:.2f} (target >= 0.5)")
    h = f["throughput_half_wrong"]
    print(f"  with half the answers wrong (as in a GRPO group): {h['neighbours']:.0f} calls/s with neighbours, "
          f"{h['original']:.0f} without: ratio {h['ratio']:.2f}")
    bench_search.print_figures(f["search"])
    for db_id, kind, gold, sql, detail in d["sample"]:
        print(f"  separated [{kind}] {db_id}: {' '.join(gold.split())}\n      -> {sql}  ({detail[:80]})")
