"""`bench-overturns`: published predictions read line by line in dev order, and the per-database counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench import neighbours as bench_neighbours
from harness.bench import overturns as bench_overturns
from harness.common.errors import InputError

ROWS = [{"db_id": "pets_1", "query": "SELECT count(*) FROM pets"}, {"db_id": "pets_1", "query": "SELECT 1"},
        {"db_id": "concert_singer", "query": "SELECT 2"}]


@pytest.mark.parametrize("text, problem", [
    ("SELECT 1\n", "1 lines for Spider's 3 dev rows"),
    ("SELECT 1\tpets_1\nSELECT 2\tconcert_singer\nSELECT 3\n", "line 2: db_id 'concert_singer', but dev row 1 is on "
     "'pets_1'"),
    (b"\xff\xfe", "cannot read predictions"),
], ids=["a file shorter than the dev set is refused", "a db_id out of dev order is refused, naming the line",
        "a file that is not text is refused"])
def test_a_predictions_file_that_does_not_follow_the_dev_set_is_refused(tmp_path, text, problem):
    path = tmp_path / "system.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError, match="system.txt") as caught:
        bench_overturns.read_predictions(path, ROWS)
    assert problem in str(caught.value)


def test_predictions_are_read_one_a_line_with_a_db_id_after_a_tab_left_out_and_other_tabs_kept(tmp_path):
    path = tmp_path / "system.txt"
    path.write_text("SELECT count(*) FROM pets\tpets_1\nSELECT 2\tFROM\tx\nSELECT 3\tconcert_singer\nSELECT 4 -- past "
                    "the dev set\n")
    assert bench_overturns.read_predictions(path, ROWS) == ["SELECT count(*) FROM pets", "SELECT 2\tFROM\tx", "SELECT 3"]


def test_the_table_has_a_row_per_database_and_their_sum():
    table = bench_overturns.markdown({"a": {"rows": 9, "original": 5, "neighbour": 2, "search": 1},
                                      "b": {"rows": 4, "original": 1200, "neighbour": 0, "search": 3}})
    assert table.splitlines()[2:] == ["| a | 5 | 2 | 1 |", "| b | 1,200 | 0 | 3 |", "| all | 1,205 | 2 | 4 |"]


@pytest.mark.real_data
@pytest.mark.slow
def test_the_counts_are_the_grader_verdicts_on_a_bundle_with_neighbours(spider_dir, tmp_path):
    """A right answer in another text, a wrong one the original pays (a constant), and a mismatch:
    each counted where the grader's verdict puts it."""
    plain = tmp_path / "plain"
    plain.mkdir()
    rows = bench_neighbours.stage_dev_bundle(spider_dir, plain, databases={"concert_singer"})
    staged = bench_neighbours.with_neighbours(plain, tmp_path / "staged", tmp_path / "work")
    chosen = [dict(r, dev_index=i) for i, r in enumerate(rows[:6])]
    first = chosen[0]  # "How many singers do we have?": SELECT count(*) FROM singer, 6 on the original
    predictions = {"right": [r["query"] + " -- same" for r in rows[:6]],
                   "mixed": ["SELECT 6"] + ["SELECT 'no'"] * 5}
    counts, overturns = bench_overturns.tally(staged, chosen, predictions)
    c = counts["concert_singer"]
    assert c["rows"] == 12 and c["original"] == 7  # six right answers and the constant
    assert c["neighbour"] + c["search"] == 1 and len(overturns) == 1
    assert overturns[0]["system"] == "mixed" and overturns[0]["gold"] == first["query"]
    assert Path(staged).is_dir()
