"""Slow clients against the bare service (no proxy in front), as a process on 127.0.0.1.

Header tricklers need no token (the token is in the head): they must never hold a worker. The
worker (harness.service.worker) keeps a connection in its selector until the whole head is in,
answers 408 past ``--header-timeout``, and an unauthorised body is not read past a short bound.
A slow *body* with the token still holds a worker up to ``--envelope-timeout``: that is the
control of the proxy's test (tests/test_proxy_docker.py), which shows that its check can fail.
The checks decide by the order of events and by counts, not by seconds.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness.common.rows import read_split
from harness.loadtest.local_server import LocalServer
from harness.service.settings import ServiceSettings
from slow_clients import SlowClient, latencies, median, start_slow_clients, stop_all

pytestmark = pytest.mark.slow


@pytest.fixture
def envelope(prepared_sample) -> dict:
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    return {"input": row.prompt, "output": row.gold, "expected": row.gold}


def test_fifty_header_tricklers_hold_no_worker_of_two(sample_zip, envelope):
    # 50 clients trickle their headers a byte a second, without the token, reconnecting when
    # dropped. Every normal request must be answered while every one of them is still connected
    # and trickling: had any held a worker, a normal request would have waited for a worker to be
    # freed, which only the end of a trickler's connection does (gunicorn's sync worker read heads
    # with no limit; the arbiter killed it 15 s later for a missed heartbeat).
    with LocalServer(sample_zip, ServiceSettings(workers=2, header_timeout_s=600)) as bare:
        def normal() -> bool:
            return bare.request("POST", "/grade", envelope, timeout=30).json.get("score") == 1.0
        before = latencies(normal, 10)
        clients = start_slow_clients(lambda i: SlowClient(bare.host, bare.port, None, "/grade", "headers",
                                                          again=True), 50, min_bytes=2)
        try:
            during = latencies(normal, 20)
            still = [c for c in clients if c.is_alive() and c.closes == 0]
        finally:
            stop_all(clients)
        after = latencies(normal, 10)
        exits = {k: v for k, v in bare.metrics().items() if k.startswith("spider_grader_worker_exits_total")}
    print(f"\n50 header tricklers, 2 workers: median {median(before) * 1000:.1f} ms before, "
          f"{median(during) * 1000:.1f} ms during, {median(after) * 1000:.1f} ms after")
    assert len(still) == 50  # each trickler connected and never answered while the normal requests ran
    assert not any(exits.values()), exits  # no worker was stopped either


def test_a_head_not_in_within_the_timeout_is_answered_408_and_counted(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=2, header_timeout_s=1)) as bare:
        clients = start_slow_clients(lambda i: SlowClient(bare.host, bare.port, None, "/grade", "headers",
                                                          interval=0.5), 3, min_bytes=1)
        for client in clients:
            client.join(30)
        figures = bare.metrics()
        log = bare.log_text()
    assert all(c.answer.startswith(b"HTTP/1.1 408 Request Timeout") for c in clients), [c.answer[:60] for c in clients]
    assert all(b'"error": "RequestHeaderTimeout"' in c.answer for c in clients)
    assert figures['spider_grader_errors_total{error="RequestHeaderTimeout"}'] == 3
    assert figures['spider_grader_requests_total{endpoint="other",status="408"}'] == 3
    assert log.count('"event": "slow_client"') == 3


def test_an_unauthorised_slow_body_is_answered_401_without_holding_its_worker(sample_zip):
    # Content-Length 1,000 sent a byte every half second: the 401 comes once the short read bound
    # passes, the worker carries on (before, it read on until the arbiter killed it for a missed
    # heartbeat, and the client never saw its 401).
    with LocalServer(sample_zip, ServiceSettings(workers=2, envelope_timeout_s=1)) as bare:
        workers = bare.workers()
        client = SlowClient(bare.host, bare.port, None, "/grade", "body", interval=0.5, body_bytes=1000)
        client.start()
        client.join(60)
        assert client.answer.startswith(b"HTTP/1.1 401"), client.answer[:80]
        assert bare.workers() == workers
        assert client.sent < 1000


def test_a_worker_the_arbiter_stops_for_a_missed_heartbeat_is_counted(sample_zip):
    # A worker frozen (SIGSTOP: swapped out, a debugger, a stuck C call) sends no heartbeat: the
    # arbiter sends SIGABRT, then SIGKILL. No watchdog answered, so only the arbiter can count it.
    with LocalServer(sample_zip, ServiceSettings(workers=2, envelope_timeout_s=1)) as bare:
        frozen = bare.workers()[0]
        os.kill(frozen, signal.SIGSTOP)
        deadline = time.monotonic() + 120
        while frozen in bare.workers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert frozen not in bare.workers(), "the arbiter never stopped the frozen worker"
        figures = bare.metrics()
        log = bare.log_text()
    assert figures['spider_grader_worker_exits_total{reason="heartbeat_timeout"}'] == 1
    assert '"reason": "heartbeat_timeout"' in log


def test_without_the_proxy_slow_bodies_with_the_token_hold_the_workers(sample_zip, envelope):
    # Each slow body holds a worker until the watchdog's hard limit (2 s here); the clients come back,
    # as an attack would. The proxy test's check (during within 3x the baseline) fails here.
    with LocalServer(sample_zip, ServiceSettings(workers=2, envelope_timeout_s=2)) as bare:
        def normal() -> bool:
            return bare.request("POST", "/grade", envelope, timeout=60).json.get("score") == 1.0
        before = latencies(normal, 10)
        clients = start_slow_clients(lambda i: SlowClient(bare.host, bare.port, None, f"/t/{bare.token}/grade", "body",
                                                          again=True), 4, min_bytes=1)
        try:
            during = latencies(normal, 3)
        finally:
            stop_all(clients)
    print(f"\nwithout the proxy: median {median(before) * 1000:.1f} ms before, {median(during) * 1000:.1f} ms with 4 slow clients")
    assert median(during) > 3 * median(before)
