"""The audit per reward shape: what each shape pays a degenerate policy and the gold, from the audit's outcomes.

Unit: harness.audit.shapes on hand-made outcomes (a policy's mean over its candidates, then its
rows; set-aside answers left out; a match shown wrong paid as a match; warnings above nothing and
for partial credit). End to end: the audit of the sample zip built with ``sql-r1`` finds the same
rows hackable as the binary one (the verdicts do not change with the shape), and its table pays
what the preset pays for each outcome.
"""

from __future__ import annotations

import json

import pytest

from bundle.contract import shapes as reward_shapes
from conftest import run_prepare
from harness.audit import shapes
from harness.audit.catalogue import Candidate
from harness.audit.model import AuditRow, Finding, Scored
from harness.cli import main
from harness.emulator.calls import Call
from harness.prepare import pack

ROW = AuditRow("rl-00000", "rl", "pets_club", "SELECT count(*) FROM Owner")


def scored(policy: str, outcome: str, witness: str | None = "emptied", sql: str = "SELECT 1") -> Scored:
    """A candidate of ``policy`` the bundle gave ``outcome``; when a match, shown wrong on ``witness`` (None: set aside)."""
    paid = outcome == "match"
    return Scored(Candidate(policy, sql), Call(1.0 if paid else 0.0, "scored", outcome=outcome),  # type: ignore[arg-type]
                  Finding(witness) if paid else None)


def section(results: list[tuple[AuditRow, list[Scored]]], index: dict | None = None) -> dict:
    golds = {row: Call(1.0, "scored", outcome="match") for row, _ in results}
    return shapes.section(results, golds, ("rl",), index or {})


# (candidates of one policy on one row) -> the mean each preset pays for that row
MEANS = [
    (["mismatch", "mismatch"], {"binary": 0.0, "skyrl-sql": 0.0, "arctic-text2sql-r1": 0.1, "sql-r1": 0.0}),
    (["match", "mismatch"], {"binary": 0.5, "skyrl-sql": 0.5, "arctic-text2sql-r1": 0.55,
                             "sql-r1": (6 + 1 + len("SELECT 1") / 2048 * 0.5) / 2}),
    (["prediction_error", "no_query"], {"binary": 0.0, "skyrl-sql": -0.5, "arctic-text2sql-r1": 0.0, "sql-r1": -1.0}),
    (["forbidden", "prediction_over_budget", "prediction_over_cap"],
     {"binary": 0.0, "skyrl-sql": 0.0, "arctic-text2sql-r1": 0.0, "sql-r1": -1.0}),
]


@pytest.mark.parametrize("outcomes, expected", MEANS,
                         ids=["two wrong answers that run", "one shown wrong but paid, one not", "an error and no query",
                              "refused, over budget, over cap"])
def test_a_policy_s_expected_reward_is_the_mean_of_what_each_shape_pays_its_candidates(outcomes, expected):
    doc = section([(ROW, [scored("constant", o) for o in outcomes])])
    for name, value in expected.items():
        found = doc["splits"]["rl"]["policies"][name]["constant"]
        assert found["rows"] == 1 and found["mean"] == pytest.approx(value, abs=1e-6), name


def test_rows_are_averaged_after_candidates_and_a_policy_that_does_not_apply_has_no_mean():
    other = AuditRow("rl-00001", "rl", "pets_club", "SELECT name FROM Owner")
    doc = section([(ROW, [scored("table_count", "match"), scored("table_count", "mismatch"),
                          scored("table_count", "mismatch"), scored("table_count", "mismatch")]),
                   (other, [scored("table_count", "match")])])
    found = doc["splits"]["rl"]["policies"]["binary"]
    assert found["table_count"] == {"rows": 2, "mean": pytest.approx((0.25 + 1.0) / 2), "rows_above_nothing": 2}
    assert found["no_join"] == {"rows": 0, "mean": None, "rows_above_nothing": 0}


def test_a_set_aside_answer_possibly_equivalent_to_the_gold_is_left_out():
    doc = section([(ROW, [scored("no_distinct", "match", witness=None), scored("no_distinct", "mismatch")])])
    assert doc["splits"]["rl"]["policies"]["binary"]["no_distinct"] == {"rows": 1, "mean": 0.0, "rows_above_nothing": 0}
    only_aside = section([(ROW, [scored("no_distinct", "match", witness=None)])])
    assert only_aside["splits"]["rl"]["policies"]["binary"]["no_distinct"]["rows"] == 0
    assert only_aside["warnings"] == []


