"""A port to serve on: taken, privileged or not here is a PortUnavailable that says how to pick another.

`serve` checks its port before it builds or starts anything (``check_free``), and reads the same
cause out of the bind that fails later (``from_bind_error``: another process took the port
meanwhile) or out of the Docker engine's refusal to publish it (``from_engine_error``). Either way the
message names the address, the port and the way to choose another one (``--port``; in Make,
``SERVE_PORT``), and the exit code is PortUnavailable's, not the harness's "unexpected" one.

>>> import errno
>>> str(from_bind_error(OSError(errno.EADDRINUSE, "Address already in use"), "127.0.0.1", 8000)).split(":")[0]
'port 8000 on 127.0.0.1 is already in use'
>>> from_engine_error(Exception("Bind for 127.0.0.1:8000 failed: port is already allocated"), "127.0.0.1", 8000) is None
False
"""

from __future__ import annotations

import errno
import socket

from harness.common.errors import PortUnavailable

ENGINE_PHRASES = ("port is already allocated", "address already in use")


def _another(port: int) -> str:
    other = 8001 if port == 8000 else 8000 if port < 1024 else port + 1
    return (f"choose another port: make serve SERVE_PORT={other} (python3 -m harness serve --port {other}; "
            "--port 0 takes any free port)")


def in_use(host: str, port: int) -> PortUnavailable:
    return PortUnavailable(f"port {port} on {host} is already in use: another program listens there (an earlier "
                           f"`make serve` still running? `ss -ltnp 'sport = :{port}'` names it). Stop it, or "
                           + _another(port))


def from_bind_error(exc: OSError, host: str, port: int) -> PortUnavailable | None:
    """The PortUnavailable for a failed bind of ``host:port``; None for a cause that is not the port's."""
    if exc.errno == errno.EADDRINUSE:
        return in_use(host, port)
    if exc.errno == errno.EACCES:
        return PortUnavailable(f"port {port} on {host} needs root (ports below 1024 do): " + _another(port))
    if exc.errno == errno.EADDRNOTAVAIL:
        return PortUnavailable(f"{host} is not an address of this machine, so port {port} cannot be opened on it: "
                               "give one of its addresses (--listen 0.0.0.0 for all of them)")
    return None


def from_engine_error(exc: Exception, host: str, port: int) -> PortUnavailable | None:
    """The PortUnavailable for Docker's refusal to publish ``host:port`` (its APIError), else None."""
    text = str(exc).lower()
    return in_use(host, port) if port and any(phrase in text for phrase in ENGINE_PHRASES) else None


def check_free(host: str, port: int) -> None:
    """PortUnavailable unless ``host:port`` can be listened on now (port 0: any free one, nothing to check).

    The probe binds as the servers do (SO_REUSEADDR: a port left in TIME_WAIT is free) and closes at once.
    """
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            known = from_bind_error(exc, host, port)
            if known is not None:
                raise known from None
            raise
