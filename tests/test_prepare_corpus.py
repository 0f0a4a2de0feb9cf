"""`prepare` from question files in Spider's or BIRD's shape and from folders of DDL files
(harness.prepare.corpus, harness.prepare.database_folders).

Tiny hand-written corpora, written into tmp_path, run always: each shape, renamed fields, an eval
file, a folder of DDL files built into empty databases, the errors. Then the public corpora issue 41
names, read from their git mirrors under /work/.mirror (skipped, saying so, where the mirrors are
not): Spider-Syn and Spider-DK on Spider's databases ($SPIDER_DATA), BIRD mini-dev on its DDL files.
Every prepare here is small and runs without neighbours, audit or search databases (well under a
second each).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import run_prepare
from harness.cli import main
from harness.common.errors import InputError
from harness.prepare import bundle_data, corpus

LEAN = ("--neighbours", "none", "--no-audit", "--no-search-prebuild", "--no-build-cache")
MIRRORS = Path("/work/.mirror")

DDL = {
    "shop": "-- a shop\nCREATE TABLE item (\n-- its key\nid INTEGER PRIMARY KEY,\nname TEXT,\nprice REAL\n);\n",
    "zoo": "CREATE TABLE animal (id INTEGER PRIMARY KEY, kind TEXT, legs INTEGER);\n",
    "farm": "CREATE TABLE crop (id INTEGER PRIMARY KEY, name TEXT, acres INTEGER);\n",
}
ROWS = {
    "shop": "INSERT INTO item VALUES (1, 'pen', 1.5), (2, 'ink', 4.0), (3, 'pad', 2.25);",
    "zoo": "INSERT INTO animal VALUES (1, 'cat', 4), (2, 'owl', 2), (3, 'ant', 6);",
    "farm": "INSERT INTO crop VALUES (1, 'rye', 10), (2, 'oat', 5), (3, 'pea', 2);",
}
# (db_id, question, gold): distinct golds per database; the last of each database returns no rows.
QUESTIONS = [
    ("shop", "How many items are there?", "SELECT count(*) FROM item"),
    ("shop", "Name every item.", "SELECT name FROM item"),
    ("shop", "Which items cost over 3?", "SELECT name FROM item WHERE price > 3"),
    ("shop", "Which items cost over 100?", "SELECT name FROM item WHERE price > 100"),
    ("zoo", "How many animals are there?", "SELECT count(*) FROM animal"),
    ("zoo", "Which animals have 4 legs?", "SELECT kind FROM animal WHERE legs = 4"),
    ("zoo", "Which animals have 9 legs?", "SELECT kind FROM animal WHERE legs = 9"),
    ("farm", "How many crops are there?", "SELECT count(*) FROM crop"),
    ("farm", "Which crop covers most acres?", "SELECT name FROM crop ORDER BY acres DESC LIMIT 1"),
    ("farm", "Which crops cover 99 acres?", "SELECT name FROM crop WHERE acres = 99"),
]


def sqlite_folder(root: Path, with_rows: bool = True) -> Path:
    """The tiny databases in Spider's layout, <db_id>/<db_id>.sqlite."""
    for db_id, ddl in DDL.items():
        sql = root / "sql" / f"{db_id}.sql"
        sql.parent.mkdir(parents=True, exist_ok=True)
        sql.write_text(ddl + (ROWS[db_id] if with_rows else ""), encoding="utf-8")
        bundle_data.build_sqlite(sql, root / "database" / db_id / f"{db_id}.sqlite")
    return root / "database"


def ddl_folder(root: Path) -> Path:
    """The tiny databases as BIRD ships its schemas: <db_id>.sql, CREATE TABLE with comments, no rows."""
    root.mkdir(parents=True, exist_ok=True)
    for db_id, ddl in DDL.items():
        (root / f"{db_id}.sql").write_text(ddl, encoding="utf-8")
    return root


