"""The proxy without Docker: its nginx configuration (a pure function), its settings and their docs,
its container's lockdown, its image inputs, and the entry point that redacts nginx's logs (run on
a stand-in nginx that writes tokens into both streams)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.common import tokens
from harness.common.errors import InputError
from harness.containers import proxy as proxy_image
from harness.containers.public import upstream_timeout_s
from harness.proxy import nginx_conf
from harness.proxy.nginx_conf import ProxySettings, nginx_config
from harness.service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "T" * 20 + "-_" + "9" * 21


def config(**changes) -> str:
    settings = ProxySettings(proxy_workers=2, **changes)
    return nginx_config(settings, upstream="grader-1:8000", token=TOKEN, max_body_bytes=1000, max_batch_bytes=5000,
                        upstream_timeout_s=75)


# --- the configuration ------------------------------------------------------------------------------

def test_the_configuration_buffers_whole_requests_and_never_replays_one():
    text = config()
    for line in ("proxy_request_buffering on;", "proxy_buffering on;", "proxy_next_upstream off;",
                 "upstream spider_grader { server grader-1:8000; }", "listen 8443 ssl;", "reset_timedout_connection on;",
                 "ssl_protocols TLSv1.2 TLSv1.3;", "ssl_certificate /etc/spider-proxy/cert.pem;", "proxy_read_timeout 75s;"):
        assert line in text, line


def test_the_body_limits_are_the_services_own():
    text = config()
    assert "client_max_body_size 1000;" in text  # /grade and everything else
    batch = text.split("location ~ ^(/t/[^/]+)?/(grade/batch|openrlhf|aggregate_metrics)$", 1)[1].split("}", 1)[0]
    assert "client_max_body_size 5000;" in batch
    with pytest.raises(InputError, match="at least"):
        nginx_config(ProxySettings(), upstream="g:1", token=TOKEN, max_body_bytes=10, max_batch_bytes=5, upstream_timeout_s=1)


@pytest.mark.parametrize("seconds, text", [(10, "10s"), (1.5, "1500ms"), (0.0001, "1ms"), (75.0, "75s")])
def test_timeouts_are_written_in_nginx_units(seconds, text):
    assert f"client_body_timeout {text};" in config(client_body_timeout_s=seconds)


def test_the_slow_client_timeouts_come_from_the_settings():
    text = config(client_header_timeout_s=3, client_body_timeout_s=4, send_timeout_s=5, keepalive_timeout_s=6,
                  proxy_connections=77)
    for line in ("client_header_timeout 3s;", "client_body_timeout 4s;", "send_timeout 5s;", "keepalive_timeout 6s;",
                 "worker_connections 77;", "worker_processes 2;"):
        assert line in text, line


def test_the_token_appears_only_in_its_three_maps():
    lines = [line.strip() for line in config().splitlines() if TOKEN in line]
    assert len(lines) == 3 and all(line.startswith(("map $spider_", "map $http_x_api_key")) for line in lines)
    with pytest.raises(InputError):
        nginx_config(ProxySettings(), upstream="g:1", token="short", max_body_bytes=1, max_batch_bytes=1, upstream_timeout_s=1)


def test_every_answer_the_proxy_writes_is_the_services_json_error_shape():
    bodies = re.findall(r"return (\d{3}) '(\{.*?\})';", config())
    assert {status for status, _body in bodies} == {"401", "413", "502", "400"}
    for status, body in bodies:
        data = json.loads(body)
        assert data["status"] == int(status) and data["error"] and data["message"] and "score" not in data
    assert json.loads(dict(bodies)["401"]) == tokens.unauthorized_body()


def test_a_body_nginx_would_read_as_a_variable_or_quote_is_refused():
    for bad in ("it's", "costs $5", "a \\ b"):
        with pytest.raises(ValueError):
            nginx_conf._literal({"message": bad})


def test_the_proxy_waits_longer_than_the_service_may_take():
    settings = ServiceSettings(workers=2, request_timeout_s=30, envelope_timeout_s=4)
    assert upstream_timeout_s(settings) > settings.request_timeout_s + settings.envelope_timeout_s


def test_a_setting_that_is_not_positive_is_refused():
    with pytest.raises(InputError, match="proxy setting send_timeout_s"):
        ProxySettings(send_timeout_s=-1)


def test_every_proxy_setting_is_documented_in_the_docs():
    section = (ROOT / "docs" / "service.md").read_text(encoding="utf-8").split("## Behind the proxy", 1)[1]
    for name, _unit, _meaning in nginx_conf.SETTINGS:
        assert f"`{nginx_conf.settings_table.flag_name(name)}`" in section, name


# --- the container and its image --------------------------------------------------------------------

def test_the_proxy_container_keeps_the_lockdown_and_mounts_its_configuration_read_only(tmp_path):
    cfg = proxy_image.proxy_config("proxy:1", tmp_path, name="p", network="n", listen="0.0.0.0", host_port=443)
    assert cfg["read_only"] is True and cfg["cap_drop"] == ["ALL"] and cfg["security_opt"] == ["no-new-privileges"]
    assert cfg["user"] == "65534:65534" and cfg["ipc_mode"] == "none" and "noexec" in cfg["tmpfs"]["/tmp"]
    assert cfg["volumes"] == {str(tmp_path.resolve()): {"bind": "/etc/spider-proxy", "mode": "ro"}}
    assert cfg["ports"] == {"8443/tcp": ("0.0.0.0", 443)} and cfg["network"] == "n" and "network_mode" not in cfg
    assert cfg["mem_limit"] == cfg["memswap_limit"] > 0


def test_the_package_list_names_nginx_and_parses():
    names = proxy_image.packages()
    assert {"nginx", "nginx-common", "libssl3"} <= set(names) and len(names) == len(set(names))
    assert proxy_image.release_of("ID=debian\nVERSION_CODENAME=bookworm\n") == "bookworm"
    assert proxy_image.release_of("ID=alpine\n") == ""


def test_the_image_copies_only_the_standard_library_packages():
    copied = {p.relative_to(ROOT).as_posix() for p in proxy_image.proxy_sources()}
    assert "harness/proxy/main.py" in copied and "harness/common/tokens.py" in copied
    assert not [n for n in copied if n.startswith(("harness/service/", "harness/containers/", "harness/commands/"))]


def test_a_self_signed_certificate_names_the_server_and_loopback(tmp_path):
    import ssl
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    proxy_image.self_signed(cert, key, ["grader.example.org", "127.0.0.1"])
    decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
    assert ("DNS", "grader.example.org") in decoded["subjectAltName"] and ("IP Address", "127.0.0.1") in decoded["subjectAltName"]
    assert key.stat().st_mode & 0o077 == 0


# --- the entry point: nginx's logs, redacted --------------------------------------------------------

FAKE_NGINX = textwrap.dedent('''\
    import signal, sys, time
    token = open(sys.argv[sys.argv.index("-c") + 1]).read().strip()
    print('{"logger":"proxy.access","path":"/t/' + token + '/grade"}', flush=True)
    sys.stderr.write('2026/12/01 10:00:00 [error] 7#7: *1 client intended to send too large body, request: "POST /t/wrong-'
                     + token[:8] + '/grade HTTP/1.1"\\n')
    sys.stderr.write("nginx: [alert] token " + token + "\\n")
    sys.stderr.flush()
    signal.signal(signal.SIGQUIT, lambda *a: sys.exit(0))
    time.sleep(30)
    sys.exit(9)
''')


def test_the_entry_point_redacts_both_streams_and_stops_nginx_gracefully(tmp_path):
    (tmp_path / "nginx.py").write_text(FAKE_NGINX)
    (tmp_path / "nginx").write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'nginx.py'} \"$@\"\n")
    (tmp_path / "nginx").chmod(0o755)
    (tmp_path / "token").write_text(TOKEN + "\n")
    command = [sys.executable, "-m", "harness.proxy.main", "--nginx", str(tmp_path / "nginx"), "--config",
               str(tmp_path / "token"), "--token-file", str(tmp_path / "token"), "--run-dir", str(tmp_path / "run")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    process.send_signal(signal.SIGTERM)  # becomes SIGQUIT for nginx: it exits 0, not 9
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0
    assert TOKEN not in out + err and TOKEN[:8] not in out + err
    assert json.loads(out.strip())["path"] == "/t/[redacted]/grade"
    records = [json.loads(line) for line in err.splitlines()]
    assert records[0]["level"] == "error" and records[0]["logger"] == "proxy.nginx" and "/t/[redacted]/grade" in records[0]["message"]
    assert records[1]["message"] == "nginx: [alert] token [redacted]"
    assert (tmp_path / "run" / "body").is_dir()
