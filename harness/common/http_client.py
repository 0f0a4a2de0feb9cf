"""A small HTTP(S) client for the grader service: one connection per call (sync workers close each one).

Standard library only; the load test, the service container's readiness wait and the tests use it.
``Endpoint`` is where a service answers: host, port, TLS context and a path prefix (``/t/TOKEN``
when the token travels in the path).

>>> Reply(200, {}, {"score": 1.0}).json["score"]
1.0
>>> parse_prometheus('# HELP x y\\nx_total{a="b"} 3.0\\n')
{'x_total{a="b"}': 3.0}
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import ssl
import urllib.parse
from typing import Any

from harness.common.errors import InputError


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    json: Any  # the parsed body; None when it is not JSON (then ``text`` holds it)
    text: str = ""


def request(host: str, port: int, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0, tls: ssl.SSLContext | None = None) -> Reply:
    """One HTTP request (HTTPS with ``tls``); ``body`` is sent as JSON, ``raw`` as given. Transport errors propagate."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn: http.client.HTTPConnection = (http.client.HTTPSConnection(host, port, timeout=timeout, context=tls) if tls
                                        else http.client.HTTPConnection(host, port, timeout=timeout))
    try:
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        payload = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    text = payload.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if "json" in found.get("content-type", "") else None
    except ValueError:
        parsed = None
    return Reply(response.status, found, parsed, text)


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample lines of the Prometheus text format: ``'name{labels}' -> value`` (comments skipped)."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def tls_context(cafile: str | None = None) -> ssl.SSLContext:
    """A verifying client context: the system's CAs, or only ``cafile`` (e.g. a self-signed certificate)."""
    return ssl.create_default_context(cafile=cafile)


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A service to call: ``request("POST", "/grade")`` goes to ``prefix + "/grade"`` on host:port.

    >>> Endpoint.from_url("http://127.0.0.1:8000", token="x" * 40).prefix == "/t/" + "x" * 40
    True
    """

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    prefix: str = ""

    @classmethod
    def from_url(cls, url: str, *, token: str | None = None, cafile: str | None = None) -> Endpoint:
        """``http://HOST:PORT`` or ``https://HOST:PORT`` (verified against ``cafile`` or the system's
        CAs); the token, when given, travels in the path as a trainer's URL carries it."""
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/"):
            raise InputError(f"the URL {url!r} is not http://HOST:PORT or https://HOST:PORT (no path: the "
                             "token comes from --token-file or $SPIDER_GRADER_TOKEN)")
        https = parsed.scheme == "https"
        return cls(parsed.hostname, parsed.port or (443 if https else 80), tls_context(cafile) if https else None,
                   f"/t/{token}" if token else "")

    @property
    def url(self) -> str:
        """Its base URL without the prefix (the token is never part of what is shown)."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return request(self.host, self.port, method, self.prefix + path, body, tls=self.tls, **kwargs)
