"""A small HTTP client for the grader service: one connection per call (sync workers close each one).

Standard library only; the load test, the service container's readiness wait and the tests use it.

>>> Reply(200, {}, {"score": 1.0}).json["score"]
1.0
>>> parse_prometheus('# HELP x y\\nx_total{a="b"} 3.0\\n')
{'x_total{a="b"}': 3.0}
"""

from __future__ import annotations

import dataclasses
import http.client
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    json: Any  # the parsed body; None when it is not JSON (then ``text`` holds it)
    text: str = ""


def request(host: str, port: int, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0) -> Reply:
    """One HTTP request; ``body`` is sent as JSON, ``raw`` as given. Transport errors propagate."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
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
