"""Disputed golds beside what main added while they were written: a reward shape pays a disputed row's
verdict as any row's, prepare records the list and the shape together, and the report shows the
gold breakdown beside the reward curve (docs/disputed-golds.md, docs/reward-shapes.md, docs/grading.md)."""

from __future__ import annotations

import html
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bundle import grader as bundle_grader
from bundle import reward
from bundle import verify as bundle_verify
from bundle.contract import shapes as reward_shapes
from bundle.scoring.index import normalize_gold
from conftest import run_prepare
from harness.common import results as results_mod
from harness.prepare import bundle_data, disputed
from harness.report import compare, render
from harness.report.reward_log import read_reward_log
from harness.report.training_tables import REWARD_HEADING

OWNER_COUNT = "SELECT count(*) FROM Owner"  # pets_club: the neighbours refuse its constant answer
ENTRY = "pets_club-owners"
HINT = {"db_id": "pets_club"}


def _restage(neighbour_bundle: Path, dest: Path, shape: str, mark: bool) -> Path:
    """The sample bundle with neighbours, paying ``shape``; its owner count marked disputed when ``mark``."""
    shutil.copytree(neighbour_bundle, dest)
    path = dest / "data" / "index.json"
    index = json.loads(path.read_text(encoding="utf-8"))
    index["reward_shape"] = reward_shapes.preset(shape).entry()
    if mark:
        for row in index["rows"]:
            if normalize_gold(row["gold"]) == normalize_gold(OWNER_COUNT):
                row["disputed"] = ENTRY
        index["disputed_golds"] = {ENTRY: {"kind": "wrong column", "reason": "a test's reason"}}
    path.write_bytes(bundle_data.dumps_canonical(index))
    return dest


def _constant(root: Path) -> str:
    """The owner count written as a constant: right on the original, wrong on every neighbour."""
    conn = sqlite3.connect(root / "data" / "databases" / "pets_club.sqlite")
    try:
        return f"SELECT {conn.execute(OWNER_COUNT).fetchone()[0]}"
    finally:
        conn.close()


# (shape, what it pays the constant answer when a neighbour refuses it, and when the gold is disputed).
# SQL-R1 pays format + execution + result on a mismatch (1 + 2 - 3); on a match 1 + 2 + 3 and its length
# part: the query is the whole answer (share 1), no think text, half the answer's share of 2048 characters.
SHAPED = [("arctic-text2sql-r1", 0.1, lambda sql: 1.0), ("skyrl-sql", 0.0, lambda sql: 1.0),
          ("sql-r1", 1 + 2 - 3, lambda sql: 1 + 2 + 3 + 1 + len(sql) / 2048 * 0.5)]


@pytest.mark.parametrize("shape, refused, paid", SHAPED, ids=[s for s, _, _ in SHAPED])
def test_a_shaped_reward_pays_a_disputed_row_as_any_row_and_never_its_constant(
        neighbour_bundle, tmp_path, monkeypatch, shape, refused, paid):
    control = _restage(neighbour_bundle, tmp_path / "control", shape, mark=False)
    marked = _restage(neighbour_bundle, tmp_path / "marked", shape, mark=True)
    constant = _constant(marked)
    kwargs = {"data_source": "spider", "solution_str": constant, "ground_truth": OWNER_COUNT, "extra_info": HINT}

    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(control))
    before = reward.compute_score(**kwargs, outcome_fields=True)
    assert (before["outcome"], before["acc"], before["decided_on_neighbour"]) == ("mismatch", 0.0, 1.0)
    assert before["score"] == pytest.approx(refused, abs=1e-12)

    monkeypatch.setenv("TRAINER_BUNDLE_ROOT", str(marked))
    fields = reward.compute_score(**kwargs, outcome_fields=True)
    assert (fields["outcome"], fields["acc"], fields["reward_shape"]) == ("mismatch", 0.0, shape)
    assert fields["decided_on"].endswith(f"{bundle_verify.DISPUTED_MARK}{ENTRY})") and fields["decided_on_neighbour"] == 1.0
    assert fields["score"] == pytest.approx(refused, abs=1e-12)
    right = dict(kwargs, solution_str=OWNER_COUNT)
    assert reward.compute_score(**right) == pytest.approx(paid(OWNER_COUNT), abs=1e-12)
    graded = bundle_grader.grade(output=constant, expected=OWNER_COUNT, extra_info=HINT)
    assert (graded["score"], graded["disputed"]) == (0.0, ENTRY)  # the grader stays binary under every shape


