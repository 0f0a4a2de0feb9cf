"""The proxy's nginx configuration, written from its settings by a pure function (``nginx_config``).

What the proxy does for the grader service's sync workers, and where in the text below:

* **TLS** ends here (TLS 1.2 and 1.3; the certificate and key are files mounted read-only);
* **the token** is checked before a byte of the body is read (maps on the ``Authorization`` header
  and the path form ``/t/TOKEN``, the same rules as the service's): a client without it gets the
  service's own 401 body and never holds a connection past the header timeout;
* **whole requests**: ``proxy_request_buffering`` reads the entire body (to memory, or a file on the
  container's tmpfs) before a connection to a worker is opened; the answer is buffered the same way,
  so a slow reader never holds a worker either;
* **body sizes**: the service's own limits (``--max-body-bytes`` for ``/grade`` and everything
  else, ``--max-batch-bytes`` for ``/grade/batch``, ``/openrlhf`` and NeMo Gym's ``/aggregate_metrics``), refused with the service's 413 body;
* **slow clients**: a request line and headers (and the TLS handshake) must arrive within
  ``client_header_timeout_s``; a body may pause at most ``client_body_timeout_s`` between reads;
  an answer may wait at most ``send_timeout_s`` for the client to read.

>>> text = nginx_config(ProxySettings(proxy_workers=1), upstream="grader:8000", token="t" * 40,
...                     max_body_bytes=1024, max_batch_bytes=4096, upstream_timeout_s=75)
>>> "client_max_body_size 4096;" in text and "server grader:8000;" in text
True
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

from harness.common import settings_table, tokens
from harness.common.errors import InputError

LISTEN_PORT = 8443  # inside the container: above 1024, so nginx needs no capability to bind it
CONFIG_DIR = "/etc/spider-proxy"  # mounted read-only: nginx.conf, cert.pem, key.pem, token
RUN_DIR = "/tmp/nginx"  # the container's tmpfs: pid file, request and answer buffers


def default_proxy_workers() -> int:
    """One nginx worker per core, 1 to 4: each handles thousands of connections."""
    return max(1, min(4, os.cpu_count() or 1))


# name, unit, meaning: docs/service.md's table is checked against this tuple by a test.
SETTINGS = (
    ("client_header_timeout_s", "s", "a client must send its request line and headers, and finish the TLS handshake, within this time"),
    ("client_body_timeout_s", "s", "longest pause between two reads of a request body"),
    ("send_timeout_s", "s", "longest pause between two writes of an answer to a client that reads slowly"),
    ("keepalive_timeout_s", "s", "an idle kept-alive client connection is closed after this"),
    ("proxy_workers", "processes", "nginx worker processes (default: one per core, 1 to 4)"),
    ("proxy_connections", "connections", "simultaneous connections per nginx worker (clients and the workers behind)"),
)


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    """The proxy's own limits (``SETTINGS`` gives their meaning); validated on creation.

    >>> ProxySettings(client_body_timeout_s=0)
    Traceback (most recent call last):
    ...
    harness.common.errors.InputError: proxy setting client_body_timeout_s must be a positive number, got 0
    """

    client_header_timeout_s: float = 10.0
    client_body_timeout_s: float = 10.0
    send_timeout_s: float = 30.0
    keepalive_timeout_s: float = 15.0
    proxy_workers: int = dataclasses.field(default_factory=default_proxy_workers)
    proxy_connections: int = 4096

    def __post_init__(self) -> None:
        settings_table.check_positive(self, "proxy")


def add_arguments(parser: argparse._ActionsContainer) -> None:
    """One flag per proxy setting (``--client-header-timeout``, ...), defaulting to the dataclass's."""
    settings_table.add_flags(parser, ProxySettings, SETTINGS)


def from_args(args: argparse.Namespace) -> ProxySettings:
    return settings_table.from_flags(args, ProxySettings, SETTINGS)