def write_json(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    return path


def spider_entries(questions=QUESTIONS) -> list[dict]:
    return [{"db_id": db, "question": q, "query": gold, "query_toks": gold.split()} for db, q, gold in questions]


def read_split(out: Path, name: str) -> list[list[str]]:
    """Each row of a split as [system, user, assistant] contents."""
    lines = (out / "data" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [[m["content"] for m in json.loads(line)["messages"]] for line in lines]


def test_a_spider_shaped_file_holds_out_its_last_databases_for_eval(tmp_path):
    databases = sqlite_folder(tmp_path)
    questions = write_json(tmp_path / "questions.json", spider_entries())
    summary = run_prepare(tmp_path / "out", "--databases", str(databases), "--questions-file", str(questions),
                          "--rows", "4", "--rl-rows", "2", "--eval-rows", "3", *LEAN)
    assert summary["databases"]["eval"] == ["farm"] and summary["databases"]["training"] == ["shop", "zoo"]
    assert "spider shape" in summary["source"] and "held out: farm" in summary["source"]
    assert [row[1] for row in read_split(tmp_path / "out", "eval")] == [q for db, q, _ in QUESTIONS if db == "farm"]
    assert [row[2] for row in read_split(tmp_path / "out", "train")] == [g for _, _, g in QUESTIONS[:4]]
    # rl: the zoo's first two; its empty gold ("9 legs") is left out as for Spider's own files
    assert [row[1] for row in read_split(tmp_path / "out", "rl")] == [q for _, q, _ in QUESTIONS[4:6]]


def test_a_bird_shaped_file_puts_the_evidence_after_the_question(tmp_path):
    databases = sqlite_folder(tmp_path)
    entries = [{"question_id": i, "db_id": db, "question": q, "SQL": gold, "difficulty": "simple",
                "evidence": "" if i == 1 else f"hint {i}"} for i, (db, q, gold) in enumerate(QUESTIONS)]
    questions = write_json(tmp_path / "mini_dev.json", entries)
    summary = run_prepare(tmp_path / "out", "--databases", str(databases), "--questions-file", str(questions),
                          "--rows", "4", "--rl-rows", "0", "--eval-rows", "3", *LEAN)
    assert "bird shape" in summary["source"]
    users = [row[1] for row in read_split(tmp_path / "out", "train")]
    assert users[0] == "How many items are there?\nExternal Knowledge: hint 0"
    assert users[1] == "Name every item."  # empty evidence: the question alone
    assert [row[2] for row in read_split(tmp_path / "out", "train")] == [g for _, _, g in QUESTIONS[:4]]


def test_renamed_fields_are_read_through_the_options(tmp_path):
    """Spider-Syn's shape: the question in SpiderSynQuestion; here the gold and db fields renamed too."""
    databases = sqlite_folder(tmp_path)
    entries = [{"database": db, "SpiderQuestion": q, "SpiderSynQuestion": q.upper(), "gold_sql": gold}
               for db, q, gold in QUESTIONS]
    questions = write_json(tmp_path / "syn.json", entries)
    summary = run_prepare(tmp_path / "out", "--databases", str(databases), "--questions-file", str(questions),
                          "--question-field", "SpiderSynQuestion", "--gold-field", "gold_sql", "--db-field", "database",
                          "--shape", "spider", "--rows", "4", "--rl-rows", "0", "--eval-rows", "3", *LEAN)
    assert summary["rows"]["train"] == 4
    assert [row[1] for row in read_split(tmp_path / "out", "train")] == [q.upper() for _, q, _ in QUESTIONS[:4]]


def test_an_eval_file_is_the_eval_split(tmp_path):
    """The corpus names its split: every question of the eval file is an eval row, none held out."""
    databases = sqlite_folder(tmp_path)
    train = write_json(tmp_path / "train.json", spider_entries(QUESTIONS[:7]))
    dev = write_json(tmp_path / "dev.json", spider_entries(QUESTIONS[7:]))
    summary = run_prepare(tmp_path / "out", "--databases", str(databases), "--questions-file", str(train),
                          "--eval-file", str(dev), "--rows", "5", "--rl-rows", "1", "--eval-rows", "3", *LEAN)
    assert summary["rows_read"] == {"train": 6, "validation": 3}
    assert "eval file" in summary["source"] and "held out" not in summary["source"]
    assert summary["databases"]["training"] == ["shop", "zoo"] and summary["databases"]["eval"] == ["farm"]


def test_an_eval_file_on_a_training_database_is_refused(tmp_path):
    databases = sqlite_folder(tmp_path)
    train = write_json(tmp_path / "train.json", spider_entries(QUESTIONS[:7]))
    dev = write_json(tmp_path / "dev.json", spider_entries(QUESTIONS[6:]))  # a zoo question in the dev file
    with pytest.raises(InputError, match="eval must be on databases no training row saw"):
        main_raising(["--databases", str(databases), "--questions-file", str(train), "--eval-file", str(dev),
                      "--rows", "5", "--rl-rows", "1", "--eval-rows", "3", "--output", str(tmp_path / "out"), *LEAN])


def main_raising(argv: list[str]) -> None:
    """prepare's run with its InputError raised, not printed (to match its message)."""
    from harness.cli import build_parser
    args = build_parser("prepare").parse_args(["prepare", *argv])
    args._module.run(args)


def test_a_folder_of_ddl_files_is_built_into_empty_databases_whose_empty_golds_rl_keeps(tmp_path):
    """BIRD's schemas/<db_id>.sql: built at prepare time, every table empty. Such a database is thin
    (docs/neighbours.md, "Thin databases"), so rl keeps the golds that return nothing on it (its
    neighbours give them rows; where none does the bundle never pays an empty answer); a Spider-layout
    folder of the same databases with rows leaves them out of rl (the first test)."""
    questions = write_json(tmp_path / "questions.json", spider_entries())
    summary = run_prepare(tmp_path / "out", "--databases", str(ddl_folder(tmp_path / "schemas")),
                          "--questions-file", str(questions), "--rows", "2", "--rl-rows", "3", "--eval-rows", "3", *LEAN)
    assert [row[2] for row in read_split(tmp_path / "out", "rl")] == [g for _, _, g in QUESTIONS[2:5]]
    assert summary["skips"] == {}
    staged = tmp_path / "out" / "bundle" / "data"
    index = json.loads((staged / "index.json").read_text(encoding="utf-8"))
    with sqlite3.connect(staged / index["databases"]["shop"]["file"]) as conn:
        assert conn.execute("SELECT count(*) FROM item").fetchone() == (0,)
    assert read_split(tmp_path / "out", "train")[0][0].endswith("item(id, name, price)")


def test_two_database_folders_are_read_as_one(tmp_path):
    """Spider-DK's way: Spider's databases and a folder of new ones (here, one folder of DDL files)."""
    databases = sqlite_folder(tmp_path)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "barn.sql").write_text("CREATE TABLE cow (id INTEGER, name TEXT);\n"
                                               "INSERT INTO cow VALUES (1, 'Daisy');\n", encoding="utf-8")
    entries = spider_entries() + spider_entries([("barn", "Name the cows.", "SELECT name FROM cow")])
    questions = write_json(tmp_path / "questions.json", entries)
    summary = run_prepare(tmp_path / "out", "--databases", str(databases), "--databases", str(tmp_path / "new"),
                          "--questions-file", str(questions), "--rows", "4", "--rl-rows", "0", "--eval-rows", "1", *LEAN)
    assert summary["databases"]["eval"] == ["barn"]


def _bad_ddl(tmp_path: Path) -> list[str]:
    folder = ddl_folder(tmp_path / "schemas")
    (folder / "zoo.sql").write_text("CREATE TABLE animal (id INTEGER,, kind TEXT);\n", encoding="utf-8")
    return ["--databases", str(folder), "--questions-file", str(write_json(tmp_path / "q.json", spider_entries()))]


def _unknown_shape(tmp_path: Path) -> list[str]:
    entries = [{"db_id": "shop", "utterance": "How many items?", "sql": "SELECT count(*) FROM item"}]
    return ["--databases", str(sqlite_folder(tmp_path)), "--questions-file", str(write_json(tmp_path / "q.json", entries))]


def _entry_without_gold(tmp_path: Path) -> list[str]:
    entries = spider_entries()
    del entries[3]["query"]
    return ["--databases", str(sqlite_folder(tmp_path)), "--questions-file", str(write_json(tmp_path / "q.json", entries))]


def _no_database(tmp_path: Path) -> list[str]:
    entries = spider_entries([("castle", "How many towers?", "SELECT count(*) FROM tower")] * 3)
    return ["--databases", str(sqlite_folder(tmp_path)), "--questions-file", str(write_json(tmp_path / "q.json", entries))]


def _twice(tmp_path: Path) -> list[str]:
    databases = sqlite_folder(tmp_path)
    return ["--databases", str(databases), "--databases", str(ddl_folder(tmp_path / "schemas")),
            "--questions-file", str(write_json(tmp_path / "q.json", spider_entries()))]


def _eval_file_alone(tmp_path: Path) -> list[str]:
    return ["--databases", str(sqlite_folder(tmp_path)), "--eval-file", str(write_json(tmp_path / "q.json", []))]


def _two_sources(tmp_path: Path) -> list[str]:
    return ["--databases", str(sqlite_folder(tmp_path)), "--questions", str(tmp_path),
            "--questions-file", str(write_json(tmp_path / "q.json", spider_entries()))]


@pytest.mark.parametrize("flags, message", [
    (_bad_ddl, "zoo.sql: SQLite refuses it (near \",\": syntax error): fix the statement"),
    (_unknown_shape, "in no known shape (fields found: db_id, sql, utterance; known shapes: spider: question, "
                     "query, db_id; bird: question, SQL, db_id, evidence). Name the fields with --question-field NAME"),
    (_entry_without_gold, "entry 3 lacks a non-empty text field 'query' (the gold; fields found: db_id, query_toks, "
                          "question): name the field that holds it with --gold-field NAME"),
    (_no_database, "The questions name databases --databases lacks: castle"),
    (_twice, "database 'farm' is in two --databases folders"),
    (_eval_file_alone, "--eval-file describe(s) question files: give --questions-file FILE too"),
    (_two_sources, "--questions-file reads a question file; --questions and --api-url read Spider's"),
], ids=["a DDL file SQLite refuses", "a file of an unknown shape", "an entry without its gold",
        "a db_id with no database", "a database in two folders", "an eval file alone", "two sources of questions"])
def test_bad_input_is_a_clear_error(tmp_path, capsys, flags, message):
    argv = ["prepare", *flags(tmp_path), "--output", str(tmp_path / "out"), "--rows", "2", "--rl-rows", "1",
            "--eval-rows", "1", *LEAN]
    assert main(argv) == InputError.exit_code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "data").exists()


