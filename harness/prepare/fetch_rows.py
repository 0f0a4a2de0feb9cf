"""Read Spider's rows from the datasets-server ``/rows`` API: paged, rate limited, cached, resumable.

The API serves at most 100 rows a request and limits how fast a client may ask; it does not
publish the limit. What this fetcher chooses (README, "Real use: preparing Spider"):

* at most one request every ``interval_s`` (0.5 s: two requests a second), whatever the answers;
* HTTP 429 (and 503) with ``Retry-After`` wait what the server asks, plus up to 1 s of jitter so
  parallel clients do not come back together; a wait longer than ``retry_after_max_s`` (5 min)
  is an error saying to try later, rather than a silent hour-long stall;
* 429 without Retry-After, other 5xx, network errors, timeouts and malformed 200 answers (a
  truncated body, an HTML page from a proxy) are retried with exponential backoff and full
  jitter (uniform in [0, min(60 s, 1 s * 2^retry)]), at most ``attempts`` tries per page;
* any other 4xx is not retried: the request itself is wrong (dataset, config, address).

Every validated page is cached on disk (api_cache.PageCache) before it is used, so a run
interrupted at page 40 resumes at page 40 and later runs need no network at all. Progress
(rows, total, rate) goes to a terminal only; CI logs stay quiet. The opener, clock, sleep and
random source are injectable (tests serve pages from a local HTTP server and never sleep).

Standard library only (plus harness.prepare.api_cache / bundle_data / errors): prepare runs as a script.
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.client
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol, TextIO

from harness.common.errors import FetchError, InputError
from harness.prepare.api_cache import Page, PageCache, PageError, parse_page

DEFAULT_API_URL = "https://datasets-server.huggingface.co"
DATASET = "xlangai/spider"
CONFIG = "spider"
PAGE_ROWS = 100  # the API's maximum ``length``
USER_AGENT = "spider-scoring-prepare/0.1 (+https://github.com/; python urllib)"


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the server sent: status, headers (lower-case names) and the whole body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


Opener = Callable[[str, float], Answer]


def urllib_opener(url: str, timeout: float) -> Answer:
    """GET ``url`` with urllib; HTTP errors come back as answers, network failures raise OSError."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Answer(response.status, headers, response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
        return Answer(exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, body)


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    """How politely and how persistently to ask (module docstring)."""

    timeout_s: float = 30.0
    attempts: int = 6
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0
    interval_s: float = 0.5


@dataclasses.dataclass
class FetchStats:
    """Counters for the summary: pages from the network, the cache or local files; retries; time waited."""

    pages_fetched: int = 0
    pages_cached: int = 0
    files_read: int = 0
    retries: int = 0
    waited_s: float = 0.0

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "waited_s": round(self.waited_s, 3)}


class RowSource(Protocol):
    """Anything that yields a split's rows (dicts of api_cache.ROW_FIELDS) in the API's order."""

    stats: FetchStats

    def rows(self, split: str) -> Iterator[dict]: ...


def retry_after_seconds(value: str | None, date_header: str | None, now: float) -> float | None:
    """Seconds asked by a Retry-After header (delta-seconds or HTTP-date), None when absent or unreadable.

    >>> retry_after_seconds("7", None, 0.0)
    7.0
    >>> retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", 0.0)
    30.0
    """
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
        # Measure against the server's own Date when given: our clock may be off.
        base = email.utils.parsedate_to_datetime(date_header).timestamp() if date_header else now
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - base)


