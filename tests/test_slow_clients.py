"""The control of the proxy's slow-client test (tests/test_proxy_docker.py): the same kind of slow
clients (4 are enough for 2 workers) against the bare service, whose sync workers wait for slow
bodies, delay normal requests far past the bound that test holds the proxy to. No Docker: the
service runs as a local process."""

from __future__ import annotations

import pytest

from harness.common.rows import read_split
from harness.loadtest.local_server import LocalServer
from harness.service.settings import ServiceSettings
from slow_clients import SlowClient, latencies, median, start_slow_clients, stop_all


@pytest.mark.slow
def test_without_the_proxy_the_same_slow_clients_hold_the_workers(sample_zip, prepared_sample):
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    envelope = {"input": row.prompt, "output": row.gold, "expected": row.gold}
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
