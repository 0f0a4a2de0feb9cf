"""On the real Spider data ($SPIDER_DATA): every runnable gold of the dev and train
splits scores 1.0 against itself, no gold comes near a cap, and mechanically mutated golds are scored by
the rows they actually return."""

from __future__ import annotations

import collections
import json
import random
import sqlite3
from pathlib import Path

import pytest

from bundle.sql import guard as sql_guard
from bundle.verify import gold_shape, verify
from conftest import find_spider

pytestmark = [pytest.mark.real_data, pytest.mark.slow]

SPIDER = find_spider()
# Spider's gold SQL has three known errors in train (README of the data copy); nothing else may fail.
KNOWN_BROKEN_GOLDS = 3


def spider_rows() -> list[dict]:
    if SPIDER is None:
        return []
    return json.loads((SPIDER / "dev.json").read_text()) + json.loads((SPIDER / "train_spider.json").read_text())


def golds_by_database(rows: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = collections.defaultdict(list)
    for row in rows:
        if row["query"] not in out[row["db_id"]]:
            out[row["db_id"]].append(row["query"])
    return dict(sorted(out.items()))


ROWS = spider_rows()
GOLDS = golds_by_database(ROWS)
DATABASES = sorted(GOLDS) or ["(no spider data)"]


def database_path(db_id: str) -> Path | None:
    path = SPIDER / "database" / db_id / f"{db_id}.sqlite" if SPIDER else None
    return path if path is not None and path.is_file() else None


def bare_rows(path: Path, sql: str) -> list[tuple] | None:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()


@pytest.mark.parametrize("db_id", DATABASES)
def test_every_gold_matches_itself(spider_dir, db_id):
    path = database_path(db_id)
    if path is None:
        pytest.skip(f"{db_id} is not in this Spider copy (the copy leaves out three databases over 4 MiB)")
    broken = []
    try:
        for gold in GOLDS[db_id]:
            try:
                gold_shape(gold, str(path))
            except sql_guard.QueryFailed as failed:
                # Only SQL errors may stop a gold; a cap or timeout on a real gold is a calibration bug.
                assert failed.kind == sql_guard.ERROR, (db_id, gold, failed)
                assert bare_rows(path, gold) is None, (db_id, gold, "fails in the scorer but runs bare")
                broken.append(gold)
                continue
            verdict = verify(gold, gold, str(path))  # through extraction, as a model's answer would go
            assert verdict.outcome == "match", (db_id, gold, verdict)
    finally:
        sql_guard.forget_connections()
    assert len(broken) <= KNOWN_BROKEN_GOLDS, broken


def test_known_broken_golds_are_exactly_three(spider_dir):
    failing = {(db_id, g) for db_id, golds in GOLDS.items() if database_path(db_id)
               for g in golds if bare_rows(database_path(db_id), g) is None}
    broken_rows = [r for r in ROWS if (r["db_id"], r["query"]) in failing]
    assert len(broken_rows) == KNOWN_BROKEN_GOLDS, broken_rows


def mutation_cases(limit: int = 400) -> list[tuple[str, str, str]]:
    """(db_id, gold, mutated) for up to ``limit`` mutations of dev golds, spread over the split."""
    from harness.common import mutate
    cases = []
    dev = [r for r in ROWS[:1034] if database_path(r["db_id"])] if SPIDER else []
    rng = random.Random(1)
    for row in rng.sample(dev, len(dev)):
        for mutation in mutate.mutations(row["query"]):
            cases.append((row["db_id"], row["query"], mutation.sql))
        if len(cases) >= limit:
            break
    return cases[:limit]


def test_mutated_golds_scored_by_the_rows_they_return(spider_dir):
    from harness.common import mutate
    cases = mutation_cases()
    assert len(cases) >= 300
    checked = collections.Counter()
    try:
        for db_id, gold, mutated in cases:
            path = database_path(db_id)
            gold_rows, mutated_rows = bare_rows(path, gold), bare_rows(path, mutated)
            if gold_rows is None or mutated_rows is None:
                continue  # a mutation that fails is a prediction error: covered elsewhere
            verdict = verify(mutated, gold, str(path))
            if mutated_rows == gold_rows:  # the very same rows, same order: must match
                assert verdict.outcome == "match", (gold, mutated, verdict)
                checked["same rows"] += 1
                continue
            try:
                differs = mutated in [m.sql for m in mutate.differing_mutations(gold, path)]
            except mutate.QueryUnusable:
                continue
            if differs:  # other rows even ignoring order and ties: must not match
                assert verdict.score == 0.0, (gold, mutated, verdict)
                checked["different rows"] += 1
    finally:
        sql_guard.forget_connections()
    print(dict(checked))
    assert checked["different rows"] >= 150 and checked["same rows"] >= 20, checked
