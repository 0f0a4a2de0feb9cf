"""The environment a Ray session of this project runs in: on this machine, loopback and silent.

Left to itself Ray 2.60 reports usage statistics, probes cloud metadata (169.254.169.254) and
writes an auth token under ``~/.ray``. A Ray instance this project starts (``--ray auto``) and a
cluster on loopback addresses get this environment, set before ``ray.init`` (its processes inherit
it) and restored afterwards:

* usage statistics off, and their report address a dead loopback port;
* HTTP(S) proxies pointed at a dead loopback port, with every loopback address exempt, so that any
  HTTP request to another address fails at once instead of leaving the machine;
* token authentication with a random token (unless ``RAY_AUTH_TOKEN`` is set), kept in the
  environment rather than in ``~/.ray/auth_token``; one per process, since Ray keeps the first token
  it read for the process's later sessions.

Joining a cluster on other addresses (``--ray HOST:PORT``) sets only the first item: proxies would
break the cluster's own traffic, and its token is the cluster's (``RAY_AUTH_TOKEN``), not ours.

>>> env = loopback_env("t0k3n")
>>> env["RAY_USAGE_STATS_ENABLED"], env["https_proxy"], "127.0.0.3" in env["no_proxy"]
('0', 'http://127.0.0.1:9', True)
>>> is_loopback("127.0.0.2:6390"), is_loopback("10.0.0.5:6379"), is_loopback("localhost:6379")
(True, False, True)
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

DEAD_PORT = "http://127.0.0.1:9"  # discard: nothing listens there
LOOPBACK = "localhost,127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,::1"
_TOKEN = secrets.token_hex(32)
PRIVACY = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": f"{DEAD_PORT}/"}


def loopback_env(token: str | None = None) -> dict[str, str]:
    """The variables for a Ray session on this machine (see the module docstring)."""
    env = dict(PRIVACY)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = DEAD_PORT
    env["no_proxy"] = env["NO_PROXY"] = LOOPBACK
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN"] = token or os.environ.get("RAY_AUTH_TOKEN") or _TOKEN
    return env


def is_loopback(address: str) -> bool:
    """Whether a Ray address (``HOST:PORT``, ``ray://HOST:PORT``) names this machine's loopback."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


@contextlib.contextmanager
def ray_environment(address: str | None) -> Iterator[dict[str, str]]:
    """Set the variables for a session on ``address`` (None: a local instance), restore them after."""
    env = loopback_env() if address is None or is_loopback(address) else dict(PRIVACY)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
