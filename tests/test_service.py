"""The grader service against the real server on 127.0.0.1: envelopes from the sample eval split,
batches, malformed and oversized requests, bundle faults as HTTP errors, hostile SQL, concurrent
clients, health, metrics and logs.

The server is ``python3 -m harness.service.server`` (gunicorn, sync workers) started by
``harness.loadtest.local_server.LocalServer`` on an ephemeral loopback port; the zip is packed from
``prepare --sample``'s staged bundle, as ``make pack`` does.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import socket
import sqlite3
import time
import zipfile
from pathlib import Path

import pytest

from harness.common.bundle_loader import load_bundle
from harness.common.completions import read_completions
from harness.common.errors import HarnessError
from harness.common.rows import read_split
from harness.emulator.grader_job import grade_split
from harness.emulator.hostile import load_cases
from harness.loadtest.local_server import LocalServer, request
from harness.loadtest.workload import first_table
from harness.service.settings import SETTINGS, ServiceSettings, flag

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_COMPLETIONS = ROOT / "fixtures" / "sample" / "completions-eval.jsonl"
NOT_A_SCORE = ("score", "ok", "passed")


@pytest.fixture(scope="module")
def eval_rows(prepared_sample):
    return read_split(prepared_sample / "data" / "eval.jsonl", "eval")


@pytest.fixture(scope="module")
def server(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=2)) as running:
        yield running


def envelope(row, completion: str) -> dict:
    """The trainer's envelope for one eval row: the prompt, the model's answer, the gold."""
    return {"input": row.prompt, "output": completion, "expected": row.gold}


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read the whole answer (the server closes the connection after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                block = sock.recv(65536)
            except ConnectionResetError:
                break
            if not block:
                break
            chunks.append(block)
    return b"".join(chunks)


def auth_line(server: LocalServer) -> bytes:
    """The token's header line for a request written by hand."""
    return f"Authorization: Bearer {server.token}\r\n".encode()


def split_response(data: bytes) -> tuple[int, dict]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


# --- health and readiness ---------------------------------------------------------------------

def test_health_reports_the_zip_hash_both_sqlite_versions_and_the_checked_data(server, sample_zip):
    health = server.request("GET", "/health")
    assert health.status == 200
    bundle = health.json["bundle"]
    index = json.loads(zipfile.ZipFile(sample_zip).read("data/index.json"))
    assert bundle["sha256"] == hashlib.sha256(sample_zip.read_bytes()).hexdigest()
    assert bundle["sqlite_version_runtime"] == sqlite3.sqlite_version  # the server runs this Python
    assert bundle["sqlite_version_built"] == index["sqlite_version"]
    assert bundle["databases"] == len(index["databases"]) and bundle["rows"] == len(index["rows"])
    assert health.json["ready"] is True and bundle["ready"] is True
    ready = server.request("GET", "/readyz")
    assert ready.status == 200 and ready.json == {"ready": True, "sha256": bundle["sha256"]}
    assert server.request("GET", "/livez").json["status"] == "alive"


