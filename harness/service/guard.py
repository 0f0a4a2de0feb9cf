"""The per-worker watchdog: a hard time limit on a request that needs nothing from the stuck thread.

A sync worker handles one request at a time on its main thread. While that thread grades, a
second thread of the same worker waits for the request's hard deadline. When it passes, the
watchdog writes a complete ``504`` JSON answer to the client socket, records why, and ends the
worker with ``os._exit``; gunicorn's arbiter sees the exit and forks a fresh worker from its
already-loaded bundle. The watchdog works while the main thread is inside a long SQLite step,
because Python's sqlite3 releases the GIL around ``sqlite3_step``; a signal handler (what
gunicorn's own timeout relies on) would only run after that step returns.

One lock decides who answers a request: the main thread ``disarm``s before it writes its
response, the watchdog answers only a request still armed, and it exits while holding the lock,
so a client never gets two answers or a score after a 504.

>>> guard = Watchdog(lambda reason: None)
>>> guard.armed
False
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.common import errors

# What a request in parts (a batch) answers when the watchdog stops it: the 504 body in, the whole body out.
Partial = Callable[[dict[str, Any]], dict[str, Any]]

# Exit status of a worker ended by the watchdog (the project's exit-code table): gunicorn halts the
# whole server on 3 and 4 (boot / app-load errors), so those are avoided; 70 is EX_SOFTWARE.
WATCHDOG_EXIT = errors.WATCHDOG_EXIT

log = logging.getLogger("spider_grader.watchdog")


def http_response(status: int, reason: str, body: dict[str, Any], request_id: str = "") -> bytes:
    """A whole HTTP/1.1 response with a JSON body, closing the connection.

    >>> http_response(504, "Gateway Timeout", {"error": "x"}).split(b"\\r\\n")[0]
    b'HTTP/1.1 504 Gateway Timeout'
    """
    payload = json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}", "Connection: close"]
    if request_id:
        head.append(f"X-Request-Id: {request_id}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload


class Watchdog:
    """Arm it around a request's work; past the deadline it answers 504 and ends the process.

    ``on_fire(reason)`` runs just before the exit (count it in the metrics, log it); ``exit``
    is injectable so the logic can be exercised without ending the test process.
    """

    def __init__(self, on_fire: Callable[[str], None], exit: Callable[[int], None] = os._exit) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._sock: socket.socket | None = None
        self._request_id = ""
        self._limit_s = 0.0
        self._partial: Partial | None = None
        self._on_fire = on_fire
        self._exit = exit
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        return self._deadline is not None

    def start(self) -> None:
        """Start the watching thread (in the worker, after the fork: threads do not survive one)."""
        self._thread = threading.Thread(target=self._run, name="grader-watchdog", daemon=True)
        self._thread.start()

    def arm(self, sock: socket.socket | None, seconds: float, request_id: str = "", partial: Partial | None = None) -> None:
        """Watch the request on ``sock``: it must be disarmed within ``seconds`` from now.

        ``partial``: for a request answered in parts (a batch), the 200 answer to send instead of
        the 504, built from the 504's body (the parts done so far are kept, the rest unscored).
        """
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._sock, self._request_id, self._limit_s, self._partial = sock, request_id, seconds, partial
            self._cond.notify()

    def disarm(self) -> None:
        """The main thread answers this request itself (call before writing the response)."""
        with self._cond:
            self._deadline = None
            self._sock = self._partial = None
            self._cond.notify()

    def abort(self, reason: str) -> None:
        """Answer an armed request now and exit (gunicorn's SIGABRT on a missed heartbeat)."""
        with self._cond:
            if self._deadline is not None:
                self._fire(reason)

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._fire("envelope_timeout")

    def _fire(self, reason: str) -> None:
        """Called with the lock held: answer 504 on the socket, record, exit. Never returns normally."""
        message = (f"grading did not finish within the hard limit of {self._limit_s:g} s; the worker was "
                   "stopped and replaced. The example is unscored: retry it, and if it recurs, look for "
                   "a query that outlasts the bundle's own deadline")
        body = {"error": "WorkerTimeout", "outcome": "infrastructure_error", "message": message,
                "exit_code": None, "status": 504, "reason": reason}
        try:  # whatever fails here (the client gone, memory short), the exit below happens
            status, phrase = 504, "Gateway Timeout"
            if self._partial is not None:
                try:
                    body, status, phrase = self._partial(body), 200, "OK"
                except Exception:  # noqa: BLE001 - the plain 504 is still an answer
                    pass
            if self._sock is not None:
                try:
                    self._sock.sendall(http_response(status, phrase, body, self._request_id))
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # the client is gone: nothing left to tell it
                    pass
            log.error("worker stopped: request over its hard limit",
                      extra={"event": "worker_killed", "reason": reason, "request_id": self._request_id,
                             "limit_s": self._limit_s})
            self._on_fire(reason)
            for handler in logging.getLogger("spider_grader").handlers:  # the JSON stderr handler
                handler.flush()
        except BaseException:  # noqa: B036 - the process ends next line; nothing may stop that
            pass
        finally:
            self._exit(WATCHDOG_EXIT)
            self._deadline = self._sock = None  # reached only with an injected exit (tests)