@pytest.mark.parametrize("counts, eval_rows, unusable, held", [
    ("aabbbcc", 2, "", "c"),
    ("aabbbcc", 3, "", "bc"),
    ("aabbbcc", 99, "", "bc"),  # never the first database: training needs one
    ("aabbbcc", 2, "c", "b"),  # a database that cannot hold eval rows is never held out
    ("aabbbcc", 2, "a", "c"),
    ("aabbbcc", 0, "", ""),
    ("cbbbcaa", 3, "", "ba"),  # by first appearance: c, b, a
], ids=["the last database when it holds enough", "as many as the rows asked", "all but the first at most",
        "skipping an unusable one", "the first usable one trains", "none for no eval row", "in order of appearance"])
def test_which_databases_are_held_out(counts, eval_rows, unusable, held):
    rows = [{"db_id": d} for d in counts]
    assert "".join(corpus.hold_out(rows, eval_rows, lambda db: db not in unusable)) == held


# --- the public corpora of issue 41, from their git mirrors --------------------------------------------

def git_show(repo: str, spec: str, dest: Path) -> Path:
    """One file of a mirrored repository, written to ``dest``; skipped (saying why) without the mirror."""
    git_dir = MIRRORS / repo / "repo"
    if not git_dir.is_dir():
        pytest.skip(f"{git_dir} is absent: the public corpora's git mirrors are not on this machine")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(subprocess.run(["git", "--git-dir", str(git_dir), "show", spec], check=True,
                                    capture_output=True).stdout)
    return dest


