"""The grader service's worker processes under stress: the hard time limit, killed workers,
memory limits, recycling and graceful shutdown, against the real server on 127.0.0.1.

A request that outlives its worker must get an HTTP error or a closed connection, never a score,
and the worker must be replaced. Runaway queries are made to run long on purpose by raising the
bundle's own step budget (``SPIDER_SCORING_BUDGET_FLOOR_STEPS``) above the service's limits.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from harness.common.rows import read_split
from harness.loadtest.local_server import LocalServer
from harness.loadtest.workload import RUNAWAY_SQL
from harness.service.guard import WATCHDOG_EXIT, Watchdog
from harness.service.settings import MiB, ServiceSettings

LONG_DEADLINE = {"SPIDER_SCORING_BUDGET_FLOOR_STEPS": str(10**13), "SPIDER_SCORING_WALL_GUARD_S": "600"}  # the bundle would let the runaway run on


@pytest.fixture(scope="module")
def row(prepared_sample):
    return read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]


def envelope(row, completion: str) -> dict:
    return {"input": row.prompt, "output": completion, "expected": row.gold}


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def busy_worker(server: LocalServer) -> int | None:
    """The pid of a worker grading right now (``spider_grader_in_flight`` is 1)."""
    for name, value in server.metrics().items():
        if name.startswith("spider_grader_in_flight{") and value >= 1:
            return int(name.split('pid="')[1].split('"')[0])
    return None


def send_in_background(pool, server: LocalServer, body: dict):
    """Start one grading request in a thread; the future gives (status, json) or the transport error."""
    def call():
        try:
            reply = server.request("POST", "/grade", body, timeout=120)
            return reply.status, reply.json
        except (OSError, http.client.HTTPException) as exc:
            return None, exc
    return pool.submit(call)


def assert_replaced(server: LocalServer, old_pid: int, workers: int) -> None:
    wait_for(lambda: old_pid not in server.workers() and len(server.workers()) == workers,
             what=f"worker {old_pid} to be replaced")


# --- the watchdog on its own --------------------------------------------------------------------

def test_the_watchdog_answers_504_on_the_socket_and_exits_when_the_deadline_passes():
    fired, exits = [], []
    guard = Watchdog(fired.append, exit=exits.append)
    guard.start()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        guard.arm(ours, 0.05, "req-1")
        theirs.settimeout(5)
        answer = theirs.recv(65536)
    wait_for(lambda: exits, what="the watchdog to finish")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 504 ") and b"X-Request-Id: req-1" in head
    assert json.loads(body)["error"] == "WorkerTimeout" and "score" not in json.loads(body)
    assert fired == ["envelope_timeout"] and exits == [WATCHDOG_EXIT]


def test_a_disarmed_watchdog_never_fires():
    fired = []
    guard = Watchdog(fired.append, exit=lambda code: fired.append(code))
    guard.start()
    guard.arm(None, 0.05)
    guard.disarm()
    time.sleep(0.2)
    guard.abort("heartbeat_timeout")  # nothing armed: nothing to answer
    assert fired == [] and not guard.armed


# --- time limits --------------------------------------------------------------------------------

def test_a_request_over_the_hard_limit_gets_504_and_its_worker_is_replaced(sample_zip, row):
    settings = ServiceSettings(workers=2, envelope_timeout_s=1.0)
    with LocalServer(sample_zip, settings, env=LONG_DEADLINE) as server:
        before = set(server.workers())
        started = time.monotonic()
        reply = server.request("POST", "/grade", envelope(row, RUNAWAY_SQL), timeout=60)
        assert reply.status == 504 and reply.json["error"] == "WorkerTimeout" and "score" not in reply.json
        assert time.monotonic() - started < 60  # a guard only: the exit's reason below says the watchdog answered
        wait_for(lambda: len(server.workers()) == 2 and set(server.workers()) != before, what="a new worker")
        assert len(set(server.workers()) & before) == 1  # exactly one worker was replaced
        again = server.request("POST", "/grade", envelope(row, row.gold))
        assert again.json["outcome"] == "match"
        assert server.metrics()['spider_grader_worker_exits_total{reason="envelope_timeout"}'] == 1


@pytest.mark.parametrize("sig, answer", [(signal.SIGKILL, None), (signal.SIGABRT, 504)],
                         ids=["SIGKILL: connection closed", "SIGABRT (heartbeat timeout): 504"])
def test_a_worker_killed_mid_request_is_replaced_and_the_client_gets_no_score(sample_zip, row, sig, answer):
    with LocalServer(sample_zip, ServiceSettings(workers=2), env=LONG_DEADLINE) as server, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = send_in_background(pool, server, envelope(row, RUNAWAY_SQL))
        victim = wait_for(lambda: busy_worker(server), what="the runaway request to be in flight")
        os.kill(victim, sig)
        status, body = pending.result(timeout=30)
        if answer is None:  # nothing can answer for a SIGKILLed process: the connection just ends
            assert status is None and isinstance(body, (OSError, http.client.HTTPException))
        else:
            assert status == answer and body["error"] == "WorkerTimeout" and "score" not in body
        assert_replaced(server, victim, 2)
        assert server.request("POST", "/grade", envelope(row, row.gold)).json["score"] == 1.0


def test_sigterm_lets_the_request_in_flight_finish_then_the_server_exits(sample_zip, row):
    env = {"SPIDER_SCORING_BUDGET_FLOOR_STEPS": "30000000"}  # the runaway ends at its step budget, with a score
    server = LocalServer(sample_zip, ServiceSettings(workers=2), env=env).start()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = send_in_background(pool, server, envelope(row, RUNAWAY_SQL))
            wait_for(lambda: busy_worker(server), what="the request to be in flight")
            server.process.send_signal(signal.SIGTERM)
            status, body = pending.result(timeout=30)
        assert status == 200 and body["outcome"] == "prediction_over_budget" and body["score"] == 0.0
        assert server.process.wait(30) == 0
        with pytest.raises(OSError):
            server.request("GET", "/livez", timeout=2)
    finally:
        server.stop()
        server.cleanup()


# --- memory --------------------------------------------------------------------------------------

def test_every_worker_runs_under_its_address_space_limit(sample_zip):
    def limit_of(pid: int) -> list[str]:
        limits = Path(f"/proc/{pid}/limits").read_text()
        return next(line for line in limits.splitlines() if line.startswith("Max address space")).split()[3:5]
    with LocalServer(sample_zip, ServiceSettings(workers=2, worker_memory_bytes=700 * MiB)) as server:
        wait_for(lambda: len(server.workers()) == 2, what="both workers")
        # A worker just forked sets its limit in post_fork, a moment after it appears.
        wait_for(lambda: all(limit_of(pid) != ["unlimited", "unlimited"] for pid in server.workers()),
                 what="post_fork to run in both workers")
        assert [limit_of(pid) for pid in server.workers()] == [[str(700 * MiB)] * 2] * 2


def test_a_worker_out_of_address_space_answers_503_and_is_replaced(sample_zip, row):
    # The ceiling: this worker's own address space when warm, plus 8 MiB; a 64 MiB body cannot fit.
    with LocalServer(sample_zip, ServiceSettings(workers=1)) as probe:
        probe.request("POST", "/grade", envelope(row, row.gold))
        status = Path(f"/proc/{probe.workers()[0]}/status").read_text()
        warm_kib = int(next(line for line in status.splitlines() if line.startswith("VmSize")).split()[1])
    settings = ServiceSettings(workers=1, worker_memory_bytes=warm_kib * 1024 + 8 * MiB, max_batch_bytes=128 * MiB)
    with LocalServer(sample_zip, settings) as server:
        worker = server.workers()[0]
        reply = server.request("POST", "/grade/batch", {"envelopes": [envelope(row, "x" * 64 * MiB)]})
        assert reply.status == 503 and reply.json["error"] == "WorkerMemoryLimit", server.log_tail()
        assert "score" not in reply.json
        assert_replaced(server, worker, 1)
        assert server.request("POST", "/grade", envelope(row, row.gold)).json["score"] == 1.0
        assert server.metrics()['spider_grader_worker_exits_total{reason="memory_error"}'] == 1


def test_a_worker_over_its_resident_memory_ceiling_is_retired_after_answering(sample_zip, row):
    # A ceiling below any Python process: every worker retires after each request it answers.
    with LocalServer(sample_zip, ServiceSettings(workers=1, worker_max_rss_bytes=1 * MiB)) as server:
        pids = set()
        for _ in range(3):
            pids.add(server.workers()[0])
            reply = server.request("POST", "/grade", envelope(row, row.gold))
            assert reply.status == 200 and reply.json["score"] == 1.0  # answered first, then retired
            wait_for(lambda: server.workers() and server.workers()[0] not in pids, what="a fresh worker")
        assert len(pids) == 3
        retired = [json.loads(line) for line in server.log_text().splitlines() if '"worker_retired"' in line]
        assert len(retired) >= 3 and {r["reason"] for r in retired} == {"rss_over_limit"}


def test_workers_are_recycled_without_a_failed_request_or_a_lost_count(sample_zip, row):
    with LocalServer(sample_zip, ServiceSettings(workers=2, max_requests=5)) as server:
        seen = set()
        for _ in range(60):
            seen.update(server.workers())
            assert server.request("POST", "/grade", envelope(row, row.gold)).json["score"] == 1.0
        assert len(seen) > 6  # about one new worker every five requests
        metrics = server.metrics()
        # Every count of the exited workers was folded into the archives, none lost or doubled.
        assert metrics['spider_grader_requests_total{endpoint="/grade",status="200"}'] == 60
        assert metrics['spider_grader_outcomes_total{outcome="match"}'] == 60
        assert metrics['spider_grader_request_seconds_count{endpoint="/grade"}'] == 60
        files = sorted(p.name for p in (server.tmp / "metrics").glob("*.db"))
        assert {"counter_archive.db", "histogram_archive.db"} <= set(files)
        assert len(files) <= 2 + 1 + 3 * (2 + 1), files  # archives, the arbiter's, live workers' (one may be starting)


def test_a_batch_past_its_deadline_answers_the_rest_unscored(sample_zip, row):
    # The first envelope runs to a budget no machine does in 0.5 s (over a second at 100 million steps
    # a second); the hard limit stays at its default, far above what that budget takes on a loaded machine.
    env = {"SPIDER_SCORING_BUDGET_FLOOR_STEPS": "200000000"}
    with LocalServer(sample_zip, ServiceSettings(workers=1, request_timeout_s=0.5), env=env) as server:
        batch = [envelope(row, RUNAWAY_SQL)] + [envelope(row, row.gold)] * 3
        reply = server.request("POST", "/grade/batch", {"envelopes": batch}, timeout=600)
        assert reply.status == 200
        first, *rest = reply.json["results"]
        assert (first["score"], first["outcome"]) == (0.0, "prediction_over_budget")
        assert [(r["error"], r["status"]) for r in rest] == [("RequestDeadline", 504)] * 3
        assert not any("score" in r for r in rest) and reply.json["unscored"] == 3


def test_an_envelope_over_the_hard_limit_costs_a_batch_only_itself_and_those_after_it(sample_zip, row):
    # The runaway never ends on its own (LONG_DEADLINE); the envelopes around it take milliseconds.
    settings = ServiceSettings(workers=1, envelope_timeout_s=3.0)
    with LocalServer(sample_zip, settings, env=LONG_DEADLINE) as server:
        before = server.workers()
        batch = [envelope(row, row.gold), envelope(row, "SELECT 1"), envelope(row, RUNAWAY_SQL), envelope(row, row.gold)]
        reply = server.request("POST", "/grade/batch", {"envelopes": batch}, timeout=120)
        assert reply.status == 200  # not a 504 for the whole batch: each envelope answers for itself
        done, wrong, stuck, after = reply.json["results"]
        assert (done["score"], done["outcome"], wrong["outcome"]) == (1.0, "match", "mismatch")
        assert (stuck["error"], stuck["status"]) == ("WorkerTimeout", 504) and "score" not in stuck
        assert (after["error"], after["status"]) == ("WorkerStopped", 503) and "score" not in after
        assert (reply.json["scored"], reply.json["unscored"]) == (2, 2)
        assert_replaced(server, before[0], 1)
        assert server.request("POST", "/grade", envelope(row, row.gold)).json["outcome"] == "match"
