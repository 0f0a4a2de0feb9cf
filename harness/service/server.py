"""The grader service's process: a gunicorn arbiter with pre-forked sync workers serving ``GraderApp``.

    python3 -m harness.service.server --zip dist/spider-scoring.zip --bind 127.0.0.1:8000 --token-file FILE [--workers N ...]

Why gunicorn, sync workers: grading is CPU-bound SQLite work of about a millisecond, so one
request per process at a time is the natural unit; processes (not threads) mean a runaway query
holds one worker's core and memory, never a lock the others need, and a worker can be killed
and replaced without touching the rest. gunicorn is pure Python (installable in the image from
wheels, no compiler), widely deployed and maintained, and gives exactly the knobs needed: a
per-worker heartbeat timeout with SIGABRT then SIGKILL, ``max_requests`` recycling with jitter,
graceful SIGTERM (stop accepting, let in-flight requests finish within ``graceful_timeout``),
request line and header limits, and ``post_fork`` / ``child_exit`` / ``worker_abort`` hooks,
where the per-worker limits are installed (``harness.service.settings`` lists the layers).

The bundle is loaded and checked in the arbiter before anything listens (``ServedBundle.load``),
so a forked worker (also a replacement after a kill) is ready at once and never re-extracts.
Logs are one JSON object a line on stderr: the arbiter's own messages, one line per request
(``spider_grader.access``), and the watchdog's kills.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import logging.config
import math
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from harness.common import tokens
from harness.common.errors import HarnessError, InputError
from harness.common.tokens import TokenCheck
from harness.service import settings as service_settings
from harness.service import worker as service_worker
from harness.service.app import GraderApp, WorkerLink
from harness.service.bundle import ServedBundle, require_zip
from harness.service.guard import Watchdog
from harness.service.metrics import Metrics  # it imports prometheus_client only once Metrics.create set the mode
from harness.service.ors import Environment, Tasks
from harness.service.sessions import Sessions
from harness.service.settings import ServiceSettings

log = logging.getLogger("spider_grader.server")
# LogRecord's own attributes; anything else on a record came in through ``extra=`` and is logged.
_RECORD_FIELDS = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, pid, message, and the record's extra fields.

    Every line is redacted (``harness.common.tokens.redact``): the service's token and whatever
    follows ``/t/`` in a path never reach the log, whichever logger (ours or gunicorn's) wrote it.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return tokens.redact(self._format(record), self.secrets)

    def _format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "pid": record.process,
            "message": record.getMessage()}
        data.update({k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def logging_config(level: str = "INFO", secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """dictConfig for gunicorn's loggers and ours: everything as JSON on stderr, ``secrets`` redacted."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    logger = {"level": level, "handlers": ["stderr"], "propagate": False}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": JsonFormatter, "secrets": tuple(secrets)}}, "handlers": {"stderr": handler},
            # gunicorn's access lines are replaced by the application's own (request id, outcome).
            "loggers": {"gunicorn.error": logger, "spider_grader": logger,
                        "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False}},
            "root": {"level": "WARNING", "handlers": ["stderr"]}}


def _gunicorn_application() -> type:
    class GraderServer(BaseApplication):
        """gunicorn, configured from a dict and serving an application built beforehand."""

        def __init__(self, app: GraderApp, options: dict[str, Any]) -> None:
            self.application, self.options = app, options
            super().__init__()

        def load_config(self) -> None:
            for key, value in self.options.items():
                self.cfg.set(key, value)

        def load(self) -> GraderApp:
            return self.application

    return GraderServer


def worker_hooks(app: GraderApp) -> dict[str, Any]:
    """gunicorn's server hooks, bound to ``app``: the per-worker limits and the bookkeeping."""
    settings, metrics = app.settings, app.metrics

    def watchdog_fired(reason: str) -> None:
        if reason != "heartbeat_timeout":  # the arbiter counts those, also the ones no watchdog answered
            metrics.worker_exits.labels(reason).inc()

    def post_fork(server: Any, worker: Any) -> None:
        # In the new worker: its address-space ceiling, its watchdog thread, its link to the app.
        limit = settings.worker_memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        watchdog = Watchdog(watchdog_fired)
        watchdog.start()

        def retire(reason: str) -> None:
            if worker.alive:
                worker.alive = False  # the sync worker's loop ends after this request; the arbiter forks anew
                metrics.worker_exits.labels(reason).inc()
                log.warning("worker retiring after this request", extra={"event": "worker_retired", "reason": reason})
        app.link = WorkerLink(notify=worker.notify, retire=retire, watchdog=watchdog)
        metrics.sample_rss()

    def worker_abort(worker: Any) -> None:
        # SIGABRT from the arbiter: the heartbeat stopped. Answer the client if a request is armed.
        if app.link.watchdog is not None:
            app.link.watchdog.abort("heartbeat_timeout")

    def child_exit(server: Any, worker: Any) -> None:
        # In the arbiter. ``aborted``: it stopped the worker for a missed heartbeat (SIGABRT, then
        # SIGKILL when even that went unanswered: a worker stuck in C code never runs a handler).
        if getattr(worker, "aborted", False):
            metrics.worker_exits.labels("heartbeat_timeout").inc()
            log.warning("worker stopped by the arbiter: no heartbeat", extra={"event": "worker_killed",
                        "reason": "heartbeat_timeout", "worker": worker.pid})
        metrics.worker_exited(worker.pid)

    def when_ready(server: Any) -> None:
        log.info("ready", extra={"event": "ready", "listeners": [str(s) for s in server.LISTENERS],
                                 "workers": settings.workers, **app.bundle.health()})

    return {"post_fork": post_fork, "worker_abort": worker_abort, "child_exit": child_exit,
            "when_ready": when_ready}