def _listed(tmp_path: Path, prepared_sample: Path) -> tuple[Path, str]:
    """A disputed list naming the first eval gold of the default sample run, and that gold."""
    index = json.loads((prepared_sample / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    row = next(r for r in index["rows"] if r["split"] == "eval")
    entry = {"id": "sample-eval", "db_id": row["db_id"], "gold": row["gold"], "kind": "wrong column",
             "reason": "a reason on one line", "source": {"kind": "read by hand", "detail": "why"},
             "rows": [{"split": "dev", "index": 0, "question": "a question"}]}
    path = tmp_path / "disputed.json"
    path.write_text(json.dumps({"format": disputed.FORMAT, "version": disputed.VERSION, "golds": [entry]}),
                    encoding="utf-8")
    return path, row["gold"]


def test_prepare_records_the_disputed_golds_and_the_reward_shape_together(tmp_path, prepared_sample, capsys):
    listed, gold = _listed(tmp_path, prepared_sample)
    out = tmp_path / "out"
    summary = run_prepare(out, "--sample", "--no-audit", "--neighbours", "none", "--disputed-golds", str(listed),
                          "--reward-shape", "skyrl-sql")
    printed = capsys.readouterr().out
    index = json.loads((out / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    assert index["reward_shape"]["name"] == "skyrl-sql" and set(index["disputed_golds"]) == {"sample-eval"}
    marked = [r for r in index["rows"] if r.get("disputed")]
    assert marked and all(normalize_gold(r["gold"]) == normalize_gold(gold) for r in marked)
    assert summary["settings"]["reward_shape"] == "skyrl-sql" and summary["settings"]["keep_disputed"] is False
    assert summary["disputed"]["rows"]["eval"]
    assert "reward shape: skyrl-sql" in printed and "disputed golds (judged against the gold and its accepted answers)" in printed


def _stage(tmp_path: Path, label: str, scores: list[float]) -> compare.Stage:
    decided = [f"{bundle_verify.DISPUTED_PREFIX}{ENTRY})", "original", "original", "original"]
    rows = [results_mod.RowResult(f"eval-{i:05d}", "pets_club", "q", OWNER_COUNT, "c", "SELECT 1", s,
                                  "match" if s else "mismatch", "", s, d) for i, (d, s) in enumerate(zip(decided, scores))]
    path = tmp_path / f"{label}.jsonl"
    results_mod.write_results(path, rows)
    return compare.Stage(label, str(path), results_mod.read_results(path))


def test_the_report_shows_the_gold_breakdown_beside_the_reward_curve(tmp_path):
    stages = [_stage(tmp_path, "base", [0.0, 0.0, 1.0, 0.0]), _stage(tmp_path, "rl", [1.0, 1.0, 1.0, 0.0])]
    log = tmp_path / "rl-rewards.csv"
    log.write_text("step,reward\n" + "".join(f"{i},{0.1 * i}\n" for i in range(1, 7)), encoding="utf-8")
    report = compare.build_report(stages, reward_logs=[("rl", read_reward_log(log))])
    assert [r.label for r in report.rewards] == ["rl"] and report.by_gold is not None
    assert dict(report.by_gold.groups)[compare.DISPUTED][1].n == 1
    for text, quote in ((render.terminal(report), str), (render.markdown(report), str),
                        (render.html_page(report), html.escape)):
        heading = quote(REWARD_HEADING)
        assert heading in text and "By gold" in text and quote(compare.DISPUTED) in text
        assert text.index(heading) < text.index("By difficulty") < text.index("By gold")
