"""Split selection rules (harness/splits.py) and prompt lengths (harness/prompts.py), on small tables."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest

from bundle import verify as bundle_verify
from harness.common import prompts
from harness.common.errors import InputError
from harness.prepare import splits


def row(db_id: str, gold: str, question: str = "q?") -> dict:
    return {"db_id": db_id, "question": question, "query": gold}


@pytest.fixture
def rules(fixture_dbs):
    return splits.Rules(splits.Catalog(dict(fixture_dbs), max_schema=1000), splits.GoldChecker())


def golds(rows: list[splits.SourceRow]) -> list[tuple[str, str]]:
    return [(r.db_id, r.gold) for r in rows]


def test_train_then_rl_then_eval_in_order(rules):
    train = [row("pets_club", f"SELECT {i}") for i in range(6)]
    validation = [row("bakery", f"SELECT {i} + 100") for i in range(3)]
    got = splits.select(train, validation, splits.Sizes(3, 2, 2), rules)
    assert [r.index for r in got.train] == [0, 1, 2] and [r.index for r in got.rl] == [3, 4]
    assert [r.index for r in got.eval] == [0, 1]
    assert got.rows_read == {"train": 5, "validation": 2}, "no row is read past the last one needed"


@pytest.mark.parametrize("source_row, reason", [
    (row("no_such_db", "SELECT 1"), splits.SKIP_DATABASE_MISSING),
    (row("pets_club", "SELECT nope FROM nowhere"), splits.SKIP_GOLD_FAILS),
    (row("pets_club", "SELECT name FROM Pet WHERE weight > 100"), splits.SKIP_GOLD_EMPTY),
], ids=["database missing", "gold fails", "empty gold in rl"])
def test_skip_reasons_are_counted(rules, source_row, reason):
    train = [row("pets_club", "SELECT 1"), source_row, row("pets_club", "SELECT 2")]
    got = splits.select(train, [], splits.Sizes(1, 1, 0), rules)
    assert golds(got.rl) == [("pets_club", "SELECT 2")]
    assert got.skips == {"train": {reason: 1}}


def test_an_empty_gold_stays_in_train_and_eval(rules):
    empty = "SELECT name FROM Pet WHERE weight > 100"
    got = splits.select([row("pets_club", empty)], [row("bakery", "SELECT name FROM Product WHERE price > 1e9")],
                        splits.Sizes(1, 0, 1), rules)
    assert len(got.train) == 1 and len(got.eval) == 1 and got.skips == {}


def test_keep_empty_gold(fixture_dbs):
    keep = splits.Rules(splits.Catalog(dict(fixture_dbs), 1000), splits.GoldChecker(), keep_empty_gold=True)
    got = splits.select([row("pets_club", "SELECT 1"), row("pets_club", "SELECT name FROM Pet WHERE weight > 100")],
                        [], splits.Sizes(1, 1, 0), keep)
    assert len(got.rl) == 1 and got.skips == {}


def test_a_long_schema_skips_the_database_whole(fixture_dbs):
    tight = splits.Rules(splits.Catalog(dict(fixture_dbs), max_schema=100), splits.GoldChecker())
    got = splits.select([row("library", "SELECT 1"), row("library", "SELECT 2"), row("weather", "SELECT 3")],
                        [], splits.Sizes(1, 0, 0), tight)
    assert golds(got.train) == [("weather", "SELECT 3")]
    assert got.skipped_databases == {splits.SKIP_SCHEMA_TOO_LONG: {"library"}}


def test_shared_golds_are_excluded_until_none_is_left(rules):
    """Leaving out a shared gold lets new rows in, which share another gold: a second exclusion pass."""
    train = [row("pets_club", "SELECT 1"), row("library", "SELECT  1 ;"),
             row("pets_club", "SELECT 2"), row("weather", "SELECT 2"),
             row("pets_club", "SELECT 3"), row("library", "SELECT 4")]
    got = splits.select(train, [], splits.Sizes(2, 0, 0), rules)
    assert golds(got.train) == [("pets_club", "SELECT 3"), ("library", "SELECT 4")]
    assert got.shared_golds == {"SELECT 1", "SELECT 2"} and got.passes == 3
    assert got.skips == {"train": {splits.SKIP_GOLD_SHARED: 4}}


def test_a_gold_repeated_on_one_database_is_not_shared(rules):
    got = splits.select([row("pets_club", "SELECT 1"), row("pets_club", "SELECT 1", "again?")],
                        [], splits.Sizes(2, 0, 0), rules)
    assert len(got.train) == 2 and got.shared_golds == frozenset()


def test_sharing_across_train_and_eval_is_caught(rules):
    got = splits.select([row("pets_club", "SELECT 7"), row("pets_club", "SELECT 8")],
                        [row("bakery", "SELECT 7"), row("bakery", "SELECT 9")], splits.Sizes(1, 0, 1), rules)
    assert golds(got.train) == [("pets_club", "SELECT 8")] and golds(got.eval) == [("bakery", "SELECT 9")]


def test_keep_shared_golds_reports_them(fixture_dbs):
    keep = splits.Rules(splits.Catalog(dict(fixture_dbs), 1000), splits.GoldChecker(), keep_shared_golds=True)
    got = splits.select([row("pets_club", "SELECT 1"), row("library", "SELECT 1")], [], splits.Sizes(2, 0, 0), keep)
    assert len(got.train) == 2 and got.shared_golds == {"SELECT 1"}


def test_eval_on_a_training_database_is_an_error(rules):
    with pytest.raises(InputError, match="validation row 1 .*'pets_club'.*no training row saw"):
        splits.select([row("pets_club", "SELECT 1")], [row("no_such_db", "SELECT 1"), row("pets_club", "SELECT 2")],
                      splits.Sizes(1, 0, 1), rules)


def test_the_gold_checker_runs_each_gold_once(fixture_dbs):
    calls = []

    def counted(gold, path, limits):
        calls.append(gold)
        return bundle_verify.gold_shape(gold, path, limits)

    rules = splits.Rules(splits.Catalog(dict(fixture_dbs), 1000), splits.GoldChecker(run=counted))
    train = [row("pets_club", "SELECT 1"), row("library", "SELECT 1"), row("pets_club", "SELECT 2"),
             row("pets_club", "SELECT 3")]
    got = splits.select(train, [], splits.Sizes(2, 0, 0), rules)  # two passes over the same rows
    assert got.passes == 2
    assert sorted(calls) == ["SELECT 1", "SELECT 1", "SELECT 2", "SELECT 3"]


def chat(chars: int, gold: str = "SELECT 1") -> dict:
    return prompts.chat_row(["t(" + "x" * chars + ")"], "q?", gold)


def test_prompt_lengths_and_the_trainer_limits():
    stats = prompts.prompt_stats([chat(100), chat(1300), chat(2800)])
    assert stats["rows"] == 3 and stats["over_grpo"] == 2 and stats["over_sft"] == 1
    assert stats["max_chars"] == len(prompts.system_prompt(["t(" + "x" * 2800 + ")"])) + len("q?")


def test_token_estimate_counts_every_message_and_the_template():
    prompt, answer = prompts.row_tokens(prompts.chat_row(["a" * 35], "b" * 7, "c" * 14))
    system = len(prompts.system_prompt(["a" * 35]))
    assert prompt == math.ceil(system / 3.5) + 2 + 2 * prompts.TEMPLATE_TOKENS_PER_MESSAGE
    assert answer == 4 + prompts.TEMPLATE_TOKENS_PER_MESSAGE


def test_jsonl_is_one_row_a_line_and_keeps_unicode():
    data = prompts.jsonl_bytes([chat(3), prompts.chat_row(["t(a)"], "Où ?", "SELECT 'é'")])
    lines = data.decode("utf-8").split("\n")
    assert len(lines) == 3 and lines[-1] == "" and "Où ?" in lines[1]


@pytest.mark.parametrize("module_name", ["harness.prepare.api_cache", "harness.prepare.fetch_rows", "harness.common.prompts",
                                         "harness.prepare.summary", "api_server"])
def test_docstring_examples_run(module_name):
    results = doctest.testmod(importlib.import_module(module_name))
    assert results.attempted > 0 and results.failed == 0
