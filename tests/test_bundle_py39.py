"""The bundle on CPython 3.9, the oldest it supports: in a Debian bullseye container (python3.9,
standard library only), imported as a package from a read-only mount, as the trainer would."""

from __future__ import annotations

import pytest

from conftest import _unavailable

pytestmark = pytest.mark.docker

IMAGE = "spider-scoring-base:bullseye"

SCRIPT = r"""
import doctest, importlib, json, os, sys
sys.path.insert(0, "/pkgs")
assert sys.version_info[:2] == (3, 9), sys.version
os.environ["TRAINER_BUNDLE_ROOT"] = "/pkgs/bundle_under_test"
reward = importlib.import_module("bundle_under_test.reward")
grader = importlib.import_module("bundle_under_test.grader")
out = {
    "match": reward.compute_score(solution_str="SELECT count(*) FROM Owner", ground_truth="SELECT count(*) FROM Owner"),
    "wrong": reward.compute_score(solution_str="SELECT 1", ground_truth="SELECT count(*) FROM Owner"),
    "tie": grader.grade(output="SELECT 'Dev'", expected="SELECT name FROM Player ORDER BY points DESC LIMIT 1"),
    "forbidden": grader.grade(output="DROP TABLE Owner", expected="SELECT count(*) FROM Owner")["outcome"],
    "batch": reward.trl_reward(["SELECT count(*) FROM Owner"], ground_truth=["SELECT count(*) FROM Owner"]),
    "doctest_failures": sum(doctest.testmod(importlib.import_module("bundle_under_test." + m)).failed
                            for m in ("verify", "sql.verdict", "sql.extract", "sql.compare", "sql.text", "contract.limits",
                                      "contract.shapes", "sql.functions", "sql.expansion", "sql.planner")),
}
verify = importlib.import_module("bundle_under_test.verify")
db = "/pkgs/bundle_under_test/data/databases/pets_club.sqlite"
for name, sql, gold in [
        ("value_cap", "SELECT length(hex(zeroblob(1000)))", "SELECT 2000"),  # capped by SQLite's C API (ctypes)
        ("charged", "SELECT upper('dev') || instr('abc', 'c')", "SELECT 'DEV3'"),
        ("random", "SELECT abs(random()) % 2", "SELECT 1"),
        ("clock", "SELECT date('now')", "SELECT 1"),
        ("runaway", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n "
                    "WHERE upper(i) = ''", "SELECT 1")]:
    out[name] = verify.verify(sql, gold, db, is_sql=True, limits=verify.DEFAULT_LIMITS.replace(budget_floor_steps=2000000)).outcome
nest = "WITH c0(x) AS (SELECT 1)" + "".join(f", c{i}(x) AS (SELECT (SELECT x FROM c{i-1})+(SELECT x FROM c{i-1}))"
                                             for i in range(1, 17)) + " SELECT x FROM c16"
endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
for name, sql, limits in [  # cost model v3 on Python 3.9 and SQLite 3.34
        ("collation", "SELECT name FROM Owner WHERE name = 'x' COLLATE NOCASE", verify.DEFAULT_LIMITS),
        ("program_cap", "SELECT " + ", ".join(str(i) for i in range(300)), verify.DEFAULT_LIMITS.replace(max_program_ops=200)),
        ("program_fits", "SELECT " + ", ".join(str(i) for i in range(40)), verify.DEFAULT_LIMITS.replace(max_program_ops=200)),
        ("expansion", nest, verify.DEFAULT_LIMITS),
        ("watchdog", endless, verify.DEFAULT_LIMITS.replace(cpu_guard_s=0.05, budget_floor_steps=10**15))]:
    out[name] = verify.verify(sql, "SELECT 1", db, is_sql=True, limits=limits).outcome

print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def docker_client(docker_engine):
    import docker
    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        _unavailable(f"image {IMAGE} missing: build it with `make docker-base` (debootstrap, offline)")
    return client


def test_bundle_runs_on_python_39(docker_client, sample_bundle, tmp_path):
    import json
    import shutil
    pkgs = tmp_path / "pkgs"
    shutil.copytree(sample_bundle, pkgs / "bundle_under_test")
    for path in [pkgs, *pkgs.rglob("*")]:  # the container runs as nobody
        path.chmod(0o755 if path.is_dir() else 0o644)
    output = docker_client.containers.run(
        IMAGE, ["python3", "-c", SCRIPT], remove=True, network_disabled=True, read_only=True,
        user="65534:65534", cap_drop=["ALL"], security_opt=["no-new-privileges"],
        environment={"PYTHONDONTWRITEBYTECODE": "1"}, tmpfs={"/tmp": "size=16m"},
        volumes={str(pkgs): {"bind": "/pkgs", "mode": "ro"}}, mem_limit="512m")
    result = json.loads(output.decode().strip().splitlines()[-1])
    assert result["match"] == 1.0 and result["wrong"] == 0.0
    assert result["tie"]["outcome"] == "match"
    assert result["forbidden"] == "forbidden"
    assert result["batch"] == [1.0]
    assert result["doctest_failures"] == 0
    assert (result["value_cap"], result["charged"], result["random"], result["clock"], result["runaway"]) == (
        "prediction_over_cap", "match", "forbidden", "forbidden", "prediction_over_budget")
    assert (result["collation"], result["program_cap"], result["program_fits"], result["expansion"], result["watchdog"]) == (
        "forbidden", "prediction_over_cap", "mismatch", "prediction_over_cap", "infrastructure_timeout")


NEIGHBOUR_SCRIPT = r"""
import doctest, importlib, json, os, sys
sys.path.insert(0, "/pkgs")
assert sys.version_info[:2] == (3, 9), sys.version
os.environ["TRAINER_BUNDLE_ROOT"] = "/pkgs/bundle_under_test"
grader = importlib.import_module("bundle_under_test.grader")
out = {
    "calls": [grader.grade(output=o, expected=e) for o, e in json.loads(sys.argv[1])],
    "doctest_failures": sum(doctest.testmod(importlib.import_module("bundle_under_test." + m)).failed
                            for m in ("neighbours.source", "neighbours.values", "neighbours.mining", "neighbours.proof",
                                      "sql.sandbox", "sql.reading")),
}
print(json.dumps(out))
"""
SEARCHED = [("SELECT count(owner_id) FROM Owner", "SELECT count(*) FROM Owner"),  # right: the whole search runs
            ("SELECT name , city FROM Owner WHERE age >= 41", "SELECT name , city FROM Owner WHERE age > 40"),
            ("SELECT avg(weight) FROM Pet WHERE species = 'dog' AND weight > 1", "SELECT avg(weight) FROM Pet WHERE species = 'dog'"),
            # decided on an edit of the original (the search aimed at the difference: 'dog' inside a longer text)
            ("SELECT avg(weight) FROM Pet WHERE species LIKE '%dog%'", "SELECT avg(weight) FROM Pet WHERE species = 'dog'")]


def test_neighbours_and_the_search_give_the_same_verdicts_on_python_39(docker_client, neighbour_bundle, tmp_path,
                                                                       monkeypatch):
    import json
    import shutil

    from bundle.scoring import entry as scoring_entry
    pkgs = tmp_path / "pkgs"
    shutil.copytree(neighbour_bundle, pkgs / "bundle_under_test")
    for path in [pkgs, *pkgs.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    output = docker_client.containers.run(
        IMAGE, ["python3", "-c", NEIGHBOUR_SCRIPT, json.dumps(SEARCHED)], remove=True, network_disabled=True,
        read_only=True, user="65534:65534", cap_drop=["ALL"], security_opt=["no-new-privileges"],
        environment={"PYTHONDONTWRITEBYTECODE": "1"}, tmpfs={"/tmp": "size=16m"},
        volumes={str(pkgs): {"bind": "/pkgs", "mode": "ro"}}, mem_limit="512m")
    there = json.loads(output.decode().strip().splitlines()[-1])
    assert there["doctest_failures"] == 0  # the seeded draws are pinned in neighbour_source's doctest
    for (completion, gold), got in zip(SEARCHED, there["calls"]):
        here = scoring_entry.score_call(scoring_entry.read_call({"output": completion, "expected": gold}),
                                        root=str(neighbour_bundle), caller="grader")
        assert (got["outcome"], got["explanation"], got["decided_on"], got["searched"]) == \
            (here.outcome, here.detail, here.decided_on, here.searched)
    assert there["calls"][0]["searched"] > 0
    assert there["calls"][-1]["decided_on"].startswith("edit ")  # the edits too run on Python 3.9
