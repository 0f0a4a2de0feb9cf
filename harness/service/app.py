"""The grader service's WSGI application: routes, body limits, envelopes in, scores or errors out.

| method and path | answer |
|---|---|
| ``POST /grade`` (also ``POST /``) | one envelope ``{"input", "output", "expected"}`` -> ``{"score", "outcome", "explanation", "sql"}`` |
| ``POST /grade/batch`` | ``{"envelopes": [...]}`` (or a bare list) -> ``{"results": [...], "counts", "scored", "unscored"}`` |
| ``POST /openrlhf`` | OpenRLHF's ``{"query", "prompts", "labels"}`` -> ``{"rewards", "scores", "extra_logs"}`` (service.openrlhf) |
| ``POST /verify`` | NeMo Gym's task row with the model's ``response`` -> the row with ``reward`` and the verdict (service.nemo_gym) |
| ``POST /aggregate_metrics`` | NeMo Gym's ``{"verify_responses": [...]}`` -> accuracy, pass@k and majority@k per task and overall |
| ``POST /seed_session``, ``POST /close_session``, ``GET /reverify_mode`` | NeMo Gym's session calls (nothing kept) and ``"stateless"`` |
| ORS: ``/create_session``, ``/create``, ``/prompt``, ``/call``... | the rl and eval splits as the ORS environment ``spider`` (service.ors) |
| ``GET /health`` | bundle SHA-256, SQLite versions (runtime and build), data summary, worker pid |
| ``GET /readyz`` / ``GET /livez`` | 200 once the bundle's data is checked / while the process answers |
| ``GET /metrics`` | Prometheus text format, summed over the workers |

Every path but health, readiness and liveness needs the service's token (``harness.common.tokens``):
``Authorization: Bearer TOKEN`` or the path form ``/t/TOKEN/grade`` (``/t/TOKEN/openrlhf`` for
OpenRLHF, which sends no header; ``/t/TOKEN/verify``... for NeMo Gym), or ORS's ``X-API-Key: TOKEN``. Without it (or with a wrong
one) the answer is the same 401, checked before the body is read and for unknown paths too, so an
unauthenticated client learns nothing of the routes. Logged paths and error messages are redacted.

Every answer that is not a score (bad JSON, a body over the limit, an infrastructure fault of the
bundle, a worker stopped at its hard limit) is an HTTP error with a JSON body
(``harness.service.bundle.GradeError.body``), never a ``score``. The application runs inside
gunicorn's sync workers (``harness.service.server``), which give it the client socket for the
watchdog, a heartbeat and a way to retire the worker (``WorkerLink``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from harness.common import tokens
from harness.common.tokens import TokenCheck
from harness.service import gymnasium, nemo_gym, openrlhf, ors
from harness.service import sessions as sessions_mod
from harness.service.bundle import GradeError, ServedBundle, ServiceOutcome
from harness.service.guard import Partial, Watchdog
from harness.service.metrics import CONTENT_TYPE as METRICS_TYPE
from harness.service.metrics import Metrics
from harness.service.sessions import Sessions
from harness.service.settings import ServiceSettings

log = logging.getLogger("spider_grader.access")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           413: "Content Too Large", 422: "Unprocessable Content", 500: "Internal Server Error",
           503: "Service Unavailable", 504: "Gateway Timeout"}
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
GRADE_PATHS = ("/", "/grade")
BATCH_PATH = "/grade/batch"
GRADING_PATHS = GRADE_PATHS + (BATCH_PATH, openrlhf.PATH, nemo_gym.VERIFY_PATH, gymnasium.STEP_PATH, "/call",
                                f"/{ors.ENV_NAME}/call")


class HttpError(Exception):
    """An answer that is not a score, raised anywhere in a request's handling."""

    def __init__(self, error: GradeError) -> None:
        super().__init__(error.message)
        self.error = error


def request_error(status: int, error: str, message: str) -> HttpError:
    """The service's own errors: 4xx are the request's fault, 5xx the service's."""
    outcome: ServiceOutcome = "request_error" if status < 500 else "infrastructure_error"
    return HttpError(GradeError(status, error, outcome, message))


