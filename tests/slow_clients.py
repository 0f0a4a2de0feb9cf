"""Slow clients (slowloris): each one opens a connection and trickles its request a byte at a time.

``SlowClient(..., part="headers")`` sends the request line and then its headers one byte every
``interval`` seconds; ``part="body"`` sends the whole head (declaring a ``Content-Length``) and then
the body a byte at a time. Between two bytes the client waits for the server to speak: whatever it
reads (an answer such as 408 or 504, or the end of the connection) ends that connection and records
when; with ``again`` the client then starts over on a new connection, as a real attack would.
"""

from __future__ import annotations

import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable


class SlowClient(threading.Thread):
    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, path: str, part: str,
                 interval: float = 1.0, body_bytes: int = 10_000, again: bool = False) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.tls, self.path, self.part = host, port, tls, path, part
        self.interval, self.body_bytes, self.again = interval, body_bytes, again
        self.started = 0.0
        self.sent = 0  # bytes trickled on the current connection
        self.closes = 0  # connections the server ended
        self.closed_after: float | None = None  # the first connection: seconds from its first byte to the server ending it
        self.answer = b""
        self.error = ""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if not self._one_connection() or not self.again:
                return

    def _head(self) -> tuple[bytes, bytes]:
        first = f"POST {self.path} HTTP/1.1\r\n".encode()
        rest = (f"Host: {self.host}\r\nContent-Type: application/json\r\nContent-Length: {self.body_bytes}\r\n"
                "X-Slow: " + "s" * 50 + "\r\n\r\n").encode()
        return (first, rest) if self.part == "headers" else (first + rest, b"{" + b" " * (self.body_bytes - 1))

    def _ended(self, started: float) -> bool:
        self.closes += 1
        if self.closed_after is None:
            self.closed_after = time.monotonic() - started
        return True

    def _one_connection(self) -> bool:
        """One connection trickled until the server ends it (True) or we stop or fail to connect (False)."""
        try:
            raw = socket.create_connection((self.host, self.port), timeout=30)
            sock = self.tls.wrap_socket(raw, server_hostname=self.host) if self.tls else raw
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        at_once, trickled = self._head()
        try:
            sock.sendall(at_once)
            started, self.sent = time.monotonic(), 0
            self.started = self.started or started
            for i in range(len(trickled)):
                if self.stop.is_set():
                    return False
                sock.sendall(trickled[i:i + 1])
                self.sent += 1
                sock.settimeout(self.interval)
                try:
                    self.answer = sock.recv(4096)
                except TimeoutError:
                    continue  # the server is still waiting for us: the next byte
                return self._ended(started)
            return False
        except OSError as exc:  # reset: the server closed the connection
            self.error = type(exc).__name__
            return self._ended(started)
        finally:
            try:
                sock.close()
            except OSError:
                pass


def start_slow_clients(make: Callable[[int], SlowClient], count: int, min_bytes: int = 2,
                       timeout: float = 30.0) -> list[SlowClient]:
    """``count`` clients started at once; returns when each has trickled ``min_bytes`` (or ended)."""
    clients = [make(i) for i in range(count)]
    for client in clients:
        client.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(c.sent >= min_bytes or not c.is_alive() for c in clients):
        time.sleep(0.1)
    return clients


def stop_all(clients: list[SlowClient]) -> None:
    for client in clients:
        client.stop.set()
    for client in clients:
        client.join(10)


def latencies(send: Callable[[], bool], count: int) -> list[float]:
    """Seconds of ``count`` requests sent one after the other; ``send`` says whether the answer was right."""
    out = []
    for _ in range(count):
        started = time.monotonic()
        assert send(), "a normal request got a wrong answer or none"
        out.append(time.monotonic() - started)
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)
