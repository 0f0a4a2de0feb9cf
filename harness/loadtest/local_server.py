"""Run the grader service as a local process on 127.0.0.1: for the load test and the tests.

``LocalServer`` binds a listening socket on an ephemeral loopback port itself and hands it to the
server as ``fd://N`` (gunicorn's inherited-socket bind), so there is no race for a free port;
then it waits for ``GET /readyz``. The service's token is a new one unless given; it reaches the
server through its environment (never its command line) and ``request`` sends it. ``stop`` sends SIGTERM (gunicorn's graceful shutdown) and
kills only what does not exit in time.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.common import tokens
from harness.common.bundle_loader import remove_unpacked
from harness.common.errors import HarnessError
from harness.common.http_client import Reply, parse_prometheus, request
from harness.service.settings import ServiceSettings, to_argv

ROOT = Path(__file__).resolve().parents[2]


def worker_pids(master_pid: int) -> list[int]:
    """The child processes of ``master_pid`` (Linux /proc), i.e. gunicorn's live workers."""
    found: list[int] = []
    for task in Path(f"/proc/{master_pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:  # the task ended while listing
            continue
    return sorted(found)


class LocalServer:
    """The service as a child process on 127.0.0.1 (``python3 -m harness.service.server``)."""

    def __init__(self, zip_path: str | os.PathLike, settings: ServiceSettings | None = None, *,
                 env: dict[str, str] | None = None, workdir: str | os.PathLike | None = None,
                 token: str | None = None, tasks: str | os.PathLike | None = None) -> None:
        self.zip_path = Path(zip_path)
        self.tasks = tasks  # a prepared folder's data/: the ORS environment (none without)
        self.settings = settings or ServiceSettings()
        self.env = env or {}
        self.token = token or tokens.generate()
        self.tmp = Path(tempfile.mkdtemp(prefix="spider-grader-local-", dir=workdir))
        self.log_path = self.tmp / "server.log"
        self.host = "127.0.0.1"
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise HarnessError("the server is not started")
        return self.process.pid

    def start(self, ready_timeout: float = 60.0) -> LocalServer:
        """Start the server and wait until it is ready; HarnessError with its log when it is not."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(256)
        self.port = listener.getsockname()[1]
        command = [sys.executable, "-m", "harness.service.server", "--zip", str(self.zip_path),
                   "--bind", f"fd://{listener.fileno()}", "--metrics-dir", str(self.tmp / "metrics"),
                   "--workdir", str(self.tmp), *to_argv(self.settings)]
        if self.tasks is not None:
            command += ["--tasks", str(self.tasks)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", **self.env, tokens.ENV: self.token}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            pass_fds=(listener.fileno(),), env=env, cwd=str(ROOT))
        listener.close()  # the server holds its own copy
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise HarnessError(f"the grader service exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                # Ready, and every worker forked: tests and load figures start from the full pool.
                if (request(self.host, self.port, "GET", "/readyz", timeout=2.0).status == 200
                        and len(self.workers()) >= self.settings.workers):
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        raise HarnessError(f"the grader service was not ready within {timeout:g} s:\n{self.log_tail()}")

    @property
    def auth_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def request(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
                **kwargs: Any) -> Reply:
        """One request with the token in its header (``headers`` may replace it)."""
        return request(self.host, self.port, method, path, body, headers={**self.auth_header, **(headers or {})}, **kwargs)

    def metrics(self) -> dict[str, float]:
        reply = self.request("GET", "/metrics")
        if reply.status != 200:
            raise HarnessError(f"GET /metrics answered {reply.status}: {reply.text[:300]}\n{self.log_tail()}")
        return parse_prometheus(reply.text)

    def workers(self) -> list[int]:
        return worker_pids(self.pid)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful), then SIGKILL after ``timeout``; the exit status."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)

    def cleanup(self) -> None:
        """Remove the temporary folder (log, metrics, any unpacked bundle left by a killed server)."""
        remove_unpacked(self.tmp)  # the unpacked bundle is read-only on purpose

    def __enter__(self) -> LocalServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()
