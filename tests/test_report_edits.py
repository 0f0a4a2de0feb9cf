"""The edit table: a query's parts read with sqlglot, the edits between two queries judged against
the gold, and their tally over gained and lost rows.

The golds are Spider dev golds (dev.json, quoted as they stand); the baseline's and the stage's SQL are
plausible model variants of them: what supervised tuning and GRPO write on those questions.
"""

from __future__ import annotations

import collections
import json

import pytest

from harness.report import edits as report_edits
from harness.report.edits import Edit, Example, edits_between, tally
from harness.report.sql_shape import read_shape

# (sentence id, gold, baseline's SQL, stage's SQL, the edits expected as "kind (label): detail")
CASES = [
    ("a join the question does not need is dropped",
     "SELECT count(*) FROM singer",
     "SELECT count(*) FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id",
     "SELECT count(*) FROM singer",
     {"join dropped (not needed): - JOIN singer_in_concert", "aliases dropped (closer to the gold): - aliases singer, singer_in_concert"}),
    ("a join the question needs is dropped",
     "SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid WHERE T1.age > 20",
     "SELECT count(*) FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid WHERE T1.age > 20",
     "SELECT count(*) FROM student WHERE age > 20",
     {"join dropped (needed): - JOIN has_pet", "aliases dropped (further from the gold): - aliases has_pet, student"}),
    ("a join the question needs is added",
     "SELECT T2.concert_name , T2.theme , count(*) FROM singer_in_concert AS T1 JOIN concert AS T2 "
     "ON T1.concert_id = T2.concert_id GROUP BY T2.concert_id",
     "SELECT concert_id, count(*) FROM singer_in_concert GROUP BY concert_id",
     "SELECT T2.concert_name , T2.theme , count(*) FROM singer_in_concert AS T1 JOIN concert AS T2 "
     "ON T1.concert_id = T2.concert_id GROUP BY T2.concert_id",
     {"join added (needed): + JOIN concert", "aliases added (closer to the gold): + aliases concert, singer_in_concert",
      "columns changed (closer to the gold): concert_id -> concert_name, theme"}),
    ("a join the question does not need is added",
     "SELECT count(*) FROM pets WHERE weight > 10",
     "SELECT count(*) FROM pets WHERE weight > 10",
     "SELECT count(*) FROM pets AS T1 JOIN has_pet AS T2 ON T1.petid = T2.petid WHERE T1.weight > 10",
     {"join added (not needed): + JOIN has_pet", "aliases added (further from the gold): + aliases has_pet, pets"}),
    ("a self-join added names the table it joins again",
     "SELECT name FROM singer",
     "SELECT name FROM singer",
     "SELECT T1.name FROM singer AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id",
     {"join added (not needed): + JOIN singer", "aliases added (further from the gold): + aliases singer, singer"}),
    ("DISTINCT added where the gold has it",
     "SELECT DISTINCT country FROM singer WHERE age > 20",
     "SELECT country FROM singer WHERE age > 20",
     "SELECT DISTINCT country FROM singer WHERE age > 20",
     {"DISTINCT added (closer to the gold): + DISTINCT"}),
    ("DISTINCT inside an aggregate counts as DISTINCT, not as a column",
     "SELECT count(DISTINCT pettype) FROM pets",
     "SELECT count(DISTINCT pettype) FROM pets",
     "SELECT count(pettype) FROM pets",
     {"DISTINCT dropped (further from the gold): - DISTINCT"}),
    ("a superlative through ORDER BY and LIMIT replaces an aggregate",
     "SELECT YEAR FROM concert GROUP BY YEAR ORDER BY count(*) DESC LIMIT 1",
     "SELECT YEAR, max(cnt) FROM (SELECT YEAR, count(*) AS cnt FROM concert GROUP BY YEAR)",
     "SELECT YEAR FROM concert GROUP BY YEAR ORDER BY count(*) DESC LIMIT 1",
     {"aggregate dropped (closer to the gold): - MAX", "ORDER BY added (closer to the gold): + ORDER BY COUNT(*) DESC",
      "LIMIT added (closer to the gold): + LIMIT 1", "nesting dropped (closer to the gold): - sub-query",
      "columns dropped (closer to the gold): - cnt"}),
    ("an aggregate swapped for another",
     "SELECT avg(pet_age) , max(pet_age) , pettype FROM pets GROUP BY pettype",
     "SELECT avg(pet_age) , min(pet_age) , pettype FROM pets GROUP BY pettype",
     "SELECT avg(pet_age) , max(pet_age) , pettype FROM pets GROUP BY pettype",
     {"aggregate changed (closer to the gold): MIN -> MAX"}),
    ("GROUP BY added where the gold groups",
     "SELECT avg(pet_age) , max(pet_age) , pettype FROM pets GROUP BY pettype",
     "SELECT avg(pet_age) , max(pet_age) , pettype FROM pets",
     "SELECT avg(pet_age) , max(pet_age) , pettype FROM pets GROUP BY pettype",
     {"GROUP BY added (closer to the gold): + GROUP BY pettype"}),
    ("a condition's value changed away from the gold",
     "SELECT count(*) FROM pets WHERE weight > 10",
     "SELECT count(*) FROM pets WHERE weight > 10",
     "SELECT count(*) FROM pets WHERE weight >= 10",
     {"condition changed (further from the gold): weight > 10 -> weight >= 10"}),
    ("an OR branch dropped is one condition dropped",
     "SELECT count(*) FROM concert WHERE YEAR = 2014 OR YEAR = 2015",
     "SELECT count(*) FROM concert WHERE YEAR = 2014 OR YEAR = 2015",
     "SELECT count(*) FROM concert WHERE YEAR = 2014",
     {"condition dropped (further from the gold): - year = 2015"}),
    ("a double-quoted value reads as the string it is",
     'SELECT name FROM singer WHERE country = "France"',
     "SELECT name FROM singer WHERE country = 'france'",
     "SELECT name FROM singer WHERE country = 'France'",
     {"condition changed (closer to the gold): country = 'france' -> country = 'France'"}),
    ("a double-quoted name outside a value's place is the name, whatever its case",
     "SELECT country , count(*) FROM singer GROUP BY country",
     'SELECT "Country" , count(*) FROM singer GROUP BY "Country"',
     "SELECT T1.country , count(*) FROM singer AS T1 GROUP BY T1.country",
     {"aliases added (further from the gold): + aliases singer"}),
    ("the sort direction flipped",
     "SELECT name , country , age FROM singer ORDER BY age DESC",
     "SELECT name , country , age FROM singer ORDER BY age DESC",
     "SELECT name , country , age FROM singer ORDER BY age",
     {"ORDER BY changed (further from the gold): ORDER BY age DESC -> ORDER BY age ASC"}),
    ("LIMIT dropped",
     "SELECT T2.id , T2.name FROM death AS T1 JOIN ship AS t2 ON T1.caused_by_ship_id = T2.id "
     "GROUP BY T2.id ORDER BY count(*) DESC LIMIT 1",
     "SELECT T2.id , T2.name FROM death AS T1 JOIN ship AS t2 ON T1.caused_by_ship_id = T2.id "
     "GROUP BY T2.id ORDER BY count(*) DESC LIMIT 1",
     "SELECT T2.id , T2.name FROM death AS T1 JOIN ship AS t2 ON T1.caused_by_ship_id = T2.id "
     "GROUP BY T2.id ORDER BY count(*) DESC",
     {"LIMIT dropped (further from the gold): - LIMIT 1"}),
    ("a nested comparison replaces a sort",
     "SELECT COUNT(*) FROM CARS_DATA WHERE Accelerate > ( SELECT Accelerate FROM CARS_DATA ORDER BY Horsepower DESC LIMIT 1 );",
     "SELECT COUNT(*) FROM CARS_DATA WHERE Accelerate > ( SELECT Accelerate FROM CARS_DATA ORDER BY Horsepower DESC LIMIT 1 )",
     "SELECT COUNT(*) FROM CARS_DATA WHERE Accelerate > (SELECT max(Accelerate) FROM CARS_DATA)",
     {"aggregate added (further from the gold): + MAX",
      "condition changed (further from the gold): accelerate > (SELECT accelerate FROM cars_data ORDER BY horsepower DESC LIMIT 1)"
      " -> accelerate > (SELECT MAX(accelerate) FROM cars_data)",
      "ORDER BY dropped (further from the gold): - ORDER BY horsepower DESC", "LIMIT dropped (further from the gold): - LIMIT 1"}),
    ("INTERSECT written where the gold intersects",
     "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid JOIN pets AS T3 ON T3.petid = T2.petid "
     "WHERE T3.pettype = 'cat' INTERSECT SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid "
     "JOIN pets AS T3 ON T3.petid = T2.petid WHERE T3.pettype = 'dog'",
     "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid JOIN pets AS T3 ON T3.petid = T2.petid "
     "WHERE T3.pettype = 'cat' AND T3.pettype = 'dog'",
     "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid JOIN pets AS T3 ON T3.petid = T2.petid "
     "WHERE T3.pettype = 'cat' INTERSECT SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid "
     "JOIN pets AS T3 ON T3.petid = T2.petid WHERE T3.pettype = 'dog'",
     {"join added (needed): + JOIN has_pet, pets, student", "aliases added (closer to the gold): + aliases has_pet, pets, student",
      "set operation added (closer to the gold): + INTERSECT", "columns added (closer to the gold): + fname"}),
    ("a column added the question did not ask for",
     "SELECT document_id , document_name , document_description FROM Documents",
     "SELECT document_id , document_name , document_description FROM Documents",
     "SELECT document_id , document_name , document_description , template_id FROM Documents",
     {"columns added (further from the gold): + template_id"}),
    ("another table read with as many joins",
     "SELECT count(*) FROM singer",
     "SELECT count(*) FROM concert",
     "SELECT count(*) FROM singer",
     {"tables changed (closer to the gold): concert -> singer"}),
    ("the same table read again in a sub-query is nesting, not a table",
     "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)",
     "SELECT name FROM singer WHERE age > 30",
     "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)",
     {"aggregate added (closer to the gold): + AVG", "condition changed (closer to the gold): age > 30 -> age > (SELECT AVG(age) FROM singer)",
      "nesting added (closer to the gold): + sub-query"}),
    ("an alias alone changes only the aliases",
     "SELECT T1.name FROM singer AS T1",
     "SELECT name FROM singer WHERE singer.age > 3",
     "SELECT T1.name FROM singer AS T1 WHERE T1.age > 3",
     {"aliases added (closer to the gold): + aliases singer"}),
    ("a value changed outside WHERE is no structural edit",
     "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
     "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
     "SELECT name FROM singer ORDER BY age DESC LIMIT 1 OFFSET 1",
     {"no structural edit (not judged): same parts; a value or operator elsewhere changed"}),
    ("the stage wrote no query",
     "SELECT count(*) FROM singer", "SELECT count(*) FROM singer", None,
     {"no query (not judged): the stage wrote no query"}),
    ("the baseline wrote no query",
     "SELECT count(*) FROM singer", None, "SELECT count(*) FROM singer",
     {"query written (not judged): the baseline wrote no query"}),
    ("prose is not a query sqlglot reads",
     "SELECT count(*) FROM singer", "There are 6 singers.", "SELECT count(*) FROM singer",
     {"unparsed (not judged): the baseline's SQL is not a query sqlglot reads"}),
    ("a gold sqlglot cannot read leaves the edits unjudged",
     "SELECT FROM WHERE", "SELECT name FROM singer", "SELECT DISTINCT name FROM singer",
     {"DISTINCT added (gold unread): + DISTINCT"}),
]