@dataclasses.dataclass
class WorkerLink:
    """What the application needs from the worker process it runs in (no-ops outside gunicorn)."""

    notify: Callable[[], None] = lambda: None  # gunicorn's heartbeat: "still alive"
    retire: Callable[[str], None] = lambda reason: None  # exit after this request, a new one is forked
    watchdog: Watchdog | None = None


def read_body(environ: dict, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes (413 above it, checked before reading when declared)."""
    declared = environ.get("CONTENT_LENGTH") or ""
    if declared:
        if not declared.isdigit():
            raise request_error(400, "BadContentLength", f"Content-Length {declared[:40]!r} is not a number")
        if int(declared) > limit:
            raise request_error(413, "BodyTooLarge", f"the body is {int(declared):,} bytes, over this "
                                f"endpoint's limit of {limit:,}: send fewer or smaller envelopes")
    stream, chunks, total = environ["wsgi.input"], [], 0
    try:
        while True:  # also bounds a chunked body, which declares no length
            block = stream.read(min(1 << 16, limit + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > limit:
                drain(environ.get("gunicorn.socket"), limit)
                raise request_error(413, "BodyTooLarge", f"the body is over this endpoint's limit of {limit:,} bytes")
        return b"".join(chunks)
    except MemoryError:
        chunks.clear()  # free what was read, then let the client finish sending
        drain(environ.get("gunicorn.socket"), limit)
        raise


def drain(sock: socket.socket | None, max_bytes: int, idle_s: float = 0.5, total_s: float = 5.0) -> int:
    """Read and drop what the client is still sending (at most ``max_bytes``, until it pauses).

    A client still sending a body the service has refused would otherwise meet a connection reset
    instead of the JSON error. Read from the socket itself: after a failed read the server's body
    reader may expect bytes that were already consumed.
    """
    if sock is None:
        return 0
    dropped, deadline = 0, time.monotonic() + total_s
    try:
        sock.settimeout(idle_s)
        while dropped < max_bytes and time.monotonic() < deadline:
            block = sock.recv(1 << 16)
            if not block:
                break
            dropped += len(block)
    except OSError:  # quiet (timeout) or gone: either way, done
        pass
    finally:
        try:
            sock.settimeout(None)
        except OSError:
            pass
    return dropped


def discard_body(environ: dict, cap: int = 1 << 16, timeout_s: float = 2.0) -> None:
    """Read and drop a small declared body the service will not use, so the client can read the
    answer instead of meeting a reset. A larger, chunked or slow one is left unread: the connection
    closes after the answer, and nobody without the token holds a worker for long. ``timeout_s``
    bounds the whole read, not each byte (a body trickled a byte a second passes any per-read
    limit): past it, the socket's reading side is shut, which ends the read at once."""
    declared = environ.get("CONTENT_LENGTH") or ""
    if not declared.isdigit() or not 0 < int(declared) <= cap:
        return
    sock = environ.get("gunicorn.socket")
    stop = threading.Timer(timeout_s, _stop_reading, (sock,))
    stop.start()
    try:
        environ["wsgi.input"].read(int(declared))
    except OSError:  # slow or gone: the answer is written anyway
        pass
    finally:
        stop.cancel()


def _stop_reading(sock: socket.socket | None) -> None:
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RD)
    except OSError:  # already closed: nothing to stop
        pass


def parse_json(body: bytes) -> Any:
    """The body as JSON; 400 naming the problem when it is not UTF-8 JSON."""
    if not body.strip():
        raise request_error(400, "MalformedJSON", "the body is empty: POST a JSON envelope "
                            '{"input": ..., "output": ..., "expected": ...}')
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise request_error(400, "MalformedJSON", f"the body is not UTF-8 JSON: {str(exc)[:200]}") from None


