"""`bench`, the grader beside the official evaluator: pairs a second on the same pairs, right and wrong apart.

The pairs: the first ``limit`` distinct (database, gold) of the staged dev rows; for each, a right
answer (the gold in another text: a comment after it, which the search does not skip, as in
``search.throughput``), where the gold has one a wrong answer (its first mechanical mutation that
returns other rows on the original database, harness.common.mutate), and a second right answer in
other words (``right_again``: the search's databases of that gold are kept by then, as for every
prediction of a gold after the first in a grading run). Three scorers judge every
pair, in this one process (one core), interleaved a few pairs at a time so that a change of load
falls on all three alike:

* ``grader``: the grader as it ships (``scoring.entry.score_call``, caller ``grader``): the original,
  the neighbours, then the counterexample search after a match;
* ``grader_no_search``: the same with ``search=off``;
* ``evaluator``: the official evaluator's execution match (harness.bench.evaluator), when
  ``--evaluator DIR`` gives its checkout.

The grader's plans (the gold's result on the original and on its neighbours) are built before the
clock starts, once per gold, as in any grading run after its first row of that gold; that set-up's
time is printed apart. The evaluator runs both queries on every call: that is how it works.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bundle.contract.limits import Limits
from bundle.scoring import entry as scoring_entry
from bundle.search import counterexample as neighbour_search
from harness.bench.evaluator import Evaluator
from harness.bench.search import OTHER_TEXT
from harness.common import mutate

CHUNK = 5  # pairs each scorer judges in turn
KINDS = ("right", "right_again", "wrong")
AGAIN_TEXT = "\n-- another right answer"  # a second wording of the gold: its search databases are kept by then
SCORERS = ("grader", "grader_no_search", "evaluator")


@dataclasses.dataclass(frozen=True)
class Pair:
    db_id: str
    gold: str
    answer: str
    kind: str  # right or wrong


def pairs_of(rows: list[dict], database: Callable[[str], Path], limit: int) -> tuple[list[Pair], int]:
    """Answers to the first ``limit`` distinct golds of ``rows``, each gold's together: right, wrong
    (where it has one) and right again in other words; and how many golds have no mutation the
    original tells apart (no wrong answer)."""
    seen: set[tuple[str, str]] = set()
    pairs, without_wrong = [], 0
    for row in rows:
        key = (row["db_id"], row["query"])
        if key in seen:
            continue
        if len(seen) == limit:
            break
        seen.add(key)
        pairs.append(Pair(row["db_id"], row["query"], row["query"] + OTHER_TEXT, "right"))
        wrong = mutate.differing_mutations(row["query"], database(row["db_id"]))
        if wrong:
            pairs.append(Pair(row["db_id"], row["query"], wrong[0].sql, "wrong"))
        else:
            without_wrong += 1
        pairs.append(Pair(row["db_id"], row["query"], row["query"] + AGAIN_TEXT, "right_again"))
    return pairs, without_wrong


def scorers(root: Path, evaluator: Evaluator | None,
            evaluator_database: Callable[[str], Path]) -> dict[str, Callable[[Pair], float | None]]:
    limits = scoring_entry.current_limits()
    modes = {"grader": limits, "grader_no_search": limits.replace(search="off")}

    def ours(lim: Limits) -> Callable[[Pair], float | None]:
        def score(p: Pair) -> float | None:
            call = scoring_entry.read_call({"solution_str": p.answer, "ground_truth": p.gold,
                                            "extra_info": {"db_id": p.db_id}})
            return scoring_entry.score_call(call, lim, root=str(root), caller="grader").score
        return score

    found: dict[str, Callable[[Pair], float | None]] = {name: ours(lim) for name, lim in modes.items()}
    if evaluator is not None:
        found["evaluator"] = lambda p: float(evaluator(evaluator_database(p.db_id), p.answer, p.gold))
    return found


def run(root: Path, rows: list[dict], database: Callable[[str], Path], *, limit: int,
        evaluator: Evaluator | None, evaluator_database: Callable[[str], Path] | None = None,
        say: Callable[[str], None] = lambda line: None) -> dict:
    """Pairs a second of each scorer on the same pairs (``database(db_id)``: the original database
    file; ``evaluator_database``: the file the evaluator is given, whose folder it runs on whole)."""
    pairs, without_wrong = pairs_of(rows, database, limit)
    judge = scorers(root, evaluator, evaluator_database or database)
    started = time.perf_counter()
    neighbour_search.forget()
    for p in pairs:  # each gold's plan, once per mode, before the clock: a wrong answer never searches
        for name in ("grader", "grader_no_search"):
            judge[name](Pair(p.db_id, p.gold, "no query here", "wrong"))  # the plan is built before extraction
    setup = time.perf_counter() - started
    taken: dict[str, dict[str, list[tuple[float, float]]]] = {name: {kind: [] for kind in KINDS} for name in judge}
    accepted = {name: dict.fromkeys(KINDS, 0) for name in judge}
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start:start + CHUNK]
        for name, score in judge.items():
            for p in chunk:
                wall, cpu = time.perf_counter(), time.process_time()
                verdict = score(p)
                taken[name][p.kind].append((time.perf_counter() - wall, time.process_time() - cpu))
                accepted[name][p.kind] += verdict == 1.0
        if (start // CHUNK) % 10 == 9:
            say(f"  grader: {start + len(chunk)} of {len(pairs)} pairs judged by {len(judge)} scorers")
    counts = {kind: sum(p.kind == kind for p in pairs) for kind in KINDS}
    figures: dict = {"golds": counts["right"], "pairs": counts, "without_wrong": without_wrong, "setup_seconds": setup,
                     "checkout": None if evaluator is None else {"folder": str(evaluator.folder),
                                                                "commit": evaluator.commit}}
    for name in judge:
        figures[name] = {kind: {"accepted": accepted[name][kind], **_times(taken[name][kind])} for kind in KINDS}
        figures[name]["all"] = _times([t for kind in KINDS for t in taken[name][kind]])
    return figures


def _times(taken: list[tuple[float, float]]) -> dict:
    """Pairs a second of wall time and of this process's CPU time, and the median call in ms."""
    wall, cpu = sum(w for w, _ in taken), sum(c for _, c in taken)
    return {"pairs": len(taken), "wall_s": wall, "cpu_s": cpu,
            "pairs_per_s": len(taken) / wall if wall else None, "pairs_per_cpu_s": len(taken) / cpu if cpu else None,
            "median_ms": statistics.median(w for w, _ in taken) * 1000 if taken else None,
            "median_cpu_ms": statistics.median(c for _, c in taken) * 1000 if taken else None}


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}" if x < 10 else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}" if x < 10 else f"{x:,.0f}"