def test_a_bundle_with_a_corrupt_database_never_becomes_ready(sample_zip, tmp_path):
    bad = tmp_path / "corrupt.zip"
    with zipfile.ZipFile(sample_zip) as source, zipfile.ZipFile(bad, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.startswith("data/databases/") and info.filename.endswith(".sqlite"):
                data = data[:-1] + bytes([data[-1] ^ 0xFF])  # one flipped byte: the SHA-256 differs
            target.writestr(info, data)
    server = LocalServer(bad, ServiceSettings(workers=1))
    try:
        with pytest.raises(HarnessError, match="DatabaseUnavailableError"):
            server.start(ready_timeout=30)
        assert server.process.wait(10) == 3  # InputError's exit code: nothing was served
    finally:
        server.stop()
        server.cleanup()


# --- scoring ---------------------------------------------------------------------------------

def test_eval_split_envelopes_get_exactly_the_bundles_own_answers(server, eval_rows, sample_zip, tmp_path):
    completions = read_completions(SAMPLE_COMPLETIONS).one_per_row([r.id for r in eval_rows])
    with load_bundle(sample_zip, tmp_path) as loaded:  # in-process, the grading path of `grade`
        expected = grade_split(loaded, eval_rows, completions)
    answers = [server.request("POST", "/grade", envelope(row, text)) for row, text in zip(eval_rows, completions)]
    assert all(a.status == 200 for a in answers)
    got = [(a.json["score"], a.json["outcome"], a.json["explanation"], a.json["sql"]) for a in answers]
    assert got == [(e.score, e.outcome, e.detail, e.sql) for e in expected]
    scores = [g[0] for g in got]
    assert 0 < scores.count(1.0) < len(scores)  # both right and wrong answers went through


def test_every_gold_scores_one_through_the_root_path_too(server, eval_rows):
    for row in eval_rows:
        reply = server.request("POST", "/", envelope(row, f"```sql\n{row.gold}\n```"))
        assert (reply.status, reply.json["score"], reply.json["outcome"]) == (200, 1.0, "match"), row.id


def test_batch_answers_in_order_with_each_envelopes_own_error(server, eval_rows):
    row = eval_rows[0]
    batch = [envelope(row, row.gold), {"output": row.gold}, envelope(row, "SELECT 1"),
             {"input": row.prompt, "output": row.gold, "expected": "SELECT 'a gold this bundle never saw'"}]
    reply = server.request("POST", "/grade/batch", {"envelopes": batch})
    assert reply.status == 200
    first, missing, wrong, stale = reply.json["results"]
    assert (first["score"], first["outcome"]) == (1.0, "match")
    assert (wrong["score"], wrong["outcome"]) == (0.0, "mismatch")
    assert missing["error"] == "CallArgumentsError" and missing["status"] == 400
    assert stale["error"] == "StaleBundleError" and stale["status"] == 422 and stale["exit_code"] == 24
    assert not any(key in item for item in (missing, stale) for key in NOT_A_SCORE)
    assert (reply.json["scored"], reply.json["unscored"]) == (2, 2)
    bare = server.request("POST", "/grade/batch", [envelope(row, row.gold)])  # a bare list works too
    assert bare.json["results"][0]["score"] == 1.0


@pytest.mark.parametrize("body, error, status", [
    ({"output": "SELECT 1"}, "CallArgumentsError", 400),
    ({"expected": "SELECT count(*) FROM Team"}, "CallArgumentsError", 400),
    ({"output": "SELECT 1", "expected": "SELECT 'not in this bundle'"}, "StaleBundleError", 422),
], ids=["no gold", "no completion", "a gold the bundle does not hold"])
def test_bundle_faults_are_http_errors_with_a_json_body_never_a_score(server, body, error, status):
    reply = server.request("POST", "/grade", body)
    assert reply.status == status and reply.json["error"] == error
    assert reply.json["outcome"] == "infrastructure_error" and reply.json["message"]
    assert not any(key in reply.json for key in NOT_A_SCORE)


@pytest.mark.parametrize("raw, error", [
    (b"{not json", "MalformedJSON"),
    (b'{"output": "\xff\xfe"}', "MalformedJSON"),
    (b"", "MalformedJSON"),
    (b"[" * 100_000, "MalformedJSON"),
    (b'["output", "expected"]', "InvalidEnvelope"),
    (b'"SELECT 1"', "InvalidEnvelope"),
    (b"42", "InvalidEnvelope"),
], ids=["not JSON", "not UTF-8", "empty", "nested too deep", "a list", "a string", "a number"])
def test_malformed_bodies_are_400_with_a_json_body(server, raw, error):
    reply = server.request("POST", "/grade", raw=raw)
    assert reply.status == 400 and reply.json["error"] == error
    assert not any(key in reply.json for key in NOT_A_SCORE)


def test_unknown_paths_and_wrong_methods_are_json_errors(server):
    missing = server.request("GET", "/nowhere")
    assert missing.status == 404 and missing.json["error"] == "NotFound"
    wrong = server.request("GET", "/grade")
    assert wrong.status == 405 and wrong.json["error"] == "MethodNotAllowed" and wrong.headers["allow"] == "POST"


def test_request_ids_come_back_and_bad_ones_are_replaced(server, eval_rows):
    row = eval_rows[0]
    given = server.request("POST", "/grade", envelope(row, row.gold), headers={"X-Request-Id": "trainer-42.a"})
    assert given.headers["x-request-id"] == "trainer-42.a"
    odd = server.request("POST", "/grade", envelope(row, row.gold), headers={"X-Request-Id": "bad id\u00e9"[:6]})
    assert odd.headers["x-request-id"] != "bad id" and len(odd.headers["x-request-id"]) == 16


# --- size limits ------------------------------------------------------------------------------

def test_a_declared_huge_body_is_refused_before_it_is_read(server):
    started = time.monotonic()
    data = raw_exchange(server.port, b"POST /grade HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                     + auth_line(server) + b"Content-Length: 100000000\r\n\r\n{")
    status, body = split_response(data)
    assert status == 413 and body["error"] == "BodyTooLarge" and "score" not in body
    assert time.monotonic() - started < 5  # answered without waiting for 100 MB


def test_a_chunked_body_over_the_limit_is_refused(server):
    limit = server.settings.max_body_bytes
    chunk = b"x" * 65536
    pieces = [b"POST /grade HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + auth_line(server) + b"\r\n"]
    pieces += [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * (limit // len(chunk) + 2) + [b"0\r\n\r\n"]
    status, body = split_response(raw_exchange(server.port, b"".join(pieces)))
    assert status == 413 and body["error"] == "BodyTooLarge"


def test_a_long_completion_under_the_limit_is_graded(server, eval_rows):
    row = eval_rows[0]
    padding = "-- " + "x" * (server.settings.max_body_bytes - 20_000) + "\n"
    reply = server.request("POST", "/grade", envelope(row, padding + row.gold))
    assert reply.status == 200 and reply.json["score"] in (0.0, 1.0)


def test_a_batch_over_the_item_limit_is_refused_whole(server, eval_rows):
    items = [envelope(eval_rows[0], "SELECT 1")] * (server.settings.max_batch_items + 1)
    reply = server.request("POST", "/grade/batch", {"envelopes": items})
    assert reply.status == 413 and reply.json["error"] == "BatchTooLarge"


def test_an_oversized_request_line_is_refused_by_the_http_layer(server):
    reply = server.request("GET", "/" + "a" * 5000)
    assert 400 <= reply.status < 500


# --- hostile SQL and concurrency --------------------------------------------------------------

@pytest.mark.slow
def test_the_hostile_suite_scores_zero_within_its_bounds_and_the_service_keeps_answering(sample_zip, eval_rows):
    row = eval_rows[0]
    cases = load_cases(first_table(row.prompt_text), "/tmp")
    with LocalServer(sample_zip, ServiceSettings(workers=4)) as running:
        def send(case):
            started = time.monotonic()
            body = json.dumps(envelope(row, case.text)).encode()
            if len(body) > running.settings.max_body_bytes:  # refused on its declared length, unread
                head = b"POST /grade HTTP/1.1\r\nHost: x\r\n" + auth_line(running) + b"Content-Length: %d\r\n\r\n" % len(body)
                status, data = split_response(raw_exchange(running.port, head + body[:1000]))
                return case, (status, data), time.monotonic() - started
            reply = running.request("POST", "/grade", raw=body, timeout=60)
            return case, (reply.status, reply.json), time.monotonic() - started
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(send, cases))
        assert sum(1 for _case, (status, _body), _s in results if status == 200) >= len(cases) - 2
        for case, (status, body), _seconds in results:
            if status == 413:
                assert body["error"] == "BodyTooLarge" and len(case.text) > running.settings.max_body_bytes / 2, case.id
                continue
            assert status == 200 and body["score"] == 0.0, (case.id, body)
            if not case.is_sql:  # a raw-SQL case goes through extraction here, which may cut it first
                assert body["outcome"] in case.outcomes, (case.id, body)
        after = running.request("POST", "/grade", envelope(row, row.gold))
        assert after.json["outcome"] == "match"
        assert running.metrics().get('spider_grader_worker_exits_total{reason="envelope_timeout"}') is None


def test_concurrent_clients_get_their_own_answers_and_metrics_sum_over_the_workers(server, eval_rows):
    work = [(row, text) for row in eval_rows
            for text in (row.gold, "SELECT 'wrong'", f"DROP TABLE {first_table(row.prompt_text)}")]
    expected = {i: ("match", "mismatch", "forbidden")[i % 3] for i in range(len(work))}
    before = server.metrics()

    def send(i: int):
        row, text = work[i % len(work)]
        return i, server.request("POST", "/grade", envelope(row, text), headers={"X-Request-Id": f"c-{i}"})
    total = 6 * len(work)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(send, range(total)))
    for i, reply in replies:
        assert reply.status == 200 and reply.headers["x-request-id"] == f"c-{i}"
        assert reply.json["outcome"] == expected[i % len(work)], (i, reply.json)
    after = server.metrics()

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)
    for outcome in ("match", "mismatch", "forbidden"):
        assert delta(f'spider_grader_outcomes_total{{outcome="{outcome}"}}') == total / 3
    assert delta('spider_grader_requests_total{endpoint="/grade",status="200"}') == total
    pids = {json.loads(line)["pid"] for line in server.log_text().splitlines()
            if '"c-' in line and '"request_id"' in line}
    assert len(pids) == server.settings.workers  # both workers answered; the counts above are their sum


# --- metrics, logs, settings ------------------------------------------------------------------

def test_metrics_are_prometheus_text_with_every_outcome(server):
    from prometheus_client.parser import text_string_to_metric_families
    reply = server.request("GET", "/metrics")
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(reply.text)}
    outcomes = {s.labels["outcome"] for s in families["spider_grader_outcomes"].samples}
    assert {"match", "mismatch", "forbidden", "prediction_over_budget", "prediction_over_cap",
            "infrastructure_error", "gold_error"} <= outcomes
    assert {"spider_grader_requests", "spider_grader_request_seconds", "spider_grader_worker_rss_bytes",
            "spider_grader_bundle_info", "spider_grader_in_flight"} <= set(families)
    bundle = families["spider_grader_bundle_info"].samples
    sha = server.request("GET", "/health").json["bundle"]["sha256"]
    assert [(s.labels["sha256"], s.value) for s in bundle] == [(sha, 1.0)]
    rss = families["spider_grader_worker_rss_bytes"].samples
    assert {int(s.labels["pid"]) for s in rss} <= set(server.workers())  # live workers only


def test_every_log_line_is_a_json_object_and_requests_are_logged_with_their_outcome(server, eval_rows):
    row = eval_rows[0]
    server.request("POST", "/grade", envelope(row, row.gold), headers={"X-Request-Id": "log-check-1"})
    time.sleep(0.2)
    records = [json.loads(line) for line in server.log_text().splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "pid", "message"} <= set(r) for r in records)
    mine = [r for r in records if r.get("request_id") == "log-check-1"]
    assert len(mine) == 1 and mine[0]["status"] == 200 and mine[0]["outcome"] == "match" and mine[0]["ms"] > 0
    assert any(r.get("event") == "bundle_checked" and r.get("sha256") for r in records)


def test_every_service_setting_is_documented_in_the_docs():
    section = (ROOT / "docs" / "service.md").read_text(encoding="utf-8").split("## Workers and limits", 1)[1]
    for name, _unit, _meaning in SETTINGS:
        assert f"`{flag(name)}`" in section, name


def test_bundle_errors_map_to_their_http_status(sample_zip, tmp_path):
    from harness.common.outcomes import BUNDLE_ERRORS
    from harness.service.bundle import ServedBundle
    served = ServedBundle.load(sample_zip, tmp_path)
    try:
        errors = served.loaded.module("contract.errors")
        for known in BUNDLE_ERRORS.values():
            mapped = served.classify(getattr(errors, known.name)("boom"))
            assert (mapped.status, mapped.error, mapped.message) == (known.http_status, known.name, "boom")
            assert (mapped.outcome, mapped.exit_code) == (known.outcome, known.exit_code)
        assert served.classify(ValueError("not the bundle's")) is None
        assert served.classify(errors.GoldQueryError("x")).outcome == "gold_error"
    finally:
        served.close()


def test_the_serve_command_runs_locally_and_stops_on_sigterm(sample_zip):
    import os
    import re
    import signal
    import subprocess
    import sys
    # A short graceful timeout: a SIGTERM that reaches a worker still booting is lost (gunicorn installs
    # the worker's handlers after the fork), and the arbiter then waits that long before killing it.
    command = [sys.executable, "-m", "harness", "serve", "--local", "--zip", str(sample_zip), "--port", "0",
               "--workers", "2", "--graceful-timeout", "5"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        port = None
        for line in process.stdout:  # gunicorn says where it listens (port 0: the kernel chose)
            found = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "the server never said where it listens"
        # Keep reading what it logs: a pipe nobody reads fills up (64 KiB), and a server blocked
        # writing its log cannot shut down.
        import threading
        threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
        deadline = time.monotonic() + 30
        while request("127.0.0.1", port, "GET", "/readyz").status != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert request("127.0.0.1", port, "GET", "/readyz").json["ready"] is True
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