def check_envelope(value: Any, where: str = "the body") -> dict[str, Any]:
    """An envelope must be a JSON object; what it holds is the bundle's to judge (CallArgumentsError)."""
    if not isinstance(value, dict):
        raise request_error(400, "InvalidEnvelope", f"{where} is a JSON {type(value).__name__}, not an "
                            'object: send {"input": ..., "output": ..., "expected": ...}')
    return value


def batch_answer(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The body of ``/grade/batch``: each envelope's answer, and the counts."""
    counts: dict[str, int] = {}
    for item in results:
        counts[item["outcome"]] = counts.get(item["outcome"], 0) + 1
    scored = sum(1 for item in results if "score" in item)
    return {"results": results, "counts": counts, "scored": scored, "unscored": len(results) - scored}


def _partial(answer: Callable[[list[dict[str, Any]]], dict[str, Any]], done: list[dict[str, Any]], left: int) -> Partial:
    """What the watchdog answers if the envelope being graded now is stopped (see ``_grade_each``)."""
    def build(timeout_body: dict[str, Any]) -> dict[str, Any]:
        not_graded = GradeError(503, "WorkerStopped", "infrastructure_error", "not graded: an earlier envelope of "
                                "this batch went over the hard limit and its worker was stopped; send this one again")
        return answer(list(done) + [timeout_body] + [not_graded.body()] * left)
    return build


class GraderApp:
    """The WSGI callable. Built once in the arbiter; each forked worker attaches its ``WorkerLink``."""

    def __init__(self, bundle: ServedBundle, settings: ServiceSettings, metrics: Metrics, auth: TokenCheck,
                 environment: ors.Environment | None = None, sessions: Sessions | None = None) -> None:
        self.bundle = bundle
        self.sessions = sessions if sessions is not None else (environment.sessions if environment else None)
        self.settings = settings
        self.metrics = metrics
        self.auth = auth
        self.environment = environment  # ORS: None when the server was started without the splits
        self.link = WorkerLink()
        self._routes: dict[str, dict[str, Callable[[dict, str], tuple[int, Any]]]] = {
            **{path: {"POST": self._post_grade} for path in GRADE_PATHS},
            BATCH_PATH: {"POST": self._post_batch},
            openrlhf.PATH: {"POST": self._post_openrlhf},
            nemo_gym.VERIFY_PATH: {"POST": self._post_nemo_gym_verify},
            nemo_gym.AGGREGATE_PATH: {"POST": self._post_nemo_gym_aggregate},
            nemo_gym.SEED_PATH: {"POST": self._post_nemo_gym_session},
            nemo_gym.CLOSE_PATH: {"POST": self._post_nemo_gym_session},
            nemo_gym.REVERIFY_PATH: {"GET": lambda environ, rid: (200, nemo_gym.REVERIFY_MODE)},
            gymnasium.RESET_PATH: {"POST": self._post_gym_reset},
            gymnasium.STEP_PATH: {"POST": self._post_gym_step},
            "/health": {"GET": self._get_health},
            "/readyz": {"GET": self._get_ready},
            "/livez": {"GET": lambda environ, rid: (200, {"status": "alive", "pid": os.getpid()})},
            "/metrics": {"GET": lambda environ, rid: (200, self.metrics.render())},
        }
        for route in ors.PATHS:
            for path in (route, f"/{ors.ENV_NAME}{route}"):
                self._routes[path] = {"GET": self._ors, "POST": self._ors}

    # -- WSGI ------------------------------------------------------------------------------
    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        started = time.monotonic()
        method = environ.get("REQUEST_METHOD", "GET")
        path, logged_path, authorized = self._authorize(environ)
        given = environ.get("HTTP_X_REQUEST_ID", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        notes: dict[str, Any] = {}
        grading = authorized and path in GRADING_PATHS  # a scrape does not count as busy
        if grading:
            self.metrics.in_flight.inc()
        try:
            if authorized:
                status, payload = self._dispatch(environ, path, method, request_id, notes)
            else:
                status, payload = self._refuse(environ, notes)
        finally:
            if grading:
                self.metrics.in_flight.dec()
            if self.link.watchdog is not None:
                self.link.watchdog.disarm()  # from here on the main thread answers, not the watchdog
        if isinstance(payload, ors.Stream):
            body, ctype = payload.body, ors.STREAM_TYPE
        else:
            body, ctype = ((payload, METRICS_TYPE) if isinstance(payload, bytes)
                           else (json.dumps(payload).encode(), "application/json"))
        endpoint = path if path in self._routes else "other"
        seconds = time.monotonic() - started
        self.metrics.requests.labels(endpoint, str(status)).inc()
        self.metrics.latency.labels(endpoint).observe(seconds)
        self._after_request()
        log.info("request", extra={"event": "request", "request_id": request_id, "method": method,
                                   "path": logged_path[:200], "status": status, "ms": round(seconds * 1000, 2), **notes})
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), ("X-Request-Id", request_id)]
        if status == 405:
            headers.append(("Allow", ", ".join(self._routes.get(path, {}))))
        if status == 401:
            headers.append(("WWW-Authenticate", tokens.REALM))
        if environ.get("spider.set_cookie"):
            headers.append(("Set-Cookie", environ["spider.set_cookie"]))
        start_response(f"{status} {REASONS.get(status, 'Error')}", headers)
        return [body]

    # -- the token ---------------------------------------------------------------------------
    def _authorize(self, environ: dict) -> tuple[str, str, bool]:
        """(the route, the path as logged, whether the request may have it).

        The path form is read from the raw request target, so only the literal ``/t/TOKEN`` counts
        (the token's characters never need percent-encoding); the route is the rest of PATH_INFO.
        """
        path = environ.get("PATH_INFO") or "/"
        given, _rest = tokens.split_path((environ.get("RAW_URI") or path).split("?", 1)[0])
        if given is not None:
            prefix = tokens.PATH_PREFIX + given
            literal = path.startswith(prefix)
            route = (path[len(prefix):] or "/") if literal else "/"
            return route, tokens.PATH_PREFIX + tokens.REDACTED + self._redact(route), literal and self.auth.matches(given)
        if path in tokens.OPEN_PATHS:
            return path, path, True
        given = tokens.bearer(environ.get("HTTP_AUTHORIZATION", "")) or environ.get("HTTP_X_API_KEY") or None
        return path, self._redact(path), self.auth.matches(given)

    def _refuse(self, environ: dict, notes: dict[str, Any]) -> tuple[int, Any]:
        """The one 401, whatever was wrong: no body is used (a small declared one is read and dropped)."""
        error = GradeError(401, "Unauthorized", "request_error", tokens.UNAUTHORIZED_MESSAGE)
        discard_body(environ)
        self._count_error(error)
        notes.update(error=error.error, outcome=error.outcome)
        return 401, tokens.unauthorized_body()

    def _redact(self, text: str) -> str:
        return tokens.redact(text, self.auth.secrets)

    def _dispatch(self, environ: dict, path: str, method: str, request_id: str,
                  notes: dict[str, Any]) -> tuple[int, Any]:
        if self.link.watchdog is not None:  # the hard limit covers reading the body too
            self.link.watchdog.arm(environ.get("gunicorn.socket"), self.settings.envelope_timeout_s, request_id)
        try:
            handlers = self._routes.get(path)
            if handlers is None:
                raise request_error(404, "NotFound", f"no endpoint {self._redact(path[:100])!r}: POST /grade, /grade/batch, "
                                    "/openrlhf or NeMo Gym's /verify, /aggregate_metrics, /seed_session, /close_session; "
                                    "GET /reverify_mode, /health, /readyz, /livez, /metrics; the ORS environment's "
                                    "/create_session, /create, /prompt, /call... (serve --tasks)")
            handler = handlers.get(method)
            if handler is None:
                raise request_error(405, "MethodNotAllowed", f"{self._redact(method[:20])} is not allowed on {self._redact(path[:100])}: use "
                                    f"{', '.join(handlers)}")
            environ["spider.route"] = path  # the route, after the path form of the token
            status, payload = handler(environ, request_id)
            if isinstance(payload, dict) and path in GRADING_PATHS:
                notes.update({k: payload[k] for k in ("outcome", "counts", "unscored") if k in payload})
            return status, payload
        except HttpError as exc:
            self._count_error(exc.error)
            notes.update(error=exc.error.error, outcome=exc.error.outcome)
            return exc.error.status, exc.error.body()
        except MemoryError:
            # RLIMIT_AS refused an allocation outside SQLite: answer, then let a fresh worker take over.
            self.link.retire("memory_error")
            error = GradeError(503, "WorkerMemoryLimit", "infrastructure_error",
                               "the worker ran out of memory (its RLIMIT_AS) while grading; it is being "
                               "replaced. The example is unscored: retry it")
            self._count_error(error)
            notes.update(error=error.error)
            return error.status, error.body()
        except Exception:  # a bug of the service: still a JSON error, never a score
            logging.getLogger("spider_grader.error").exception("unexpected error answering a request")
            error = GradeError(500, "InternalError", "infrastructure_error",
                               "the service failed unexpectedly; see its log")
            self._count_error(error)
            notes.update(error=error.error)
            return error.status, error.body()

    # -- endpoints -------------------------------------------------------------------------
    def _post_grade(self, environ: dict, request_id: str) -> tuple[int, Any]:
        envelope = check_envelope(parse_json(read_body(environ, self.settings.max_body_bytes)))
        return 200, self._grade_one(envelope)

    def _post_batch(self, environ: dict, request_id: str) -> tuple[int, Any]:
        data = parse_json(read_body(environ, self.settings.max_batch_bytes))
        items = data.get("envelopes") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise request_error(400, "InvalidBatch", 'send {"envelopes": [envelope, ...]} or a JSON list of envelopes')
        self._check_batch_size(len(items))
        envelopes = [check_envelope(item, f"envelope {i}") for i, item in enumerate(items)]
        return 200, batch_answer(self._grade_each(environ, request_id, envelopes, batch_answer))

    def _post_openrlhf(self, environ: dict, request_id: str) -> tuple[int, Any]:
        data = parse_json(read_body(environ, self.settings.max_batch_bytes))
        try:
            envelopes = openrlhf.envelopes(data)
        except openrlhf.RequestShapeError as exc:
            raise request_error(400, "InvalidOpenRLHFRequest", str(exc)) from None
        self._check_batch_size(len(envelopes))
        def answer(results: list[dict[str, Any]]) -> dict[str, Any]:
            return openrlhf.answer(results, self.bundle.outcomes)
        return 200, answer(self._grade_each(environ, request_id, envelopes, answer))

    def _post_nemo_gym_verify(self, environ: dict, request_id: str) -> tuple[int, Any]:
        body = parse_json(read_body(environ, self.settings.max_body_bytes))
        try:
            envelope = nemo_gym.envelope(body)
        except nemo_gym.RequestShapeError as exc:
            raise request_error(422, "InvalidNeMoGymRequest", str(exc)) from None
        try:
            result = self._grade_one(envelope)
        except HttpError as exc:
            self._count_error(exc.error)
            if exc.error.outcome == "request_error":  # the row itself cannot be graded: NeMo Gym's failure
                return 200, nemo_gym.refused(body, exc.error)
            result = exc.error.body()
        return 200, nemo_gym.verified(body, result, lambda r: self.bundle.shaped(r, envelope["output"]))

    def _post_nemo_gym_aggregate(self, environ: dict, request_id: str) -> tuple[int, Any]:
        body = parse_json(read_body(environ, self.settings.max_batch_bytes))
        try:
            return 200, nemo_gym.aggregate(body)
        except nemo_gym.RequestShapeError as exc:
            raise request_error(422, "InvalidNeMoGymRequest", str(exc)) from None

    def _post_nemo_gym_session(self, environ: dict, request_id: str) -> tuple[int, Any]:
        body = parse_json(read_body(environ, self.settings.max_body_bytes))  # read and dropped: nothing is kept
        session = body.get("resources_session_id") if isinstance(body, dict) else None
        return 200, ({"resources_session_id": session} if isinstance(session, str) else {})

    def _gym_sessions(self, environ: dict) -> Sessions:
        if self.sessions is None or self.bundle.episodes is None:
            discard_body(environ)
            raise request_error(404, "NoEpisodes", "this service keeps no episodes: its bundle has no multi-turn "
                                "episode (bundle/scoring/episode.py; rebuild it with this harness)")
        return self.sessions

    def _post_gym_reset(self, environ: dict, request_id: str) -> tuple[int, Any]:
        """NeMo Gym's Gymnasium ``/reset`` (service.gymnasium): a new episode, named in a cookie."""
        sessions = self._gym_sessions(environ)
        body = parse_json(read_body(environ, self.settings.max_body_bytes))
        try:
            row = gymnasium.episode_row(body)
        except nemo_gym.RequestShapeError as exc:
            raise request_error(422, "InvalidNeMoGymRequest", str(exc)) from None
        sid = sessions.new(row)
        environ["spider.set_cookie"] = gymnasium.set_cookie(sid)
        return 200, {"observation": None, "info": {"spider_episode": sid}}

    def _post_gym_step(self, environ: dict, request_id: str) -> tuple[int, Any]:
        """NeMo Gym's Gymnasium ``/step``: one model turn of the cookie's episode (service.gymnasium)."""
        sessions = self._gym_sessions(environ)
        body = parse_json(read_body(environ, self.settings.max_body_bytes))
        if not isinstance(body, dict):
            raise request_error(422, "InvalidNeMoGymRequest", "the body must be a JSON object: the row and the response")
        sid = gymnasium.cookie_of(environ)
        try:
            row, finished = sessions.row(sid)
        except ors.OrsError as exc:
            raise request_error(404, "UnknownEpisode", f"{exc.detail} (the {gymnasium.COOKIE} cookie /reset set)") from None
        assert sid is not None

        return 200, gymnasium.step(body, row, finished, self.bundle.episodes.read_action,
                                   lambda sql: self._explore(sessions, row, sid, sql),
                                   lambda: sessions.finish(sid), self._graded)

    def _ors(self, environ: dict, request_id: str) -> tuple[int, Any]:
        """An Open Reward Standard request (service.ors): JSON or an event stream; errors with ``detail``."""
        route = ors.route(environ.get("spider.route", ""))
        if self.environment is None or route is None:
            discard_body(environ)
            error = ors.OrsError(404, "NoEnvironment", "this service was started without the splits, so it serves no "
                                 "ORS environment: `serve --data DIR` (a prepared folder) or the server's --tasks DIR/data")
            return error.status, error.body()
        length = environ.get("CONTENT_LENGTH") or ""
        chunked = environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
        body = parse_json(read_body(environ, self.settings.max_body_bytes)) if (length not in ("", "0") or chunked) else {}

        environment = self.environment

        def explore(row: dict[str, Any], sid: str, sql: Any) -> tuple[str | None, dict[str, Any]]:
            return self._explore(environment.sessions, row, sid, sql)

        try:
            return 200, environment.answer(route, body, environ.get(ors.SESSION_HEADER), self._graded, explore)
        except ors.OrsError as exc:
            self._count_error(GradeError(exc.status, exc.error, "request_error", exc.detail))
            return exc.status, exc.body()

    def _graded(self, envelope: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
        """An episode's answer graded: (the grader's answer, what the bundle's shape pays), or (the error's
        body, None) when the row cannot be graded (an ORS submit, a Gymnasium step)."""
        try:
            result = self._grade_one(envelope)
        except HttpError as exc:
            self._count_error(exc.error)
            return exc.error.body(), None
        return result, self.bundle.shaped(result, envelope["output"])

    def _explore(self, sessions: Sessions, row: dict[str, Any], sid: str, sql: Any) -> tuple[str | None, dict[str, Any]]:
        """One exploration query of a multi-turn episode (service.sessions.explore): what the model is
        shown, or None and the error body when the bundle cannot explore the row (then unscored)."""
        self.link.notify()
        try:
            return sessions_mod.explore(sessions, sid, self.bundle.episodes, self.bundle.limits(), row, sql,
                                        self.bundle.root), {}
        except Exception as exc:
            error = self.bundle.classify(exc)
            if error is None:
                raise
            self._count_error(error)
            return None, error.body()

    def _check_batch_size(self, size: int) -> None:
        if size > self.settings.max_batch_items:
            raise request_error(413, "BatchTooLarge", f"{size} envelopes, over the limit of "
                                f"{self.settings.max_batch_items} a batch: split it")

    def _grade_each(self, environ: dict, request_id: str, items: Sequence[dict[str, Any] | GradeError],
                    answer: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> list[dict[str, Any]]:
        """Each envelope's own answer, in order: one envelope's fault is that item's, not the batch's.

        An envelope past the hard limit stops the worker (the watchdog); the answer then still goes
        out per envelope: those done, that one's timeout, the rest not graded (``partial``).
        """
        deadline = time.monotonic() + self.settings.request_timeout_s
        results: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            self.link.notify()  # a long batch is not a stuck worker
            if isinstance(item, GradeError):
                self._count_error(item)
                results.append(item.body())
                continue
            if time.monotonic() > deadline:
                error = GradeError(504, "RequestDeadline", "infrastructure_error", "not graded: the batch's deadline of "
                                   f"{self.settings.request_timeout_s:g} s passed first; send it again")
                self._count_error(error)
                results.append(error.body())
                continue
            if self.link.watchdog is not None:
                self.link.watchdog.arm(environ.get("gunicorn.socket"), self.settings.envelope_timeout_s, request_id,
                                       partial=_partial(answer, results, len(items) - i - 1))
            try:
                results.append(self._grade_one(item))
            except HttpError as exc:
                self._count_error(exc.error)
                results.append(exc.error.body())
        return results

    def _grade_one(self, envelope: dict[str, Any]) -> dict[str, Any]:
        try:
            verdict = self.bundle.grade(envelope)
        except TypeError as exc:  # e.g. a keyword the bundle's signature already binds
            raise request_error(400, "InvalidEnvelope", f"the envelope's keys cannot be passed to the grader: {exc}") from None
        except Exception as exc:
            error = self.bundle.classify(exc)
            if error is None:
                logging.getLogger("spider_grader.error").exception("unexpected error while grading")
                error = GradeError(500, "InternalError", "infrastructure_error",
                                   f"the grader failed unexpectedly ({type(exc).__name__}); see the service log")
            raise HttpError(error) from None
        self.metrics.outcomes.labels(verdict["outcome"]).inc()
        return {"score": verdict["score"], "outcome": verdict["outcome"],
                "explanation": verdict["explanation"], "sql": verdict.get("sql")}

    def _get_health(self, environ: dict, request_id: str) -> tuple[int, Any]:
        return 200, {"status": "ok" if self.bundle.ready else "starting", "ready": self.bundle.ready,
                     "bundle": self.bundle.health(), "pid": os.getpid(),
                     "settings": dataclasses.asdict(self.settings)}

    def _get_ready(self, environ: dict, request_id: str) -> tuple[int, Any]:
        if not self.bundle.ready:
            raise request_error(503, "NotReady", "the bundle's data is not checked yet")
        return 200, {"ready": True, "sha256": self.bundle.sha256}

    # -- bookkeeping -----------------------------------------------------------------------
    def _count_error(self, error: GradeError) -> None:
        self.metrics.errors.labels(error.error).inc()
        if error.outcome in ("infrastructure_error", "gold_error"):
            self.metrics.outcomes.labels(error.outcome).inc()

    def _after_request(self) -> None:
        """Retire a worker that grew past its resident-memory ceiling (it answers this request first)."""
        if self.metrics.sample_rss() > self.settings.worker_max_rss_bytes:
            self.link.retire("rss_over_limit")