def test_the_gold_and_the_constant_answers_are_paid_what_each_shape_pays():
    doc = section([(ROW, [scored("empty", "mismatch")])])
    assert doc["splits"]["rl"]["gold"]["sql-r1"] == pytest.approx(6 + 1 + len(ROW.gold) / 2048 * 0.5, abs=1e-6)
    assert {n: s["no_query"] for n, s in doc["shapes"].items()} == {
        "binary": 0.0, "skyrl-sql": -1.0, "arctic-text2sql-r1": 0.0, "sql-r1": -1.0}
    assert {n: s["nothing"] for n, s in doc["shapes"].items()} == {
        "binary": 0.0, "skyrl-sql": 0.0, "arctic-text2sql-r1": 0.1, "sql-r1": 0.0}


def test_the_warnings_name_what_the_bundle_s_own_shape_pays_for_nothing():
    results = [(ROW, [scored("value", "match"), scored("empty", "mismatch")])]
    binary = section(results)
    assert len(binary["warnings"]) == 1 and binary["warnings"][0].startswith("binary, rl: SELECT <the gold's value")
    arctic = section(results, {"reward_shape": reward_shapes.preset("arctic-text2sql-r1").entry()})
    assert arctic["own"] == "arctic-text2sql-r1" and len(arctic["warnings"]) == 2
    assert "partial credit" in arctic["warnings"][1] and "paid 0.1 above the least" in arctic["warnings"][1]


def test_a_custom_shape_is_tabulated_beside_the_presets_and_warned_on():
    mine = reward_shapes.custom("lenient", {"match": 1, "mismatch": 0, "no_query": 0.5, "prediction_error": 0,
                                            "forbidden": 0, "prediction_over_budget": 0, "prediction_over_cap": 0})
    doc = section([(ROW, [scored("constant", "no_query")])], {"reward_shape": mine.entry()})
    assert list(doc["shapes"]) == [*reward_shapes.PRESETS, "lenient"]
    assert doc["splits"]["rl"]["policies"]["lenient"]["constant"]["mean"] == 0.5
    assert any("lenient, rl: a constant row" in w for w in doc["warnings"])
    assert "lenient" in shapes.render({"shapes": doc})[0] + shapes.render({"shapes": doc})[1]


def test_the_table_marks_every_cell_above_nothing():
    lines = shapes.render({"shapes": section([(ROW, [scored("value", "match")])])})
    value_line = next(line for line in lines if line.startswith("SELECT <the gold's value"))
    assert value_line.count("!") == 4  # paid as a match under every preset
    empty_line = next(line for line in lines if line.startswith("an empty answer"))
    assert "!" not in empty_line


@pytest.fixture(scope="module")
def audits(tmp_path_factory) -> dict[str, dict]:
    """The audit of the sample zip prepared binary and sql-r1 (neighbours as prepare makes them)."""
    out = {}
    for shape in ("binary", "sql-r1"):
        root = tmp_path_factory.mktemp(f"audit-{shape}")
        run_prepare(root / "out", "--sample", "--no-audit", "--reward-shape", shape)
        pack.pack(root / "out" / "bundle", root / "bundle.zip")
        # Near misses left out: this bundle is built without the separation that closes them.
        assert main(["audit", "--zip", str(root / "bundle.zip"), "--near-miss-families", "none",
                     "--json", str(root / "audit.json")]) == 0
        out[shape] = json.loads((root / "audit.json").read_text(encoding="utf-8"))
    return out


def test_the_audit_finds_the_same_rows_hackable_whatever_the_bundle_pays(audits):
    binary, shaped = audits["binary"], audits["sql-r1"]
    assert binary["splits"] == shaped["splits"] and binary["hackable"] == shaped["hackable"]
    assert binary["shapes"]["splits"] == shaped["shapes"]["splits"]  # the outcomes are the same
    assert (binary["shapes"]["own"], shaped["shapes"]["own"]) == ("binary", "sql-r1")
    assert binary["unscored"] == shaped["unscored"] == []


def test_under_sql_r1_the_gold_earns_six_and_its_length_and_no_policy_earns_a_match_s_worth(audits):
    part = audits["sql-r1"]["shapes"]["splits"]["rl"]
    assert 6 < part["gold"]["sql-r1"] <= 7.5 and part["gold"]["binary"] == 1.0
    means = [p["mean"] for p in part["policies"]["sql-r1"].values() if p["mean"] is not None]
    assert means and max(means) < part["gold"]["sql-r1"] and min(means) >= -1.0
