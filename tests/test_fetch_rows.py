"""The datasets-server fetcher against a real HTTP server on 127.0.0.1 (tests/api_server.py).

The fetcher's clock and sleep are a fake that only advances when the fetcher sleeps, so waits
(Retry-After, backoff, pacing) are recorded, never slept.
"""

from __future__ import annotations

import email.utils
import io
import json
import random
import time

import pytest

from api_server import ApiServer, Fault
from harness.common.errors import FetchError, InputError
from harness.prepare.api_cache import PageCache, PageError, parse_page
from harness.prepare.fetch_rows import FetchPolicy, RowFetcher, retry_after_seconds


def make_rows(n: int, prefix: str = "q") -> list[dict]:
    return [{"db_id": f"db{i % 3}", "question": f"{prefix} {i}?", "query": f"SELECT {i}"} for i in range(n)]


class FakeTime:
    """clock() and sleep() for the fetcher: time moves only when it sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def api():
    with ApiServer({"train": make_rows(250), "validation": make_rows(30, "v")}) as server:
        yield server


def fetcher(api: ApiServer, cache_dir, fake: FakeTime, **policy) -> RowFetcher:
    settings = {"interval_s": 0.0, "timeout_s": 5.0, **policy}
    return RowFetcher(api.url, PageCache(cache_dir, "xlangai/spider", "spider"), policy=FetchPolicy(**settings),
                      clock=fake.clock, sleep=fake.sleep, rng=random.Random(7), progress=None,
                      wallclock=lambda: 0.0)


def offsets(api: ApiServer) -> list[int]:
    return [int(r["offset"]) for r in api.requests]


def test_pages_of_100_until_the_total(api, tmp_path):
    got = list(fetcher(api, tmp_path, FakeTime()).rows("train"))
    assert [r["question"] for r in got] == [r["question"] for r in make_rows(250)]
    assert offsets(api) == [0, 100, 200]
    assert {r["length"] for r in api.requests} == {"100"}
    assert set(got[0]) == {"db_id", "question", "query"}


def test_a_second_run_reads_the_cache_only(api, tmp_path):
    first = list(fetcher(api, tmp_path, FakeTime()).rows("validation"))
    again = fetcher(api, tmp_path, FakeTime())
    assert list(again.rows("validation")) == first
    assert len(api.requests) == 1
    assert (again.stats.pages_fetched, again.stats.pages_cached) == (0, 1)


def test_an_interrupted_fetch_resumes_at_the_first_missing_page(api, tmp_path):
    stream = fetcher(api, tmp_path, FakeTime(), attempts=3).rows("train")
    first_page = [next(stream) for _ in range(100)]
    api.faults = [Fault("500")] * 3  # the page at offset 100 fails all three attempts
    with pytest.raises(FetchError, match="failed 3 times; last: HTTP 500"):
        next(stream)
    api.requests.clear()
    resumed = list(fetcher(api, tmp_path, FakeTime()).rows("train"))
    assert resumed[:100] == first_page and len(resumed) == 250
    assert offsets(api) == [100, 200]


def test_429_waits_what_retry_after_asks(api, tmp_path):
    fake = FakeTime()
    api.faults = [Fault("429", retry_after="7")]
    rows = list(fetcher(api, tmp_path, fake).rows("validation"))
    assert len(rows) == 30
    assert len(fake.sleeps) == 1 and 7.0 <= fake.sleeps[0] <= 8.0  # the ask plus at most 1 s jitter


def test_429_with_an_http_date(api, tmp_path):
    fake = FakeTime()
    # Measured against the answer's own Date header (http.server sends the current time).
    api.faults = [Fault("429", retry_after=email.utils.formatdate(time.time() + 12, usegmt=True))]
    list(fetcher(api, tmp_path, fake).rows("validation"))
    assert 10.0 <= fake.sleeps[0] <= 14.0  # whole-second dates on both sides, plus <= 1 s jitter


def test_an_overlong_retry_after_is_an_error_not_a_stall(api, tmp_path):
    fake = FakeTime()
    api.faults = [Fault("429", retry_after="3600")]
    with pytest.raises(FetchError, match="asks to wait 3600 s"):
        list(fetcher(api, tmp_path, fake).rows("validation"))
    assert fake.sleeps == [] and len(api.requests) == 1


@pytest.mark.parametrize("fault", [Fault("500"), Fault("503"), Fault("429"), Fault("truncated"), Fault("html"),
                                   Fault("short"), Fault("drop"), Fault("json_list"), Fault("no_rows")],
                         ids=lambda f: f.kind)
def test_transient_faults_are_retried_with_bounded_jittered_backoff(api, tmp_path, fault):
    fake = FakeTime()
    api.faults = [fault, fault]
    got = fetcher(api, tmp_path, fake, backoff_s=1.0)
    assert len(list(got.rows("validation"))) == 30
    assert len(api.requests) == 3 and got.stats.retries == 2
    assert len(fake.sleeps) == 2
    assert 0.0 <= fake.sleeps[0] <= 1.0 and 0.0 <= fake.sleeps[1] <= 2.0  # full jitter under 1 s * 2^n


def test_backoff_ceiling_is_capped(api, tmp_path):
    fake = FakeTime()
    api.faults = [Fault("500")] * 5
    list(fetcher(api, tmp_path, fake, backoff_s=10.0, backoff_max_s=15.0).rows("validation"))
    assert len(fake.sleeps) == 5 and max(fake.sleeps) <= 15.0


@pytest.mark.parametrize("fault, message", [
    (Fault("html"), "HTML page, not JSON"),
    (Fault("truncated"), "truncated or invalid JSON"),
    (Fault("500"), "HTTP 500"),
    (Fault("no_rows"), "'rows' is missing"),
], ids=["html", "truncated", "server error", "missing rows"])
def test_persistent_faults_end_in_a_clear_error(api, tmp_path, fault, message):
    api.faults = [fault] * 4
    with pytest.raises(FetchError, match=message) as caught:
        list(fetcher(api, tmp_path, FakeTime(), attempts=4).rows("validation"))
    assert len(api.requests) == 4
    assert "offset=0" in str(caught.value) and "Check the network and --api-url" in str(caught.value)
    assert not list(tmp_path.rglob("*.json")), "a malformed page must not be cached"


def test_a_slow_answer_times_out_and_is_retried(api, tmp_path):
    api.faults = [Fault("slow", seconds=1.5)]
    got = fetcher(api, tmp_path, FakeTime(), timeout_s=0.3)
    assert len(list(got.rows("validation"))) == 30
    assert got.stats.retries == 1


def test_a_client_error_is_not_retried(api, tmp_path):
    wrong = RowFetcher(api.url, PageCache(tmp_path, "nobody/nothing", "spider"), dataset="nobody/nothing",
                       policy=FetchPolicy(interval_s=0), clock=FakeTime().clock, sleep=FakeTime().sleep)
    with pytest.raises(FetchError, match="HTTP 404.*Check --api-url"):
        list(wrong.rows("train"))
    assert len(api.requests) == 1


def test_requests_are_paced(api, tmp_path):
    fake = FakeTime()
    list(fetcher(api, tmp_path, fake, interval_s=0.5).rows("train"))
    assert fake.sleeps == [0.5, 0.5]  # three requests, none sooner than 0.5 s after the last


def test_progress_only_on_the_given_stream(api, tmp_path):
    stream = io.StringIO()
    got = fetcher(api, tmp_path, FakeTime())
    got.progress = stream
    list(got.rows("train"))
    assert "250/250 rows" in stream.getvalue() and "rows/s" in stream.getvalue()
    quiet = RowFetcher(api.url, PageCache(tmp_path / "other", "xlangai/spider", "spider"),
                       policy=FetchPolicy(interval_s=0))
    assert quiet.progress is None  # pytest's stderr is not a terminal


def test_a_truncated_cache_file_is_an_error_naming_it(api, tmp_path):
    list(fetcher(api, tmp_path, FakeTime()).rows("validation"))
    [cached] = tmp_path.rglob("rows-*.json")
    cached.write_bytes(cached.read_bytes()[:-40])
    with pytest.raises(InputError, match="cache file .*rows-0000000-100.json.*Delete this file"):
        list(fetcher(api, tmp_path, FakeTime()).rows("validation"))


def test_pages_from_two_dataset_versions_are_refused(api, tmp_path):
    list(fetcher(api, tmp_path, FakeTime()).rows("train"))
    last = sorted(tmp_path.rglob("rows-*.json"))[-1]
    page = json.loads(last.read_bytes())
    page["num_rows_total"] = 260
    page["rows"] = page["rows"] + [{"row_idx": 250 + i, "row": make_rows(1)[0], "truncated_cells": []}
                                   for i in range(10)]
    last.write_text(json.dumps(page))
    with pytest.raises(FetchError, match="num_rows_total changed from 250 to 260"):
        list(fetcher(api, tmp_path, FakeTime()).rows("train"))


@pytest.mark.parametrize("value, date, expected", [
    ("0", None, 0.0),
    ("120", None, 120.0),
    (" 5 ", None, 5.0),
    ("Thu, 01 Jan 1970 00:01:00 GMT", "Thu, 01 Jan 1970 00:00:30 GMT", 30.0),
    ("Thu, 01 Jan 1970 00:01:00 GMT", None, 60.0),
    ("Thu, 01 Jan 1970 00:00:10 GMT", "Thu, 01 Jan 1970 00:00:30 GMT", 0.0),
    ("soon", None, None),
    (None, None, None),
], ids=["zero", "seconds", "spaces", "date vs server date", "date vs our clock", "date in the past",
        "garbage", "absent"])
def test_retry_after_values(value, date, expected):
    assert retry_after_seconds(value, date, 0.0) == expected


def page_body(rows: list[dict], total: int | None = None, offset: int = 0, **entry_extra) -> bytes:
    entries = [{"row_idx": offset + i, "row": row, "truncated_cells": [], **entry_extra}
               for i, row in enumerate(rows)]
    return json.dumps({"rows": entries, "num_rows_total": len(rows) if total is None else total}).encode()


GOOD = make_rows(3)


@pytest.mark.parametrize("body, problem", [
    (page_body([{**GOOD[0], "question": ""}] + GOOD[1:]), "row 0 lacks a non-empty text field 'question'"),
    (page_body([{k: v for k, v in GOOD[1].items() if k != "db_id"}]), "row 0 lacks a non-empty text field 'db_id'"),
    (page_body(GOOD, truncated_cells=["query"]), r"row 0 has truncated cells \['query'\]"),
    (page_body(GOOD, offset=5), "row 0 has row_idx 5: pages out of order"),
    (page_body(GOOD, total=10), "3 rows where 10 were expected"),
    (page_body(GOOD, total=-1), "'num_rows_total' is -1"),
    (b'{"rows": [], "num_rows_total": "7"}', "'num_rows_total' is '7'"),
    (b"\xff\xfe", "not UTF-8"),
    (b"  ", "the answer is empty"),
    (b"<?xml version='1.0'?><Error/>", "HTML page, not JSON"),
    (b'{"rows": [', "truncated or invalid JSON"),
], ids=["empty question", "no db_id", "truncated cell", "row_idx gap", "short page", "negative total",
        "total as text", "binary", "blank", "xml error page", "cut json"])
def test_malformed_pages_name_the_problem(body, problem):
    with pytest.raises(PageError, match=f"^page X: .*{problem}"):
        parse_page(body, "page X", 0, 100)


def test_a_good_page_keeps_only_the_three_fields_in_order():
    extra = [{**r, "query_toks": ["SELECT"]} for r in GOOD]
    page = parse_page(page_body(extra), "page", 0, 100)
    assert page.rows == tuple(GOOD) and page.total == 3