def print_figures(f: dict) -> None:
    n = f["pairs"]
    print(f"grader vs evaluator {f['golds']} distinct dev golds: {n['right']} right answers (the gold in another text), "
          f"{n['right_again']} right again (other words, the gold searched before), {n['wrong']} wrong (a mutation "
          f"the original tells apart; {f['without_wrong']} golds have none); one "
          f"process; pairs a second of wall time [of CPU time], median call ms (the grader's plans built first: "
          f"{f['setup_seconds']:.1f} s)")
    for name in SCORERS:
        s = f.get(name)
        if s is None:
            print(f"  {name:<17} not measured: give --evaluator DIR, a checkout of taoyds/test-suite-sql-eval "
                  "(git clone https://github.com/taoyds/test-suite-sql-eval)")
            continue
        parts = [f"{kind} {_rate(s[kind]['pairs_per_s'])}/s [{_rate(s[kind]['pairs_per_cpu_s'])}/s] "
                 f"median {_ms(s[kind]['median_ms'])} ms" for kind in (*KINDS, "all")]
        print(f"  {name:<17} " + ", ".join(parts) + "; accepts " + ", ".join(
            f"{s[kind]['accepted']}/{n[kind]} {kind.replace('_', ' ')}" for kind in KINDS))
    e, g = f.get("evaluator"), f["grader"]
    if e is not None:
        for key, what in (("pairs_per_s", "wall"), ("pairs_per_cpu_s", "CPU")):
            ratios = ", ".join(f"{kind} {_ratio(g[kind][key], e[kind][key])}" for kind in (*KINDS, "all"))
            print(f"  grader / evaluator, pairs a second of {what} time: {ratios} (target: at least 0.5 on one core)")
        print(f"  the evaluator: {f['checkout']['folder']} (commit {f['checkout']['commit'] or 'unknown'})")


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"