@pytest.mark.real_data
def test_spider_syn_reads_its_synonym_questions_with_its_dev_file_as_eval(spider_dir, tmp_path):
    train = git_show("ygan+Spider-Syn", "HEAD:Spider-Syn/train_spider.json", tmp_path / "syn" / "train_spider.json")
    dev = git_show("ygan+Spider-Syn", "HEAD:Spider-Syn/dev.json", tmp_path / "syn" / "dev.json")
    summary = run_prepare(tmp_path / "out", "--databases", str(spider_dir / "database"), "--questions-file", str(train),
                          "--eval-file", str(dev), "--question-field", "SpiderSynQuestion",
                          "--rows", "20", "--rl-rows", "10", "--eval-rows", "10", *LEAN)
    assert summary["rows"] == {"train": 20, "rl": 10, "eval": 10}
    first = json.loads(dev.read_text(encoding="utf-8"))[0]
    assert read_split(tmp_path / "out", "eval")[0][1:] == [first["SpiderSynQuestion"], first["query"]]


@pytest.mark.real_data
def test_spider_dk_holds_out_its_last_databases_and_reads_its_new_ones(spider_dir, tmp_path):
    questions = git_show("ygan+Spider-DK", "HEAD:Spider-DK.json", tmp_path / "dk" / "Spider-DK.json")
    for db_id in ("new_concert_singer", "new_orchestra", "new_pets_1"):
        git_show("ygan+Spider-DK", f"HEAD:database/{db_id}/{db_id}.sqlite",
                 tmp_path / "dk" / "database" / db_id / f"{db_id}.sqlite")
    summary = run_prepare(tmp_path / "out", "--databases", str(spider_dir / "database"),
                          "--databases", str(tmp_path / "dk" / "database"), "--questions-file", str(questions),
                          "--rows", "20", "--rl-rows", "10", "--eval-rows", "20", *LEAN)
    assert summary["databases"]["training"] == ["new_concert_singer"] and summary["databases"]["eval"] == ["singer"]
    assert summary["rows"] == {"train": 20, "rl": 10, "eval": 20}


