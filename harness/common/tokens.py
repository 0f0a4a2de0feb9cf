"""The grader service's shared secret: its form, where it comes from, how requests carry it, and
how logs are kept free of it. Standard library only: the service, the proxy and the host use it.

A token is 32 to 256 characters of ``[A-Za-z0-9_-]`` (``secrets.token_urlsafe(32)`` gives 43), so
it can sit in a URL path segment unencoded. A request carries it in one of two ways:

* a header, ``Authorization: Bearer TOKEN``;
* the path, ``/t/TOKEN/grade`` (what a trainer given only a URL, ``http:URL``, can send).

It comes from a file (``--token-file``) or the environment (``SPIDER_GRADER_TOKEN``), never from a
command-line argument, which any user of the machine can read in ``ps``. Every log line, metric
label and error body goes through ``redact``: the token itself and whatever follows ``/t/`` in a
path are replaced.

>>> split_path("/t/abc/grade/batch")
('abc', '/grade/batch')
>>> split_path("/grade")
(None, '/grade')
>>> redact("POST /t/s3cret-value/grade from s3cret-value", ["s3cret-value"])
'POST /t/[redacted]/grade from [redacted]'
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.common.errors import InputError

ENV = "SPIDER_GRADER_TOKEN"
PATH_PREFIX = "/t/"
MIN_CHARS, MAX_CHARS = 32, 256
_TOKEN = re.compile(rf"[A-Za-z0-9_-]{{{MIN_CHARS},{MAX_CHARS}}}")
# What follows /t/ (or /t%2F) in any text: a path token, right or wrong, is never logged.
_PATH_TOKEN = re.compile(r"(/t(?:/|%2[fF]))[^/\s?#\"'\\]+")
REDACTED = "[redacted]"
NEW_TOKEN_HINT = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
# Paths answered without the token: a load balancer's or an orchestrator's probes.
OPEN_PATHS = ("/health", "/readyz", "/livez")
REALM = 'Bearer realm="spider-grader"'


def generate() -> str:
    """A new token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def check(token: str, source: str) -> str:
    """``token`` when it has the token's form; InputError naming ``source`` and what to do.

    >>> check("x" * 40, "SPIDER_GRADER_TOKEN") == "x" * 40
    True
    """
    if not _TOKEN.fullmatch(token):
        raise InputError(f"the grader token from {source} is not {MIN_CHARS} to {MAX_CHARS} characters of "
                         f"A-Z a-z 0-9 _ - ({len(token)} characters given): make one with {NEW_TOKEN_HINT}")
    return token


def read_file(path: str | os.PathLike) -> str:
    """The token held in ``path`` (surrounding whitespace dropped); InputError when unreadable or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the grader token file {path} ({type(exc).__name__}): "
                         f"create it with {NEW_TOKEN_HINT} > {path}") from None
    return check(text.strip(), f"the file {path}")


def write_new(path: str | os.PathLike) -> str:
    """Create ``path`` (mode 0600, never overwriting) holding a new token; the token."""
    token = generate()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except OSError as exc:
        raise InputError(f"cannot create the grader token file {path} ({exc.strerror})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def from_sources(token_file: str | os.PathLike | None, environ: dict[str, str] | None = None, *,
                 create: bool = False) -> tuple[str | None, str]:
    """The token from ``token_file`` or ``$SPIDER_GRADER_TOKEN`` and where it came from.

    Both given is an error (which one wins would be a guess). Neither: ``(None, "")``. With
    ``create``, a missing ``token_file`` is created with a new token.
    """
    env = os.environ if environ is None else environ
    from_env = env.get(ENV)
    if token_file is not None and from_env:
        raise InputError(f"the grader token is given twice, by --token-file {token_file} and by ${ENV}: "
                         "unset one of them")
    if token_file is not None:
        if create and not Path(token_file).exists():
            return write_new(token_file), f"a new token written to {token_file}"
        return read_file(token_file), f"the file {token_file}"
    if from_env:
        return check(from_env.strip(), f"${ENV}"), f"${ENV}"
    return None, ""


def split_path(path: str) -> tuple[str | None, str]:
    """``(token given in the path or None, the path without it)``; ``/t/TOKEN`` alone is ``/``."""
    if not path.startswith(PATH_PREFIX):
        return None, path
    given, slash, rest = path[len(PATH_PREFIX):].partition("/")
    return given, slash + rest if slash else "/"


def bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (scheme in any case), else None.

    >>> bearer("bearer abc"), bearer("Basic abc"), bearer("")
    ('abc', None, None)
    """
    scheme, _, value = header.strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


class TokenCheck:
    """Compares a given token with the service's in constant time (digests of equal length)."""

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode()).digest()
        self.secrets = (token,)

    def matches(self, given: str | None) -> bool:
        if given is None:
            return False
        return hmac.compare_digest(hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest(), self._digest)


def redact(text: str, secrets_: Iterable[str] = ()) -> str:
    """``text`` with every secret and every path token (what follows ``/t/``) replaced."""
    for secret in secrets_:
        if secret:
            text = text.replace(secret, REDACTED)
    return _PATH_TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


UNAUTHORIZED_MESSAGE = ("this endpoint needs the token of the service: send the header Authorization: Bearer TOKEN, "
                        "or use the URL serve printed (https://HOST/t/TOKEN/grade)")


def unauthorized_body() -> dict[str, Any]:
    """The 401 answer, the same for a missing and a wrong token (and from the proxy as from the service)."""
    return {"error": "Unauthorized", "outcome": "request_error", "message": UNAUTHORIZED_MESSAGE,
            "exit_code": None, "status": 401}
