"""`bench`, the search aimed at the difference: what it costs a reward call, beside bare sqlite3.

A reward call that matches on the original and the neighbours is searched on edits of the original
(bundle/search/difference.py). What that costs, one process (one core), on the dev golds of the
equivalent rewrites (``fixtures/neighbours/rewrites.json``: right answers in other words, each
paid only if no edit tells it from its gold) and on the near misses of those golds that the
original accepts (harness.audit.nearmiss.families):

- a gold's first call: its edits are found, proved and the gold run on each (kept per process);
- a warm call: a right answer in new words (a text the process has not seen: the search runs
  again on the kept edits, only the answer's runs are new);
- a wrong answer: usually stopped at its first edits;
- bare sqlite3 running the same answer on an open connection, the baseline of the same run.

The issue's allowance (issue 37): 5 ms a call at the median when warm, 1 s on a gold's first call.
The figures are wall time of this run on this machine: a busy machine shows longer times, the
ratio to sqlite3 less so. Every rewrite must still be paid (``rejected`` right answers: 0).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from pathlib import Path

from bundle.verify import Verdict
from harness.bench import neighbours as bench_neighbours

ROOT = Path(__file__).resolve().parents[2]
REWRITES = ROOT / "fixtures" / "neighbours" / "rewrites.json"
NEW_WORDS = 3  # texts of each right answer scored warm (a comment makes each new)


def _ms(values: list[float], share: float) -> float:
    return sorted(values)[int(share * (len(values) - 1))] * 1000 if values else 0.0


def stage(spider: Path, work: Path) -> tuple[Path, list[dict]]:
    """A dev bundle with neighbours over the databases of the rewrites whose gold is a dev gold; those rewrites."""
    rewrites = json.loads(REWRITES.read_text(encoding="utf-8"))["rewrites"]
    plain = work / "difference-plain"
    plain.mkdir(parents=True)
    rows = bench_neighbours.stage_dev_bundle(spider, plain, databases={r["db_id"] for r in rewrites})
    golds = {(r["db_id"], " ".join(r["query"].split()).lower()) for r in rows}
    kept = [r for r in rewrites if (r["db_id"], " ".join(r["gold"].split()).lower()) in golds]
    return bench_neighbours.with_neighbours(plain, work / "difference-staged", work / "difference-work"), kept


def run(spider: Path, work: Path) -> dict:
    """The figures (module docstring), the reward's own search on (``SPIDER_SCORING_SEARCH=off``: the
    counterexample search is the grader's)."""
    staged, pairs = stage(spider, work)
    os.environ.setdefault("SPIDER_SCORING_SEARCH", "off")
    from bundle.scoring import entry as scoring_entry
    from bundle.search import difference as difference_search
    from harness.audit.nearmiss import families

    def score(sql: str, gold: str, db_id: str) -> tuple[float, Verdict]:
        started = time.perf_counter()
        verdict = scoring_entry.score_call(scoring_entry.RowCall(sql, gold, db_id), root=str(staged), caller="reward")
        return time.perf_counter() - started, verdict

    difference_search.forget()
    first: list[float] = []
    warm: list[float] = []
    wrong: list[float] = []
    bare: list[float] = []
    searched: list[int] = []
    rejected: list[tuple[str, str, str]] = []
    wrong_rejected, seen = 0, set()
    for pair in pairs:
        key = (pair["db_id"], pair["gold"])
        score(pair["gold"], pair["gold"], pair["db_id"])  # the gold's result and neighbours loaded (no search)
        took, verdict = score(pair["rewrite"], pair["gold"], pair["db_id"])
        (warm if key in seen else first).append(took)
        if verdict.score != 1.0:
            rejected.append((pair["db_id"], pair["rewrite"], verdict.decided_on))
        if key not in seen:
            seen.add(key)
            database = staged / "data" / "databases" / f"{pair['db_id']}.sqlite"
            conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
            try:
                started = time.perf_counter()
                conn.execute(pair["rewrite"]).fetchall()
                bare.append(time.perf_counter() - started)
            finally:
                conn.close()
            for near in families.near_misses(pair["gold"], database)[:8]:
                took, verdict = score(near.sql, pair["gold"], pair["db_id"])
                if verdict.original_score == 1.0:
                    wrong.append(took)
                    wrong_rejected += verdict.score != 1.0
        for k in range(NEW_WORDS):
            took, verdict = score(f"{pair['rewrite']}\n-- in other words {k}", pair["gold"], pair["db_id"])
            warm.append(took)
            searched.append(verdict.searched)
    return {"golds": len(first), "rewrites": len(pairs), "first_ms": [_ms(first, q) for q in (0.5, 0.9, 1.0)],
            "warm_ms": [_ms(warm, q) for q in (0.5, 0.9, 1.0)], "warm_calls": len(warm),
            "wrong_ms": [_ms(wrong, q) for q in (0.5, 0.9, 1.0)], "wrong_calls": len(wrong),
            "wrong_rejected": wrong_rejected, "bare_ms": _ms(bare, 0.5),
            "edits_median": statistics.median(searched) if searched else 0, "rejected": rejected}


def print_figures(f: dict) -> None:
    first, warm, wrong = f["first_ms"], f["warm_ms"], f["wrong_ms"]
    print(f"  search aimed at the difference, one process: {f['rewrites']} right answers in other words of "
          f"{f['golds']} dev golds, {f['warm_calls']} warm calls, {f['wrong_calls']} near misses the original accepts")
    print(f"    a gold's first call    median {first[0]:.1f} ms, p90 {first[1]:.1f}, max {first[2]:.1f} "
          f"(allowance 1000 ms)")
    print(f"    a right answer, warm   median {warm[0]:.2f} ms, p90 {warm[1]:.2f}, max {warm[2]:.1f} "
          f"({f['edits_median']:.0f} edits judged at the median; allowance 5 ms at the median); bare sqlite3 on an "
          f"open connection {f['bare_ms']:.3f} ms: {warm[0] / max(f['bare_ms'], 1e-6):.0f} times")
    print(f"    a near miss            median {wrong[0]:.2f} ms, p90 {wrong[1]:.2f}, max {wrong[2]:.1f}; "
          f"{f['wrong_rejected']} of {f['wrong_calls']} rejected")
    print(f"    right answers rejected {len(f['rejected'])} of {f['rewrites']} (target 0)"
          + "".join(f"\n      {db}: {sql[:100]} ({where})" for db, sql, where in f["rejected"][:5]))
