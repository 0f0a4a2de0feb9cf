"""`bench`, published predictions: the grader beside the official evaluator on real systems' dev answers.

Issue 29's measure: the dev predictions of published systems (one file a system, one prediction a
line in dev order, as ``bench-overturns`` reads them), judged by the grader as it ships (the
original, the neighbours, then the counterexample search after a match) and by the official
evaluator's execution match (harness.bench.evaluator), on the first staged dev rows.

* **one core**: both scorers in this one process, row after row: the grader judges every system's
  answer to a row, then the evaluator judges the same answers, so that a change of the machine's
  load falls on both alike. A row's systems are graded together, as a grading run of several
  systems, stages or checkpoints in one process does: the search's databases of a gold are built by
  its first answer and reused by the others (``search.cache``). Everything the grader
  does for a row is on the clock, its plans (the gold on the original and on the neighbours)
  included; the evaluator runs both queries on every call, which is how it works;
* **every core**: the grader alone, the rows dealt in contiguous blocks to one spawned process a
  usable core, each grading its block as above; wall time from the first process started to the
  last one done. Its verdicts must be the one-core run's, pair for pair. These processes keep the
  search's databases in a fresh folder (``SPIDER_SCORING_SEARCH_CACHE``, as ``grade`` does);
* **a second stage**: the same pairs graded again by new processes reading that folder (a later
  stage or checkpoint of the same eval rows): on one spawned process, right and wrong apart, and
  on every core. Verdicts again the one-core run's;
* **after prepare's draw**: the golds' own search sets drawn into a new folder as ``prepare`` draws
  the eval split's (harness.prepare.search_prebuild, every core: its wall time is prepare's), then
  a first stage graded reading them, on one spawned process and on every core.

Right and wrong answers are told apart by the evaluator's verdict (a match on the original) where
it is measured, by the grader's verdict on the original otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bundle.contract.errors import ScoringInfrastructureError
from bundle.scoring import entry as scoring_entry
from bundle.search import counterexample as neighbour_search
from bundle.search import disk as search_disk
from harness.bench.evaluator import Evaluator
from harness.bench.overturns import read_predictions
from harness.common import search_cache
from harness.common.cores import usable_cores
from harness.common.processes import map_in_processes
from harness.prepare import search_prebuild


@dataclasses.dataclass(frozen=True)
class Pair:
    row: int  # the staged row's position
    system: str
    db_id: str
    gold: str
    answer: str


def check(spider: Path, files: Sequence[Path]) -> None:
    """Read every predictions file now (InputError naming the file and line), before anything is staged."""
    dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    for f in files:
        read_predictions(Path(f), dev)


def pairs_of(spider: Path, rows: Sequence[dict], files: Sequence[Path]) -> tuple[list[str], list[Pair]]:
    """The systems (file stems) and their answers to the staged ``rows`` (the first dev rows whose
    database is present, in dev order), row by row, each row's systems in the order given."""
    dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    systems = {Path(f).stem: read_predictions(Path(f), dev) for f in files}
    present = [i for i, r in enumerate(dev) if (spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite").is_file()]
    pairs = [Pair(k, name, row["db_id"], row["query"], answers[present[k]])
             for k, row in enumerate(rows) for name, answers in systems.items()]
    return list(systems), pairs


def grade(root: str, pair: Pair) -> tuple[float | None, float | None]:
    """The grader's verdict (None: unscored) and its verdict on the original alone."""
    call = scoring_entry.read_call({"solution_str": pair.answer, "ground_truth": pair.gold,
                                    "extra_info": {"db_id": pair.db_id}})
    try:
        verdict = scoring_entry.score_call(call, scoring_entry.current_limits(), root=root, caller="grader")
    except ScoringInfrastructureError:
        return None, None
    return verdict.score, verdict.original_score


def _grade_block(task: tuple[str, list[Pair]]) -> tuple[list[tuple[float | None, float, float]], int, int]:
    """(verdict, wall s, CPU s) of each pair, graded in this (spawned) process; and how many search
    databases it read from the disk folder and kept there."""
    root, pairs = task
    out = []
    for p in pairs:
        wall, cpu = time.perf_counter(), time.process_time()
        score = grade(root, p)[0]
        out.append((score, time.perf_counter() - wall, time.process_time() - cpu))
    disk = search_disk.from_env()
    return out, disk.hits if disk else 0, disk.saved if disk else 0


def _spread(root: Path, by_row: dict[int, list[Pair]], cores: int) -> tuple[list[tuple[float | None, float, float]], dict]:
    """Every pair graded on ``cores`` spawned processes, contiguous blocks of rows each: per pair
    verdict and times, and the run's figure (processes, wall time, search databases read and kept)."""
    order = sorted(by_row)
    size = -(-len(order) // cores)
    blocks = [[p for k in order[i:i + size] for p in by_row[k]] for i in range(0, len(order), size)]
    started = time.perf_counter()
    spread = map_in_processes(_grade_block, [(str(root), block) for block in blocks], cores, spawn=True)
    wall = time.perf_counter() - started
    results = [v for block, _, _ in spread for v in block]
    return results, {"processes": len(blocks), "wall_s": wall, "pairs_per_s": len(results) / wall,
                     "read": sum(r for _, r, _ in spread), "kept": sum(k for _, _, k in spread)}


def run(root: Path, spider: Path, rows: Sequence[dict], files: Sequence[Path], evaluator: Evaluator | None,
        database: Callable[[str], Path], say: Callable[[str], None] = lambda line: None,
        cores: int | None = None) -> dict:
    """Pairs a second of the grader (one core, every core) and of the evaluator (one core) on the
    published answers to ``rows`` (``database(db_id)``: the file the evaluator is given)."""
    if not files:
        return {"skipped": "no predictions given: --published FILE... (one system's dev predictions a file)"}
    systems, pairs = pairs_of(spider, rows, files)
    if not pairs:
        return {"skipped": "no dev rows staged to answer: give --pairs N of at least 1"}
    neighbour_search.forget()
    taken: dict[str, list[tuple[float, float]]] = {"grader": [], "evaluator": []}
    verdicts: list[float | None] = []
    right: list[bool] = []
    by_row: dict[int, list[Pair]] = {}
    for p in pairs:
        by_row.setdefault(p.row, []).append(p)
    for number, (_, group) in enumerate(sorted(by_row.items()), start=1):
        originals = []
        for p in group:
            wall, cpu = time.perf_counter(), time.process_time()
            score, original = grade(str(root), p)
            taken["grader"].append((time.perf_counter() - wall, time.process_time() - cpu))
            verdicts.append(score)
            originals.append(original)
        for p, original in zip(group, originals):
            if evaluator is None:
                right.append(original == 1.0)
                continue
            wall, cpu = time.perf_counter(), time.process_time()
            matched = evaluator(database(p.db_id), p.answer, p.gold)
            taken["evaluator"].append((time.perf_counter() - wall, time.process_time() - cpu))
            right.append(matched == 1)
        if number % 50 == 0:
            say(f"  published: {number} of {len(by_row)} rows judged ({len(systems)} answers each)")
    figures: dict = {"systems": systems, "rows": len(by_row), "pairs": len(pairs), "right": sum(right),
                     "accepted": sum(v == 1.0 for v in verdicts), "unscored": sum(v is None for v in verdicts),
                     "checkout": None if evaluator is None else {"folder": str(evaluator.folder),
                                                                "commit": evaluator.commit}}
    for name, times in taken.items():
        if times:
            figures[name] = {kind: _times([t for t, r in zip(times, right) if keep(r)])
                             for kind, keep in (("all", lambda r: True), ("right", bool), ("wrong", lambda r: not r))}
    cores = cores or usable_cores()
    with tempfile.TemporaryDirectory(prefix="published-search-") as folder, search_cache.keeping(folder):
        for name, processes in (("every_core", cores), ("second_one_core", 1), ("second_every_core", cores)):
            say(f"  published: the grader again on {processes} process(es)"
                + (", the search's databases read from the first run's folder" if name.startswith("second") else ""))
            again, figure = _spread(root, by_row, processes)
            figures[name] = {**figure, "same_verdicts": [v for v, _, _ in again] == verdicts,
                             "folder_bytes": search_cache.size(Path(folder))[1]}
            if name == "second_one_core":
                figures[name].update(_kinds(again, right))
    golds: dict[str, list[str]] = {}
    for p in pairs:
        if p.gold not in golds.setdefault(p.db_id, []):
            golds[p.db_id].append(p.gold)
    with tempfile.TemporaryDirectory(prefix="published-prebuilt-") as folder:
        say(f"  published: the golds' search sets drawn as prepare draws them, on {cores} processes")
        figures["prebuilt"] = search_prebuild.prebuild(root, Path(folder), processes=cores, golds=golds)
        with search_cache.keeping(folder):
            for name, processes in (("prebuilt_one_core", 1), ("prebuilt_every_core", cores)):
                say(f"  published: a first stage on {processes} process(es), reading what prepare drew")
                again, figure = _spread(root, by_row, processes)
                figures[name] = {**figure, "same_verdicts": [v for v, _, _ in again] == verdicts}
                if name == "prebuilt_one_core":
                    figures[name].update(_kinds(again, right))
    return figures


def _kinds(graded: list[tuple[float | None, float, float]], right: list[bool]) -> dict:
    """``_times`` of all, right and wrong answers, from per-pair (verdict, wall, CPU)."""
    taken = [(w, c) for _, w, c in graded]
    return {kind: _times([t for t, r in zip(taken, right) if keep(r)])
            for kind, keep in (("all", lambda r: True), ("right", bool), ("wrong", lambda r: not r))}


def _times(taken: list[tuple[float, float]]) -> dict:
    wall, cpu = sum(w for w, _ in taken), sum(c for _, c in taken)
    return {"pairs": len(taken), "wall_s": wall, "cpu_s": cpu,
            "pairs_per_s": len(taken) / wall if wall else None, "pairs_per_cpu_s": len(taken) / cpu if cpu else None,
            "median_ms": statistics.median(w for w, _ in taken) * 1000 if taken else None}


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}" if x < 10 else f"{x:,.0f}"


def _stage_line(label: str, one: dict, every: dict, built: str) -> str:
    """A stage graded again in new processes: one process's rates, every core's, what they read and
    built, and whether both gave the one-core run's verdicts."""
    return (f"  grader     {label}: one process: " + ", ".join(
        f"{kind} {_rate(one[kind]['pairs_per_s'])}/s [{_rate(one[kind]['pairs_per_cpu_s'])}/s]"
        for kind in ("all", "right", "wrong")) + f"; every core ({every['processes']} processes) "
        f"{_rate(every['pairs_per_s'])}/s; {one['read']:,} read, {one['kept']:,} {built}; verdicts "
        + ("the same as on one core, on both" if one["same_verdicts"] and every["same_verdicts"] else
           f"on one process {_same(one)}, on every core {_same(every)} on one core"))


def _same(figure: dict) -> str:
    return "the same as" if figure["same_verdicts"] else "NOT the same as"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def print_figures(f: dict) -> None:
    if "skipped" in f:
        print(f"published predictions not measured: {f['skipped']}")
        return
    print(f"published predictions of {len(f['systems'])} systems ({', '.join(f['systems'])}): {f['pairs']:,} pairs on "
          f"the first {f['rows']} dev rows, a row's answers together; {f['right']:,} right on the original "
          f"({'the evaluator' if 'evaluator' in f else 'the grader'} says), the grader accepts {f['accepted']:,}, "
          f"{f['unscored']} unscored; pairs a second of wall time [of CPU time], median call ms")
    for name in ("grader", "evaluator"):
        s = f.get(name)
        if s is None:
            print(f"  {name:<10} not measured: give --evaluator DIR, a checkout of taoyds/test-suite-sql-eval")
            continue
        print(f"  {name:<10} one core: " + ", ".join(
            f"{kind} {_rate(s[kind]['pairs_per_s'])}/s [{_rate(s[kind]['pairs_per_cpu_s'])}/s] median "
            f"{_rate(s[kind]['median_ms'])} ms" for kind in ("all", "right", "wrong")))
    e, g, every = f.get("evaluator"), f["grader"], f["every_core"]
    second, second_every = f["second_one_core"], f["second_every_core"]
    print(f"  grader     every core: {every['processes']} processes, {_rate(every['pairs_per_s'])}/s of wall time; "
          f"verdicts {_same(every)} on one core; {every['kept']:,} search attempts kept in a folder "
          f"({every['folder_bytes'] / 2**20:,.0f} MiB)")
    print(_stage_line("a second stage, the search's databases read from that folder", second, second_every,
                      "built again"))
    pre, pre_one, pre_every = f["prebuilt"], f["prebuilt_one_core"], f["prebuilt_every_core"]
    if "skipped" in pre:
        print(f"  grader     after prepare's draw: none drawn ({pre['skipped']})")
    else:
        print(f"  prepare    the golds' search sets drawn as prepare draws the eval split's: {pre['databases']:,} "
              f"databases of {pre['golds']:,} golds in {pre['seconds']:.0f} s of wall time on every core")
    print(_stage_line("a first stage after prepare's draw", pre_one, pre_every, "built"))
    if e is not None:
        for key, what in (("pairs_per_s", "wall"), ("pairs_per_cpu_s", "CPU")):
            print(f"  grader / evaluator, one core, pairs a second of {what} time: " + ", ".join(
                f"{kind} {_ratio(g[kind][key], e[kind][key])}" for kind in ("all", "right", "wrong"))
                + " (target: at least 0.5)")
        print(f"  grader on every core / evaluator on one, pairs a second of wall time: "
              f"{_ratio(every['pairs_per_s'], e['all']['pairs_per_s'])} (target: more than 1)")
        for label, one, spread in (("a second stage", second, second_every),
                                   ("a first stage after prepare's draw", pre_one, pre_every)):
            print(f"  {label}: grader / evaluator, one core, pairs a second of wall time: " + ", ".join(
                f"{kind} {_ratio(one[kind]['pairs_per_s'], e[kind]['pairs_per_s'])}" for kind in ("all", "right", "wrong"))
                + f"; grader on every core / evaluator on one: {_ratio(spread['pairs_per_s'], e['all']['pairs_per_s'])}")
        print(f"  the evaluator: {f['checkout']['folder']} (commit {f['checkout']['commit'] or 'unknown'})")
