"""Extraction rules (bundle/sql/extract.py), one table row per rule, plus properties."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle import verify
from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import text as sql_text
from bundle.sql.extract import Extracted, extract, extract_sql
from conftest import ROOT

CASES = [
    # (id, completion, expected query or None)
    ("bare query", "SELECT name FROM singer", "SELECT name FROM singer"),
    ("trailing semicolon", "SELECT name FROM singer;", "SELECT name FROM singer"),
    ("several trailing semicolons and spaces", "  SELECT 1 ;; \n", "SELECT 1"),
    ("sql fence", "```sql\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("plain fence", "```\nSELECT a FROM t\n```", "SELECT a FROM t"),
    ("fence with language and prose around", "Here you go:\n```sqlite\nSELECT a FROM t;\n```\nHope it helps!", "SELECT a FROM t"),
    ("inline fence", "```SELECT a FROM t```", "SELECT a FROM t"),
    ("unclosed fence cut by the token limit", "```sql\nSELECT a, b FROM t WHERE", "SELECT a, b FROM t WHERE"),
    ("first fence holding a statement wins", "```text\nno sql here\n```\n```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```", "SELECT 1"),
    ("leading prose on the same line", "The answer is: SELECT count(*) FROM t", "SELECT count(*) FROM t"),
    ("leading prose on its own line", "Let me think.\nSELECT count(*) FROM t", "SELECT count(*) FROM t"),
    ("prose word select before the query", "We select the names.\nSELECT name FROM t", "SELECT name FROM t"),
    ("trailing prose after a blank line", "SELECT a FROM t\n\nThis returns every a.", "SELECT a FROM t"),
    ("trailing prose after a semicolon", "SELECT a FROM t; this returns every a", "SELECT a FROM t"),
    ("think block removed", "<think>Maybe SELECT b FROM u</think>\nSELECT a FROM t", "SELECT a FROM t"),
    ("lone closing think", "the prompt opened a think\n SELECT x</think>SELECT a FROM t", "SELECT a FROM t"),
    ("unclosed think swallows the rest", "<think>SELECT a FROM t", None),
    ("template token removed", "SELECT a FROM t<|im_end|>", "SELECT a FROM t"),
    ("line comment inside kept", "SELECT a -- the a column\nFROM t", "SELECT a -- the a column\nFROM t"),
    ("comment before the query ignored", "-- find them\nSELECT a FROM t", "SELECT a FROM t"),
    ("semicolon inside a string is not an end", "SELECT a FROM t WHERE b = 'x;y'", "SELECT a FROM t WHERE b = 'x;y'"),
    ("blank line inside a string is not an end", "SELECT 'a\n\nb'", "SELECT 'a\n\nb'"),
    ("semicolon inside a block comment is not an end", "SELECT 1 /* ; */ + 1;", "SELECT 1 /* ; */ + 1"),
    ("semicolon inside a quoted name is not an end", 'SELECT "a;b" FROM t', 'SELECT "a;b" FROM t'),
    ("with clause", "WITH x AS (SELECT 1 AS v) SELECT v FROM x", "WITH x AS (SELECT 1 AS v) SELECT v FROM x"),
    ("with recursive", "WITH RECURSIVE c(n) AS (SELECT 1) SELECT n FROM c", "WITH RECURSIVE c(n) AS (SELECT 1) SELECT n FROM c"),
    ("prose with the word with is not a query", "I answer with care: SELECT 1", "SELECT 1"),
    ("lower-case query", "select a from t", "select a from t"),
    ("upper-case statement preferred over prose select", "please select this: SELECT a FROM t", "SELECT a FROM t"),
    ("upper-case write statement at a line start is kept for the sandbox", "DROP TABLE t", "DROP TABLE t"),
    ("lower-case prose verb is not a statement", "update me later", None),
    ("no query at all", "I do not know.", None),
    ("empty", "", None),
    ("only semicolons", ";;;", None),
    ("only a fence", "```sql\n```", None),
]


@pytest.mark.parametrize("completion, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extraction_rule(completion, expected):
    assert extract_sql(completion) == expected


@pytest.mark.parametrize("value", [None, 3, b"SELECT 1", ["SELECT 1"]], ids=repr)
def test_non_text_yields_none(value):
    assert extract_sql(value) is None


def test_reads_at_most_max_chars():
    assert extract_sql("x" * 50 + " SELECT 1", max_chars=40) is None
    assert extract_sql("x" * 50 + " SELECT 1", max_chars=100) == "SELECT 1"


# Rule 0: a reply over the cap is not read at all, so nothing after the cut can change its reading.
CAP = DEFAULT_LIMITS.max_completion_chars
QUERY = "SELECT count(*) FROM singer"
OVER_THE_CAP = [
    ("a second statement after a short comment is seen",
     QUERY + "; /* note */ DROP TABLE singer", Extracted(QUERY, "DROP TABLE singer")),
    ("a second statement after 200,000 characters of comment: the reply is not read",
     QUERY + "; /*" + "x" * CAP + "*/ DROP TABLE singer", Extracted(None, too_long=True)),
    ("reasoning closed after the cut: the reply is not read",
     "DROP TABLE singer <think>" + "x" * CAP + "</think>" + QUERY, Extracted(None, too_long=True)),
    ("a reply of exactly the cap is read", QUERY + ";" + " " * (CAP - len(QUERY) - 1), Extracted(QUERY)),
    ("one character over the cap is not read", QUERY + ";" + " " * (CAP - len(QUERY)), Extracted(None, too_long=True)),
]


@pytest.mark.parametrize("completion, expected", [c[1:] for c in OVER_THE_CAP], ids=[c[0] for c in OVER_THE_CAP])
def test_a_reply_over_the_cap_is_not_read_at_all(completion, expected):
    assert extract(completion) == expected


def test_a_statement_behind_a_long_comment_is_never_paid(fixture_dbs):
    # Before rule 0 the reader stopped at the cap, inside the comment, missed the DROP and paid 1.0.
    database, gold = str(fixture_dbs["school_sports"]), "SELECT count(*) FROM Team"
    short = verify.verify(gold + "; /*" + "x" * 1000 + "*/ DROP TABLE Team", gold, database)
    hidden = verify.verify(gold + "; /*" + "x" * CAP + "*/ DROP TABLE Team", gold, database)
    assert (short.outcome, short.score) == ("forbidden", 0.0)
    assert (hidden.outcome, hidden.score) == ("no_query", 0.0)
    assert "max_completion_chars" in hidden.detail


def test_the_hostile_huge_completion_stays_no_query(fixture_dbs):
    cases = json.loads((ROOT / "fixtures" / "hostile" / "cases.json").read_text(encoding="utf-8"))["cases"]
    case = next(c for c in cases if c["id"] == "huge-completion")
    text = case["completion_repeat"]["unit"] * case["completion_repeat"]["times"]
    assert len(text) > CAP and case["outcomes"] == ["no_query"]
    found = verify.verify(text, "SELECT count(*) FROM Team", str(fixture_dbs["school_sports"]))
    assert (found.outcome, found.score) == ("no_query", 0.0)


def _cpu_seconds(text: str) -> float:
    """The least CPU time (not wall time: other processes do not add to it) of three extractions."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        extract_sql(text)
        best = min(best, time.process_time() - started)
    return best


