"""`prepare` on the real Spider copy with the defaults 2,000 / 600 / 300 (fixture prepared_spider).

The rows come from tests/api_server.py serving train_spider.json and dev.json on 127.0.0.1 in
pages of 100, exactly as the datasets-server would; the databases from $SPIDER_DATA/database.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api_server import ApiServer
from conftest import ROOT
from harness.common.files import sha256_file
from harness.prepare.bundle_data import schema_lines
from harness.prepare.job import DEFAULT_MAX_SCHEMA
from test_prepare import SPLITS, load, output_files, score_staged_rows

pytestmark = pytest.mark.real_data


def dev_rows(spider_dir: Path) -> list[dict]:
    return json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))


@functools.cache
def usable_database(spider_dir: Path, db_id: str) -> bool:
    """Present, and with a schema that fits --max-schema (read independently of prepare)."""
    path = spider_dir / "database" / db_id / f"{db_id}.sqlite"
    return path.is_file() and len("\n".join(schema_lines(path))) <= DEFAULT_MAX_SCHEMA


def test_the_default_sizes_are_met_and_every_row_read_is_accounted_for(prepared_spider):
    rows, index, summary = load(prepared_spider)
    assert {name: len(rows[name]) for name in SPLITS} == summary["rows"] == {"train": 2000, "rl": 600, "eval": 300}
    skipped = {source: sum(counts.values()) for source, counts in summary["skips"].items()}
    assert summary["rows_read"]["train"] == 2600 + skipped.get("train", 0)
    assert summary["rows_read"]["validation"] == 300 + skipped.get("validation", 0)
    assert len(index["rows"]) == 2900 and summary["warnings"] == []


def test_train_and_eval_databases_are_disjoint(prepared_spider):
    _, index, _ = load(prepared_spider)
    training = {r["db_id"] for r in index["rows"] if r["split"] != "eval"}
    evaluation = {r["db_id"] for r in index["rows"] if r["split"] == "eval"}
    assert training and evaluation and not training & evaluation


def test_eval_is_the_first_usable_dev_rows_in_order(prepared_spider, spider_dir):
    rows, _, summary = load(prepared_spider)
    dev = dev_rows(spider_dir)
    order = list(dict.fromkeys(r["db_id"] for r in dev if usable_database(spider_dir, r["db_id"])))
    assert summary["databases"]["eval"] == order[: len(summary["databases"]["eval"])]
    # The eval rows are dev rows in dev order, with only the skips the summary counts in between.
    wanted = [(r["question"], r["query"]) for r in dev]
    got = [(row["messages"][1]["content"], row["messages"][2]["content"]) for row in rows["eval"]]
    positions, start = [], 0
    for pair in got:
        start = wanted.index(pair, start) + 1
        positions.append(start - 1)
    gaps = positions[-1] + 1 - len(positions)
    assert gaps == sum(summary["skips"].get("validation", {}).values())
    assert summary["rows_read"]["validation"] == positions[-1] + 1


def test_only_the_used_databases_are_staged_unchanged(prepared_spider, spider_dir):
    _, index, summary = load(prepared_spider)
    staged = sorted((prepared_spider / "bundle" / "data" / "databases").iterdir())
    used = {r["db_id"] for r in index["rows"]}
    assert {p.stem for p in staged} == used == set(index["databases"])
    for path in staged:
        assert sha256_file(path) == sha256_file(spider_dir / "database" / path.stem / path.name)
    assert summary["databases"]["count"] == len(used)
    assert summary["databases"]["bytes"] == sum(p.stat().st_size for p in staged)
    assert set(index["gold_results"]) == used
    assert sum(len(golds) for golds in index["gold_results"].values()) == len({(r["db_id"], r["gold"])
                                                                              for r in index["rows"]})


def test_missing_and_oversized_databases_are_reported(prepared_spider, spider_dir):
    _, _, summary = load(prepared_spider)
    train = json.loads((spider_dir / "train_spider.json").read_text(encoding="utf-8"))
    read = train[: summary["rows_read"]["train"]] + dev_rows(spider_dir)[: summary["rows_read"]["validation"]]
    missing = {r["db_id"] for r in read if not (spider_dir / "database" / r["db_id"]).is_dir()}
    oversized = {r["db_id"] for r in read if r["db_id"] not in missing
                 and not usable_database(spider_dir, r["db_id"])}
    skipped = summary["databases"]["skipped"]
    assert set(skipped.get("database missing", [])) == missing
    assert set(skipped.get("schema too long", [])) == oversized


# A tenth of the default sizes: the full run is the fixture's, and a second full run cost the suite
# 270 s on one worker; this one is about 45 s a run and still builds neighbours, separates and audits.
SMALL_PREPARE_ARGS = ("--rows", "60", "--rl-rows", "18", "--eval-rows", "12", "--request-interval", "0")


def _prepare_in_process_of_its_own(out: Path, hash_seed: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "harness", "prepare", *args, "--output", str(out)],
                          cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_two_runs_are_byte_identical_and_the_second_needs_no_network(spider_dir, tmp_path):
    """Two runs on real Spider, each in a process of its own with another hash seed (an order taken
    from a set or a dict of strings would differ) and another number of workers, the second reading
    every page from the cache."""
    args = ("--databases", str(spider_dir / "database"), "--cache-dir", str(tmp_path / "cache"), *SMALL_PREPARE_ARGS)
    with ApiServer.from_spider(spider_dir) as api:  # both build every neighbour: neither takes the build cache's
        _prepare_in_process_of_its_own(tmp_path / "first", "1", "--api-url", api.url, *args,
                                       "--build-cache", str(tmp_path / "build-cache"), "--workers", "2")
        fetched = len(api.requests)
        _prepare_in_process_of_its_own(tmp_path / "second", "2", "--api-url", api.url, *args, "--no-build-cache",
                                       "--workers", "1")
        assert fetched > 0 and len(api.requests) == fetched  # the second run asked for nothing
    assert output_files(tmp_path / "second") == output_files(tmp_path / "first")


@pytest.mark.slow
def test_every_row_resolves_from_its_gold_alone_and_scores_1(prepared_spider, tmp_path):
    """Given completion and gold only: the shared-gold rule leaves no row ambiguous, every gold scores."""
    assert score_staged_rows(prepared_spider, tmp_path) == {"rows": 2900, "bad": []}
