"""The service's token: its form and sources (harness.common.tokens), who gets through (the table of
tests/auth_cases.py, against the real server on 127.0.0.1), one 401 for every refusal, and the
token in no log line, metric or error body; `serve --local` prints it once, outside the log."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from auth_cases import CASES, fill
from harness.common import tokens
from harness.common.errors import InputError
from harness.common.http_client import request
from harness.common.rows import read_split
from harness.loadtest.local_server import LocalServer
from harness.service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parent.parent


def near_miss(token: str) -> str:
    """A token of the right form that differs from ``token`` in its last character only."""
    return token[:-1] + ("A" if token[-1] != "A" else "B")


@pytest.fixture(scope="module")
def server(sample_zip):
    with LocalServer(sample_zip, ServiceSettings(workers=2)) as running:
        yield running


@pytest.fixture(scope="module")
def envelope(prepared_sample) -> dict:
    row = read_split(prepared_sample / "data" / "eval.jsonl", "eval")[0]
    return {"input": row.prompt, "output": row.gold, "expected": row.gold}


def send(server: LocalServer, method: str, path: str, header: str | None, body: object = None):
    headers = {"Authorization": header} if header is not None else {}
    return request(server.host, server.port, method, path, body, headers=headers)


# --- the token's form and where it comes from -----------------------------------------------------

def test_a_new_token_has_the_form_and_fits_a_path_segment():
    token = tokens.generate()
    assert tokens.check(token, "x") == token and len(token) == 43 and "/" not in token and token != tokens.generate()


@pytest.mark.parametrize("bad", ["short", "x" * 31, "x" * 257, "a" * 40 + "/", "a" * 40 + " b", "é" * 40],
                         ids=["too short", "one short", "too long", "a slash", "a space", "not ASCII"])
def test_a_malformed_token_is_refused_naming_its_source(bad):
    with pytest.raises(InputError, match="from the file /x/token .*secrets.token_urlsafe"):
        tokens.check(bad, "the file /x/token")


def test_sources_file_env_created_both_and_none(tmp_path):
    path = tmp_path / "dir" / "token"
    created, how = tokens.from_sources(path, {}, create=True)
    assert "new token written" in how and path.read_text().strip() == created
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens.from_sources(path, {}, create=True)[0] == created  # kept, never overwritten
    assert tokens.from_sources(None, {tokens.ENV: created}) == (created, "$SPIDER_GRADER_TOKEN")
    assert tokens.from_sources(None, {}) == (None, "")
    with pytest.raises(InputError, match="given twice"):
        tokens.from_sources(path, {tokens.ENV: created})
    with pytest.raises(InputError, match="cannot read the grader token file"):
        tokens.from_sources(tmp_path / "missing", {})


@pytest.mark.parametrize("text, secrets, expected", [
    ("GET /t/abc/grade", (), "GET /t/[redacted]/grade"),
    ('"request": "POST /t/abc?x=1 HTTP/1.1"', (), '"request": "POST /t/[redacted]?x=1 HTTP/1.1"'),
    ("GET /t%2Fabc/grade", (), "GET /t%2F[redacted]/grade"),
    ("token SECRET in a message", ("SECRET",), "token [redacted] in a message"),
    ("/tmp/metrics and /opt/t", (), "/tmp/metrics and /opt/t"),
], ids=["a path token", "in a JSON log line", "an encoded slash", "the token anywhere", "other paths untouched"])
def test_redaction(text, secrets, expected):
    assert tokens.redact(text, secrets) == expected


def test_the_comparison_is_of_equal_length_digests():
    check = tokens.TokenCheck("a" * 40)
    assert check.matches("a" * 40)
    assert not any(check.matches(g) for g in (None, "", "a" * 39, "a" * 41, "b" * 40, "a" * 40 + "\udcff"))


# --- who gets through -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_who_gets_through(server, envelope, case):
    _id, method, path, header, allowed = case
    wrong = near_miss(server.token)
    reply = send(server, method, fill(path, server.token, wrong), fill(header, server.token, wrong),
                 envelope if method == "POST" else None)
    if allowed:  # the endpoint's own answer (a batch of one bare envelope is its 400)
        assert reply.status != 401, reply.text
        assert reply.status == 200 or path.endswith("/batch"), reply.text
    else:
        assert (reply.status, reply.json) == (401, tokens.unauthorized_body())  # one answer for every refusal
        assert reply.headers["www-authenticate"] == tokens.REALM


def test_a_percent_encoded_path_token_is_not_the_token(server, envelope):
    encoded = "/t/" + "".join(f"%{ord(c):02X}" for c in server.token) + "/grade"
    assert send(server, "POST", encoded, None, envelope).status == 401


def test_a_refusal_holds_no_worker_for_a_declared_huge_body(server, envelope):
    started = time.monotonic()
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"POST /grade HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{")
        head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 401") and time.monotonic() - started < 5
    assert server.request("POST", "/grade", envelope).json["score"] == 1.0


# --- the token in no log line, metric or error body ----------------------------------------------

def test_the_token_is_in_no_log_line_metric_or_error_body(server, envelope):
    token, wrong = server.token, near_miss(server.token)
    bodies = []
    for path, header in [(f"/t/{token}/grade", None), (f"/t/{wrong}/grade", None), ("/grade", f"Bearer {wrong}"),
                         (f"/t/{token}/{token}", None), (f"/t/{token}/grade/{token}", None), (f"/{token}", f"Bearer {token}"),
                         (f"/t/{token}/health", None)]:
        for method in ("POST", "GET", "PUT"):
            bodies.append(send(server, method, path, header, envelope if method != "GET" else None).text)
    metrics = server.request("GET", "/metrics").text
    time.sleep(0.3)  # the last access lines
    log = server.log_text()
    assert log.count("/t/[redacted]/") >= 6  # the requests were logged, their path tokens redacted
    for text in (log, metrics, *bodies):
        assert token not in text and wrong not in text


def test_the_server_refuses_to_start_without_a_token(sample_zip, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != tokens.ENV}
    command = [sys.executable, "-m", "harness.service.server", "--zip", str(sample_zip), "--bind", "127.0.0.1:0"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 3 and "needs a token" in done.stderr and "--token-file" in done.stderr
    (tmp_path / "token").write_text("too short\n")
    done = subprocess.run([*command, "--token-file", str(tmp_path / "token")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 3 and str(tmp_path / "token") in done.stderr


def test_serve_local_prints_the_url_once_and_logs_no_token(sample_zip):
    env = {k: v for k, v in os.environ.items() if k != tokens.ENV}
    # A short graceful timeout: a SIGTERM that reaches a worker still booting is lost (gunicorn installs
    # the worker's handlers after the fork), and the arbiter then waits that long before killing it.
    command = [sys.executable, "-m", "harness", "serve", "--local", "--zip", str(sample_zip), "--port", "0", "--workers", "2",
               "--graceful-timeout", "5"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**env, "PYTHONDONTWRITEBYTECODE": "1"})
    lines = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"http:http://127\.0\.0\.1:(\d+)/t/([A-Za-z0-9_-]+)/grade", line)
            if found:
                break
        assert found, "".join(lines)
        port, token = int(found.group(1)), found.group(2)
        deadline = time.monotonic() + 30
        while request("127.0.0.1", port, "GET", "/readyz").status != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert request("127.0.0.1", port, "POST", f"/t/{token}/grade", {"output": "x"}).status == 400  # through
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines) + rest
    assert output.count(token) == 1  # the URL line, nowhere else
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert any(r.get("path") == "/t/[redacted]/grade" for r in records)