def _count_refused(app: GraderApp) -> service_worker.OnRefused:
    """Count and log a connection refused before its head was in (in the worker). Nothing of the head
    is logged: it may hold the token."""
    def refused(status: int, error: str) -> None:
        app.metrics.errors.labels(error).inc()
        app.metrics.requests.labels("other", str(status)).inc()
        logging.getLogger("spider_grader.access").info(
            "request refused before its headers were in", extra={"event": "slow_client", "status": status, "error": error})
    return refused


def gunicorn_options(app: GraderApp, bind: list[str], worker_tmp_dir: str | None = None) -> dict[str, Any]:
    """Every gunicorn setting the service uses, in one place."""
    settings: ServiceSettings = app.settings
    return {
        "bind": bind, "workers": settings.workers, "preload_app": True,
        # gunicorn's sync worker, but a request reaches it only once its head is in (harness.service.worker).
        "worker_class": service_worker.configured(settings.header_timeout_s, _count_refused(app)),
        # gunicorn takes whole seconds; rounding up never makes a layer fire before the one inside it.
        "timeout": math.ceil(settings.heartbeat_timeout_s), "graceful_timeout": math.ceil(settings.graceful_timeout_s),
        "max_requests": settings.max_requests, "max_requests_jitter": settings.max_requests_jitter,
        # Request line and headers: small, a grader's requests carry only a few headers.
        "limit_request_line": 4094, "limit_request_fields": 50, "limit_request_field_size": 8190,
        "accesslog": None, "errorlog": "-", "loglevel": "info", "logconfig_dict": logging_config(secrets=app.auth.secrets),
        "control_socket_disable": True,  # no management socket: nothing to write, nothing to attack
        "worker_tmp_dir": worker_tmp_dir, "proc_name": "spider-grader",
        **worker_hooks(app),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the server process (``serve --local`` passes them through)."""
    parser.add_argument("--zip", type=Path, required=True, help="the bundle zip to serve (the bytes that are pushed)")
    parser.add_argument("--bind", action="append", default=None,
                        help="HOST:PORT or fd://N to listen on (repeatable; default 127.0.0.1:8000)")
    parser.add_argument("--metrics-dir", type=Path,
                        help="folder for the workers' metric files, emptied at start (default: a new temporary folder)")
    parser.add_argument("--workdir", type=Path, help="where to unpack the bundle (default: the temporary folder)")
    parser.add_argument("--worker-tmp-dir", help="gunicorn's heartbeat files (default: the temporary folder)")
    parser.add_argument("--tasks", type=Path, metavar="DIR",
                        help="a prepared folder's data/ (rl.jsonl, eval.jsonl): serve them as the Open Reward Standard's "
                             "environment (default: none, no ORS routes)")
    parser.add_argument("--token-file", type=Path, metavar="FILE",
                        help=f"file holding the service's token (default: ${tokens.ENV}; one of the two is required)")
    service_settings.add_arguments(parser)


def load_token(token_file: Path | None) -> str:
    """The token from ``--token-file`` or ``$SPIDER_GRADER_TOKEN``; InputError saying how when neither is given."""
    token, _source = tokens.from_sources(token_file)
    if token is None:
        raise InputError(f"the grader service needs a token: put one in a file and pass --token-file FILE, "
                         f"or set ${tokens.ENV} (make one with {tokens.NEW_TOKEN_HINT}); "
                         "`python3 -m harness serve` makes one for you")
    return token


def serve(args: argparse.Namespace) -> int:
    """Load and check the bundle, then run gunicorn until SIGTERM / SIGINT."""
    settings = service_settings.from_args(args)
    token = load_token(args.token_file)
    logging.config.dictConfig(logging_config(secrets=(token,)))
    bundle = ServedBundle.load(require_zip(args.zip), args.workdir)
    arbiter_pid = os.getpid()
    try:
        metrics = Metrics.create(args.metrics_dir or tempfile.mkdtemp(prefix="spider-grader-metrics-"),
                                 bundle.outcomes)
        data = bundle.health()
        metrics.describe_bundle(bundle.sha256, data.get("sqlite_version_runtime", ""),
                                data.get("sqlite_version_built", ""))
        # The episodes (ORS sessions, NeMo Gym's Gymnasium episodes) in one file the workers share.
        sessions = Sessions(tempfile.mkdtemp(prefix="spider-grader-sessions-", dir=args.workdir))
        environment = None
        if args.tasks is not None:
            environment = Environment(Tasks(args.tasks, bundle.row_databases()), sessions,
                                      multi_turn=bundle.episodes is not None)
        app = GraderApp(bundle, settings, metrics, TokenCheck(token), environment, sessions)
        log.info("bundle loaded and checked", extra={"event": "bundle_checked", **data})
        options = gunicorn_options(app, args.bind or ["127.0.0.1:8000"], args.worker_tmp_dir)
        _gunicorn_application()(app, options).run()
    finally:
        # A worker leaves gunicorn through SystemExit, up this same stack: only the arbiter may
        # remove the unpacked bundle the other workers still read.
        if os.getpid() == arbiter_pid:
            bundle.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.config.dictConfig(logging_config())
    parser = argparse.ArgumentParser(prog="python3 -m harness.service.server", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve(args)
    except HarnessError as exc:
        log.error(f"cannot serve: {exc}", extra={"event": "startup_failed", "error": type(exc).__name__})
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
