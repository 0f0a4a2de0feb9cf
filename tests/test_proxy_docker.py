"""The service behind its proxy, for real (Docker, loopback only): HTTPS with a self-signed
certificate, the token (header and path forms, the same table as the service alone), bodies
refused by the proxy, slow clients held by the proxy and not the workers (the same attack on the
bare service, tests/test_slow_clients.py, shows that the check can fail), the two containers' isolation,
`serve --public` (the URL printed once, the token in no log line of either container or of the
command) and the load test through the proxy."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from auth_cases import CASES, fill
from harness.cli import main
from harness.common import tokens
from harness.common.http_client import request, tls_context
from harness.common.rows import read_split
from harness.containers import proxy as proxy_image
from harness.containers.public import PublicService
from harness.containers.service import NETWORK
from harness.proxy.nginx_conf import ProxySettings
from harness.service.settings import ServiceSettings
from slow_clients import SlowClient, latencies, median, start_slow_clients, stop_all

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
HEADER_TIMEOUT, BODY_TIMEOUT = 8.0, 5.0
SLOW_CLIENTS = 50


@pytest.fixture(scope="module")
def deployment(docker_engine, sample_zip, prepared_sample):
    proxy = ProxySettings(client_header_timeout_s=HEADER_TIMEOUT, client_body_timeout_s=BODY_TIMEOUT, proxy_workers=2)
    with PublicService(sample_zip, ServiceSettings(workers=2), proxy, token=tokens.generate(), say=lambda m: None,
                       tasks=prepared_sample / "data") as running:
        yield running


@pytest.fixture(scope="module")
def envelope(prepared_sample) -> dict:
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    return {"input": row.prompt, "output": row.gold, "expected": row.gold}


def grader_requests(deployment: PublicService) -> int:
    """Requests the service's workers answered, from its log (read until two reads agree: the
    engine delivers log lines a moment after they are written)."""
    def count() -> int:
        return sum(1 for line in deployment.grader.logs().splitlines() if '"event": "request"' in line)
    last, deadline = count(), time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = count()
        if now == last:
            return now
        last = now
    return last


def tls_exchange(deployment: PublicService, data: bytes, timeout: float = 15.0) -> bytes:
    """Raw bytes over TLS to the proxy; the whole answer (until the proxy closes or goes quiet)."""
    endpoint = deployment.endpoint()
    assert endpoint.tls is not None
    with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as raw:
        with endpoint.tls.wrap_socket(raw, server_hostname=endpoint.host) as sock:
            sock.sendall(data)
            chunks = []
            try:
                while block := sock.recv(65536):
                    chunks.append(block)
            except (OSError, TimeoutError):
                pass
    return b"".join(chunks)


# --- the token, over HTTPS ----------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_through_the_proxy_the_same_requests_get_through(deployment, envelope, case):
    _id, method, path, header, allowed = case
    token, wrong = deployment.token, deployment.token[:-1] + ("A" if deployment.token[-1] != "A" else "B")
    way_in = deployment.endpoint(token=False)
    reply = request(way_in.host, way_in.port, method, fill(path, token, wrong), envelope if method == "POST" else None,
                    headers={"Authorization": fill(header, token, wrong)} if header else {}, tls=way_in.tls)
    if allowed:
        assert reply.status != 401 and (reply.status == 200 or path.endswith("/batch")), reply.text
    else:
        assert (reply.status, reply.json) == (401, tokens.unauthorized_body())
        assert reply.headers["www-authenticate"] == tokens.REALM


def test_a_score_through_the_path_token_form_alone(deployment, envelope):
    endpoint = deployment.endpoint()  # https://127.0.0.1:PORT/t/TOKEN/..., the certificate verified
    one = endpoint.request("POST", "/grade", envelope)
    batch = endpoint.request("POST", "/grade/batch", {"envelopes": [envelope, {**envelope, "output": "SELECT 2"}]})
    assert (one.status, one.json["score"], one.json["outcome"]) == (200, 1.0, "match")
    assert [r["score"] for r in batch.json["results"]] == [1.0, 0.0]


def test_nemo_gym_and_an_ors_episode_through_the_proxy_over_https(deployment, prepared_sample):
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    text = {"type": "message", "content": [{"type": "output_text", "text": row.gold}]}
    verified = deployment.endpoint().request("POST", "/verify", {"responses_create_params": {"input": list(row.prompt)},
                                                                 "expected": row.gold, "response": {"output": [text]}})
    assert (verified.status, verified.json["reward"], verified.json["spider_outcome"]) == (200, 1.0, "match")
    way_in = deployment.endpoint(token=False)  # ORS's clients send the token as X-API-Key: the proxy takes it
    key = {"X-API-Key": deployment.token, "Authorization": ""}
    opened = request(way_in.host, way_in.port, "POST", "/create_session", {}, headers=key, tls=way_in.tls)
    assert opened.status == 200 and opened.headers["content-type"] == "text/event-stream", opened.text
    sid = opened.text.split("event: task_id\ndata: ", 1)[1].split("\n", 1)[0]
    made = request(way_in.host, way_in.port, "POST", "/create", {"split": "eval", "index": 0},
                   headers={**key, "X-Session-ID": sid}, tls=way_in.tls)
    assert made.status == 200, made.text
    called = request(way_in.host, way_in.port, "POST", "/call", {"name": "submit", "input": {"sql": row.gold}},
                     headers={**key, "X-Session-ID": sid}, tls=way_in.tls)
    end = json.loads(called.text.rsplit("event: end\ndata: ", 1)[1])
    assert end["output"]["reward"] == 1.0 and end["output"]["finished"] is True
    wrong = request(way_in.host, way_in.port, "GET", "/tools", headers={"X-API-Key": "x" * 40, "Authorization": ""},
                    tls=way_in.tls)
    assert (wrong.status, wrong.json) == (401, tokens.unauthorized_body())


def test_plain_http_on_the_tls_port_gets_a_json_refusal(deployment):
    reply = request("127.0.0.1", deployment.port, "GET", "/readyz")
    assert reply.status == 400 and reply.json["error"] == "PlainHttpOnTlsPort"


def test_a_client_without_the_token_is_refused_before_it_sends_its_body(deployment):
    started = time.monotonic()
    answer = tls_exchange(deployment, b"POST /grade HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", timeout=10)
    assert answer.startswith(b"HTTP/1.1 401") and time.monotonic() - started < 8


# --- bodies ---------------------------------------------------------------------------------------------

def test_an_oversized_body_is_refused_by_the_proxy_and_never_reaches_a_worker(deployment, envelope):
    endpoint, limit = deployment.endpoint(), deployment.settings.max_body_bytes
    before = grader_requests(deployment)
    declared = endpoint.request("POST", "/grade", raw=b"x" * (limit + 1))
    chunk = b"x" * 65536
    chunked = tls_exchange(deployment, f"POST {endpoint.prefix}/grade HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                           + b"%x\r\n%s\r\n" % (len(chunk), chunk) * (limit // len(chunk) + 2) + b"0\r\n\r\n")
    assert declared.status == 413 and declared.json["error"] == "BodyTooLarge" and "score" not in declared.json
    assert declared.headers["server"] == "nginx" and chunked.startswith(b"HTTP/1.1 413")
    assert grader_requests(deployment) == before  # neither reached the service
    # A batch may be larger: over /grade's limit, under /grade/batch's, it reaches the service.
    big = endpoint.request("POST", "/grade/batch", {"envelopes": [{**envelope, "output": "-- " + "x" * limit + "\nSELECT 1"}]})
    assert big.status == 200 and big.json["results"][0]["score"] == 0.0 and grader_requests(deployment) == before + 1


# --- slow clients -----------------------------------------------------------------------------------

def test_slow_clients_wait_in_the_proxy_not_in_the_workers(deployment, envelope):
    endpoint = deployment.endpoint()

    def normal() -> bool:
        return endpoint.request("POST", "/grade", envelope, timeout=30).json.get("score") == 1.0
    before, answered = latencies(normal, 20), grader_requests(deployment)
    path = f"{endpoint.prefix}/grade"  # they hold the token: the worst case, past the proxy's token check
    clients = start_slow_clients(lambda i: SlowClient(endpoint.host, endpoint.port, endpoint.tls, path,
                                                      "headers" if i % 2 else "body", again=True), SLOW_CLIENTS)
    pausing = start_slow_clients(lambda i: SlowClient(endpoint.host, endpoint.port, endpoint.tls, path, "body",
                                                      interval=BODY_TIMEOUT + 4), 1, min_bytes=1)
    try:
        during = latencies(normal, 20)
        held = sum(1 for c in clients if c.closes == 0 and c.sent >= 2)
        time.sleep(max(0.0, HEADER_TIMEOUT + 4 - (time.monotonic() - min(c.started for c in clients))))
    finally:
        stop_all(clients + pausing)
    after = latencies(normal, 20)
    headers_closed = [c.closed_after for c in clients if c.part == "headers"]
    print(f"\nnormal requests through the proxy, median of 20: {median(before) * 1000:.1f} ms before, "
          f"{median(during) * 1000:.1f} ms with {SLOW_CLIENTS} slow clients, {median(after) * 1000:.1f} ms after; "
          f"header tricklers dropped after {min(t or 0 for t in headers_closed):.1f}-{max(t or 0 for t in headers_closed):.1f} s, "
          f"the pausing body after {pausing[0].closed_after or 0:.1f} s")
    assert held == SLOW_CLIENTS  # every slow client was connected and trickling while the normal ones ran
    assert median(during) <= 3 * max(median(before), median(after))
    assert grader_requests(deployment) == answered + 40  # only the normal requests reached a worker
    assert all(t is not None and t <= HEADER_TIMEOUT + 4 for t in headers_closed), headers_closed  # dropped
    assert all(c.closes == 0 for c in clients if c.part == "body")  # a byte a second is within the body timeout
    assert pausing[0].closed_after is not None and BODY_TIMEOUT - 1 <= pausing[0].closed_after <= BODY_TIMEOUT + 4


# --- isolation ------------------------------------------------------------------------------------------

def test_only_the_proxy_is_published_and_the_service_sits_on_an_internal_network(deployment):
    grader, proxy = deployment.grader.container, deployment.container
    grader.reload()
    proxy.reload()
    assert not grader.attrs["HostConfig"].get("PortBindings") and not any((grader.attrs["NetworkSettings"]["Ports"] or {}).values())
    assert set(grader.attrs["NetworkSettings"]["Networks"]) == {deployment.grader.network}
    assert deployment.network.attrs["Internal"] is True
    assert set(proxy.attrs["NetworkSettings"]["Networks"]) == {deployment.grader.network, NETWORK}
    assert all(b["HostIp"] == "127.0.0.1" for b in proxy.attrs["NetworkSettings"]["Ports"]["8443/tcp"])
    host = proxy.attrs["HostConfig"]
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert proxy.attrs["Config"]["User"] == "65534:65534" and host["Memory"] == host["MemorySwap"] > 0
    assert proxy.exec_run(["id", "-u"]).output.decode().strip() == "65534"


# --- serve --public: the URL once, the token in no log line ------------------------------------------

def read_until(process: subprocess.Popen, pattern: str, lines: list[str], timeout: float = 300) -> re.Match:
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        found = re.search(pattern, line)
        if found:
            return found
        if time.monotonic() > deadline:
            break
    raise AssertionError("serve never printed " + pattern + ":\n" + "".join(lines))


def token_bearing_requests(port: int, token: str, cert: Path, envelope: dict) -> None:
    """Everything that could put the token into a log: each form, wrong ones, a 413 and a 404 under it."""
    tls = tls_context(str(cert))
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for path, headers, body in [(f"/t/{token}/grade", {}, envelope), ("/grade", {"Authorization": f"Bearer {token}"}, envelope),
                                (f"/t/{wrong}/grade", {}, envelope), ("/grade", {"Authorization": f"Bearer {wrong}"}, envelope),
                                (f"/t/{token}/nowhere/{token}", {}, envelope), (f"/t/{token}/metrics", {}, None)]:
        request("127.0.0.1", port, "POST" if body else "GET", path, body, headers=headers, tls=tls)
    too_big = request("127.0.0.1", port, "POST", f"/t/{token}/grade", raw=b"x" * (2 << 20), tls=tls)
    assert too_big.status == 413  # nginx writes this one's request line, path token and all, to its error log


def test_serve_public_prints_the_url_once_and_no_log_line_holds_the_token(docker_engine, sample_zip, envelope, tmp_path):
    import docker
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    proxy_image.self_signed(cert, key, ["localhost", "127.0.0.1"])  # "your own certificate"
    env = {k: v for k, v in os.environ.items() if k != tokens.ENV}
    command = [sys.executable, "-m", "harness", "serve", "--public", "--zip", str(sample_zip), "--port", "0", "--workers", "2",
               "--cert", str(cert), "--key", str(key)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**env, "PYTHONDONTWRITEBYTECODE": "1"})
    lines: list[str] = []
    try:
        names = read_until(process, r"containers (spider-scoring-proxy-\w+), (spider-scoring-grader-\w+)\)", lines)
        found = read_until(process, r"http:https://localhost:(\d+)/t/([A-Za-z0-9_-]+)/grade", lines)
        port, token = int(found.group(1)), found.group(2)
        token_bearing_requests(port, token, cert, envelope)
        time.sleep(0.5)
        client = docker.from_env()
        logs = {name: client.containers.get(name).logs().decode() for name in names.groups()}
        internal = next(iter(client.containers.get(names.group(2)).attrs["NetworkSettings"]["Networks"]))
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    output = "".join(lines) + rest
    assert output.count(token) == 1  # the URL line; the containers' logs it printed hold no token
    proxy_log, grader_log = logs.values()
    assert "too large body" in proxy_log and "/t/[redacted]/grade" in proxy_log and "/t/[redacted]/grade" in grader_log
    for log in logs.values():
        assert token not in log and token[:-1] not in log
        assert all(json.loads(line) for line in log.splitlines() if line.strip())  # JSON lines, both containers
    for name in names.groups():  # both removed on SIGTERM, and their internal network
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(name)
    with pytest.raises(docker.errors.NotFound):
        client.networks.get(internal)


# --- the load test through the proxy -------------------------------------------------------------------

def test_the_load_test_runs_through_the_proxy_and_prints_its_figures(docker_engine, sample_zip, prepared_sample, capsys):
    # Runaways are left to tests/test_loadtest.py: here the point is the path through the proxy.
    code = main(["loadtest", "--via-proxy", "--zip", str(sample_zip), "--data", str(prepared_sample), "--requests", "300",
                 "--threads", "8", "--runaway-every", "0", "--workers", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "load test on https://127.0.0.1:" in out and "req/s" in out and "verdict: pass" in out
