"""The grader service's worker: gunicorn's sync worker, taking a request only once its head is in.

Why: gunicorn's sync worker reads a request line and headers on its one thread with no time limit,
so a client trickling them a byte a second holds the worker as long as it keeps trickling; 50 such
clients (no token needed: the token is in the head) held every worker of the bare service and
stopped it (docs/service.md, "Slow clients without the proxy"). This worker accepts connections
into a selector of its own and reads what arrives without blocking. A connection reaches the sync
handler, and the application, only once its whole head (up to the blank line) has arrived; until
then it costs a file descriptor and a small buffer, never the worker's time:

* a head not complete within ``header_timeout_s`` of the connection is answered 408 and closed;
* a head longer than ``MAX_HEAD_BYTES`` is answered 431 and closed (the service's requests carry a
  few short headers; gunicorn's own limits on the line and each header still apply after);
* a worker holds at most ``MAX_PENDING`` connections waiting for their heads: one more pushes out
  the oldest with a 503 (a real client's head arrives within milliseconds of its connection).

Bodies are read by the application as before: an authorised client's, within the watchdog's hard
limit (``--envelope-timeout``); an unauthorised one's is not read past a short bound. A bare LF in a
head is handed to gunicorn at once, which refuses it (400).

>>> configured(2.5, lambda status, error: None).header_timeout_s
2.5
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import re
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from gunicorn import util
from gunicorn.workers.sync import SyncWorker

from harness.service.guard import http_response

MAX_HEAD_BYTES = 64 * 1024
MAX_PENDING = 256
# The end of a head, or a bare LF (gunicorn refuses it at once, so there is nothing to wait for).
_HEAD_READY = re.compile(rb"\r\n\r\n|(?<!\r)\n")
_REFUSALS = {
    408: ("Request Timeout", "RequestHeaderTimeout",
          "the request line and headers did not arrive within {timeout:g} s: send the whole request at once"),
    431: ("Request Header Fields Too Large", "RequestHeaderTooLarge",
          f"the request line and headers are longer than {MAX_HEAD_BYTES:,} bytes: send fewer or shorter headers"),
    503: ("Service Unavailable", "TooManySlowClients",
          f"this worker already waits for {MAX_PENDING} requests whose headers are still coming; send yours at once"),
}
OnRefused = Callable[[int, str], None]


@dataclasses.dataclass
class _Pending:
    """A connection whose head is still coming in."""

    sock: socket.socket
    addr: Any
    listener: socket.socket
    deadline: float
    head: bytearray = dataclasses.field(default_factory=bytearray)


class _Prefixed:
    """A client socket whose first bytes were already read: ``recv`` gives them first, then reads on.
    Everything else (``sendall``, ``shutdown``, ``settimeout``...) is the socket's own."""

    def __init__(self, sock: socket.socket, prefix: bytes) -> None:
        self._sock, self._prefix = sock, prefix

    def recv(self, size: int, flags: int = 0) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return self._sock.recv(size, flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class HeadFirstWorker(SyncWorker):
    """gunicorn's sync worker whose connections wait in a selector until their heads are in."""

    header_timeout_s = 10.0
    on_refused: OnRefused = staticmethod(lambda status, error: None)

    def run(self) -> None:
        self._pending: dict[int, _Pending] = {}
        self._selector = selectors.DefaultSelector()
        for listener in self.sockets:
            listener.setblocking(False)
            _defer_accept(listener, self.header_timeout_s)
            self._selector.register(listener, selectors.EVENT_READ, listener)
        self._selector.register(self.PIPE[0], selectors.EVENT_READ, None)  # gunicorn's signal wake-ups
        try:
            while self.alive:
                self.notify()
                self._serve_ready(self._wait_s())
                self._expire(time.monotonic())
                if not self.is_parent_alive():
                    break
        finally:
            for pending in list(self._pending.values()):
                self._close(pending)
            self._selector.close()

    def _wait_s(self) -> float:
        """Until the next heartbeat, or the next head's deadline when that comes first."""
        soonest = min((p.deadline for p in self._pending.values()), default=float("inf"))
        return max(0.0, min(self.timeout or 0.5, soonest - time.monotonic()))

    def _serve_ready(self, timeout: float) -> None:
        try:
            events = self._selector.select(timeout)
        except OSError as exc:  # a listener closed under us at shutdown
            if exc.errno == errno.EBADF and not self.alive:
                return
            raise
        for key, _mask in events:
            if not self.alive:
                return
            if key.data is None:
                os.read(self.PIPE[0], 1)
            elif isinstance(key.data, _Pending):
                self._read_head(key.data)
            else:
                self._accept(key.data)

    def _accept(self, listener: socket.socket) -> None:
        """One connection (the rest stay in the backlog for the other idle workers)."""
        try:
            client, addr = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        client.setblocking(False)
        util.close_on_exec(client)
        if len(self._pending) >= MAX_PENDING:
            self._refuse(min(self._pending.values(), key=lambda p: p.deadline), 503)
        pending = _Pending(client, addr, listener, time.monotonic() + self.header_timeout_s)
        self._pending[client.fileno()] = pending
        self._selector.register(client, selectors.EVENT_READ, pending)
        # Read at once: a client's head usually came with its connection, and this worker, idle now,
        # serves it before anything else (it never waits here behind another's long request).
        self._read_head(pending)

    def _read_head(self, pending: _Pending) -> None:
        """What has arrived; the request goes to the sync handler once its head is whole."""
        try:
            data = pending.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the client
            data = b""
        if not data:  # the client gave up before its head was in
            self._close(pending)
            return
        searched_from = max(0, len(pending.head) - 3)
        pending.head += data
        if _HEAD_READY.search(pending.head, searched_from):
            self._forget(pending)
            pending.sock.setblocking(True)
            self.handle(pending.listener, _Prefixed(pending.sock, bytes(pending.head)), pending.addr)
        elif len(pending.head) > MAX_HEAD_BYTES:
            self._refuse(pending, 431)

    def _expire(self, now: float) -> None:
        for pending in [p for p in self._pending.values() if p.deadline <= now]:
            self._refuse(pending, 408)

    def _refuse(self, pending: _Pending, status: int) -> None:
        """Count and log the refusal, then answer ``status`` (best effort: the socket does not block) and
        close the connection: a client that has its answer finds the refusal already counted."""
        reason, error, message = _REFUSALS[status]
        body = {"error": error, "outcome": "request_error", "message": message.format(timeout=self.header_timeout_s),
                "exit_code": None, "status": status}
        self.on_refused(status, error)
        try:
            pending.sock.send(http_response(status, reason, body))
        except OSError:
            pass
        self._close(pending)

    def _forget(self, pending: _Pending) -> None:
        self._selector.unregister(pending.sock)
        del self._pending[pending.sock.fileno()]

    def _close(self, pending: _Pending) -> None:
        self._forget(pending)
        try:
            pending.sock.close()
        except OSError:
            pass


def _defer_accept(listener: Any, seconds: float) -> None:
    """Linux: wake the workers for a connection only once its first bytes are in (TCP_DEFER_ACCEPT),
    so a request sent with its connection is read whole at its accept and served by the worker that
    took it, never queued behind another; a connection that sends nothing wakes no worker. Elsewhere
    (or on a Unix socket) nothing changes."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is not None:
        try:
            listener.setsockopt(socket.IPPROTO_TCP, option, max(1, math.ceil(seconds)))
        except OSError:
            pass


def configured(header_timeout_s: float, on_refused: OnRefused) -> type[HeadFirstWorker]:
    """The worker class for gunicorn's ``worker_class``, with the service's header timeout and a
    callback run (in the worker) for every connection refused before its head was in."""
    return type("HeadFirstWorker", (HeadFirstWorker,),
                {"header_timeout_s": header_timeout_s, "on_refused": staticmethod(on_refused)})