def test_bird_mini_dev_builds_its_ddl_and_puts_the_evidence_in_the_prompt(tmp_path):
    questions = git_show("bird-bench+mini_dev", "f2f6603b763204df683dab0c70ea187182d14230:llm/data/mini_dev_sqlite.json",
                         tmp_path / "bird" / "mini_dev_sqlite.json")
    for db_id in ("debit_card_specializing", "student_club", "thrombosis_prediction", "toxicology", "financial"):
        git_show("bird-bench+mini_dev", f"2596bf2ba716accab399970f7125c05502860931:bird_evaluation/data/schemas/{db_id}.sql",
                 tmp_path / "bird" / "schemas" / f"{db_id}.sql")
    summary = run_prepare(tmp_path / "out", "--databases", str(tmp_path / "bird" / "schemas"), "--questions-file",
                          str(questions), "--rows", "20", "--rl-rows", "5", "--eval-rows", "20", *LEAN)
    assert "bird shape" in summary["source"] and summary["databases"]["eval"] == ["financial"]
    first = json.loads(questions.read_text(encoding="utf-8"))[0]
    assert read_split(tmp_path / "out", "train")[0][1] == f"{first['question']}\nExternal Knowledge: {first['evidence']}"
    # every table is empty (thin databases): rl keeps the golds that return nothing there
    assert "gold returns no rows (kept out of rl)" not in summary["skips"].get("train", {})
    assert summary["rows"] == {"train": 20, "rl": 5, "eval": 20}


def test_the_help_says_which_shapes_prepare_reads(capsys):
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "in Spider's shape (question, query, db_id" in text and "or BIRD's (question, SQL, db_id, evidence)" in text
    assert all(option in text for option in ("--questions-file", "--eval-file", "--shape", *corpus.FIELD_OPTIONS.values()))
