"""Pages of the datasets-server ``/rows`` API: validation, and an on-disk cache of the raw answers.

A page is checked before it is used or cached, so a malformed answer (an HTML error page, a JSON
document cut short, a row without its question) is reported with the page it came from instead
of surfacing later as a confusing key error. The cache keeps each page's body exactly as the API
sent it, one file per page, written atomically (temporary file + rename): an interrupted fetch
leaves only whole pages behind, and the next run resumes at the first page missing.

Standard library only (plus harness.prepare.bundle_data / harness.common.errors): prepare runs as a script.

>>> page = parse_page(b'{"rows": [], "num_rows_total": 0}', "example", 0, 100)
>>> (page.offset, page.total, page.rows)
(0, 0, ())
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes

# The three fields prepare reads from a row; the API's other fields (token lists) are ignored.
ROW_FIELDS = ("db_id", "question", "query")


class PageError(ValueError):
    """A page body that is not a usable /rows answer; the message says what is wrong with it."""


@dataclasses.dataclass(frozen=True)
class Page:
    """One validated page: ``rows`` are dicts holding exactly ROW_FIELDS, in the API's order."""

    offset: int
    rows: tuple[dict, ...]
    total: int


def _looks_like_html(text: str, content_type: str | None) -> bool:
    if content_type and "html" in content_type.lower():
        return True
    # JSON never starts with "<"; "<!DOCTYPE html>", "<html>" and XML error pages all do.
    return text.lstrip().startswith("<")


def _decode(body: bytes, content_type: str | None) -> dict:
    """The page's JSON object, or PageError saying what came instead."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PageError(f"the answer is not UTF-8 text ({exc})") from None
    if not text.strip():
        raise PageError("the answer is empty")
    if _looks_like_html(text, content_type):
        raise PageError("the answer is an HTML page, not JSON (a proxy or error page?): "
                        f"it starts with {text.strip()[:60]!r}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PageError(f"the answer is truncated or invalid JSON ({exc}; {len(body)} bytes)") from None
    if not isinstance(data, dict):
        raise PageError(f"the answer is JSON {type(data).__name__}, not an object with 'rows'")
    return data


def _row(entry: object, expected_idx: int) -> dict:
    """The ROW_FIELDS of one ``rows[]`` entry, checked."""
    if not isinstance(entry, dict) or not isinstance(entry.get("row"), dict):
        raise PageError(f"row {expected_idx} is not an object holding 'row'")
    if entry.get("row_idx") != expected_idx:
        raise PageError(f"row {expected_idx} has row_idx {entry.get('row_idx')!r}: pages out of order")
    truncated = set(entry.get("truncated_cells") or ()) & set(ROW_FIELDS)
    if truncated:
        # The API cuts long cells; a cut question or query would silently be a different row.
        raise PageError(f"row {expected_idx} has truncated cells {sorted(truncated)}")
    row = entry["row"]
    for field in ROW_FIELDS:
        value = row.get(field)
        if not isinstance(value, str) or not value.strip():
            raise PageError(f"row {expected_idx} lacks a non-empty text field {field!r}")
    return {field: row[field] for field in ROW_FIELDS}


def parse_page(body: bytes, where: str, offset: int, length: int,
               content_type: str | None = None) -> Page:
    """Validate a /rows answer requested at ``offset`` for ``length`` rows; PageError names ``where``.

    The page must hold every row from ``offset`` up to ``length`` rows or the end of the split,
    numbered consecutively, so that pages put end to end give the split with no gap.
    """
    try:
        data = _decode(body, content_type)
        total = data.get("num_rows_total")
        entries = data.get("rows")
        if not isinstance(total, int) or isinstance(total, bool) or total < 0:
            raise PageError(f"'num_rows_total' is {total!r}, not a row count")
        if not isinstance(entries, list):
            raise PageError("'rows' is missing or not a list")
        expected = max(0, min(length, total - offset))
        if len(entries) != expected:
            raise PageError(f"{len(entries)} rows where {expected} were expected "
                            f"(offset {offset}, length {length}, total {total})")
        rows = tuple(_row(entry, offset + i) for i, entry in enumerate(entries))
    except PageError as exc:
        raise PageError(f"{where}: {exc}") from None
    return Page(offset, rows, total)


class PageCache:
    """Raw /rows answers on disk: ``<root>/<dataset>/<config>/<split>/rows-<offset>-<length>.json``.

    The key holds everything that changes the answer except the server's address, so the same
    cache serves a mirror of the API. A file that no longer parses (truncated by a full disk or
    edited by hand) is an error naming the file, never silently refetched: the user decides.
    """

    def __init__(self, root: str | Path, dataset: str, config: str) -> None:
        self.root = Path(root)
        self.folder = self.root / dataset.replace("/", "--") / config

    def path(self, split: str, offset: int, length: int) -> Path:
        return self.folder / split / f"rows-{offset:07d}-{length}.json"

    def load(self, split: str, offset: int, length: int) -> Page | None:
        """The cached page, None when absent; InputError when the file is unreadable or malformed."""
        path = self.path(split, offset, length)
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"cache file {path} cannot be read ({exc}): fix its permissions or "
                             "delete it to fetch that page again") from None
        try:
            return parse_page(body, f"cache file {path}", offset, length)
        except PageError as exc:
            raise InputError(f"{exc}. Delete this file (or the whole cache folder {self.root}) "
                             "and run again to fetch the page anew") from None

    def store(self, split: str, offset: int, length: int, body: bytes) -> None:
        """Keep a validated answer, written atomically so a crash never leaves half a page."""
        atomic_write_bytes(self.path(split, offset, length), body)
