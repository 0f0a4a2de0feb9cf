"""The proxy container's entry point: nginx in the foreground, its logs redacted and made JSON.

    python3 -m harness.proxy.main [--config /etc/spider-proxy/nginx.conf] [--token-file /etc/spider-proxy/token]

nginx writes the request line into its error log (a body too large, a client that timed out, an
upstream that failed), and a path token is part of that line. So nginx's two streams come through
this process, which redacts every line (``harness.common.tokens.redact``: the token, and whatever
follows ``/t/``) before it reaches the container's log: the access log (already JSON, see
``nginx_conf``) on stdout, the error log as one JSON object a line on stderr.

SIGTERM or SIGINT asks nginx for a graceful stop (SIGQUIT: requests in flight finish); SIGHUP is
passed on (reload). The exit status is nginx's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from harness.common import tokens
from harness.proxy.nginx_conf import CONFIG_DIR, RUN_DIR

_ERROR_LINE = re.compile(r"^(\d{4})/(\d\d)/(\d\d) (\d\d:\d\d:\d\d) \[(\w+)\] (.*)$")


def error_record(line: str) -> str:
    """One line of nginx's error log as a JSON object (``ts``, ``level``, ``logger``, ``message``).

    >>> json.loads(error_record("2026/12/01 10:00:00 [warn] 7#7: *1 a client timed out"))["level"]
    'warn'
    """
    found = _ERROR_LINE.match(line)
    if not found:
        return json.dumps({"level": "info", "logger": "proxy.nginx", "message": line})
    year, month, day, clock, level, message = found.groups()
    return json.dumps({"ts": f"{year}-{month}-{day}T{clock}", "level": level, "logger": "proxy.nginx", "message": message})


def relay(source: IO[bytes], sink: IO[str], secrets: tuple[str, ...], shape: Callable[[str], str]) -> None:
    """Copy ``source`` to ``sink`` a line at a time: shaped, then redacted (the order matters: a
    token split by JSON escaping would otherwise slip through)."""
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line:
            sink.write(tokens.redact(shape(line), secrets) + "\n")
            sink.flush()


def nginx_command(nginx: str, config: str, run_dir: str = RUN_DIR) -> list[str]:
    """nginx in the foreground (``daemon off`` is in the configuration), its early errors on stderr."""
    return [nginx, "-p", run_dir + "/", "-c", config, "-e", "stderr"]


def run(nginx: str, config: str, secrets: tuple[str, ...], run_dir: str = RUN_DIR) -> int:
    for sub in ("", "body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(run_dir, sub), mode=0o700, exist_ok=True)
    process = subprocess.Popen(nginx_command(nginx, config, run_dir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None

    def forward(signum: int, frame: object) -> None:
        process.send_signal(signal.SIGHUP if signum == signal.SIGHUP else signal.SIGQUIT)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    threads = [threading.Thread(target=relay, args=(process.stdout, sys.stdout, secrets, lambda line: line), daemon=True),
               threading.Thread(target=relay, args=(process.stderr, sys.stderr, secrets, error_record), daemon=True)]
    for thread in threads:
        thread.start()
    code = process.wait()
    for thread in threads:
        thread.join(5)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.proxy.main", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=f"{CONFIG_DIR}/nginx.conf", help="nginx's configuration (written by nginx_conf)")
    parser.add_argument("--token-file", default=f"{CONFIG_DIR}/token", help="the service's token, redacted from every line")
    parser.add_argument("--nginx", default="/usr/sbin/nginx", help="the nginx executable")
    parser.add_argument("--run-dir", default=RUN_DIR, help="nginx's prefix: pid file and buffers (the container's tmpfs)")
    args = parser.parse_args(argv)
    secrets = (tokens.read_file(args.token_file),) if Path(args.token_file).exists() else ()
    return run(args.nginx, args.config, secrets, args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
