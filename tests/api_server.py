"""A stand-in for the datasets-server ``/rows`` API: real HTTP on 127.0.0.1, in a thread.

It answers ``GET /rows?dataset=&config=&split=&offset=&length=`` the way the real service does
(``features``, ``rows`` with ``row_idx``/``row``/``truncated_cells``, ``num_rows_total``,
``num_rows_per_page``, ``partial``; 422 for ``length`` over 100, 404 for an unknown dataset), and
can be told to misbehave on the next requests: rate limiting (429 with or without Retry-After),
server errors, a truncated body, an HTML page, a slow answer, a dropped connection.

>>> with ApiServer({"train": [{"db_id": "d", "question": "q?", "query": "SELECT 1"}]}) as api:
...     import json, urllib.request
...     page = json.load(urllib.request.urlopen(api.url + "/rows?dataset=xlangai/spider&config=spider"
...                                             "&split=train&offset=0&length=100"))
>>> page["num_rows_total"], page["rows"][0]["row"]["query"]
(1, 'SELECT 1')
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
import time
import urllib.parse
from pathlib import Path

MAX_LENGTH = 100


@dataclasses.dataclass(frozen=True)
class Fault:
    """How to spoil one answer. kind: ok (a normal answer: lets a later request fail), 429, 500, 503,
    truncated (valid HTTP, half the JSON), short (the connection closes before the promised body),
    html, slow, drop, json_list, no_rows."""

    kind: str
    retry_after: str | None = None  # for 429/503
    seconds: float = 0.0  # for slow


def _features(rows: list[dict]) -> list[dict]:
    names = list(rows[0]) if rows else ["db_id", "query", "question"]
    return [{"feature_idx": i, "name": name, "type": {"dtype": "string", "_type": "Value"}}
            for i, name in enumerate(names)]


class ApiServer:
    """Serves ``splits`` (API split name -> list of row dicts). Use as a context manager.

    ``faults``: answers to spoil, first in first out (one per /rows request); ``requests``: the
    query parameters of every /rows request received, in order.
    """

    def __init__(self, splits: dict[str, list[dict]], dataset: str = "xlangai/spider",
                 config: str = "spider") -> None:
        self.splits, self.dataset, self.config = splits, dataset, config
        self.faults: list[Fault] = []
        self.requests: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.api = self  # type: ignore[attr-defined]
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, and tests stop many servers.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @classmethod
    def from_pages(cls, files: dict[str, Path], **kw: str) -> ApiServer:
        """Rows from whole-split files in the /rows shape (fixtures/sample/rows-*.json)."""
        return cls({split: [r["row"] for r in json.loads(Path(p).read_text(encoding="utf-8"))["rows"]]
                    for split, p in files.items()}, **kw)

    @classmethod
    def from_spider(cls, spider_dir: Path) -> ApiServer:
        """The real release: train_spider.json (3 fields) as ``train``, dev.json as ``validation``."""
        fields = ("db_id", "query", "question", "query_toks", "query_toks_no_value", "question_toks")

        def load(name: str) -> list[dict]:
            rows = json.loads((spider_dir / name).read_text(encoding="utf-8"))
            return [{f: r[f] for f in fields if f in r} for r in rows]

        return cls({"train": load("train_spider.json"), "validation": load("dev.json")})

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def record(self, params: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(params)

    def next_fault(self) -> Fault | None:
        with self._lock:
            return self.faults.pop(0) if self.faults else None

    def page(self, params: dict[str, str]) -> tuple[int, dict]:
        """The status and JSON the real API would send for these parameters."""
        if params.get("dataset") != self.dataset or params.get("config") != self.config:
            return 404, {"error": "The dataset does not exist, or is not accessible without authentication"}
        rows = self.splits.get(params.get("split", ""))
        if rows is None:
            return 404, {"error": "Not found."}
        try:
            offset, length = int(params.get("offset", "0")), int(params.get("length", str(MAX_LENGTH)))
        except ValueError:
            return 422, {"error": "Parameter 'offset' and 'length' must be integers"}
        if length > MAX_LENGTH or offset < 0 or length < 0:
            return 422, {"error": f"Parameter 'length' must not be greater than {MAX_LENGTH}"}
        chosen = rows[offset:offset + length]
        return 200, {"features": _features(rows),
                     "rows": [{"row_idx": offset + i, "row": row, "truncated_cells": []}
                              for i, row in enumerate(chosen)],
                     "num_rows_total": len(rows), "num_rows_per_page": MAX_LENGTH, "partial": False}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers for the ApiServer set as ``server.api``."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        api: ApiServer = self.server.api  # type: ignore[attr-defined]
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.path != "/rows":
            return self._send(404, b'{"error":"Not found."}')
        params = dict(urllib.parse.parse_qsl(parsed.query))
        api.record(params)
        status, data = api.page(params)
        body = json.dumps(data).encode("utf-8")
        fault = api.next_fault()
        if fault is None or fault.kind == "ok":
            return self._send(status, body)
        return self._spoil(fault, body)

    def _spoil(self, fault: Fault, body: bytes) -> None:
        kind = fault.kind
        if kind in ("429", "500", "503"):
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return self._send(int(kind), b'{"error":"Too many requests or server error"}', headers)
        if kind == "truncated":
            return self._send(200, body[: len(body) // 2])
        if kind == "html":
            return self._send(200, b"<!DOCTYPE html><html><body>Service unavailable</body></html>",
                              {"Content-Type": "text/html"})
        if kind == "json_list":
            return self._send(200, b"[]")
        if kind == "no_rows":
            return self._send(200, b'{"num_rows_total": 5}')
        if kind == "slow":
            time.sleep(fault.seconds)
            return self._send(200, body)
        if kind == "short":  # promise the whole body, send half, hang up
            self.close_connection = True
            return self._send(200, body[: len(body) // 2], {"Content-Length": str(len(body))})
        if kind == "drop":
            self.close_connection = True
            return None  # no answer at all: the client sees the connection close
        raise ValueError(f"unknown fault {kind!r}")

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
                       **(headers or {})}
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to do
