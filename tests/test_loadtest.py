"""The load test: its workload, its checks and its figures; one small run against the real server.

The full figures (5,000 requests at concurrency 32) come from ``python3 -m harness loadtest``;
here a few hundred requests prove that the run, the answer checks and the memory sampling work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.common.errors import InputError
from harness.common.http_client import Endpoint
from harness.common.rows import read_split
from harness.loadtest import run as loadtest
from harness.loadtest.local_server import LocalServer
from harness.loadtest.workload import KINDS, RUNAWAY_SQL, Probe, build_probes, calibrate, first_table, hostile_cases, schedule
from harness.service.settings import ServiceSettings


@pytest.fixture(scope="module")
def eval_path(prepared_sample) -> Path:
    return prepared_sample / "data" / "eval.jsonl"


@pytest.fixture(scope="module")
def server(sample_zip, prepared_sample):
    with LocalServer(sample_zip, ServiceSettings(workers=4), tasks=prepared_sample / "data") as running:
        yield running


# --- workload -----------------------------------------------------------------------------------

def test_probes_cover_every_kind_for_every_row(eval_path):
    rows = read_split(eval_path, "eval")
    probes = build_probes(rows)
    assert set(probes) == set(KINDS)
    assert len(probes["correct"]) == len(rows) == len(probes["hostile"])
    assert {p.label.split("/")[0] for p in probes["wrong"]} == {r.id for r in rows}
    assert [p.envelope["output"] for p in probes["runaway"]] == [RUNAWAY_SQL]
    assert all(p.envelope["expected"] == r.gold for p, r in zip(probes["correct"], rows))


def test_only_quick_hostile_cases_join_the_ordinary_mix():
    cases = hostile_cases()
    assert cases and all("RECURSIVE r(x)" not in text for _id, text in cases)
    ids = {case_id for case_id, _text in cases}
    assert "drop-table" in ids and "recursive-forever" not in ids and "huge-completion" not in ids


def test_a_prompt_without_a_schema_line_is_refused():
    assert first_table("instructions\nsinger(id, name)") == "singer"
    with pytest.raises(InputError, match="schema line"):
        first_table("no schema here")


def test_the_schedule_is_deterministic_and_places_every_runaway():
    probes = {k: [Probe(k, f"{k}-{i}", {}) for i in range(3)] for k in KINDS}
    first = schedule(probes, 1000, runaway_every=100, seed=3)
    assert [p.label for p in first] == [p.label for p in schedule(probes, 1000, runaway_every=100, seed=3)]
    assert [i for i, p in enumerate(first) if p.kind == "runaway"] == list(range(99, 1000, 100))
    counts = {k: sum(1 for p in first if p.kind == k) for k in KINDS}
    assert counts["correct"] > counts["hostile"] > 0 and counts["wrong"] > counts["hostile"]
    assert not any(p.kind == "runaway" for p in schedule(probes, 1000, runaway_every=0))
    with pytest.raises(InputError):
        schedule(probes, 0)


@pytest.mark.parametrize("kind, answer, message", [
    ("correct", (200, {"score": 0.0, "outcome": "mismatch"}), "did not match"),
    ("hostile", (200, {"score": 1.0, "outcome": "match"}), "scored 1.0"),
    ("wrong", (503, {"error": "x"}), "HTTP 503"),
], ids=["a gold that does not match", "a hostile probe scoring", "no score at all"])
def test_calibration_refuses_a_workload_that_is_wrong_before_any_load(kind, answer, message):
    probes = {kind: [Probe(kind, "row/x", {})]}
    with pytest.raises(InputError, match=message):
        calibrate(probes, lambda probe: answer)


# --- figures ------------------------------------------------------------------------------------

def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (loadtest.percentile(values, 50), loadtest.percentile(values, 99), loadtest.percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert loadtest.percentile([7.0], 99) == 7.0


def test_memory_growth_counts_only_workers_present_from_first_to_last_sample():
    mib = loadtest.MiB
    samples = [(0.0, {"1": 20 * mib, "2": 20 * mib}), (1.0, {"1": 21 * mib, "3": 90 * mib}),
               (2.0, {"1": 22 * mib, "3": 95 * mib})]
    summary = loadtest.memory_summary(samples)
    assert summary["max_growth_mib"] == 2.0  # worker 3 came later, worker 2 left: neither counts
    assert summary["workers_seen"] == 3 and summary["workers_throughout"] == 1 and summary["peak_mib"] == 95.0


def test_any_failure_wrong_answer_or_growth_fails_the_verdict():
    phase = {"phase": "mixed", "failed": 0, "wrong_answers": 0, "memory": {"max_growth_mib": 1.0}}
    report = {"warm_up": {"failed": 0, "wrong_answers": 0}, "phases": [phase]}
    assert loadtest.problems_of(report, 16.0) == []
    for change in ({"failed": 1}, {"wrong_answers": 2}, {"memory": {"max_growth_mib": 40.0}}):
        assert loadtest.problems_of({**report, "phases": [{**phase, **change}]}, 16.0)


# --- a small run against the real server -------------------------------------------------------

def test_a_small_load_gets_every_answer_right_with_flat_memory(server, eval_path):
    report = loadtest.run_load(Endpoint.from_url(server.url, token=server.token), eval_path, requests=300, threads=8,
                               runaway_every=100, sample_every=0.5)
    mixed, runaway = report["phases"]
    for phase in (mixed, runaway):
        assert phase["requests"] == 300 and phase["failed"] == 0 and phase["wrong_answers"] == 0, phase["examples"]
        assert phase["throughput_rps"] > 0 and phase["p50_ms"] <= phase["p99_ms"] <= phase["max_ms"]
        assert phase["memory"]["samples"] >= 2 and phase["memory"]["workers_throughout"] >= 1
    assert runaway["by_kind"]["runaway"]["requests"] == 3
    assert report["outcomes"]["prediction_over_budget"] >= 3 and report["outcomes"]["match"] > 0  # each runaway ran to its budget
    assert loadtest.problems_of(report, 16.0) == []


@pytest.mark.parametrize("route, path, requests", [("verify", "/verify", 150), ("ors", "/call", 75)],
                         ids=["NeMo Gym's verify", "an ORS episode a request"])
def test_the_new_routes_hold_under_the_same_load(server, eval_path, route, path, requests):
    report = loadtest.run_load(Endpoint.from_url(server.url, token=server.token), eval_path, requests=requests, threads=8,
                               runaway_every=requests // 3, sample_every=0.5, route=route)
    assert report["route"] == path
    for phase in report["phases"]:
        assert phase["requests"] == requests and phase["failed"] == 0 and phase["wrong_answers"] == 0, phase["examples"]
    assert report["outcomes"]["prediction_over_budget"] >= 3 and report["outcomes"]["match"] > 0
    assert loadtest.problems_of(report, 16.0) == []


def test_an_answer_other_than_the_calibrated_one_is_counted_on_either_route(server, eval_path):
    row = read_split(eval_path, "eval")[0]
    lying = Probe("correct", "row/lie", {"input": row.prompt, "output": row.gold, "expected": row.gold},
                  expected=(0.0, "mismatch"))  # what it will not get: it matches
    phase = loadtest.run_phase(Endpoint.from_url(server.url, token=server.token), [lying] * 8, 4, name="check",
                               sample_every=5, route=loadtest.ROUTES["verify"])
    assert phase["failed"] == 0 and phase["wrong_answers"] == 8 and "row/lie" in phase["examples"][0]


def test_an_answer_other_than_the_calibrated_one_is_counted(server, eval_path):
    row = read_split(eval_path, "eval")[0]
    lying = Probe("correct", "row/lie", {"input": row.prompt, "output": row.gold, "expected": row.gold},
                  expected=(0.0, "mismatch"))  # what it will not get: it matches
    phase = loadtest.run_phase(Endpoint.from_url(server.url, token=server.token), [lying] * 20, 4, name="check", sample_every=5)
    assert phase["failed"] == 0 and phase["wrong_answers"] == 20 and "row/lie" in phase["examples"][0]


def test_the_command_prints_the_figures_and_exits_zero(server, eval_path, capsys, tmp_path):
    (tmp_path / "token").write_text(server.token + "\n")
    assert main(["loadtest", "--url", server.url, "--token-file", str(tmp_path / "token"), "--data", str(eval_path.parents[1]),
                 "--requests", "100", "--threads", "4", "--runaway-every", "0", "--json", str(tmp_path / "lt.json")]) == 0
    out = capsys.readouterr().out
    assert "req/s" in out and "p99 ms" in out and "verdict: pass" in out
    assert (tmp_path / "lt.json").read_text().count('"phase"') == 1


def test_the_command_needs_the_token_of_a_service_it_did_not_start(server, eval_path, capsys, monkeypatch):
    monkeypatch.delenv("SPIDER_GRADER_TOKEN", raising=False)
    assert main(["loadtest", "--url", server.url, "--data", str(eval_path.parents[1]), "--requests", "10"]) == 3
    assert "--token-file" in capsys.readouterr().err
