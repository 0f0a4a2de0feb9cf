"""The counterexample search's figures for `bench` (docs/neighbours.md, "The counterexample search").

1. every real gold of train and dev against itself, given in another text so that the search does
   not skip it, on the neighbours of its database (built with all its golds) and under the search:
   all must score 1.0; a disputed gold (harness.prepare.disputed) is judged as the bundle judges
   it, on the original only, and counted and named apart;
2. the cost: calls per second of the grader (search on) and of the reward with ``search=always``
   against the reward's default (search off), on the same dev pairs, every call a match; the
   grader cold (each gold's first search: its databases built) and warm (another prediction of
   a gold searched before: its databases found built);
3. the equivalent rewrites of fixtures/neighbours/rewrites.json under the neighbours and the
   search (target: at most 1% rejected).

The search runs here on distilled neighbours held in memory (``searcher``), exactly as the bundle
runs it (``bundle.search.counterexample``).
"""

from __future__ import annotations

import collections
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours.source import Original, read_original
from bundle.scoring import entry as scoring_entry
from bundle.search import counterexample as neighbour_search
from bundle.sql import gold_results
from bundle.verify import Disputed, Neighbour, Searched, verify
from harness.bench.budget import spider_golds
from harness.prepare import disputed as disputed_golds
from harness.prepare.neighbours import distil

ROOT = Path(__file__).resolve().parents[2]
REWRITES = ROOT / "fixtures" / "neighbours" / "rewrites.json"
OTHER_TEXT = "\n-- the gold, as a prediction"  # the same query in another text: the search does not skip it


def neighbours_of(built: distil.Distilled, gold: str) -> list[Neighbour]:
    return [Neighbour(f"neighbour {i + 1}", str(path), result)
            for i, (path, result) in enumerate(zip(built.files, built.results.get(gold, []))) if result is not None]


def searcher(built: distil.Distilled, original: Path, gold: str,
             limits: Limits = DEFAULT_LIMITS) -> Callable[[str, gold_results.GoldResult], Searched]:
    """The search of one (database, gold), on a database distilled in memory (no bundle)."""
    task = neighbour_search.Task(built.db_id, built.db_id, gold, built.profile, _source(str(original)))
    return lambda sql, known: neighbour_search.search(task, sql, known, limits)


@functools.lru_cache(maxsize=8)
def _source(original: str) -> Original:
    """The original's sample, read once per database: the search's databases of a gold are built
    once for all its answers (the store keys them by the sample's identity)."""
    conn = neighbour_invariants.open_read_only(original)
    try:
        return read_original(conn)
    finally:
        conn.close()