@pytest.mark.parametrize(("gold", "before", "after", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_edits_between_two_queries_judged_against_the_gold(gold, before, after, expected):
    assert {str(e) for e in edits_between(gold, before, after)} == expected


def test_every_kind_the_cases_show_is_in_the_table_order():
    kinds = {e.kind for _, gold, before, after, _ in CASES for e in edits_between(gold, before, after)}
    assert kinds <= set(report_edits.KIND_ORDER)
    # the cases cover every part the issue names: joins, aliases, DISTINCT, aggregates, conditions,
    # ORDER BY and LIMIT, nesting, set operations, columns
    assert {k.rsplit(" ", 1)[0] for k in kinds} >= {"join", "aliases", "DISTINCT", "aggregate", "condition", "ORDER BY",
                                                    "LIMIT", "nesting", "set operation", "columns", "GROUP BY", "tables"}


def test_the_tally_counts_a_row_once_per_line_and_keeps_the_first_example():
    needed = Edit("join dropped", "further", "- JOIN has_pet")
    spare = Edit("join dropped", "closer", "- JOIN concert")
    alias = Edit("aliases dropped", "closer", "- aliases singer")
    table = tally(gained=[("eval-1", (spare, alias)), ("eval-2", (spare,)), ("eval-3", (alias, alias))],
                  lost=[("eval-4", (needed,)), ("eval-5", (needed, alias))])
    assert [(c.kind, c.label, c.gained, c.lost) for c in table] == [
        ("join dropped", "not needed", 2, 0), ("join dropped", "needed", 0, 2), ("aliases dropped", "closer to the gold", 2, 1)]
    assert table[0].gained_example == Example("eval-1", "- JOIN concert") and table[0].lost_example is None
    assert table[2].lost_example == Example("eval-5", "- aliases singer")


# -- real data: the shape agrees with Spider's own parse of every dev gold -------------------------------
AGG_OPS = ("none", "max", "min", "count", "sum", "avg")  # Spider's process_sql.py vocabulary


def _spider_sqls(sql: dict):
    """Every query of Spider's parse: the outer one, FROM and condition sub-queries, set operation sides."""
    yield sql
    for kind, unit in sql["from"]["table_units"]:
        if kind == "sql":
            yield from _spider_sqls(unit)
    for cond in sql["from"]["conds"] + sql["where"] + sql["having"]:
        if isinstance(cond, list):
            for value in cond[3:5]:
                if isinstance(value, dict):
                    yield from _spider_sqls(value)
    for op in ("intersect", "union", "except"):
        if sql[op]:
            yield from _spider_sqls(sql[op])


def _spider_counts(sql: dict) -> dict:
    sqls = list(_spider_sqls(sql))
    aggregates: collections.Counter[str] = collections.Counter()
    distinct = 0
    val_units = [vu for s in sqls for _, vu in s["select"][1]]
    val_units += [c[2] for s in sqls for c in s["where"] + s["having"] if isinstance(c, list)]
    val_units += [vu for s in sqls if s["orderBy"] for vu in s["orderBy"][1]]
    for s in sqls:
        distinct += bool(s["select"][0])
        aggregates.update(AGG_OPS[agg].upper() for agg, _ in s["select"][1] if agg)
    for col_unit in (cu for vu in val_units for cu in vu[1:3] if cu):
        if col_unit[0]:
            aggregates[AGG_OPS[col_unit[0]].upper()] += 1
        distinct += bool(col_unit[2])
    sets = sum(1 for s in sqls for op in ("intersect", "union", "except") if s[op])
    return {"joins": sum(len(s["from"]["table_units"]) - 1 for s in sqls), "set operations": sets,
            "nesting": len(sqls) - 1 - sets, "limits": sum(s["limit"] is not None for s in sqls),
            "order keys": sum(len(s["orderBy"][1]) for s in sqls if s["orderBy"]),
            "group keys": sum(len(s["groupBy"]) for s in sqls), "aggregates": aggregates, "distinct": distinct,
            "conditions": sum(1 for s in sqls for c in s["where"] + s["having"] if isinstance(c, list))}


def _shape_counts(query: str) -> dict:
    shape = read_shape(query)
    assert shape is not None, query
    return {"joins": shape.joins, "set operations": shape.set_operations.total(), "nesting": shape.nesting.total(),
            "limits": shape.limit.total(), "order keys": shape.order.total(), "group keys": shape.grouping.total(),
            "aggregates": shape.aggregates, "distinct": shape.distinct.total(), "conditions": shape.conditions.total()}


@pytest.mark.real_data
def test_every_spider_dev_gold_reads_as_spiders_own_parse_counts_it(spider_dir):
    rows = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    differ = [(r["query"], _spider_counts(r["sql"]), _shape_counts(r["query"])) for r in rows
              if _spider_counts(r["sql"]) != _shape_counts(r["query"])]
    assert len(rows) == 1034 and differ == []


@pytest.mark.real_data
def test_every_spider_train_gold_is_read(spider_dir):
    rows = json.loads((spider_dir / "train_spider.json").read_text(encoding="utf-8"))
    assert [r["query"] for r in rows if read_shape(r["query"]) is None] == []