class _Retry(Exception):
    """One failed attempt worth retrying: ``problem`` for the final error, ``wait`` if the server asked."""

    def __init__(self, problem: str, wait: float | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.wait = wait


class RowFetcher:
    """Pages of one dataset/config from the API, through a PageCache. See the module docstring.

    ``progress``: a stream for the progress line, or None (the default: stderr when it is a TTY).
    """

    def __init__(self, api_url: str, cache: PageCache, *, dataset: str = DATASET, config: str = CONFIG,
                 policy: FetchPolicy = FetchPolicy(), opener: Opener = urllib_opener,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, progress: TextIO | None = None,
                 wallclock: Callable[[], float] = time.time) -> None:
        self.api_url = api_url.rstrip("/")
        self.cache, self.dataset, self.config, self.policy = cache, dataset, config, policy
        self.opener, self.clock, self.sleep, self.wallclock = opener, clock, sleep, wallclock
        self.rng = rng or random.Random()
        self.progress = progress if progress is not None else (sys.stderr if sys.stderr.isatty() else None)
        self.stats = FetchStats()
        self._last_request: float | None = None

    def url(self, split: str, offset: int, length: int = PAGE_ROWS) -> str:
        query = urllib.parse.urlencode({"dataset": self.dataset, "config": self.config, "split": split,
                                        "offset": offset, "length": length})
        return f"{self.api_url}/rows?{query}"

    def rows(self, split: str) -> Iterator[dict]:
        """Every row of ``split``, page after page, until the split's ``num_rows_total``."""
        offset, total, fetched, started = 0, None, 0, self.clock()
        try:
            while total is None or offset < total:
                before = self.stats.pages_fetched
                page = self.page(split, offset)
                if total is not None and page.total != total:
                    raise FetchError(
                        f"{self.dataset} {split}: num_rows_total changed from {total} to {page.total} at "
                        f"offset {offset}: the dataset changed since part of it was cached. Delete "
                        f"{self.cache.folder / split} and run again")
                total = page.total
                if self.stats.pages_fetched > before:
                    fetched += len(page.rows)
                    self._show(split, offset + len(page.rows), total, fetched, started)
                if not page.rows:
                    break
                yield from page.rows
                offset += len(page.rows)
        finally:  # also when the caller stops early: end the progress line
            if fetched and self.progress is not None:
                self.progress.write("\n")

    def _show(self, split: str, done: int, total: int, fetched: int, started: float) -> None:
        if self.progress is None:
            return
        elapsed = max(self.clock() - started, 1e-9)
        self.progress.write(f"\rfetching {self.dataset} {split}: {done}/{total} rows, "
                            f"{fetched / elapsed:.0f} rows/s ")
        self.progress.flush()

    def page(self, split: str, offset: int) -> Page:
        """The page at ``offset``: from the cache, else from the API (then cached)."""
        cached = self.cache.load(split, offset, PAGE_ROWS)
        if cached is not None:
            self.stats.pages_cached += 1
            return cached
        url = self.url(split, offset)
        problems: list[str] = []
        for attempt in range(self.policy.attempts):
            if attempt:
                self.stats.retries += 1
            try:
                page, body = self._attempt(url, split, offset)
            except _Retry as retry:
                problems.append(retry.problem)
                if attempt + 1 < self.policy.attempts:
                    self._wait(self._delay(attempt, retry.wait))
                continue
            self.cache.store(split, offset, PAGE_ROWS, body)
            self.stats.pages_fetched += 1
            return page
        raise FetchError(f"{url} failed {self.policy.attempts} times; last: {problems[-1]}. "
                         "Check the network and --api-url, then run again: pages already fetched "
                         f"are kept in {self.cache.root}")

    def _attempt(self, url: str, split: str, offset: int) -> tuple[Page, bytes]:
        """One request; the validated page and its body, or _Retry."""
        self._pace()
        try:
            answer = self.opener(url, self.policy.timeout_s)
        except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError, timeouts, resets,
            # a body cut short (IncompleteRead), a garbled status line
            raise _Retry(f"network error: {type(exc).__name__}: {exc}") from None
        if answer.status == 200:
            try:
                page = parse_page(answer.body, url, offset, PAGE_ROWS, answer.headers.get("content-type"))
            except PageError as exc:
                raise _Retry(str(exc)) from None
            return page, answer.body
        excerpt = answer.body[:200].decode("utf-8", "replace").strip()
        if answer.status in (429, 503):
            wait = retry_after_seconds(answer.headers.get("retry-after"), answer.headers.get("date"),
                                       self.wallclock())
            if wait is not None and wait > self.policy.retry_after_max_s:
                raise FetchError(f"{url}: the API asks to wait {wait:.0f} s (HTTP {answer.status}, "
                                 "Retry-After): it is rate limiting this address; try again later. "
                                 f"Pages already fetched are kept in {self.cache.root}")
            raise _Retry(f"HTTP {answer.status} (rate limited or busy): {excerpt}", wait)
        if answer.status >= 500:
            raise _Retry(f"HTTP {answer.status}: {excerpt}")
        raise FetchError(f"{url} answered HTTP {answer.status}: {excerpt}. Check --api-url and that "
                         f"{self.dataset} (config {self.config}, split {split}) exists")

    def _delay(self, attempt: int, asked: float | None) -> float:
        """Full-jitter exponential backoff, or what the server asked plus a little jitter."""
        if asked is not None:
            return asked + self.rng.uniform(0.0, 1.0)
        ceiling = min(self.policy.backoff_max_s, self.policy.backoff_s * (2 ** attempt))
        return self.rng.uniform(0.0, ceiling)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stats.waited_s += seconds
            self.sleep(seconds)

    def _pace(self) -> None:
        """Keep at least ``interval_s`` between the starts of two requests."""
        now = self.clock()
        if self._last_request is not None:
            self._wait(self._last_request + self.policy.interval_s - now)
            now = self.clock()
        self._last_request = now


class FilePages:
    """Whole splits from files in the /rows answer shape (the embedded sample): no network.

    >>> FilePages({}).stats.pages_fetched
    0
    """

    def __init__(self, files: Mapping[str, str | Path]) -> None:
        self.files = {split: Path(path) for split, path in files.items()}
        self.stats = FetchStats()

    def rows(self, split: str) -> Iterator[dict]:
        path = self.files.get(split)
        if path is None:
            raise InputError(f"no rows file for split {split!r}: give one of {sorted(self.files)}")
        try:
            body = path.read_bytes()
        except OSError as exc:
            raise InputError(f"rows file {path} cannot be read ({exc})") from None
        try:
            page = parse_page(body, f"rows file {path}", 0, sys.maxsize)
        except PageError as exc:
            raise InputError(f"{exc}: regenerate it (fixtures/sample/questions.py)") from None
        self.stats.files_read += 1
        yield from page.rows