def golds_by_db(spider: Path, names: tuple[str, ...]) -> dict[str, list[str]]:
    """db_id -> its distinct golds in the files ``names``, in the order they first appear."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for db_id, gold, _path in spider_golds(spider, names):
        found[db_id].append(gold)
    return dict(sorted(found.items()))


def all_golds(spider: Path, work: Path) -> dict:
    """Every real gold of train and dev against itself, on its neighbours and under the search."""
    tally: collections.Counter = collections.Counter()
    started = time.monotonic()
    failures, disputed = [], []
    listed = disputed_golds.load()
    for db_id, golds in golds_by_db(spider, ("train_spider.json", "dev.json")).items():
        original = spider / "database" / db_id / f"{db_id}.sqlite"
        built = distil.distil(db_id, original, golds, work / db_id)
        tally["neighbours"] += len(built.files)
        for gold in golds:
            found = listed.match(db_id, gold)
            verdict = verify(gold + OTHER_TEXT, gold, str(original), is_sql=True,
                             neighbours=neighbours_of(built, gold), search=searcher(built, original, gold),
                             disputed=None if found is None else Disputed(found.id, found.reason))
            if found is not None:
                disputed.append((found.id, verdict.outcome))
            if verdict.outcome == "gold_error":
                tally["broken_golds"] += 1  # Spider's own broken golds: prepare leaves them out
                continue
            tally["golds"] += 1
            tally["checked"] += verdict.neighbours_checked
            tally["searched"] += verdict.searched
            if verdict.score != 1.0:
                failures.append((db_id, gold, verdict.outcome, verdict.decided_on, verdict.detail))
    return {"seconds": time.monotonic() - started, **tally, "failures": failures[:10], "failed": len(failures),
            "disputed": sorted(disputed)}


def throughput(root: Path, rows: list[dict], repeat: int) -> dict:
    """Calls per second, every call a match: the reward (search off, its default), the reward with
    ``search=always``, and the grader (search on, its default), each on nothing built; then the
    grader warm, on another text of each answer, its gold's databases built (``grader_warm``); on a
    staged bundle with neighbours."""
    def calls_of(text: str) -> list:
        return [scoring_entry.read_call({"solution_str": r["query"] + text, "ground_truth": r["query"],
                                         "extra_info": {"db_id": r["db_id"]}}) for r in rows]

    calls, others = calls_of(OTHER_TEXT), calls_of(OTHER_TEXT + " again")
    limits = scoring_entry.current_limits()
    modes = {"reward": (limits, "reward"), "reward_search": (limits.replace(search="always"), "reward"),
             "grader": (limits, "grader")}
    rates, searched = {}, {}
    for mode, (lim, caller) in modes.items():
        neighbour_search.forget()
        searched[mode] = sum(scoring_entry.score_call(c, lim, root=str(root), caller=caller).searched for c in calls)
        best = float("inf")
        for _ in range(repeat):
            neighbour_search.forget()  # every gold searched anew: its databases built again
            started = time.perf_counter()
            for call in calls:
                scoring_entry.score_call(call, lim, root=str(root), caller=caller)
            best = min(best, time.perf_counter() - started)
        rates[mode] = len(calls) / best
    best = float("inf")
    for _ in range(repeat):
        neighbour_search.forget(databases=False)  # another prediction of each gold: its databases found built
        started = time.perf_counter()
        for call in others:
            scoring_entry.score_call(call, limits, root=str(root), caller="grader")
        best = min(best, time.perf_counter() - started)
    rates["grader_warm"] = len(others) / best
    return {"pairs": len(calls), **rates, "searched": searched,
            "search_cost": rates["reward"] / rates["reward_search"], "warm_gain": rates["grader_warm"] / rates["grader"]}


def rewrites(spider: Path, work: Path) -> dict:
    """The equivalent rewrites, each with its database's neighbours (built with its golds and 40 more)."""
    corpus = json.loads(REWRITES.read_text(encoding="utf-8"))["rewrites"]
    by_db: dict[str, list[dict]] = collections.defaultdict(list)
    for item in corpus:
        by_db[item["db_id"]].append(item)
    others = golds_by_db(spider, ("dev.json", "train_spider.json"))
    rejected = []
    for db_id, items in sorted(by_db.items()):
        original = spider / "database" / db_id / f"{db_id}.sqlite"
        golds = sorted({i["gold"] for i in items})
        golds += [g for g in others.get(db_id, []) if g not in golds][:40]  # the database's other golds, as in a build
        built = distil.distil(db_id, original, golds, work / db_id)
        for item in items:
            verdict = verify(item["rewrite"], item["gold"], str(original), is_sql=True,
                             neighbours=neighbours_of(built, item["gold"]), search=searcher(built, original, item["gold"]))
            if verdict.outcome != "match":
                rejected.append((item["kind"], db_id, item["gold"], item["rewrite"], verdict.decided_on, verdict.detail))
    return {"rewrites": len(corpus), "rejected": len(rejected), "examples": rejected,
            "by_search": sum(1 for r in rejected if r[4].startswith("search"))}


def print_figures(f: dict) -> None:
    t = f["throughput"]
    print(f"  search: {t['pairs']} dev pairs, every call a match: grader {t['grader']:.1f} calls/s (search on, "
          f"{t['searched']['grader'] / t['pairs']:.1f} databases a call, each gold's built)")
    if "grader_warm" in t:
        print(f"    another answer of each gold, its databases built: {t['grader_warm']:.1f} calls/s, "
              f"x{t['warm_gain']:.1f} the first's")
    print(f"    reward {t['reward']:.0f} calls/s, {t['reward_search']:.1f} with search=always (nothing built): the "
          f"search costs the reward x{t['search_cost']:.1f}")
    if "all_golds" in f:
        a = f["all_golds"]
        print(f"  every real gold of train and dev against itself: {a['golds'] - a['failed']}/{a['golds']} score 1.0 "
              f"on their {a['neighbours']} neighbour databases and under the search ({a['checked']} neighbour runs, "
              f"{a['searched']} databases searched, {a['seconds']:.0f} s)")
        for failure in a["failures"]:
            print(f"    FAILED {failure}")
        named = a.get("disputed", [])
        if named:
            print(f"    of them {len(named)} disputed golds (docs/disputed-golds.md): "
                  + ", ".join(f"{name} {outcome}" for name, outcome in named))
    if "rewrites" in f:
        p = f["rewrites"]
        print(f"  equivalent rewrites rejected: {p['rejected']} of {p['rewrites']} ({p['rejected'] / p['rewrites']:.1%},"
              f" {p['by_search']} by the search; target at most 1%)")
        for kind, db_id, _gold, rewrite, decided, detail in p["examples"]:
            print(f"    rejected [{kind}] {db_id} on {decided}: {rewrite}  ({detail[:80]})")