@pytest.mark.parametrize("unit, times", [
    ("with ", 10_000), ("with x (", 5_000), ("```", 12_000), ("<think>", 8_000), ("'", 25_000),
    ("/*", 12_000), ("x -- SELECT ", 4_000), ("/*```", 8_000), ("DROP ", 10_000), ("-- ```sql\n", 4_000),
], ids=["many-with", "many-with-paren", "many-fences", "many-think", "many-quotes", "many-comments",
        "selects-in-a-line-comment", "fences-after-a-block-comment", "drops-in-a-line", "commented-fences"])
def test_adversarial_text_is_linear(unit, times):
    # Four times the text must cost about four times the CPU, not sixteen (quadratic). A ratio of
    # CPU times, each the best of three, does not depend on how busy the machine is.
    small, large = _cpu_seconds(unit * times + " SELECT 1"), _cpu_seconds(unit * times * 4 + " SELECT 1")
    assert large < 9 * max(small, 1e-3), f"x4 text cost x{large / max(small, 1e-9):.1f} CPU ({small:.4f} s -> {large:.4f} s)"


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_never_raises_and_never_invents(text):
    found = extract_sql(text)
    assert found is None or (found and found.strip() == found and not found.endswith(";"))
    if found is not None:
        # The query is cut from the text: apart from removed tokens/think blocks, it is a substring.
        assert found in text or "<|" in text or "think>" in text.lower()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["SELECT", "WITH", " ", "\n", "```", "sql", ";", "'", '"', "--", "/*", "*/",
                                 "<think>", "</think>", "a", "(", ")", "AS", "FROM t"]), max_size=60))
def test_never_raises_on_sql_like_noise(parts):
    found = extract_sql("".join(parts))
    assert found is None or isinstance(found, str)


def _end_by_tokens(sql: str) -> int:
    for tok in sql_text.tokenize(sql):
        if (tok.kind == "op" and tok.text == ";") or (tok.kind == "space" and tok.text.count("\n") >= 2):
            return tok.start
    return len(sql)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["SELECT", " ", "\n", "\n\n", " \n \n", ";", "'", "''", '"', "`", "[", "]", "--",
                                 "/*", "*/", "a", "x'0f'", "-", "/", "*"]), max_size=40))
def test_statement_end_reads_as_the_tokenizer_does(parts):
    sql = "".join(parts)
    assert sql[:sql_text.statement_end(sql)].rstrip() == sql[:_end_by_tokens(sql)].rstrip()