def _seconds(value: float) -> str:
    """nginx time: whole milliseconds (``10s`` for 10.0, ``1500ms`` for 1.5)."""
    ms = max(1, round(value * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _literal(body: dict) -> str:
    """A JSON body as an nginx single-quoted string (no quote, backslash or variable may be inside)."""
    text = json.dumps(body, separators=(",", ":"))
    if any(c in text for c in "'\\$"):
        raise ValueError(f"a body nginx cannot return literally: {text}")
    return f"'{text}'"


def _error(status: int, error: str, outcome: str, message: str) -> str:
    return _literal({"error": error, "outcome": outcome, "message": message, "exit_code": None, "status": status})


def _auth_maps(token: str) -> str:
    """The service's token rules as maps: a path token alone decides; else an open path or a header
    (``Authorization: Bearer``, or ``X-API-Key`` as the Open Reward Standard's clients send it)."""
    tokens.check(token, "the proxy's configuration")
    return f"""
    map $http_authorization $spider_bearer {{
        default "";
        "~*^bearer\\s+(?<bearer_token>\\S+)\\s*$" $bearer_token;
    }}
    map $spider_bearer $spider_bearer_ok {{ default 0; "{token}" 1; }}
    map $http_x_api_key $spider_key_ok {{ default 0; "{token}" 1; }}
    map "$spider_bearer_ok$spider_key_ok" $spider_header_ok {{ default 0; "~1" 1; }}
    map $request_uri $spider_path_form {{ default 0; "~^{tokens.PATH_PREFIX}" 1; }}
    map $request_uri $spider_path_token {{ default ""; "~^{tokens.PATH_PREFIX}(?<path_token>[^/?]*)" $path_token; }}
    map $spider_path_token $spider_path_ok {{ default 0; "{token}" 1; }}
    map $uri $spider_open {{ default 0; {" ".join(f"{p} 1;" for p in tokens.OPEN_PATHS)} }}
    # path form, path token right, open path, a header right: refused when a path token is wrong, or
    # when there is none, the path is not open and no header is right.
    map "$spider_path_form$spider_path_ok$spider_open$spider_header_ok" $spider_refused {{
        default 0; "~^10" 1; "0000" 1;
    }}
    map $spider_refused $spider_www_authenticate {{ default ""; 1 '{tokens.REALM}'; }}
"""


_LOG_FORMAT = ("'{\"ts\":\"$time_iso8601\",\"level\":\"info\",\"logger\":\"proxy.access\",\"remote\":\"$remote_addr\","
               "\"method\":\"$request_method\",\"path\":\"$uri\",\"status\":$status,\"request_bytes\":$request_length,"
               "\"bytes\":$bytes_sent,\"seconds\":$request_time,\"upstream_seconds\":\"$upstream_response_time\","
               "\"request_id\":\"$sent_http_x_request_id\"}'")


def nginx_config(settings: ProxySettings, *, upstream: str, token: str, max_body_bytes: int, max_batch_bytes: int,
                 upstream_timeout_s: float, listen_port: int = LISTEN_PORT, config_dir: str = CONFIG_DIR,
                 run_dir: str = RUN_DIR) -> str:
    """The whole nginx.conf: TLS on ``listen_port``, the token, whole-request buffering, the limits, ``upstream``."""
    if max_batch_bytes < max_body_bytes:
        raise InputError("the proxy's batch body limit must be at least its body limit")
    return f"""# Written by harness/proxy/nginx_conf.py for the grader service's proxy; regenerated on every start.
daemon off;
worker_processes {settings.proxy_workers};
pid {run_dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections {settings.proxy_connections}; }}

http {{
{_http_settings(settings, max_body_bytes, upstream_timeout_s, run_dir)}
{_auth_maps(token)}
    upstream spider_grader {{ server {upstream}; }}

{_server(listen_port, config_dir, max_body_bytes, max_batch_bytes)}
}}
"""


def _http_settings(settings: ProxySettings, max_body_bytes: int, upstream_timeout_s: float, run_dir: str) -> str:
    """Logs and buffers on the tmpfs, the slow-client timeouts, whole requests to the workers."""
    return f"""    server_tokens off;
    default_type application/json;
    log_format spider escape=json {_LOG_FORMAT};
    access_log /dev/stdout spider;
    client_body_temp_path {run_dir}/body;
    proxy_temp_path {run_dir}/proxy;
    fastcgi_temp_path {run_dir}/fastcgi;
    uwsgi_temp_path {run_dir}/uwsgi;
    scgi_temp_path {run_dir}/scgi;

    # Slow clients wait here, never in a worker of the service.
    client_header_timeout {_seconds(settings.client_header_timeout_s)};
    client_body_timeout {_seconds(settings.client_body_timeout_s)};
    send_timeout {_seconds(settings.send_timeout_s)};
    keepalive_timeout {_seconds(settings.keepalive_timeout_s)};
    reset_timedout_connection on;
    large_client_header_buffers 4 8k;
    client_body_buffer_size {min(max_body_bytes, 1024 * 1024)};
    client_max_body_size {max_body_bytes};

    # Whole requests to the workers, whole answers from them; a grading request is never replayed.
    proxy_request_buffering on;
    proxy_buffering on;
    proxy_buffers 16 16k;
    proxy_http_version 1.0;
    proxy_connect_timeout 5s;
    proxy_send_timeout 30s;
    proxy_read_timeout {_seconds(upstream_timeout_s)};
    proxy_next_upstream off;
    proxy_set_header Host $host;
    proxy_set_header X-Forwarded-For $remote_addr;
    proxy_set_header X-Forwarded-Proto https;"""


def _server(listen_port: int, config_dir: str, max_body_bytes: int, max_batch_bytes: int) -> str:
    """TLS, the token's verdict before anything else, the service's error bodies, the two body limits."""
    too_large = _error(413, "BodyTooLarge", "request_error", "the body is over the limit of this endpoint "
                       f"({max_body_bytes} bytes for /grade, {max_batch_bytes} for /grade/batch, /openrlhf and "
                       "/aggregate_metrics): send fewer or smaller envelopes")
    unavailable = _error(502, "ProxyUpstreamError", "infrastructure_error", "the grader service behind the proxy did not "
                         "answer; the example is unscored: retry it, and if it recurs look at the service log")
    plain = _error(400, "PlainHttpOnTlsPort", "request_error", "this port speaks HTTPS only: use an https:// URL")
    return f"""    server {{
        listen {listen_port} ssl;
        server_name _;
        ssl_certificate {config_dir}/cert.pem;
        ssl_certificate_key {config_dir}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_prefer_server_ciphers off;
        ssl_session_cache shared:spider_tls:10m;
        ssl_session_timeout 1h;
        ssl_session_tickets off;

        add_header WWW-Authenticate $spider_www_authenticate always;
        if ($spider_refused) {{ return 401 {_literal(tokens.unauthorized_body())}; }}

        error_page 413 @too_large;
        error_page 502 504 @unavailable;
        error_page 497 @plain_http;
        location @too_large {{ return 413 {too_large}; }}
        location @unavailable {{ return 502 {unavailable}; }}
        location @plain_http {{ return 400 {plain}; }}

        location ~ ^(/t/[^/]+)?/(grade/batch|openrlhf|aggregate_metrics)$ {{
            client_max_body_size {max_batch_bytes};
            proxy_pass http://spider_grader;
        }}
        location / {{
            proxy_pass http://spider_grader;
        }}
    }}"""
